"""skalign's estimator checks, importable by anyone who writes a skalign estimator.

scikit-learn's :func:`~sklearn.utils.estimator_checks.check_estimator` covers the estimator API;
the checks here cover what skalign's torch facade promises on top of it (in the manner of
imbalanced-learn's ``imblearn.utils.estimator_checks``):

* :func:`check_pickle_transforms_without_cuda`: a fitted model pickles, loads and transforms
  bit for bit identically in a process that sees no CUDA device;
* :func:`check_cuda_fitted_model_falls_back_to_cpu`: a model whose fitted ``device_`` says
  ``"cuda"`` (as after fitting on a GPU) runs on the CPU there, with the same output;
* :func:`check_transform_is_invariant_to_batch_size`: every estimator takes ``batch_size`` and
  its output does not depend on it, nor on how many rows are transformed together;
* :func:`check_dtypes_follow_tags`: float32 in, float32 out; float64 in, float64 out where the
  ``preserves_dtype`` tag says so (float32 otherwise), with values that agree across the two;
* :func:`check_fit_is_bitwise_reproducible`: two fits with the same ``random_state`` are bit for
  bit identical on the CPU, in every fitted attribute (recursing into dicts, lists, tuples,
  arrays and nested estimators) and in the output.

:func:`check_estimator` runs them all on one instance; :func:`yield_checks` yields them for a
test generator and :func:`parametrize_with_checks` makes a pytest decorator of them. The checks fit
on small synthetic data (:func:`check_data`); :func:`estimators_to_check` yields every public
skalign estimator with the fast parameters of :data:`FAST_PARAMETERS`.

Examples
--------
A user-defined aligner is checked the same way as skalign's own:

>>> from skalign import ProcrustesAligner
>>> from skalign.utils.estimator_checks import check_estimator
>>> check_estimator(ProcrustesAligner())
"""

from __future__ import annotations

import atexit
import functools
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from sklearn.base import BaseEstimator, clone
from sklearn.utils import get_tags

from ._backend import fitted_models

__all__ = [
    "FAST_PARAMETERS",
    "check_cuda_fitted_model_falls_back_to_cpu",
    "check_data",
    "check_dtypes_follow_tags",
    "check_estimator",
    "check_fit_is_bitwise_reproducible",
    "check_pickle_transforms_without_cuda",
    "check_transform_is_invariant_to_batch_size",
    "parametrize_with_checks",
    "set_checking_parameters",
    "estimators_to_check",
    "yield_checks",
]

#: Parameters that keep each public estimator fast on the small data of :func:`check_data`
#: (the defaults are sized for real encoder embeddings), keyed by class name. Every key must be a
#: parameter of that estimator: :func:`set_checking_parameters` raises otherwise.
FAST_PARAMETERS: dict[str, dict] = {
    "AnchorBootstrapper": {"n_anchors": 40},
    "GeRAAligner": {"max_iter": 10},
    "OrthogonalEnsembleAligner": {"n_views": 2, "max_iter": 30},
    "InverseRelativeProjector": {"n_subspaces": 2},
}

N_SAMPLES, N_FEATURES_SOURCE, N_FEATURES_TARGET = 80, 6, 5

#: Fitted values that measure wall-clock time (dict keys or attribute names matching this) are
#: compared by type only: they differ between two runs of any correct fit.
_TIMING = re.compile(r"(^|_)(seconds|time)$")


# -------------------------------------------------------------------------- instances and data
def set_checking_parameters(estimator):
    """Set the fast parameters of :data:`FAST_PARAMETERS` and ``random_state=0`` on ``estimator``.

    Parameters
    ----------
    estimator : estimator instance
        A skalign estimator; classes without an entry in :data:`FAST_PARAMETERS` keep their
        parameters except ``random_state``.

    Returns
    -------
    estimator : estimator instance
        The same instance, with its parameters set.

    Raises
    ------
    ValueError
        If :data:`FAST_PARAMETERS` names a parameter the estimator does not have.
    """
    params = estimator.get_params(deep=False)
    fast = dict(FAST_PARAMETERS.get(type(estimator).__name__, {}))
    unknown = sorted(set(fast) - set(params))
    if unknown:
        raise ValueError(
            f"FAST_PARAMETERS[{type(estimator).__name__!r}] names {unknown}, which "
            f"{type(estimator).__name__} does not take; its parameters are {sorted(params)}."
        )
    if "random_state" in params:
        fast["random_state"] = 0
    return estimator.set_params(**fast)


