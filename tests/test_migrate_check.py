"""The held-out check's per-option recalls from each query's candidates
(``skalign._migrate.heldout._option_recalls``) are the recalls of a full ranking per option
(``_per_query`` on ``_draw``'s check), for every calibration, score scale and store."""

import numpy as np
import pytest

from skalign._migrate.heldout import (
    KINDS,
    MIXED,
    _draw,
    _exact_rows,
    _fold_of,
    _folds,
    _held_out_rows,
    _option_recalls,
    _per_query,
    _similarities,
    _unit,
)

OPTIONS = [(mode, kind, c) for kind in KINDS for mode in (MIXED, "translate all")
           for c in (1.0, 0.99, 0.97)]


@pytest.mark.parametrize("n, share", [(120, 0.25), (90, 0.6), (40, 0.1)])
def test_option_recalls_match_a_full_ranking(n, share):
    rng = np.random.default_rng(n)
    Y = rng.normal(size=(n, 12)) + 2.0 * rng.normal(size=12)  # a common direction, as e5's
    T = Y @ (np.eye(12) + 0.4 * rng.normal(size=(12, 12))) + 0.3 * rng.normal(size=(n, 12))
    folds = _folds(n, 3, 0)
    sims = _similarities(_unit(Y), _held_out_rows(T, Y, folds), folds)
    fold = _fold_of(folds, n)
    for draw in range(3):
        fast = _option_recalls(sims, fold, _exact_rows(n, share, np.random.default_rng(draw)),
                               OPTIONS, 10)
        check = _draw(sims, n, share, 10, np.random.default_rng(draw), KINDS)
        for mode, kind, c in OPTIONS:
            full = _per_query(check, kind, mode, c, 10)
            np.testing.assert_array_equal(fast[(mode, kind, c)], full,
                                          err_msg=f"{mode} {kind} {c}")
        # the options differ from one another: the check is not comparing constants
        assert len({fast[o].mean() for o in OPTIONS}) > 2
