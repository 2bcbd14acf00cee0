r"""Stage 4 of :mod:`skalign.plan`: the estimates, carried to the store size by the store-size
law.

:func:`estimate` scores one evaluation store (every item translated by a fit that never saw
it) and carries recall@k and nDCG@k to the user's store size by the law below;
:func:`bridged` derives the query side from the document side and the two sides measured on the
same held-out folds. :func:`estimates` makes every estimate of a plan from the fits: each method
on each side, staying on the old model, translate + rerank, the ceiling and the budget curve
carried to the store size (see the module docstring of :mod:`skalign.plan`).

*Stay* is the old model's own top-``k`` (old queries on the old store) against the new
model's, measured on the pairs (no fit, so every pair is an evaluation item). *Rerank* is the
translated store's top-``K`` re-scored with the new encoder's vectors of those ``K``
candidates: it finds exactly the true top-``k`` items that are among the candidates, so its
recall@k is the share of the true top-``k`` inside the translated top-``K``, carried to the
store size by the same law with ``K`` in the place of ``k`` (chance ``K / (N - 1)``).

The store-size law
------------------
The statistics of the estimates of :mod:`skalign.plan`: the percentile interval and the
store-size law, which carries retention measured on a small store to a larger one.

The sub-stores are drawn by :func:`substores`, scored by :func:`substore_draws` and the result
carried on by :func:`project`, with the percentile interval of :func:`percentile_ci`.

A top-``k`` search gets harder as the store grows: the items that make the true top-``k`` of a
store of ``N`` are ever more extreme, and a map's errors move more of them out. A random ranking
keeps ``c_N = k / (N - 1)`` of the top-``k``; the part above chance,

.. math::

    \rho(N) = \frac{r(N) - c_N}{1 - c_N},

falls as a **power of the store size**, :math:`\rho(N) = \rho(m)\,(N/m)^{b}` with
:math:`b \le 0`: steeply for a poor map and hardly for a good one, while staying on the old
model hardly decays at all (measured on the development data: :doc:`/developers/studies`).
``b`` is fitted by least squares on :math:`\log \rho` against :math:`\log m` over nested
random sub-stores of the evaluation store (``m_max, m_max / 2, ...`` down to
``MIN_STORE_K * k`` items), and the prediction is anchored at the full evaluation store.
(Without the chance correction the slope measured on small stores overstates the decay: chance
inflates the small stores.)

The interval adds, in log space, the spread of the anchor (over queries, and over which items
make up the store: the spread of random half-stores), the slope's spread
across the sub-store draws and a model term ``LAW_SPREAD`` per unit of :math:`\log(N/m_{max})`
for the law itself. With fewer than two sub-store sizes the slope cannot be measured: the
estimate is then **unsupported** and its interval runs from chance to the anchor's upper bound
(retention does not grow with the store).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._inputs import unit

__all__ = ["Estimate", "Estimates", "RERANK_KS", "estimates"]

#: smallest sub-store the slope is measured on, in multiples of k (below it chance dominates)
MIN_STORE_K = 4
#: random sub-stores drawn per size
SUBSTORE_DRAWS = 6
#: model spread of the law, in log retention per unit of log(N / m_max)
LAW_SPREAD = 0.04


#: depth of the rankings kept per item, in multiples of k: every sub-store's top-k is read off
#: them (a sub-store of a share 1/s of the store holds about 32 k / s of a ranking's first 32 k
#: items; a smaller one is ranked on its own)
RANK_DEPTH_K = 32
#: candidate counts the rerank option tries, cheapest first
RERANK_KS = (20, 50, 100, 200, 500, 1000, 2000)


@dataclass(frozen=True)
class Estimate:
    """Retention of one method on one side (see :class:`MigrationPlan`).

    Parameters
    ----------
    method : str
        The option's method (``"procrustes"``, ``"linear"``, ...; ``"stay"``, ``"rerank"``).
    side : str
        Which embeddings are translated: ``"document"`` (the store's) or ``"query"`` (mapped
        back by ``inverse_transform``).
    how : str
        What the option does, in words (e.g. ``"translate the stored documents"``).
    recall : float
        Recall@k against re-embedding, for a store of ``store_size`` items.
    recall_ci : tuple of float
        Its interval ``(low, high)`` at the plan's confidence.
    ndcg : float
        The nDCG@k against re-embedding, for ``store_size`` items.
    ndcg_ci : tuple of float
        Its interval.
    store_size : int
        Store size the estimate is for.
    extrapolated : bool
        Whether ``store_size`` is larger than the evaluation store (the store-size law used).
    fit_seconds : float
        Seconds one fit took.
    supported : bool, default=True
        ``False`` when the pairs were too few to measure it (the interval then runs from chance
        to the measured upper bound).
    measured_size : int, default=0
        Items of the evaluation store it was measured on.
    measured_recall : float, default=nan
        Recall@k measured on that store.
    slope : float, default=0.0
        Exponent of the store-size law.
    """

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
    supported: bool = True
    measured_size: int = 0
    measured_recall: float = float("nan")
    slope: float = 0.0


def best_estimate(estimates, side=None):
    """The estimate of ``estimates`` with the highest recall@k, on ``side`` or on either
    (``None`` when none is on that side)."""
    pool = [e for e in estimates if side is None or e.side == side]
    return max(pool, key=lambda e: e.recall, default=None)


@dataclass(frozen=True)
class Estimates:
    """Every estimate of a plan (the fields of :class:`~skalign.plan.MigrationPlan` of the same
    names); ``best`` the estimate with the highest recall@k on each side (``None`` for a side
    not estimated); ``budget_store`` the best document-side method's evaluation store ``(new
    vectors, cross-fitted translations)``, on which the options stage prices the store
    ``skalign migrate --budget`` writes (``None`` without a budget below the store size or a
    budget curve of that method)."""

    estimates: list
    stay: dict
    rerank: object
    ceiling: dict
    learning_curve: dict
    curve_store_size: int
    budget_store: object
    notes: tuple
    best: dict


def estimates(inputs, fits):
    """The estimates of a plan from its ``fits`` (see :class:`Estimates`)."""
    k, size, rs = inputs.k, inputs.store_size, inputs.random_state
    n_resamples, confidence, rng = inputs.n_resamples, inputs.confidence, inputs.rng
    Y_eval = fits.Y_eval
    # the new model's own rankings of a store, shared by every estimate on it: rows of Y_eval
    # (keyed by the store's rows) or the pairs
    truth, made = {}, []

    def true_of(rows):
        key = rows.tobytes()
        if key not in truth:
            store = Y_eval[rows]
            truth[key] = _ranked(store, store, _depth(len(rows), k))
            made.append((rows, truth[key]))
        return truth[key]

    out = []
    for name, folds in fits.folds.items():
        test, index, queries = fits.doc_stores[name]
        doc = estimate(name, "document", Y_eval[test], index, queries, k, size, n_resamples,
                       confidence, rng, fits.fit_seconds[name], fits.how[name]["document"],
                       true_of(test))
        if "document" in inputs.sides:
            out.append(doc)
        if "query" in inputs.sides and "query" in folds:
            if len(folds["query"]) == 1:
                test, index, queries = folds["query"][0]
                out.append(estimate(name, "query", Y_eval[test], index, queries, k, size,
                                    n_resamples, confidence, rng, fits.fit_seconds[name],
                                    fits.how[name]["query"], true_of(test)))
            else:
                out.append(bridged(doc, name, Y_eval, folds["document"], folds["query"], k,
                                   n_resamples, confidence, rng, fits.fit_seconds[name],
                                   fits.how[name]["query"], true_of))
    pairs_truth = _pairs_truth(inputs, fits, made, k)
    stay = estimate("stay", "stay", inputs.Y, inputs.X, inputs.X, k, size, n_resamples,
                    confidence, np.random.default_rng([rs, 3]), 0.0,
                    "old queries on the old store: the old model's own top-k, no migration",
                    pairs_truth)
    curves = scale_curves(fits.curves, out)
    ceiling = _ceiling(inputs, fits.oracles, pairs_truth) if fits.oracles else {}
    best_doc = best_estimate(out, "document")
    rerank, budget_store = {}, None
    if best_doc is not None:
        test, index, queries = fits.doc_stores[best_doc.method]
        if not inputs.lean:
            rerank = rerank_option(Y_eval[test], index, queries, k, size,
                                   max(inputs.min_recall, stay.recall), n_resamples,
                                   confidence, np.random.default_rng([rs, 4]), true_of(test))
        budget = None if inputs.budget is None else int(inputs.budget)
        if budget is not None and best_doc.method in curves and budget < size:
            budget_store = (Y_eval[test], index)
    return Estimates(estimates=out, stay=asdict(stay), rerank=rerank, ceiling=ceiling,
                     learning_curve=curves, curve_store_size=fits.curve_store_size,
                     budget_store=budget_store, notes=_notes(out, inputs),
                     best={side: best_estimate(out, side) for side in ("document", "query")})


def _pairs_truth(inputs, fits, made, k):
    """The new model's ranking of the pairs (:func:`_ranked` of ``inputs.Y``), read off the
    ranking ``(rows, ranking)`` of ``made`` of an evaluation store that holds every pair in
    another order (cross-validation: the held-out folds put back together), else made."""
    n = inputs.n_pairs
    if fits.Y_eval is inputs.Y:
        for rows, ranking in made:
            if len(rows) == n and ranking.shape[1] == _depth(n, k) and \
                    np.array_equal(np.sort(rows), np.arange(n)):
                out = np.empty_like(ranking)
                out[rows] = rows[ranking]
                return out
    return _ranked(inputs.Y, inputs.Y, _depth(n, k))


def _notes(out, inputs):
    notes = []
    measured = {e.measured_size for e in out}
    if any(e.extrapolated for e in out):
        notes.append(f"every estimate is carried from an evaluation store of "
                     f"{', '.join(map(str, sorted(measured)))} items to {inputs.store_size} by "
                     "the store-size law (see skalign.plan); the intervals widen with the "
                     "distance")
    if any(not e.supported for e in out):
        notes.append(f"{inputs.n_pairs} pairs are too few to measure how retention falls with "
                     "the store size (sub-stores of fewer than 4 k items): the estimates are "
                     "unsupported, their intervals run from chance to what the pairs measured")
    return tuple(notes)


def estimate(name, side, Y, index, queries, k, store_size, n_resamples, confidence, rng,
             fit_seconds, how, truth=None):
    """Retention on one evaluation store (rows of ``Y``, ``index``, ``queries`` aligned),
    carried to ``store_size``.

    Each item ranks the others once, by the new model (``truth``, :func:`_ranked` of ``Y``,
    when given) and by the migrated setup, to a depth of ``RANK_DEPTH_K * k``; every
    sub-store's top-``k`` are read off those rankings (:func:`_within`), as
    :func:`skalign.metrics.retrieval_retention` would rank the sub-store itself.
    """
    m = len(Y)
    depth = _depth(m, k)
    true = _ranked(Y, Y, depth) if truth is None else truth
    pred = _ranked(queries, index, depth)
    recall, ndcg = _retention(true[:, :k], pred[:, :k], k)
    per = {"recall": recall, "ndcg": ndcg}

    def score(idx):
        R, S = _within(true, idx, k), _within(pred, idx, k)
        if R is None or S is None:  # too small a share of the store: ranked on its own
            Ys = Y[idx]
            R = _ranked(Ys, Ys, k)
            S = _ranked(queries[idx], index[idx], k)
        r, n = _retention(R, S, k)
        return float(r.mean()), float(n.mean())

    sizes, draws = substore_draws(score, m, k, rng,
                                  full=(float(recall.mean()), float(ndcg.mean())))
    out = []
    for col, key in enumerate(("recall", "ndcg")):
        ci = percentile_ci(per[key], n_resamples, confidence, rng)
        out.append(project(sizes, draws[:, :, col], ci, store_size, k, confidence))
    rec, nd = out
    return Estimate(name, side, how, rec["value"], rec["ci"], nd["value"], nd["ci"],
                    int(store_size), bool(store_size != m), float(fit_seconds),
                    supported=bool(rec["supported"]), measured_size=int(m),
                    measured_recall=float(per["recall"].mean()), slope=float(rec["slope"]))


def bridged(doc, name, Y, doc_folds, query_folds, k, n_resamples, confidence, rng, fit_seconds,
            how, true_of):
    """The query side from the document side ``doc``: both sides are measured on the same
    held-out folds (leak-free, but small); the ratio of their retentions above chance
    multiplies the document side's carried to the store size. ``true_of(rows)`` is the new
    model's ranking of the store ``Y[rows]`` (:func:`_ranked`)."""
    vals = {"document": ([], []), "query": ([], [])}
    sizes = []
    for side, folds in (("document", doc_folds), ("query", query_folds)):
        for test, index, queries in folds:
            recall, ndcg = _retention(true_of(test)[:, :k],
                                      _ranked(queries, index, k), k)
            vals[side][0].append(recall)
            vals[side][1].append(ndcg)
            if side == "document":
                sizes.append(len(test))
    c_fold = chance(k, int(np.mean(sizes)))
    c_n = chance(k, doc.store_size)
    n_q = sum(len(v) for v in vals["query"][0])
    boot = rng.integers(0, n_q, (min(n_resamples, 400), n_q))
    result = []
    for col, (value, ci) in enumerate(((doc.recall, doc.recall_ci), (doc.ndcg, doc.ndcg_ci))):
        d = np.concatenate(vals["document"][col])
        q = np.concatenate(vals["query"][col])

        def ratio(dd, qq):
            return max(qq.mean() - c_fold, 1e-3) / max(dd.mean() - c_fold, 1e-3)

        r = ratio(d, q)
        rs = np.array([ratio(d[b], q[b]) for b in boot])
        tail = (1 - confidence) / 2 * 100
        r_lo, r_hi = np.percentile(rs, [tail, 100 - tail])

        def scale(v, f):
            return float(min(max(c_n + (v - c_n) * f, 0.0), 1.0))

        result.append((scale(value, r), (scale(ci[0], r_lo), scale(ci[1], r_hi)),
                       float(q.mean())))
    (rec, rci, measured), (nd, nci, _) = result
    if not doc.supported:
        # folds of a dozen items measure no ratio worth carrying: say only what is known
        rec, rci, nd, nci = doc.recall, (c_n, 1.0), doc.ndcg, (c_n, 1.0)
    return Estimate(name, "query", how, rec, rci, nd, nci, doc.store_size, doc.extrapolated,
                    float(fit_seconds), supported=doc.supported,
                    measured_size=doc.measured_size, measured_recall=measured,
                    slope=doc.slope)


