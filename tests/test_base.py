"""The shared data contract, backend and validation layer."""

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn import config_context
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from skalign import LinearAligner, ProcrustesAligner, UnpairedPool, split_views, stack_views
from skalign.base import check_min_pairs, check_nonzero_rows, check_unpaired
from skalign.datasets import make_paired_spaces
from skalign.utils._backend import (
    NumericalError,
    apply_in_batches,
    check_finite,
    default_batch_size,
    make_generator,
    pinv_svd,
    polar,
    resolve_device,
    ridge_svd,
    small_lapack,
)
from skalign.utils._optim import LossHistory

BASELINES = [ProcrustesAligner, LinearAligner]


@pytest.fixture
def pairs():
    return make_paired_spaces(120, 6, n_features_target=5, relation="linear", noise=0.05,
                              random_state=0)


# ------------------------------------------------------------------------------ unpaired pool
def test_unpaired_pool_is_opaque_to_cross_validation():
    pool = UnpairedPool(X=np.ones((10, 3)), y=np.ones((4, 2)))
    for attr in ("__len__", "shape", "__array__"):
        assert not hasattr(pool, attr)
    assert (pool.n_source, pool.n_target) == (10, 4)
    assert repr(pool) == "UnpairedPool(X: 10×3, y: 4×2)"
    assert UnpairedPool(y=np.ones((3, 2))).n_source == 0


class PoolRecorder(LinearAligner):
    """A LinearAligner that records the size of the pool each fit sees."""

    def fit(self, X, y, unpaired=None):
        check_unpaired(unpaired, np.shape(X)[1], np.shape(y)[1])
        super().fit(X, y)
        self.pool_sizes_ = (unpaired.n_source, unpaired.n_target)
        self.n_pairs_ = len(X)
        return self


def test_every_fold_sees_the_whole_pool(pairs):
    X, Y = pairs
    # A pool with exactly as many rows as X: a raw array of that length would be sliced per fold.
    pool = UnpairedPool(X=np.ones((len(X), X.shape[1])), y=np.ones((len(X), Y.shape[1])))
    seen = []

    def scorer(est, X_val, y_val):
        seen.append((est.pool_sizes_, est.n_pairs_))
        return est.score(X_val, y_val)

    GridSearchCV(PoolRecorder(), {"alpha": [0.0, 1.0]}, cv=3, scoring=scorer, refit=False).fit(
        X, Y, unpaired=pool
    )
    assert len(seen) == 6
    assert all(sizes == (len(X), len(X)) for sizes, _ in seen)
    assert all(n < len(X) for _, n in seen)


def test_unpaired_pool_validation():
    with pytest.raises(ValueError, match="at least one"):
        UnpairedPool()
    with pytest.raises(ValueError, match="NaN"):
        UnpairedPool(X=np.array([[np.nan, 1.0]]))
    pool = UnpairedPool(X=np.ones((5, 3)))
    with pytest.raises(ValueError, match="unpaired.X has 3 features but the paired X has 4"):
        check_unpaired(pool, 4, 2)
    with pytest.raises(ValueError, match="UnpairedPool"):
        check_unpaired(np.ones((5, 3)), 3, 2)
    assert check_unpaired(None, 3, 2) is None


