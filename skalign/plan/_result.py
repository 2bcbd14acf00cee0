"""What :func:`skalign.plan.plan_migration` returns: the plan, built once at the end, as text too
(its estimates are :class:`~skalign.plan.Estimate`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ._estimate import best_estimate

__all__ = ["MigrationPlan"]


def _is_unit(norm):
    return abs(norm - 1.0) < 1e-3


def _norm(norm):
    return f"{norm:.3g}" + (" (unit vectors)" if _is_unit(norm) else " (not unit vectors)")


@dataclass(frozen=True)
class MigrationPlan:
    """What :func:`plan_migration` found; ``to_dict()`` is the ``--json`` output.

    Built once, at the end of the plan, and not changed after.

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
        ``{"recall", "ndcg", "method", "how"}`` of the oracle fit; empty in a lean plan.
    recommendation : dict
        ``{"action": "stay" | "translate" | "bridge queries" | "translate + rerank" |
        "re-embed", "method", "side", "reasons", "commands", "most_within_budget"}``: the
        cheapest option predicted to keep ``min_recall``; ``most_within_budget`` names, with a
        budget, the option that keeps the most within it when several keep ``min_recall`` and
        its gain is larger than the overlap of the two intervals (``{"option", "method",
        "recall", "recall_ci", "encoded_texts", "gain", "overlap", "against", "says"}``), else
        ``None``.
    seconds : float
        Wall time of the plan.
    stay : dict
        Staying on the old model, as an estimate (``method`` ``"stay"``).
    rerank : dict
        ``{"k_candidates", "recall_at_10", "recall_ci", "supported", "encoded_per_query"}``:
        the smallest ``K`` whose translated top-``K`` holds ``max(min_recall, stay)`` of the
        true top-``k`` (or the largest measurable); empty without a document side.
    budget : dict
        The budget curve: ``{"method", "n_pairs", "recall", "store_size", "stay",
        "overtakes_stay_at"}``, with ``budget``, ``recall_at_budget`` and
        ``budget_extrapolated`` when a budget was given; empty without a learning curve.
    options : list of dict
        Stay, translate, bridge queries, translate + rerank and re-embed, cheapest first, each
        with ``recall``, ``recall_ci``, ``supported``, ``encoded_texts`` (one-off) and
        ``encoded_per_query``.
    notes : list of str
        Fallbacks, ignored inputs and extrapolations (also issued as warnings).
    judged : dict
        With judged queries: ``{"n_queries", "collection", "k", "options": [{"option",
        "method", "ndcg", "ndcg_ci"}]}``; else empty.
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
    stay: dict = field(default_factory=dict)
    rerank: dict = field(default_factory=dict)
    budget: dict = field(default_factory=dict)
    options: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    judged: dict = field(default_factory=dict)

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
        return best_estimate(self.estimates, side)

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
            + f" (mean row norm: source {_norm(norms['source'])}, target "
            f"{_norm(norms['target'])})"
            + ("" if _is_unit(norms["target"]) else
               "; in a store ranked by inner product or L2 distance the new vectors' lengths "
               "change the ranking: choose with --normalize on skalign migrate and search"),
            "",
            f"{'method':<12}{'side':<10}{'recall@' + str(k):>10}{'CI':>16}"
            f"{'nDCG@' + str(k):>9}{'CI':>16}{'fit s':>8}  how",
        ]
        for e in sorted(self.estimates, key=lambda e: -e.recall):
            lines.append(
                f"{e.method:<12}{e.side:<10}{e.recall:10.3f}"
                f"{f'[{e.recall_ci[0]:.3f}, {e.recall_ci[1]:.3f}]':>16}{e.ndcg:9.3f}"
                f"{f'[{e.ndcg_ci[0]:.3f}, {e.ndcg_ci[1]:.3f}]':>16}{e.fit_seconds:8.2f}  "
                f"{e.how}" + ("  (unsupported)" if not e.supported else
                          "  (extrapolated)" if e.extrapolated else ""))
        c = self.ceiling
        if c:  # none in a lean plan
            lines += ["", f"ceiling (oracle {c['method']} fitted on all {self.n_pairs} pairs, "
                      f"in sample): recall@{k} {c['recall']:.3f}, nDCG@{k} {c['ndcg']:.3f}"]
        if self.options:
            lines += ["", f"options at {self.store_size} items, cheapest first:"]
            for o in self.options:
                cost = (f"{o['encoded_texts']} texts encoded" if o["encoded_texts"] else
                        f"{o['encoded_per_query']} texts encoded per query"
                        if o["encoded_per_query"] else "no texts encoded")
                name = o["option"] + (f" ({o['method']})" if o["option"] in (
                    "translate", "bridge queries", "translate + rerank") else "")
                lines.append(f"  {name:<34}recall@{k} {o['recall']:.3f} "
                             f"[{o['recall_ci'][0]:.3f}, {o['recall_ci'][1]:.3f}]  {cost}"
                             + ("" if o["supported"] else "  (unsupported)"))
        b = self.budget
        if b:
            pts = "  ".join(f"{n}: {r:.3f}" for n, r in zip(b["n_pairs"], b["recall"]))
            lines += ["", f"budget curve ({b['method']}, recall@{k} at {b['store_size']} items "
                      f"by pairs re-embedded; staying keeps {b['stay']:.3f}):", f"  {pts}"]
        if self.evaluation.get("bootstrap_left_out"):
            lines += ["", f"bootstrap not estimated: {self.evaluation['bootstrap_left_out']}"]
        if self.judged:
            lines += ["", f"judged queries ({self.judged['n_queries']}; nDCG@{k}, linear gains, "
                      f"over the {self.judged['collection']} pairs' items):"]
            for o in self.judged["options"]:
                name = o["option"] + (f" ({o['method']})" if o["method"] else "")
                lines.append(f"  {name:<34}nDCG@{k} {o['ndcg']:.3f} "
                             f"[{o['ndcg_ci'][0]:.3f}, {o['ndcg_ci'][1]:.3f}]")
        if self.notes:
            lines += [""] + [f"note: {note}" for note in self.notes]
        r = self.recommendation
        lines += ["", f"recommendation: {r['action']}"
                  + (f" with {r['method']} ({r['side']} side)" if r["action"] in (
                      "translate", "bridge queries", "translate + rerank") else "")]
        if r.get("most_within_budget"):
            lines.append(f"  within the budget: {r['most_within_budget']['says']}")
        lines += [f"  - {reason}" for reason in r["reasons"]]
        if r["commands"]:
            lines += ["  to carry it out:"] + [f"    {c}" for c in r["commands"]]
        return lines
