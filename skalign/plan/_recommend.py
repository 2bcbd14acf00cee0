"""The recommendation of :mod:`skalign.plan`: which method, on which side, and the commands.

The best estimate per side, with the preferences where the estimates cannot tell candidates
apart (documents over queries, a map fitted on the pairs alone over one that also needs the
unpaired samples), re-embedding below ``min_recall``, and the command lines that carry it out.
"""

from __future__ import annotations

from ._candidates import MAP_ROUNDS, RIDGE_ALPHAS, _uses_unpaired, make_candidate


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


def _fmt(e, k):
    ci = e["recall_ci"]
    return f"recall@{k} {e['recall']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _recommend(plan, curve):
    """The cheapest option predicted to keep ``min_recall``, with coherent reasons."""
    k = plan.k
    ties = []
    best_doc, best_query = _pick(plan, "document", ties), _pick(plan, "query", ties)
    stay = plan.stay
    reasons = [f"stay on the old model: {_fmt(stay, k)} (its own top-{k} against the new "
               "model's, measured on the pairs)"]
    if best_doc is not None:
        reasons.append(f"translate the documents with {best_doc.method}: {_fmt(vars(best_doc), k)}")
    if best_query is not None:
        reasons.append(f"bridge the queries with {best_query.method}: "
                       f"{_fmt(vars(best_query), k)}")
    if plan.rerank:
        r = plan.rerank
        reasons.append(f"translate + rerank the top {r['k_candidates']} by the new encoder: "
                       f"recall@{k} {r['recall_at_10']:.3f} [{r['recall_ci'][0]:.3f}, "
                       f"{r['recall_ci'][1]:.3f}] ({r['k_candidates']} texts encoded per query)")
    reasons.append(f"re-embed: recall@{k} 1.000 by definition ({plan.store_size} texts encoded)")
    reasons += ties
    maps = [e for e in (best_doc, best_query) if e is not None]
    top = max((e.recall for e in maps), default=None)
    if top is not None and top < stay["recall"]:
        reasons.append(f"every translation keeps less than staying ({top:.3f} < "
                       f"{stay['recall']:.3f}): migrating that way is worse than not migrating")
    if any(not e.supported for e in maps):
        reasons.append(f"{plan.n_pairs} pairs are too few to measure how retention falls with the "
                       f"store size: the intervals for {plan.store_size} items run from chance to "
                       "what the pairs measured, and no translation is recommended on them")
    options = [("stay", stay, "stay")]
    if best_doc is not None and best_doc.supported:
        options.append(("translate", vars(best_doc), best_doc))
    if best_query is not None and best_query.supported:
        options.append(("bridge queries", vars(best_query), best_query))
    if plan.rerank and plan.rerank["supported"]:
        options.append(("translate + rerank", {"recall": plan.rerank["recall_at_10"]}, best_doc))
    action, choice = "re-embed", best_doc or best_query
    for name, e, est in options:
        if e["recall"] >= plan.min_recall:
            action, choice = name, est
            break
    reasons.append(f"cheapest option that keeps --min-recall {plan.min_recall:.2f}: {action}"
                   + _decided(options, action, plan.min_recall, k))
    ceiling = plan.ceiling["recall"]
    budget = plan.budget
    if action == "re-embed" and ceiling < plan.min_recall:
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
    ratio = max(plan.row_norms["source"], plan.row_norms["target"]) / max(
        min(plan.row_norms["source"], plan.row_norms["target"]), 1e-12)
    if not plan.normalized and ratio > 1.5:
        reasons.append(f"the two spaces' mean row norms differ {ratio:.1f}-fold; maps without a "
                       "scale suffer from it (bridging most): compare with --normalize")
    side = getattr(choice, "side", None)
    commands = _commands(choice, plan, rerank=action == "translate + rerank") \
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


def _commands(choice, plan, rerank=False):
    """The command lines that carry out the recommended fit (A, B, P, Q as given to plan)."""
    fit = f"skalign fit {choice.method}"
    ridge = ("scoring=recall_retention", "alphas=" + ",".join(f"{a:g}" for a in RIDGE_ALPHAS))
    if choice.method == "bootstrap":
        fit += f" --param map_rounds={MAP_ROUNDS} --param estimator=linear" + "".join(
            f" --param estimator__{p}" for p in ridge)
    if choice.method == "linear":
        fit += "".join(f" --param {p}" for p in ridge)
        if plan.normalized:
            fit += " --param normalize=true"
    if choice.method == "bootstrap" and plan.normalized:
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
            "queries) first)"] if plan.normalized and choice.method == "procrustes" else []
    if rerank:
        note.append(f"(then search the translated store for the top {plan.rerank['k_candidates']}"
                    " and re-score those candidates with the new encoder's vectors)")
    return [fit, run] + note
