"""InverseRelativeProjector: ground truth, the collapsed map vs Eq. 5, pruning, model selection."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline

from skalign import InverseRelativeProjector, RelativeProjector
from skalign._relative.irp_decode import _gcv_alpha, _Side
from skalign._relative.irp_pruning import farthest_point_sampling
from skalign.datasets import load_digits_embeddings, make_paired_spaces
from skalign.exceptions import IllConditionedDecodeWarning
from skalign.metrics import top_k_accuracy


def centred_cosine(A, B, mu):
    A, B = A - mu, B - mu
    return float(np.mean(np.sum(A * B, 1) / np.linalg.norm(A, axis=1) / np.linalg.norm(B, axis=1)))


def normalized_centred(A):
    C = A - A.mean(0)
    return C / np.linalg.norm(C, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def scaled_rotation():
    """Y = 2.5·X·Q + 7 + 5 % noise, anisotropic spectrum; 128 random anchors, the rest held out."""
    X, Y = make_paired_spaces(4000, 128, spectrum_decay=3.0, scale=2.5, shift=7.0, noise=0.05,
                              random_state=0)
    anchors = np.random.default_rng(0).choice(len(X), 128, replace=False)
    held_out = np.setdiff1d(np.arange(len(X)), anchors)
    return X[anchors], Y[anchors], X[held_out], Y[held_out]


def test_scaled_rotation_defaults_reach_095(scaled_rotation):
    AX, AY, X, Y = scaled_rotation
    irp = InverseRelativeProjector(random_state=0).fit(AX, AY)
    assert centred_cosine(irp.transform(X), Y, AY.mean(0)) >= 0.95
    # Negative control: without pruning the 128 centred anchors in 128-d are rank 127 and the
    # plain pseudo-inverse (alpha=0) amplifies noise: the translation is destroyed, with a warning.
    with pytest.warns(IllConditionedDecodeWarning, match="alpha='gcv'"):
        raw = InverseRelativeProjector(pruning_threshold=0.0, n_subspaces=1, alpha=0.0,
                                       random_state=0).fit(AX, AY)
    assert raw.condition_numbers_[0] > 1e12
    assert centred_cosine(raw.transform(X), Y, AY.mean(0)) < 0.5
    # The GCV ridge rescues the same anchors without pruning. Here the noise is in the target
    # anchors (the design of the decode), which GCV does not see, so it under-regularises
    # (α ≈ 0.004 gives 0.90, α = 0.1 gives 0.99); on real encoders it is within 0.01 of the best α.
    ridge = InverseRelativeProjector(pruning_threshold=0.0, n_subspaces=1, random_state=0)
    assert centred_cosine(ridge.fit(AX, AY).transform(X), Y, AY.mean(0)) >= 0.85
    assert ridge.condition_numbers_[0] < 1e6
    # Averaging subspaces helps over a single pruned subspace (paper Fig. 4).
    one = InverseRelativeProjector(n_subspaces=1, random_state=0).fit(AX, AY)
    mu = AY.mean(0)
    assert centred_cosine(one.transform(X), Y, mu) < centred_cosine(irp.transform(X), Y, mu)
    # Output lands at the target's location and scale.
    out = irp.transform(X)
    spread = np.linalg.norm(Y - Y.mean(0), axis=1).mean()
    assert np.allclose(out.mean(0), Y.mean(0), atol=0.1 * spread)
    ratio = np.linalg.norm(out - mu, axis=1).mean() / np.linalg.norm(Y - mu, axis=1).mean()
    assert 0.8 < ratio < 1.25


def _explicit_eq5(irp, AX, AY, X):
    """Per-subspace encode/decode and average (Eq. 5), in float64 numpy, before rescaling; the
    decode is the ridge pseudo-inverse ``Sy (SyᵀSy + αI)⁻¹`` (the pseudo-inverse when α = 0)."""
    Ax, Ay = normalized_centred(AX), normalized_centred(AY)
    C = X - AX.mean(0)
    x_hat = C / np.linalg.norm(C, axis=1, keepdims=True)
    out = 0.0
    for idx in irp.subspace_indices_:
        Sx, Sy = Ax[idx], Ay[idx]
        rel = x_hat @ Sx.T
        if irp.alpha_ == 0:
            dec = np.linalg.pinv(Sy.T, rcond=max(Sy.shape) * np.finfo(float).eps)
        else:
            dec = Sy @ np.linalg.inv(Sy.T @ Sy + irp.alpha_ * np.eye(Sy.shape[1]))
        out = out + rel @ dec
    return out / len(irp.subspace_indices_)


@pytest.mark.parametrize("alpha", ["gcv", 0.0])
@pytest.mark.parametrize("d_y", [12, 20])
def test_collapsed_map_equals_explicit_eq5(d_y, alpha):
    X, Y = make_paired_spaces(300, 12, n_features_target=d_y, relation="linear", noise=0.1,
                              random_state=1)
    AX, AY, Xte = X[:80], Y[:80], X[80:]
    irp = InverseRelativeProjector(pruning_threshold=0.3, n_subspaces=5, alpha=alpha,
                                   random_state=0).fit(AX, AY)
    assert (irp.alpha_ > 0) == (alpha == "gcv")
    assert irp.n_subspaces_ == 5 and irp.components_.shape == (12, d_y)
    ref = _explicit_eq5(irp, AX, AY, Xte)
    C = Xte - AX.mean(0)
    collapsed = (C / np.linalg.norm(C, axis=1, keepdims=True)) @ irp.components_
    assert np.abs(collapsed - ref).max() < 1e-6 * np.abs(ref).max()
    assert np.abs(collapsed - ref).max() < 1e-10
    # The full float32 transform agrees with the explicit pipeline to float32 precision.
    full = ref / np.linalg.norm(ref, axis=1, keepdims=True) * irp.target_scale_ + AY.mean(0)
    np.testing.assert_allclose(irp.transform(Xte), full, rtol=1e-5, atol=1e-5)


def test_raising_delta_lowers_condition_number(scaled_rotation):
    # The conditioning that pruning addresses is that of the unregularised decode (alpha=0).
    AX, AY, _, _ = scaled_rotation
    conds, kept = [], []
    for delta in (0.0, 0.4, 0.6, 0.8):
        irp = InverseRelativeProjector(pruning_threshold=delta, alpha=0.0, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IllConditionedDecodeWarning)
            irp.fit(AX, AY)
        conds.append(np.mean(irp.condition_numbers_))
        kept.append(irp.anchors_per_subspace_.mean())
    assert all(a > b for a, b in zip(conds, conds[1:])), conds
    assert all(a > b for a, b in zip(kept, kept[1:])), kept
    assert conds[0] > 1e12 and conds[-1] < 3.0


def _naive_fps(A, start, delta):
    """Reference: one greedy farthest point sampling run, recomputing distances each step."""
    D = 1 - np.abs(A @ A.T)
    chosen = [start]
    while len(chosen) < len(A):
        rest = [j for j in range(len(A)) if j not in chosen]
        dmin = D[np.ix_(rest, chosen)].min(1)
        if dmin.max() < delta:
            break
        chosen.append(rest[int(np.argmax(dmin))])
    return chosen


@pytest.mark.parametrize("delta", [0.0, 0.5, 0.8])
def test_batched_fps_matches_naive_runs(delta):
    A = normalized_centred(np.random.default_rng(3).standard_normal((60, 6)) * [5, 3, 2, 1, 1, 0.5])
    starts = np.array([0, 7, 19, 33, 59])
    order = farthest_point_sampling(torch.from_numpy(A), torch.from_numpy(starts), delta).numpy()
    for row, s in zip(order, starts):
        kept = row[row >= 0]
        assert kept.tolist() == _naive_fps(A, int(s), delta)
        G = np.abs(A[kept] @ A[kept].T) - np.eye(len(kept))
        assert G.max() <= 1 - delta + 1e-12
    if delta == 0.0:
        assert (order >= 0).all() and order.shape[1] == 60


def test_subspaces_start_from_distinct_anchors_and_repeat(scaled_rotation):
    AX, AY, X, _ = scaled_rotation
    a = InverseRelativeProjector(random_state=7).fit(AX, AY)
    starts = [idx[0] for idx in a.subspace_indices_]
    assert len(set(starts)) == a.n_subspaces_ == 16
    b = InverseRelativeProjector(random_state=7).fit(AX, AY)
    np.testing.assert_array_equal(a.components_, b.components_)
    c = InverseRelativeProjector(random_state=8).fit(AX, AY)
    assert [i[0] for i in c.subspace_indices_] != starts
    # n_subspaces is clipped to the number of anchors in a fitted attribute, not the parameter.
    small = InverseRelativeProjector(n_subspaces=50, random_state=0).fit(AX[:10], AY[:10])
    assert small.n_subspaces == 50 and small.n_subspaces_ <= 10


@pytest.mark.parametrize("prune_on", ["source", "joint"])
def test_prune_on_other_spaces(scaled_rotation, prune_on):
    AX, AY, X, Y = scaled_rotation
    irp = InverseRelativeProjector(prune_on=prune_on, pruning_threshold=0.5, random_state=0)
    irp.fit(AX, AY)
    Ax, Ay = normalized_centred(AX), normalized_centred(AY)
    spaces = [Ax] if prune_on == "source" else [Ax, Ay]
    for idx in irp.subspace_indices_:
        for A in spaces:
            G = np.abs(A[idx] @ A[idx].T) - np.eye(len(idx))
            assert G.max() <= 0.5 + 1e-9
    assert centred_cosine(irp.transform(X), Y, AY.mean(0)) > 0.9


def test_rescale_modes(scaled_rotation):
    AX, AY, X, Y = scaled_rotation
    s_y = np.linalg.norm(AY - AY.mean(0), axis=1).mean()
    norm = InverseRelativeProjector(random_state=0).fit(AX, AY)
    assert norm.target_scale_ == pytest.approx(s_y)
    radii = np.linalg.norm(norm.transform(X) - AY.mean(0), axis=1)
    np.testing.assert_allclose(radii, s_y, rtol=1e-4)
    fit = InverseRelativeProjector(rescale="fit", random_state=0).fit(AX, AY)
    scaled = InverseRelativeProjector(rescale="scale", random_state=0).fit(AX, AY)
    for est in (fit, scaled):
        assert centred_cosine(est.transform(X), Y, AY.mean(0)) >= 0.95
    # The fitted scalar is the least-squares one: it beats s_Y on the anchors' squared error.
    err = [np.sum((e.transform(AX) - AY) ** 2) for e in (fit, scaled)]
    assert err[0] <= err[1] * (1 + 1e-6)


def test_different_dimensions_and_inverse_transform():
    X, Y = make_paired_spaces(2000, 24, n_features_target=40, spectrum_decay=2.0, scale=3.0,
                              shift=-2.0, noise=0.02, random_state=2)
    irp = InverseRelativeProjector(random_state=0).fit(X[:300], Y[:300])
    assert irp.transform(X[300:]).shape == (1700, 40)
    assert centred_cosine(irp.transform(X[300:]), Y[300:], Y[:300].mean(0)) > 0.95
    back = irp.inverse_transform(Y[300:])
    assert back.shape == (1700, 24)
    assert centred_cosine(back, X[300:], X[:300].mean(0)) > 0.95
    # Negative control: the inverse of an unrelated target does not reconstruct the source.
    shuffled = np.random.default_rng(0).permutation(Y[300:])
    assert centred_cosine(irp.inverse_transform(shuffled), X[300:], X[:300].mean(0)) < 0.2


def test_matches_two_relative_projectors_fitted_separately(scaled_rotation):
    AX, AY, X, _ = scaled_rotation
    irp = InverseRelativeProjector(random_state=0).fit(AX, AY)
    S = irp.subspace_indices_
    rel = RelativeProjector(anchor_subsets=S).fit(AX).transform(X)  # "machine 1": source only
    assert rel.shape == (len(X), irp.anchors_per_subspace_.sum())
    target = RelativeProjector(anchor_subsets=S, alpha=irp.alpha_)  # "machine 2", target only
    out = target.fit(AY).inverse_transform(rel)
    np.testing.assert_allclose(out, irp.transform(X), rtol=1e-4, atol=1e-4)


def test_too_few_anchors_after_pruning_is_a_clear_error():
    rng = np.random.default_rng(0)
    u = rng.standard_normal(8)
    AY = rng.standard_normal((50, 1)) * u + 1e-3 * rng.standard_normal((50, 8))  # one direction
    AX = rng.standard_normal((50, 8))
    message = "no subspace kept at least min_anchors=2.*pruning_threshold"
    with pytest.raises(ValueError, match=message):
        InverseRelativeProjector(pruning_threshold=0.2).fit(AX, AY)
    InverseRelativeProjector(pruning_threshold=0.2, prune_on="source").fit(AX, AY)
    with pytest.raises(ValueError, match="No usable anchor"):
        InverseRelativeProjector().fit(np.ones((5, 3)), np.ones((5, 4)))
    with pytest.raises(ValueError, match="NaN"):
        InverseRelativeProjector().fit(np.full((5, 3), np.nan), np.ones((5, 4)))


@pytest.mark.parametrize("rescale", ["normalize", "scale", "fit"])
def test_rows_on_the_anchor_mean_map_to_the_other_mean(rescale):
    rng = np.random.default_rng(0)
    AX, AY = rng.standard_normal((50, 5)) + 3, rng.standard_normal((50, 7)) - 1
    irp = InverseRelativeProjector(rescale=rescale, random_state=0).fit(AX, AY)
    np.testing.assert_allclose(irp.transform(AX.mean(0, keepdims=True))[0], AY.mean(0), atol=1e-6)
    np.testing.assert_allclose(irp.inverse_transform(AY.mean(0, keepdims=True))[0], AX.mean(0),
                               atol=1e-6)


def test_mismatch_diagnoses_a_relation_that_does_not_preserve_angles():
    """IRP assumes both spaces see the same angles; a general linear map breaks that premise,
    and ``relative_mismatch_`` says so where a direct linear fit still succeeds."""
    from skalign import LinearAligner

    results = {}
    for relation in ["orthogonal", "linear"]:
        X, Y = make_paired_spaces(2000, 32, relation=relation, noise=0.1, scale=2.5, shift=3.0,
                                  random_state=0)
        irp = InverseRelativeProjector(random_state=0).fit(X[:300], Y[:300])
        linear = LinearAligner().fit(X[:300], Y[:300])
        results[relation] = (irp.relative_mismatch_, irp.score(X[1000:], Y[1000:]),
                             linear.score(X[1000:], Y[1000:]))
    (mm_o, irp_o, _), (mm_l, irp_l, lin_l) = results["orthogonal"], results["linear"]
    assert mm_o < 0.2 and irp_o > 0.99
    assert mm_l > 0.5 and mm_l > 3 * mm_o
    assert irp_l < 0.85 < 0.98 < lin_l


def test_diagnostics(scaled_rotation):
    AX, AY, _, _ = scaled_rotation
    irp = InverseRelativeProjector(random_state=0).fit(AX, AY)
    assert irp.anchors_per_subspace_.shape == irp.condition_numbers_.shape == (16,)
    assert np.array_equal(irp.anchors_per_subspace_, [len(i) for i in irp.subspace_indices_])
    assert irp.effective_ranks_.shape == (16,)
    assert (irp.effective_ranks_ <= np.minimum(irp.anchors_per_subspace_, AY.shape[1])).all()
    assert (irp.effective_ranks_ > 0).all() and irp.alpha_ == irp.gcv_alpha_ > 0
    assert np.isfinite(irp.condition_numbers_).all()
    assert np.isfinite(irp.inverse_condition_numbers_).all()
    # Related spaces: small mismatch of relative representations; unrelated: large.
    assert irp.relative_mismatch_ < 0.2
    bad = InverseRelativeProjector(random_state=0).fit(AX, np.random.default_rng(0).permutation(AY))
    assert bad.relative_mismatch_ > 0.5


def test_grid_search_selects_pruning_and_pickles(scaled_rotation):
    AX, AY, X, Y = scaled_rotation
    AY0, Y0 = AY - 7.0, Y - 7.0  # raw cosine is only informative around the origin
    search = GridSearchCV(
        InverseRelativeProjector(random_state=0),
        {"pruning_threshold": [0.0, 0.5], "n_subspaces": [1, 8]},
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(AX, AY0)
    assert search.best_params_["pruning_threshold"] == 0.5
    assert search.best_estimator_.score(X, Y0) > 0.95
    loaded = pickle.loads(pickle.dumps(search.best_estimator_))
    best = search.best_estimator_
    np.testing.assert_array_equal(loaded.transform(X[:50]), best.transform(X[:50]))


def test_tensor_input_and_clone(scaled_rotation):
    AX, AY, X, _ = scaled_rotation
    irp = InverseRelativeProjector(random_state=0).fit(torch.from_numpy(AX), torch.from_numpy(AY))
    from_tensor = irp.transform(torch.from_numpy(X[:20]).float())
    np.testing.assert_allclose(from_tensor, irp.transform(X[:20]).astype(np.float32),
                               rtol=1e-5, atol=1e-5)
    assert clone(irp).get_params() == irp.get_params()


@pytest.fixture(scope="module")
def digits():
    return load_digits_embeddings(["mlp-a", "mlp-b"])


def test_digits_stitching_in_a_pipeline(digits):
    E, lab, tr, te = digits.embeddings, digits.target, digits.train_index, digits.test_index
    clf_b = LogisticRegression(max_iter=2000).fit(E["mlp-b"][tr], lab[tr])
    native = clf_b.score(E["mlp-b"][te], lab[te])
    anchors = np.random.default_rng(0).choice(tr, 300, replace=False)
    irp = InverseRelativeProjector(random_state=0).fit(E["mlp-a"][anchors], E["mlp-b"][anchors])
    stitched = Pipeline([("align", FrozenEstimator(irp)), ("clf", FrozenEstimator(clf_b))])
    acc = stitched.score(E["mlp-a"][te], lab[te])
    raw = clf_b.score(E["mlp-a"][te], lab[te])
    assert native > 0.95
    assert acc >= 0.9 * native  # recovers most of the accuracy
    assert raw < 0.35           # same width, untranslated: near chance (0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(scaled_rotation):
    AX, AY, X, _ = scaled_rotation
    cpu = InverseRelativeProjector(random_state=0).fit(AX, AY)
    gpu = InverseRelativeProjector(random_state=0, device="cuda").fit(AX, AY)
    assert all(np.array_equal(a, b) for a, b in zip(cpu.subspace_indices_, gpu.subspace_indices_))
    np.testing.assert_allclose(gpu.transform(X), cpu.transform(X), rtol=1e-4, atol=1e-4)
    assert pickle.loads(pickle.dumps(gpu)).components_.dtype == np.float64


def test_benchmark_script_runs(capsys, load_benchmark):
    bench = load_benchmark("bench_irp")
    rows = bench.main(["--quick", "-n", "2000", "-d", "32", "-k", "80", "--repeat", "1",
                       "--thresholds", "0.5"])
    assert [r[0] for r in rows] == ["IRP (one matrix)", "loop: encode+decode", "loop: ω maps"]
    assert all(r[4] > 0 for r in rows) and all(r[6] < 1e-4 for r in rows)  # loops agree
    assert "anchors/subspace" in capsys.readouterr().out


def test_fitted_model_loads_in_a_fresh_process_without_cuda(tmp_path, scaled_rotation):
    import os
    import subprocess
    import sys

    AX, AY, X, _ = scaled_rotation
    irp = InverseRelativeProjector(random_state=0).fit(AX, AY)
    np.save(tmp_path / "X.npy", X[:30])
    np.save(tmp_path / "ref.npy", irp.transform(X[:30]))
    with open(tmp_path / "irp.pkl", "wb") as fh:
        pickle.dump(irp, fh)
    code = (
        "import pickle, numpy as np, sys; d = sys.argv[1];"
        "m = pickle.load(open(d + '/irp.pkl', 'rb'));"
        "out = m.transform(np.load(d + '/X.npy'));"
        "assert np.array_equal(out, np.load(d + '/ref.npy')), 'different output'"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env)


# ------------------------------------------------------------------ the regularised decode (GCV)
def test_gcv_closed_form_matches_explicit_hat_matrices():
    """The spectral GCV score equals the one computed with explicit hat matrices, on both the
    k × k (fewer anchors than dimensions) and the d × d route."""
    rng = np.random.default_rng(0)
    for k, d in [(30, 50), (60, 12)]:
        Ae = normalized_centred(rng.standard_normal((k, d)) @ np.diag(np.linspace(2, 0.1, d)))
        Ad = normalized_centred(Ae + 0.3 * rng.standard_normal((k, d)))
        idx = np.sort(rng.choice(k, k - 5, replace=False))
        S_e, S_d = Ae[idx], Ad[idx]
        R = Ae @ S_e.T  # relative representations of every anchor, encoding space
        best, best_alpha = np.inf, None
        from skalign._relative.irp_decode import _GCV_GRID
        for alpha in _GCV_GRID:
            H = S_d @ np.linalg.solve(S_d.T @ S_d + alpha * np.eye(d), S_d.T)
            rss = np.sum((R - R @ H.T) ** 2)
            score = rss / len(idx) / (1 - np.trace(H) / len(idx)) ** 2
            if score < best:
                best, best_alpha = score, alpha
        T = [torch.from_numpy(A) for A in (Ae, Ad)]
        side = _Side(enc=T[0], dec=T[1], G_enc=T[0].T @ T[0], G_dec=T[1].T @ T[1],
                     K_dec=T[1] @ T[1].T, C=T[0].T @ T[1])
        assert _gcv_alpha(side, [torch.from_numpy(idx)]) == pytest.approx(best_alpha)


@pytest.mark.parametrize("delta", [0.0, 0.5])
@pytest.mark.parametrize("working_memory", [None, 0.001])
def test_cholesky_ridge_equals_svd_ridge(delta, working_memory):
    """The fast path (Cholesky on the smaller Gram matrix, Schur complements, downdates) and the
    SVD path (``rtol=0``) build the same maps, with more anchors than dimensions and fewer, and
    without the k × k Gram matrix when it exceeds ``working_memory``."""
    from sklearn import config_context

    X, Y = make_paired_spaces(400, 10, n_features_target=14, noise=0.3, random_state=3)
    kw = dict(pruning_threshold=delta, n_subspaces=6, alpha=0.05, random_state=0)
    with config_context(working_memory=working_memory or 1024):
        fast = InverseRelativeProjector(**kw).fit(X[:120], Y[:120])
    svd = InverseRelativeProjector(rtol=0.0, **kw).fit(X[:120], Y[:120])
    np.testing.assert_allclose(fast.components_, svd.components_, atol=1e-10)
    np.testing.assert_allclose(fast.inverse_components_, svd.inverse_components_, atol=1e-10)
    np.testing.assert_allclose(fast.effective_ranks_, svd.effective_ranks_, rtol=1e-8)
    np.testing.assert_allclose(fast.condition_numbers_, svd.condition_numbers_, rtol=1e-6)


@pytest.fixture(scope="module")
def real_pairs(docstring_pair):
    """Vendored real embeddings, MiniLM → MPNet: 600 anchor pairs, 750 held-out pairs."""
    X, Y, perm = docstring_pair
    return X[perm[:600]], Y[perm[:600]], X[perm[600:]], Y[perm[600:]]


def _centred_scores(est, AX, AY, X, Y):
    """Top-1 retrieval and mean cosine, both sides centred on the target anchors' mean."""
    my = AY.mean(0)
    pred = est.transform(X) - my
    return top_k_accuracy(Y - my, pred), centred_cosine(pred, Y - my, 0.0)


