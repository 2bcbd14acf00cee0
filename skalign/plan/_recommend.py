r"""Stages 5 and 6 of :mod:`skalign.plan`: every option priced, and the recommendation.

:func:`price_options` prices the options side by side — stay, translate, bridge, translate +
rerank, re-embed — with the budget curve over the number of re-embedded pairs and, with a
budget, the store ``skalign migrate --budget`` writes (:func:`written_store`).

:func:`recommend` makes the recommendation: which option, method and side, why, and the
commands that carry it out. The best estimate per side, with the preferences where the
estimates cannot tell candidates apart (documents over queries, a map fitted on the pairs alone
over one that also needs the unpaired samples), re-embedding below ``min_recall``. With a
budget, the option that keeps the most within it is named beside the cheapest when its gain is
larger than the overlap of the two intervals.

Judged queries
--------------
With judged queries the recommendation is made on their nDCG@k (:func:`judged_options`).
Agreement with the new model's neighbours cannot tell whether the new model is better on the
user's own queries; judged queries can. Given the judged queries embedded by both models
(row-aligned) and relevance labels of the pairs' items, every option ranks the pairs' items
for every query and is scored by nDCG@k with linear gains, as ``trec_eval``'s ``ndcg_cut``
computes it:

.. math::

    \mathrm{nDCG@}k(q) = \frac{\sum_{r=1}^{k} g_{q, d_r} / \log_2(r + 1)}
    {\sum_{r=1}^{k} g^{*}_{q, r} / \log_2(r + 1)},

``g_{q,d}`` the label of item ``d`` for ``q`` (0 when unjudged), ``g^*_q`` the labels of ``q``
sorted in decreasing order; averaged over the queries with at least one positive label.

* *stay*: old-model queries against the old vectors; *re-embed*: new-model queries against the
  new vectors;
* *translate*: new-model queries against the old vectors translated, and *bridge*: the queries
  mapped into the old space against the old vectors, each item scored by a fit of the
  cross-fitting fold that left it out (an item a map was fitted on would be scored through the
  inner products the fit reproduces);
* *translate + rerank*: the translated top-``K`` re-scored with the new vectors.

The collection is the pairs' items: nDCG@k is for that collection, not carried to another size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._estimate import percentile_ci
from ._inputs import MAP_ROUNDS, RIDGE_ALPHAS, unit

__all__ = ["Options", "Recommendation", "price_options", "recommend"]


@dataclass(frozen=True)
class Options:
    """The options, cheapest first, and the budget curve (the fields of
    :class:`~skalign.plan.MigrationPlan` of the same names)."""

    options: list
    budget: dict
    notes: tuple


@dataclass(frozen=True)
class Recommendation:
    """:attr:`MigrationPlan.recommendation` and, with judged queries, :attr:`MigrationPlan.judged`
    (else empty)."""

    recommendation: dict
    judged: dict


def price_options(inputs, est):
    """The options and the budget curve of the estimates ``est``, with ``est.budget_store``
    the store ``skalign migrate --budget`` writes priced in (:func:`written_store`)."""
    budget = inputs.budget
    notes = ()
    if budget is not None and not est.learning_curve:
        notes = (f"--budget {budget} is not priced: it is read off the budget curve, which "
                 + ("--no-curve skipped" if not inputs.curve else
                    f"{inputs.n_pairs} pairs are too few for"),)
    b = budget_curve(est, inputs.store_size, budget)
    if est.budget_store is not None and "budget" in b:
        size = inputs.store_size
        written = written_store(*est.budget_store, int(budget) / size, size, inputs.k,
                                inputs.random_state)
        b = at_written(b, written, size)
    return Options(options=options(est, inputs.store_size), budget=b, notes=notes)


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


def budget_curve(est, store_size, budget):
    """The budget curve of the best document-side method at the store size: recall@k against
    pairs, where it overtakes staying, and what ``budget`` pairs would keep."""
    best = est.best["document"]
    if best is None or best.method not in est.learning_curve:
        return {}
    curve = dict(est.learning_curve[best.method], ceiling=est.ceiling.get("recall", 1.0))
    stay = est.stay["recall"]
    out = {"method": best.method, "n_pairs": curve["n_pairs"], "recall": curve["recall"],
           "store_size": store_size, "stay": stay,
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


def at_written(b, written, store_size):
    """The budget curve ``b`` with the store ``skalign migrate --budget B`` writes priced in:
    ``recall_at_budget`` and ``recall_at_budget_ci`` become the written store's,
    ``translated_at_budget`` keeps the budget curve's (every row translated) and ``written``
    says which store and calibration.

    ``written`` holds the written store's and every row translated's estimates on the plan's
    own evaluation store (:func:`written_store`): the written store's
    gain over translating every row is added to the curve's value at ``B``, its interval
    shifted with it.
    """
    chosen, every = written
    shift = b["recall_at_budget"] - every["recall_at_10"]
    return dict(b, translated_at_budget=b["recall_at_budget"],
                recall_at_budget=float(min(max(chosen["recall_at_10"] + shift, 0.0), 1.0)),
                recall_at_budget_ci=[float(min(max(v + shift, 0.0), 1.0))
                                     for v in chosen["interval"]],
                written={"store": chosen["store"], "calibration": chosen["calibration"],
                         "share": round(b["budget"] / store_size, 4),
                         "check": chosen["check"]})


def options(est, store_size):
    """Stay, translate, bridge, translate + rerank and re-embed, cheapest first."""
    def row(option, e, cost, per_query=0, **extra):
        return dict(option=option, method=e.get("method"), recall=e["recall"],
                    recall_ci=tuple(e["recall_ci"]), supported=bool(e.get("supported", True)),
                    encoded_texts=int(cost), encoded_per_query=int(per_query), **extra)

    rows = [row("stay", est.stay, 0)]
    for option, side in (("translate", "document"), ("bridge queries", "query")):
        best = est.best[side]
        if best is not None:
            rows.append(row(option, vars(best), 0))
    if est.rerank:
        r = est.rerank
        rows.append(row("translate + rerank", {"method": est.best["document"].method,
                                               "recall": r["recall_at_10"],
                                               "recall_ci": r["recall_ci"],
                                               "supported": r["supported"]},
                        0, r["k_candidates"], k_candidates=r["k_candidates"]))
    rows.append(row("re-embed", {"recall": 1.0, "recall_ci": (1.0, 1.0)}, store_size))
    return rows


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


def recommend(inputs, est, opts, fits=None):
    """The recommendation on the estimates ``est`` and the options ``opts``; with judged
    queries, on their nDCG@k, from the similarities the held-out ``fits`` made."""
    rec = _on_recall(inputs, est, opts)
    judged = {}
    if inputs.qrels is not None:
        judged, rec = _on_judged(inputs, est, rec, fits)
    most = None
    if inputs.budget is not None:
        most = most_within_budget(opts.options, opts.budget, int(inputs.budget),
                                  inputs.min_recall, _chosen(rec, est, opts))
    if most is not None:
        k = inputs.k
        rec["reasons"].append(
            f"most kept within --budget {int(inputs.budget):,}: {most['says']} (recall@{k} "
            f"{most['recall']:.3f} [{most['recall_ci'][0]:.3f}, {most['recall_ci'][1]:.3f}] "
            f"against {rec['action']}'s {most['against']:.3f}; the gain is larger than the "
            f"intervals' overlap, {most['overlap']:.3f})")
    rec["most_within_budget"] = most
    return Recommendation(recommendation=rec, judged=judged)


def _chosen(rec, est, opts):
    """The recommended option's ``{"option", "recall", "recall_ci"}`` (a translation's with the
    method recommended, which the tie rules may have preferred to the best)."""
    e = next((e for e in est.estimates if e.method == rec["method"] and e.side == rec["side"]),
             None)
    if rec["action"] in ("translate", "bridge queries") and e is not None:
        return {"option": rec["action"], "recall": e.recall, "recall_ci": e.recall_ci}
    return next((o for o in opts.options if o["option"] == rec["action"]), None)


def most_within_budget(options, budget_curve, budget, min_recall, chosen):
    """The option that keeps the most within ``budget`` encoded texts, when several keep
    ``min_recall`` and its gain over the recommended option ``chosen`` (``{"option", "recall",
    "recall_ci"}``) is larger than the overlap of their intervals; else ``None``.

    The options within the budget are those that encode at most ``budget`` texts once (stay,
    translate, bridge queries, re-embed when the store fits in it; translate + rerank encodes
    per query, which no one-off budget bounds) and *translate with the budget*: the store
    ``skalign migrate --budget`` writes, priced on the budget curve. Returns ``{"option",
    "method", "recall", "recall_ci", "encoded_texts", "gain", "overlap", "against", "says"}``.
    """
    if chosen is None:
        return None
    within = [o for o in options if o["supported"] and not o["encoded_per_query"]
              and o["encoded_texts"] <= budget]
    if "recall_at_budget_ci" in budget_curve and any(o["option"] == "translate"
                                                     for o in within):
        within.append({"option": "translate", "method": budget_curve["method"],
                       "recall": budget_curve["recall_at_budget"],
                       "recall_ci": tuple(budget_curve["recall_at_budget_ci"]),
                       "encoded_texts": int(budget_curve["budget"])})
    keep = [o for o in within if o["recall"] >= min_recall]
    if len(keep) < 2:
        return None
    top = max(keep, key=lambda o: o["recall"])
    gain = top["recall"] - chosen["recall"]
    overlap = max(min(top["recall_ci"][1], chosen["recall_ci"][1])
                  - max(top["recall_ci"][0], chosen["recall_ci"][0]), 0.0)
    if gain <= overlap:
        return None
    name = top["option"] + (f" ({top['method']})" if top["method"] else "")
    cost = top["encoded_texts"]
    says = f"{name} keeps {gain:+.2f} for " + (f"{cost:,} encodes" if cost else "no encodes")
    return {"option": top["option"], "method": top["method"], "recall": float(top["recall"]),
            "recall_ci": tuple(float(v) for v in top["recall_ci"]),
            "encoded_texts": int(top["encoded_texts"]), "gain": float(gain),
            "overlap": float(overlap), "against": float(chosen["recall"]), "says": says}


def _on_judged(inputs, est, rec, fits):
    """Every option priced in nDCG@k on the judged queries, and the recommendation made on
    that: ``(judged, recommendation)``."""
    methods = {side: getattr(est.best[side], "method", None) for side in inputs.sides}
    # a lean plan prices no rerank (0: none)
    rerank_k = est.rerank["k_candidates"] if est.rerank else 0 if inputs.lean else 100
    judged = judged_options(inputs, fits.judged, methods, rerank_k)
    choice = judged_choice(judged)
    lines = judged_reasons(judged, choice, rec["action"])
    action = choice["option"]
    method = choice["method"]
    side = {"translate": "document", "translate + rerank": "document",
            "bridge queries": "query"}.get(action)
    e = next((e for e in est.estimates if e.method == method and e.side == side), None)
    commands = _commands(e, inputs.normalize, est.rerank,
                         rerank=action == "translate + rerank") if e is not None else []
    return judged, dict(rec, action=action, method=method, side=side,
                        reasons=rec["reasons"] + lines, commands=commands)


def _pick(est, side, reasons, candidates):
    """The side's best estimate; one that needs the unpaired samples must beat the best that
    does not by more than half its own interval."""
    best = est.best[side]
    if best is None or not candidates[best.method].learns:
        return best
    plain = max((e for e in est.estimates if e.side == side
                 and not candidates[e.method].learns),
                key=lambda e: e.recall, default=None)
    if plain is not None and best.recall - plain.recall <= (best.recall_ci[1] -
                                                            best.recall_ci[0]) / 2:
        reasons.append(f"{side} side: {best.method} ({best.recall:.3f}) is not ahead of "
                       f"{plain.method} ({plain.recall:.3f}) by more than half its interval; "
                       f"{plain.method} needs no unpaired samples")
        return plain
    return best


def _fmt(e, k):
    ci = e["recall_ci"]
    return f"recall@{k} {e['recall']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _on_recall(inputs, est, opts):
    """The cheapest option predicted to keep ``min_recall``, with coherent reasons."""
    k, min_recall, store_size = inputs.k, inputs.min_recall, inputs.store_size
    ties = []
    best_doc, best_query = (_pick(est, side, ties, inputs.candidates)
                            for side in ("document", "query"))
    stay = est.stay
    reasons = [f"stay on the old model: {_fmt(stay, k)} (its own top-{k} against the new "
               "model's, measured on the pairs)"]
    if best_doc is not None:
        reasons.append(f"translate the documents with {best_doc.method}: {_fmt(vars(best_doc), k)}")
    if best_query is not None:
        reasons.append(f"bridge the queries with {best_query.method}: "
                       f"{_fmt(vars(best_query), k)}")
    if est.rerank:
        r = est.rerank
        reasons.append(f"translate + rerank the top {r['k_candidates']} by the new encoder: "
                       f"recall@{k} {r['recall_at_10']:.3f} [{r['recall_ci'][0]:.3f}, "
                       f"{r['recall_ci'][1]:.3f}] ({r['k_candidates']} texts encoded per query)")
    reasons.append(f"re-embed: recall@{k} 1.000 by definition ({store_size} texts encoded)")
    reasons += ties
    maps = [e for e in (best_doc, best_query) if e is not None]
    top = max((e.recall for e in maps), default=None)
    if top is not None and top < stay["recall"]:
        reasons.append(f"every translation keeps less than staying ({top:.3f} < "
                       f"{stay['recall']:.3f}): migrating that way is worse than not migrating")
    if any(not e.supported for e in maps):
        reasons.append(f"{inputs.n_pairs} pairs are too few to measure how retention falls with "
                       f"the store size: the intervals for {store_size} items run from chance to "
                       "what the pairs measured, and no translation is recommended on them")
    options = [("stay", stay, "stay")]
    if best_doc is not None and best_doc.supported:
        options.append(("translate", vars(best_doc), best_doc))
    if best_query is not None and best_query.supported:
        options.append(("bridge queries", vars(best_query), best_query))
    if est.rerank and est.rerank["supported"]:
        options.append(("translate + rerank", {"recall": est.rerank["recall_at_10"]}, best_doc))
    action, choice = "re-embed", best_doc or best_query
    for name, e, picked in options:
        if e["recall"] >= min_recall:
            action, choice = name, picked
            break
    reasons.append(f"cheapest option that keeps --min-recall {min_recall:.2f}: {action}"
                   + _decided(options, action, min_recall, k))
    ceiling = est.ceiling.get("recall")  # none in a lean plan
    budget = opts.budget
    if action == "re-embed" and ceiling is not None and ceiling < min_recall:
        reasons.append(f"even the ceiling ({ceiling:.3f}, an oracle map fitted and scored on the "
                       "same pairs) is below it: more pairs are unlikely to make a map good enough")
    elif budget:
        at = budget.get("overtakes_stay_at")
        where = ("translation keeps less than staying at every budget tried" if at is None else
                 f"translation overtakes staying from about {at} pairs"
                 + (" (extrapolated past the pairs)" if budget.get("overtakes_stay_extrapolated")
                    else ""))
        reasons.append(f"budget curve ({budget['method']}, store of {budget['store_size']}): "
                       f"{where}")
        if "budget" in budget:
            reasons.append(f"with {budget['budget']} pairs: recall@{k} "
                           f"{budget['recall_at_budget']:.3f}"
                           + (" (extrapolated past the pairs, capped at the ceiling)"
                              if budget["budget_extrapolated"] else ""))
    norms = inputs.row_norms
    ratio = max(norms["source"], norms["target"]) / max(min(norms["source"],
                                                            norms["target"]), 1e-12)
    if not inputs.normalize and ratio > 1.5:
        reasons.append(f"the two spaces' mean row norms differ {ratio:.1f}-fold; maps without a "
                       "scale suffer from it (bridging most): compare with --normalize")
    side = getattr(choice, "side", None)
    commands = _commands(choice, inputs.normalize, est.rerank,
                         rerank=action == "translate + rerank") \
        if action in ("translate", "bridge queries", "translate + rerank") else []
    return {"action": action, "method": getattr(choice, "method", None), "side": side,
            "reasons": reasons, "commands": commands}


def _decided(options, action, min_recall, k):
    """What decided the verdict on recall: the options tried in cost order, each cheaper one
    below ``min_recall`` and the chosen one at or above it."""
    tried = []
    for name, e, _ in options:
        tried.append(f"{name} {e['recall']:.3f} " + ("<" if e["recall"] < min_recall else ">=")
                     + f" {min_recall:.2f}")
        if name == action:
            break
    if action == "re-embed":
        return (f" (no other option keeps it, in cost order: {'; '.join(tried)}; re-embedding "
                f"keeps recall@{k} 1.000 by definition)")
    return f" (options in cost order: {'; '.join(tried)})"


def _commands(choice, normalized, rerank_option, rerank=False):
    """The command lines that carry out the recommended fit (A, B, P, Q as given to plan)."""
    fit = f"skalign fit {choice.method}"
    ridge = ("scoring=recall_retention", "alphas=" + ",".join(f"{a:g}" for a in RIDGE_ALPHAS))
    if choice.method == "bootstrap":
        fit += f" --param map_rounds={MAP_ROUNDS} --param estimator=linear" + "".join(
            f" --param estimator__{p}" for p in ridge)
    if choice.method == "linear":
        fit += "".join(f" --param {p}" for p in ridge)
        if normalized:
            fit += " --param normalize=true"
    if choice.method == "bootstrap" and normalized:
        fit += " --param estimator__normalize=true"
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
    note = ["(the plan fitted on L2-normalised rows: normalise A, B and the store (or the "
            "queries) first)"] if normalized and choice.method == "procrustes" else []
    if rerank:
        note.append(f"(then search the translated store for the top {rerank_option['k_candidates']}"
                    " and re-score those candidates with the new encoder's vectors)")
    return [fit, run] + note


def label_arrays(qrels, queries):
    """``(query position, item row, relevance)`` arrays of every label of ``queries`` in
    ``qrels`` (``ndcg_per_query``'s ``labels``: several rankings of the same queries read them
    once)."""
    q_of = np.repeat(np.arange(len(queries)), [len(qrels[q]) for q in queries])
    items = np.fromiter((d for q in queries for d in qrels[q]), dtype=np.int64,
                        count=len(q_of))
    rel = np.fromiter((r for q in queries for r in qrels[q].values()), dtype=float,
                      count=len(q_of))
    return q_of, items, rel


def ndcg_per_query(ranked, qrels, queries, k, labels=None):
    """nDCG@k (linear gains) of each query in ``queries`` given its ranked item rows.

    Parameters
    ----------
    ranked : array-like of int, shape (n_queries, n_ranked)
        Item rows of each query, best first (the first ``k`` are scored).
    qrels : dict
        ``{query: {item row: relevance}}``; every query of ``queries`` with a positive label.
    queries : sequence
        The queries of ``ranked``'s rows, keys of ``qrels``.
    k : int
        Cut-off.
    labels : tuple of arrays, default=None
        :func:`label_arrays` of ``qrels`` and ``queries`` where already made.

    Returns
    -------
    ndcg : ndarray of shape (n_queries,)
    """
    ranked = np.asarray(ranked, dtype=np.int64)[:, :k]
    nq, depth = ranked.shape
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    # the labels as sorted keys (query position * n_items + item row) and values, looked up
    # for every ranked item at once
    q_of, items, rel = label_arrays(qrels, queries) if labels is None else labels
    width = max(int(items.max(initial=0)), int(ranked.max(initial=0))) + 1
    keys = q_of * width + items
    order = np.argsort(keys, kind="stable")
    keys, sorted_rel = keys[order], rel[order]
    want = np.arange(nq)[:, None] * width + ranked
    at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
    gains = np.where(keys[at] == want, sorted_rel[at], 0.0) if len(keys) else \
        np.zeros(want.shape)
    # the ideal ranking: each query's labels in decreasing order, the first k
    order = np.lexsort((-rel, q_of))
    starts = np.searchsorted(q_of[order], np.arange(nq))
    pos = np.arange(len(order)) - starts[q_of[order]]
    keep = pos < k
    ideal = np.zeros((nq, k))
    ideal[q_of[order][keep], pos[keep]] = rel[order][keep]
    return (gains * disc[:depth]).sum(axis=1) / (ideal * disc).sum(axis=1)


def _top(scores, k):
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def judged_options(inputs, scores, methods, rerank_k):
    """nDCG@k of stay, re-embed, translate, bridge and translate + rerank on the judged queries.

    ``scores[name][side]`` are the judged queries' cosine similarities to the pairs' items, each
    item's column from the fit of the fold that left it out (the held-out fits'
    ``judged``); ``methods`` maps ``"document"``/``"query"`` to the method to price on that
    side (or ``None``); ``rerank_k`` is the rerank option's candidate count. Returns
    ``{"n_queries", "collection", "k", "options": [{"option", "method", "ndcg",
    "ndcg_ci"}]}``.
    """
    k, qrels, queries = inputs.k, inputs.qrels, inputs.judged_rows
    n = inputs.n_pairs
    QA, QB = inputs.queries
    X, Y, QA, QB = unit(inputs.X), unit(inputs.Y), unit(QA[queries]), unit(QB[queries])
    depth = min(max(k, rerank_k or 0), n)
    rng = np.random.default_rng([inputs.random_state, 5])
    ranked = {("stay", None): _top(QA @ X.T, min(k, n)),
              ("re-embed", None): _top(QB @ Y.T, min(k, n))}
    for option, side in (("translate", "document"), ("bridge queries", "query")):
        name = methods.get(side)
        if name is None:
            continue
        cand = _top(scores[name][side], depth)
        ranked[(option, name)] = cand[:, :k]
        if side == "document" and rerank_k:
            exact = np.einsum("qd,qkd->qk", QB, Y[cand])
            order = np.argsort(-exact, axis=1, kind="stable")
            ranked[("translate + rerank", name)] = np.take_along_axis(cand, order,
                                                                      axis=1)[:, :k]
    options = []
    labels = label_arrays(qrels, queries)
    for (option, name), top in ranked.items():
        per = ndcg_per_query(top, qrels, queries, k, labels)
        options.append({"option": option, "method": name, "ndcg": float(per.mean()),
                        "ndcg_ci": percentile_ci(per, inputs.n_resamples, inputs.confidence,
                                                 rng)})
    return {"n_queries": len(queries), "collection": n, "k": k, "options": options}


#: cost order of the options (cheapest first)
COST_ORDER = ("stay", "translate", "bridge queries", "translate + rerank", "re-embed")


def judged_choice(judged, tolerance=0.01):
    """The option to recommend on nDCG: ``"stay"`` when nothing beats staying, else the
    cheapest within ``tolerance`` of the best."""
    opts = sorted(judged["options"], key=lambda o: COST_ORDER.index(o["option"]))
    stay = opts[0]
    best = max(o["ndcg"] for o in opts)
    if stay["ndcg"] >= best:
        return stay
    return next(o for o in opts if o["ndcg"] >= best - tolerance)


def _name(o):
    return o["option"] + (f" ({o['method']})" if o["method"] else "")


def judged_reasons(judged, choice, retention_action, tolerance=0.01):
    """The lines that say what decided a verdict made on the judged queries: which option
    scored best, whether the tie rule (the cheapest option within ``tolerance`` nDCG of the
    best) or staying's lead chose ``choice``, and that it overrides ``retention_action``, the
    verdict on recall alone, when the two differ."""
    k = judged["k"]
    opts = sorted(judged["options"], key=lambda o: COST_ORDER.index(o["option"]))
    stay = opts[0]
    best = max(opts, key=lambda o: o["ndcg"])
    lines = [f"judged queries ({judged['n_queries']}, over the {judged['collection']} pairs' "
             "items): " + ", ".join(f"{_name(o)} nDCG@{k} {o['ndcg']:.3f}"
                                    for o in judged["options"])]
    if stay["ndcg"] >= best["ndcg"]:
        others = max((o["ndcg"] for o in opts[1:]), default=float("nan"))
        lines.append(f"neither re-embedding nor any translation beats staying on the judged "
                     f"queries (stay nDCG@{k} {stay['ndcg']:.3f}, the best of the others "
                     f"{others:.3f}): stay")
    elif choice is best or choice["option"] == best["option"]:
        lines.append(f"{_name(best)} scores best on the judged queries (nDCG@{k} "
                     f"{best['ndcg']:.3f}) and no cheaper option is within {tolerance:g} of "
                     f"it: {choice['option']}")
    else:
        lines.append(f"{_name(best)} scores best on the judged queries (nDCG@{k} "
                     f"{best['ndcg']:.3f}), but {_name(choice)} ({choice['ndcg']:.3f}) is "
                     f"within {tolerance:g} of it and cheaper, and the tie rule takes the "
                     f"cheapest option within {tolerance:g} nDCG@{k} of the best: "
                     f"{choice['option']}")
    if retention_action != choice["option"]:
        lines.append(f"the verdict is the judged queries' ({choice['option']}), not recall@{k}'s "
                     f"({retention_action}): recall@{k} measures agreement with re-embedding, "
                     "the judged queries measure relevance")
    return lines
