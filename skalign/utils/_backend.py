"""The torch backend shared by every skalign estimator.

Everything that touches torch devices, dtypes, random generators, row batching and the float64
linear algebra lives here, so the estimators stay thin sklearn facades over the same mechanics.
No function in this module calls into CUDA at import time, and importing it does not import torch:
each function imports torch when it runs, so a numpy-only model (a fitted affine map applied to
numpy rows) is loaded and applied without torch ever being imported. :func:`is_tensor` answers
"is this a torch tensor?" without importing torch.

Threads are chosen by the work (:func:`work_threads`): a step whose biggest dense operation is at
most :data:`ONE_THREAD_WORK` multiply-adds runs on one thread, torch's and numpy's BLAS, scoped
and restored (:func:`one_thread`); larger steps keep the caller's setting.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING

import numpy as np
from sklearn import get_config
from sklearn.utils import check_random_state

from ..exceptions import DeviceWarning, NumericalError

if TYPE_CHECKING:
    import torch

#: the torch dtypes behind the module attributes ``COMPUTE_DTYPE`` (every hot-path computation:
#: transforms, optimisation) and ``SOLVE_DTYPE`` (SVDs, pseudo-inverses, least squares), resolved
#: on first access (PEP 562) so that importing this module does not import torch
_DTYPES = {"COMPUTE_DTYPE": "float32", "SOLVE_DTYPE": "float64"}


def __getattr__(name):
    if name in _DTYPES:
        import torch

        return getattr(torch, _DTYPES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_tensor(X) -> bool:
    """Whether ``X`` is a torch tensor, without importing torch.

    If torch was never imported, nothing can be a tensor; this keeps numpy-only code paths free
    of torch's import time.
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


# --------------------------------------------------------------------------------------- devices
def resolve_device(device) -> torch.device:
    """Turn a ``device`` parameter into a :class:`torch.device`.

    ``"auto"`` picks CUDA when available and the CPU otherwise; ``"cuda"`` (or ``"cuda:N"``)
    without a visible CUDA device raises a :class:`ValueError` instead of torch's ``RuntimeError``.
    """
    import torch

    if isinstance(device, torch.device):
        dev = device
    elif device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"device={device!r} is not a valid device; use 'cpu', 'cuda', 'auto' or a "
                "torch.device."
            ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} asks for CUDA but torch sees no CUDA device; use device='cpu' "
            "or device='auto'."
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(
            f"device={device!r} asks for CUDA device {dev.index} but torch sees "
            f"{torch.cuda.device_count()} (cuda:0 to cuda:{torch.cuda.device_count() - 1})."
        )
    return dev


#: models that already warned about running on the CPU instead of their fitted device
_FELL_BACK = weakref.WeakSet()


def transform_device(fitted_device: str | None, X, owner=None) -> torch.device:
    """Device on which to apply a fitted model to ``X``.

    A torch tensor input is processed where it lives. Otherwise the fitted device is used when it
    is available on this machine, else the CPU, so a model fitted on a GPU keeps working after it is
    unpickled on a machine without one; that fallback warns (:class:`DeviceWarning`) once per
    ``owner`` (the model).
    """
    import torch

    if isinstance(X, torch.Tensor):
        return X.device
    if fitted_device is not None:
        dev = torch.device(fitted_device)
        if dev.type != "cuda" or torch.cuda.is_available():
            return dev
        if owner is None or owner not in _FELL_BACK:
            if owner is not None:
                _FELL_BACK.add(owner)
            name = type(owner).__name__ if owner is not None else "the model"
            warnings.warn(
                f"{name} was fitted on {fitted_device!r}, which this machine does not have "
                "(torch sees no CUDA device); computing on the CPU instead. Refit with "
                "device='cpu' or set device_='cpu' to silence this.",
                DeviceWarning,
                stacklevel=4,
            )
    return torch.device("cpu")


