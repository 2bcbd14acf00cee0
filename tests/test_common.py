"""scikit-learn's common estimator checks for every public skalign estimator."""

import inspect
import re

import pytest
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


# ------------------------------------------------------------------------- one vocabulary
_SHARED_TAIL = ("random_state", "device", "batch_size", "verbose")


@pytest.mark.parametrize("cls", [cls for _, cls in all_estimators()], ids=lambda c: c.__name__)
def test_one_vocabulary(cls):
    """Shared parameters come last in one order, are documented, and mean one thing."""
    params = list(inspect.signature(cls.__init__).parameters)[1:]
    tail = [p for p in _SHARED_TAIL if p in params]
    assert {"device", "batch_size"} <= set(tail)
    assert params[len(params) - len(tail):] == tail, params
    doc = inspect.getdoc(cls)
    for name in tail:
        assert re.search(rf"^{name} : .*\n {{4}}\S", doc, re.MULTILINE), f"{name} undocumented"
    # rows per block is batch_size, neighbour counts are *n_neighbors, anchors are anchor pairs
    assert not {"chunk_size", "block_size", "block_rows", "csls_k"} & set(params)
    assert set(cls._parameter_constraints) == set(params)
    if "n_anchors" in params:
        assert re.search(r"^n_anchors : int.*\n\s+Anchors", doc, re.MULTILINE)
