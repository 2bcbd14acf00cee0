"""Opening a DuckDB database file with the vss extension, quoting, and DuckDB's errors at the
engine's edge.

The vss extension is loaded from the file its own wheel (``duckdb-extension-vss``) ships,
``duckdb_extension_vss/extensions/v<duckdb version>/vss.duckdb_extension``: nothing is
downloaded (``INSTALL vss`` would need the network), and DuckDB's autoloading of other
extensions is off. The extension is loaded before the file is attached, so that DuckDB can
replay a write-ahead log holding HNSW changes (DuckDB's advice for its experimental HNSW
persistence).

A process holds one DuckDB instance per database file (:func:`open_database`, reference
counted): DuckDB locks a file per process, and two instances of one file in the same process
would each believe they own it. Each user of the file takes a cursor of its own (a connection
to the same instance, with its own transactions); the instance is closed, and the file
released to other processes, when the last user closes it.
"""

from __future__ import annotations

import itertools
import os
import re
import threading

from ...exceptions import MissingDependencyError, StoreError, StoreLockedError
from ..databases.edge import one_line

__all__ = ["HERE", "Database", "checkpoint", "errors", "ident", "literal", "open_database",
           "qualified", "vss_extension"]

#: the condition on DuckDB's catalog functions that selects the main schema of the database a
#: cursor uses
HERE = "database_name = current_database() AND schema_name = 'main'"
_OPEN: dict = {}
_GUARD = threading.Lock()
_ALIASES = itertools.count()
#: the process's one DuckDB instance (an in-memory database with vss loaded) and its pid
_INSTANCE: list = [None, None]


def vss_extension(where):
    """The path of the vss extension's file in its wheel, for the installed DuckDB's version;
    a missing wheel or one for another version names the extra to install."""
    import duckdb

    try:
        import duckdb_extension_vss
    except ImportError:
        raise MissingDependencyError(
            f"{where}: DuckDB stores need the vss extension's wheel (duckdb-extension-vss); "
            "pip install 'skalign[duckdb]'.") from None
    version = duckdb.__version__
    for folder in duckdb_extension_vss.__path__:
        path = os.path.join(folder, "extensions", f"v{version}", "vss.duckdb_extension")
        if os.path.isfile(path):
            return path
    found = sorted(name for folder in duckdb_extension_vss.__path__
                   for name in _listdir(os.path.join(folder, "extensions")))
    raise MissingDependencyError(
        f"{where}: the installed duckdb-extension-vss is built for DuckDB "
        f"{', '.join(f[1:] for f in found) or '(none found)'}, not for the installed DuckDB "
        f"{version}; install matching versions: pip install 'skalign[duckdb]'.")


