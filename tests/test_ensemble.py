"""OrthogonalEnsembleAligner: ground-truth recovery, ensemble gains, API, pipelines, data."""

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline

from skalign import stack_views
from skalign._ensemble.ensemble import OrthogonalEnsembleAligner, geodesic_distance
from skalign.datasets._digits_ensemble import DIGITS_SHIFTS, load_digits_ensemble
from skalign.manifold import karcher_mean
from skalign.metrics import recall_at_1

SOLVERS = ["geodesic", "procrustes", "gpa"]


def make_views(n=400, d=12, m=4, noise=0.5, outliers=0.0, k=8, seed=0):
    """Views ``normalize(Z Q_i + noise)`` of clustered latents ``Z``, random orthogonal ``Q_i``.

    With ``outliers``, that fraction of the rows of every view but the first is replaced by
    unrelated random vectors.
    """
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, d))
    labels = rng.integers(0, k, n)
    Z = centers[labels] + 0.5 * rng.standard_normal((n, d))
    Q = ortho_group.rvs(d, size=m, random_state=seed + 1)
    views = []
    for i, q in enumerate(Q):
        V = Z @ q + noise * rng.standard_normal((n, d))
        if outliers and i > 0:
            bad = rng.random(n) < outliers
            V[bad] = 2 * rng.standard_normal((bad.sum(), d))
        views.append(V / np.linalg.norm(V, axis=1, keepdims=True))
    return stack_views(views), views, labels, Q


def recovery_error(R, Q, ref=0):
    """Largest ‖R_i − Q_iᵀ Q_ref‖_F over the views."""
    return max(np.linalg.norm(R[i] - Q[i].T @ Q[ref]) for i in range(len(Q)))


def orthogonality_error(R):
    return max(np.linalg.norm(r.T @ r - np.eye(len(r))) for r in R)


@pytest.mark.parametrize("solver", SOLVERS)
def test_recovers_the_rotations(solver):
    X, _, _, Q = make_views(n=2000, noise=0.1)
    ens = OrthogonalEnsembleAligner(n_views=4, solver=solver).fit(X)
    assert orthogonality_error(ens.components_) < 1e-5
    np.testing.assert_array_equal(ens.components_[0], np.eye(12))
    assert recovery_error(ens.components_, Q) < 0.05
    # Negative control: another set of rotations is far away (‖A − B‖_F of random
    # orthogonal 12 × 12 matrices is about √24 ≈ 4.9).
    Q_other = ortho_group.rvs(12, size=4, random_state=99)
    assert recovery_error(ens.components_, Q_other) > 3


@pytest.mark.parametrize("solver", SOLVERS)
def test_aligned_ensemble_beats_unaligned_and_every_view(solver):
    X, views, labels, _ = make_views()
    singles = [recall_at_1(v, labels) for v in views]
    unaligned = recall_at_1(sum(views), labels)
    ens = OrthogonalEnsembleAligner(n_views=4, solver=solver).fit(X)
    for aggregation in ["karcher", "extrinsic"]:
        aligned = recall_at_1(ens.set_params(aggregation=aggregation).transform(X), labels)
        assert aligned > max(singles) + 0.03
        assert aligned > unaligned + 0.05


def test_shuffled_pairs_negative_control():
    # Rows of the non-reference views permuted: the correspondence is gone, nothing is recovered
    # and the "ensemble" is worse than the reference view alone.
    X, views, labels, Q = make_views(n=2000, noise=0.1)
    rng = np.random.default_rng(5)
    Xs = X.copy()
    for i in range(1, 4):
        Xs[:, 12 * i:12 * (i + 1)] = Xs[rng.permutation(len(X)), 12 * i:12 * (i + 1)]
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes").fit(Xs)
    assert recovery_error(ens.components_, Q) > 3
    assert recall_at_1(ens.transform(X), labels) < recall_at_1(views[0], labels)


def test_geodesic_is_robust_to_outlier_rows():
    X, _, _, Q = make_views(noise=0.3, outliers=0.3)
    proc = OrthogonalEnsembleAligner(n_views=4, solver="procrustes").fit(X)
    geo = OrthogonalEnsembleAligner(n_views=4, solver="geodesic").fit(X)
    assert recovery_error(geo.components_, Q) < 0.8 * recovery_error(proc.components_, Q)
    # The geodesic objective (mean angle) of the projected solution improves on its start.
    assert geo.loss_curve_[-1] < geo.loss_curve_[0]
    V = torch.from_numpy(X).reshape(len(X), 4, 12)
    V = V / V.norm(dim=-1, keepdim=True)

    def mean_angle(R):
        A = torch.einsum("nmd,mde->nme", V, torch.from_numpy(R))
        return float(geodesic_distance(A[:, 1:], A[:, :1]).mean())

    assert mean_angle(geo.components_) < mean_angle(proc.components_) - 1e-3


