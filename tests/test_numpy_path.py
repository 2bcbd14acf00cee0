"""Affine aligners on numpy rows: a numpy twin of the torch map, equal within float tolerance.

A CPU model applied to a numpy array computes ``(x − μ_in) W + μ_out`` (with the fitted row
normalisation and output scale) in numpy, in the input's float dtype; a torch tensor input, or a
model whose device is a GPU that is present, goes through torch as before.
"""

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skalign import LinearAligner, ProcrustesAligner
from skalign.exceptions import DeviceWarning


def _pair(rng, d_x=12, d_y=8, n=200):
    X = rng.standard_normal((n, d_x)) * rng.uniform(2, 8, (n, 1))
    Y = rng.standard_normal((n, d_x)) @ rng.standard_normal((d_x, d_y)) + 0.5
    return X, Y


CASES = [
    (ProcrustesAligner, {"normalize": False}),
    (ProcrustesAligner, {"normalize": "both", "scale": True}),
    (ProcrustesAligner, {"normalize": "target", "center": False}),
    (LinearAligner, {"normalize": False, "alpha": 0.1}),
    (LinearAligner, {"normalize": "source"}),
    (LinearAligner, {"normalize": "both"}),
]


@pytest.mark.filterwarnings("ignore::skalign.exceptions.ScaleMismatchWarning")
@pytest.mark.parametrize("make, params", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_and_torch_paths_agree(make, params, dtype, rng):
    X, Y = _pair(rng)
    est = make(**params).fit(X.astype(dtype), Y.astype(dtype))
    new = (rng.standard_normal((57, X.shape[1])) * 4).astype(dtype)
    out = est.transform(new)
    assert out.dtype == dtype
    via_torch = est.transform(torch.from_numpy(new))
    assert via_torch.dtype == dtype
    # an entry near zero in a row of large ones carries the rounding of its large terms, which
    # the two paths sum in different orders: the absolute tolerance follows the output's scale
    scale = max(1.0, float(np.abs(out).max()))
    tol = {"rtol": 1e-5, "atol": 1e-6 * scale} if dtype == np.float32 else \
        {"rtol": 1e-12, "atol": 1e-12 * scale}
    np.testing.assert_allclose(out, via_torch, **tol)
    if hasattr(est, "inverse_transform"):
        back = est.inverse_transform(out)
        np.testing.assert_allclose(back, est.inverse_transform(torch.from_numpy(out)), **tol)
    # batch-invariant
    np.testing.assert_allclose(est.set_params(batch_size=5).transform(new), out, **tol)


def test_gpu_model_without_a_gpu_warns_and_uses_the_cpu(rng):
    X, Y = _pair(rng)
    est = ProcrustesAligner().fit(X, Y)
    expected = est.transform(X)
    est.device_ = "cuda"
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the model runs there")
    with pytest.warns(DeviceWarning):
        np.testing.assert_array_equal(est.transform(X), expected)


@pytest.mark.cuda
def test_gpu_model_runs_on_torch(rng, monkeypatch):
    import skalign.base

    def no_numpy(*args, **kwargs):
        raise AssertionError("a GPU model must not take the numpy path")

    X, Y = _pair(rng)
    est = ProcrustesAligner(device="cuda").fit(X, Y)
    expected = ProcrustesAligner().fit(X, Y).transform(X)  # a CPU model: the numpy path
    monkeypatch.setattr(skalign.base, "apply_in_batches_numpy", no_numpy)
    np.testing.assert_allclose(est.transform(X), expected, rtol=1e-4, atol=1e-5)


def test_one_batch_returns_the_product_itself_never_a_view_of_the_input():
    """A transform that fits in one batch returns ``fn``'s own result (no copy into a second
    array), the numbers of the batch-by-batch path, and never the caller's array or a view of
    it."""
    from skalign.utils._backend import apply_in_batches_numpy

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6)).astype(np.float32)
    W = rng.normal(size=(6, 4)).astype(np.float32)
    one = apply_in_batches_numpy(lambda B: B @ W, X, batch_size=64, n_outputs=4)
    many = apply_in_batches_numpy(lambda B: B @ W, X, batch_size=7, n_outputs=4)
    assert one.dtype == np.float32 and one.flags.c_contiguous
    np.testing.assert_allclose(one, many, rtol=1e-6, atol=1e-6)  # BLAS blocks by batch size
    same = apply_in_batches_numpy(lambda B: B, X, batch_size=64, n_outputs=6)
    assert not np.may_share_memory(same, X)
    np.testing.assert_array_equal(same, X)
    halves = apply_in_batches_numpy(lambda B: B[:, :3], X, batch_size=64, n_outputs=3)
    assert not np.may_share_memory(halves, X)
    wide = apply_in_batches_numpy(lambda B: B.astype(np.float64), X, batch_size=64)
    assert wide.dtype == np.float32