# ------------------------------------------------------------------------------ input checks
@pytest.mark.parametrize("Est", BASELINES)
def test_bad_input_raises_clear_value_errors(Est, pairs):
    X, Y = pairs
    est = Est()
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(X_nan, Y)
    Y_inf = Y.copy()
    Y_inf[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        est.fit(X, Y_inf)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.fit(X, Y[:-1])
    with pytest.raises(ValueError, match="1 sample"):
        est.fit(X[:1], Y[:1])
    with pytest.raises(ValueError, match="requires y to be passed"):
        est.fit(X, None)
    est.fit(X, Y)
    with pytest.raises(ValueError, match="has 4 features, but .* is expecting 6"):
        est.transform(X[:, :4])
    with pytest.raises(ValueError, match="has 4 features, but .* is expecting 6"):
        est.transform(torch.as_tensor(X[:, :4]))
    with pytest.raises(ValueError, match="NaN"):
        est.transform(torch.as_tensor(X_nan))
    with pytest.raises(ValueError, match="y has 4 features"):
        est.fit(X, Y).score(X, Y[:, :4])


def test_checks_for_zero_rows_and_too_few_pairs():
    with pytest.raises(ValueError, match=r"2 all-zero row\(s\) \(rows 1, 3\)"):
        check_nonzero_rows(np.array([[1.0, 0], [0, 0], [0, 1], [0, 0]]), name="X")
    check_nonzero_rows(torch.ones(3, 2))
    with pytest.raises(ValueError, match="n_samples = 3, need at least 5"):
        check_min_pairs(3, 5)


def test_device_resolution():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(ValueError, match="not a valid device"):
        resolve_device("tpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")
        with pytest.raises(ValueError, match="no CUDA device"):
            LinearAligner(device="cuda").fit(np.eye(3), np.eye(3))


def test_auto_device_is_resolved_without_touching_params(pairs):
    est = LinearAligner(device="auto").fit(*pairs)
    assert est.device == "auto"
    assert est.device_ in ("cpu", "cuda")


# ------------------------------------------------------------------------- numpy/torch facade
@pytest.mark.parametrize("Est", BASELINES)
def test_numpy_and_tensor_inputs_agree_and_dtypes_are_preserved(Est, pairs, device):
    X, Y = pairs
    est = Est(device=device).fit(X, Y)
    out64 = est.transform(X)
    assert out64.dtype == np.float64 and isinstance(out64, np.ndarray)
    assert est.transform(X.astype(np.float32)).dtype == np.float32
    out_t = est.transform(torch.as_tensor(X, device=device))
    assert isinstance(out_t, np.ndarray)
    np.testing.assert_allclose(out_t, out64, atol=1e-5)
    fit_t = clone(est).fit(torch.as_tensor(X), torch.as_tensor(Y))
    np.testing.assert_allclose(fit_t.transform(X), out64, atol=1e-5)
    np.testing.assert_array_equal(est.predict(X), out64)


@pytest.mark.parametrize("Est", BASELINES)
def test_transform_in_batches_equals_one_shot(Est, pairs):
    X, Y = pairs
    full = Est().fit(X, Y).transform(X)
    np.testing.assert_allclose(Est(batch_size=7).fit(X, Y).transform(X), full, rtol=1e-6, atol=1e-6)


def test_apply_in_batches_bounds_the_rows_per_call():
    calls = []

    def fn(B):
        calls.append(B.shape[0])
        return 2 * B

    X = np.arange(100, dtype=np.float64).reshape(50, 2)
    out = apply_in_batches(fn, X, device="cpu", batch_size=8, n_outputs=2)
    np.testing.assert_array_equal(out, 2 * X)
    assert max(calls) == 8 and sum(calls) == 50


def test_default_batch_size_follows_working_memory():
    # a transform batch: 1024 input + 1024 output float32 per row, buffers counted twice
    with config_context(working_memory=1):
        small = default_batch_size(2 * (1024 + 1024))
    with config_context(working_memory=1024):
        large = default_batch_size(2 * (1024 + 1024))
    assert small == 64 and large == 1024 * 64
    # 10^6 × 1024 float32 rows at the default 1 GiB budget: batches of 65,536 rows (~512 MiB).
    assert default_batch_size(2 * (1024 + 1024)) * 2 * 2048 * 4 <= 2**30
    # an explicit budget (MiB) and float64 items; several per-row counts are summed
    assert default_batch_size(1024, 1024, working_memory=128) == (128 << 20) // (4 * 2048)
    assert default_batch_size(1024, itemsize=8, working_memory=1) == 128
    assert default_batch_size(10**12) == 1


def test_read_only_memmap_input_is_copied(tmp_path, pairs):
    X, Y = pairs
    path = tmp_path / "x.npy"
    np.save(path, X)
    X_ro = np.load(path, mmap_mode="r")
    est = LinearAligner().fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(est.transform(X_ro), est.transform(X))


# ------------------------------------------------------------------------------ randomness
def test_make_generator_is_local_and_repeatable():
    state = torch.random.get_rng_state()
    a = torch.rand(5, generator=make_generator(42, "cpu"))
    b = torch.rand(5, generator=make_generator(42, "cpu"))
    c = torch.rand(5, generator=make_generator(43, "cpu"))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(torch.random.get_rng_state(), state)
    rs = np.random.RandomState(0)
    assert not torch.equal(
        torch.rand(3, generator=make_generator(rs, "cpu")),
        torch.rand(3, generator=make_generator(rs, "cpu")),
    )


# ------------------------------------------------------------------------------ persistence
_LOAD_SCRIPT = """
import pickle, sys, numpy as np, torch
assert not torch.cuda.is_available()
est = pickle.load(open(sys.argv[1], "rb"))
X = np.load(sys.argv[2])
np.save(sys.argv[3], est.transform(X))
"""


def _roundtrip_without_gpu(est, X, tmp_path):
    (tmp_path / "est.pkl").write_bytes(pickle.dumps(est))
    np.save(tmp_path / "X.npy", X)
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    import os

    env.update({k: v for k, v in os.environ.items() if k in ("HOME", "PYTHONPATH", "SKALIGN_DATA")})
    subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, str(tmp_path / "est.pkl"), str(tmp_path / "X.npy"),
         str(tmp_path / "out.npy")],
        check=True, env=env, capture_output=True,
    )
    return np.load(tmp_path / "out.npy")


