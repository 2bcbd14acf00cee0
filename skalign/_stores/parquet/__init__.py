"""Parquet files and folders: the reader and writers (store), the live store, and footer
handling; :class:`ParquetFileEngine` and :class:`ParquetFolderEngine` are what the shared code
asks of them.
"""

from __future__ import annotations

from ..files.engine import FileEngine

__all__ = ["ParquetFileEngine", "ParquetFolderEngine"]


class ParquetFileEngine(FileEngine):
    """A Parquet file's engine. Its writer encodes
    :data:`~skalign._stores.base.ENCODE_DEPTH` batches at once: each default batch is that
    fraction of the memory budget's."""

    suffix = ".parquet"
    interchangeable = True
    ids_in_column = True
    dask_reads = True

    def batch_rows(self, batch_size, d_out):
        from ..base import ENCODE_DEPTH

        return max(1, batch_size // ENCODE_DEPTH)


class ParquetFolderEngine(ParquetFileEngine):
    """A folder of Parquet shards' engine (what ``dask``'s ``to_parquet`` writes too)."""

    suffix = ""
    dask_writes = True