def fitted_models(model):
    """Every fitted skalign model inside ``model`` (those with a ``device_``): ``model`` itself,
    the fitted estimators it holds (fitted attributes, a pipeline's steps, an inverse wrapper's
    ``model``), and theirs, each once."""
    from sklearn.base import BaseEstimator

    seen, todo = set(), [model]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            todo.extend(obj)
            continue
        if not hasattr(obj, "__dict__") or isinstance(obj, type):
            continue
        if isinstance(obj, BaseEstimator) and hasattr(obj, "device_"):
            yield obj
        # fitted attributes (trailing underscore), pipeline steps, wrapped models
        todo.extend(v for k, v in vars(obj).items()
                    if (k.endswith("_") or k in ("steps", "model"))
                    and (isinstance(v, (list, tuple)) or hasattr(v, "transform")))


def set_fitted_device(model, device) -> int:
    """Make every fitted skalign model inside ``model`` (:func:`fitted_models`) compute its
    transforms on ``device``, resolved by :func:`resolve_device` (so a CUDA device on a machine
    without one is a ``ValueError``). Returns how many were set; 0 means the model has no torch
    computation to move.
    """
    dev = str(resolve_device(device))
    models = list(fitted_models(model))
    for est in models:
        est.device_ = dev
    return len(models)


# --------------------------------------------------------------------------------- conversions
def as_numpy(X):
    """Return ``X`` as something :func:`sklearn.utils.check_array` accepts.

    Torch tensors (on any device) become numpy arrays; everything else is returned unchanged.
    """
    if is_tensor(X):
        return X.detach().to("cpu").numpy()
    return X


def to_tensor(X, device, dtype=None) -> torch.Tensor:
    """Copy a numpy array (or move a tensor) to ``device`` with ``dtype``.

    Read-only arrays (memmaps) are copied first: ``torch.from_numpy`` on them warns and would
    alias memory torch assumes it may write.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if isinstance(X, torch.Tensor):
        return X.detach().to(device=device, dtype=dtype)
    X = np.asarray(X)
    if not X.flags.writeable or not X.flags.c_contiguous:
        X = np.array(X, order="C", copy=True)
    return torch.from_numpy(X).to(device=device, dtype=dtype)


def to_numpy(T: torch.Tensor, dtype=None) -> np.ndarray:
    """Detach, move to the CPU and convert to numpy (optionally casting to ``dtype``)."""
    out = T.detach().to("cpu").numpy()
    return out if dtype is None else out.astype(dtype, copy=False)


# ---------------------------------------------------------------------------------- randomness
def make_generator(random_state, device) -> torch.Generator:
    """A local :class:`torch.Generator` on ``device`` seeded from ``random_state``.

    ``random_state`` follows scikit-learn (None, int or :class:`numpy.random.RandomState`). The
    global torch RNG is never touched. Call this at the start of every ``fit`` so that refitting
    with the same seed gives the same result.
    """
    import torch

    rng = check_random_state(random_state)
    seed = int(rng.randint(np.iinfo(np.int32).max))
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(seed)
    return gen


# ------------------------------------------------------------------------------------ batching
def default_batch_size(*floats_per_row: int, itemsize: int = 4, working_memory=None) -> int:
    """Rows per block so that a block of rows fits in the memory budget.

    The one rule that sizes every block of rows in skalign: transform batches, similarity blocks
    of the metrics, the nearest-neighbour search and the matchings, and streamed store batches.

    Parameters
    ----------
    *floats_per_row : int
        Numbers materialised per row of a block (summed), e.g. ``n_features, n_outputs`` for a
        batch's input and output, or the ``n_columns`` of a block of similarities.
    itemsize : int, default=4
        Bytes per number (4 for float32, 8 for float64).
    working_memory : float, default=None
        Budget in MiB; ``None`` uses scikit-learn's ``working_memory`` setting (default 1024), as
        :func:`sklearn.metrics.pairwise_distances_chunked` does.

    Returns
    -------
    batch_size : int
        At least 1.

    Examples
    --------
    >>> import sklearn
    >>> with sklearn.config_context(working_memory=1):
    ...     default_batch_size(1024, itemsize=4)
    256
    """
    if working_memory is None:
        working_memory = get_config()["working_memory"]
    bytes_per_row = max(1, int(sum(floats_per_row)) * itemsize)
    return max(1, int(working_memory * 2**20 // bytes_per_row))


def iter_batches(n_rows: int, batch_size: int):
    """Yield ``slice`` objects that cover ``range(n_rows)`` in order."""
    for start in range(0, n_rows, batch_size):
        yield slice(start, min(start + batch_size, n_rows))


def apply_in_batches(fn, X, *, device, batch_size=None, n_outputs=None, out_dtype=np.float32,
                     dtype=None):
    """Apply the row-independent ``fn`` (tensor → tensor) to ``X`` batch by batch.

    ``X`` may be a numpy array or a tensor. Each batch is moved to ``device`` in ``dtype``
    (float32 unless told otherwise), processed and copied back into a preallocated numpy output of
    ``out_dtype``, so peak memory is bounded by the batch size whatever the number of rows.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    n_rows, n_features = X.shape
    if batch_size is None:
        # input and output of a batch, intermediate buffers counted twice
        itemsize = torch.finfo(dtype).bits // 8
        batch_size = default_batch_size(2 * (n_features + (n_outputs or n_features)),
                                        itemsize=itemsize)
    out = None
    for rows in iter_batches(n_rows, batch_size):
        res = fn(to_tensor(X[rows], device, dtype))
        if out is None:
            out = np.empty((n_rows,) + tuple(res.shape[1:]), dtype=out_dtype)
        # straight into the output rows: from a GPU, no intermediate host tensor to copy again
        torch.from_numpy(out[rows]).copy_(res.detach())
    if out is None:  # zero rows
        out = np.empty((0, n_outputs or 0), dtype=out_dtype)
    return out


