"""DuckDB with the vss extension: the reader and writer (store), the publish recovery, the
indexes built again, and the file's opening (connect); :class:`DuckDBEngine` is what the shared
code asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["DuckDBEngine"]


class DuckDBEngine(DatabaseEngine):
    """DuckDB's engine: a table of a database file, its backup a table beside it in the same
    file, its stamp the table's ``COMMENT``. Batches are inserted as Arrow tables (DuckDB's
    bulk path), one transaction each."""

    most_batch_rows = 8192

    def modules(self):
        from . import recovery, store

        return store, recovery

    def restore(self, address):
        self.import_client(address)
        from .recovery import restore

        return restore(address)

    def check_output(self, address):
        from ...exceptions import StoreError, StoreNotFoundError

        path = address.path
        if path.is_dir():
            raise StoreError(f"{address}: {path} is a folder; give a DuckDB database file "
                             "(duckdb:///PATH?table=TABLE).")
        if not path.exists() and not path.parent.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path.parent} to create the "
                                     "database in; check the path.")

    def short_name(self, address):
        return f"{address.path.name}:{address.name}"
