"""The encoder pass of ``skalign migrate`` on a dask cluster: the client side."""

from __future__ import annotations

import itertools
import os

import numpy as np

from ..encoders import Encoder
from ..encoders._grouping import LOOKUP_ROWS, cache_hits, length_batches
from ..exceptions import StoreError
from ._partition import encode_partition
from ._worker import describe_encoder

__all__ = ["ClusterEncoder", "cut_partitions"]


def cut_partitions(texts, batch_size, size):
    """The partitions of a pass: whole batches of texts grouped by length, about ``size`` rows.

    The batches are those one process forms of the same texts
    (``length_batches``), so the workers' vectors are the
    single-process run's bit for bit.

    Parameters
    ----------
    texts : list of str
    batch_size : int
        Distinct texts per batch.
    size : int
        Rows per partition wished; rounded to whole batches (at least one).

    Returns
    -------
    order : ndarray of int
        The rows in the order the partitions hold them.
    ends : dict
        Each partition's first position in ``order`` -> its end.
    """
    batches = length_batches(texts, batch_size)
    if not batches:
        return np.empty(0, dtype=np.intp), {}
    per = max(1, round(size / batch_size))
    starts = np.cumsum([0] + [len(b) for b in batches])[:-1][::per].tolist()
    return np.concatenate(batches), dict(zip(starts, starts[1:] + [len(texts)]))


