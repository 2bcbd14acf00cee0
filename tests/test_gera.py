"""GeRAAligner: geometric term, contrastive-only equivalence, label efficiency, data contract."""

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from sklearn import config_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from skalign import GeRAAligner, LinearAligner, ProcrustesAligner, UnpairedPool
from skalign._gera.gera import (
    _initial_params,
    _Pools,
    _preprocess,
    _procrustes_factors,
    contrastive_loss,
    geometric_term,
)
from skalign._gera.knn import knn_graph
from skalign.metrics import top_k_accuracy
from skalign.utils._validation import EpochSelection, log_reciprocal_ranks, validation_folds


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny matrices: intra-op threads only add contention on a shared machine
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def clustered_pairs(seed=0, n=1500, d=16, n_clusters=20, noise=0.05):
    """Clustered source points and targets related by a random rotation (plus small noise)."""
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.standard_normal((n_clusters, d))
    X = centres[rng.integers(n_clusters, size=n)] + 0.5 * rng.standard_normal((n, d))
    Q = ortho_group.rvs(d, random_state=seed)
    Y = X @ Q + noise * rng.standard_normal((n, d))
    return X, Y, Q


def unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- kNN graph
def test_knn_graph_matches_brute_force():
    rng = np.random.default_rng(0)
    U = unit(rng.standard_normal((300, 12))).astype(np.float32)
    idx, sq = knn_graph(torch.from_numpy(U), 7, batch_size=37)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    expected = np.argsort(-S, axis=1)[:, :7]
    np.testing.assert_array_equal(idx.numpy(), expected)
    np.testing.assert_allclose(sq.numpy(), 2 - 2 * np.take_along_axis(S, expected, 1), atol=1e-5)
    assert not (idx.numpy() == np.arange(300)[:, None]).any()  # never its own neighbour
    with pytest.raises(ValueError, match="k must be"):
        knn_graph(torch.from_numpy(U[:5]), 5)


# ------------------------------------------------------------------------ geometric term
def _local_layout(U, K=8):
    Ut = torch.from_numpy(U)
    idx, _ = knn_graph(Ut, K)
    S = torch.cat([torch.arange(len(U))[:, None], idx], dim=1)
    return Ut, S


def _batch_neighbors(U, K=8):
    Ut = torch.from_numpy(U)
    return torch.topk(Ut @ Ut.T, K + 1, dim=1).indices


@pytest.mark.parametrize("kernel", ["heat", "linear", "squared", "inverse"])
@pytest.mark.parametrize("divergence", ["kl", "js", "frobenius"])
def test_geometric_term_is_zero_for_isometries(kernel, divergence):
    X, _, Q = clustered_pairs(n=200, d=10)
    U = unit(X - X.mean(0)).astype(np.float32)
    Ut, S = _local_layout(U)
    kw = dict(kernel=kernel, divergence=divergence)
    # rotation (square) and isometric embedding into a wider space
    wide = np.linalg.qr(np.random.default_rng(1).standard_normal((16, 10)))[0].T  # 10 x 16
    for M in (Q, wide):
        Z = torch.from_numpy((U @ M).astype(np.float32))
        for steps in (1, 2):
            local = geometric_term(Ut[S], Z[S], steps=steps, **kw)
            batch = geometric_term(Ut, Z, neighbors=_batch_neighbors(U), steps=steps, **kw)
            assert abs(float(local)) < 1e-5 and abs(float(batch)) < 1e-5
    # negative control: shuffling which point is which destroys every neighbourhood
    Zp = torch.from_numpy(U[np.random.default_rng(2).permutation(len(U))] @ Q.astype(np.float32))
    assert float(geometric_term(Ut[S], Zp[S], **kw)) > 1e-3


@pytest.mark.parametrize("kernel,divergence", [("heat", "kl"), ("linear", "js"),
                                               ("squared", "kl"), ("inverse", "frobenius")])