def test_real_encoders_defaults_near_the_best_delta(real_pairs):
    """On real sentence encoders the defaults are within 5 % of the best δ, no δ in
    {0.3, 0.5, 0.8} collapses, and the untranslated embeddings are at chance."""
    AX, AY, X, Y = real_pairs
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedDecodeWarning)
        default = InverseRelativeProjector(random_state=0).fit(AX, AY)
        scores = {d: _centred_scores(InverseRelativeProjector(pruning_threshold=d, random_state=0)
                                     .fit(AX, AY), AX, AY, X, Y) for d in (0.5, 0.8)}
    scores[0.3] = _centred_scores(default, AX, AY, X, Y)  # the default δ
    top1, cosine = _centred_scores(default, AX, AY, X, Y)
    best_top1 = max(s[0] for s in scores.values())
    best_cos = max(s[1] for s in scores.values())
    assert top1 >= 0.95 * best_top1
    for d, (t, c) in scores.items():
        assert t >= 0.8 * best_top1 and c >= 0.8 * best_cos, (d, t, c)
    # Untranslated: the source padded to the target's width, retrieval at chance (1/750).
    raw = np.hstack([X - AX.mean(0), np.zeros((len(X), AY.shape[1] - AX.shape[1]))])
    assert top_k_accuracy(Y - AY.mean(0), raw) < 0.05
    assert top1 >= 0.95 and cosine >= 0.5