class ClusterEncoder:
    """The encoder pass of ``skalign migrate`` on a dask cluster.

    What ``--workers N`` and ``--scheduler ADDRESS`` run.

    Rows are cut into partitions and each partition is one task of :func:`encode_partition` on
    a worker; each worker loads the encoder once. A worker that dies (killed, out of memory)
    has its tasks run again on another by the scheduler; with an output to write, the
    partition run again skips the rows the killed run wrote (they are marked encoded), so no
    text is encoded twice. The cluster is started at the first pass, not before.

    Parameters
    ----------
    encoder : str, path or Encoder
        An encoder spec, loaded on every worker (a model folder every worker can read,
        ``module:callable`` importable there), or an encoder object, sent to every worker once.
    scheduler : str, distributed.Client, cluster or None, default=None
        The scheduler's address (``"tcp://host:8786"``), a client, a cluster object or
        ``None`` for the current client.
    workers : int, default=None
        Start a local cluster of this many worker processes, one thread each, instead.
    device : str, default="auto"
        As :func:`encode_partition` takes it.
    batch_size : int, default=64
        As :func:`encode_partition` takes it.
    normalize : {"auto", "yes", "no"}, bool or None, default=None
        As :func:`encode_partition` takes it.
    cache : str, path or bool, default=None
        As :func:`encode_partition` takes it.
    partition_rows : int, default=None
        Rows per task, rounded to whole batches (a task is whole batches of texts grouped by
        length, the batches one process forms); ``None``: a quarter of the rows per worker, at
        most ``16 * batch_size`` (small tasks balance the load and lose less to a dead worker).
    precision : {"full", "half"}, default="full"
        As :func:`encode_partition` takes it.

    Attributes
    ----------
    n_encoded : int
        Texts the workers' encoders ran on (read from an encode cache excluded; with
        :meth:`encode_step`, rows a partition's killed run wrote included).
    """

    def __init__(self, encoder, *, scheduler=None, workers=None, device="auto", batch_size=64,
                 normalize=None, cache=None, partition_rows=None, precision="full"):
        if scheduler is not None and workers is not None:
            raise ValueError("give a scheduler or a number of local workers, not both")
        for name, value in (("workers", workers), ("partition_rows", partition_rows),
                            ("batch_size", batch_size)):
            if value is not None and (isinstance(value, bool) or int(value) < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.encoder, self.scheduler, self.workers = encoder, scheduler, workers
        self.options = {"device": device, "batch_size": int(batch_size),
                        "normalize": normalize,
                        "cache": cache if cache in (None, True) else str(cache),
                        "precision": precision}
        self.partition_rows = partition_rows
        self.n_encoded = 0
        self._client = self._cluster = self._ref = None
        self._owned = False

    # ---------------------------------------------------------------------- the cluster
    def _start(self):
        if self._client is not None:
            return self._client
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - depends on the installation
            raise StoreError("--workers and --scheduler need dask and distributed; pip install "
                             "'skalign[stores]'.") from None
        if self.workers is not None:
            self._cluster = LocalCluster(n_workers=int(self.workers), threads_per_worker=1,
                                         processes=True, dashboard_address=None)
            self._client, self._owned = Client(self._cluster), True
            self._client.wait_for_workers(int(self.workers), timeout="60s")
        elif isinstance(self.scheduler, Client):
            self._client = self.scheduler
        elif self.scheduler is None:
            try:
                self._client = Client.current()
            except ValueError:
                raise StoreError("no dask client is running: give a scheduler's address "
                                 "(--scheduler) or a number of local workers (--workers)") \
                    from None
        else:
            try:
                self._client, self._owned = Client(self.scheduler, timeout="30s"), True
            except OSError as exc:
                raise StoreError(f"cannot reach the dask scheduler {self.scheduler!r}: "
                                 f"{exc}") from None
        self._scatter()
        return self._client

    def _scatter(self):
        """Send an encoder object once per worker, not with every task (a spec is loaded by
        each worker itself)."""
        if not isinstance(self.encoder, (str, os.PathLike)):
            self._ref = self._client.scatter(self.encoder, broadcast=True, hash=False)

    def worker_encoder(self):
        """The encoder as the process that sends the tasks sees it, loaded on a worker only.

        What ``skalign migrate --workers/--scheduler`` runs with: the fingerprint, name and
        normalisation come from a worker's encoder (loaded there once and kept for the
        tasks), so this process never loads the model (nor takes a GPU); texts given to its
        ``encode`` are encoded on the cluster.

        Returns
        -------
        Encoder
            With the workers' ``fingerprint``, ``name``, ``batch_size``, ``normalize`` and
            ``unit_vectors``.

        Raises
        ------
        EncoderError
            As the worker loading the encoder raised it.
        """
        client = self._start()
        encoder = self._ref if self._ref is not None else self.encoder
        info = client.submit(describe_encoder, encoder, pure=False, **self.options).result()
        return _OnWorkers(self, info)

    def close(self):
        """Close the client and the local cluster this object started."""
        if self._owned and self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = self._ref = None
        self._owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _batch_size(self):
        """Texts per encoder call on the workers: an encoder object's own, else the option."""
        if not isinstance(self.encoder, (str, os.PathLike)):
            own = getattr(self.encoder, "batch_size", None)
            if own:
                return max(1, int(own))
        return self.options["batch_size"]

    def _n_workers(self, client):
        return max(1, len(client.scheduler_info().get("workers", {})) or (self.workers or 1))

    # ---------------------------------------------------------------------- the passes
    def encode(self, ids, texts, *, fingerprint=None, output=None, expected=None,
               text_field=None, column=None, provenance_key=None):
        """Encode ``texts`` (the rows ``ids``) on the cluster.

        :func:`encode_partition` runs on every partition; the results come in the order given.

        Parameters
        ----------
        ids : sequence
            The rows' ids in ``output``.
        texts : sequence of str
            Their texts.
        fingerprint : str, default=None
            The encoder fingerprint every worker must have (:func:`encode_partition`).
        output : str or Address, default=None
            The store the workers write into; ``None`` returns the vectors.
        expected : sequence of (str or None), default=None
            Each row's provenance read before (compare-and-set); ``None``: as each partition
            finds it.
        text_field : str, default=None
            As :func:`encode_partition` takes it.
        column : str, default=None
            As :func:`encode_partition` takes it.
        provenance_key : str, default=None
            As :func:`encode_partition` takes it.

        Returns
        -------
        pandas.DataFrame
            ``id``, ``status``, ``vector`` (see :func:`encode_partition`).
        """
        import pandas as pd

        ids = list(ids)
        if not ids:
            return pd.DataFrame({"id": [], "status": [], "vector": []})
        rows, parts = [], []
        for where, part in self._partitions(
                ids, texts, fingerprint=fingerprint, output=output, expected=expected,
                text_field=text_field, column=column, provenance_key=provenance_key):
            rows.append(where)
            parts.append(part)
        order = np.concatenate(rows)
        back = np.empty(len(order), dtype=np.intp)
        back[order] = np.arange(len(order))
        return pd.concat(parts, ignore_index=True).iloc[back].reset_index(drop=True)

    def _partitions(self, ids, texts, *, expected=None, **options):
        """Run :func:`encode_partition` on the partitions of the rows ``ids`` (their
        ``texts``) and yield ``(rows, result)`` for each as it completes: ``rows`` the
        positions in ``ids`` of its result's rows. Only a window of partitions is in flight
        and each result is handed on as it comes, so this process holds a few partitions'
        vectors, not the pass's. ``options``: as :meth:`encode` takes them."""
        import uuid
        from concurrent.futures import CancelledError

        import pandas as pd
        from distributed import as_completed

        ids, texts = list(ids), list(texts)
        client = self._start()
        size = self.partition_rows or min(16 * self.options["batch_size"], max(
            1, -(-len(ids) // (4 * self._n_workers(client)))))
        order, ends = cut_partitions(texts, self._batch_size(), size)
        frame = pd.DataFrame({"id": pd.Series([ids[i] for i in order], dtype=object),
                              "text": [texts[i] for i in order]})
        if expected is not None:
            expected = list(expected)
            frame["expected"] = pd.Series([expected[i] for i in order], dtype=object)
        session = uuid.uuid4().hex if options.get("output") is not None else None

        def submit(lo):
            encoder = self._ref if self._ref is not None else self.encoder
            return client.submit(
                encode_partition, frame.iloc[lo:ends[lo]].reset_index(drop=True), encoder,
                session=session, pure=False, **options, **self.options)

        # a window of tasks in flight, a few per worker: the scheduler and this process hold
        # that many partitions' texts, not the whole pass's
        starts = iter(ends)
        window = 4 * self._n_workers(client)
        futures = {submit(lo): lo for lo in itertools.islice(starts, window)}
        pending, again = as_completed(futures), {}
        try:
            for future in pending:
                lo = futures.pop(future)
                try:
                    part = future.result()
                except CancelledError:
                    # its result was lost with a worker the scheduler then forgot it on: the
                    # partition runs again (what the lost run wrote is skipped)
                    again[lo] = again.get(lo, 0) + 1
                    if again[lo] > 3:
                        raise
                    if self._ref is not None and self._ref.status != "finished":
                        # the scattered encoder was lost with every worker that held it
                        # (a task then fails for "lost dependencies"): send it again
                        self._scatter()
                    starts = itertools.chain([lo], starts)
                else:
                    self.n_encoded += int(part.status.isin(
                        ("encoded", "written", "changed")).sum())
                    yield order[lo:ends[lo]], part
                future.release()
                for lo in itertools.islice(starts, 1):
                    nxt = submit(lo)
                    futures[nxt] = lo
                    pending.add(nxt)
        finally:
            for future in futures:
                future.cancel()

    def encode_step(self, step, ids, texts, write, into=None):
        """The new vectors of some rows of a step of ``skalign migrate``.

        Encoded on the cluster and, with ``write``, written into the step's output (marked
        encoded, by compare-and-set against the provenance the step read; not a step into a
        field of its source, which writes them itself). Texts the step's encode cache holds
        are read from it, and those encoded here are added to it.

        Parameters
        ----------
        step : Migration
            The step (``skalign migrate``'s, opened and running).
        ids : list
            The rows to encode.
        texts : list of str
            Their texts.
        write : bool
            Whether the workers write the rows into the step's output.
        into : callable, default=None
            ``into(rows, V)`` is given the vectors ``V`` of the rows at positions ``rows`` of
            ``ids`` as they come (a partition's, or a chunk of those read from the encode
            cache), and none are returned: this process then holds a few partitions' vectors
            at a time, not the step's. ``None``: they are returned.

        Returns
        -------
        in_output : ndarray of bool
            The rows the output now holds encoded (written by the workers, or found there);
            ``into`` is given the others.
        vectors : ndarray of shape (len(ids), dim), float32, or None
            Without ``into``, the other rows' new vectors (the rows ``in_output`` are zero:
            read them back).
        """
        from .._migrate.scan import positions_of
        from ..encoders import text_digest as cache_digest

        ids, texts = list(ids), list(texts)
        cache = getattr(step.enc, "cache", None)
        parts, keep = [], into is None
        if keep:
            def into(rows, V):
                parts.append((rows, V))
        # the texts the step's own encode cache holds are read from it, as on one machine
        hit = cache_hits(step.enc, texts)
        for lo in range(0, int(hit.sum()), LOOKUP_ROWS):
            rows = np.flatnonzero(hit)[lo:lo + LOOKUP_ROWS]
            into(rows, step.enc.encode([texts[i] for i in rows]))
        go = np.flatnonzero(~hit)
        # a step into a field of its source writes through that field's own store: the
        # workers return the vectors and the step writes them, as on one machine
        write = write and not getattr(step, "in_place", False)
        expected = None
        if write:
            at = positions_of(step.rows.ids, [ids[i] for i in go])
            expected = [step.rows.provenance[i] for i in at.tolist()]
        in_output = np.zeros(len(ids), dtype=bool)
        for rows, out in self._partitions(
                [ids[i] for i in go], [texts[i] for i in go], fingerprint=step.enc.fingerprint,
                output=step.out if write else None, expected=expected,
                text_field=step.text_field, column=step.column,
                provenance_key=step.provenance_key) if len(go) else ():
            rows = go[rows]
            in_output[rows] = out.status.isin(("written", "held")).to_numpy()
            if write:
                # rows the step's scan found not encoded that the output holds encoded now
                # were written by this pass (a run of their partition whose worker then died)
                self.n_encoded += int((out.status == "held").sum())
            got = rows[out.vector.notna().to_numpy()]
            if len(got):
                V = np.stack([np.asarray(v, dtype=np.float32) for v in out.vector
                              if v is not None])
                if cache is not None:  # kept for the next runs, as on one machine
                    cache.put(step.enc.fingerprint, [cache_digest(texts[i]) for i in got], V)
                into(got, V)
        if not keep:
            return in_output, None
        vectors = np.zeros((len(ids), parts[0][1].shape[1] if parts else 0), dtype=np.float32)
        for rows, V in parts:
            vectors[rows] = V
        return in_output, vectors


class _OnWorkers(Encoder):
    """An encoder whose model runs on a cluster's workers: :meth:`ClusterEncoder.worker_encoder`.

    Parameters
    ----------
    pool : ClusterEncoder
        The cluster its texts are encoded on.
    info : dict
        What a worker's encoder said of itself (``describe_encoder``).
    """

    def __init__(self, pool, info):
        self.pool = pool
        for name, value in info.items():
            setattr(self, name, value)

    def encode(self, texts):
        """Embed texts on the cluster (see :meth:`Encoder.encode`)."""
        texts = list(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        out = self.pool.encode(range(len(texts)), texts, fingerprint=self.fingerprint)
        return np.stack([np.asarray(v, dtype=np.float32) for v in out.vector])