@pytest.mark.parametrize("Est", BASELINES)
def test_fitted_model_pickles_and_loads_without_gpu(Est, pairs, tmp_path):
    X, Y = pairs
    est = Est().fit(X, Y)
    state = est.__getstate__()
    assert not any(isinstance(v, torch.Tensor) for v in state.values())
    np.testing.assert_allclose(_roundtrip_without_gpu(est, X, tmp_path), est.transform(X),
                               atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("Est", BASELINES)
def test_gpu_fitted_model_loads_on_cpu(Est, pairs, tmp_path):
    X, Y = pairs
    gpu = Est(device="cuda").fit(X, Y)
    cpu = Est(device="cpu").fit(X, Y)
    assert gpu.device_.startswith("cuda")
    out = _roundtrip_without_gpu(gpu, X, tmp_path)
    np.testing.assert_allclose(out, cpu.transform(X), atol=1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback on a CPU-only machine")
@pytest.mark.parametrize("Est", BASELINES)
def test_cuda_fitted_model_warns_once_and_runs_on_the_cpu(Est, pairs):
    """A model whose fitted device is gone computes on the CPU and says so, once per model."""
    from skalign.exceptions import DeviceWarning

    X, Y = pairs
    est = Est().fit(X, Y)
    expected = est.transform(X)
    est.device_ = "cuda"  # as after fitting on a GPU machine
    with pytest.warns(DeviceWarning, match=f"{Est.__name__} was fitted on 'cuda'"):
        out = est.transform(X)
    np.testing.assert_array_equal(out, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.transform(X)  # once per model
    other = clone(est).fit(X, Y)
    other.device_ = "cuda"
    with pytest.warns(DeviceWarning):  # another model warns for itself
        other.transform(X)


# ------------------------------------------------------------------------- sklearn plumbing
def test_feature_names_and_pandas_output(pairs):
    pd = pytest.importorskip("pandas")
    X, Y = pairs
    Xdf = pd.DataFrame(X, columns=[f"a{i}" for i in range(X.shape[1])])
    est = ProcrustesAligner().set_output(transform="pandas").fit(Xdf, Y)
    out = est.transform(Xdf)
    assert list(out.columns) == [f"procrustesaligner{i}" for i in range(Y.shape[1])]
    assert list(est.feature_names_in_) == list(Xdf.columns)


def test_one_dimensional_y_is_one_column():
    X = np.random.default_rng(0).standard_normal((30, 3))
    est = LinearAligner().fit(X, X[:, 0])
    assert est.n_features_out_ == 1 and est.transform(X).shape == (30, 1)


# ---------------------------------------------------------------------------- numerics layer
def test_pinv_svd_matches_numpy_on_rank_deficient_input(rng):
    A = rng.standard_normal((40, 5)) @ rng.standard_normal((5, 30))  # rank 5
    P, s, rank = pinv_svd(torch.as_tensor(A), rtol=1e-10)
    assert rank == 5
    np.testing.assert_allclose(P.numpy(), np.linalg.pinv(A, rcond=1e-10), atol=1e-8)


def test_ridge_svd_matches_closed_form(rng):
    X, Y = rng.standard_normal((50, 8)), rng.standard_normal((50, 3))
    W = ridge_svd(torch.as_tensor(X), torch.as_tensor(Y), alpha=2.0).numpy()
    np.testing.assert_allclose(W, np.linalg.solve(X.T @ X + 2.0 * np.eye(8), X.T @ Y), atol=1e-10)


@pytest.mark.parametrize("shape", [(300, 20), (20, 300)], ids=["tall", "wide"])
def test_ridge_svd_matches_scikit_learn_ridge_tall_and_wide(rng, shape):
    from sklearn.linear_model import Ridge

    X, Y = rng.standard_normal(shape), rng.standard_normal((shape[0], 4))
    W = ridge_svd(torch.as_tensor(X), torch.as_tensor(Y), alpha=0.5).numpy()
    ref = Ridge(alpha=0.5, fit_intercept=False, solver="svd").fit(X, Y).coef_.T
    np.testing.assert_allclose(W, ref, atol=1e-9)


def test_ridge_svd_falls_back_to_the_svd_where_cholesky_fails(rng):
    # rank 2 at scale 1e9 with alpha 1: the rounding of XᵀX (~1e4) leaves XᵀX + αI without a
    # Cholesky factor; the fitted values XW = U diag(s² / (s² + α)) UᵀY are well defined (the
    # coefficients along the noise directions are not: compare the fit, not W)
    X = 1e9 * (rng.standard_normal((60, 2)) @ rng.standard_normal((2, 10)))
    Y = rng.standard_normal((60, 3))
    gram = torch.as_tensor(X.T @ X) + torch.eye(10, dtype=torch.float64)
    assert int(torch.linalg.cholesky_ex(gram)[1]) != 0  # the case the fallback is for
    W = ridge_svd(torch.as_tensor(X), torch.as_tensor(Y), alpha=1.0).numpy()
    U, s, _ = np.linalg.svd(X, full_matrices=False)
    fit = U @ ((s * s / (s * s + 1.0))[:, None] * (U.T @ Y))
    np.testing.assert_allclose(X @ W, fit, atol=1e-6)
    assert np.abs(fit).max() > 0.5  # the projection on X's range is not trivially small


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_small_decompositions_run_on_one_thread_and_restore_the_setting(two_threads, rng):
    small, large = torch.zeros(128, 256), torch.zeros(384, 768)
    with small_lapack(small):
        assert torch.get_num_threads() == 1
        with small_lapack(torch.zeros(8, 8)):  # nested: the outer setting survives the inner
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with small_lapack(large):
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), small_lapack(small):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2
    # the result is the decomposition's, whatever the thread count
    M = rng.standard_normal((128, 128))
    U, _, Vt = np.linalg.svd(M)
    np.testing.assert_allclose(polar(torch.as_tensor(M)).numpy(), U @ Vt, atol=1e-10)


def test_small_lapack_from_concurrent_threads_restores_the_setting(two_threads, rng):
    """Fits in threads of one process (joblib's threading backend) enter and leave at random
    moments: the thread setting is restored when the last one leaves, never stuck at one."""
    from concurrent.futures import ThreadPoolExecutor

    Ms = [torch.as_tensor(rng.standard_normal((64, 64))) for _ in range(200)]
    with ThreadPoolExecutor(4) as pool:
        Ws = list(pool.map(polar, Ms))
    assert torch.get_num_threads() == 2
    eye = torch.eye(64, dtype=torch.float64)
    assert all(torch.allclose(W.T @ W, eye, atol=1e-10) for W in Ws)


def test_non_finite_values_raise_numerical_error_naming_the_parameter():
    with pytest.raises(NumericalError, match="Increase rtol"):
        check_finite(torch.tensor([1.0, np.nan]), what="the solve", hint="Increase rtol.")
    assert issubclass(NumericalError, ValueError)


def test_loss_history_convergence_divergence_and_verbose(capsys):
    h = LossHistory("Demo", max_iter=50, tol=1e-3, n_iter_no_change=3, verbose=1)
    for loss in [1.0, 0.5, 0.5, 0.5, 0.5]:
        if h.record(loss):
            break
    assert h.converged and h.n_iter == 5 and h.curve[:2] == [1.0, 0.5]
    h.finish()
    assert "iteration" in capsys.readouterr().out
    h = LossHistory("Demo", max_iter=2, tol=1e-3)
    h.record(2.0)
    h.record(1.0)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        h.finish()
    with pytest.raises(NumericalError, match="Lower learning_rate"):
        LossHistory("Demo", max_iter=5, divergence_hint="Lower learning_rate.").record(float("nan"))


# ---------------------------------------------------------------------------------- views
def test_stack_and_split_views_round_trip(rng):
    views = [rng.standard_normal((7, 4)) for _ in range(3)]
    X = stack_views(*views)
    assert X.shape == (7, 12)
    np.testing.assert_array_equal(split_views(X, 3)[:, 1], views[1])
    np.testing.assert_array_equal(stack_views(views), X)
    assert isinstance(split_views(torch.as_tensor(X), 3), torch.Tensor)
    with pytest.raises(ValueError, match="not divisible by n_views=5"):
        split_views(X, 5)
    with pytest.raises(ValueError, match="same width"):
        stack_views(views[0], rng.standard_normal((7, 5)))
    with pytest.raises(ValueError, match="rows must be the same samples"):
        stack_views(views[0], rng.standard_normal((6, 4)))
