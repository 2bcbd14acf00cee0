"""Scale out on a dask distributed cluster: translate Parquet shards, run grid searches, encode.

Nothing here is needed on one machine (:func:`skalign.io.translate` streams any store in
bounded memory) — and importing this package does not import dask; only calling its functions
does.

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
  (``mapInPandas``) and Ray (``map_batches``) map over partitions alike. Its texts are encoded
  grouped by length in batches that one machine forms alike (bit-equal vectors).
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

from ._client import ClusterEncoder
from ._dask import cluster_backend, translate_parquet
from ._partition import encode_partition

__all__ = ["ClusterEncoder", "cluster_backend", "encode_partition", "translate_parquet"]
