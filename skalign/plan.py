"""Plan a vector-store migration: what each method keeps of re-embedding, before running it.

:func:`plan_migration` takes a sample of paired items (old-encoder and new-encoder embeddings of
the same texts, row for row) and, optionally, unpaired samples of both stores, and estimates for
each candidate method and each side of the migration

* **document side**: the stored documents are translated into the new space and searched with
  the new encoder's queries;
* **query side** (bridging): the new encoder's queries are mapped into the old space and
  searched in the untouched old index;

the *retention* against re-embedding: recall@k and nDCG@k of the migrated setup's top-k against
the top-k of the index the new encoder would build (:func:`skalign.metrics.retrieval_retention`).

How the numbers are made
------------------------
**Evaluation store.** Retention in a store of ``M`` items can only be measured on ``M`` items
whose old and new vectors are both known, and none of which a map was fitted on. Two sources:

* *Pairs discovered in the unpaired samples* (used whenever samples of both stores are given,
  the bootstrap's certificate is at least ``MIN_CERTIFICATE`` and the store is larger than a
  held-out fold would be). The bootstrap candidate is fitted on all known pairs plus the
  samples; a source row ``p`` and a target row ``q`` of the samples form a pair when each is the
  other's nearest neighbour under that map, ``argmax_j cos(f(p), q_j) = q`` and
  ``argmax_i cos(f(p_i), q) = p``; rows that repeat a known pair are left out. Every candidate
  is then fitted on **all** known pairs, exactly as it would be for the migration, and scored on
  this store. A candidate that learns from the samples itself (the bootstrap) is cross-fitted
  over ``STORE_PARTS`` parts of the store, each fit without that part's rows in its samples.
  On the development data (MiniLM, MPNet, multilingual-e5, every ordered pair; 25-500 known
  pairs, samples of 2,000 texts) 96.9-99.9 % of the 1,403-1,952 pairs discovered were right
  (``benchmarks/plan_pseudo_pairs.py``), and every estimate was within 0.05 of the retention
  measured on a separate store of 2,000 other texts (90 of 90, largest error 0.014;
  ``benchmarks/bench_migrate_peers.py``). The store holds the items the pairing found, mutual
  nearest neighbours: if the samples share only part of their items, it is biased towards the
  items that are easiest to match.
* *Cross-validation over the pairs* otherwise. The pairs are split into ``n_splits`` folds; each
  method is fitted on all folds but one, and the held-out fold is the evaluation store: its old
  vectors are translated (document side) or its new vectors mapped back (query side), and each
  of its items is a query against the others (leave-one-out). A candidate that learns from the
  unpaired samples gets them without the held-out pairs' rows. Nothing a map was fitted on is in
  its evaluation store: evaluating on an index made of training pairs inflates bridging by up
  to 0.2 on the development data, because an orthogonal map fitted on those pairs reproduces
  their inner products. The folds' fits see ``(n_splits - 1) / n_splits`` of the pairs, and
  from a few dozen pairs the folds are barely larger than ``k``: such estimates are rough.

**Store size.** Retrieval gets harder as a store grows. The retention is chance-corrected,
``rho = (r - c) / (1 - c)`` with ``c = k / (m - 1)`` what a random map keeps in a store of
``m`` items; ``rho`` is measured on random sub-stores of 1/4, 1/2 and all of the evaluation
store (those above ``2k + 1`` items), fitted by a line in ``log m`` (slope clipped at 0 from
above) and carried to ``store_size``; the result is reported as ``extrapolated``.

**Confidence interval.** A percentile bootstrap over queries: ``n_resamples`` resamples of the
per-query values, the interval holding ``confidence`` of their means. It covers the query
sampling, not the variation between refits (the learning curve shows that).

**Learning curve.** A fixed random fifth of the pairs (at least 50) is held out as evaluation
store; each method is fitted on random subsets of 25, 50, 100, 200, 500, 1,000, 2,000, ... of
the remaining pairs (``n_repeats`` subsets up to 200 pairs, one above; the bootstrap, the
slowest, once at 25, 500 and all), and scored on the held-out store. Whether labelling more
pairs pays is read off the last step.

**Ceiling.** What a map from the old space can carry is estimated by an *oracle* fit: the best
of a ridge map (alpha by leave-one-out CV) and centred Procrustes fitted on **all** pairs and
scored on those same pairs, in sample. It is an optimistic bound for affine maps (no affine map
fitted on other pairs does better on these items) and a rough one for any map: a non-linear map
can in principle exceed it, and none tried on the development data did by more than 0.03.

**Bootstrap left out.** With the default candidates, the bootstrap is not estimated when the
unpaired samples hold fewer rows that are not known pairs than a held-out fold (for example,
samples drawn from the same items as the pairs): it could only find the known pairs again, and
refitting on those duplicates is the ``linear`` candidate with some pairs counted twice. On the
development data, with samples of the same 2,000 texts as 2,000 known pairs, it kept 0.002 to
0.024 less recall@10 than ``linear`` on a separate store on five of the six encoder pairs (as
much on the sixth), while its cross-validated estimate put it ahead on four, and ``plan``
recommended it on three (``benchmarks/results/migrate_peers_bootstrap_at_2000.csv``).

**Recommendation.** The candidate with the highest estimated recall@k is chosen, with two
preferences where the estimates cannot tell candidates apart: documents over queries unless
bridging is ahead by more than half its confidence interval (a translated store costs nothing per
query), and a map fitted on the pairs alone over one that also needs the unpaired samples (the
bootstrap) unless the latter is ahead by more than half its interval. If even the chosen
estimate is below ``min_recall`` the plan says *re-embed*, with the ceiling telling whether more
pairs could change that.
"""