def estimators_to_check():
    """Yield every public skalign estimator, constructed with its checking parameters.

    The estimators are those of :func:`skalign.utils.all_estimators`, so a new public estimator is
    checked as soon as it is exported.

    Yields
    ------
    estimator : estimator instance
        ``set_checking_parameters(cls())`` for each public estimator class, sorted by name.
    """
    from . import all_estimators

    for _, cls in all_estimators():
        yield set_checking_parameters(cls())


def check_data(estimator, dtype="float32"):
    """The data the checks fit and transform: paired spaces, or stacked views for an ensemble.

    ``X`` has 80 rows of 6 features; ``y`` 80 rows of 5 features related to ``X`` by a noisy
    linear map. An estimator with an ``n_views`` parameter gets ``X`` as ``n_views`` rotated
    copies of it, side by side (:func:`skalign.stack_views`).

    Parameters
    ----------
    estimator : estimator instance
        The estimator the data is for.
    dtype : {"float32", "float64"}, default="float32"
        Floating type of both arrays.

    Returns
    -------
    X : ndarray of shape (80, n_features_in)
        Source rows.
    y : ndarray of shape (80, 5)
        Target rows, paired with ``X`` row for row.
    """
    from .. import stack_views
    from ..datasets import make_paired_spaces

    X, Y = make_paired_spaces(N_SAMPLES, N_FEATURES_SOURCE, n_features_target=N_FEATURES_TARGET,
                              relation="linear", noise=0.05, random_state=0)
    n_views = estimator.get_params(deep=False).get("n_views")
    if n_views:
        rng = np.random.default_rng(1)
        X = stack_views([X @ np.linalg.qr(rng.standard_normal((N_FEATURES_SOURCE,) * 2))[0]
                         for _ in range(n_views)])
    return X.astype(dtype), Y.astype(dtype)


def _seeded_clone(estimator):
    est = clone(estimator)
    if est.get_params(deep=False).get("random_state", 0) is None:
        est.set_params(random_state=0)
    return est


def _fitted(estimator, dtype=np.float32):
    """A seeded clone of ``estimator`` fitted on :func:`check_data`, and the data's ``X``."""
    est = _seeded_clone(estimator)
    X, y = check_data(est, dtype)
    if get_tags(est).target_tags.required:
        est.fit(X, y)
    else:
        est.fit(X)
    return est, X


def _force_device(est, device):
    """Set ``device_`` on ``est`` and every fitted sub-estimator, as if fitted on ``device``
    (unresolved: a CUDA device on a machine without one is what the fallback checks need)."""
    for model in fitted_models(est):
        model.device_ = device
    return est


# ----------------------------------------------------------------- the process without CUDA
_WORKER = r"""
import pickle, struct, sys, traceback

inp, out = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr  # a stray print must not corrupt the replies


def read():
    head = inp.read(8)
    if len(head) < 8:
        return None
    return pickle.loads(inp.read(struct.unpack("<Q", head)[0]))


def write(obj):
    blob = pickle.dumps(obj)
    out.write(struct.pack("<Q", len(blob)) + blob)
    out.flush()


sys.path[:0] = read()
import torch

write(torch.cuda.is_available())
while (job := read()) is not None:
    model, X = job
    try:
        write(("ok", pickle.loads(model).transform(X)))
    except BaseException:
        write(("error", traceback.format_exc()))
"""


class _CudaLessWorker:
    """One Python process started with ``CUDA_VISIBLE_DEVICES=""``, reused by every check.

    Starting Python with torch and scikit-learn takes seconds; the checks send it pickled models
    over a pipe instead of starting a process per model. The worker gets this process's
    ``sys.path``, so estimators defined in any importable module (a test module included) load.
    """

    def __init__(self):
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        self._proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self._send(list(sys.path))
        if self._receive():
            raise AssertionError("the process started with CUDA_VISIBLE_DEVICES='' sees a CUDA "
                                 "device; the check cannot run here.")

    def alive(self):
        return self._proc.poll() is None

    def _send(self, obj):
        blob = pickle.dumps(obj)
        self._proc.stdin.write(struct.pack("<Q", len(blob)) + blob)
        self._proc.stdin.flush()

    def _receive(self):
        head = self._proc.stdout.read(8)
        if len(head) < 8:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace")[-3000:]
            raise AssertionError(f"the process without CUDA died:\n{tail}")
        return pickle.loads(self._proc.stdout.read(struct.unpack("<Q", head)[0]))

    def transform(self, model_blob, X):
        self._send((model_blob, X))
        status, value = self._receive()
        if status != "ok":
            raise AssertionError(f"loading and transforming without CUDA failed:\n{value}")
        return value

    def close(self):
        if self.alive():
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout, self._stderr):
            pipe.close()


