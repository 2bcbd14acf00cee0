"""SQLite database files and their sqlite-vec ``vec0`` tables: one connection per file and
process, a ``vec0`` table's definition read and written again, its renames, and the two tables
skalign keeps in the file (the stamps and the rows' marks).

A ``vec0`` table is a virtual table stored in tables of its own, named after it (``T_info``,
``T_chunks``, ``T_rowids``, ``T_vector_chunksNN``, ``T_metadatachunksNN``, ``T_metadatatextNN``,
``T_auxiliary``). sqlite-vec 0.1 does not rename them with the table (``ALTER TABLE T RENAME``
leaves a table that no longer opens), so :func:`rename` renames each of them in the same
transaction, and the caller checks the renamed table reads back before it commits.

A table's definition is read from its ``CREATE VIRTUAL TABLE`` statement, argument by argument,
each matched whole against sqlite-vec's column forms (:func:`describe`): one it does not know is
refused, never copied as text. Statements are built from identifiers (quoted, ``"`` doubled) and
parameters only; ``vec0`` column names are the plain names sqlite-vec's parser accepts
(``[A-Za-z][A-Za-z0-9_]*``), which the match guarantees.

A ``vec0`` table skalign stamps or marks is given an identity: a random token under the key
:data:`TOKEN_KEY` of its ``T_info`` table, which travels with renames and ``VACUUM`` and dies
with the table. The stamps (:data:`STAMPS`) and the rows' marks (:data:`MARKS`) are keyed by it:
a table dropped and made again under the same name has neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from dataclasses import dataclass, replace

from ...exceptions import StoreError, StoreLockedError, StoreNotFoundError
from ..databases.edge import EngineEdge

__all__ = ["MARKS", "STAMPS", "TOKEN_KEY", "Column", "Vec0", "connect", "describe", "drop",
           "ident", "parts", "rename", "table_type", "token", "writing"]

#: the key of a table's identity in its ``T_info`` table
TOKEN_KEY = "skalign_id"
#: skalign's table of provenance stamps, one per token
STAMPS = "skalign_stamps"
#: skalign's table of the rows' provenance marks: token, provenance key, row id, mark
MARKS = "skalign_marks"
#: milliseconds a statement waits for another connection's lock on the file
BUSY_MS = 10000

_NAME = r"[A-Za-z][A-Za-z0-9_]*"
_FORMS = {
    "vector": re.compile(rf"(?P<name>{_NAME})\s+(?P<type>float|f32|int8|i8|bit)\s*\[\s*"
                         r"(?P<dim>[0-9]+)\s*\](?:\s+distance_metric\s*=\s*"
                         r"(?P<metric>l2|l1|cosine|hamming))?", re.I),
    "key": re.compile(rf"(?P<name>{_NAME})\s+(?P<type>integer|int|text)\s+primary\s+key", re.I),
    "partition": re.compile(rf"(?P<name>{_NAME})\s+(?P<type>integer|int|text)\s+partition\s+key",
                            re.I),
    "auxiliary": re.compile(rf"\+\s*(?P<name>{_NAME})(?:\s+(?P<type>{_NAME}))?", re.I),
    "metadata": re.compile(rf"(?P<name>{_NAME})\s+(?P<type>text|integer|int|float|double|"
                           r"boolean|bool)", re.I),
    "option": re.compile(r"(?P<name>chunk_size)\s*=\s*(?P<dim>[0-9]+)", re.I),
}
#: the suffixes of a ``vec0`` table's own tables
_PART = re.compile(r"_(info|chunks|rowids|auxiliary|vector_chunks[0-9]+|metadatachunks[0-9]+|"
                   r"metadatatext[0-9]+)", re.I)

_CONNECTIONS = {}


def ident(name):
    """``name`` as an SQL identifier: quoted, with its quotes doubled."""
    return '"' + str(name).replace('"', '""') + '"'


def _classify(address, exc, msg):
    import apsw

    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return StoreLockedError(f"{address}: the database file is locked by another program "
                                f"({msg}); wait for it to finish, then run the same command "
                                "again.")
    if isinstance(exc, apsw.NotADBError):
        return StoreError(f"{address}: {address.path} is not an SQLite database ({msg}).")
    if isinstance(exc, (apsw.ReadOnlyError, apsw.PermissionsError, apsw.CantOpenError)):
        return StoreError(f"{address}: cannot write or open {address.path} ({msg}); check the "
                          "file's permissions.")
    return StoreError(f"{address}: SQLite failed ({msg}).")


EDGE = EngineEdge(("apsw", "sqlite_vec"), _classify, "SQLite")


@dataclass(frozen=True)
class Column:
    """One argument of a ``vec0`` definition: ``role`` (``vector``, ``key``, ``partition``,
    ``metadata``, ``auxiliary`` or ``option``), its name, type, width (vectors; an option's
    value) and distance metric (vectors)."""

    role: str
    name: str
    type: str | None = None
    dim: int | None = None
    metric: str | None = None

    def sql(self):
        """The argument as sqlite-vec reads it."""
        if self.role == "vector":
            metric = f" distance_metric={self.metric}" if self.metric else ""
            return f"{self.name} {self.type}[{self.dim}]{metric}"
        if self.role == "option":
            return f"{self.name}={self.dim}"
        if self.role == "auxiliary":
            return f"+{self.name}" + (f" {self.type}" if self.type else "")
        suffix = {"key": " primary key", "partition": " partition key"}.get(self.role, "")
        return f"{self.name} {self.type}{suffix}"


@dataclass(frozen=True)
class Vec0:
    """A ``vec0`` table's definition: its name and arguments (:class:`Column`) in order."""

    name: str
    columns: tuple

    @property
    def fields(self):
        """The columns a row holds (every argument but the options)."""
        return [c for c in self.columns if c.role != "option"]

    @property
    def vectors(self):
        return [c for c in self.columns if c.role == "vector"]

    @property
    def key(self):
        """The primary key column's name, ``None`` where rows are named by ``rowid``."""
        return next((c.name for c in self.columns if c.role == "key"), None)

    def create(self, name, column=None, dim=None):
        """``CREATE VIRTUAL TABLE`` of a table ``name`` like this one, the vector ``column``
        ``dim`` wide (float32)."""
        args = [replace(c, dim=dim, type="float") if c.role == "vector" and c.name == column
                else c for c in self.columns]
        return (f"CREATE VIRTUAL TABLE {ident(name)} USING vec0("
                + ", ".join(c.sql() for c in args) + ")")