def apply_in_batches_numpy(fn, X, *, batch_size=None, n_outputs=None, out_dtype=np.float32):
    """:func:`apply_in_batches` for a numpy ``fn`` (array → array): no torch involved.

    Each batch of ``X`` is cast to ``out_dtype`` (float64 stays float64, anything else becomes
    float32) and passed to ``fn``, so peak memory is bounded by the batch size as on the torch
    path. With ``n_outputs`` given and an ``fn`` that takes ``out``, ``fn(batch, out=rows)``
    writes each result straight into its rows of the preallocated output (no batch-sized
    temporary to allocate and copy again).
    """
    n_rows, n_features = X.shape
    if batch_size is None:
        batch_size = default_batch_size(n_features, n_outputs or n_features,
                                        np.dtype(out_dtype).itemsize)
    if 0 < n_rows <= batch_size:  # one batch: its result is the output, no second copy
        B = np.asarray(X, dtype=out_dtype)
        res = fn(B)
        if res.dtype != out_dtype or np.may_share_memory(res, B):  # never a view of the input
            res = res.astype(out_dtype)
        return res
    if n_outputs is not None and "out" in inspect.signature(fn).parameters:
        out = np.empty((n_rows, n_outputs), dtype=out_dtype)
        for rows in iter_batches(n_rows, batch_size):
            fn(np.asarray(X[rows], dtype=out_dtype), out=out[rows])
        return out
    out = None
    for rows in iter_batches(n_rows, batch_size):
        res = fn(np.asarray(X[rows], dtype=out_dtype))
        if out is None:
            out = np.empty((n_rows,) + res.shape[1:], dtype=out_dtype)
        out[rows] = res
    if out is None:  # zero rows
        out = np.empty((0, n_outputs or 0), dtype=out_dtype)
    return out


def _affine_parts(W, mean_in, mean_out, normalize_in, scale_out):
    r"""The map's parts with the output scale folded in: ``(m_in, sW, s·m_out, c)``, float64.

    :math:`s\,((c\,b / \lVert b \rVert - m_\text{in}) W + m_\text{out})
    = (b \cdot \tfrac{c}{\lVert b \rVert} - m_\text{in})(sW) + s\,m_\text{out}` for a row
    :math:`b`: the normalisation is one factor per row and the scale moves into the weights and
    the bias, so a batch costs two passes over its input and one matrix product (the numpy path
    folds the bias into the product as well, :func:`affine_numpy_fn`). The input is still
    centred before the product: folding :math:`m_\text{in} W` into the bias as well would
    subtract two large terms in float32 where the embeddings sit far from the origin.
    """
    W, mi, mo = (np.asarray(A, dtype=np.float64) for A in (W, mean_in, mean_out))
    s = 1.0 if scale_out is None else float(scale_out)
    return (mi if np.any(mi) else None), s * W, s * mo, normalize_in