_worker: _CudaLessWorker | None = None


def _transform_without_cuda(model_blob, X):
    global _worker
    if _worker is None or not _worker.alive():
        if _worker is not None:  # died (e.g. a model it could not load): release its pipes
            _worker.close()
        _worker = _CudaLessWorker()
        atexit.register(_worker.close)
    return _worker.transform(model_blob, X)


# ---------------------------------------------------------------------------------- the checks
def check_pickle_transforms_without_cuda(name, estimator):
    """A fitted model, pickled, transforms identically in a process that sees no CUDA device.

    The model is fitted here, pickled, and loaded and applied in a Python process started with
    ``CUDA_VISIBLE_DEVICES=""``; the output there must equal the output here bit for bit. The
    estimator's class must be importable (defined at the top level of a module), as pickling
    requires.

    Parameters
    ----------
    name : str
        Name of the estimator, used in messages.
    estimator : estimator instance
        The estimator to check; it is cloned, not modified.

    Raises
    ------
    AssertionError
        If loading or transforming fails there, or the outputs differ.
    """
    fitted, X = _fitted(estimator)
    there = _transform_without_cuda(pickle.dumps(fitted), X)
    np.testing.assert_array_equal(there, fitted.transform(X), err_msg=(
        f"{name}: the unpickled model transforms differently in a process without CUDA"))


def check_cuda_fitted_model_falls_back_to_cpu(name, estimator):
    """A model whose fitted ``device_`` is ``"cuda"`` transforms on the CPU where there is none.

    ``device_`` of the fitted model and of every fitted sub-estimator is set to ``"cuda"`` (as
    after fitting on a GPU) before pickling; in a process without CUDA the model must load and
    give the CPU output bit for bit.

    Parameters
    ----------
    name : str
        Name of the estimator, used in messages.
    estimator : estimator instance
        The estimator to check; it is cloned, not modified.

    Raises
    ------
    AssertionError
        If the model does not load or transform without CUDA, or its output differs.
    """
    fitted, X = _fitted(estimator)
    here = fitted.transform(X)
    there = _transform_without_cuda(pickle.dumps(_force_device(fitted, "cuda")), X)
    np.testing.assert_array_equal(there, here, err_msg=(
        f"{name}: a model fitted on 'cuda' transforms differently on the CPU"))


def check_transform_is_invariant_to_batch_size(name, estimator):
    """``transform`` takes ``batch_size`` and its output does not depend on it.

    The output for ``batch_size`` 1, 7 and more than the number of rows must equal the default
    batching's, and transforming 13 rows alone must give their rows of the full output.

    Parameters
    ----------
    name : str
        Name of the estimator, used in messages.
    estimator : estimator instance
        The estimator to check; it is cloned, not modified.

    Raises
    ------
    AssertionError
        If the estimator has no ``batch_size`` parameter, or a row's image depends on the batch.
    """
    params = estimator.get_params(deep=False)
    assert "batch_size" in params, (
        f"{name} has no batch_size parameter; every skalign estimator takes batch_size (rows per "
        f"block of transform). Its parameters are {sorted(params)}."
    )
    fitted, X = _fitted(estimator)
    reference = fitted.transform(X)
    for batch_size in (1, 7, len(X) + 1):
        out = fitted.set_params(batch_size=batch_size).transform(X)
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-6, err_msg=(
            f"{name}: transform with batch_size={batch_size} differs from the default batching"))
    np.testing.assert_allclose(fitted.transform(X[:13]), reference[:13], rtol=1e-5, atol=1e-6,
                               err_msg=f"{name}: transforming 13 rows alone changes their image")