def test_batches_written_in_place_give_the_same_numbers():
    """An affine map applied batch by batch into the output's rows (``fn(B, out=...)``, one
    working buffer reused) gives the numbers of one batch at a time, normalised and centred
    inputs included, and the store's batch translator gives exactly those of ``transform`` with
    the same batches."""
    from skalign._stores.pipeline.streaming import BatchTranslator as _BatchTranslator

    rng = np.random.default_rng(3)
    X = (rng.normal(size=(500, 12)) * rng.uniform(0.5, 4, size=(500, 1)) + 2).astype(np.float32)
    Y = (X @ rng.normal(size=(12, 20)) + 1).astype(np.float32)
    for model in (ProcrustesAligner(normalize=True), ProcrustesAligner(normalize=False),
                  LinearAligner()):
        model.fit(X, Y)
        whole = model.transform(X)
        rows = [model.transform(X[s:s + 1]) for s in range(0, 500, 97)]
        # one row is a matrix-vector product in BLAS, which may sum in another order
        np.testing.assert_allclose(np.concatenate(rows), whole[::97], rtol=1e-5, atol=1e-5)
        batched = clone(model).set_params(batch_size=64).fit(X, Y).transform(X)
        np.testing.assert_allclose(batched, whole, rtol=1e-5, atol=1e-5)  # float32 rounding
        translate = _BatchTranslator(model, "x")
        assert translate.fn is not None
        parts = []
        for s in range(0, 500, 64):
            out = translate(X[s:s + 64], s)
            assert out.base is not None  # one of the two reused buffers
            parts.append(out.copy())
        np.testing.assert_array_equal(np.concatenate(parts),
                                      clone(model).set_params(batch_size=64).fit(X, Y)
                                      .transform(X))


@pytest.mark.parametrize("params", [{"normalize": True}, {"normalize": False},
                                    {"normalize": False, "center": False},
                                    {"normalize": "source", "scale": True}])
def test_affine_map_prepares_rows_in_chunks_and_bounds_them(params, monkeypatch):
    """The numpy affine map prepares its rows a chunk at a time and folds the bias into the
    product: the numbers do not depend on the chunk, they are the float64 map's to float32
    rounding, and the bound it returns proves input and output finite, or leaves a NaN, an
    infinity or numbers too large for the bound to the store's batch translator's exact check
    (which refuses an output that overflowed)."""
    import skalign.utils._backend as backend
    from skalign._stores.pipeline.streaming import BatchTranslator as _BatchTranslator
    from skalign.exceptions import StoreError

    rng = np.random.default_rng(5)
    X = (rng.normal(size=(300, 12)) * rng.uniform(0.5, 4, size=(300, 1)) + 2).astype(np.float32)
    Y = (X @ rng.normal(size=(12, 20)) + 1).astype(np.float32)
    model = ProcrustesAligner(**params).fit(X, Y)
    whole = model._transform_numpy_fn(np.float32)(X)
    monkeypatch.setattr(backend, "AFFINE_CHUNK_ROWS", 7)
    fn = model._transform_numpy_fn(np.float32)
    out, finite = fn.checked(X)
    np.testing.assert_array_equal(out, whole)
    assert finite
    np.testing.assert_allclose(out, model.transform(X.astype(np.float64)), rtol=1e-5, atol=1e-5)
    for bad, value in ((13, np.nan), (20, np.inf), (299, -np.inf)):
        B = X.copy()
        B[bad, 3] = value
        with np.errstate(invalid="ignore", over="ignore"):
            assert not fn.checked(B)[1]
        with pytest.raises(StoreError, match=f"row {1000 + bad} has NaN or infinite"):
            _BatchTranslator(model, "src")(B, 1000)
    if params["normalize"]:
        return  # normalised rows: never large
    # large finite numbers whose outputs the bound proves finite (their sum overflows)
    args, kw = model._affine()
    W = np.vstack([args[0] * (kw["scale_out"] or 1.0), args[2][None, :]])
    gain = np.abs(W).sum(axis=0).max()
    big = np.finfo(np.float32).max / gain / 4
    B = X.copy()
    B[:100, :] = np.float32(big) * np.sign(B[:100, :] + 10)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(np.add.reduce(B, axis=None))
        assert fn.checked(B)[1]
        expected = model._transform_numpy_fn(np.float32)(B)
    np.testing.assert_array_equal(_BatchTranslator(model, "src")(B, 0), expected)
    # beyond the bound but finite (one large number per row): checked exactly, translated
    k = int(np.argmin(np.abs(W[:-1]).max(axis=1)))
    one = np.finfo(np.float32).max / np.abs(W[k]).max() / 4
    assert one * gain > np.finfo(np.float32).max  # beyond the bound
    B = X.copy()
    B[:4, k] = np.float32(one)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not fn.checked(B)[1]
        expected = model._transform_numpy_fn(np.float32)(B)
    assert np.isfinite(expected).all()
    np.testing.assert_array_equal(_BatchTranslator(model, "src")(B, 0), expected)
    # finite numbers that the map sends to infinity: refused, the first such row named
    j = int(np.argmax(np.abs(W[:-1]).sum(axis=0)))
    assert np.abs(W[:-1, j]).sum() > 1.2  # a row along column j's signs overflows it
    B = X.copy()
    B[[7, 9], :] = np.float32(0.9 * np.finfo(np.float32).max) * np.sign(W[:-1, j])
    with np.errstate(over="ignore", invalid="ignore"):
        assert not fn.checked(B)[1]
    with pytest.raises(StoreError, match="the model maps row 507 to infinite numbers"):
        _BatchTranslator(model, "src")(B, 500)