def _listdir(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def literal(text):
    """``text`` as a SQL string literal (DuckDB's: quotes doubled, no backslash escapes);
    used only where DuckDB takes no parameter (a file to load or attach, a ``COMMENT``)."""
    if "\x00" in text:
        raise StoreError(f"{text!r}: a NUL character cannot be passed to DuckDB.")
    return "'" + text.replace("'", "''") + "'"


def ident(name):
    """``name`` as a quoted SQL identifier (any text but NUL)."""
    if "\x00" in name:
        raise StoreError(f"{name!r}: a NUL character cannot name a DuckDB table or column.")
    return '"' + name.replace('"', '""') + '"'


def checkpoint(cur):
    """Write the file's write-ahead log into it (vss's HNSW indexes are safest there); skipped
    while another transaction of the process writes (DuckDB refuses then): the log keeps
    every commit, and the file is checkpointed when it is detached."""
    import duckdb

    try:
        cur.execute("CHECKPOINT")
    except duckdb.TransactionException:
        pass


def qualified(table):
    """The table ``table`` of the main schema of the database a cursor uses, quoted."""
    return f"main.{ident(table)}"


class Database:
    """One database file attached to the process's DuckDB instance (see the module's
    docstring)."""

    def __init__(self, key, alias):
        self.key, self.alias, self.users = key, alias, 0

    def cursor(self):
        """A connection of its own to the instance: its own transactions, the file's database
        in use (``current_database()``), and Python variables never read as tables (DuckDB's
        replacement scans)."""
        cur = _INSTANCE[0].cursor()
        cur.execute("SET python_enable_replacements = false")
        cur.execute(f"USE {ident(self.alias)}")
        return cur

    def close(self):
        """One user less; the last one checkpoints the file and detaches it (the file is then
        free for other processes)."""
        import duckdb

        with _GUARD:
            self.users -= 1
            if self.users > 0:
                return
            conn = _INSTANCE[0]
            try:
                conn.execute(f"CHECKPOINT {ident(self.alias)}")
            except duckdb.Error:  # a broken file, or a transaction still open: detach anyway
                pass
            try:
                conn.execute(f"DETACH {ident(self.alias)}")
            except duckdb.Error:  # still in use (a cursor not closed): kept attached, reused
                return
            _OPEN.pop(self.key, None)


def _instance(address):
    """The process's DuckDB instance, vss loaded once (a forked child makes its own)."""
    import duckdb

    if _INSTANCE[0] is None or _INSTANCE[1] != os.getpid():
        extension = vss_extension(address)
        conn = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                  "autoload_known_extensions": False})
        try:
            with errors(address, "cannot load the vss extension"):
                conn.execute(f"LOAD {literal(extension)}")
                conn.execute("SET GLOBAL hnsw_enable_experimental_persistence = true")
        except BaseException:
            conn.close()
            raise
        _OPEN.clear()
        _INSTANCE[:] = [conn, os.getpid()]
    return _INSTANCE[0]


def open_database(address, create=False):
    """The :class:`Database` of the file of ``address`` (shared within this process); a file
    that does not exist is created only with ``create``."""
    from ...exceptions import StoreNotFoundError

    path = address.path
    key = os.path.realpath(path)
    with _GUARD:
        conn = _instance(address)
        db = _OPEN.get(key)
        if db is not None:
            db.users += 1
            return db
        if not create and not os.path.isfile(path):
            raise StoreNotFoundError(f"{address}: no database file {path}; check the path "
                                     "(duckdb:PATH?table=TABLE).")
        if create and not path.parent.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path.parent} to create the "
                                     "database in; check the path.")
        alias = f"skalign_db_{next(_ALIASES)}"
        with errors(address, "cannot open the database file"):
            conn.execute(f"ATTACH {literal(str(path))} AS {ident(alias)}")
        db = _OPEN[key] = Database(key, alias)
        db.users = 1
        return db


def _is_duckdb(exc):
    return type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb")


class errors:
    """A context manager: DuckDB's exceptions inside it become one-line
    :class:`~skalign.exceptions.StoreError`\\ s naming ``address`` and what failed (a file
    another process holds open: :class:`~skalign.exceptions.StoreLockedError`)."""

    def __init__(self, address, what, fix=None):
        self.address, self.what, self.fix = address, what, fix

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, StoreError) or not _is_duckdb(exc):
            return False
        raise classify(self.address, one_line(exc, self.address), self.what,
                       self.fix) from None


def classify(address, msg, what="DuckDB failed", fix=None):
    """The :class:`~skalign.exceptions.StoreError` that DuckDB's message ``msg`` means."""
    if re.search(r"could not set lock on file|conflicting lock", msg, re.I):
        return StoreLockedError(
            f"{address}: another process has the database file open (DuckDB lets one process "
            "write a file at a time); wait for it to finish or close it, then run the same "
            "command again.")
    if "not a valid DuckDB database file" in msg:
        return StoreError(f"{address}: {address.path} is not a DuckDB database file; check "
                          "the path.")
    return StoreError(f"{address}: {what} ({msg})" + (f"; {fix}." if fix else "."))