def test_gpa_reference_and_gauge():
    X, _, _, Q = make_views(n=2000, noise=0.1)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="gpa", reference=2).fit(X)
    np.testing.assert_allclose(ens.components_[2], np.eye(12), atol=1e-12)
    assert recovery_error(ens.components_, Q, ref=2) < 0.05
    assert ens.n_iter_ >= 2 and ens.loss_curve_[-1] <= ens.loss_curve_[0]


def test_transform_views_and_aggregations():
    X, views, _, _ = make_views(n=300)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes").fit(X)
    A = ens.transform_views(X)
    assert A.shape == (300, 4, 12) and A.dtype == np.float64
    for i in range(4):
        np.testing.assert_allclose(A[:, i], views[i] @ ens.components_[i], atol=1e-6)
    ext = ens.set_params(aggregation="extrinsic").transform(X)
    S = A.sum(1)
    np.testing.assert_allclose(ext, S / np.linalg.norm(S, axis=1, keepdims=True), atol=1e-6)
    kar = ens.set_params(aggregation="karcher").transform(X)
    np.testing.assert_allclose(np.linalg.norm(kar, axis=1), 1, atol=1e-6)
    # Karcher and extrinsic means are close but different at these spreads.
    gap = np.degrees(np.arccos(np.clip((kar * ext).sum(1), -1, 1)))
    assert 1e-3 < gap.max() < 5
    stacked = ens.set_params(aggregation=None).transform(X)
    np.testing.assert_allclose(stacked, A.reshape(300, -1), atol=1e-6)
    assert len(ens.get_feature_names_out()) == 48
    assert len(ens.set_params(aggregation="karcher").get_feature_names_out()) == 12
    assert ens.transform(X.astype(np.float32)).dtype == np.float32
    assert 0.8 < ens.score(X) <= 1.0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_fit_is_unsupervised_and_repeatable():
    X, _, labels, _ = make_views(n=300)
    a = OrthogonalEnsembleAligner(n_views=4, max_iter=40).fit(X)
    b = OrthogonalEnsembleAligner(n_views=4, max_iter=40).fit(X, labels)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert a.loss_curve_ == b.loss_curve_
    assert not a.__sklearn_tags__().target_tags.required


def test_single_view_only_normalises():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 5))
    ens = OrthogonalEnsembleAligner().fit(X)
    expected = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(ens.transform(X), expected, atol=1e-6)
    assert ens.n_iter_ == 1