from __future__ import annotations

import time

import numpy as np

# MAP_ROUNDS ... STORE_PARTS, the constants the docstring names, and Estimate, the type of
# MigrationPlan.estimates, are defined with the code that uses them and exported from here
from ._plan_candidates import DEFAULT_METHODS, candidate_methods, make_candidate
from ._plan_candidates import MAP_ROUNDS as MAP_ROUNDS
from ._plan_candidates import RIDGE_ALPHAS as RIDGE_ALPHAS
from ._plan_curve import CURVE_COUNTS as CURVE_COUNTS
from ._plan_curve import _ceiling, _learning_curve
from ._plan_estimate import _estimate
from ._plan_fits import STORE_PARTS as STORE_PARTS
from ._plan_fits import _cross_fit, _store_fit
from ._plan_recommend import _recommend
from ._plan_report import write_report
from ._plan_result import Estimate as Estimate
from ._plan_result import MigrationPlan
from ._plan_store import MIN_CERTIFICATE, _duplicates, _pseudo_store, _unit

__all__ = ["MigrationPlan", "candidate_methods", "make_candidate", "plan_migration",
           "write_report"]


def plan_migration(X, Y, *, unpaired=None, methods=None, sides=("document", "query"), k=10,
                   n_splits=None, store_size=None, curve=True, n_repeats=3, n_resamples=1000,
                   confidence=0.95, min_recall=0.6, normalize=True, max_unpaired=2000,
                   random_state=0):
    """Estimate what each migration method keeps of re-embedding, and recommend one.

    See the module docstring for how every number is made.

    Parameters
    ----------
    X : array-like of shape (n_pairs, n_features_old)
        Old-encoder embeddings of the paired items.
    Y : array-like of shape (n_pairs, n_features_new)
        New-encoder embeddings of the same items, row for row.
    unpaired : UnpairedPool, default=None
        Unpaired samples of the old (``X``) and new (``y``) stores; they enable the
        ``"bootstrap"`` candidate. Each side is subsampled to ``max_unpaired`` rows.
    methods : list of str, default=None
        Candidates from :func:`candidate_methods`; ``None`` means procrustes, linear and, with
        both unpaired samples holding enough rows that are not known pairs (more than a
        held-out fold), bootstrap.
    sides : tuple of {"document", "query"}, default=("document", "query")
        Which sides of the migration to estimate.
    k : int, default=10
        Neighbourhood size of the retention metrics.
    n_splits : int, default=None
        Folds of the cross-validated estimate; ``None``: ``n_pairs // (4 k)`` clipped to
        [2, 5], so that every held-out fold is a store of at least ``4 k`` items where possible.
    store_size : int, default=None
        Store size the estimates are for; any other size than a held-out fold's is
        extrapolated (see above). ``None``: ``n_pairs``.
    curve : bool, default=True
        Compute the learning curve.
    n_repeats : int, default=3
        Random subsets per learning-curve point.
    n_resamples : int, default=1000
        Bootstrap resamples of the queries for the confidence intervals.
    confidence : float, default=0.95
        Coverage of the intervals.
    min_recall : float, default=0.6
        Below this estimated recall@k the recommendation is to re-embed.
    normalize : bool, default=True
        L2-normalise every row before fitting. Search is by cosine, so this changes no
        neighbourhood of the inputs, but it removes scale differences the maps would otherwise
        have to absorb: on the development data it raised MiniLM → multilingual-e5 retention of
        Procrustes from 0.22 to 0.41. The recommended model then expects normalised rows.
    max_unpaired : int, default=2000
        Rows drawn at random from each unpaired sample.
    random_state : int, default=0
        Seeds the folds, subsets, resamples and the randomised methods.

    Returns
    -------
    plan : MigrationPlan
        The estimates, learning curve, ceiling and recommendation.

    Examples
    --------
    >>> from skalign.datasets import load_docstring_embeddings
    >>> from skalign.plan import plan_migration
    >>> E = load_docstring_embeddings().embeddings
    >>> plan = plan_migration(E["minilm_l6"][:300], E["mpnet_base"][:300],
    ...                       methods=["procrustes"], curve=False, n_resamples=100)
    >>> plan.recommendation["action"] in ("translate", "bridge queries", "re-embed")
    True
    """
    from sklearn.utils import check_array, check_consistent_length

    from .base import UnpairedPool

    t0 = time.perf_counter()
    X = check_array(X, dtype=np.float32, input_name="X")
    Y = check_array(Y, dtype=np.float32, input_name="Y")
    check_consistent_length(X, Y)
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
        unpaired = UnpairedPool(X=P, y=Q)
    has_pools = unpaired is not None and unpaired.X is not None and unpaired.y is not None
    if normalize:
        X, Y = _unit(X), _unit(Y)
        if unpaired is not None:
            unpaired = UnpairedPool(X=None if unpaired.X is None else _unit(unpaired.X),
                                    y=None if unpaired.y is None else _unit(unpaired.y))
    defaults = methods is None
    if defaults:
        methods = [m for m in DEFAULT_METHODS if m != "bootstrap" or has_pools]
    methods = list(dict.fromkeys(methods))
    for name in methods:
        make_candidate(name, n, random_state)  # unknown names fail before any work
        if name == "bootstrap" and not has_pools:
            raise ValueError("the bootstrap candidate needs unpaired samples of both stores "
                             "(--unpaired-source and --unpaired-target).")
    store_size = n if store_size is None else int(store_size)
    if store_size < k + 2:
        raise ValueError(f"store_size must exceed k + 1 = {k + 1}, got {store_size}.")

    plan = MigrationPlan(n_pairs=n, n_unpaired_source=0 if unpaired is None or unpaired.X is
                         None else len(unpaired.X), n_unpaired_target=0 if unpaired is None or
                         unpaired.y is None else len(unpaired.y), k=k, normalized=bool(normalize),
                         row_norms=norms, store_size=store_size, confidence=confidence,
                         min_recall=min_recall)
    store = None
    plan.evaluation = {"store": "cross-validation", "size": int(n // n_splits),
                       "n_splits": int(n_splits)}
    if has_pools:
        # worth it only when larger than a held-out fold (and each half above 2 (k + 1) items)
        min_size = max(n // n_splits + 1, 4 * (k + 1))
        free_p, free_q = ~_duplicates(unpaired.X, X), ~_duplicates(unpaired.y, Y)
        n_new = int(min(free_p.sum(), free_q.sum()))
        plan.evaluation["unpaired_new_rows"] = n_new
        if n_new < min_size and defaults and "bootstrap" in methods:
            # the bootstrap could only find the known pairs again: a map on the pairs alone
            # is the same fit without the duplicates
            methods.remove("bootstrap")
            plan.evaluation["bootstrap_left_out"] = (
                f"the unpaired samples hold only {n_new} rows that are not known pairs (fewer "
                f"than {min_size}); the bootstrap would find little beyond the known pairs")
        if n_new >= min_size:
            store = _pseudo_store(X, Y, unpaired, free_p, free_q, random_state)
            size = len(store["source"])
            cert = store["certificate"]
            plan.evaluation.update(pseudo_pairs=int(size),
                                   certificate=None if np.isnan(cert) else cert)
            if cert >= MIN_CERTIFICATE and size >= min_size:  # NaN: no certificate, no store
                plan.evaluation.update(store="pseudo-pairs", size=int(size))
            else:
                store = None
    for name in methods:
        if store is None:
            out, fit_s, how = _cross_fit(name, X, Y, unpaired, sides, n_splits, random_state)
            Y_eval = Y
        else:
            out, fit_s, how = _store_fit(name, X, Y, unpaired, store, sides, random_state)
            Y_eval = unpaired.y[store["target"]]
        for side in out:
            plan.estimates.append(_estimate(name, side, Y_eval, out[side], k, store_size,
                                            n_resamples, confidence, rng, fit_s, how[side]))
    if curve:
        plan.learning_curve, plan.curve_store_size = _learning_curve(
            methods, X, Y, unpaired, k, n_repeats, random_state, rng)
    plan.ceiling = _ceiling(X, Y, k, store_size, n_resamples, confidence, rng)
    plan.recommendation = _recommend(plan, plan.learning_curve)
    plan.seconds = time.perf_counter() - t0
    return plan
