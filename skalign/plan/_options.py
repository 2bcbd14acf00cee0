"""Stage 5 of :mod:`skalign.plan`: every option priced side by side — stay, translate, bridge,
translate + rerank, re-embed — and the budget curve over the number of re-embedded pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Options", "price_options"]


@dataclass(frozen=True)
class Options:
    """The options, cheapest first, and the budget curve (the fields of
    :class:`~skalign.plan.MigrationPlan` of the same names)."""

    options: list
    budget: dict
    notes: tuple


def price_options(inputs, est):
    """The options and the budget curve of the estimates ``est``."""
    budget = inputs.budget
    notes = ()
    if budget is not None and not est.learning_curve:
        notes = (f"--budget {budget} is not priced: it is read off the budget curve, which "
                 + ("--no-curve skipped" if not inputs.curve else
                    f"{inputs.n_pairs} pairs are too few for"),)
    b = budget_curve(est, inputs.store_size, budget)
    if est.written is not None and "budget" in b:
        b = at_written(b, est.written, inputs.store_size)
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
    curve = dict(est.learning_curve[best.method], ceiling=est.ceiling["recall"])
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
    own evaluation store (:func:`skalign.plan._estimate.written_store`): the written store's
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
