"""Every public estimator fitted and applied on a CUDA device, against the same fit on the CPU.

Skipped where torch sees no CUDA device (``@pytest.mark.cuda``, see ``conftest.py``); the suite
ran on a lent NVIDIA H100 with ``ci/run_cuda_checks.sh`` (the user guide's "GPU" section
gives the run). What a GPU fit must keep:

* ``device_`` names the GPU, the output is a numpy array of the input's float type, torch tensors
  on the GPU are taken as they are;
* deterministic fits (no random draw: Procrustes, ridge, ASIF, relative projection, IRP, the
  ensemble) give the CPU's map up to float32 rounding;
* fits that draw random numbers (GeRA, the bootstrapper) draw them from a generator on the fit's
  device, whose stream differs from the CPU's: they must reach the CPU fit's quality, and repeat
  on the GPU with the same ``random_state``;
* a model fitted on the GPU pickles, loads in a process that sees no CUDA device and gives the
  GPU's output there;
* zero-pair and five-seed discovery on the vendored real pools succeed on the GPU as on the CPU,
  and an impossible target pool still warns.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skalign import AnchorBootstrapper, GeRAAligner, UnpairedPool
from skalign.exceptions import DiscoveryFailedWarning
from skalign.metrics import top_k_accuracy
from skalign.utils.estimator_checks import (
    _transform_without_cuda,
    check_data,
    estimators_to_check,
)

pytestmark = [pytest.mark.cuda,
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

ESTIMATORS = list(estimators_to_check())
#: estimators whose fit draws random numbers on its own device
RANDOMISED = {"AnchorBootstrapper", "GeRAAligner"}


def _name(est):
    return type(est).__name__


def _fit(est, X, y, device):
    est = clone(est).set_params(device=device)
    return est.fit(X, y) if not est.get_params().get("n_views") else est.fit(X)


def _rel_err(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_name)
def test_gpu_fit_matches_the_cpu_fit(estimator):
    X, y = check_data(estimator)
    cpu, gpu = _fit(estimator, X, y, "cpu"), _fit(estimator, X, y, "cuda")
    assert str(gpu.device_).startswith("cuda") and str(cpu.device_) == "cpu"
    out = gpu.transform(X)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert out.shape == cpu.transform(X).shape
    if _name(estimator) in RANDOMISED:  # another random stream: the same quality, not the map
        if y.shape[1] == out.shape[1]:
            assert top_k_accuracy(y, out) >= top_k_accuracy(y, cpu.transform(X)) - 0.05
    else:
        assert _rel_err(out, cpu.transform(X)) < 1e-4
    out64 = gpu.transform(X.astype(np.float64))
    assert out64.dtype == np.float64 and _rel_err(out64, out) < 1e-4


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_name)
def test_gpu_tensors_go_in_as_they_are(estimator):
    X, y = check_data(estimator)
    Xt = torch.as_tensor(X, device="cuda")
    yt = torch.as_tensor(y, device="cuda")
    est = clone(estimator).set_params(device="cuda")
    est = est.fit(Xt, yt) if not est.get_params().get("n_views") else est.fit(Xt)
    out = est.transform(Xt)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, est.transform(X), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_name)
def test_gpu_fit_repeats_with_the_same_random_state(estimator):
    X, y = check_data(estimator)
    a, b = _fit(estimator, X, y, "cuda"), _fit(estimator, X, y, "cuda")
    np.testing.assert_allclose(a.transform(X), b.transform(X), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_name)
def test_gpu_fitted_model_transforms_in_a_process_without_cuda(estimator):
    X, y = check_data(estimator)
    gpu = _fit(estimator, X, y, "cuda")
    state = gpu.__getstate__()
    assert not any(isinstance(v, torch.Tensor) and v.is_cuda for v in state.values())
    there = _transform_without_cuda(pickle.dumps(gpu), X)
    assert _rel_err(there, gpu.transform(X)) < 1e-4


# ------------------------------------------------------------------ real pools (vendored subset)
def _discover(X, y, pool, **params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boot = AnchorBootstrapper(random_state=0, device="cuda", **params).fit(X, y, pool)
    return boot, [w.category for w in caught]


def test_zero_pair_discovery_on_the_gpu(seedless_split):
    pool, shuffle, Xt, Yt, ceiling = seedless_split
    boot, caught = _discover(None, None, pool)
    assert str(boot.device_).startswith("cuda") and boot.discovery_ == "self_learning"
    assert DiscoveryFailedWarning not in caught and boot.certificate_ >= 0.8
    src, tgt = boot.anchor_pairs_.T
    assert len(src) >= 800 and np.mean(shuffle[tgt] == src) >= 0.95  # chance: 0.001
    assert top_k_accuracy(Yt, boot.transform(Xt)) >= 0.95 * ceiling


def test_five_seed_discovery_on_the_gpu(seedless_split):
    pool, shuffle, Xt, Yt, ceiling = seedless_split
    seeds = np.arange(5)
    boot, caught = _discover(pool.X[seeds], pool.y[np.argsort(shuffle)[seeds]], pool)
    assert DiscoveryFailedWarning not in caught and boot.certificate_ >= 0.8
    src, tgt = boot.anchor_pairs_.T
    assert np.mean(shuffle[tgt] == src) >= 0.95
    assert top_k_accuracy(Yt, boot.transform(Xt)) >= 0.95 * ceiling


def test_impossible_target_pool_warns_on_the_gpu(seedless_split):
    pool, *_ = seedless_split
    noise = np.random.default_rng(0).standard_normal((500, 768)).astype(np.float32)
    boot, caught = _discover(None, None, UnpairedPool(X=pool.X[:500], y=noise), n_restarts=1)
    assert DiscoveryFailedWarning in caught
    assert boot.certificate_ < boot.min_certificate and boot.restarts_[0]["stopped"]


def test_gera_on_the_gpu_keeps_the_cpu_quality(docstring_pair):
    A, B, order = docstring_pair
    pairs, pool, test = order[:200], order[200:1000], order[1000:]
    unpaired = UnpairedPool(X=A[pool], y=B[pool])
    scores = {}
    for device in ("cpu", "cuda"):
        est = GeRAAligner(random_state=0, device=device).fit(A[pairs], B[pairs], unpaired)
        scores[device] = top_k_accuracy(est.transform_target(B[test]), est.transform(A[test]))
    assert scores["cuda"] >= scores["cpu"] - 0.02 and scores["cuda"] > 0.5, scores


@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_store_translated_by_a_gpu_model_is_its_transform(tmp_path, kind):
    """A GPU-fitted map streams a store through the GPU (``model.transform`` per batch, not
    the CPU translator's reused buffers): the output is its transform of every row, in order,
    also with batches encoded two at a time (Parquet)."""
    from skalign import ProcrustesAligner
    from skalign.io import translate

    if kind == "parquet":
        pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 32)).astype(np.float32)
    Y = (X @ rng.normal(size=(32, 48))).astype(np.float32)
    model = ProcrustesAligner(device="cuda").fit(X[:1000], Y[:1000])
    src, out = tmp_path / "in.npy", tmp_path / f"out.{kind}"
    np.save(src, X)
    assert translate(model, src, out, batch_size=700) == len(X)
    if kind == "npy":
        got = np.load(out)
    else:
        import pyarrow.parquet as pq

        got = np.stack(pq.read_table(out).column("vector").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, model.transform(X), rtol=1e-5, atol=1e-5)


def test_translate_device_cuda_runs_a_cpu_model_on_the_gpu(tmp_path, capsys):
    """``skalign translate --device cuda`` with a model fitted on the CPU: the batches go
    through the GPU (memory allocated there) and the output is the model's transform."""
    from skalign import GeRAAligner
    from skalign.cli import main
    from skalign.io import save

    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 32)).astype(np.float32)
    Y = np.tanh(X @ rng.normal(size=(32, 48))).astype(np.float32)
    model = GeRAAligner(random_state=0, device="cpu").fit(X[:1000], Y[:1000])
    save(model, tmp_path / "m.skops")
    np.save(tmp_path / "in.npy", X)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    assert main(["translate", str(tmp_path / "m.skops"), str(tmp_path / "in.npy"),
                 str(tmp_path / "out.npy"), "--device", "cuda", "--batch-size", "700"]) == 0
    assert torch.cuda.max_memory_allocated() > 0
    assert "translated 4000 rows" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), model.transform(X), rtol=1e-5,
                               atol=1e-5)
