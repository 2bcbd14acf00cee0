"""Ground truth and negative controls for ProcrustesAligner and LinearAligner."""

import numpy as np
import pytest
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression, RidgeCV
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline

from skalign import LinearAligner, ProcrustesAligner
from skalign.datasets import load_digits_embeddings, make_paired_spaces
from skalign.metrics import mrr_scorer, top1_scorer, top_k_accuracy


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
    X, Y = make_paired_spaces(200, 5, n_features_target=8, relation="orthogonal", noise=0.1,
                              random_state=0)
    Xp = np.hstack([X - X.mean(0), np.zeros((len(X), 3))])
    U, _, Vt = np.linalg.svd(Xp.T @ (Y - Y.mean(0)))
    W_padded = (U @ Vt)[:5]
    np.testing.assert_allclose(ProcrustesAligner().fit(X, Y).components_, W_padded, atol=1e-10)


# --------------------------------------------------------------------------------- Linear
def test_linear_recovers_a_general_linear_map(device):
    X, Y, gt = make_paired_spaces(300, 10, n_features_target=7, relation="linear", shift=3.0,
                                  random_state=2, return_ground_truth=True)
    est = LinearAligner(alpha=0.0, device=device).fit(X, Y)
    assert est.coef_.shape == (Y.shape[1], X.shape[1])  # scikit-learn's (n_targets, n_features)
    np.testing.assert_allclose(est.coef_.T, gt.map, atol=1e-10)
    np.testing.assert_allclose(X @ est.coef_.T + est.intercept_, est.transform(X), atol=1e-4)
    np.testing.assert_allclose(est.intercept_, 3.0, atol=1e-10)


def test_linear_minimum_norm_on_rank_deficient_anchors(rng):
    X, Y = rng.standard_normal((10, 30)), rng.standard_normal((10, 4))  # fewer pairs than dims
    est = LinearAligner(alpha=0.0, center=False).fit(X, Y)
    np.testing.assert_allclose(est.coef_.T, np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-10)


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
    stitched = make_pipeline(FrozenEstimator(aligner), FrozenEstimator(clf))
    stitched = stitched.score(A[te], labels[te])
    assert own > 0.95
    assert raw < 0.4  # same width, unrelated coordinates: near chance
    assert stitched > own - 0.03


# ------------------------------------------------------------- ridge with leave-one-out alpha
@pytest.mark.parametrize("n,d,center", [(60, 12, True), (25, 40, True), (80, 10, False)])
def test_auto_alpha_matches_ridgecv(n, d, center):
    """Same alphas -> same leave-one-out choice, coefficients and error as RidgeCV (cv=None)."""
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, d)) * np.linspace(0.2, 3.0, d) + 2.0
    Y = X @ rng.standard_normal((d, 5)) + 2.0 * rng.standard_normal((n, 5)) - 1.0
    alphas = np.logspace(-3, 4, 22)
    ref = RidgeCV(alphas=alphas, fit_intercept=center).fit(X, Y)
    est = LinearAligner(alphas=alphas, center=center).fit(X, Y)
    assert est.alpha == "auto" and est.alpha_ == ref.alpha_
    assert 1e-3 < est.alpha_ < 1e4  # an interior choice: the test can tell candidates apart
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-10)  # same layout as RidgeCV
    np.testing.assert_allclose(est.intercept_, np.broadcast_to(ref.intercept_, (5,)), atol=1e-10)
    np.testing.assert_allclose(est.loo_errors_.min(), -ref.best_score_, rtol=1e-10)
    # the criterion itself, against brute-force leave-one-out refits for two candidates
    for j in (0, 11):
        errs = []
        for i in range(n):
            keep = np.arange(n) != i
            one = LinearAligner(alpha=alphas[j], center=center).fit(X[keep], Y[keep])
            errs.append(np.mean((one.predict(X[i:i + 1]) - Y[i]) ** 2))
        np.testing.assert_allclose(est.loo_errors_[j], np.mean(errs), rtol=1e-8)


def test_auto_alpha_is_the_default_and_follows_the_noise():
    X, Y = make_paired_spaces(200, 20, relation="linear", noise=0.0, random_state=0)
    rng = np.random.default_rng(0)
    clean = LinearAligner().fit(X, Y)
    noisy = LinearAligner().fit(X, Y + 3.0 * rng.standard_normal(Y.shape))
    assert LinearAligner().alpha == "auto" and clean.loo_errors_.shape == (51,)
    assert clean.alpha_ == 1e-4  # noise-free: the least shrinkage
    assert noisy.alpha_ >= 10.0  # heavy noise: strong shrinkage
    fixed = LinearAligner(alpha=0.5).fit(X, Y)
    assert fixed.alpha_ == 0.5 and fixed.loo_errors_ is None
    for bad in ([], [0.0, 1.0], [-1.0]):
        with pytest.raises(ValueError, match="alphas must be"):
            LinearAligner(alphas=bad).fit(X, Y)


