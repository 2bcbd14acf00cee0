"""Every option of :mod:`skalign.plan` priced side by side: stay, translate, bridge, rerank,
re-embed, and the budget curve over the number of re-embedded pairs.

*Stay* is the old model's own top-``k`` (old queries on the old store) against the new
model's, measured on the pairs (no fit, so every pair is an evaluation item). *Rerank* is the
translated store's top-``K`` re-scored with the new encoder's vectors of those ``K``
candidates: it finds exactly the true top-``k`` items that are among the candidates, so its
recall@k is the share of the true top-``k`` inside the translated top-``K``, carried to the
store size by the same law with ``K`` in the place of ``k`` (chance ``K / (N - 1)``).
"""

from __future__ import annotations

import numpy as np

from ._estimate import _percentile_ci
from ._law import MIN_STORE_K, SUBSTORE_DRAWS, project, substore_draws

#: candidate counts the rerank option tries, cheapest first
RERANK_KS = (20, 50, 100, 200, 500, 1000, 2000)


def _unit(A):
    A = np.asarray(A, dtype=np.float32)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


def _ranks(Y, index, queries, k, block=512):
    """Per query (leave-one-out): the rank, in the ranking of ``queries`` against ``index``, of
    each item of its true top-``k`` (cosine in ``Y``); shape (n, k)."""
    Yn, In, Qn = _unit(Y), _unit(index), _unit(queries)
    out = np.empty((len(Y), k), dtype=np.int64)
    for s in range(0, len(Y), block):
        rows = np.arange(s, min(s + block, len(Y)))
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
    ranks = {}

    def score(idx):
        r = _ranks(Y[idx], index[idx], queries[idx], k)
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
        p = project(sel, draws, _percentile_ci(per, n_resamples, confidence, rng), store_size,
                    K, confidence)
        best = {"k_candidates": int(K), "recall_at_10": p["value"], "recall_ci": p["ci"],
                "supported": bool(p["supported"]), "encoded_per_query": int(K)}
        if p["supported"] and p["value"] >= target:
            break
    return best


def stay_estimate(X, Y, k, store_size, n_resamples, confidence, rng):
    """What staying on the old model keeps of the new model's top-``k`` (see the module
    docstring), as an :class:`~skalign.plan._result.Estimate`."""
    from ._estimate import _estimate

    return _estimate("stay", "stay", Y, X, X, k, store_size, n_resamples, confidence, rng, 0.0,
                     "old queries on the old store: the old model's own top-k, no migration")


def crossing(curve, stay):
    """The first pair count of the budget curve at which translating keeps at least staying."""
    for n, r in zip(curve["n_pairs"], curve["recall"]):
        if r >= stay:
            return int(n)
    return None


def at_budget(curve, budget):
    """Recall@k predicted with ``budget`` pairs: read off the budget curve, or carried past
    its last point by the last step's gain per doubling (never above the curve's ceiling)."""
    n = np.asarray(curve["n_pairs"], float)
    r = np.asarray(curve["recall"], float)
    if budget <= n[-1]:
        return float(np.interp(np.log(budget), np.log(n), r)), False
    gain = (r[-1] - r[-2]) / np.log2(n[-1] / n[-2]) if len(n) > 1 else 0.0
    value = r[-1] + max(gain, 0.0) * np.log2(budget / n[-1])
    return float(min(value, curve.get("ceiling", 1.0))), True


def _budget(plan, budget):
    """The budget curve of the best document-side method at the store size: recall@k against
    pairs, where it overtakes staying, and what ``budget`` pairs would keep."""
    best = plan.best("document")
    if best is None or best.method not in plan.learning_curve:
        return {}
    curve = dict(plan.learning_curve[best.method], ceiling=plan.ceiling["recall"])
    stay = plan.stay["recall"]
    out = {"method": best.method, "n_pairs": curve["n_pairs"], "recall": curve["recall"],
           "store_size": plan.store_size, "stay": stay,
           "overtakes_stay_at": crossing(curve, stay)}
    if out["overtakes_stay_at"] is None and curve["recall"][-1] < stay:
        for n in (2 ** i * curve["n_pairs"][-1] for i in range(1, 11)):
            value, _ = at_budget(curve, n)
            if value >= stay:
                out["overtakes_stay_at"] = int(n)
                out["overtakes_stay_extrapolated"] = True
                break
    if budget is not None:
        value, extrapolated = at_budget(curve, budget)
        out.update(budget=int(budget), recall_at_budget=value,
                   budget_extrapolated=bool(extrapolated))
    return out


def written_at_budget(plan, Y, index, random_state):
    """Price the store ``skalign migrate --budget B`` writes (:mod:`skalign._migrate.calibration`:
    the ``B`` encoded rows' exact vectors among calibrated translations, or translations only)
    and put it in ``plan.budget``: ``recall_at_budget`` and ``recall_at_budget_ci`` become the
    written store's, ``translated_at_budget`` keeps the budget curve's (every row translated)
    and ``written`` says which store and calibration.

    The written store is priced on the plan's own evaluation store (``Y`` and its cross-fitted
    translations ``index``) with a share ``B / store_size`` of its rows exact, and carried to
    ``B`` pairs by the budget curve: its gain over translating every row, priced the same way
    on the same store, is added to the curve's value at ``B``, its interval shifted with it.
    Nothing is done without a budget curve or for a budget that covers the store.
    """
    from .._migrate.calibration import price_written

    b = plan.budget
    best = plan.best("document")
    if not b or "budget" not in b or best is None or b["budget"] >= plan.store_size:
        return
    share = b["budget"] / plan.store_size
    est = price_written(index, Y, share, plan.store_size, k=plan.k,
                        random_state=random_state).estimate
    every = price_written(index, Y, share, plan.store_size, k=plan.k, random_state=random_state,
                          option=("translate all", "none", 1.0)).estimate
    shift = b["recall_at_budget"] - every["recall_at_10"]
    b["translated_at_budget"] = b["recall_at_budget"]
    b["recall_at_budget"] = float(min(max(est["recall_at_10"] + shift, 0.0), 1.0))
    b["recall_at_budget_ci"] = [float(min(max(v + shift, 0.0), 1.0))
                                for v in est["interval"]]
    b["written"] = {"store": est["store"], "calibration": est["calibration"],
                    "share": round(share, 4), "check": est["check"]}


def _options(plan):
    """Stay, translate, bridge, translate + rerank and re-embed, cheapest first."""
    def row(option, e, cost, per_query=0, **extra):
        return dict(option=option, method=e.get("method"), recall=e["recall"],
                    recall_ci=tuple(e["recall_ci"]), supported=bool(e.get("supported", True)),
                    encoded_texts=int(cost), encoded_per_query=int(per_query), **extra)

    rows = [row("stay", plan.stay, 0)]
    for option, side in (("translate", "document"), ("bridge queries", "query")):
        best = plan.best(side)
        if best is not None:
            rows.append(row(option, vars(best), 0))
    if plan.rerank:
        r = plan.rerank
        rows.append(row("translate + rerank", {"method": plan.best("document").method,
                                               "recall": r["recall_at_10"],
                                               "recall_ci": r["recall_ci"],
                                               "supported": r["supported"]},
                        0, r["k_candidates"], k_candidates=r["k_candidates"]))
    rows.append(row("re-embed", {"recall": 1.0, "recall_ci": (1.0, 1.0)}, plan.store_size))
    return rows