def scale_curves(curves, estimates):
    """Carry each method's learning curve to the store size of its document-side estimate.

    The curve's shape over the number of pairs is measured on the held-out fifth; it is scaled
    so that its last point (fitted on as many pairs as the cross-fitted estimate's folds) equals
    that estimate, so that the budget curve and the estimates tell one story.
    """
    out = {}
    for name, pts in curves.items():
        pts = dict(pts)
        out[name] = pts
        doc = next((e for e in estimates if e.method == name and e.side == "document"), None)
        if doc is None or not pts["recall"]:
            continue
        f = doc.recall / max(pts["recall"][-1], 1e-9)
        pts["recall_std"] = [v * f for v in pts["recall_std"]]
        for key, value in (("recall", doc.recall), ("ndcg", doc.ndcg)):
            f = value / max(pts[key][-1], 1e-9)
            pts[key] = [min(v * f, 1.0) for v in pts[key]]
    return out


def _ceiling(inputs, oracles, truth):
    rng = np.random.default_rng([inputs.random_state, 2])
    best = None
    for name, index in oracles:
        e = estimate(name, "document", inputs.Y, index, inputs.Y, inputs.k, inputs.store_size,
                     inputs.n_resamples, inputs.confidence, rng, 0.0, "", truth)
        if best is None or e.recall > best.recall:
            best = e
    return {"method": best.method, "recall": best.recall, "recall_ci": best.recall_ci,
            "ndcg": best.ndcg, "extrapolated": best.extrapolated,
            "how": "oracle: the best of ridge (LOO alpha) and centred Procrustes fitted on all "
                   "pairs and scored on the same pairs (in sample)"}