def _module_args(sql):
    """The text between the parentheses of ``USING vec0(...)`` (quotes in the table's name
    skipped), or ``None``."""
    quote, i = None, 0
    while i < len(sql):
        ch = sql[i]
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch == "[":
            quote = "]"
        else:
            m = re.compile(r"using\s+vec0\s*\(", re.I).match(sql, i)
            if m is not None and (i == 0 or not re.match(r"[A-Za-z0-9_]", sql[i - 1])):
                body = sql[m.end():].rstrip().rstrip(";").rstrip()
                return body[:-1] if body.endswith(")") else None
        i += 1
    return None


def _split_args(body):
    args, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(body[start:i])
            start = i + 1
    args.append(body[start:])
    return [a.strip() for a in args]


def table_type(conn, name):
    """``(name as stored, type, sql)`` of the table or view ``name`` (SQLite's names ignore
    ASCII case), ``None`` where there is none."""
    return conn.execute("SELECT name, type, sql FROM sqlite_master WHERE name = ? COLLATE NOCASE "
                        "AND type IN ('table', 'view')", (name,)).fetchone()


def describe(conn, address, name=None):
    """The :class:`Vec0` definition of the table ``name`` (default: the address's); a missing
    table, or one that is not a ``vec0`` table sqlite-vec's forms describe, is refused."""
    name = address.name if name is None else name
    found = table_type(conn, name)
    if found is None:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE "
            "'CREATE VIRTUAL TABLE%' ORDER BY name")]
        shown = ", ".join(repr(t) for t in tables[:10]) or "none"
        raise StoreNotFoundError(f"{address}: no table {name[:80]!r} in {address.path} (its "
                                 f"virtual tables: {shown}); fix ?table=.")
    stored, kind, sql = found
    body = _module_args(sql or "") if kind == "table" else None
    if body is None:
        raise StoreError(f"{address}: {stored[:80]!r} is not a sqlite-vec vec0 table; name a "
                         "table made with CREATE VIRTUAL TABLE … USING vec0(…).")
    columns = []
    for arg in _split_args(body):
        for role, form in _FORMS.items():
            m = form.fullmatch(arg)
            if m is not None:
                d = m.groupdict()
                columns.append(Column(role, m["name"], (d.get("type") or "").lower() or None,
                                      int(d["dim"]) if d.get("dim") else None,
                                      (d.get("metric") or "").lower() or None))
                break
        else:
            raise StoreError(f"{address}: the vec0 argument {arg[:80]!r} of {stored[:80]!r} is "
                             "not one skalign reads (vector, primary key, partition key, "
                             "metadata or +auxiliary column, chunk_size).")
    return Vec0(stored, tuple(columns))