def test_real_encoders_unregularised_decode_warns(real_pairs):
    """The plain pseudo-inverse on many anchors is ill-conditioned on real embeddings: ``fit``
    warns and names the parameter; the GCV ridge translates better and does not warn."""
    AX, AY, X, Y = real_pairs
    AX, AY = AX[:400], AY[:400]
    with pytest.warns(IllConditionedDecodeWarning, match="alpha='gcv'") as record:
        raw = InverseRelativeProjector(pruning_threshold=0.0, n_subspaces=1, alpha=0.0).fit(AX, AY)
    assert issubclass(record[0].category, UserWarning)
    assert raw.alpha_ == 0 and raw.gcv_alpha_ > 0 and raw.condition_numbers_[0] > 1e10
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedDecodeWarning)
        ridge = InverseRelativeProjector(pruning_threshold=0.0, n_subspaces=1).fit(AX, AY)
    assert 0.01 < ridge.alpha_ < 10 and ridge.condition_numbers_[0] < 1e6
    assert 0 < ridge.effective_ranks_[0] < np.linalg.matrix_rank(AY - AY.mean(0))
    assert (_centred_scores(ridge, AX, AY, X, Y)[1]
            > _centred_scores(raw, AX, AY, X, Y)[1] + 0.02)
    # Well-conditioned pruned subsets (δ = 0.8) do not warn even unregularised.
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedDecodeWarning)
        InverseRelativeProjector(pruning_threshold=0.8, alpha=0.0, random_state=0).fit(AX, AY)