def _depth(m, k):
    """Depth of the rankings kept for a store of ``m`` items."""
    return min(RANK_DEPTH_K * k, m - 1)


def _ranked(Q, T, depth):
    """The first ``depth`` rows of ``T`` by cosine to each row of ``Q``, best first, the two
    the same items (row ``i`` never ranks itself); int32 array of shape (n, depth).

    Similarities are computed a block of rows at a time (about 128 MiB of float32 each).
    """
    import torch

    from ..utils._backend import row_normalize, work_threads

    out = np.empty((len(Q), depth), dtype=np.int32)
    # the sub-stores' rankings are small: on one thread where a busy machine's second only waits
    with work_threads(len(Q) * len(T) * T.shape[1]):
        Tt = row_normalize(torch.from_numpy(np.ascontiguousarray(T, dtype=np.float32)))
        Qt = Tt if Q is T else row_normalize(torch.from_numpy(
            np.ascontiguousarray(Q, dtype=np.float32)))
        block = max(1, 2 ** 25 // max(len(Tt), 1))
        for s in range(0, len(Qt), block):
            S = Qt[s:s + block] @ Tt.T
            rows = torch.arange(S.shape[0])
            S[rows, rows + s] = -torch.inf
            out[s:s + block] = torch.topk(S, depth, dim=1).indices.numpy()
    return out


def _within(ranking, idx, k):
    """Each item's top-``k`` within the sub-store ``idx`` (sorted store rows), as sub-store
    rows, read off the store's ``ranking`` (:func:`_ranked`); ``None`` when some item's ranking
    holds fewer than ``k`` of the sub-store's items."""
    where = np.full(len(ranking), -1, dtype=np.int64)
    where[idx] = np.arange(len(idx))
    sub = where[ranking[idx]]
    inside = sub >= 0
    first = inside & (np.cumsum(inside, axis=1) <= k)
    if not (first.sum(axis=1) == k).all():
        return None
    return sub[first].reshape(len(idx), k)


def _retention(R, S, k):
    """Per item: recall@k and nDCG@k of the ranked top-``k`` ``S`` against the true top-``k``
    ``R`` (the formulas of :func:`skalign.metrics.retrieval_retention`)."""
    import torch

    from ..utils._backend import one_thread

    with one_thread():  # comparisons of k x k indices per item
        hit = (torch.from_numpy(np.asarray(S, dtype=np.int64)).unsqueeze(2)
               == torch.from_numpy(np.asarray(R, dtype=np.int64)).unsqueeze(1)).any(dim=2)
        hit = hit.double()
        discount = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64))
        return (hit.sum(dim=1) / k).numpy(), \
            ((hit * discount).sum(dim=1) / discount.sum()).numpy()


