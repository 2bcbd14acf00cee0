"""The public facade: namespace, exceptions and actionable errors for common mistakes."""

import inspect
import warnings

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

import skalign
from skalign import (
    GeRAAligner,
    LinearAligner,
    OrthogonalEnsembleAligner,
    ProcrustesAligner,
    UnpairedPool,
    stack_views,
)
from skalign.base import BaseAligner, BaseTransformer
from skalign.datasets import make_paired_spaces
from skalign.exceptions import ConvergenceWarning, LabelsAsTargetWarning, NumericalError
from skalign.utils import all_estimators


@pytest.fixture
def pairs():
    return make_paired_spaces(60, 6, n_features_target=5, relation="linear", noise=0.05,
                              random_state=0)


def test_base_classes_are_not_in_the_public_namespace():
    assert [n for n in dir(skalign) if n.startswith("Base")] == []
    assert "BaseAligner" not in skalign.__all__
    assert BaseAligner not in [cls for _, cls in all_estimators()]


def test_base_aligner_is_subclassable_from_skalign_base(pairs):
    class Identity(BaseAligner):
        def __init__(self, *, device="cpu", batch_size=None):
            self.device = device
            self.batch_size = batch_size

        def fit(self, X, y):
            self._validate_pair(X, y)
            return self

        def _transform_fn(self, device):
            return lambda B: B[:, : self.n_features_out_]

    X, Y = pairs
    assert Identity().fit(X, Y).transform(X).shape == (60, 5)


def test_exceptions_module():
    assert issubclass(NumericalError, ValueError)
    assert skalign.utils._backend.NumericalError is NumericalError
    from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning

    assert ConvergenceWarning is SklearnConvergenceWarning


def test_score_sample_weight_is_a_weighted_mean(pairs):
    X, Y = pairs
    est = LinearAligner().fit(X[:40], Y[:40])
    Y_bad = Y.copy()
    Y_bad[:10] = -Y_bad[:10]  # the first 10 rows point the wrong way: cosine ≈ −1
    w = np.r_[np.zeros(10), np.ones(50)]
    assert est.score(X, Y_bad) < 0.7
    assert est.score(X, Y_bad, sample_weight=w) == pytest.approx(est.score(X[10:], Y[10:]))
    with pytest.raises(ValueError, match="one weight per sample"):
        est.score(X, Y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        est.score(X, Y, sample_weight=-np.ones(60))


def test_shared_space_score_honours_sample_weight(pairs):
    X, Y = pairs
    gera = GeRAAligner(max_iter=20, random_state=0).fit(X, Y)  # fixed budget: no warning
    Z, T = gera.transform(X), gera.transform_target(Y)
    sims = (Z / np.linalg.norm(Z, axis=1, keepdims=True)) @ (
        T / np.linalg.norm(T, axis=1, keepdims=True)).T
    hits = sims.argmax(1) == np.arange(len(X))
    w = np.arange(1.0, 61.0)
    assert gera.score(X, Y, sample_weight=w) == pytest.approx(np.average(hits, weights=w))


def test_ensemble_rejects_a_list_of_views_with_a_hint():
    rng = np.random.default_rng(0)
    views = [rng.standard_normal((30, 4)) for _ in range(3)]
    ens = OrthogonalEnsembleAligner(n_views=3, solver="procrustes")
    with pytest.raises(ValueError, match=r"skalign\.stack_views"):
        ens.fit(views)
    with pytest.raises(ValueError, match=r"skalign\.stack_views"):
        ens.fit(np.stack(views, axis=1))
    ens.fit(stack_views(views))
    with pytest.raises(ValueError, match=r"skalign\.stack_views"):
        ens.transform(views)


def test_ensemble_shares_the_base_class():
    assert issubclass(OrthogonalEnsembleAligner, BaseTransformer)
    assert not issubclass(OrthogonalEnsembleAligner, BaseAligner)
    assert "_validate_X" not in OrthogonalEnsembleAligner.__dict__


def test_unpaired_given_to_an_estimator_without_one_is_a_clear_type_error(pairs):
    X, Y = pairs
    pool = UnpairedPool(X=X)
    with pytest.raises(TypeError, match="takes no unpaired pool.*AnchorBootstrapper, GeRAAligner"):
        LinearAligner().fit(X, Y, unpaired=pool)
    with pytest.raises(TypeError, match="ProcrustesAligner.fit takes no unpaired pool"):
        GridSearchCV(ProcrustesAligner(), {"center": [True, False]}, cv=2,
                     error_score="raise").fit(X, Y, unpaired=pool)
    # the wrapper keeps the signature scikit-learn's metadata routing inspects
    assert list(inspect.signature(LinearAligner.fit).parameters) == ["self", "X", "y"]


def test_class_labels_as_y_warn_with_an_explanation(pairs):
    """A warning, not an error: scikit-learn's own checks fit transformers with labels as y."""
    X, _ = pairs
    labels = np.arange(60) % 3
    with pytest.warns(LabelsAsTargetWarning, match="looks like class labels.*target embeddings"):
        ProcrustesAligner().fit(X, labels)
    with pytest.warns(LabelsAsTargetWarning, match="LinearAligner.fit got a 1-D"):
        make_pipeline(LinearAligner()).fit(X, labels.astype(bool))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabelsAsTargetWarning)
        with pytest.raises(LabelsAsTargetWarning):
            LinearAligner().fit(X, labels)
        # a one-dimensional float target space is still a target space
        assert LinearAligner().fit(X, X[:, 0]).transform(X).shape == (60, 1)