def connect(address, create=False, own=False, mode=0o600):
    """The process's connection to the database file of ``address``, sqlite-vec loaded (with
    ``own``, a new connection for the caller alone: a live store's, whose transactions other
    stores in the process must not see). The file must exist unless ``create``: then its folder
    must, and a new file is created first with the permission bits ``mode`` (exclusively, no
    link followed: an empty file is an empty database)."""
    import apsw
    import sqlite_vec

    path = address.path
    key = (os.path.realpath(path), os.getpid())
    cached = None if own else _CONNECTIONS.get(key)
    if cached is not None:
        if cached[1] == _file_id(path):
            return cached[0]
        del _CONNECTIONS[key]  # the file was removed or replaced since: not that database
    if not path.is_file():
        if not create or path.exists():
            what = "is not a file" if path.exists() else "does not exist"
            raise StoreNotFoundError(f"{address}: the database file {path} {what}; check the "
                                     "path (sqlite:PATH?table=TABLE).")
        if path.is_symlink():
            raise StoreError(f"{address}: {path} is a link to nothing; give a new file's path.")
        if not path.parent.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path.parent} to create "
                                     f"{path.name} in; check the path.")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_NOFOLLOW", 0), mode))
        except OSError as exc:
            raise StoreError(f"{address}: cannot create {path} ({exc.strerror}).") from None
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    with EDGE.errors(address):
        conn = apsw.Connection(str(path), flags=flags)
        try:
            conn.setbusytimeout(BUSY_MS)
            conn.enable_load_extension(True)
            conn.load_extension(sqlite_vec.loadable_path())
            conn.enable_load_extension(False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            conn.close()
            raise
    if not own:
        _CONNECTIONS[key] = (conn, _file_id(path))
    return conn


def _file_id(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def writing(conn):
    """A write transaction on ``conn``, its write lock taken first (``BEGIN IMMEDIATE``):
    one that read first and then asked for it could meet another connection waiting for its
    read lock to go, and SQLite answers that with "database is locked" at once, without
    waiting (its busy handler would wait for ever).

    The same answer comes where ``conn`` holds the file's read lock itself (a translation's
    read statement, in a rollback-journal database) and another program has begun writing:
    that program cannot commit before the read ends, so ``conn`` asks again, up to
    :data:`BUSY_MS`, until the program gives up its transaction."""
    import time

    import apsw

    deadline = time.monotonic() + BUSY_MS / 1000
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def parts(conn, name):
    """The names of the tables a ``vec0`` table ``name`` is stored in."""
    low = name.lower()
    return [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if n.lower().startswith(low) and _PART.fullmatch(n[len(name):])]


def rename(conn, old, new):
    """Rename the table ``old`` (a ``vec0`` table with its own tables, or any table) to
    ``new``; inside the caller's transaction."""
    own = parts(conn, old)
    conn.execute(f"ALTER TABLE {ident(old)} RENAME TO {ident(new)}")
    for part in own:
        conn.execute(f"ALTER TABLE {ident(part)} RENAME TO {ident(new + part[len(old):])}")


def token(conn, name, create=False):
    """The identity token of the ``vec0`` table ``name`` (made where ``create`` and it has
    none), or ``None``."""
    info = ident(f"{name}_info")
    if table_type(conn, f"{name}_info") is None:
        return None
    row = conn.execute(f"SELECT value FROM {info} WHERE key = ?", (TOKEN_KEY,)).fetchone()
    if row is not None and isinstance(row[0], str):
        return row[0]
    if not create:
        return None
    value = secrets.token_hex(16)
    conn.execute(f"INSERT INTO {info} (key, value) VALUES (?, ?)", (TOKEN_KEY, value))
    return value


def drop(conn, name):
    """Drop the ``vec0`` table ``name`` (its own tables go with it) and skalign's records of
    it; inside the caller's transaction."""
    tid = token(conn, name)
    conn.execute(f"DROP TABLE IF EXISTS {ident(name)}")
    if tid is not None:
        for table, column in ((STAMPS, "id"), (MARKS, "tid")):
            if table_type(conn, table) is not None:
                conn.execute(f"DELETE FROM {ident(table)} WHERE {column} = ?", (tid,))