def check_dtypes_follow_tags(name, estimator):
    """Float32 in gives float32 out; float64 in gives what the ``preserves_dtype`` tag says.

    float64 output is required where ``"float64"`` is in
    ``get_tags(estimator).transformer_tags.preserves_dtype``, float32 otherwise. The two fits see
    the same data, so their outputs must agree to float32 accuracy.

    Parameters
    ----------
    name : str
        Name of the estimator, used in messages.
    estimator : estimator instance
        The estimator to check; it is cloned, not modified.

    Raises
    ------
    AssertionError
        If an output dtype is wrong or the float32 and float64 results disagree.
    """
    fitted32, X32 = _fitted(estimator, np.float32)
    out32 = fitted32.transform(X32)
    assert out32.dtype == np.float32, f"{name}: float32 input gave {out32.dtype} output"
    fitted64, X64 = _fitted(estimator, np.float64)
    out64 = fitted64.transform(X64)
    preserved = get_tags(estimator).transformer_tags.preserves_dtype
    expected = np.float64 if "float64" in preserved else np.float32
    assert out64.dtype == expected, (
        f"{name}: float64 input gave {out64.dtype} output, but preserves_dtype={preserved}")
    scale = max(1.0, float(np.abs(out64).max()))
    np.testing.assert_allclose(out32, out64, atol=2e-3 * scale, err_msg=(
        f"{name}: the float32 and float64 fits of the same data disagree"))


def check_fit_is_bitwise_reproducible(name, estimator):
    """Two fits with the same ``random_state`` are bit for bit identical on the CPU.

    The promise holds within one machine (one BLAS kernel, one thread count): another CPU's
    kernel sums in another order, so fits on two machines agree to float tolerance, not bit for
    bit. Compare results across machines with a tolerance (CI reruns the suite under other
    OpenBLAS kernels with ``ci/blas_kernels.py`` to catch tests that do not).

    Every fitted attribute (public attributes whose name ends in ``_``) is compared, recursing
    into dicts, lists, tuples, object arrays, tensors and nested estimators (their parameters and
    fitted attributes); arrays and floats must match bit for bit. Values that measure wall-clock
    time (dict keys or attribute names ``seconds`` or ``time``, or ending in ``_seconds`` or
    ``_time``) are compared by type only. The transformed outputs must match too. An estimator
    whose ``random_state`` is ``None`` is checked with ``random_state=0``.

    Parameters
    ----------
    name : str
        Name of the estimator, used in messages.
    estimator : estimator instance
        The estimator to check; it is cloned, not modified.

    Raises
    ------
    AssertionError
        Naming the first attribute (and the path inside it) that differs.
    """
    a, X = _fitted(estimator)
    b, _ = _fitted(estimator)
    assert _fitted_attributes(a), (
        f"{name} has no fitted attributes (public names ending in '_') after fit")
    _assert_same_fit(a, b, name)
    np.testing.assert_array_equal(a.transform(X), b.transform(X), err_msg=(
        f"{name}: two fits with the same random_state transform differently"))


def _fitted_attributes(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}


def _assert_same_fit(a, b, path):
    """Compare the parameters and every fitted attribute of two fitted estimators bit for bit."""
    _assert_bitwise_equal(a.get_params(deep=False), b.get_params(deep=False), f"{path}.params")
    attrs_a, attrs_b = _fitted_attributes(a), _fitted_attributes(b)
    assert attrs_a.keys() == attrs_b.keys(), (
        f"{path}: fitted attributes {sorted(attrs_a)} vs {sorted(attrs_b)}")
    for attr in attrs_a:
        if _TIMING.search(attr):
            assert type(attrs_a[attr]) is type(attrs_b[attr]), f"{path}.{attr}: types differ"
        else:
            _assert_bitwise_equal(attrs_a[attr], attrs_b[attr], f"{path}.{attr}")