def _rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("rescale", ["normalize", "fit"])
def test_float64_input_is_computed_in_float64(rescale):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 12)) + 2.0
    Y = X @ rng.standard_normal((12, 10)) + 0.1 * rng.standard_normal((120, 10)) - 1.0
    irp = InverseRelativeProjector(rescale=rescale).fit(X, Y)

    def ref(B, M, mu_in, mu_out, scale):
        C = B - mu_in
        Z = C @ M
        norms = np.linalg.norm(Z if rescale == "normalize" else C, axis=1, keepdims=True)
        return Z * (scale / norms) + mu_out

    Xt, Yt = rng.standard_normal((50, 12)) + 2.0, rng.standard_normal((50, 10)) - 1.0
    fwd = ref(Xt, irp.components_, irp.source_mean_, irp.target_mean_, irp.target_scale_)
    back = ref(Yt, irp.inverse_components_, irp.target_mean_, irp.source_mean_,
               irp.source_scale_)
    out, out_back = irp.transform(Xt), irp.inverse_transform(Yt)
    assert out.dtype == out_back.dtype == np.float64
    assert _rel_err(out, fwd) < 1e-10 and _rel_err(out_back, back) < 1e-10
    # float32 input is computed in float32: it cannot meet the float64 bound.
    assert _rel_err(irp.transform(Xt.astype(np.float32)), fwd) > 1e-10
    assert _rel_err(irp.inverse_transform(Yt.astype(np.float32)), back) > 1e-10
