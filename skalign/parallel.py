"""Scale out on a dask distributed cluster: translate Parquet shards, run grid searches, encode.

Nothing here is needed on one machine (:func:`skalign.io.translate` streams any store in
bounded memory) — and importing this module does not import dask; only calling its functions does.

* :func:`translate_parquet` reads a Parquet file or folder of shards with
  :func:`dask.dataframe.read_parquet`, translates every partition with ``map_partitions`` (the
  fitted estimator — numpy arrays only — is scattered to every worker once, not shipped with each
  task) and writes the result with ``to_parquet``. Ids and all other columns are kept; the
  vector column becomes float32 fixed-size lists, exactly as in the local path. An existing
  output is refused, never replaced.
* :func:`cluster_backend` runs the joblib work of scikit-learn (``GridSearchCV(..., n_jobs=-1)``,
  ``cross_validate``) on the cluster through joblib's ``"dask"`` backend.
* :func:`encode_partition` encodes one partition of rows (a table of ids and texts) and writes
  the vectors into a store, marked, by compare-and-set: a plain function that dask, Spark
  (``mapInPandas``) and Ray (``map_batches``) map over partitions alike.
  :class:`ClusterEncoder` runs it on a dask cluster: the encoder pass of ``skalign migrate
  --workers N`` / ``--scheduler ADDRESS``.

Examples
--------
Start a scheduler and workers (``dask scheduler``, ``dask worker tcp://host:8786``), then::

    skalign translate model.skops shards/ translated/ --scheduler tcp://host:8786

or from Python::

    from sklearn.model_selection import GridSearchCV
    from skalign import LinearAligner
    from skalign.parallel import cluster_backend, translate_parquet

    translate_parquet("model.skops", "shards/", "translated/", scheduler="tcp://host:8786")
    with cluster_backend("tcp://host:8786"):
        GridSearchCV(LinearAligner(), {"alpha": [0, 0.1, 1]}, n_jobs=-1).fit(A, B)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .exceptions import StoreError

__all__ = ["ClusterEncoder", "cluster_backend", "encode_partition", "translate_parquet"]


def _import_dask():
    try:
        import dask.dataframe as dd
        from distributed import Client
    except ImportError:  # pragma: no cover - depends on the installation
        raise StoreError(
            "--scheduler needs dask and distributed; pip install 'skalign[stores]'."
        ) from None
    return dd, Client


@contextmanager
def _client(scheduler):
    """A :class:`distributed.Client` for an address (closed on exit) or the given client."""
    _, Client = _import_dask()
    if scheduler is None or isinstance(scheduler, str):
        client = Client(scheduler) if scheduler else Client.current()
        owned = bool(scheduler)
    elif isinstance(scheduler, Client):
        client, owned = scheduler, False
    else:  # a LocalCluster or another cluster object
        client, owned = Client(scheduler), True
    try:
        yield client
    finally:
        if owned:
            client.close()


def _translate_partition(df, model, column, dim_out, batch_size):
    """Replace ``df[column]`` by its translation (float32 fixed-size lists of ``dim_out``)."""
    import pandas as pd
    import pyarrow as pa

    from ._stores.files.arrow import arrow_vectors
    from .utils._backend import iter_batches

    arr = pa.chunked_array(pa.array(df[column].array)) if len(df) else None
    out = np.empty((len(df), dim_out), dtype=np.float32)
    if arr is not None:
        X = arrow_vectors(pa, arr, model.n_features_in_, f"partition of {column!r}", column)
        for rows in iter_batches(len(X), batch_size):
            out[rows] = model.transform(X[rows])
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(out.reshape(-1)), dim_out)
    df = df.copy()
    df[column] = pd.Series(pd.arrays.ArrowExtensionArray(vectors), index=df.index)
    return df


def translate_parquet(model, src, dst, *, scheduler=None, column=None, batch_size=None):
    """Translate a Parquet file or folder of shards on a dask distributed cluster.

    Parameters
    ----------
    model : fitted skalign estimator, or str or path-like
        An estimator or a model file saved by :func:`skalign.io.save`.
    src : str or path-like
        A Parquet file or a folder of Parquet shards, readable by every worker.
    dst : str or path-like
        Output folder of Parquet shards (``part.N.parquet``, one per input partition), written
        to a temporary folder next to it by the workers and renamed at the end. An existing
        ``dst`` is refused (:class:`~skalign.exceptions.StoreExistsError`); nothing is
        replaced.
    scheduler : str, distributed.Client, cluster or None, default=None
        The scheduler's address (``"tcp://host:8786"``), a client, a cluster object such as
        :class:`distributed.LocalCluster`, or ``None`` for the current client.
    column : str, default=None
        The vector column; ``None`` picks it as :func:`skalign.io.translate` does.
    batch_size : int, default=None
        Rows per ``transform`` call inside a partition.

    Returns
    -------
    n_rows : int
        Number of rows translated.
    """
    import pandas as pd
    import pyarrow as pa

    from ._stores.files.arrow import output_schema
    from ._stores.files.shadow import atomic_file
    from ._stores.pipeline.translate import prepare_translation
    from ._stores.provenance import make_stamp, write_stamp
    from ._stores.registry import engine
    from .io import load

    if isinstance(model, (str, Path)):
        model = load(model)
    # format, column, output folder and width checked up front, as for a local translation
    job = prepare_translation(model, src, dst, column=column, batch_size=batch_size)
    if not engine(job.src).dask_reads:
        raise StoreError(f"{job.src}: --scheduler translates Parquet files or folders of shards "
                         "only; convert the input first or drop --scheduler.")
    if not engine(job.dst).dask_writes:
        raise StoreError(f"{job.dst}: with --scheduler the output is a folder of Parquet shards; "
                         "give a path without a suffix.")
    reader, d_out = job.reader, job.d_out
    dd, _ = _import_dask()
    with _client(scheduler) as client, atomic_file(job.dst.path) as tmp:
        ddf = dd.read_parquet(str(job.src.path), dtype_backend="pyarrow")
        meta = ddf._meta.copy()
        meta[reader.column] = pd.Series(
            [], dtype=pd.ArrowDtype(pa.list_(pa.float32(), d_out)), index=meta.index
        )
        state = client.scatter(model, broadcast=True)  # the numpy state, once per worker
        out = ddf.map_partitions(_translate_partition, state, reader.column, d_out,
                                 job.batch_size, meta=meta)
        # the local path's schema exactly (dask would widen strings to large_string)
        schema = output_schema(pa, reader, reader.column, d_out)
        out.to_parquet(str(tmp), write_index=False, schema=schema, compute=True)
    write_stamp(job.dst, make_stamp(job.model_fp, job.src, reader.n_rows, job.d_in, d_out))
    return reader.n_rows


@contextmanager
def cluster_backend(scheduler=None):
    """Run joblib-parallel work (``GridSearchCV(n_jobs=...)``) on a dask cluster.

    Parameters
    ----------
    scheduler : str, distributed.Client, cluster or None, default=None
        As in :func:`translate_parquet`.

    Yields
    ------
    client : distributed.Client
    """
    import joblib

    with _client(scheduler) as client:
        with client.as_current(), joblib.parallel_config(backend="dask"):
            yield client


# ----------------------------------------------------------------------------- the encoder pass
#: what :func:`encode_partition` says of each row
STATUSES = ("encoded", "cached", "written", "held", "changed")

#: per worker process: encoders loaded from a spec, outputs open for one pass
_WORKER = {"encoders": {}, "stores": {}}
_WORKER_LOCK = threading.Lock()


def _worker_encoder(encoder, device, batch_size, normalize, cache):
    """The encoder of a spec, loaded once per process (and per cache file); an encoder object
    as it is (in a :class:`~skalign.encoders.CachedEncoder` with ``cache``)."""
    from .encoders import CachedEncoder, EncodeCache, load_encoder

    if isinstance(encoder, CachedEncoder) and cache is None:
        return encoder
    spec = isinstance(encoder, (str, os.PathLike))
    key = (os.fspath(encoder) if spec else id(encoder), device, batch_size, normalize,
           None if cache is None else str(cache))
    with _WORKER_LOCK:
        found = _WORKER["encoders"].get(key)
        if found is None or (not spec and found[0] is not encoder):
            enc = load_encoder(encoder, device=device, batch_size=batch_size,
                               normalize=normalize)
            if cache is not None:
                enc = CachedEncoder(enc, cache=EncodeCache(None if cache is True else cache))
            found = _WORKER["encoders"][key] = (encoder, enc)
        return found[1]


@contextmanager
def _worker_output(output, column, text_field, provenance_key, session):
    """The live output store: kept open in this process for the pass ``session`` (the
    stores of other passes closed), or opened for this call only (``session=None``)."""
    from ._stores import open_live

    def open_():
        return open_live(output, column=column, text_field=text_field,
                         provenance_key=provenance_key)

    if session is None:
        with open_() as store:
            yield store
        return
    key = (session, repr(output), column, text_field, provenance_key)
    with _WORKER_LOCK:
        for other in [k for k in _WORKER["stores"] if k[0] != session]:
            _WORKER["stores"].pop(other).close()
        store = _WORKER["stores"].get(key)
        if store is None:
            store = _WORKER["stores"][key] = open_()
    yield store


def _table_columns(table):
    """``(kind, ids, texts, expected)`` of a pandas DataFrame or an Arrow table or batch."""
    if hasattr(table, "column_names"):  # pyarrow.Table / RecordBatch
        names, kind = list(table.column_names), "arrow"
        get = lambda name: table.column(name).to_pylist()  # noqa: E731
    elif hasattr(table, "columns") and hasattr(table, "iloc"):
        names, kind = list(table.columns), "pandas"
        get = lambda name: table[name].tolist()  # noqa: E731
    else:
        raise TypeError(f"encode_partition takes a pandas DataFrame or a pyarrow Table, got "
                        f"{type(table).__name__}")
    missing = [c for c in ("id", "text") if c not in names]
    if missing:
        raise ValueError(f"encode_partition: the table has no column {missing[0]!r} (it needs "
                         f"'id' and 'text', optionally 'expected'; it has {names[:8]})")
    return kind, get("id"), get("text"), get("expected") if "expected" in names else None


def _result_table(kind, ids, status, vectors):
    if kind == "arrow":
        import pyarrow as pa

        return pa.table({"id": ids, "status": pa.array(status, pa.string()),
                         "vector": pa.array([None if v is None else v.tolist()
                                             for v in vectors], pa.list_(pa.float32()))})
    import pandas as pd

    return pd.DataFrame({"id": pd.Series(ids, dtype=object), "status": status,
                         "vector": pd.Series(vectors, dtype=object)})


def encode_partition(table, encoder, *, output=None, text_field=None, column=None,
                     provenance_key=None, fingerprint=None, device="auto", batch_size=64,
                     normalize=None, cache=None, session=None):
    """Encode one partition of rows: the per-partition work of a cluster's encoder pass.

    A plain function of a table, so that any engine that maps a function over partitions runs
    it: dask (:class:`ClusterEncoder`), Spark (``DataFrame.mapInPandas``), Ray
    (``Dataset.map_batches``). Texts are encoded in batches of ``batch_size``, longest first
    (texts of similar length share a batch: less padding). With ``output`` each batch is
    written into that store as soon as it is encoded, each row marked encoded (the encoder's
    fingerprint, the text field and a digest of the text: the mark of ``skalign migrate``),
    by compare-and-set against its ``expected`` provenance: a row another writer changed
    meanwhile is left as it is. A row the output already holds marked encoded by this encoder
    for this text is skipped, so the partition run again after its worker died encodes only
    what the killed run had not written.

    Parameters
    ----------
    table : pandas.DataFrame or pyarrow.Table
        One row per row to encode: ``id`` (the store's id), ``text``, and optionally
        ``expected``, the provenance value read before (``None``: none); without it the
        provenance the output holds when the partition starts is the expected one.
    encoder : str, path or Encoder
        An encoder spec (:func:`skalign.encoders.load_encoder`: a model folder, a cached model
        name, ``module:callable``), loaded once per process and kept, or an encoder object.
    output : str or Address, default=None
        The store to write the vectors into (any ``skalign`` address); ``None`` returns them.
    text_field, column, provenance_key : str, default=None
        As ``skalign migrate`` takes them: where the output's texts are (the text field the
        marks name), its vector column, its provenance key.
    fingerprint : str, default=None
        The encoder fingerprint the caller expects (the one its marks name); a worker that
        loads another model (another file under the same path) raises
        :class:`~skalign.exceptions.EncoderError` before encoding.
    device : str, default="auto"
        Where a model spec runs (``"cuda"`` for GPU workers), as
        :func:`skalign.encoders.load_encoder` takes it.
    batch_size : int, default=64
        Texts per encoder call (and per write into ``output``).
    normalize : {"auto", "yes", "no"}, bool or None, default=None
        As :func:`skalign.encoders.load_encoder` takes it, for a spec.
    cache : str, path or bool, default=None
        An encode cache file (:class:`~skalign.encoders.EncodeCache`) on the worker, ``True``
        for the worker's default one (:func:`~skalign.encoders.default_cache_path`): a text it
        holds is not encoded again, and a partition run again after its worker died encodes
        only what the killed run had not cached.
    session : hashable, default=None
        A key under which the process keeps ``output`` open between partitions of one pass
        (a new key each pass; the stores of other keys are closed); ``None`` opens and closes
        it in this call.

    Returns
    -------
    pandas.DataFrame or pyarrow.Table
        The input's kind, one row per input row, in its order: ``id``, ``status`` and
        ``vector`` (float32; null where the row was written or held). ``status`` is
        ``"encoded"`` (the vector returned), ``"cached"`` (returned from ``cache``),
        ``"written"`` (encoded and written into ``output``), ``"held"`` (``output`` holds it
        encoded already: not encoded) or ``"changed"`` (encoded, not written: its provenance
        was no longer ``expected``; the vector returned).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from skalign.parallel import encode_partition
    >>> rows = pd.DataFrame({"id": [7, 8], "text": ["a", "abc"]})
    >>> out = encode_partition(rows, lambda t: np.array([[len(s), 1.0] for s in t]))
    >>> out.status.tolist(), out.vector[1].tolist()
    (['encoded', 'encoded'], [3.0, 1.0])
    """
    from ._stores.live import encoded_mark, mark_state
    from .encoders import CachedEncoder
    from .encoders import text_digest as cache_digest
    from .exceptions import EncoderError
    from .utils._terminal import escape_control

    kind, ids, texts, expected = _table_columns(table)
    ids = [i.item() if isinstance(i, np.generic) else i for i in ids]  # numpy scalars: Python
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise ValueError(f"encode_partition: row {escape_control(repr(ids[bad]))[:80]} has no "
                         "text")
    enc = _worker_encoder(encoder, device, batch_size, normalize, cache)
    if fingerprint is not None and enc.fingerprint != fingerprint:
        raise EncoderError(
            f"this worker's encoder has the fingerprint {escape_control(enc.fingerprint)}, "
            f"the run's is {escape_control(str(fingerprint))}: every worker must load the same "
            "model (the same files at the path given)")
    n = len(ids)
    status, vectors = ["encoded"] * n, [None] * n
    store_cm = (_worker_output(output, column, text_field, provenance_key, session)
                if output is not None else None)
    with store_cm if store_cm is not None else contextlib.nullcontext() as store:
        todo = np.arange(n)
        if store is not None:
            now = store.fetch(ids).provenance if n else []
            field = store.text_source(text_field)
            if expected is None:
                expected = list(now)
            held = [mark_state(p, enc.fingerprint, field, t) == "encoded"
                    for p, t in zip(now, texts)]
            for i in np.flatnonzero(held):
                status[i] = "held"
            todo = np.flatnonzero(~np.asarray(held, dtype=bool)) if n else todo
        # longest texts first: a batch holds texts of similar length
        todo = todo[np.argsort([-len(texts[i]) for i in todo], kind="stable")]
        step = max(1, int(getattr(enc, "batch_size", batch_size) or batch_size))
        for lo in range(0, len(todo), step):
            rows = todo[lo:lo + step]
            part = [texts[i] for i in rows]
            digests = [cache_digest(t) for t in part] if isinstance(enc, CachedEncoder) \
                else None
            hits = {} if digests is None else enc.cache.get(enc.fingerprint, set(digests))
            V = enc.encode(part)
            if store is None:
                for j, i in enumerate(rows):
                    vectors[i] = V[j]
                    status[i] = "cached" if digests and digests[j] in hits else "encoded"
                continue
            marks = [encoded_mark(enc.fingerprint, field, t) for t in part]
            written = store.write_back([ids[i] for i in rows], V, marks,
                                       [expected[i] for i in rows])
            for j, i in enumerate(rows):
                if written[j]:
                    status[i] = "written"
                else:
                    status[i], vectors[i] = "changed", V[j]
    return _result_table(kind, ids, status, vectors)


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
        Rows per task; ``None``: a quarter of the rows per worker, at most
        ``16 * batch_size`` (small tasks balance the load and lose less to a dead worker).

    Attributes
    ----------
    n_encoded : int
        Texts the workers' encoders ran on (read from an encode cache excluded; with
        :meth:`encode_step`, rows a partition's killed run wrote included).
    """

    def __init__(self, encoder, *, scheduler=None, workers=None, device="auto", batch_size=64,
                 normalize=None, cache=None, partition_rows=None):
        if scheduler is not None and workers is not None:
            raise ValueError("give a scheduler or a number of local workers, not both")
        for name, value in (("workers", workers), ("partition_rows", partition_rows),
                            ("batch_size", batch_size)):
            if value is not None and (isinstance(value, bool) or int(value) < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.encoder, self.scheduler, self.workers = encoder, scheduler, workers
        self.options = {"device": device, "batch_size": int(batch_size),
                        "normalize": normalize,
                        "cache": cache if cache in (None, True) else str(cache)}
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
        import uuid
        from concurrent.futures import CancelledError

        import pandas as pd
        from distributed import as_completed

        ids, texts = list(ids), list(texts)
        if not ids:
            return pd.DataFrame({"id": [], "status": [], "vector": []})
        client = self._start()
        size = self.partition_rows or min(16 * self.options["batch_size"], max(
            1, -(-len(ids) // (4 * self._n_workers(client)))))
        frame = pd.DataFrame({"id": pd.Series(ids, dtype=object), "text": texts})
        if expected is not None:
            frame["expected"] = pd.Series(list(expected), dtype=object)
        session = uuid.uuid4().hex

        def submit(lo):
            encoder = self._ref if self._ref is not None else self.encoder
            return client.submit(
                encode_partition, frame.iloc[lo:lo + size].reset_index(drop=True), encoder,
                output=output, text_field=text_field, column=column,
                provenance_key=provenance_key, fingerprint=fingerprint,
                session=session if output is not None else None, pure=False, **self.options)

        # a window of tasks in flight, a few per worker: the scheduler and this process hold
        # that many partitions' texts, not the whole pass's
        starts = iter(range(0, len(ids), size))
        window = 4 * self._n_workers(client)
        futures = {submit(lo): lo for lo in itertools.islice(starts, window)}
        pending, parts, again = as_completed(futures), {}, {}
        try:
            for future in pending:
                lo = futures.pop(future)
                try:
                    parts[lo] = future.result()
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
                future.release()
                for lo in itertools.islice(starts, 1):
                    nxt = submit(lo)
                    futures[nxt] = lo
                    pending.add(nxt)
        finally:
            for future in futures:
                future.cancel()
        out = pd.concat([parts[lo] for lo in sorted(parts)], ignore_index=True)
        self.n_encoded += int(out.status.isin(("encoded", "written", "changed")).sum())
        return out

    def encode_step(self, step, ids, texts, write):
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

        Returns
        -------
        in_output : ndarray of bool
            The rows the output now holds encoded (written by the workers, or found there).
        vectors : ndarray of shape (len(ids), dim), float32
            The other rows' new vectors (the rows ``in_output`` are zero: read them back).
        """
        from .encoders import text_digest as cache_digest

        ids, texts = list(ids), list(texts)
        cache = getattr(step.enc, "cache", None)
        digests = [cache_digest(t) for t in texts] if cache is not None else None
        # the texts the step's own encode cache holds are read from it, as on one machine
        hit = np.zeros(len(ids), dtype=bool)
        if cache is not None:
            found = cache.get(step.enc.fingerprint, set(digests))
            hit = np.array([d in found for d in digests], dtype=bool)
        go = np.flatnonzero(~hit)
        # a step into a field of its source writes through that field's own store: the
        # workers return the vectors and the step writes them, as on one machine
        write = write and not getattr(step, "in_place", False)
        expected = None
        if write:
            where = {key: i for i, key in enumerate(step.rows.ids)}
            expected = [step.rows.provenance[where[ids[i]]] for i in go]
        out = self.encode([ids[i] for i in go], [texts[i] for i in go],
                          fingerprint=step.enc.fingerprint,
                          output=step.out if write else None, expected=expected,
                          text_field=step.text_field, column=step.column,
                          provenance_key=step.provenance_key)
        in_output = np.zeros(len(ids), dtype=bool)
        in_output[go] = out.status.isin(("written", "held")).to_numpy()
        if write:
            # rows the step's scan found not encoded that the output holds encoded now were
            # written by this pass (a run of their partition whose worker then died)
            self.n_encoded += int((out.status == "held").sum())
        back = [np.asarray(v, dtype=np.float32) for v in out.vector if v is not None]
        cached = step.enc.encode([texts[i] for i in np.flatnonzero(hit)]) if hit.any() else None
        dim = back[0].shape[0] if back else cached.shape[1] if cached is not None else 0
        vectors = np.zeros((len(ids), dim), dtype=np.float32)
        if cached is not None:
            vectors[hit] = cached
        got = [i for i, v in zip(go, out.vector) if v is not None]
        if got:
            vectors[got] = np.stack(back)
            if cache is not None:  # kept for the next runs, as on one machine
                cache.put(step.enc.fingerprint, [digests[i] for i in got], vectors[got])
        return in_output, vectors
