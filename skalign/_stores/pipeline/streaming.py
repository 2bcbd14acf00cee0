"""The translation's inner loop: each batch translated (``model.transform``, or the affine map
straight into reused buffers), its input and its output checked finite, then written behind in a
thread while the next one is read and translated."""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

from ...exceptions import StoreError
from ..base import ENCODE_DEPTH
from ..files.direct_io import aligned_empty

__all__ = ["BatchTranslator", "WriteBehind", "blas_threads_beside"]

class WriteBehind:
    """Write each batch in a background thread while the next one is read and translated.

    The engines' writes — a file write or fsync, a Parquet or Lance encoder, a PostgreSQL
    ``COPY`` waiting on the server, Chroma's store — release the GIL, so on two cores the
    translation and the write overlap instead of adding up. Writes run one at a time and in
    order, so the commits (made inside the writes) are exactly those of a plain loop; one extra
    batch is held in memory (``ENCODE_DEPTH`` where batches are encoded ahead). A writer with an
    ``encode_unit`` (bytes from a batch, no side effect) has up to ``ENCODE_DEPTH`` batches
    encoded in parallel ahead of their writes, which still run in order; once a write fails
    none after it runs. Writers whose writes hold the GIL (Qdrant's local mode: Python all the
    way to SQLite), which a thread would not overlap, say ``pipelined = False`` and are called
    inline (encoded first where they encode).
    """

    def __init__(self, write, enabled, encode=None, depth=ENCODE_DEPTH):
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.write, self.encode, self.pending, self.broken = write, encode, deque(), False
        self.depth = depth if enabled and encode is not None else 1
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="skalign-write") if enabled \
            else None
        self.encoders = ThreadPoolExecutor(self.depth, thread_name_prefix="skalign-encode") \
            if enabled and encode is not None else None

    def submit(self, out, *rest):
        if self.pool is None:
            self.write(out if self.encode is None else self.encode(out, *rest), *rest)
            return
        while len(self.pending) >= self.depth:
            self.pending.popleft().result()
        if self.encoders is None:
            self.pending.append(self.pool.submit(self._write, None, out, *rest))
        else:
            encoded = self.encoders.submit(self.encode, out, *rest)
            self.pending.append(self.pool.submit(self._write, encoded, out, *rest))

    def _write(self, encoded, out, *rest):
        if self.broken:  # an earlier batch was not written: a later one must not be either
            raise StoreError("internal error: a batch after a failed write")
        try:
            return self.write(out if encoded is None else encoded.result(), *rest)
        except BaseException:
            self.broken = True
            raise

    def busy_threads(self, writer):
        """The threads that keep a core busy beside the translation: the encoders, or the
        writer's own count (``busy_threads``; by default one where it writes behind, since its
        engine works while it writes, and none where the writes are inline)."""
        if self.encoders is not None:
            return self.depth
        if writer.busy_threads is not None:
            return writer.busy_threads
        return 0 if self.pool is None else 1

    def wait(self):
        """Wait for the writes in flight; the first one's exception, if any, is raised here."""
        while self.pending:
            self.pending.popleft().result()

    def close(self):
        """Let the writes in flight end (their errors are moot: another one is on its way
        up)."""
        while self.pending:
            self.pending.popleft().exception()
        for pool in (self.pool, self.encoders):
            if pool is not None:
                pool.shutdown(wait=True)
        self.pool = self.encoders = None


@contextmanager
def blas_threads_beside(busy):
    """Cap the BLAS threads of the products at the cores the ``busy`` write threads leave.

    An OpenBLAS thread that has done its share of a product spins for its next one, taking a
    core from the encoders: on two cores a million rows into a single Parquet file took 27.6
    CPU seconds with two BLAS threads and 21.2 with one (``5ae3bf6:benchmarks/profile_stores.py``
    under ``OPENBLAS_NUM_THREADS``), 14.9 s of wall time against 11.9 s. Where the writes
    leave the cores free (direct I/O) the product keeps them all.
    """
    if busy <= 0:
        yield
        return
    from threadpoolctl import threadpool_info, threadpool_limits

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    now = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"),
              default=1)
    if now <= max(1, cores - busy):
        yield
        return
    with threadpool_limits(limits=max(1, cores - busy), user_api="blas"):
        yield


