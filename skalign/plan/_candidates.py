"""What the stages of :mod:`skalign.plan` share: the candidate methods, how each is fitted and
applied, and unit rows.

:func:`candidate_methods` and :func:`make_candidate` (public through :mod:`skalign.plan`); the
helpers that fit a candidate (with the unpaired samples when it learns from them, new -> old
too when queries are bridged and it has no exact inverse) and translate held-out items on the
document or the query side; :func:`unit` and :func:`duplicates`, the row arithmetic of the
evaluation store, the options and the judged queries. Nothing here calls a stage.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["candidate_methods", "make_candidate"]

#: penalties of the ridge candidate: on unit rows, from next to no shrinkage to strong
#: shrinkage, where neighbourhood retention changes (the choice is by retention, not by MSE)
RIDGE_ALPHAS = tuple(float(a) for a in np.logspace(-3, 1, 9))
#: rounds of pairing the unpaired samples again under the bootstrap's fitted map
#: (:doc:`/developers/studies`, ``bootstrap_map_rounds.py``)
MAP_ROUNDS = 2
#: the plan's default candidates (``"bootstrap"`` only with unpaired samples)
DEFAULT_METHODS = ("procrustes", "linear", "bootstrap")


def candidate_methods():
    """Short names ``plan_migration`` accepts, each with what it builds.

    Returns
    -------
    methods : dict of str to str
        Name → description.
    """
    return {
        "procrustes": "ProcrustesAligner() - centred orthogonal map",
        "linear": "LinearAligner(alphas=10^-3..10^1, two per decade, scoring="
                  "'recall_retention') - ridge map, alpha by 5-fold recall@10 retention",
        "bootstrap": "AnchorBootstrapper(LinearAligner(...as 'linear'), map_rounds=2) - pairs "
                     "discovered in the unpaired samples (all mutual pairs, paired again under "
                     "the fitted map twice), then the 'linear' ridge on them (needs unpaired "
                     "samples of both stores)",
        "irp": "InverseRelativeProjector() - relative representations inverted (slow)",
        "gera": "GeRAAligner() - generalised relative alignment (slow)",
    }


def make_candidate(name, n_pairs=0, random_state=None):
    """A fresh estimator for one of :func:`candidate_methods`, as the plan fits it.

    Parameters
    ----------
    name : str
        A key of :func:`candidate_methods`.
    n_pairs : int, default=0
        Known pairs it will be fitted on (the bootstrap keeps them all among its anchors).
    random_state : int, default=None
        Seed of the randomised methods.

    Returns
    -------
    estimator : skalign estimator
        Unfitted.
    """
    from .._affine.linear import LinearAligner
    from .._affine.procrustes import ProcrustesAligner
    from .._bootstrap.bootstrapper import AnchorBootstrapper
    from .._gera.gera import GeRAAligner
    from .._relative.irp import InverseRelativeProjector

    if name == "procrustes":
        return ProcrustesAligner()
    if name == "linear":
        return LinearAligner(alphas=RIDGE_ALPHAS, scoring="recall_retention")
    if name == "bootstrap":
        # the plan cross-fits every candidate already: the start guard's own split is not needed
        return AnchorBootstrapper(make_candidate("linear"), map_rounds=MAP_ROUNDS,
                                  validation_fraction=None, random_state=random_state)
    if name == "irp":
        return InverseRelativeProjector(random_state=random_state)
    if name == "gera":
        return GeRAAligner(random_state=random_state)
    raise ValueError(f"unknown plan method {name!r}; choose from "
                     f"{', '.join(candidate_methods())}.")


def learns_from_samples(est):
    """Whether ``est`` also learns from the unpaired samples (its ``fit`` takes ``unpaired``)."""
    import inspect

    return "unpaired" in inspect.signature(est.fit).parameters


def has_inverse(est):
    """Whether ``est`` maps new -> old exactly (``inverse_transform``, no query map)."""
    try:
        return hasattr(est, "inverse_transform") and not hasattr(est, "transform_target")
    except Exception:  # available_if may raise while probing an unfitted meta-estimator
        return False


def candidate_sides(proto, sides):
    """The sides estimated for a candidate: a candidate that learns from the unpaired samples
    and has no exact inverse (the bootstrap around a ridge map) is not estimated on the query
    side, where it would need a second discovery fitted the other way for a side that keeps
    less (a ridge map fitted new -> old keeps less on the query side than the one fitted
    old -> new on the document side: :doc:`/developers/studies`)."""
    if "query" in sides and learns_from_samples(proto) and not has_inverse(proto):
        return tuple(s for s in sides if s != "query")
    return tuple(sides)


def fit(est, X, Y, unpaired):
    """``est`` fitted on the pairs (and ``unpaired`` when it learns from them), its warnings
    silenced; returns ``(est, seconds)``."""
    import inspect
    import warnings

    kwargs = {"unpaired": unpaired} if unpaired is not None and "unpaired" in \
        inspect.signature(est.fit).parameters else {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, Y, **kwargs)
    return est, time.perf_counter() - t0


def reverse_pool(unpaired):
    """The unpaired samples with their sides swapped (for a fit new -> old)."""
    from ..base import UnpairedPool

    return None if unpaired is None else UnpairedPool(X=unpaired.y, y=unpaired.X)


def fit_both_ways(proto, X, Y, pool, sides, reverse_proto=None):
    """Fit ``proto`` old -> new, and ``reverse_proto`` (default: ``proto``) new -> old too when
    queries are to be bridged and the fit has no exact inverse. Returns ``(est, reverse or None,
    seconds, how queries are mapped)``."""
    from sklearn.base import clone

    est, secs = fit(clone(proto), X, Y, pool)
    reverse = None
    if "query" in sides and not has_inverse(est):
        reverse, s = fit(clone(proto if reverse_proto is None else reverse_proto), Y, X,
                         reverse_pool(pool))
        secs += s
    how = ("queries mapped back by inverse_transform (translate --direction inverse)"
           if reverse is None else
           "queries mapped by a map fitted new -> old (fit with --source/--target swapped)")
    return est, reverse, secs, how


def fixed_penalty(proto, X, Y, unpaired):
    """``proto`` with the ridge penalty it chooses on all pairs fixed, for the folds' refits.

    The penalty search (5-fold recall@10 retention over nine penalties) is the slow part of a
    ridge fit; each fold refitting it would repeat that choice on 4/5 of the same pairs. The
    model the plan recommends chooses it the same way on all pairs.
    """
    from sklearn.base import clone

    if getattr(proto, "alpha", None) != "auto" or learns_from_samples(proto):
        return proto
    est, _ = fit(clone(proto), X, Y, unpaired)
    return clone(proto).set_params(alpha=float(est.alpha_))


def translate(est, Xte, Yte, side, reverse):
    """(translated_index, translated_queries) rows for the held-out items of one fold."""
    if side == "document":
        index = est.transform(Xte)
        queries = est.transform_target(Yte) if hasattr(est, "transform_target") else Yte
        return index, queries
    if reverse is not None:
        return Xte, reverse.transform(Yte)
    return Xte, est.inverse_transform(Yte)


def unit(A):
    """Rows of ``A`` (as float32) scaled to unit length; zero rows left as they are."""
    A = np.asarray(A, dtype=np.float32)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


def duplicates(A, B, block=1024):
    """Rows of ``A`` that repeat a row of ``B`` (cosine above 0.9999)."""
    Bn = unit(B)
    return np.concatenate([(unit(A[i:i + block]) @ Bn.T).max(axis=1) > 0.9999
                           for i in range(0, len(A), block)]) if len(B) else \
        np.zeros(len(A), bool)
