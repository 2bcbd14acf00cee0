"""skalign's own project-wide checks, run over every public estimator (imbalanced-learn style).

scikit-learn's common checks (``test_common.py``) cover the estimator API; these cover what the
torch facade promises on top of it:

* a fitted model pickles and transforms identically in a process that sees no CUDA device, and
  one whose fitted ``device_`` says ``"cuda"`` (as after fitting on a GPU) falls back to the CPU
  there with the same output;
* ``transform`` is invariant to ``batch_size``;
* float32 in → float32 out; float64 in → float64 out where the ``preserves_dtype`` tag says so
  (float32 otherwise), with values that agree across the two;
* two fits with the same ``random_state`` are bit-for-bit identical on the CPU.

Estimators are discovered with :func:`skalign.utils.all_estimators`, so a new public estimator is
checked as soon as it is exported. Data are small so that the module runs in well under a minute.
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.utils import get_tags

from skalign import stack_views
from skalign.datasets import make_paired_spaces
from skalign.utils import all_estimators

N_SAMPLES, D_SOURCE, D_TARGET = 80, 6, 5

# The fast settings stop iterative fits early on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

#: Parameters that keep each estimator fast on the small data (defaults are sized for real
#: encoder embeddings); every estimator with a ``random_state`` also gets ``random_state=0``.
FAST_PARAMS = {
    "AnchorBootstrapper": {"n_anchors": 40, "max_iter": 30},
    "GeRAAligner": {"max_iter": 30},
    "OrthogonalEnsembleAligner": {"n_views": 2, "max_iter": 30},
    "InverseRelativeProjector": {"n_subspaces": 2},
}


def _make(cls):
    est = cls()
    params = dict(FAST_PARAMS.get(cls.__name__, {}))
    if "random_state" in est.get_params():
        params["random_state"] = 0
    return est.set_params(**{k: v for k, v in params.items() if k in est.get_params()})


ESTIMATORS = [_make(cls) for _, cls in all_estimators()]
IDS = [type(est).__name__ for est in ESTIMATORS]


def _data(est, dtype=np.float32):
    """``(X, y)`` for ``est``: paired spaces, or ``n_views`` stacked views for the ensemble."""
    X, Y = make_paired_spaces(N_SAMPLES, D_SOURCE, n_features_target=D_TARGET, relation="linear",
                              noise=0.05, random_state=0)
    n_views = est.get_params().get("n_views")
    if n_views:
        rng = np.random.default_rng(1)
        views = [X @ np.linalg.qr(rng.standard_normal((D_SOURCE, D_SOURCE)))[0]
                 for _ in range(n_views)]
        X = stack_views(views)
    return X.astype(dtype), Y.astype(dtype)


def _fit(est, X, Y):
    if get_tags(est).target_tags.required:
        return est.fit(X, Y)
    return est.fit(X)


def _fitted(est, dtype=np.float32):
    X, Y = _data(est, dtype)
    return _fit(clone(est), X, Y), X


def _force_device(est, device):
    """Set ``device_`` on ``est`` and every fitted sub-estimator, as if fitted on ``device``."""
    if hasattr(est, "device_"):
        est.device_ = device
    for value in vars(est).values():
        if isinstance(value, BaseEstimator):
            _force_device(value, device)
    return est


_LOAD_AND_TRANSFORM = r"""
import pickle, sys
import numpy as np
import torch

assert not torch.cuda.is_available(), "the subprocess must see no CUDA device"
jobs = pickle.load(open(sys.argv[1], "rb"))
out = {key: pickle.loads(blob).transform(X) for key, (blob, X) in jobs.items()}
pickle.dump(out, open(sys.argv[2], "wb"))
"""


@pytest.fixture(scope="module")
def transformed_without_cuda(tmp_path_factory):
    """Every estimator fitted here, pickled as is and with ``device_="cuda"`` forced, then loaded
    and applied in one subprocess with ``CUDA_VISIBLE_DEVICES=""``; returns the outputs here and
    there."""
    tmp = tmp_path_factory.mktemp("pickles")
    jobs, here = {}, {}
    for name, est in zip(IDS, ESTIMATORS):
        fitted, X = _fitted(est)
        here[name] = fitted.transform(X)
        jobs[(name, "cpu")] = (pickle.dumps(fitted), X)
        jobs[(name, "cuda")] = (pickle.dumps(_force_device(fitted, "cuda")), X)
    (tmp / "jobs.pkl").write_bytes(pickle.dumps(jobs))
    keep = ("HOME", "PATH", "PYTHONPATH", "SKALIGN_DATA")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_TRANSFORM, str(tmp / "jobs.pkl"), str(tmp / "out.pkl")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return here, pickle.loads((tmp / "out.pkl").read_bytes())


def test_every_public_estimator_is_checked():
    assert {"LinearAligner", "ProcrustesAligner", "OrthogonalEnsembleAligner"} <= set(IDS)
    assert not [name for name in IDS if name.startswith("Base")]


@pytest.mark.parametrize("name", IDS)
def test_pickle_loads_and_transforms_identically_without_cuda(name, transformed_without_cuda):
    here, there = transformed_without_cuda
    np.testing.assert_array_equal(there[(name, "cpu")], here[name])


@pytest.mark.parametrize("name", IDS)
def test_gpu_fitted_model_falls_back_to_the_cpu(name, transformed_without_cuda):
    """A model whose ``device_`` is ``"cuda"`` transforms on the CPU where there is no GPU."""
    here, there = transformed_without_cuda
    np.testing.assert_array_equal(there[(name, "cuda")], here[name])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_transform_is_invariant_to_batch_size(est):
    fitted, X = _fitted(est)
    reference = fitted.transform(X)
    if "batch_size" not in fitted.get_params():
        pytest.skip(f"{type(est).__name__} has no batch_size")
    for batch_size in (1, 7, N_SAMPLES + 1):
        out = fitted.set_params(batch_size=batch_size).transform(X)
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-6,
                                   err_msg=f"batch_size={batch_size}")
    # a different number of rows does not change a row's image either
    np.testing.assert_allclose(fitted.transform(X[:13]), reference[:13], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_float32_and_float64_follow_the_tags(est):
    fitted32, X32 = _fitted(est, np.float32)
    out32 = fitted32.transform(X32)
    assert out32.dtype == np.float32
    fitted64, X64 = _fitted(est, np.float64)
    out64 = fitted64.transform(X64)
    preserved = get_tags(est).transformer_tags.preserves_dtype
    assert out64.dtype == (np.float64 if "float64" in preserved else np.float32)
    # float32 and float64 inputs describe the same data: the results agree to float32 accuracy
    scale = max(1.0, float(np.abs(out64).max()))
    np.testing.assert_allclose(out32, out64, atol=2e-3 * scale)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_same_random_state_gives_bitwise_identical_fits(est):
    a, X = _fitted(est)
    b, _ = _fitted(est)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    for attr, value in vars(a).items():
        if attr.endswith("_") and isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, getattr(b, attr), err_msg=attr)
