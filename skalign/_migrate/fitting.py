"""The map a step of ``skalign migrate`` writes with: planned on a sample of its encoded pairs,
fitted on a bounded sample of them, and the store written with it priced
(:func:`plan_and_fit`).

A ``--continue`` step's pairs grow with the store; the plan's cost grows with the square of
its pairs and the fit's and the pricing's memory with them, so both work on seeded samples of
at most :data:`PLAN_PAIRS` and :data:`FIT_PAIRS` pairs: the same pairs give the same samples,
and a step can fit the previous step's map again exactly.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import MigrationRefused
from .calibration import MIXED, CalibratedMap, cross_translations, price_written

__all__ = ["FIT_PAIRS", "PLAN_PAIRS", "fit_rows", "plan_and_fit"]

#: encoded pairs the plan chooses the map on at most (a seeded sample of more)
PLAN_PAIRS = 2000
#: encoded pairs the map is fitted and the written store priced on at most (a seeded sample
#: of more): a ``--continue`` step's pairs grow with the store (a 10 % step of 10^6 rows holds
#: 10^5), and the fit's and the pricing's memory with them (10^5 pairs: over 9 GB)
FIT_PAIRS = 20000


def fit_rows(n_pairs, random_state):
    """The pairs (sorted indexes) a map is fitted on: all of ``n_pairs`` up to
    :data:`FIT_PAIRS`, else a sample seeded by ``random_state`` and ``n_pairs`` (the same
    pairs give the same sample: ``--continue`` fits the previous step's map again exactly)."""
    if n_pairs <= FIT_PAIRS:
        return np.arange(n_pairs)
    return np.sort(np.random.default_rng([random_state, 55, n_pairs]).choice(
        n_pairs, FIT_PAIRS, replace=False))


def plan_and_fit(X, Y, n_rows, *, min_recall, anyway, methods, random_state,
                  modes=(MIXED, "translate all")):
    """``(method, model, estimate)``: the plan's best map for the pairs, fitted, and the store
    written with it (:func:`~skalign._migrate.calibration.choose_store`) with its estimate."""
    from ..plan import plan_migration
    from ..plan._inputs import make_candidate

    # the plan's cost grows with the square of its pairs, and a --continue step's pairs with
    # every step: it chooses the method on a seeded sample of PLAN_PAIRS, the map is fitted
    # and the store priced on one of FIT_PAIRS (the share of encoded rows is all of them)
    n_pairs = len(X)
    keep = np.arange(len(X)) if len(X) <= PLAN_PAIRS else np.sort(
        np.random.default_rng([random_state, 57]).choice(len(X), PLAN_PAIRS, replace=False))
    X_plan, Y_plan = X[keep], Y[keep]

    def plan_on(lean):
        try:
            return plan_migration(X_plan, Y_plan, store_size=n_rows, sides=("document",),
                                  methods=methods, curve=False, min_recall=min_recall,
                                  random_state=random_state, lean=lean)
        except ValueError as exc:
            if "pairs" not in str(exc):
                raise
            raise ValueError(f"{len(X)} encoded rows are too few to plan a map: {exc} Give a "
                             "larger --budget.") from None

    # lean: without the ceiling's oracle fits and the rerank option, which the step never
    # writes; its best method and its choice among stay and translate are the full plan's
    plan = plan_on(lean=True)
    best = plan.best("document")
    keep = fit_rows(n_pairs, random_state)
    X, Y = X[keep], Y[keep]
    model = make_candidate(best.method, n_pairs=len(X), random_state=random_state).fit(X, Y)
    # the store written (the exact rows among calibrated translations, or translations only)
    # and its estimate (calibration.py's choose_store, the share of encoded rows all pairs')
    T_cross = cross_translations(best.method, model, X, Y, random_state=random_state)
    choice = price_written(T_cross, Y, n_pairs / n_rows, n_rows, modes=modes,
                           random_state=random_state)
    model, estimate = CalibratedMap(model, choice.calibration, choice.mode), choice.estimate

    def refuses(plan):
        return plan.recommendation["action"] == "re-embed" and not anyway \
            and estimate["recall_at_10"] < min_recall

    if refuses(plan):
        # the lean plan's re-embed may be the full plan's translate + rerank, which the step
        # does not refuse; a refusal shows the full plan (its notes are the lean plan's,
        # warned already)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            plan = plan_on(lean=False)
    if refuses(plan):
        raise MigrationRefused(
            f"no method reaches recall@10 {min_recall:g} with {n_pairs} encoded rows (best: "
            f"{best.method}, {estimate['recall_at_10']:.3f}); encode more rows (a larger "
            "--budget), lower --min-recall, or migrate anyway with --anyway", plan)
    return best.method, model, estimate