def _row_factor(norms, c, tiny, big):
    """``c / max(norm, tiny)`` per row, capped at ``big`` so a zero row times it stays zero."""
    with np.errstate(over="ignore"):
        return np.minimum(c / np.maximum(norms, tiny), big)


def affine_fn(W, mean_in, mean_out, device, dtype=None, *, normalize_in=None, scale_out=None):
    """A batch function ``B ↦ s · ((n(B) − mean_in) W + mean_out)``, operands moved once.

    ``W``, ``mean_in`` and ``mean_out`` are the fitted numpy arrays; used by every aligner whose
    ``transform`` is an affine map. ``n`` L2-normalises each row and multiplies it by
    ``normalize_in`` when that is a number (zero rows stay zero, as in :func:`row_normalize`);
    ``s`` is ``scale_out`` (1 when ``None``), folded into the weights (see ``_affine_parts``).
    ``dtype`` (default float32) is the dtype of the batches it will be given.
    :func:`affine_numpy_fn` is the same map in numpy.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    mi, Ws, bias, c = _affine_parts(W, mean_in, mean_out, normalize_in, scale_out)
    Ws, bias = to_tensor(Ws, device, dtype), to_tensor(bias, device, dtype)
    mi = None if mi is None else to_tensor(mi, device, dtype)
    info = torch.finfo(dtype)

    def fn(B):
        if c is not None:
            norms = torch.linalg.vector_norm(B, dim=-1, keepdim=True)
            B = B * (float(c) / norms.clamp_min(info.tiny)).clamp_max(info.max)
            if mi is not None:
                B -= mi
        elif mi is not None:
            B = B - mi
        return torch.addmm(bias, B, Ws)

    return fn


def row_normalize_numpy(A):
    """:func:`row_normalize` for a numpy array, in its dtype."""
    norms = np.linalg.norm(A, axis=-1, keepdims=True)
    return A / np.maximum(norms, np.finfo(A.dtype).tiny)


#: Rows prepared at a time by :func:`affine_numpy_fn`: a chunk of the batch (normalised,
#: centred, summed) is still in the cache when the next pass reads it.
AFFINE_CHUNK_ROWS = 2048


def affine_numpy_fn(W, mean_in, mean_out, dtype=np.float32, *, normalize_in=None,
                    scale_out=None):
    r""":func:`affine_fn` in numpy, computing in ``dtype``: the CPU path of a fitted affine map
    applied to numpy rows, which therefore never imports torch.

    The function returned, ``fn(B, out=None)``, writes into ``out`` when given one. Its
    attribute ``fn.checked(B, out=None)`` returns ``(out, finite)`` as well, where ``True``
    proves every number of ``B`` *and of the output* finite, without a pass over either: the
    largest and smallest prepared numbers (normalised, centred) are taken chunk by chunk while
    the chunk is in the cache, and with :math:`m` the largest magnitude among them (and the
    bias's 1), every output number and every partial sum of the product is at most
    :math:`m \max_j \lVert W_{:,j} \rVert_1` (bias row included), a bound computed once.
    ``False`` means a NaN or infinity in ``B``, or an output that may overflow: an exact check
    of ``B`` and of the output then tells them apart (``skalign translate`` checks its batches
    this way; measured on 10^6 rows 384 → 768, 1.4 % of the map's time against 7 % for a sum
    over the output after the product).

    One product does the work, bias included: the rows are prepared in a working buffer of
    width :math:`d + 1` whose last column is 1, and the weights carry the bias as their last
    row, :math:`[\,n(B) - m_\text{in},\ 1\,] \begin{bmatrix} sW \\ s\,m_\text{out}
    \end{bmatrix}`. A separate ``out += bias`` is a pass over the output, twice as wide as the
    input on a 384 → 768 map, that a single thread makes while the product's threads wait. The
    rows are prepared :data:`AFFINE_CHUNK_ROWS` at a time. The buffer is kept between calls, so
    that a stream of batches does not allocate fresh pages for the kernel to zero each time;
    the function is therefore for one thread at a time, and ``transform`` builds one per call.
    """
    mi, Ws, bias, c = _affine_parts(W, mean_in, mean_out, normalize_in, scale_out)
    d = Ws.shape[0]
    mi = None if mi is None else mi.astype(dtype)
    weights = np.vstack([Ws, bias[None, :]]).astype(dtype)
    info = np.finfo(dtype)
    # prepared numbers of at most this magnitude give finite outputs (1 % left for rounding:
    # a partial sum of d + 1 products grows by at most (1 + eps)^(d + 1) over its exact bound)
    gain = float(np.abs(weights.astype(np.float64)).sum(axis=0).max(initial=0.0))
    limit = float(info.max) / 1.01 / max(gain, 1e-300)
    scratch = []  # the prepared batch and its column of ones, reused from batch to batch

    def work(B):
        if not scratch or scratch[0].shape[0] < len(B) or scratch[0].dtype != B.dtype:
            S = np.empty((len(B), d + 1), dtype=B.dtype)
            S[:, d] = 1
            scratch[:] = [S]
        return scratch[0][:len(B)]

    def run(B, out, check):
        S = work(B)
        top = bottom = B.dtype.type(0)
        for lo in range(0, len(B), AFFINE_CHUNK_ROWS):
            x, s = B[lo:lo + AFFINE_CHUNK_ROWS], S[lo:lo + AFFINE_CHUNK_ROWS, :d]
            if c is not None:
                norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
                np.multiply(x, _row_factor(norms, B.dtype.type(c), info.tiny, info.max), out=s)
                if mi is not None:
                    s -= mi
            elif mi is not None:
                np.subtract(x, mi, out=s)
            else:
                np.copyto(s, x)
            if check:  # the chunk is still in the cache; a NaN in it stays NaN
                with np.errstate(invalid="ignore"):
                    top = np.maximum(top, np.maximum.reduce(s, axis=None))
                    bottom = np.minimum(bottom, np.minimum.reduce(s, axis=None))
        out = np.matmul(S, weights, out=out)
        if not check:
            return out, None
        top, bottom = float(top), float(bottom)
        return out, bool(np.isfinite(top) and np.isfinite(bottom)
                         and max(top, -bottom, 1.0) < limit)

    def fn(B, out=None):
        return run(B, out, False)[0]

    fn.checked = lambda B, out=None: run(B, out, True)
    return fn


# ---------------------------------------------------------------------------------- numerics
def row_normalize(T: torch.Tensor) -> torch.Tensor:
    """L2-normalise the last axis; zero rows (missing or padded embeddings) stay zero.

    Used by every estimator and metric that works on the unit sphere, so they agree on the one
    edge case: the norm is clamped at the dtype's smallest normal number, never at a fixed
    epsilon that would leave small but valid rows short of unit norm.
    """
    import torch

    norms = torch.linalg.vector_norm(T, dim=-1, keepdim=True)
    return T / norms.clamp_min(torch.finfo(T.dtype).tiny)


def check_finite(value, *, what: str, hint: str):
    """Raise :class:`NumericalError` when a tensor or number is not finite.

    Parameters
    ----------
    value : tensor or float
    what : str
        What was being computed ("the loss at iteration 12", "the pseudo-inverse").
    hint : str
        The parameter change that usually helps, named explicitly.
    """
    if is_tensor(value):
        ok = bool(value.isfinite().all())
    else:
        ok = math.isfinite(value)
    if not ok:
        raise NumericalError(f"Non-finite values in {what}. {hint}")


# ------------------------------------------------------------------------------------ threads
#: the largest decomposition (``m * n * min(m, n)`` of an ``m × n`` matrix: about its flop count)
#: that :func:`small_lapack` runs on one CPU thread, a 256 × 256 one
SMALL_LAPACK = 2**24
#: the largest step (multiply-adds of its biggest dense operation: a product, a decomposition)
#: that :func:`work_threads` runs on one CPU thread: a 1,290 × 1,290 decomposition, a 2,000 ×
#: 1,000 by 1,000 × 1,000 product
ONE_THREAD_WORK = 2**31
_one_thread = threading.Lock()
_one_thread_depth = 0
_saved_threads = 1
_blas = []  # the threadpoolctl controller and its limit while one thread is in force


def _enter_one_thread(blas):
    global _one_thread_depth, _saved_threads
    import torch

    with _one_thread:
        if _one_thread_depth == 0:
            _saved_threads = torch.get_num_threads()
            if _saved_threads > 1:
                torch.set_num_threads(1)
        _one_thread_depth += 1
        if blas and len(_blas) < 2:  # numpy's BLAS too, restored when the last scope leaves
            from threadpoolctl import ThreadpoolController

            if not _blas:
                _blas.append(ThreadpoolController())
            _blas.append(_blas[0].limit(limits=1, user_api="blas"))


def _leave_one_thread():
    global _one_thread_depth
    import torch

    with _one_thread:
        _one_thread_depth -= 1
        if _one_thread_depth == 0:
            if len(_blas) == 2:
                _blas.pop().restore_original_limits()
            if _saved_threads > 1:
                torch.set_num_threads(_saved_threads)


@contextlib.contextmanager
def one_thread(*, blas=False):
    """Run the block on one CPU thread: torch's (``torch.set_num_threads``) and, with ``blas``,
    numpy's BLAS (threadpoolctl); the caller's settings are restored when it ends.

    Nested and concurrent uses (threads of one process, joblib's threading backend) share one
    count: the settings are restored when the last one leaves, never stuck at one thread.
    """
    _enter_one_thread(blas)
    try:
        yield
    finally:
        _leave_one_thread()


def work_threads(work, device="cpu"):
    r"""Threads chosen by the work: :func:`one_thread` (torch and BLAS) for a CPU step whose
    biggest dense operation is at most :data:`ONE_THREAD_WORK` multiply-adds, torch's setting
    above it and on other devices.

    **The rule.** A parallel operation synchronises its threads at least once, LAPACK many times
    per call, and a step of a fit (a loop of products, an IRP fit's factorisations, a Karcher
    iteration) many times over; while another job holds a core, every synchronisation waits for
    a time slice. Measured on two cores beside busy processes (load 4–12), at these sizes one
    thread was 3 to 10 times faster than two: an IRP fit on 1,000 anchors into 768 dimensions
    took 24–40 s on two threads and 3.4–3.8 s on one, a 768 × 768 ``eigh`` 5.8 s and 0.37 s.
    Without other jobs a second thread gains nothing on such decompositions (a 768 × 768
    ``eigh``: 123 ms on two threads, 110 ms on one) and at most half of a step that takes a
    fraction of a second; above the limit the products are large enough for a second thread to
    pay on an idle machine and to lose only its share of the cores on a busy one. ``python
    benchmarks/bench_busy.py`` times every default fit alone and beside a hog on every core.

    Parameters
    ----------
    work : int or float
        Multiply-adds of the step's biggest dense operation (``m · n · k`` for an ``m × n`` by
        ``n × k`` product, ``m · n · min(m, n)`` for a decomposition of an ``m × n`` matrix).
    device : str or torch.device, default="cpu"
    """
    if str(device).startswith("cpu") and work <= ONE_THREAD_WORK:
        return one_thread(blas=True)
    return contextlib.nullcontext()


@contextlib.contextmanager
def small_lapack(A: torch.Tensor):
    """Run a small CPU decomposition of ``A`` (SVD, eigh, solve) on one thread.

    LAPACK on two threads synchronises its threads many times per call; when another job holds
    a core, each synchronisation waits for a time slice, and small decompositions get several
    times slower (the soft self-learning's 128 × 128 SVD, once per iteration, beside one busy
    process; ``benchmarks/bench_small_lapack.py``, figures in the user guide's "Threads").
    Below :data:`SMALL_LAPACK` a second thread gains little on an idle machine; above it, the
    decomposition keeps the caller's setting (a fit that runs whole steps on one thread decides
    by :func:`work_threads`). Nested and concurrent uses (threads of one process) restore the
    caller's setting when the last one leaves.
    """
    with _decomposition_threads(A, SMALL_LAPACK):
        yield


def lapack_threads(A: torch.Tensor):
    """:func:`work_threads` for a decomposition of ``A`` (``m · n · min(m, n)``), torch's
    threads only (no BLAS controller: called inside loops)."""
    return _decomposition_threads(A, ONE_THREAD_WORK)


def _decomposition_threads(A, limit):
    """:func:`one_thread` (torch's) for a CPU decomposition of ``A`` of at most ``limit``
    multiply-adds (``m · n · min(m, n)``), the caller's setting otherwise."""
    m, n = A.shape[-2:]
    if A.device.type == "cpu" and m * n * min(m, n) <= limit:
        return one_thread()
    return contextlib.nullcontext()


def pinv_svd(A: torch.Tensor, rtol: float | None = None):
    """Moore–Penrose pseudo-inverse through an SVD in float64.

    Singular values below ``rtol * s_max`` are treated as zero (``rtol=None`` uses
    ``max(A.shape) * eps``, numpy's default). Unlike ``torch.linalg.lstsq`` this is correct on
    rank-deficient input on every device.

    Returns
    -------
    pinv : tensor of shape (n, m), float64
    singular_values : tensor, float64
    rank : int
    """
    import torch

    A64 = A.to(torch.float64)
    with lapack_threads(A):
        U, s, Vh = torch.linalg.svd(A64, full_matrices=False)
    if rtol is None:
        rtol = max(A.shape[-2:]) * torch.finfo(torch.float64).eps
    cutoff = rtol * s.max() if s.numel() else 0.0
    keep = s > cutoff
    s_inv = torch.where(keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    pinv = (Vh.mT * s_inv.unsqueeze(-2)) @ U.mT
    check_finite(pinv, what="the pseudo-inverse", hint="Increase rtol.")
    return pinv, s, int(keep.sum())


def ridge_svd(X: torch.Tensor, Y: torch.Tensor, alpha: float, rtol: float | None = None,
              gram=None):
    """Ridge / minimum-norm least-squares coefficients ``W`` minimising ‖XW − Y‖² + α‖W‖².

    For α > 0, in float64 through the Cholesky factor of the smaller regularised Gram matrix,
    ``(XᵀX + αI)⁻¹ XᵀY`` or ``Xᵀ (XXᵀ + αI)⁻¹ Y`` (scikit-learn's ``solver="cholesky"``, several
    times cheaper than an SVD of a tall or wide ``X``); for α = 0 and where that factor fails,
    through the SVD ``W = V diag(s / (s² + α)) Uᵀ Y``, dropping for α = 0 the singular values
    below ``rtol * s_max`` (the minimum-norm solution on rank-deficient ``X``). ``gram``: the
    float64 ``(XᵀX, XᵀY)`` of a tall ``X`` where already formed.
    """
    import torch

    X64, Y64 = X.to(torch.float64), Y.to(torch.float64)
    W = _ridge_cholesky(X64, Y64, alpha, gram) if alpha > 0 else None
    if W is None:
        with lapack_threads(X):
            U, s, Vh = torch.linalg.svd(X64, full_matrices=False)
        rtol = max(X.shape) * torch.finfo(torch.float64).eps if rtol is None else rtol
        keep = s > rtol * (s.max() if s.numel() else 0.0)
        d = s / (s * s + alpha) if alpha > 0 else torch.where(
            keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
        W = Vh.mT @ (d.unsqueeze(-1) * (U.mT @ Y64))
    check_finite(W, what="the least-squares solution", hint="Increase alpha.")
    return W


def _ridge_cholesky(X64, Y64, alpha, given=None):
    """:func:`ridge_svd` by Cholesky; ``None`` where the Gram matrix has no factor."""
    import torch

    tall = X64.shape[0] >= X64.shape[1]
    gram = given[0].clone() if given is not None else X64.mT @ X64 if tall else X64 @ X64.mT
    gram.diagonal().add_(alpha)
    with small_lapack(gram):
        L, info = torch.linalg.cholesky_ex(gram)
        if int(info) != 0:
            return None
        if tall:
            return torch.cholesky_solve(X64.mT @ Y64 if given is None else given[1], L)
        return X64.mT @ torch.cholesky_solve(Y64, L)


def polar(M: torch.Tensor) -> torch.Tensor:
    """Nearest matrix with orthonormal columns (or rows) to ``M``: ``U Vᵀ`` from its thin SVD.

    Computed in float64. For square ``M`` the result is orthogonal (reflections allowed).
    """
    import torch

    with lapack_threads(M):
        U, _, Vh = torch.linalg.svd(M.to(torch.float64), full_matrices=False)
    return U @ Vh

