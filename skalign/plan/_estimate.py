"""Stage 4 of :mod:`skalign.plan`: the estimates, carried to the store size.

:func:`estimate` scores one evaluation store (every item translated by a fit that never saw
it) and carries recall@k and nDCG@k to the user's store size by the law of
:mod:`skalign.plan._law`; :func:`bridged` derives the query side from the document side and the
two sides measured on the same held-out folds. :func:`estimates` makes every estimate of a plan
from the fits: each method on each side, staying on the old model, translate + rerank, the
ceiling, the budget curve carried to the store size and, with a budget, the store ``skalign
migrate --budget`` writes (see the module docstring of :mod:`skalign.plan`).

*Stay* is the old model's own top-``k`` (old queries on the old store) against the new
model's, measured on the pairs (no fit, so every pair is an evaluation item). *Rerank* is the
translated store's top-``K`` re-scored with the new encoder's vectors of those ``K``
candidates: it finds exactly the true top-``k`` items that are among the candidates, so its
recall@k is the share of the true top-``k`` inside the translated top-``K``, carried to the
store size by the same law with ``K`` in the place of ``k`` (chance ``K / (N - 1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._candidates import unit
from ._law import MIN_STORE_K, SUBSTORE_DRAWS, chance, percentile_ci, project, substores
from ._result import Estimate, best_estimate

__all__ = ["Estimates", "RERANK_KS", "estimates"]

#: candidate counts the rerank option tries, cheapest first
RERANK_KS = (20, 50, 100, 200, 500, 1000, 2000)


@dataclass(frozen=True)
class Estimates:
    """Every estimate of a plan (the fields of :class:`~skalign.plan.MigrationPlan` of the same
    names), the document side's evaluation store of each method (``doc_stores``), and the
    store ``migrate --budget`` writes priced on the best method's (``written``: the chosen
    store's and every row translated's :func:`~skalign._migrate.calibration.price_written`
    estimates, or ``None``); ``best`` the estimate with the highest recall@k on each side
    (``None`` for a side not estimated)."""

    estimates: list
    stay: dict
    rerank: object
    ceiling: dict
    learning_curve: dict
    curve_store_size: int
    written: object
    notes: tuple
    best: dict


def estimates(inputs, fits):
    """The estimates of a plan from its ``fits`` (see :class:`Estimates`)."""
    k, size, rs = inputs.k, inputs.store_size, inputs.random_state
    n_resamples, confidence, rng = inputs.n_resamples, inputs.confidence, inputs.rng
    Y_eval = fits.Y_eval
    out = []
    for name, folds in fits.folds.items():
        test, index, queries = fits.doc_stores[name]
        doc = estimate(name, "document", Y_eval[test], index, queries, k, size, n_resamples,
                       confidence, rng, fits.fit_seconds[name], fits.how[name]["document"])
        if "document" in inputs.sides:
            out.append(doc)
        if "query" in inputs.sides and "query" in folds:
            if len(folds["query"]) == 1:
                test, index, queries = folds["query"][0]
                out.append(estimate(name, "query", Y_eval[test], index, queries, k, size,
                                    n_resamples, confidence, rng, fits.fit_seconds[name],
                                    fits.how[name]["query"]))
            else:
                out.append(bridged(doc, name, Y_eval, folds["document"], folds["query"], k,
                                   n_resamples, confidence, rng, fits.fit_seconds[name],
                                   fits.how[name]["query"]))
    stay = estimate("stay", "stay", inputs.Y, inputs.X, inputs.X, k, size, n_resamples,
                    confidence, np.random.default_rng([rs, 3]), 0.0,
                    "old queries on the old store: the old model's own top-k, no migration")
    curves = scale_curves(fits.curves, out)
    ceiling = _ceiling(inputs, fits.oracles)
    best_doc = best_estimate(out, "document")
    rerank, written = {}, None
    if best_doc is not None:
        test, index, queries = fits.doc_stores[best_doc.method]
        rerank = rerank_option(Y_eval[test], index, queries, k, size,
                               max(inputs.min_recall, stay.recall), n_resamples, confidence,
                               np.random.default_rng([rs, 4]))
        budget = None if inputs.budget is None else int(inputs.budget)
        if budget is not None and best_doc.method in curves and budget < size:
            written = written_store(Y_eval[test], index, budget / size, size, k, rs)
    return Estimates(estimates=out, stay=_as_dict(stay), rerank=rerank, ceiling=ceiling,
                     learning_curve=curves, curve_store_size=fits.curve_store_size,
                     written=written, notes=_notes(out, inputs),
                     best={side: best_estimate(out, side) for side in ("document", "query")})


def _as_dict(e):
    from dataclasses import asdict

    return asdict(e)


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


def _drawn(score, m, sizes, subs):
    """``score`` of the whole store and of every drawn sub-store, as
    :func:`~skalign.plan._law.substore_draws` returns them."""
    draws = np.zeros((SUBSTORE_DRAWS, len(sizes), 2))
    draws[:, -1] = score(np.arange(m))
    for j, per_size in enumerate(subs):
        for d, idx in enumerate(per_size):
            draws[d, j] = score(idx)
    return draws


def estimate(name, side, Y, index, queries, k, store_size, n_resamples, confidence, rng,
             fit_seconds, how):
    """Retention on one evaluation store (rows of ``Y``, ``index``, ``queries`` aligned),
    carried to ``store_size``."""
    from ..metrics import retrieval_retention

    def score(idx):
        r = retrieval_retention(Y[idx], index[idx], Y[idx], queries[idx], k=k,
                                exclude_self=True)
        return r["recall"], r["ndcg"]

    per = retrieval_retention(Y, index, Y, queries, k=k, exclude_self=True, per_query=True)
    m = len(Y)
    sizes, subs = substores(m, k, rng)
    draws = _drawn(score, m, sizes, subs)
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
            how):
    """The query side from the document side ``doc``: both sides are measured on the same
    held-out folds (leak-free, but small); the ratio of their retentions above chance
    multiplies the document side's carried to the store size."""
    from ..metrics import retrieval_retention

    vals = {"document": ([], []), "query": ([], [])}
    sizes = []
    for side, folds in (("document", doc_folds), ("query", query_folds)):
        for test, index, queries in folds:
            per = retrieval_retention(Y[test], index, Y[test], queries, k=k, exclude_self=True,
                                      per_query=True)
            vals[side][0].append(per["recall"])
            vals[side][1].append(per["ndcg"])
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