def _assert_bitwise_equal(a, b, path):
    """Raise an :class:`AssertionError` naming ``path`` unless ``a`` and ``b`` match bit for bit."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    assert type(a) is type(b), f"{path}: {type(a).__name__} in one fit, {type(b).__name__} in other"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for key in a:
            sub = f"{path}[{key!r}]"
            if not (isinstance(key, str) and _TIMING.search(key)):
                _assert_bitwise_equal(a[key], b[key], sub)
            else:
                assert type(a[key]) is type(b[key]), f"{sub}: types differ"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_bitwise_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (
            f"{path}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a.ravel(), b.ravel())):
                _assert_bitwise_equal(x, y, f"{path}.flat[{i}]")
        elif np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            # compare the bits: -0.0 differs from 0.0, a NaN equals the same NaN
            bits_a, bits_b = (np.ascontiguousarray(v).view(np.uint8).reshape(v.size, -1)
                              for v in (a, b))
            diff = np.flatnonzero((bits_a != bits_b).any(axis=1))
            raise AssertionError(f"{path}: arrays differ in {diff.size} of {a.size} entries "
                                 f"(first at flat index {diff[0]})")
    elif isinstance(a, BaseEstimator):
        _assert_same_fit(a, b, path)
    elif isinstance(a, (float, np.generic)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{path}: {a!r} vs {b!r}"
    elif isinstance(a, (int, str, bytes, bool, type(None), type, torch.device, torch.dtype)):
        assert a == b, f"{path}: {a!r} vs {b!r}"
    elif hasattr(a, "__dict__"):
        _assert_bitwise_equal(vars(a), vars(b), path)
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


# ------------------------------------------------------------------------------ running them
_CHECKS = (
    check_pickle_transforms_without_cuda,
    check_cuda_fitted_model_falls_back_to_cpu,
    check_transform_is_invariant_to_batch_size,
    check_dtypes_follow_tags,
    check_fit_is_bitwise_reproducible,
)


def yield_checks(estimator):
    """Yield every skalign check that applies to ``estimator``.

    All of them apply to every skalign estimator: none is skipped by type or by tag.

    Parameters
    ----------
    estimator : estimator instance
        The estimator the checks are for.

    Yields
    ------
    check : callable
        ``check(name, estimator)``; raises :class:`AssertionError` on failure.
    """
    del estimator  # every check applies to every estimator
    yield from _CHECKS


def check_estimator(estimator):
    """Run every skalign check on ``estimator`` and raise if any fails.

    Complements scikit-learn's :func:`~sklearn.utils.estimator_checks.check_estimator`, which
    checks the estimator API; run both on a new estimator. Each check works on a clone fitted on
    :func:`check_data`, so ``estimator`` is not modified.

    Parameters
    ----------
    estimator : estimator instance
        A skalign estimator: a subclass of :class:`skalign.base.BaseAligner` or
        :class:`skalign.base.BaseTransformer` defined at the top level of an importable module.

    Raises
    ------
    AssertionError
        Listing every failed check with its message.

    Examples
    --------
    >>> from skalign import LinearAligner
    >>> from skalign.utils.estimator_checks import check_estimator
    >>> check_estimator(LinearAligner())
    """
    name = type(estimator).__name__
    failures = []
    for check in yield_checks(estimator):
        try:
            check(name, estimator)
        except AssertionError as exc:
            failures.append(f"{check.__name__}: {exc}")
    if failures:
        raise AssertionError(f"{name} failed {len(failures)} skalign check(s):\n"
                             + "\n".join(failures))


def parametrize_with_checks(estimators, *, expected_failed_checks=None):
    """A pytest decorator running every skalign check on every estimator, one test per pair.

    The decorated test takes ``estimator`` and ``check`` and calls ``check(estimator)``; test ids
    read ``ClassName-check_name``.

    Parameters
    ----------
    estimators : list of estimator instances
        The estimators to check.
    expected_failed_checks : callable, default=None
        ``expected_failed_checks(estimator)`` returns ``{check name: reason}`` for the checks
        that estimator is known to fail. Those tests are marked ``xfail(strict=True)``: they
        fail the suite as soon as the estimator passes, so the entry cannot outlive the bug.

    Returns
    -------
    decorator : callable
        ``pytest.mark.parametrize("estimator, check", ...)``.

    Examples
    --------
    >>> from skalign import LinearAligner
    >>> from skalign.utils.estimator_checks import parametrize_with_checks
    >>> @parametrize_with_checks([LinearAligner()])
    ... def test_skalign_checks(estimator, check):
    ...     check(estimator)
    """
    import pytest

    cases = []
    for est in estimators:
        name = type(est).__name__
        expected = expected_failed_checks(est) if expected_failed_checks else {}
        for check in yield_checks(est):
            reason = expected.get(check.__name__)
            marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] \
                if reason else []
            cases.append(pytest.param(est, functools.partial(check, name), marks=marks,
                                      id=f"{name}-{check.__name__}"))
    return pytest.mark.parametrize("estimator, check", cases)
