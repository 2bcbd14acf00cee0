"""skalign's own checks (:mod:`skalign.utils.estimator_checks`) on every public estimator, on a
user-written aligner, and on broken aligners they must reject.

scikit-learn's common checks (``test_common.py``) cover the estimator API; the checks run here
cover what the torch facade promises on top of it. Test ids read ``ClassName-check_name``.
"""

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skalign.base import BaseAligner
from skalign.utils import all_estimators
from skalign.utils.estimator_checks import (
    FAST_PARAMETERS,
    _assert_bitwise_equal,
    _assert_same_fit,
    check_estimator,
    check_fit_is_bitwise_reproducible,
    check_transform_is_invariant_to_batch_size,
    estimators_to_check,
    parametrize_with_checks,
    set_checking_parameters,
)

# The fast settings stop iterative fits early on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

ESTIMATORS = list(estimators_to_check())

#: Checks a public estimator is known to fail, with the reason; strict, so each entry breaks the
#: suite as soon as the estimator passes and must then be removed.
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_skalign_checks(estimator, check):
    check(estimator)


def test_every_public_estimator_is_checked():
    assert [type(est).__name__ for est in ESTIMATORS] == [name for name, _ in all_estimators()]
    assert {"AnchorBootstrapper", "LinearAligner", "OrthogonalEnsembleAligner"} <= {
        type(est).__name__ for est in ESTIMATORS}


def test_fast_parameters_name_public_estimators_and_their_real_parameters():
    public = dict(all_estimators())
    for name, params in FAST_PARAMETERS.items():
        assert name in public, name
        assert set(params) <= set(public[name]().get_params(deep=False)), name
    for est in ESTIMATORS:
        expected = FAST_PARAMETERS.get(type(est).__name__, {})
        assert {k: est.get_params()[k] for k in expected} == expected
        if "random_state" in est.get_params():
            assert est.random_state == 0


def test_a_fast_parameter_the_estimator_lacks_is_an_error(monkeypatch):
    """Negative control: a parameter the estimator does not take is never dropped silently."""
    from skalign import ProcrustesAligner

    monkeypatch.setitem(FAST_PARAMETERS, "ProcrustesAligner", {"max_iter": 30})
    with pytest.raises(ValueError, match=r"names \['max_iter'\], which ProcrustesAligner"):
        set_checking_parameters(ProcrustesAligner())


# ---------------------------------------------------------------- a user-written aligner
class CentredLeastSquares(BaseAligner):
    """Least-squares map between centred spaces: ``y ≈ (X - μ_X) W + μ_Y``, as a user writes it.

    Parameters
    ----------
    device : str, default="cpu"
        Where the fit runs.
    batch_size : int, default=None
        Rows per block of ``transform``.
    """

    def __init__(self, *, device="cpu", batch_size=None):
        self.device = device
        self.batch_size = batch_size

    def fit(self, X, y):
        X, y = self._validate_pair(X, y)
        Xc, Yc, mx, my = self._centered_pair_tensors(X, y)
        # normal equations: torch.linalg.lstsq's default driver (gelsy) is not bit-for-bit
        # repeatable on the CPU, which check_fit_is_bitwise_reproducible reports
        self.coef_ = torch.linalg.solve(Xc.T @ Xc, Xc.T @ Yc).T.cpu().numpy()
        self.source_mean_, self.target_mean_ = mx.cpu().numpy(), my.cpu().numpy()
        return self

    def _transform_fn(self, device, dtype):
        W = torch.as_tensor(self.coef_.T, device=device, dtype=dtype)
        mx = torch.as_tensor(self.source_mean_, device=device, dtype=dtype)
        my = torch.as_tensor(self.target_mean_, device=device, dtype=dtype)
        return lambda batch: (batch - mx) @ W + my


class NoisyFit(CentredLeastSquares):
    """Broken on purpose: fit adds unseeded noise, so two fits differ."""

    def fit(self, X, y):
        super().fit(X, y)
        self.coef_ = self.coef_ + 1e-9 * np.random.default_rng().standard_normal(self.coef_.shape)
        return self


class BatchCentred(CentredLeastSquares):
    """Broken on purpose: transform centres each batch on its own mean."""

    def _transform_fn(self, device, dtype):
        W = torch.as_tensor(self.coef_.T, device=device, dtype=dtype)
        my = torch.as_tensor(self.target_mean_, device=device, dtype=dtype)
        return lambda batch: (batch - batch.mean(0)) @ W + my


