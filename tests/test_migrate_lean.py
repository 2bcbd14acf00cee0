"""``skalign migrate`` plans lean (issue 57): without the ceiling's oracle fits and the rerank
option, which it never writes, with the full plan's estimates, and the full plan's decision
and report where it refuses."""

import warnings

import pytest

from skalign.datasets import load_docstring_embeddings
from skalign.exceptions import MigrationRefused
from skalign.plan import plan_migration

METHODS = ["procrustes", "linear"]
SIZE = 20_000


@pytest.fixture(scope="module")
def pairs():
    E = load_docstring_embeddings().embeddings
    return E["minilm_l6"][:400], E["mpnet_base"][:400]


@pytest.fixture(scope="module")
def plans(pairs):
    X, Y = pairs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {lean: plan_migration(X, Y, methods=METHODS, sides=("document",), curve=False,
                                     n_resamples=100, store_size=SIZE, min_recall=0.6,
                                     lean=lean)
                for lean in (False, True)}


def test_a_lean_plan_has_the_full_plans_estimates_without_ceiling_or_rerank(plans):
    full, lean = plans[False], plans[True]
    strip = [dict(vars(e), fit_seconds=0.0) for e in full.estimates]
    assert [dict(vars(e), fit_seconds=0.0) for e in lean.estimates] == strip
    assert lean.stay == full.stay and lean.best("document").method == full.best("document").method
    assert full.ceiling and full.rerank and lean.ceiling == {} and lean.rerank == {}
    # at min_recall 0.6 only rerank keeps it (translate 0.599, stay 0.486, rerank 0.745): the
    # lean plan, which prices no rerank, says re-embed
    assert full.recommendation["action"] == "translate + rerank"
    assert lean.recommendation["action"] == "re-embed"
    assert "ceiling" not in "\n".join(lean.summary())
    assert "ceiling" in "\n".join(full.summary())


def test_migrate_decides_on_the_full_plan_where_the_lean_one_says_re_embed(pairs):
    from skalign._migrate.fitting import plan_and_fit

    X, Y = pairs
    kw = dict(anyway=False, methods=METHODS, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        # translate + rerank keeps 0.6: not refused, as before the plan was lean
        method, _, estimate = plan_and_fit(X, Y, SIZE, min_recall=0.6, **kw)
        assert method == "procrustes" and estimate["recall_at_10"] < 0.6
        with pytest.raises(MigrationRefused) as refused:
            plan_and_fit(X, Y, SIZE, min_recall=0.999, **kw)
    shown = refused.value.plan  # the full plan: its ceiling and rerank are in the report
    assert shown.recommendation["action"] == "re-embed"
    assert 0 < shown.ceiling["recall"] < 0.999 and shown.rerank["k_candidates"] == 100
    assert "ceiling" in "\n".join(shown.summary())