def _first_bad_row(a, exact=False):
    """The first row of ``a`` holding a NaN or infinity (``None``: none). The sum is finite
    when every number is (one pass, no boolean array); an overflowing sum of finite numbers
    only costs the exact pass, which ``exact`` asks for at once."""
    with np.errstate(over="ignore", invalid="ignore"):
        if not exact and np.isfinite(np.add.reduce(a, axis=None)):
            return None
        bad = ~np.isfinite(a).all(axis=1)
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


class BatchTranslator:
    """``model.transform`` of each streamed batch as float32, after checking it holds numbers
    only; the translation is checked too (finite numbers can overflow float32 under a map with
    large weights), and a batch that is not finite raises :class:`StoreError` before it is
    written.

    A CPU affine map (``ProcrustesAligner``, ``LinearAligner``) applied to float32 batches
    writes into ``n_buffers`` output buffers used in turn (the batches still being written
    behind keep theirs while the next batch is translated into another) instead of fresh
    arrays, which would be new pages for the kernel to zero first, batch after batch. The
    buffers start at a block boundary, so that direct writes take them as they are
    (:meth:`skalign._stores.files.direct_io.SequentialWriter.write`). A writer
    must therefore be done with a batch when its ``write_unit`` returns (every writer copies or
    encodes it). The product is the same as ``model.transform``'s, so are the results.
    """

    def __init__(self, model, where, n_buffers=2):
        from ...base import BaseAligner

        self.model, self.where, self.fn, self.buffers = model, where, None, []
        self.n_buffers = n_buffers
        direct = (type(model).transform is BaseAligner.transform
                  and hasattr(model, "_transform_numpy_fn")
                  and not model._needs_nonzero_rows()
                  and str(getattr(model, "device_", "cpu")).startswith("cpu"))
        if direct:
            self.fn = model._transform_numpy_fn(dtype=np.float32)

    def _check_finite(self, vectors, start, exact=False):
        """Raise the store's error at the first row with a NaN or infinity."""
        bad = _first_bad_row(vectors, exact)
        if bad is not None:
            raise StoreError(f"{self.where}: row {start + bad} has NaN or infinite numbers; "
                             "drop or re-embed those rows first.")

    def _check_output(self, out, start, exact=False):
        """Raise the store's error at the first row the model maps to a NaN or infinity (its
        input is finite: checked before; ``exact``: the affine map's bound could not prove
        the batch finite)."""
        bad = _first_bad_row(out, exact)
        if bad is not None:
            raise StoreError(
                f"{self.where}: the model maps row {start + bad} to infinite numbers (or NaN): "
                "its input is finite but the translation overflows float32; check the model "
                "(weights that large are a failed fit) or scale the input down. Nothing was "
                "written.")

    def _buffer(self, n, d_out):
        if len(self.buffers) < self.n_buffers or self.buffers[0].shape[0] < n:
            self.buffers = [aligned_empty((n, d_out), np.float32) for _ in range(self.n_buffers)]
        self.buffers.append(self.buffers.pop(0))
        return self.buffers[-1][:n]

    def __call__(self, vectors, start):
        if self.fn is not None and vectors.dtype == np.float32 and vectors.ndim == 2:
            # the affine map bounds its input and output chunk by chunk as it centres the
            # batch: no pass of its own for the checks. A NaN or infinity raises below: numpy's
            # warnings are not wanted.
            out = self._buffer(len(vectors), self.model.n_features_out_)
            with np.errstate(over="ignore", invalid="ignore"):
                out, finite = self.fn.checked(vectors, out=out)
            if not finite:  # a NaN or infinity, or numbers too large for the bound
                self._check_finite(vectors, start, exact=True)
                self._check_output(out, start, exact=True)
            return out
        self._check_finite(vectors, start)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                res = np.asarray(self.model.transform(vectors), dtype=np.float32)
        except ValueError as exc:
            msg = " ".join(str(exc).split())
            raise StoreError(f"{self.where}: rows {start}-{start + len(vectors) - 1}: {msg}") \
                from None
        self._check_output(res, start)
        return res


