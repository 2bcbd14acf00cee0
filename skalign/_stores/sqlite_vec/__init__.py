"""sqlite-vec: ``vec0`` tables of SQLite database files. The reader and writer (store), the live
store, the tables' definitions and renames (tables) and the publish recovery;
:class:`SqliteVecEngine` is what the shared code asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["SqliteVecEngine"]


class SqliteVecEngine(DatabaseEngine):
    """sqlite-vec's engine: apsw (an SQLite that loads extensions; Python's own ``sqlite3`` may
    not) with the ``sqlite_vec`` package's loadable extension."""

    def modules(self):
        from . import recovery, store

        return store, recovery

    def import_client(self, where):
        import importlib

        from ...exceptions import MissingDependencyError

        for name in ("apsw", "sqlite_vec"):
            try:
                importlib.import_module(name)
            except ImportError:
                raise MissingDependencyError(
                    f"{where}: {self.kind} stores need the {name} package; "
                    f"pip install 'skalign[{self.extra}]'.") from None

    def check_output(self, address):
        from ...exceptions import StoreError, StoreNotFoundError

        path = address.path
        if path.exists() and not path.is_file():
            raise StoreError(f"{address}: {path} is not a file; give an SQLite database file "
                             "or a new file's path.")
        if not path.exists() and not path.parent.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path.parent} to create "
                                     f"{path.name} in; check the path.")

    def short_name(self, address):
        return address.name
