"""scikit-learn's common estimator checks for every public skalign estimator."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from skalign.utils import all_estimators

ESTIMATORS = [cls() for _, cls in all_estimators()]

# Checks an estimator is expected to fail, each with the reason. Keyed by class name.
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


def test_discovery_finds_the_baselines():
    names = {name for name, _ in all_estimators()}
    assert {"LinearAligner", "ProcrustesAligner"} <= names


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
