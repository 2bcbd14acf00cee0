"""The recommendation of :mod:`skalign.plan`: which method, on which side, and the commands.

The best estimate per side, with the preferences where the estimates cannot tell candidates
apart (documents over queries, a map fitted on the pairs alone over one that also needs the
unpaired samples), re-embedding below ``min_recall``, and the command lines that carry it out.
"""

from __future__ import annotations

import numpy as np

from ._plan_candidates import MAP_ROUNDS, RIDGE_ALPHAS, _uses_unpaired, make_candidate


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
