"""Stage 1 of :mod:`skalign.plan`: the inputs checked, subsampled and normalised, before any fit.

:func:`check_inputs` fails on every wrong input with a one-line ``ValueError`` and returns
:class:`Inputs`, what every later stage reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._candidates import DEFAULT_METHODS, make_candidate, unit

__all__ = ["Inputs", "check_inputs"]


@dataclass(frozen=True)
class Inputs:
    """The plan's inputs as the stages use them (rows unit-normalised with ``normalize``).

    ``unpaired`` is an :class:`~skalign.UnpairedPool` subsampled to ``max_unpaired`` rows a
    side (or ``None``), ``has_pools`` whether it holds both sides; ``methods`` the candidates
    asked for (``defaults``: none were named); ``queries`` the judged queries ``(QA, QB)``
    checked against the pairs, with their ``qrels``; ``rng`` the generator of the estimates'
    resamples, drawn from after the subsampling; ``notes`` what was ignored; ``fit_sides`` the
    sides fitted (the document side always: the query side is scaled from it);
    ``n_unpaired_source`` and ``n_unpaired_target`` the rows of the samples used.
    """

    X: np.ndarray
    Y: np.ndarray
    unpaired: object
    has_pools: bool
    methods: tuple
    defaults: bool
    sides: tuple
    k: int
    n_splits: int
    store_size: int
    normalize: bool
    row_norms: dict
    confidence: float
    min_recall: float
    n_resamples: int
    n_repeats: int
    curve: bool
    budget: object
    queries: object
    qrels: object
    random_state: object
    rng: object
    notes: tuple
    n_pairs: int
    fit_sides: tuple
    n_unpaired_source: int
    n_unpaired_target: int


def _pool(unpaired, X, Y, max_unpaired, rng):
    """The unpaired samples checked against the pairs' widths and subsampled."""
    from sklearn.utils import check_array

    from ..base import UnpairedPool

    P = None if unpaired.X is None else check_array(unpaired.X, dtype=np.float32,
                                                    input_name="unpaired source")
    Q = None if unpaired.y is None else check_array(unpaired.y, dtype=np.float32,
                                                    input_name="unpaired target")
    if P is not None and P.shape[1] != X.shape[1]:
        raise ValueError(f"the unpaired source sample has {P.shape[1]}-d rows but the "
                         f"pairs' source side is {X.shape[1]}-d.")
    if Q is not None and Q.shape[1] != Y.shape[1]:
        raise ValueError(f"the unpaired target sample has {Q.shape[1]}-d rows but the "
                         f"pairs' target side is {Y.shape[1]}-d.")
    if P is not None and len(P) > max_unpaired:
        P = P[np.sort(rng.choice(len(P), max_unpaired, replace=False))]
    if Q is not None and len(Q) > max_unpaired:
        Q = Q[np.sort(rng.choice(len(Q), max_unpaired, replace=False))]
    return UnpairedPool(X=P, y=Q)


def check_inputs(X, Y, *, unpaired, methods, sides, k, n_splits, store_size, curve, n_repeats,
                 n_resamples, confidence, min_recall, normalize, max_unpaired, queries, qrels,
                 budget, random_state):
    """The arguments of :func:`skalign.plan.plan_migration` checked, as :class:`Inputs`."""
    from sklearn.utils import check_array, check_consistent_length

    from ..base import UnpairedPool
    from ._judged import check_judged

    if (qrels is None) != (queries is None):
        raise ValueError("judged queries need both the queries (embedded by each model) and "
                         "their qrels.")
    X = check_array(X, dtype=np.float32, input_name="X")
    Y = check_array(Y, dtype=np.float32, input_name="Y")
    check_consistent_length(X, Y)
    if qrels is not None:  # before any fit
        queries = check_judged(queries, qrels, X, Y)
    n = len(X)
    if n_splits is None:
        n_splits = int(np.clip(n // (4 * k), 2, 5))
    if n // n_splits < k + 2:
        raise ValueError(f"plan needs at least {n_splits * (k + 2)} pairs for {n_splits}-fold "
                         f"estimates of recall@{k} (each held-out fold a store of more than "
                         f"{k + 1} items), got {n}.")
    sides = tuple(sides)
    if not sides or set(sides) - {"document", "query"}:
        raise ValueError(f"sides must be 'document' and/or 'query', got {sides!r}.")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    rng = np.random.default_rng(random_state)
    norms = {"source": float(np.linalg.norm(X, axis=1).mean()),
             "target": float(np.linalg.norm(Y, axis=1).mean())}
    if unpaired is not None:
        unpaired = _pool(unpaired, X, Y, max_unpaired, rng)
    has_pools = unpaired is not None and unpaired.X is not None and unpaired.y is not None
    notes = []
    if unpaired is not None and not has_pools and (unpaired.X is not None or
                                                   unpaired.y is not None):
        given, missing = (("source", "target") if unpaired.X is not None else
                          ("target", "source"))
        notes.append(f"an unpaired {given} sample without an unpaired {missing} sample is "
                     f"ignored: the bootstrap and the store discovered in the samples need both")
    if normalize:
        X, Y = unit(X), unit(Y)
        if unpaired is not None:
            unpaired = UnpairedPool(X=None if unpaired.X is None else unit(unpaired.X),
                                    y=None if unpaired.y is None else unit(unpaired.y))
    defaults = methods is None
    if defaults:
        methods = [m for m in DEFAULT_METHODS if m != "bootstrap" or has_pools]
    methods = tuple(dict.fromkeys(methods))
    for name in methods:
        make_candidate(name, n, random_state)  # unknown names fail before any work
        if name == "bootstrap" and not has_pools:
            raise ValueError("the bootstrap candidate needs unpaired samples of both stores "
                             "(--unpaired-source and --unpaired-target).")
    store_size = n if store_size is None else int(store_size)
    if store_size < k + 2:
        raise ValueError(f"store_size must exceed k + 1 = {k + 1}, got {store_size}.")
    return Inputs(X=X, Y=Y, unpaired=unpaired, has_pools=has_pools, methods=methods,
                  defaults=defaults, sides=sides, k=k, n_splits=n_splits, store_size=store_size,
                  normalize=bool(normalize), row_norms=norms, confidence=confidence,
                  min_recall=min_recall, n_resamples=n_resamples, n_repeats=n_repeats,
                  curve=curve, budget=budget, queries=queries, qrels=qrels,
                  random_state=random_state, rng=rng, notes=tuple(notes), n_pairs=n,
                  fit_sides=tuple(dict.fromkeys(("document",) + sides)),
                  n_unpaired_source=0 if unpaired is None or unpaired.X is None
                  else len(unpaired.X),
                  n_unpaired_target=0 if unpaired is None or unpaired.y is None
                  else len(unpaired.y))