def test_geometric_term_grows_with_distortion(kernel, divergence):
    X, _, _ = clustered_pairs(n=300, d=10)
    U = unit(X - X.mean(0)).astype(np.float32)
    Ut, S = _local_layout(U)
    V = ortho_group.rvs(10, random_state=3)
    values = []
    for cond in (1.0, 2.0, 4.0, 16.0, 64.0):
        M = V @ np.diag(np.geomspace(1.0, 1.0 / cond, 10)) @ V.T
        Z = torch.from_numpy(unit(U @ M).astype(np.float32))
        values.append(float(geometric_term(Ut[S], Z[S], kernel=kernel, divergence=divergence)))
    assert values[0] < 1e-5
    assert all(b > a for a, b in zip(values, values[1:])), values
    assert values[-1] > 20 * values[1]


def test_geometric_term_is_differentiable_towards_the_isometry():
    X, _, Q = clustered_pairs(n=200, d=6)
    U = unit(X - X.mean(0)).astype(np.float32)
    Ut, S = _local_layout(U)
    M = torch.tensor(Q @ np.diag([3.0, 1, 1, 1, 1, 0.3]), dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([M], lr=0.02)
    first = None
    for _ in range(150):
        opt.zero_grad()
        Z = Ut @ M
        loss = geometric_term(Ut[S], (Z / Z.norm(dim=1, keepdim=True))[S])
        first = first if first is not None else float(loss.detach())
        loss.backward()
        opt.step()
    s = torch.linalg.svdvals(M.detach())
    assert float(loss.detach()) < 0.05 * first
    assert float(s.max() / s.min()) < 2.0  # started at 10


# --------------------------------------------------------------- contrastive-only (alpha = 0)
@pytest.mark.filterwarnings("ignore:GeRAAligner. the:sklearn.exceptions.ConvergenceWarning")
def test_alpha_zero_is_plain_contrastive_training():
    X, Y, _ = clustered_pairs(n=260, d=6)
    pairs, pool = slice(0, 60), UnpairedPool(X=X[60:], y=Y[60:])
    kw = dict(alpha=0.0, init="pca", early_stopping=False, max_iter=30, n_iter_no_change=1000,
              pair_batch_size=1000, learning_rate=0.05, temperature=0.07, random_state=0)
    est = GeRAAligner(**kw).fit(X[pairs], Y[pairs], unpaired=pool)
    assert est.n_neighbors_ == 0 and est.n_iter_ == 30

    # independent reference: full-batch symmetric InfoNCE, Adam, same preprocessing and start
    Px = torch.tensor(np.vstack([X[pairs], pool.X]), dtype=torch.float32)
    Py = torch.tensor(np.vstack([Y[pairs], pool.y]), dtype=torch.float32)
    mx, my = Px.mean(0), Py.mean(0)
    ux, uy = _preprocess(Px, mx), _preprocess(Py, my)
    fp = _initial_params(ux, 6, init="pca", mapping="linear", hidden_size=1, generator=None)
    gp = _initial_params(uy, 6, init="pca", mapping="linear", hidden_size=1, generator=None)
    leaves = [fp["coef"], fp["intercept"], gp["coef"], gp["intercept"]]
    for t in leaves:
        t.requires_grad_(True)
    opt = torch.optim.Adam(leaves, lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        zx = ux[:60] @ fp["coef"] + fp["intercept"]
        zy = uy[:60] @ gp["coef"] + gp["intercept"]
        zx, zy = zx / zx.norm(dim=1, keepdim=True), zy / zy.norm(dim=1, keepdim=True)
        logits = (zx @ zy.T) / 0.07
        t = torch.arange(60)
        loss = 0.5 * (torch.nn.functional.cross_entropy(logits, t)
                      + torch.nn.functional.cross_entropy(logits.T, t))
        loss.backward()
        opt.step()
    np.testing.assert_allclose(est.source_params_["coef"], fp["coef"].detach().numpy(), atol=2e-4)
    np.testing.assert_allclose(est.target_params_["coef"], gp["coef"].detach().numpy(), atol=2e-4)
    np.testing.assert_allclose(est.loss_curve_[-1], float(loss.detach()), rtol=1e-3)

    # the geometric options are inert at alpha = 0
    other = GeRAAligner(**kw, kernel="inverse", divergence="js", n_neighbors=3, mode="batch")
    other.fit(X[pairs], Y[pairs], unpaired=pool)
    for name in est.source_params_:
        np.testing.assert_array_equal(est.source_params_[name], other.source_params_[name])


def test_contrastive_loss_matches_clip_formula():
    rng = np.random.default_rng(0)
    zx = torch.tensor(unit(rng.standard_normal((5, 3))), dtype=torch.float32)
    zy = torch.tensor(unit(rng.standard_normal((5, 3))), dtype=torch.float32)
    S = 10.0 * (zx @ zy.T).numpy().astype(np.float64)
    ce = lambda L: -np.mean(np.diag(L) - np.log(np.exp(L).sum(1)))  # noqa: E731
    assert float(contrastive_loss(zx, zy, 10.0)) == pytest.approx(0.5 * (ce(S) + ce(S.T)), rel=1e-5)


def test_contrastive_alignment_recovers_a_rotation_and_fails_on_shuffled_pairs():
    X, Y, _ = clustered_pairs(seed=1, n=1200, d=12)
    est = GeRAAligner(alpha=0.0, random_state=0).fit(X[:200], Y[:200])
    assert est.score(X[200:], Y[200:]) > 0.9
    perm = np.random.default_rng(0).permutation(200)
    bad = GeRAAligner(alpha=0.0, init="pca", random_state=0).fit(X[:200], Y[:200][perm])
    assert bad.score(X[200:], Y[200:]) < 0.05


# ------------------------------------------------------------------------------ label efficiency
@pytest.mark.filterwarnings("ignore:GeRAAligner. the:sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("seed", [0, 2])
def test_geometric_term_helps_with_few_pairs(seed):
    """24 pairs in 16 dimensions + 976 unpaired points; the true relation is a rotation."""
    X, Y, _ = clustered_pairs(seed=seed)
    pool = UnpairedPool(X=X[24:1000], y=Y[24:1000])
    # CLIP's temperature and a long run: the regime where contrastive training alone overfits
    # (without early stopping: on held-out pairs the default keeps the exact Procrustes start)
    kw = dict(random_state=0, temperature=0.07, max_iter=300, tol=0.0, early_stopping=False)
    plain = GeRAAligner(alpha=0.0, **kw).fit(X[:24], Y[:24], unpaired=pool)
    gera = GeRAAligner(alpha=100.0, **kw).fit(X[:24], Y[:24], unpaired=pool)
    acc_plain, acc_gera = plain.score(X[1000:], Y[1000:]), gera.score(X[1000:], Y[1000:])
    assert acc_gera > 0.95 and acc_gera > acc_plain + 0.02, (acc_gera, acc_plain)

    # the mechanism: GeRA's maps stay close to isometries (as the true relation is)
    def cond(W):
        s = np.linalg.svd(W, compute_uv=False)
        return s.max() / s.min()

    assert cond(gera.source_params_["coef"]) < 2.0 < 5.0 < cond(plain.source_params_["coef"])


@pytest.mark.parametrize("mode,kernel,divergence,mapping", [
    ("local", "heat", "kl", "linear"), ("local", "linear", "js", "mlp"),
    ("local", "inverse", "frobenius", "linear"), ("batch", "heat", "js", "linear"),
    ("batch", "squared", "kl", "mlp"),
])
def test_every_variant_aligns(mode, kernel, divergence, mapping):
    X, Y, _ = clustered_pairs(seed=4, n=900, d=8)
    pool = UnpairedPool(X=X[100:600], y=Y[100:600])
    est = GeRAAligner(alpha=10.0, mode=mode, kernel=kernel, divergence=divergence,
                      mapping=mapping, diffusion_steps=2 if mode == "batch" else 1,
                      n_neighbors=8, random_state=0, max_iter=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X[:100], Y[:100], unpaired=pool)
    assert est.n_neighbors_ == 8
    assert est.score(X[600:], Y[600:]) > 0.85


# ----------------------------------------------------------------- model selection and the pool
class RecordingGeRA(GeRAAligner):
    seen = []

    def fit(self, X, y, unpaired=None):
        super().fit(X, y, unpaired=unpaired)
        type(self).seen.append((len(X), self.n_unpaired_source_, self.n_unpaired_target_))
        return self


def test_grid_search_every_fold_sees_the_whole_pool():
    X, Y, _ = clustered_pairs(seed=5, n=360, d=6)
    # pool with exactly as many rows as the paired data: raw arrays would be sliced per fold
    pool = UnpairedPool(X=X[120:240], y=Y[120:360])
    RecordingGeRA.seen = []
    grid = GridSearchCV(RecordingGeRA(max_iter=5, random_state=0),
                        {"alpha": [0.0, 1.0], "n_neighbors": [3, 200]}, cv=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        grid.fit(X[:120], Y[:120], unpaired=pool)
    assert len(RecordingGeRA.seen) == 4 * 3 + 1
    assert {s[1:] for s in RecordingGeRA.seen} == {(120, 240)}
    assert {s[0] for s in RecordingGeRA.seen} == {80, 120}  # folds slice the pairs only
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))
    best = grid.best_estimator_
    assert best.n_unpaired_source_ == 120 and best.get_params()["n_neighbors"] in (3, 200)
    if best.alpha > 0:
        assert best.n_neighbors_ == min(best.n_neighbors, 120 + 120 - 1)


def test_grid_search_with_metadata_routing():
    X, Y, _ = clustered_pairs(seed=6, n=300, d=6)
    pool = UnpairedPool(X=X[100:], y=Y[100:])
    RecordingGeRA.seen = []
    with config_context(enable_metadata_routing=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = RecordingGeRA(max_iter=3, random_state=0).set_fit_request(unpaired=True)
        GridSearchCV(est, {"alpha": [0.0, 1.0]}, cv=2).fit(X[:100], Y[:100], unpaired=pool)
    assert len(RecordingGeRA.seen) == 2 * 2 + 1
    assert {s[1:] for s in RecordingGeRA.seen} == {(200, 200)}


def test_n_neighbors_is_clipped_without_changing_the_parameter():
    X, Y, _ = clustered_pairs(n=30, d=4)
    est = GeRAAligner(alpha=1.0, n_neighbors=50, max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X[:10], Y[:10], unpaired=UnpairedPool(X=X[10:15]))
    assert est.n_neighbors == 50
    assert est.n_neighbors_ == 9  # 10 training pairs + 0 unpaired targets, minus 1


# ------------------------------------------------------------------------ fitting mechanics
@pytest.mark.filterwarnings("ignore:GeRAAligner. the:sklearn.exceptions.ConvergenceWarning")
def test_reproducible_with_random_state():
    X, Y, _ = clustered_pairs(n=400, d=6)
    pool = UnpairedPool(X=X[80:], y=Y[80:])
    kw = dict(alpha=1.0, max_iter=15, init="random")  # a seeded start, so c differs
    a = GeRAAligner(random_state=3, **kw).fit(X[:80], Y[:80], unpaired=pool)
    b = GeRAAligner(random_state=3, **kw).fit(X[:80], Y[:80], unpaired=pool)
    c = GeRAAligner(random_state=4, **kw).fit(X[:80], Y[:80], unpaired=pool)
    np.testing.assert_array_equal(a.source_params_["coef"], b.source_params_["coef"])
    assert a.loss_curve_ == b.loss_curve_ and a.validation_scores_ == b.validation_scores_
    assert a.best_epoch_ == b.best_epoch_ > 0
    assert not np.array_equal(a.source_params_["coef"], c.source_params_["coef"])


def test_history_and_early_stopping():
    X, Y, _ = clustered_pairs(n=600, d=6)
    est = GeRAAligner(alpha=1.0, random_state=0, max_iter=300, n_iter_no_change=5, tol=1e-4,
                      validation_fraction=0.25, init="pca")
    est.fit(X[:200], Y[:200], unpaired=UnpairedPool(X=X[200:], y=Y[200:]))
    assert 1 <= est.n_iter_ < 300  # the validation runs stalled
    assert len(est.validation_scores_) == est.n_iter_ + 1  # the start, then every epoch
    assert all(0 < v <= 1 for v in est.validation_scores_)
    assert 1 <= est.best_epoch_ <= est.n_iter_ and not est.kept_start_  # the PCA start is unaligned
    assert est.best_validation_score_ == max(est.validation_scores_)
    assert est.best_validation_score_ == est.validation_scores_[est.best_epoch_]
    assert len(est.loss_curve_) == est.best_epoch_ and est.loss_curve_[-1] < est.loss_curve_[0]
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        GeRAAligner(max_iter=2, tol=1e-4, random_state=0).fit(X[:50], Y[:50])
    # early_stopping=False: a fixed budget of max_iter epochs on all the pairs, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = GeRAAligner(early_stopping=False, random_state=0).fit(X[:50], Y[:50])
    assert fixed.n_iter_ == fixed.best_epoch_ == len(fixed.loss_curve_) == fixed.max_iter == 20
    assert fixed.validation_scores_ is None and fixed.best_validation_score_ is None
    assert not fixed.kept_start_


def test_the_returned_maps_are_a_plain_fit_of_the_chosen_epochs():
    """After validation the maps are trained on all the pairs for ``best_epoch_`` epochs: bit for
    bit what ``early_stopping=False, max_iter=best_epoch_`` gives."""
    X, Y, _ = clustered_pairs(n=400, d=6)
    pool = UnpairedPool(X=X[60:], y=Y[60:])
    est = GeRAAligner(init="pca", random_state=0).fit(X[:60], Y[:60], unpaired=pool)
    assert est.best_epoch_ >= 1
    ref = GeRAAligner(init="pca", early_stopping=False, max_iter=est.best_epoch_, random_state=0)
    ref.fit(X[:60], Y[:60], unpaired=pool)
    for name in est.source_params_:
        np.testing.assert_array_equal(est.source_params_[name], ref.source_params_[name])
        np.testing.assert_array_equal(est.target_params_[name], ref.target_params_[name])
    assert est.loss_curve_ == ref.loss_curve_


@pytest.mark.parametrize("n", [2, 4, 40])
def test_the_start_is_kept_exactly_when_training_does_not_beat_it(n):
    """Targets an exact rotation of the sources: Procrustes is already perfect on held-out pairs,
    so no epoch beats it and the fit returns the start itself; with 2 pairs nothing can be held
    out (each fold must leave 2 pairs to train on) and the start is kept too."""
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 5)) + 1.0
    Y = X @ ortho_group.rvs(5, random_state=0)
    est = GeRAAligner(random_state=0).fit(X, Y)
    assert est.kept_start_ and est.best_epoch_ == 0 and est.loss_curve_ == []
    data = _Pools.build(X, Y, None, torch.device("cpu"))  # the fit's own coordinates
    F, G = _procrustes_factors(data.Ux, data.Uy, 5)
    np.testing.assert_array_equal(est.source_params_["coef"], F.numpy())
    np.testing.assert_array_equal(est.target_params_["coef"], G.numpy())
    assert not est.source_params_["intercept"].any() and not est.target_params_["intercept"].any()
    if n == 2:
        assert est.n_iter_ == 0 and est.validation_scores_ == []
        assert est.best_validation_score_ is None
    else:
        assert est.n_iter_ >= 1 and len(est.validation_scores_) == est.n_iter_ + 1
        assert est.best_validation_score_ == est.validation_scores_[0] == pytest.approx(1.0)


def test_validation_folds():
    gen = torch.Generator().manual_seed(0)
    for n, fraction, n_folds in [(25, 0.2, 5), (200, 0.2, 5), (1000, 0.2, 1), (500, 0.2, 2),
                                 (4, 0.2, 4), (3, 0.5, 3), (5, 0.5, 2)]:
        folds = validation_folds(n, fraction, gen)
        assert len(folds) == n_folds, (n, fraction)
        held = torch.cat([val for _, val in folds])
        assert len(held) == len(set(held.tolist()))  # each pair held out at most once
        for train, val in folds:
            assert sorted(train.tolist() + val.tolist()) == list(range(n))
            assert len(train) >= 2 and len(val) >= 1
        assert len(held) == n or len(held) >= 200
    assert validation_folds(2, 0.2, gen) == []
    a = validation_folds(50, 0.2, torch.Generator().manual_seed(1))
    b = validation_folds(50, 0.2, torch.Generator().manual_seed(1))
    assert all(torch.equal(x[1], y[1]) for x, y in zip(a, b))


def test_log_reciprocal_ranks_and_the_paired_margin():
    rng = np.random.default_rng(0)
    Q, G = (torch.tensor(unit(rng.standard_normal(s))) for s in ((7, 4), (30, 4)))
    S = (Q @ G.T).numpy()
    ranks = [1 + int((S[i] > S[i, i]).sum()) for i in range(7)]
    np.testing.assert_allclose(log_reciprocal_ranks(Q, G).numpy(), -np.log(ranks))
    assert log_reciprocal_ranks(G, G).eq(0).all()  # every row its own nearest: rank 1
    # the best epoch must beat the start by more than one standard error of the paired gains
    sel = EpochSelection()
    for epoch, v in enumerate([[0.0, -1.0, -2.0, -1.0], [0.0, -0.5, -2.0, -1.0],
                               [0.0, -0.5, -1.5, -0.5]]):
        sel.add(epoch, torch.tensor(v, dtype=torch.float64))
    assert sel.best_epoch == 2 and sel.scores == [-1.0, -0.875, -0.625]
    noisy = EpochSelection()
    for epoch, v in enumerate([[0.0, -1.0, -2.0, -1.0], [-1.0, 0.0, -2.0, 0.0]]):
        noisy.add(epoch, torch.tensor(v, dtype=torch.float64))
    assert noisy.score(1) > noisy.score(0) and noisy.best_epoch == 0


def test_verbose_prints_progress(capsys):
    X, Y, _ = clustered_pairs(n=60, d=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        GeRAAligner(verbose=1, max_iter=3, random_state=0).fit(X, Y)
    assert "[GeRAAligner] iteration" in capsys.readouterr().out


def test_outputs_shared_space():
    X, Y, _ = clustered_pairs(n=300, d=6)
    Y8 = np.hstack([Y, Y[:, :2] ** 2])
    est = GeRAAligner(n_components=4, max_iter=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X[:100], Y8[:100])
    Zx, Zy = est.transform(X[100:]), est.transform_target(Y8[100:])
    assert Zx.shape == Zy.shape == (200, 4) and Zx.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(Zx, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(Zy, axis=1), 1.0, atol=1e-5)
    assert est.transform(X[100:].astype(np.float32)).dtype == np.float32
    assert len(est.get_feature_names_out()) == 4
    assert est.score(X[100:], Y8[100:]) == top_k_accuracy(Zy, Zx)
    np.testing.assert_allclose(est.transform(torch.tensor(X[100:110])), Zx[:10], atol=1e-6)
    with pytest.raises(ValueError, match="y has 6 features"):
        est.transform_target(Y[:5])


def test_input_errors():
    X, Y, _ = clustered_pairs(n=100, d=4)
    est = GeRAAligner(max_iter=2)
    with pytest.raises(ValueError, match="UnpairedPool"):
        est.fit(X[:50], Y[:50], unpaired=X[50:])
    with pytest.raises(ValueError, match="unpaired.y has 3 features"):
        est.fit(X[:50], Y[:50], unpaired=UnpairedPool(y=Y[50:, :3]))
    Xn = X[:50].copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(Xn, Y[:50])
    with pytest.raises(ValueError, match="1 sample"):
        est.fit(X[:1], Y[:1])
    with pytest.raises(ValueError, match="learning_rate"):
        GeRAAligner(learning_rate=1e10, max_iter=3, random_state=0).fit(X[:50], Y[:50])


def test_pickle_and_load_without_gpu(tmp_path):
    X, Y, _ = clustered_pairs(n=200, d=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = GeRAAligner(mapping="mlp", hidden_size=8, max_iter=3, random_state=0).fit(
            X[:100], Y[:100], unpaired=UnpairedPool(X=X[100:]))
    for value in vars(est).values():
        assert not isinstance(value, torch.Tensor)
    path = tmp_path / "gera.pkl"
    path.write_bytes(pickle.dumps(est))
    np.save(tmp_path / "X.npy", X[100:])
    code = (
        "import pickle, numpy as np, sys; "
        f"est = pickle.loads(open({str(path)!r}, 'rb').read()); "
        f"np.save({str(tmp_path / 'Z.npy')!r}, est.transform(np.load({str(tmp_path / 'X.npy')!r})))"
    )
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "Z.npy"), est.transform(X[100:]), atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    X, Y, _ = clustered_pairs(n=600, d=8)
    pool = UnpairedPool(X=X[100:], y=Y[100:])
    kw = dict(alpha=10.0, random_state=0, max_iter=40, early_stopping=False)
    cpu = GeRAAligner(**kw).fit(X[:100], Y[:100], unpaired=pool)
    gpu = GeRAAligner(device="cuda", **kw).fit(X[:100], Y[:100], unpaired=pool)
    assert gpu.device_.startswith("cuda")
    assert isinstance(gpu.source_params_["coef"], np.ndarray)
    assert abs(gpu.score(X[100:], Y[100:]) - cpu.score(X[100:], Y[100:])) < 0.05


# ------------------------------------------------------------------------------- benchmark
def test_benchmark_runs_quick(load_benchmark):
    module = load_benchmark("bench_gera")
    rows = module.main(["--pairs", "300", "--unpaired", "1500", "--dim", "16", "--neighbors", "4",
                        "--repeats", "1"])
    assert {r["variant"] for r in rows} >= {"contrastive only (alpha=0)", "GeRA local"}
    assert all(r["epoch_s"] >= 0 and r["setup_s"] >= 0 and r["peak_mib"] >= 0 for r in rows)


# ------------------------------------------------------------------ the Procrustes start
@pytest.mark.parametrize("d_x,d_y", [(6, 9), (8, 8), (9, 5)])
def test_procrustes_init_starts_at_the_procrustes_solution(d_x, d_y):
    """At iteration 0 (one Adam step of 1e-12), f·gᵀ is the Procrustes map of the pairs."""
    rng = np.random.default_rng(d_x)
    X = rng.standard_normal((400, d_x)) + 3.0
    Y = np.tanh(X @ rng.standard_normal((d_x, d_y))) + rng.standard_normal((400, d_y)) * 0.1
    pool = UnpairedPool(X=X[100:], y=Y[100:])
    est = GeRAAligner(max_iter=1, learning_rate=1e-12, random_state=0)
    est.fit(X[:100], Y[:100], unpaired=pool)
    F, G = est.source_params_["coef"], est.target_params_["coef"]
    # reference: ProcrustesAligner on the pairs in GeRA's coordinates (pool-centred, unit rows)
    ux, uy = unit(X[:100] - X.mean(0)), unit(Y[:100] - Y.mean(0))
    ref = ProcrustesAligner(center=False).fit(ux, uy).components_
    k = min(d_x, d_y)
    assert F.shape == (d_x, k) and G.shape == (d_y, k)
    np.testing.assert_allclose(F @ G.T, ref, atol=1e-5)
    np.testing.assert_allclose(F.T @ F, np.eye(k), atol=1e-5)  # both maps start as isometries
    np.testing.assert_allclose(G.T @ G, np.eye(k), atol=1e-5)
    # negative control: the principal-direction start is not aligned
    pca = GeRAAligner(init="pca", max_iter=1, learning_rate=1e-12, random_state=0)
    pca.fit(X[:100], Y[:100], unpaired=pool)
    assert np.abs(pca.source_params_["coef"] @ pca.target_params_["coef"].T - ref).max() > 0.1


def test_float64_transforms_are_computed_in_float64():
    X, Y, _ = clustered_pairs(n=300, d=6)
    est = GeRAAligner(max_iter=3, random_state=0).fit(X[:100], Y[:100])
    Z = est.transform(X[100:])
    assert Z.dtype == np.float64 and est.transform(X[100:].astype(np.float32)).dtype == np.float32
    P = est.source_params_
    u = unit(X[100:] - est.source_mean_)
    ref = unit(u @ P["coef"].astype(np.float64) + P["intercept"])
    np.testing.assert_allclose(Z, ref, rtol=0, atol=1e-12)
    Zy = est.transform_target(Y[100:])
    Q = est.target_params_
    ref_y = unit(unit(Y[100:] - est.target_mean_) @ Q["coef"].astype(np.float64) + Q["intercept"])
    np.testing.assert_allclose(Zy, ref_y, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------- real embeddings
@pytest.fixture(scope="module")
def real_split(docstring_pair):
    """Vendored MiniLM/MPNet subset: 350 held-out rows, 50 pairs, the other 950 rows unpaired."""
    A, B, perm = docstring_pair
    test, train = perm[:350], perm[350:]
    pairs, rest = train[:50], train[50:]
    pool = UnpairedPool(X=A[rest], y=B[np.random.default_rng(1).permutation(rest)])
    return A, B, test, train, pairs, pool


def test_defaults_beat_tuned_baselines_with_50_real_pairs(real_split):
    A, B, test, train, pairs, pool = real_split
    Xte, Yte = A[test], B[test]
    my = B[train].mean(0)

    def translated(est):
        return top_k_accuracy(Yte - my, est.fit(A[pairs], B[pairs]).transform(Xte) - my)

    gera = GeRAAligner(random_state=0).fit(A[pairs], B[pairs], unpaired=pool).score(Xte, Yte)
    ridge = translated(LinearAligner())  # leave-one-out alpha
    ridge_best = max(translated(LinearAligner(alpha=a)) for a in (0.0, 0.1, 1.0, 10.0))
    procrustes = translated(ProcrustesAligner())
    with_term = GeRAAligner(alpha=1.0, random_state=0).fit(A[pairs], B[pairs], unpaired=pool)
    start = GeRAAligner(max_iter=1, learning_rate=1e-12, random_state=0)
    start = start.fit(A[pairs], B[pairs], unpaired=pool).score(Xte, Yte)
    scores = dict(gera=gera, ridge=ridge, ridge_best=ridge_best, procrustes=procrustes,
                  with_term=with_term.score(Xte, Yte), start=start)
    assert gera > 100 / len(test), scores  # chance is 1/350
    assert gera >= ridge + 0.1 and gera >= ridge_best + 0.05 and gera >= procrustes + 0.1, scores
    assert gera >= start + 0.05, scores  # training improves on its Procrustes start
    assert gera >= scores["with_term"] - 0.02, scores  # the default alpha=0 is not a loss


@pytest.fixture(scope="module")
def crosslingual_minilm_e5():
    """English MiniLM -> German multilingual-e5 rows of ``benchmarks/data/crosslingual_de.npz``
    (the vendored cross-lingual development set), in one seeded order."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "crosslingual_de.npz"
    with np.load(path) as z:
        A, B = z["en_minilm_l6"].astype(np.float32), z["de_me5_small_q4"].astype(np.float32)
    return A, B, np.random.default_rng(0).permutation(len(A))


def _start_and_defaults(A, B, order, n_test, n_pairs):
    """Held-out top-1 of GeRA's Procrustes start and of its defaults (pools: the other rows)."""
    test, train = order[:n_test], order[n_test:]
    pairs, rest = train[:n_pairs], train[n_pairs:]
    pool = None
    if len(rest):
        pool = UnpairedPool(X=A[rest], y=B[np.random.default_rng(1).permutation(rest)])
    start = GeRAAligner(early_stopping=False, max_iter=1, learning_rate=1e-12, random_state=0)
    gera = GeRAAligner(random_state=0).fit(A[pairs], B[pairs], unpaired=pool)
    start.fit(A[pairs], B[pairs], unpaired=pool)
    return start.score(A[test], B[test]), gera.score(A[test], B[test]), gera


@pytest.mark.parametrize("data, n_pairs, gain", [
    ("same-language", 25, 0.1), ("same-language", 200, None), ("same-language", 1000, None),
    ("cross-lingual", 25, 0.01), ("cross-lingual", 200, 0.01), ("cross-lingual", 1000, None),
])
def test_defaults_never_end_below_their_start(docstring_pair, crosslingual_minilm_e5, data,
                                              n_pairs, gain):
    """Issue 50, item 5: GeRA's defaults >= their own Procrustes start - 0.005 top-1 on held-out
    development pairs (MiniLM -> MPNet, 350 held out; MiniLM en -> e5 de, 1,000 held out).

    Fine-tuning for a fixed 20 epochs ended below the start with 200 and 1,000 MiniLM -> MPNet
    pairs (by 0.005 and 0.008 on the full development set). Where fine-tuning helps a lot the
    validation must not throw that away (``gain``)."""
    A, B, order = docstring_pair if data == "same-language" else crosslingual_minilm_e5
    n_test = 350 if data == "same-language" else 1000
    start, gera, est = _start_and_defaults(A, B, order, n_test, n_pairs)
    info = dict(start=start, gera=gera, best_epoch=est.best_epoch_)
    assert gera >= start - 0.005, info
    if gain is not None:
        assert gera >= start + gain and not est.kept_start_, info