def test_check_estimator_passes_on_a_user_subclass_of_base_aligner():
    est = CentredLeastSquares()
    check_estimator(est)
    assert not hasattr(est, "coef_")  # the checks fit clones


def test_check_estimator_rejects_a_non_deterministic_fit():
    with pytest.raises(AssertionError) as info:
        check_estimator(NoisyFit())
    message = str(info.value)
    assert "NoisyFit failed 1 skalign check(s)" in message
    assert "check_fit_is_bitwise_reproducible: NoisyFit.coef_: arrays differ" in message


def test_check_estimator_rejects_a_batch_dependent_transform():
    with pytest.raises(AssertionError) as info:
        check_estimator(BatchCentred())
    message = str(info.value)
    assert "check_transform_is_invariant_to_batch_size" in message
    assert "batch_size=1 differs from the default batching" in message


def test_an_estimator_without_batch_size_fails_the_batch_check():
    class NoBatchSize(CentredLeastSquares):
        def __init__(self, *, device="cpu"):
            self.device = device

    with pytest.raises(AssertionError, match="NoBatchSize has no batch_size parameter"):
        check_transform_is_invariant_to_batch_size("NoBatchSize", NoBatchSize())


def test_reproducibility_compares_dicts_lists_and_nested_estimators():
    """The comparison reaches values inside dicts, lists and fitted sub-estimators."""
    base = {"a": [1.0, {"b": np.zeros(3)}], "seconds": 0.5}
    _assert_bitwise_equal(base, {"a": [1.0, {"b": np.zeros(3)}], "seconds": 9.0}, "x")
    with pytest.raises(AssertionError, match=r"x\['a'\]\[1\]\['b'\]: arrays differ in 1 of 3"):
        _assert_bitwise_equal(base, {"a": [1.0, {"b": np.array([0, 0, 1e-300])}],
                                     "seconds": 0.5}, "x")
    with pytest.raises(AssertionError, match=r"x\['a'\]\[0\]"):
        _assert_bitwise_equal(base, {"a": [np.nextafter(1.0, 2), {"b": np.zeros(3)}],
                                     "seconds": 0.5}, "x")
    X, Y = np.random.default_rng(0).standard_normal((2, 20, 3))
    outer = CentredLeastSquares().fit(X, Y)
    outer.estimator_ = CentredLeastSquares().fit(X, Y)
    other = clone(outer).fit(X, Y)
    other.estimator_ = CentredLeastSquares().fit(X, Y + 1e-6)
    with pytest.raises(AssertionError, match=r"^m\.estimator_\.coef_: arrays differ"):
        _assert_same_fit(outer, other, "m")


def test_the_reproducibility_check_reads_fitted_dicts():
    """Negative control on a real estimator: a fitted dict entry that differs is caught."""
    from skalign import GeRAAligner

    est = set_checking_parameters(GeRAAligner())
    check_fit_is_bitwise_reproducible("GeRAAligner", est)  # passes as is
    original = GeRAAligner.fit

    def fit(self, X, y, unpaired=None):
        original(self, X, y, unpaired=unpaired)
        key = next(iter(self.source_params_))
        self.source_params_[key] = self.source_params_[key] + np.random.default_rng().random()
        return self

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GeRAAligner, "fit", fit)
        with pytest.raises(AssertionError, match=r"GeRAAligner\.source_params_\["):
            check_fit_is_bitwise_reproducible("GeRAAligner", est)


def test_the_cuda_less_worker_leaves_no_open_pipe_at_exit():
    """The pickling check's worker process is closed at exit with its pipes: a run of the check
    in a fresh interpreter prints no ResourceWarning (it printed ``unclosed file
    <_io.BufferedReader ...>`` at the end of every test run)."""
    import subprocess
    import sys

    code = ("from skalign import ProcrustesAligner\n"
            "from skalign.utils.estimator_checks import check_pickle_transforms_without_cuda\n"
            "check_pickle_transforms_without_cuda('ProcrustesAligner', ProcrustesAligner())\n"
            "print('checked')\n")
    proc = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-X", "dev", "-c",
                           code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "checked" in proc.stdout
    assert "ResourceWarning" not in proc.stderr, proc.stderr