def test_retention_alpha_matches_grid_search_over_folds():
    """scoring="recall_retention": the criterion is GridSearchCV's recall@10 retention score."""
    from sklearn.model_selection import KFold

    from skalign.metrics import recall_retention_scorer

    X, Y = make_paired_spaces(150, 64, relation="linear", noise=1.0, random_state=0)
    alphas = np.logspace(-2, 4, 7)
    est = LinearAligner(alphas=alphas, scoring="recall_retention", normalize=False).fit(X, Y)
    ref = GridSearchCV(LinearAligner(normalize=False), {"alpha": list(alphas)},
                       scoring=recall_retention_scorer,
                       cv=KFold(5, shuffle=True, random_state=0)).fit(X, Y)
    assert est.alpha_criterion_ == "recall_retention" and est.loo_errors_ is None
    # set overlaps of top-10 lists: a near-tie may flip under another BLAS kernel
    np.testing.assert_allclose(est.cv_scores_, ref.cv_results_["mean_test_score"], atol=0.01)
    assert est.cv_scores_.max() - est.cv_scores_.min() > 0.03  # the test tells alphas apart
    assert est.alpha_ == alphas[np.argmax(est.cv_scores_)] and 0.01 < est.alpha_ < 1e4
    np.testing.assert_allclose(est.coef_, LinearAligner(alpha=est.alpha_, normalize=False)
                               .fit(X, Y).coef_, atol=1e-10)
    # fewer anchors per training fold (104) than features (160): the other Gram matrix
    Xw, Yw = make_paired_spaces(130, 160, relation="linear", noise=0.5, random_state=1)
    wide = LinearAligner(alphas=alphas, scoring="recall_retention", normalize=False).fit(Xw, Yw)
    ref = GridSearchCV(LinearAligner(normalize=False), {"alpha": list(alphas)},
                       scoring=recall_retention_scorer,
                       cv=KFold(5, shuffle=True, random_state=0)).fit(Xw, Yw)
    np.testing.assert_allclose(wide.cv_scores_, ref.cv_results_["mean_test_score"], atol=0.01)
    assert wide.cv_scores_.max() - wide.cv_scores_.min() > 0.03
    few = LinearAligner(scoring="recall_retention").fit(X[:40], Y[:40])  # folds under 24
    assert few.alpha_criterion_ == "loo" and few.cv_scores_ is None
    assert LinearAligner(alpha=0.5).fit(X, Y).alpha_criterion_ == "fixed"
    with pytest.raises(ValueError, match="scoring"):
        LinearAligner(scoring="top1").fit(X, Y)


def test_retention_alpha_shrinks_less_on_real_encoders():
    """MiniLM -> MPNet, 600 unit-norm pairs, 750 held-out texts: less shrinkage than the
    leave-one-out choice, and at least its neighbourhood retention (0.661 against 0.657)."""
    from skalign.datasets import load_docstring_embeddings
    from skalign.metrics import retrieval_retention

    E = load_docstring_embeddings().embeddings
    A, B = (E[k] / np.linalg.norm(E[k], axis=1, keepdims=True) for k in ("minilm_l6",
                                                                         "mpnet_base"))
    perm = np.random.default_rng(0).permutation(len(A))
    tr, te = perm[:600], perm[600:]
    ret = LinearAligner(alphas=np.logspace(-3, 1, 9), scoring="recall_retention").fit(A[tr],
                                                                                     B[tr])
    loo = LinearAligner().fit(A[tr], B[tr])
    assert ret.alpha_ < loo.alpha_
    kept = [retrieval_retention(B[te], m.transform(A[te]))["recall"] for m in (ret, loo)]
    assert kept[0] > kept[1] - 0.002 and kept[0] > 0.64, kept


# ------------------------------------------------------------ float64 in, float64 computed
@pytest.mark.parametrize("make", [lambda: LinearAligner(alpha=0.3), lambda: LinearAligner(),
                                  lambda: ProcrustesAligner(scale=True)])
def test_float64_input_is_computed_in_float64(make):
    X, Y = make_paired_spaces(300, 24, n_features_target=16, relation="linear", noise=0.1,
                              shift=5.0, random_state=0)
    X, Y = X.astype(np.float64) * 1e3, Y.astype(np.float64)  # large offset: float32 loses digits
    est = make().fit(X, Y)
    W = est.coef_.T if hasattr(est, "coef_") else est.components_ * est.scale_
    b = est.intercept_ if hasattr(est, "coef_") else est.target_mean_ - est.source_mean_ @ W
    reference = X @ W + b  # float64 numpy
    out = est.transform(X)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-10 * np.abs(reference).max())
    out32 = est.transform(X.astype(np.float32))
    assert out32.dtype == np.float32
    assert np.abs(out32 - reference).max() > 1e-9 * np.abs(reference).max()  # the control
    if isinstance(est, ProcrustesAligner):
        back = est.inverse_transform(out)
        assert back.dtype == np.float64
        expected = (out - est.target_mean_) @ W.T / est.scale_**2 + est.source_mean_
        np.testing.assert_allclose(back, expected, rtol=0, atol=1e-9 * np.abs(X).max())


# ------------------------------------------------------------------------ real embeddings
@pytest.fixture(scope="module")
def real_split(docstring_pair):
    """Vendored MiniLM/MPNet subset: 350 held-out rows, 50 pairs; the rest is unpaired."""
    A, B, perm = docstring_pair
    test, train = perm[:350], perm[350:]
    return A, B, test, train


def test_tuned_baselines_beat_no_alignment_on_real_embeddings(real_split):
    A, B, test, train = real_split
    pairs = train[:50]
    my = B[train].mean(0)
    chance = 1 / len(test)
    for est in (LinearAligner(), ProcrustesAligner()):
        est.fit(A[pairs], B[pairs])
        top1 = top_k_accuracy(B[test] - my, est.transform(A[test]) - my)
        assert top1 > 50 * chance, (type(est).__name__, top1)
    # leave-one-out picks a real penalty, not one of the grid's edges (note: its squared-error
    # criterion is not retrieval; on these pairs minimum-norm least squares retrieves as well)
    auto = LinearAligner().fit(A[pairs], B[pairs])
    assert 1e-2 < auto.alpha_ < 1e4