def _ceiling(inputs, oracles):
    rng = np.random.default_rng([inputs.random_state, 2])
    best = None
    for name, index in oracles:
        e = estimate(name, "document", inputs.Y, index, inputs.Y, inputs.k, inputs.store_size,
                     inputs.n_resamples, inputs.confidence, rng, 0.0, "")
        if best is None or e.recall > best.recall:
            best = e
    return {"method": best.method, "recall": best.recall, "recall_ci": best.recall_ci,
            "ndcg": best.ndcg, "extrapolated": best.extrapolated,
            "how": "oracle: the best of ridge (LOO alpha) and centred Procrustes fitted on all "
                   "pairs and scored on the same pairs (in sample)"}


def _ranks(Yn, In, Qn, k, block=512):
    """Per query (leave-one-out): the rank, in the ranking of the unit ``Qn`` against the unit
    ``In``, of each item of its true top-``k`` (cosine in the unit ``Yn``); shape (n, k)."""
    out = np.empty((len(Yn), k), dtype=np.int64)
    for s in range(0, len(Yn), block):
        rows = np.arange(s, min(s + block, len(Yn)))
        St = Yn[rows] @ Yn.T
        Sc = Qn[rows] @ In.T
        St[np.arange(len(rows)), rows] = -np.inf
        Sc[np.arange(len(rows)), rows] = -np.inf
        true = np.argpartition(-St, k, axis=1)[:, :k]
        score = np.take_along_axis(Sc, true, axis=1)
        out[rows] = (Sc[:, None, :] > score[:, :, None]).sum(axis=2)
    return out


def rerank_option(Y, index, queries, k, store_size, target, n_resamples, confidence, rng):
    """The smallest ``K`` of :data:`RERANK_KS` whose translated top-``K`` is predicted to hold
    ``target`` of the true top-``k`` in a store of ``store_size`` (or the largest measurable).

    The share of the true top-``k`` inside the top-``K`` is measured, like every estimate, on
    nested sub-stores (those of at least ``MIN_STORE_K * K`` items) and carried to the store
    size by :func:`skalign.plan._law.project` with ``K`` in the place of ``k``.

    Returns
    -------
    rerank : dict or None
        ``{"k_candidates", "recall_at_10", "recall_ci", "supported", "encoded_per_query"}``;
        ``None`` when no ``K`` fits the evaluation store.
    """
    m = len(Y)
    ks = [K for K in RERANK_KS if MIN_STORE_K * K <= m and K < store_size - 1]
    if not ks:
        return None
    Yn, In, Qn = unit(Y), unit(index), unit(queries)
    ranks = {}

    def score(idx):
        r = _ranks(Yn[idx], In[idx], Qn[idx], k)
        ranks[len(idx)] = ranks.get(len(idx), []) + [r]
        return 0.0, 0.0

    sizes, subs = substores(m, ks[0], rng)
    _drawn(score, m, sizes, subs)
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


def written_store(Y, index, share, store_size, k, random_state):
    """The store ``skalign migrate --budget B`` writes (:mod:`skalign._migrate.calibration`:
    the ``B`` encoded rows' exact vectors among calibrated translations, or translations only),
    priced on the plan's own evaluation store (``Y`` and its cross-fitted translations
    ``index``) with a share ``B / store_size`` of its rows exact, beside every row translated,
    priced the same way on the same store: ``(chosen, every)`` estimates."""
    from .._migrate.calibration import price_written

    chosen = price_written(index, Y, share, store_size, k=k, random_state=random_state).estimate
    every = price_written(index, Y, share, store_size, k=k, random_state=random_state,
                          option=("translate all", "none", 1.0)).estimate
    return chosen, every
