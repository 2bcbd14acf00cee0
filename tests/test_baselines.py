"""Ground truth and negative controls for ProcrustesAligner and LinearAligner."""

import numpy as np
import pytest
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline

from skalign import LinearAligner, ProcrustesAligner
from skalign.datasets import load_digits_embeddings, make_paired_spaces
from skalign.metrics import mrr_scorer, top1_scorer


def _split(X, Y, n_train):
    return X[:n_train], Y[:n_train], X[n_train:], Y[n_train:]


# ----------------------------------------------------------------------------- Procrustes
def test_procrustes_recovers_a_random_orthogonal_map(device):
    X, Y, gt = make_paired_spaces(600, 24, relation="orthogonal", noise=0.02, random_state=1,
                                  return_ground_truth=True)
    Xtr, Ytr, Xte, Yte = _split(X, Y, 400)
    est = ProcrustesAligner(device=device).fit(Xtr, Ytr)
    assert est.score(Xte, Yte) > 0.999
    assert np.abs(est.components_ - gt.map).max() < 0.02
    assert est.orthogonality_error() < 1e-10


def test_procrustes_fails_on_a_general_linear_map():
    """Negative control: an isometry cannot fit a general linear map, least squares can."""
    X, Y = make_paired_spaces(600, 24, relation="linear", random_state=1)
    Xtr, Ytr, Xte, Yte = _split(X, Y, 400)
    procrustes = ProcrustesAligner(scale=True).fit(Xtr, Ytr).score(Xte, Yte)
    linear = LinearAligner().fit(Xtr, Ytr).score(Xte, Yte)
    assert linear > 0.9999
    assert procrustes < 0.9


def test_procrustes_scale_shift_and_different_dimensions():
    X, Y, gt = make_paired_spaces(500, 12, n_features_target=20, relation="orthogonal", scale=2.5,
                                  shift=7.0, random_state=3, return_ground_truth=True)
    est = ProcrustesAligner(scale=True).fit(X, Y)
    assert est.components_.shape == (12, 20)
    assert est.scale_ == pytest.approx(2.5, rel=1e-6)
    assert est.score(X, Y) > 0.99999
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(12), atol=1e-10)
    np.testing.assert_allclose(est.inverse_transform(est.transform(X)), X, atol=1e-4)
    # Without centring the shift cannot be modelled.
    assert ProcrustesAligner(scale=True, center=False).fit(X, Y).score(X, Y) < 0.99


def test_procrustes_equals_zero_padding_solution():
    X, Y = make_paired_spaces(200, 5, n_features_target=8, relation="orthogonal", noise=0.1, random_state=0)
    Xp = np.hstack([X - X.mean(0), np.zeros((len(X), 3))])
    U, _, Vt = np.linalg.svd(Xp.T @ (Y - Y.mean(0)))
    W_padded = (U @ Vt)[:5]
    np.testing.assert_allclose(ProcrustesAligner().fit(X, Y).components_, W_padded, atol=1e-10)


# --------------------------------------------------------------------------------- Linear
def test_linear_recovers_a_general_linear_map(device):
    X, Y, gt = make_paired_spaces(300, 10, n_features_target=7, relation="linear", shift=3.0,
                                  random_state=2, return_ground_truth=True)
    est = LinearAligner(device=device).fit(X, Y)
    np.testing.assert_allclose(est.coef_, gt.map, atol=1e-10)
    np.testing.assert_allclose(est.intercept_, 3.0, atol=1e-10)


def test_linear_minimum_norm_on_rank_deficient_anchors(rng):
    X, Y = rng.standard_normal((10, 30)), rng.standard_normal((10, 4))  # fewer pairs than dims
    est = LinearAligner(fit_intercept=False).fit(X, Y)
    np.testing.assert_allclose(est.coef_, np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-10)


def test_ridge_shrinks_the_map():
    X, Y = make_paired_spaces(100, 10, relation="linear", noise=0.3, random_state=0)
    norms = [np.linalg.norm(LinearAligner(alpha=a).fit(X, Y).coef_) for a in (0.0, 10.0, 1000.0)]
    assert norms[0] > norms[1] > norms[2]


# ------------------------------------------------------------------------- sklearn tooling
def test_grid_search_and_cross_val_on_pairs():
    X, Y = make_paired_spaces(300, 16, relation="linear", noise=0.5, random_state=0)
    search = GridSearchCV(LinearAligner(), {"alpha": [0.0, 10.0, 1e4]}, cv=3).fit(X, Y)
    assert search.best_params_["alpha"] != 1e4  # over-regularised map must lose on held-out pairs
    assert search.cv_results_["mean_test_score"].argmin() == 2
    for scoring in (None, top1_scorer, mrr_scorer):
        scores = cross_val_score(ProcrustesAligner(), X, Y, cv=3, scoring=scoring)
        assert scores.shape == (3,) and np.all(np.isfinite(scores))


def test_stitching_digits_encoders_in_a_pipeline():
    """A classifier trained on encoder B, fed encoder A's translated embeddings."""
    data = load_digits_embeddings(["mlp-a", "mlp-b"])
    A, B, labels = data.embeddings["mlp-a"], data.embeddings["mlp-b"], data.target
    tr, te = data.train_index, data.test_index
    clf = LogisticRegression(max_iter=3000).fit(B[tr], labels[tr])
    own = clf.score(B[te], labels[te])
    raw = clf.score(A[te], labels[te])
    aligner = LinearAligner(alpha=1e-2).fit(A[tr[:300]], B[tr[:300]])
    stitched = make_pipeline(FrozenEstimator(aligner), FrozenEstimator(clf)).score(A[te], labels[te])
    assert own > 0.95
    assert raw < 0.4  # same width, unrelated coordinates: near chance
    assert stitched > own - 0.03
