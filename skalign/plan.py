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
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["MigrationPlan", "candidate_methods", "make_candidate", "plan_migration",
           "write_report"]

#: pair counts of the learning curve (those below the training part's size are used)
CURVE_COUNTS = (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
#: bootstrap certificate above which the pairs it discovers serve as evaluation store (the
#: user guide's range for right discoveries is 0.9-1.0; failed ones score 0.0-0.44)
MIN_CERTIFICATE = 0.9
#: parts of the pseudo-paired store a candidate that learns from the unpaired samples is
#: cross-fitted over (each fit keeps 3/4 of the store rows in its samples)
STORE_PARTS = 4
#: penalties of the ridge candidate: on unit rows, from next to no shrinkage to strong
#: shrinkage, where neighbourhood retention changes (the choice is by retention, not by MSE)
RIDGE_ALPHAS = tuple(float(a) for a in np.logspace(-3, 1, 9))
#: rounds of pairing the unpaired samples again under the bootstrap's fitted map (with 25 known
#: pairs: recall@10 retention +0.01 to +0.03 on the development pairs involving e5)
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
    from ._bootstrap import AnchorBootstrapper
    from ._gera import GeRAAligner
    from ._irp import InverseRelativeProjector
    from ._linear import LinearAligner
    from ._procrustes import ProcrustesAligner

    if name == "procrustes":
        return ProcrustesAligner()
    if name == "linear":
        return LinearAligner(alphas=RIDGE_ALPHAS, scoring="recall_retention")
    if name == "bootstrap":
        return AnchorBootstrapper(make_candidate("linear"), map_rounds=MAP_ROUNDS,
                                  random_state=random_state)
    if name == "irp":
        return InverseRelativeProjector(random_state=random_state)
    if name == "gera":
        return GeRAAligner(random_state=random_state)
    raise ValueError(f"unknown plan method {name!r}; choose from "
                     f"{', '.join(candidate_methods())}.")


@dataclass
class Estimate:
    """Retention of one method on one side (see :class:`MigrationPlan`)."""

    method: str
    side: str
    how: str
    recall: float
    recall_ci: tuple
    ndcg: float
    ndcg_ci: tuple
    store_size: int
    extrapolated: bool
    fit_seconds: float


@dataclass
class MigrationPlan:
    """What :func:`plan_migration` found; ``to_dict()`` is the ``--json`` output.

    Parameters
    ----------
    n_pairs : int
        Paired items used.
    n_unpaired_source, n_unpaired_target : int
        Rows of the unpaired samples used (after subsampling to ``max_unpaired``).
    k : int
        Neighbourhood size of the retention metrics.
    normalized : bool
        Whether the rows were L2-normalised before fitting.
    row_norms : dict
        Mean row norm of the source and target pairs as given.
    store_size : int
        Store size the estimates are for.
    confidence : float
        Coverage of the intervals.
    min_recall : float
        Threshold below which the plan recommends re-embedding.
    estimates : list of Estimate
        One per method and side, cross-fitted (see the module docstring).
    learning_curve : dict
        ``method → {"n_pairs": [...], "recall": [...], "recall_std": [...], "ndcg": [...]}``
        (document side), on a held-out fifth of the pairs.
    curve_store_size : int
        Size of that held-out store.
    evaluation : dict
        Which store the estimates were measured on: ``{"store": "pseudo-pairs" |
        "cross-validation", "size": items per evaluation store, ...}``; with unpaired samples of
        both stores also ``unpaired_new_rows`` (rows of the smaller sample that are not known
        pairs), ``pseudo_pairs`` and ``certificate`` when the store was tried, and
        ``bootstrap_left_out`` (why) when the default bootstrap candidate was not estimated
        (see the module docstring).
    ceiling : dict
        ``{"recall", "ndcg", "method", "how"}`` of the oracle fit.
    recommendation : dict
        ``{"action": "translate" | "bridge queries" | "re-embed", "method", "side", "reasons"}``;
        ``method`` and ``side`` name the best candidate also when the action is to re-embed.
    seconds : float
        Wall time of the plan.
    """

    n_pairs: int
    n_unpaired_source: int
    n_unpaired_target: int
    k: int
    normalized: bool
    row_norms: dict
    store_size: int
    confidence: float
    min_recall: float
    estimates: list = field(default_factory=list)
    learning_curve: dict = field(default_factory=dict)
    curve_store_size: int = 0
    evaluation: dict = field(default_factory=dict)
    ceiling: dict = field(default_factory=dict)
    recommendation: dict = field(default_factory=dict)
    seconds: float = 0.0

    def best(self, side=None):
        """The estimate with the highest recall@k, on ``side`` or on either.

        Parameters
        ----------
        side : {"document", "query"}, default=None
            Restrict to one side.

        Returns
        -------
        estimate : Estimate or None
            ``None`` when no estimate is on that side.
        """
        pool = [e for e in self.estimates if side is None or e.side == side]
        return max(pool, key=lambda e: e.recall, default=None)

    def to_dict(self):
        """The plan as plain JSON-serialisable data.

        Returns
        -------
        plan : dict
            Every field; the estimates as dicts.
        """
        out = asdict(self)
        out["estimates"] = [asdict(e) for e in self.estimates]
        return out

    def summary(self):
        """The plan as lines of text for people.

        Returns
        -------
        lines : list of str
            The estimates table, ceiling, learning curve and recommendation.
        """
        k = self.k
        norms = self.row_norms
        lines = [
            f"skalign plan: {self.n_pairs} pairs"
            + (f" + unpaired samples ({self.n_unpaired_source} source, "
               f"{self.n_unpaired_target} target rows)"
               if self.n_unpaired_source or self.n_unpaired_target else "")
            + f"; retention against re-embedding on a store of {self.store_size} items "
            f"(recall@{k}, nDCG@{k}, {self.confidence:.0%} CI over queries)",
            "evaluated on " + (
                f"{self.evaluation['size']} pairs discovered in the unpaired samples (bootstrap "
                f"certificate {self.evaluation['certificate']:.2f})"
                if self.evaluation.get("store") == "pseudo-pairs" else
                f"held-out folds of about {self.evaluation.get('size', 0)} pairs "
                f"({self.evaluation.get('n_splits', 0)}-fold cross-validation)"),
            "inputs " + ("L2-normalised before fitting" if self.normalized
                         else "used as given, not normalised")
            + f" (mean row norm: source {norms['source']:.3g}, target {norms['target']:.3g})",
            "",
            f"{'method':<12}{'side':<10}{'recall@' + str(k):>10}{'CI':>16}"
            f"{'nDCG@' + str(k):>9}{'CI':>16}{'fit s':>8}  how",
        ]
        for e in sorted(self.estimates, key=lambda e: -e.recall):
            lines.append(
                f"{e.method:<12}{e.side:<10}{e.recall:10.3f}"
                f"{f'[{e.recall_ci[0]:.3f}, {e.recall_ci[1]:.3f}]':>16}{e.ndcg:9.3f}"
                f"{f'[{e.ndcg_ci[0]:.3f}, {e.ndcg_ci[1]:.3f}]':>16}{e.fit_seconds:8.2f}  "
                f"{e.how}" + ("  (extrapolated)" if e.extrapolated else ""))
        c = self.ceiling
        lines += ["", f"ceiling (oracle {c['method']} fitted on all {self.n_pairs} pairs, in "
                  f"sample): recall@{k} {c['recall']:.3f}, nDCG@{k} {c['ndcg']:.3f}"
                  + ("  (extrapolated)" if c["extrapolated"] else "")]
        if self.learning_curve:
            lines += ["", f"learning curve (document side, held-out store of "
                      f"{self.curve_store_size} pairs; recall@{k} by pairs used):"]
            for name, curve in self.learning_curve.items():
                pts = "  ".join(f"{n}: {r:.3f}" for n, r in zip(curve["n_pairs"],
                                                               curve["recall"]))
                lines.append(f"  {name:<12}{pts}")
        if self.evaluation.get("bootstrap_left_out"):
            lines += ["", f"bootstrap not estimated: {self.evaluation['bootstrap_left_out']}"]
        r = self.recommendation
        lines += ["", f"recommendation: {r['action']}"
                  + (f" with {r['method']} ({r['side']} side)" if r["action"] != "re-embed"
                     else f" (best map: {r['method']}, {r['side']} side)")]
        lines += [f"  - {reason}" for reason in r["reasons"]]
        lines += ["  to carry it out:"] + [f"    {c}" for c in r["commands"]]
        return lines


# ------------------------------------------------------------------------------ the estimate
def _unit(A):
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(norms > 0, norms, 1.0)


def _candidate_sides(proto, sides):
    """The sides estimated for a candidate: a candidate that learns from the unpaired samples
    and has no exact inverse (the bootstrap around a ridge map) is not estimated on the query
    side, where it would need a second discovery fitted the other way for a side that keeps
    less: at 2,000 development pairs a ridge map fitted new -> old kept 0.04-0.22 less recall@10
    on the query side than the one fitted old -> new on the document side
    (``benchmarks/results/migrate_peers.csv``)."""
    if "query" in sides and _uses_unpaired(proto) and not _has_inverse(proto):
        return tuple(s for s in sides if s != "query")
    return tuple(sides)


def _fit_both_ways(proto, X, Y, pool, sides):
    """Fit ``proto`` old -> new, and new -> old too when queries are to be bridged and the fit
    has no exact inverse. Returns ``(est, reverse or None, seconds, how queries are mapped)``."""
    from sklearn.base import clone

    est, secs = _fit(clone(proto), X, Y, pool)
    reverse = None
    if "query" in sides and not _has_inverse(est):
        reverse, s = _fit(clone(proto), Y, X, _reverse_pool(pool))
        secs += s
    how = ("queries mapped back by inverse_transform (translate --direction inverse)"
           if reverse is None else
           "queries mapped by a map fitted new -> old (fit with --source/--target swapped)")
    return est, reverse, secs, how


def _fit(est, X, Y, unpaired):
    import inspect
    import warnings

    kwargs = {"unpaired": unpaired} if unpaired is not None and "unpaired" in \
        inspect.signature(est.fit).parameters else {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, Y, **kwargs)
    return est, time.perf_counter() - t0


def _reverse_pool(unpaired):
    from .base import UnpairedPool

    return None if unpaired is None else UnpairedPool(X=unpaired.y, y=unpaired.X)


def _sides(est, Xte, Yte, side, reverse):
    """(translated_index, translated_queries) rows for the held-out items of one fold."""
    if side == "document":
        index = est.transform(Xte)
        queries = est.transform_target(Yte) if hasattr(est, "transform_target") else Yte
        return index, queries
    if reverse is not None:
        return Xte, reverse.transform(Yte)
    return Xte, est.inverse_transform(Yte)


def _has_inverse(est):
    try:
        return hasattr(est, "inverse_transform") and not hasattr(est, "transform_target")
    except Exception:  # available_if may raise while probing an unfitted meta-estimator
        return False


def _cross_fit(name, X, Y, unpaired, sides, n_splits, random_state):
    """Per fold and side: (held-out rows, translated index, translated queries); fit s; how."""
    from sklearn.model_selection import KFold

    proto = make_candidate(name, len(X), random_state)
    sides = _candidate_sides(proto, sides)
    out = {side: [] for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    folds = KFold(n_splits=n_splits, shuffle=True, random_state=random_state).split(X)
    for train, test in folds:
        # a candidate that learns from the unpaired samples must not find the held-out pairs
        pool = _pool_without(unpaired, X[test], Y[test]) if _uses_unpaired(proto) else unpaired
        est, reverse, s, how["query"] = _fit_both_ways(proto, X[train], Y[train], pool, sides)
        secs += s
        for side in sides:
            index, queries = _sides(est, X[test], Y[test], side, reverse)
            out[side].append((test, index, queries))
    return out, secs / n_splits, how


def _uses_unpaired(est):
    import inspect

    return "unpaired" in inspect.signature(est.fit).parameters


def _duplicates(A, B, block=1024):
    """Rows of ``A`` that repeat a row of ``B`` (cosine above 0.9999)."""
    Bn = _unit(B)
    return np.concatenate([(_unit(A[i:i + block]) @ Bn.T).max(axis=1) > 0.9999
                           for i in range(0, len(A), block)]) if len(B) else \
        np.zeros(len(A), bool)


def _pool_without(unpaired, X, Y):
    """The unpaired samples less the rows that repeat ``X`` (source) or ``Y`` (target) rows."""
    from .base import UnpairedPool

    if unpaired is None:
        return None
    return UnpairedPool(
        X=None if unpaired.X is None else unpaired.X[~_duplicates(unpaired.X, X)],
        y=None if unpaired.y is None else unpaired.y[~_duplicates(unpaired.y, Y)])


def _pseudo_store(X, Y, unpaired, free_p, free_q, random_state, block=1024):
    """Pairs discovered in the unpaired samples, to serve as a large evaluation store.

    The reference map is the bootstrap candidate fitted on all known pairs plus the unpaired
    samples; a source row ``p`` and a target row ``q`` form a pseudo-pair when each is the
    other's nearest neighbour (cosine) under it. Rows duplicating a known pair (cosine > 0.9999
    to one of its rows) are left out, so nothing a candidate is fitted on is evaluated.

    ``free_p`` and ``free_q`` mark the sample rows that are not known pairs.

    Returns
    -------
    store : dict
        ``{"source": rows of unpaired.X, "target": rows of unpaired.y, "certificate": float,
        "fit_seconds": float}``.
    """
    P, Q = unpaired.X, unpaired.y
    ref, secs = _fit(make_candidate("bootstrap", len(X), random_state), X, Y, unpaired)
    TP = _unit(np.asarray(ref.transform(P), dtype=np.float32))
    Qn = _unit(Q)
    best_q = np.full(len(P), -1)
    best_p = np.full(len(Q), -1)
    col_max = np.full(len(Q), -np.inf)
    q_idx = np.flatnonzero(free_q)
    for i in range(0, len(P), block):
        S = TP[i:i + block] @ Qn[q_idx].T
        best_q[i:i + block] = q_idx[S.argmax(axis=1)]
        rows = S.argmax(axis=0)
        better = S[rows, np.arange(len(q_idx))] > col_max[q_idx]
        col_max[q_idx[better]] = S[rows[better], np.flatnonzero(better)]
        best_p[q_idx[better]] = i + rows[better]
    src = np.flatnonzero(free_p & (best_p[best_q] == np.arange(len(P))))
    return {"source": src, "target": best_q[src],
            "certificate": float(getattr(ref, "certificate_", float("nan"))),
            "fit_seconds": secs}


def _store_fit(name, X, Y, unpaired, store, sides, random_state):
    """Like :func:`_cross_fit`, evaluated on the pseudo-paired store instead of held-out pairs.

    Every candidate is fitted on all known pairs, as it would be for the migration. A candidate
    that also learns from the unpaired samples (the bootstrap) is fitted ``STORE_PARTS`` times,
    each time without the store rows of one part of the store, and translates that part. On
    the document side the parts are put back together into one store (each item translated by
    a fit that never saw it); the query side, and a method that maps the queries too
    (``transform_target``), are scored part by part, so that no fit meets an item it learnt
    from.
    """
    from .base import UnpairedPool

    proto = make_candidate(name, len(X), random_state)
    sides = _candidate_sides(proto, sides)
    P, Q = unpaired.X[store["source"]], unpaired.y[store["target"]]
    m = len(P)
    if _uses_unpaired(proto):
        order = np.random.default_rng(random_state).permutation(m)
        parts = [np.sort(part) for part in np.array_split(order, STORE_PARTS)]
    else:
        parts = [np.arange(m)]
    out = {side: [] for side in sides}
    how = {"document": "translate the stored documents"}
    secs = 0.0
    for test in parts:
        pool = unpaired
        if len(parts) > 1:
            keep_p = np.ones(len(unpaired.X), bool)
            keep_p[store["source"][test]] = False
            keep_q = np.ones(len(unpaired.y), bool)
            keep_q[store["target"][test]] = False
            pool = UnpairedPool(X=unpaired.X[keep_p], y=unpaired.y[keep_q])
        est, reverse, s, how["query"] = _fit_both_ways(proto, X, Y, pool, sides)
        secs += s
        for side in sides:
            index, queries = _sides(est, P[test], Q[test], side, reverse)
            out[side].append((test, index, queries))
    if len(parts) > 1 and "document" in sides and not hasattr(proto, "transform_target"):
        # document side only: bridged queries would meet, in the untouched old index, items
        # another part's fit learnt from, whose inner products that fit reproduces
        order = np.concatenate(parts)
        for side in ("document",):
            index = np.concatenate([f[1] for f in out[side]])
            queries = np.concatenate([f[2] for f in out[side]])
            out[side] = [(order, index, queries)]
    return out, secs / len(parts), how


def _retention_by_size(Y, folds, k, rng):
    """(store size, mean recall, mean nDCG) on random sub-stores of every held-out fold."""
    from .metrics import retrieval_retention

    m_full = min(len(test) for test, _, _ in folds)
    sizes = sorted({m for m in (m_full // 4, m_full // 2, m_full) if m >= 2 * k + 2} | {m_full})
    rows = []
    for m in sizes:
        rec, nd = [], []
        for test, index, queries in folds:
            pick = rng.choice(len(test), m, replace=False)
            r = retrieval_retention(Y[test][pick], index[pick], Y[test][pick], queries[pick],
                                    k=k, exclude_self=True)
            rec.append(r["recall"])
            nd.append(r["ndcg"])
        rows.append((m, float(np.mean(rec)), float(np.mean(nd))))
    return rows


def _percentile_ci(values, n_resamples, confidence, rng):
    n = len(values)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 256):
        stop = min(start + 256, n_resamples)
        means[start:stop] = values[rng.integers(0, n, (stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def _estimate(name, side, Y, folds, k, store_size, n_resamples, confidence, rng, fit_seconds,
              how):
    from .metrics import retrieval_retention

    rec, nd = [], []
    for test, index, queries in folds:
        per = retrieval_retention(Y[test], index, Y[test], queries, k=k, exclude_self=True,
                                  per_query=True)
        rec.append(per["recall"])
        nd.append(per["ndcg"])
    rec, nd = np.concatenate(rec), np.concatenate(nd)
    recall, ndcg = float(rec.mean()), float(nd.mean())
    rci = _percentile_ci(rec, n_resamples, confidence, rng)
    nci = _percentile_ci(nd, n_resamples, confidence, rng)
    fold_store = int(np.mean([len(test) for test, _, _ in folds]))
    shift = [0.0, 0.0]
    if store_size != fold_store:
        # chance-corrected retention rho = (r - c) / (1 - c), c = k / (m - 1) what a random map
        # keeps in a store of m, fitted by a line in log m and carried to store_size
        rows = _retention_by_size(Y, folds, k, rng)

        def chance(m):
            return min(k / (m - 1), 1.0)

        for col, value in ((1, recall), (2, ndcg)):
            rho = [(r[col] - chance(r[0])) / (1 - chance(r[0])) for r in rows]
            slope = np.polyfit(np.log([r[0] for r in rows]), rho, 1)[0] if len(rows) > 1 \
                else 0.0
            rho_target = rho[-1] + min(slope, 0.0) * (np.log(store_size) - np.log(rows[-1][0]))
            c = chance(store_size)
            shift[col - 1] = c + (1 - c) * rho_target - value

    def clip(v, d):
        return float(min(max(v + d, 0.0), 1.0))

    return Estimate(name, side, how, clip(recall, shift[0]),
                    (clip(rci[0], shift[0]), clip(rci[1], shift[0])), clip(ndcg, shift[1]),
                    (clip(nci[0], shift[1]), clip(nci[1], shift[1])), int(store_size),
                    bool(store_size != fold_store), float(fit_seconds))


# ------------------------------------------------------------------------------ curve, ceiling
def _learning_curve(methods, X, Y, unpaired, k, n_repeats, random_state, rng):
    from sklearn.base import clone

    from .metrics import retrieval_retention

    n = len(X)
    n_eval = max(50, n // 5)
    if n - n_eval < 25 or n_eval <= k:
        return {}, 0
    order = rng.permutation(n)
    ev, tr = order[:n_eval], order[n_eval:]
    counts = [c for c in CURVE_COUNTS if c < len(tr)] + [len(tr)]
    curve = {}
    for name in methods:
        proto = make_candidate(name, len(tr), random_state)
        unpaired_fit = _uses_unpaired(proto)
        pts = {"n_pairs": [], "recall": [], "recall_std": [], "ndcg": []}
        for c in counts:
            if unpaired_fit and c not in (25, 500, len(tr)):
                continue  # its slowest fits; the curve is flat (the unpaired pairs dominate)
            reps = n_repeats if c <= 200 and not unpaired_fit else 1
            rec, nd = [], []
            for _ in range(reps):
                pick = tr if c == len(tr) else rng.choice(tr, c, replace=False)
                est, _ = _fit(clone(proto), X[pick], Y[pick], unpaired)
                index, queries = _sides(est, X[ev], Y[ev], "document", None)
                r = retrieval_retention(Y[ev], index, Y[ev], queries, k=k, exclude_self=True)
                rec.append(r["recall"])
                nd.append(r["ndcg"])
            pts["n_pairs"].append(int(c))
            pts["recall"].append(float(np.mean(rec)))
            pts["recall_std"].append(float(np.std(rec)))
            pts["ndcg"].append(float(np.mean(nd)))
        curve[name] = pts
    return curve, n_eval


def _ceiling(X, Y, k, store_size, n_resamples, confidence, rng):
    best = None
    from ._linear import LinearAligner

    for name in ("linear", "procrustes"):
        est = (LinearAligner(alphas=np.logspace(-4, 6, 11)) if name == "linear" else
               make_candidate(name, len(X), 0)).fit(X, Y)
        fold = [(np.arange(len(X)), est.transform(X), Y)]
        e = _estimate(name, "document", Y, fold, k, store_size, n_resamples, confidence, rng,
                      0.0, "")
        if best is None or e.recall > best.recall:
            best = e
    return {"method": best.method, "recall": best.recall, "recall_ci": best.recall_ci,
            "ndcg": best.ndcg, "extrapolated": best.extrapolated,
            "how": "oracle: the best of ridge (LOO alpha) and centred Procrustes fitted on all "
                   "pairs and scored on the same pairs (in sample)"}


def _pick(plan, side, reasons):
    """The side's best estimate; one that needs the unpaired samples must beat the best that
    does not by more than half its own interval."""
    best = plan.best(side)
    if best is None or not _uses_unpaired(make_candidate(best.method)):
        return best
    plain = max((e for e in plan.estimates if e.side == side
                 and not _uses_unpaired(make_candidate(e.method))),
                key=lambda e: e.recall, default=None)
    if plain is not None and best.recall - plain.recall <= (best.recall_ci[1] -
                                                            best.recall_ci[0]) / 2:
        reasons.append(f"{side} side: {best.method} ({best.recall:.3f}) is not ahead of "
                       f"{plain.method} ({plain.recall:.3f}) by more than half its interval; "
                       f"{plain.method} needs no unpaired samples")
        return plain
    return best


def _recommend(plan, curve):
    k = plan.k
    ties = []
    best_doc, best_query = _pick(plan, "document", ties), _pick(plan, "query", ties)
    reasons = []
    choice = best_doc
    if best_query is not None and (best_doc is None or best_query.recall - best_doc.recall >
                                   (best_query.recall_ci[1] - best_query.recall_ci[0]) / 2):
        choice = best_query
    if best_doc is not None:
        reasons.append(f"best document side: {best_doc.method} keeps recall@{k} "
                       f"{best_doc.recall:.3f} [{best_doc.recall_ci[0]:.3f}, "
                       f"{best_doc.recall_ci[1]:.3f}], nDCG@{k} {best_doc.ndcg:.3f}")
    if best_query is not None:
        reasons.append(f"best query side (bridging): {best_query.method} keeps recall@{k} "
                       f"{best_query.recall:.3f} [{best_query.recall_ci[0]:.3f}, "
                       f"{best_query.recall_ci[1]:.3f}], nDCG@{k} {best_query.ndcg:.3f}")
    reasons += ties
    ceiling = plan.ceiling["recall"]
    if choice.recall < plan.min_recall:
        action = "re-embed"
        reasons.append(f"no candidate reaches --min-recall {plan.min_recall:.2f}")
        if ceiling < plan.min_recall:
            reasons.append(f"the ceiling ({ceiling:.3f}) is below it too: more pairs are unlikely"
                           " to make a map from the old space good enough")
        else:
            reasons.append(f"the ceiling ({ceiling:.3f}) is above it: more pairs (or another "
                           "method) might get there; see the learning curve")
    else:
        action = "translate" if choice.side == "document" else "bridge queries"
        reasons.append(f"{choice.recall:.3f} >= --min-recall {plan.min_recall:.2f}; the ceiling "
                       f"is {ceiling:.3f} (gap {ceiling - choice.recall:+.3f})")
    pts = curve.get(choice.method)
    if pts and len(pts["n_pairs"]) >= 2:
        (n0, r0), (n1, r1) = list(zip(pts["n_pairs"], pts["recall"]))[-2:]
        per_doubling = (r1 - r0) / max(np.log2(n1 / n0), 1e-9)
        more = "worth labelling more pairs" if per_doubling >= 0.01 else \
            "more pairs would add little"
        reasons.append(f"learning curve of {choice.method}: {per_doubling:+.3f} recall@{k} per "
                       f"doubling of pairs between {n0} and {n1}: {more}")
    ratio = max(plan.row_norms["source"], plan.row_norms["target"]) / max(
        min(plan.row_norms["source"], plan.row_norms["target"]), 1e-12)
    if not plan.normalized and ratio > 1.5:
        reasons.append(f"the two spaces' mean row norms differ {ratio:.1f}-fold; maps without a "
                       "scale suffer from it (bridging most): compare with --normalize")
    return {"action": action, "method": choice.method, "side": choice.side,
            "reasons": reasons, "commands": _commands(choice, plan)}


def _commands(choice, plan):
    """The command lines that carry out the recommended fit (A, B, P, Q as given to plan)."""
    fit = f"skalign fit {choice.method}"
    ridge = ("scoring=recall_retention", "alphas=" + ",".join(f"{a:g}" for a in RIDGE_ALPHAS))
    if choice.method == "bootstrap":
        fit += f" --param map_rounds={MAP_ROUNDS} --param estimator=linear" + "".join(
            f" --param estimator__{p}" for p in ridge)
    if choice.method == "linear":
        fit += "".join(f" --param {p}" for p in ridge)
    reverse = choice.side == "query" and "swapped" in choice.how
    fit += " --source B --target A" if reverse else " --source A --target B"
    if choice.method == "bootstrap":
        fit += (" --unpaired-source Q --unpaired-target P" if reverse
                else " --unpaired-source P --unpaired-target Q")
    fit += " -o model.skops"
    if choice.side == "document":
        run = "skalign translate model.skops STORE_A.npy STORE_IN_B.npy"
    elif reverse:
        run = "skalign translate model.skops QUERIES_B.npy QUERIES_IN_A.npy"
    else:
        run = "skalign translate model.skops QUERIES_B.npy QUERIES_IN_A.npy --direction inverse"
    note = ["(fit on L2-normalised rows: normalise A, B, P, Q and the store first)"] \
        if plan.normalized else []
    return [fit, run] + note


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


# ------------------------------------------------------------------------------------ report
def write_report(plan, path):
    """Write the plan's curves and estimates as a PNG, or an HTML page embedding it.

    Needs matplotlib (the ``docs`` extra); the suffix of ``path`` picks the format.

    Parameters
    ----------
    plan : MigrationPlan
        What :func:`plan_migration` returned.
    path : str or path-like
        ``.png`` or ``.html``.

    Returns
    -------
    path : pathlib.Path
        The file written.
    """
    import base64
    import html
    import io
    from pathlib import Path

    path = Path(path)
    if path.suffix.lower() not in (".png", ".html", ".htm"):
        raise ValueError(f"report {path}: the suffix must be .png or .html.")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("writing a report needs matplotlib: pip install matplotlib (or "
                          "skalign[docs]).") from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    k = plan.k
    for name, c in plan.learning_curve.items():
        ax1.errorbar(c["n_pairs"], c["recall"], yerr=c["recall_std"], marker="o", label=name,
                     capsize=3)
    ax1.axhline(plan.ceiling["recall"], color="k", ls="--", lw=1,
                label=f"ceiling ({plan.ceiling['method']}, in sample)")
    ax1.axhline(plan.min_recall, color="tab:red", ls=":", lw=1, label="min recall")
    ax1.set_xscale("log")
    ax1.set_xlabel("pairs used to fit")
    ax1.set_ylabel(f"recall@{k} retention")
    ax1.set_title(f"learning curve (held-out store of {plan.curve_store_size})")
    ax1.legend(fontsize=8)
    ests = sorted(plan.estimates, key=lambda e: e.recall)
    labels = [f"{e.method} / {e.side}" for e in ests]
    vals = [e.recall for e in ests]
    err = np.array([[e.recall - e.recall_ci[0], e.recall_ci[1] - e.recall] for e in ests]).T
    ax2.barh(labels, vals, xerr=err, color=["tab:blue" if e.side == "document" else "tab:orange"
                                            for e in ests], capsize=3)
    ax2.axvline(plan.ceiling["recall"], color="k", ls="--", lw=1)
    ax2.set_xlim(0, 1)
    ax2.set_xlabel(f"recall@{k} retention (store of {plan.store_size}, "
                   f"{plan.confidence:.0%} CI)")
    rec = plan.recommendation
    ax2.set_title(f"recommendation: {rec['action']}"
                  + (f" with {rec['method']}" if rec["action"] != "re-embed" else ""))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix.lower() == ".png":
        tmp.write_bytes(buf.getvalue())
    else:
        img = base64.b64encode(buf.getvalue()).decode()
        body = html.escape("\n".join(plan.summary()))
        tmp.write_text(f"<!doctype html><meta charset='utf-8'><title>skalign plan</title>"
                       f"<img alt='curves' src='data:image/png;base64,{img}'>"
                       f"<pre>{body}</pre>\n", encoding="utf-8")
    tmp.replace(path)
    return path
