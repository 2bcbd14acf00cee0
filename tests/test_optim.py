"""The one early-stopping implementation (skalign.utils._optim) shared by the iterative
estimators."""

import math
import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning

from skalign.exceptions import NumericalError
from skalign.utils._optim import LossHistory, Plateau


def test_plateau_is_relative_to_the_reference_and_counts_stalls():
    p = Plateau(tol=0.01, n_iter_no_change=2)
    assert p.update(100.0) and p.reference == 100.0  # the first finite value improves
    assert not p.update(99.5)  # 0.5 < 0.01 * 100: not an improvement
    assert p.update(98.9) and p.stall == 0
    assert not p.update(98.5) and not p.stalled
    assert not p.update(98.0) and p.stalled
    small = Plateau(tol=0.01, n_iter_no_change=1)
    small.update(0.5)
    assert not small.update(0.495)  # below 1 the scale is 1: needs 0.01, gets 0.005
    assert small.update(0.485)


def test_training_loss_convergence_and_warning():
    h = LossHistory("Demo", max_iter=50, tol=1e-3, n_iter_no_change=3)
    losses = [5.0, 4.0, 3.0] + [3.0] * 10
    stopped_at = next(i for i, v in enumerate(losses, 1) if h.record(v))
    assert stopped_at == 6 and h.converged and h.n_iter == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h.finish()  # converged: no warning
    capped = LossHistory("Demo", max_iter=3, tol=1e-3)
    for v in (3.0, 2.0, 1.0):
        assert not capped.record(v)
    with pytest.warns(ConvergenceWarning, match="did not converge in max_iter=3"):
        capped.finish()
    budget = LossHistory("Demo", max_iter=2, tol=None)
    assert not budget.record(1.0) and not budget.record(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        budget.finish()  # tol=None: a fixed budget, no warning


def test_early_stopping_monitors_the_validation_score_and_keeps_the_best_state():
    h = LossHistory("Demo", max_iter=20, tol=0.1, n_iter_no_change=2, early_stopping=True)
    train = [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
    val = [3.0, 2.0, 1.95, 1.94, 2.5, 2.6]  # 1.95 and 1.94 improve by less than tol
    for it, (t, v) in enumerate(zip(train, val)):
        if h.record(t, validation_score=v, snapshot=lambda v=v: ("state", v)):
            break
    assert it == 3  # two values without a tol-sized improvement after 2.0
    assert h.validation_scores == val[:4] and h.curve == train[:4]
    assert h.best_value == 1.94 and h.best_state == ("state", 1.94)  # the strict minimum
    with pytest.warns(ConvergenceWarning, match="validation loss was still improving"):
        capped = LossHistory("Demo", max_iter=2, tol=0.1, early_stopping=True)
        capped.record(1.0, validation_score=2.0)
        capped.record(1.0, validation_score=1.0)
        capped.finish()


def test_non_finite_values_name_the_owner_and_the_hint():
    h = LossHistory("Demo", max_iter=5, divergence_hint="Lower learning_rate.")
    with pytest.raises(NumericalError, match="Demo: the loss became nan at iteration 1.*"
                       "Lower learning_rate"):
        h.record(math.nan)
    h = LossHistory("Demo", max_iter=5, early_stopping=True)
    with pytest.raises(NumericalError, match="validation loss became inf at iteration 1"):
        h.record(1.0, validation_score=math.inf)
