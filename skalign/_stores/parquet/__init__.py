"""Parquet files and folders: the reader and writers (store), the live store, and footer
handling; :class:`ParquetFileEngine` and :class:`ParquetFolderEngine` are what the shared code
asks of them.
"""

from __future__ import annotations

from ..files.engine import FileEngine

__all__ = ["ParquetFileEngine", "ParquetFolderEngine"]


class _FileFields:
    """A second vector column of a single Parquet file (``--into FIELD``): :mod:`.fields`."""

    fields_module = "skalign._stores.parquet.fields"

    def open_field(self, address, field, *, text_field=None, **options):
        return self._field_functions(address).open_field(address, field, text_field=text_field,
                                                         **options)

    def finish_field(self, address, field):
        self._field_functions(address).finish_field(address, field)


class ParquetFileEngine(_FileFields, FileEngine):
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
    into_refusal = ("a folder of Parquet shards has no single file to add the column to "
                    "(--into works on one Parquet file); translate or migrate into a second "
                    "folder.")

