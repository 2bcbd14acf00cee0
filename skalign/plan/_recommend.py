"""Stage 6 of :mod:`skalign.plan`: the recommendation — which option, method and side, why,
and the commands that carry it out; with judged queries, made on their nDCG@k.

The best estimate per side, with the preferences where the estimates cannot tell candidates
apart (documents over queries, a map fitted on the pairs alone over one that also needs the
unpaired samples), re-embedding below ``min_recall``. With a budget, the option that keeps the
most within it is named beside the cheapest when its gain is larger than the overlap of the two
intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._candidates import MAP_ROUNDS, RIDGE_ALPHAS, learns_from_samples, make_candidate

__all__ = ["Recommendation", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """:attr:`MigrationPlan.recommendation` and, with judged queries, :attr:`MigrationPlan.judged`
    (else empty)."""

    recommendation: dict
    judged: dict


def recommend(inputs, est, opts):
    """The recommendation on the estimates ``est`` and the options ``opts``."""
    rec = _on_recall(inputs, est, opts)
    judged = {}
    if inputs.qrels is not None:
        judged, rec = _on_judged(inputs, est, rec)
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


def _on_judged(inputs, est, rec):
    """Every option priced in nDCG@k on the judged queries, and the recommendation made on
    that: ``(judged, recommendation)``."""
    from ._judged import judged_choice, judged_options, judged_reasons

    QA, QB = inputs.queries
    methods = {side: getattr(est.best[side], "method", None) for side in inputs.sides}
    rerank_k = est.rerank["k_candidates"] if est.rerank else 100
    judged = judged_options(inputs.X, inputs.Y, QA, QB, inputs.qrels, methods, inputs.n_splits,
                            inputs.k, rerank_k, inputs.random_state, inputs.n_resamples,
                            inputs.confidence)
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


def _pick(est, side, reasons):
    """The side's best estimate; one that needs the unpaired samples must beat the best that
    does not by more than half its own interval."""
    best = est.best[side]
    if best is None or not learns_from_samples(make_candidate(best.method)):
        return best
    plain = max((e for e in est.estimates if e.side == side
                 and not learns_from_samples(make_candidate(e.method))),
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
    best_doc, best_query = _pick(est, "document", ties), _pick(est, "query", ties)
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
    ceiling = est.ceiling["recall"]
    budget = opts.budget
    if action == "re-embed" and ceiling < min_recall:
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