def test_pipeline_grid_search_over_the_penalty():
    """Every candidate of the grid, cross-validated inside a pipeline, beats the best single
    encoder and the unaligned sum of the views by the same protocol (3-fold kNN accuracy)."""
    X, views, labels, _ = make_views(n=300)
    pipe = Pipeline([
        ("ens", OrthogonalEnsembleAligner(n_views=4, max_iter=30)),
        ("clf", KNeighborsClassifier()),
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search = GridSearchCV(pipe, {"ens__orthogonality_penalty": [0.0, 1.0, 10.0]}, cv=3)
        search.fit(X, labels)
    knn = KNeighborsClassifier()
    best_single = max(cross_val_score(knn, v, labels, cv=3).mean() for v in views)
    unaligned = cross_val_score(knn, sum(views), labels, cv=3).mean()
    candidates = search.cv_results_["mean_test_score"]
    assert candidates.min() > best_single + 0.02, (candidates, best_single)
    assert candidates.min() > unaligned + 0.05, (candidates, unaligned)
    # The aligner alone is searchable with its own (unsupervised) score too.
    search = GridSearchCV(OrthogonalEnsembleAligner(n_views=4, solver="procrustes"),
                          {"aggregation": ["karcher", "extrinsic"]}, cv=3).fit(X)
    assert search.best_score_ > 0.8


def test_tensor_input_on_device(device):
    X, _, _, _ = make_views(n=200)
    Xt = torch.as_tensor(X, device=device)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes", device=device).fit(Xt)
    assert ens.device_.startswith(device)
    assert isinstance(ens.components_, np.ndarray)
    np.testing.assert_allclose(ens.transform(Xt), ens.transform(X), atol=1e-5)


def test_pickle_loads_without_gpu(tmp_path):
    X, _, _, _ = make_views(n=100)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes").fit(X)
    path = tmp_path / "ens.pkl"
    path.write_bytes(pickle.dumps(ens))
    np.save(tmp_path / "X.npy", X)
    code = (
        "import pickle, numpy as np, sys; "
        f"m = pickle.load(open({str(path)!r}, 'rb')); X = np.load({str(tmp_path / 'X.npy')!r}); "
        "sys.stdout.write(repr(float(m.transform(X).sum())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert abs(float(out.stdout) - float(ens.transform(X).sum())) < 1e-9


def test_loss_curve_verbose_and_convergence_warning(capsys):
    X, _, _, _ = make_views(n=200)
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):
        ens = OrthogonalEnsembleAligner(n_views=4, max_iter=3, tol=0.0, verbose=1).fit(X)
    assert ens.n_iter_ == 3 and len(ens.loss_curve_) == 3
    assert "iteration" in capsys.readouterr().out


def test_divergence_names_the_parameter():
    X, _, _, _ = make_views(n=200)
    with pytest.raises(ValueError, match="learning_rate"):
        OrthogonalEnsembleAligner(n_views=4, learning_rate=1e30, max_iter=5).fit(X)


@pytest.mark.parametrize(
    "params, X, match",
    [
        ({"n_views": 3}, np.ones((5, 8)), "not divisible by n_views=3"),
        ({"n_views": 2, "reference": 2}, np.ones((5, 8)), "reference=2 must be smaller"),
        ({"n_views": 2}, np.full((5, 8), np.nan), "NaN"),
        ({"n_views": 2}, np.ones((1, 8)), "1 sample"),
    ],
)
def test_bad_input(params, X, match):
    with pytest.raises(ValueError, match=match):
        OrthogonalEnsembleAligner(**params).fit(X)


def test_transform_rejects_bad_input():
    X, _, _, _ = make_views(n=50)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes").fit(X)
    with pytest.raises(ValueError, match="expecting 48 features"):
        ens.transform(X[:, :24])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", SOLVERS)
def test_zero_embeddings_are_missing_views(solver):
    X, _, _, Q = make_views(n=2000, noise=0.1)
    rng = np.random.default_rng(3)
    Xm = X.copy()
    for i in range(4):  # 10 % of every view missing
        Xm[rng.random(len(X)) < 0.1, 12 * i:12 * (i + 1)] = 0
    Xm[7] = 0  # a sample with no embedding at all
    ens = OrthogonalEnsembleAligner(n_views=4, solver=solver, max_iter=50).fit(Xm)
    assert recovery_error(ens.components_, Q) < 0.06
    E = ens.transform(Xm)
    assert np.isfinite(E).all()
    np.testing.assert_array_equal(E[7], 0)
    # A sample with view 2 missing gets the Karcher mean of its three other aligned views.
    row = next(j for j in range(len(X)) if (Xm[j, 24:36] == 0).all() and (Xm[j] != 0).sum() == 36)
    expected = karcher_mean(torch.from_numpy(ens.transform_views(Xm[[row]])[:, [0, 1, 3]]))
    np.testing.assert_allclose(E[row], expected[0].numpy(), atol=1e-6)
    np.testing.assert_array_equal(ens.transform_views(Xm[[row]])[0, 2], 0)


def test_digits_ensemble_is_cached_and_deterministic(tmp_path):
    kwargs = dict(n_encoders=2, dim=8, epochs=3, random_state=0)
    a = load_digits_ensemble(data_home=tmp_path, **kwargs)
    assert a.splits == ["train", "test", *DIGITS_SHIFTS]
    assert len(list(tmp_path.glob("digits_ensemble_*.joblib"))) == 1
    b = load_digits_ensemble(data_home=tmp_path, **kwargs)  # from the cache
    c = load_digits_ensemble(use_cache=False, **kwargs)  # retrained
    for split in a.splits:
        assert a.X[split].shape == (len(a.target[split]), 16) and a.X[split].dtype == np.float32
        np.testing.assert_array_equal(a.X[split], b.X[split])
        np.testing.assert_array_equal(a.X[split], c.X[split])
        norms = np.linalg.norm(a.X[split].reshape(-1, 2, 8), axis=-1)
        np.testing.assert_allclose(norms, 1, atol=1e-5)
    # The two encoders differ (different seeds), and the shifts change the embeddings.
    assert np.abs(a.X["test"][:, :8] - a.X["test"][:, 8:]).max() > 0.1
    for shift in DIGITS_SHIFTS:
        assert np.abs(a.X[shift] - a.X["test"]).mean() > 0.01
    other = load_digits_ensemble(data_home=tmp_path, **{**kwargs, "random_state": 1})
    assert a.seeds != other.seeds


def _rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("aggregation", [None, "extrinsic", "karcher"])
def test_float64_input_is_computed_in_float64(aggregation):
    X, views, _, _ = make_views(n=200)
    ens = OrthogonalEnsembleAligner(n_views=4, solver="procrustes", aggregation=aggregation).fit(X)
    A = np.stack([v @ R for v, R in zip(views, ens.components_)], axis=1)  # float64 numpy
    if aggregation is None:
        ref = A.reshape(len(X), -1)
    elif aggregation == "extrinsic":
        S = A.sum(1)
        ref = S / np.linalg.norm(S, axis=1, keepdims=True)
    else:  # the Karcher mean itself, run in float64 on the float64 aligned views
        ref = karcher_mean(torch.from_numpy(A), tol=ens.karcher_tol,
                           max_iter=ens.karcher_max_iter).numpy()
    out, aligned = ens.transform(X), ens.transform_views(X)
    assert out.dtype == aligned.dtype == np.float64
    assert _rel_err(aligned, A) < 1e-10 and _rel_err(out, ref) < 1e-10
    # float32 input is computed in float32: it cannot meet the float64 bound.
    assert _rel_err(ens.transform(X.astype(np.float32)), ref) > 1e-10
