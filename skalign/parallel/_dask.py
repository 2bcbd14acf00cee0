"""Parquet shards translated, and scikit-learn's joblib work run, on a dask cluster."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..exceptions import StoreError

__all__ = ["cluster_backend", "translate_parquet"]


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

    from .._stores.files.arrow import arrow_vectors
    from ..utils._backend import iter_batches

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

    from .._stores.files.arrow import output_schema
    from .._stores.files.shadow import atomic_file
    from .._stores.pipeline.translate import prepare_translation
    from .._stores.provenance import make_stamp, write_stamp
    from .._stores.registry import engine
    from ..io import load

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