def _ranks(true, In, Qn, block=512):
    """Per query (leave-one-out): the rank, in the ranking of the unit ``Qn`` against the unit
    ``In``, of each item of its true top-``k`` (the rows ``true``, shape (n, k))."""
    from ..utils._backend import work_threads

    out = np.empty(true.shape, dtype=np.int64)
    with work_threads(len(Qn) * len(In) * In.shape[1]):
        for s in range(0, len(true), block):
            rows = np.arange(s, min(s + block, len(true)))
            Sc = Qn[rows] @ In.T
            Sc[np.arange(len(rows)), rows] = -np.inf
            score = np.take_along_axis(Sc, true[rows].astype(np.int64), axis=1)
            out[rows] = (Sc[:, None, :] > score[:, :, None]).sum(axis=2)
    return out


def rerank_option(Y, index, queries, k, store_size, target, n_resamples, confidence, rng,
                  truth=None):
    """The smallest ``K`` of :data:`RERANK_KS` whose translated top-``K`` is predicted to hold
    ``target`` of the true top-``k`` in a store of ``store_size`` (or the largest measurable).

    The share of the true top-``k`` inside the top-``K`` is measured, like every estimate, on
    nested sub-stores (those of at least ``MIN_STORE_K * K`` items) and carried to the store
    size by :func:`project` with ``K`` in the place of ``k``.

    Returns
    -------
    rerank : dict or None
        ``{"k_candidates", "recall_at_10", "recall_ci", "supported", "encoded_per_query"}``;
        ``None`` when no ``K`` fits the evaluation store.

    ``truth`` is the new model's ranking of the store (:func:`_ranked`), when made already.
    """
    m = len(Y)
    ks = [K for K in RERANK_KS if MIN_STORE_K * K <= m and K < store_size - 1]
    if not ks:
        return None
    In, Qn = unit(index), unit(queries)
    if truth is None:
        truth = _ranked(Y, Y, _depth(m, k))
    ranks = {}

    def score(idx):
        true = _within(truth, idx, k)
        if true is None:  # too small a share of the store: ranked on its own
            Ys = Y[idx]
            true = _ranked(Ys, Ys, k)
        r = _ranks(true, In[idx], Qn[idx])
        ranks[len(idx)] = ranks.get(len(idx), []) + [r]
        return 0.0, 0.0

    sizes, _ = substore_draws(score, m, ks[0], rng)
    full = ranks[m][0]
    best = None
    for K in ks:
        keep = sizes >= MIN_STORE_K * K
        sel = sizes[keep]
        draws = np.array([[float((ranks[int(s)][min(d, len(ranks[int(s)]) - 1)] < K).mean())
                           for s in sel] for d in range(SUBSTORE_DRAWS)])
        per = (full < K).mean(axis=1)
        p = project(sel, draws, percentile_ci(per, n_resamples, confidence, rng), store_size,
                    K, confidence)
        best = {"k_candidates": int(K), "recall_at_10": p["value"], "recall_ci": p["ci"],
                "supported": bool(p["supported"]), "encoded_per_query": int(K)}
        if p["supported"] and p["value"] >= target:
            break
    return best


