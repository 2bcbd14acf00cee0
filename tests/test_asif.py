"""ASIFAligner: relative representations against a brute-force reference, exact invariances."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from sklearn.model_selection import GridSearchCV

from skalign import ASIFAligner
from skalign.metrics import top_k_accuracy


def unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def clustered(seed=0, n=1200, d=16, n_clusters=30):
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.standard_normal((n_clusters, d))
    return centres[rng.integers(n_clusters, size=n)] + 0.5 * rng.standard_normal((n, d))


def reference(Q, anchors, k, p):
    """Brute-force ASIF relative representation in float64 numpy."""
    S = unit(Q) @ unit(anchors).T
    R = np.zeros_like(S)
    top = np.argsort(-S, axis=1)[:, :k]
    rows = np.arange(len(S))[:, None]
    R[rows, top] = np.maximum(S[rows, top], 0.0) ** p
    return unit(R)


@pytest.mark.parametrize("k,p", [(5, 1.0), (20, 8.0), (500, 3.0)])
def test_matches_brute_force(k, p):
    X = clustered(n=300, d=6)
    Y = np.tanh(X @ np.random.default_rng(1).standard_normal((6, 9)))
    est = ASIFAligner(n_nonzero=k, exponent=p, center=False).fit(X[:100], Y[:100])
    assert est.n_nonzero_ == min(k, 100) and est.n_components_ == 100
    # float64 in, float64 computed: equal to the float64 reference to rounding
    np.testing.assert_allclose(est.transform(X[100:]), reference(X[100:], X[:100], min(k, 100), p),
                               atol=1e-12)
    np.testing.assert_allclose(est.transform_target(Y[100:]),
                               reference(Y[100:], Y[:100], min(k, 100), p), atol=1e-12)
    assert est.source_anchors_.dtype == np.float64
    assert ((est.transform(X[100:]) != 0).sum(1) <= min(k, 100)).all()
    assert est.n_nonzero == k  # the parameter is never modified


def test_rotated_spaces_get_identical_representations():
    """If y = x Q with Q orthogonal, r_X(x) = r_Y(y) exactly: retrieval is perfect."""
    X = clustered(seed=2, n=800)
    Q = ortho_group.rvs(16, random_state=0)
    Y = X @ Q
    est = ASIFAligner(n_nonzero=100, exponent=8.0).fit(X[:300], Y[:300])
    np.testing.assert_allclose(est.transform(X[300:]), est.transform_target(Y[300:]), atol=1e-5)
    assert est.score(X[300:], Y[300:]) == 1.0
    # negative control: anchors paired at random carry no correspondence
    perm = np.random.default_rng(0).permutation(300)
    bad = ASIFAligner(n_nonzero=100, exponent=8.0).fit(X[:300], Y[:300][perm])
    assert bad.score(X[300:], Y[300:]) < 0.05


def test_exponent_sharpens_and_center_option():
    X = clustered(seed=3, n=500) + 5.0
    Y = X @ ortho_group.rvs(16, random_state=1)
    # a larger exponent concentrates each representation on fewer anchors: sum r^4 grows with p
    conc = [float((ASIFAligner(n_nonzero=100, exponent=p).fit(X[:200], Y[:200])
                   .transform(X[200:]) ** 4).sum(1).mean()) for p in (1.0, 4.0, 16.0)]
    assert conc[0] < conc[1] < conc[2]
    # center=True is exactly the original method on anchor-centred embeddings
    mx, my = X[:200].mean(0), Y[:200].mean(0)
    centred = ASIFAligner(n_nonzero=50, center=True).fit(X[:200], Y[:200])
    manual = ASIFAligner(n_nonzero=50, center=False).fit(X[:200] - mx, Y[:200] - my)
    np.testing.assert_allclose(centred.transform(X[200:]), manual.transform(X[200:] - mx),
                               atol=1e-5)
    np.testing.assert_allclose(centred.target_mean_, my, rtol=1e-5)


def test_outputs_dtypes_and_feature_names():
    X = clustered(n=200, d=5)
    est = ASIFAligner(n_nonzero=10).fit(X[:50], X[:50] ** 2)
    Z = est.transform(X[50:])
    assert Z.shape == (150, 50) and Z.dtype == np.float64
    assert est.transform(X[50:].astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-6)
    assert len(est.get_feature_names_out()) == 50
    np.testing.assert_allclose(est.transform(torch.tensor(X[50:60])), Z[:10], atol=1e-6)
    assert est.score(X[50:], X[50:] ** 2) == top_k_accuracy(est.transform_target(X[50:] ** 2), Z)
    with pytest.raises(ValueError, match="y has 3 features"):
        est.transform_target(X[:4, :3])


def test_grid_search_picks_enough_nonzeros():
    X = clustered(seed=3, n=900) + 5.0
    noise = 0.3 * np.random.default_rng(0).standard_normal(X.shape)
    Y = X @ ortho_group.rvs(16, random_state=1) + noise
    grid = GridSearchCV(ASIFAligner(), {"n_nonzero": [5, 300]}, cv=3).fit(X, Y)
    assert grid.best_params_["n_nonzero"] == 300
    scores = grid.cv_results_["mean_test_score"]
    assert scores[1] > scores[0] + 0.2


def test_defaults_on_real_embeddings(docstring_pair):
    """Vendored MiniLM/MPNet subset, 300 anchors: the defaults (p = 1, centred) against p = 8."""
    A, B, perm = docstring_pair
    test, pairs = perm[:350], perm[350:650]
    default = ASIFAligner().fit(A[pairs], B[pairs]).score(A[test], B[test])
    sharp = ASIFAligner(exponent=8.0).fit(A[pairs], B[pairs]).score(A[test], B[test])
    assert default > 0.8 and default > sharp + 0.3, (default, sharp)  # chance is 1/350