def chance(k, m):
    """What a random ranking keeps of the top-``k`` in a store of ``m`` (leave-one-out)."""
    return min(k / max(m - 1, 1), 1.0)


def percentile_ci(values, n_resamples, confidence, rng):
    """Percentile bootstrap interval of the mean of ``values`` (``n_resamples`` resamples)."""
    n = len(values)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 256):
        stop = min(start + 256, n_resamples)
        means[start:stop] = values[rng.integers(0, n, (stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def substores(m_max, k, rng):
    """Nested random sub-stores of an evaluation store of ``m_max`` items.

    Parameters
    ----------
    m_max : int
        Items in the evaluation store.
    k : int
        Neighbourhood size.
    rng : numpy.random.Generator

    Returns
    -------
    sizes : ndarray of int
        Sub-store sizes, increasing, the last ``m_max`` (the whole store, not drawn).
    draws : list of list of ndarray
        ``draws[j][d]``: the sorted item rows of draw ``d`` at ``sizes[j]``, for every size but
        the last (``SUBSTORE_DRAWS`` draws each).
    """
    sizes = []
    m = m_max
    while m >= MIN_STORE_K * k:
        sizes.append(m)
        m //= 2
    sizes = np.array(sizes[::-1] or [m_max])
    draws = [[np.sort(rng.choice(m_max, m, replace=False)) for _ in range(SUBSTORE_DRAWS)]
             for m in sizes[:-1]]
    return sizes, draws


def substore_draws(score, m_max, k, rng, full=None):
    """Mean retention on nested random sub-stores (:func:`substores`) of an evaluation store
    of ``m_max`` items.

    Parameters
    ----------
    score : callable
        ``score(idx) -> (recall, ndcg)`` of the sub-store ``idx``, each of its items a query
        against the others.
    m_max : int
        Items in the evaluation store.
    k : int
        Neighbourhood size.
    rng : numpy.random.Generator
    full : (float, float), default=None
        ``score`` of the whole store where it is known already (it is not scored again).

    Returns
    -------
    sizes : ndarray of int
        Sub-store sizes, increasing, the last ``m_max``.
    draws : ndarray of shape (SUBSTORE_DRAWS, n_sizes, 2)
        Recall and nDCG of each draw at each size (the full store scored once, repeated).
    """
    sizes, subs = substores(m_max, k, rng)
    draws = np.zeros((SUBSTORE_DRAWS, len(sizes), 2))
    draws[:, -1] = score(np.arange(m_max)) if full is None else full
    for j, per_size in enumerate(subs):
        for d, idx in enumerate(per_size):
            draws[d, j] = score(idx)
    return sizes, draws


def _slope(sizes, values, k, corrected):
    if corrected:
        values = [(v - chance(k, m)) / (1 - chance(k, m)) for v, m in zip(values, sizes)]
    y = np.log(np.maximum(np.asarray(values, dtype=float), 1e-3))
    return min(float(np.polyfit(np.log(sizes), y, 1)[0]), 0.0)


def _carry(value, m, store_size, k, slope, corrected):
    """``value`` measured on ``m`` items carried to ``store_size`` by one of the two laws."""
    if not corrected:
        return max(value, 1e-3) * (store_size / m) ** slope
    c_m, c_n = chance(k, m), chance(k, store_size)
    rho = max((value - c_m) / (1 - c_m), 1e-3)
    return c_n + (1 - c_n) * rho * (store_size / m) ** slope


def project(sizes, draws, anchor_ci, store_size, k, confidence):
    """Carry a retention measured on ``sizes[-1]`` items to a store of ``store_size``.

    Parameters
    ----------
    sizes : ndarray of int
        Nested sub-store sizes, increasing.
    draws : ndarray of shape (n_draws, n_sizes)
        Mean retention of each draw at each size (one metric).
    anchor_ci : (float, float)
        Interval of the retention on the full evaluation store, over queries.
    store_size : int
        Store size to predict for.
    k : int
        Neighbourhood size.
    confidence : float
        Coverage of the interval.

    Returns
    -------
    projection : dict
        ``{"value", "ci", "slope", "supported"}``; ``slope`` is ``b`` of the law.
    """
    from scipy.stats import norm

    m = int(sizes[-1])
    anchor = float(draws[0, -1])
    means = draws.mean(axis=0)
    z = norm.ppf(0.5 + confidence / 2)
    if len(sizes) > 1 and 2 * sizes[-2] >= m - 1:
        # which items make up the store matters beyond the query sampling (near-duplicate
        # texts share neighbours): random half-stores vary as much as independent stores of m
        # items would, so their spread widens the anchor's interval
        comp = z * float(np.std(draws[:, -2], ddof=1))
        half = np.hypot((anchor_ci[1] - anchor_ci[0]) / 2, comp)
        centre = (anchor_ci[0] + anchor_ci[1]) / 2
        anchor_ci = (max(centre - half, 0.0), min(centre + half, 1.0))
    if store_size <= m:
        # a store no larger than the one measured: read between the sub-stores
        value = float(np.interp(np.log(store_size), np.log(sizes), means))
        shift = value - anchor
        return {"value": value, "ci": (max(anchor_ci[0] + shift, 0.0),
                                       min(anchor_ci[1] + shift, 1.0)),
                "slope": 0.0, "supported": True}
    c_n = chance(k, store_size)
    if len(sizes) < 2:
        return {"value": float(_carry(anchor, m, store_size, k, 0.0, True)),
                "ci": (float(c_n), float(min(anchor_ci[1], 1.0))), "slope": 0.0,
                "supported": False}
    dist = np.log(store_size / m)
    # the two laws: on the recall as measured (steeper: chance inflates the small sub-stores)
    # and above chance (flatter); the estimate is their geometric mean, the gap part of the
    # interval
    ends, spreads = [], []
    for corrected in (False, True):
        slope = _slope(sizes, means, k, corrected)
        slopes = [_slope(sizes, d, k, corrected) for d in draws]
        spreads.append(float(np.std(slopes, ddof=1)))
        ends.append((slope, [np.log(_carry(v, m, store_size, k, slope, corrected))
                             for v in (anchor_ci[0], anchor, anchor_ci[1])]))
    (s_raw, raw), (_, cor) = ends
    centre = (raw[1] + cor[1]) / 2
    spread = np.sqrt(max(spreads) ** 2 + LAW_SPREAD ** 2) * z * dist
    lo = min(raw[0], cor[0]) - spread
    hi = max(raw[2], cor[2]) + spread

    def back(v):
        return float(min(max(np.exp(v), c_n), 1.0))

    return {"value": back(centre), "ci": (back(lo), back(hi)), "slope": s_raw,
            "supported": True}
