"""sqlite-vec tables: ``sqlite:PATH?table=TABLE&column=COLUMN``, a ``vec0`` virtual table of the
SQLite database file ``PATH``.

Rows are read in the table's own order (a full scan: the order they were inserted in) by one
statement, with their id (the primary key, else ``rowid``) and every other column: partition
keys, metadata, ``+auxiliary`` columns and other vector columns, copied as they are. The output
is a ``vec0`` table of the output's file (the same file or another) defined like the source
(the same columns, metric and ``chunk_size``, rebuilt from the parsed definition:
:mod:`.tables`) with the vector column ``float[d_out]``. It is written under the name
``OUTPUT_skalign_<job>`` one batch per transaction (a resumed run starts after the last
committed batch), verified, then renamed into place in one transaction that also renames an
existing ``OUTPUT`` to ``OUTPUT_skalign_backup`` (``--replace``) and records the provenance
stamp, marked :data:`~skalign._stores.journal.PUBLISHING` until the steps after the publish are
done (:func:`skalign._stores.sqlite_vec.recovery.recover_publish`); the renamed table is read
back inside that transaction, which is rolled back if it does not hold the translation.

The stamp is a row of skalign's table ``skalign_stamps`` in the same file, keyed by the table's
identity token (:func:`.tables.token`): it follows renames and dies with the table. Reader and
writer share the process's one connection to a file, so that the source's read statement and
the shadow's commits in the same file do not wait on each other's locks; a second skalign
writing the same output is kept out by a lock file in this user's private lock folder.
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from ...exceptions import StoreError, StoreExistsError, StoreNotFoundError
from ..base import StoreReader, StoreWriter
from ..databases.common import (
    backup_name,
    consecutive_runs,
    lock_for,
    resume_point,
    shadow_name,
    shadow_prefix,
)
from ..journal import final_stamp, kill_point, pending_stamp
from .tables import (
    EDGE,
    STAMPS,
    connect,
    describe,
    drop,
    ident,
    parts,
    rename,
    table_type,
    token,
    writing,
)

__all__ = ["Reader", "Writer", "read_stamp", "restore", "write_stamp"]

KIND = "sqlite-vec"


def vector_column(address, table, column=None):
    """The float vector column of ``table`` the address (or ``column``) names, or its only
    one."""
    vectors = table.vectors
    wanted = address.column or column
    if wanted is None:
        if len(vectors) != 1:
            raise StoreError(f"{address}: the table has {len(vectors) or 'no'} vector columns "
                             f"({', '.join(c.name for c in vectors)}); name one with &column=.")
        found = vectors[0]
    else:
        found = next((c for c in vectors if c.name.lower() == wanted.lower()), None)
        if found is None:
            raise StoreError(f"{address}: no vector column {wanted[:80]!r} (vector columns: "
                             f"{', '.join(c.name for c in vectors) or 'none'}); fix &column=.")
    if found.type not in ("float", "f32"):
        raise StoreError(f"{address}: column {found.name!r} holds {found.type}[{found.dim}] "
                         "vectors, which cannot be translated (only float32 vectors can).")
    return found


@EDGE.edges
class Reader(StoreReader):
    has_rows = True
    kind = KIND
    ids_origin = "sqlite-vec ids"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None, conn=None):
        self.address = address
        if conn is None:
            conn = connect(address)
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                # a read of its own, on a snapshot: a connection whose read statement is open
                # cannot write once another connection has committed (SQLITE_BUSY_SNAPSHOT)
                conn = connect(address, own=True)
        self.conn = conn
        self.table = describe(self.conn, address)
        found = vector_column(address, self.table, column)
        self.column, self.dim, self.metric = found.name, found.dim, found.metric or "l2"
        self.id_name = self.table.key or "rowid"
        self.fields = [c.name for c in self.table.fields
                       if c.name != self.column and c.role != "key"]
        self.n_rows = self.conn.execute(
            f"SELECT count(*) FROM {ident(self.table.name)}").fetchone()[0]

    def select(self, table=None):
        """``SELECT id, vector, fields…`` of ``table`` (default: the source)."""
        cols = ", ".join(ident(c) for c in (self.id_name, self.column, *self.fields))
        return f"SELECT {cols} FROM {ident(table or self.table.name)}"

    def _vectors(self, rows):
        blob = b"".join(r[1] for r in rows)
        if any(not isinstance(r[1], bytes) or len(r[1]) != 4 * self.dim for r in rows):
            raise StoreError(f"{self.address}: a row's {self.column!r} is not a float32 vector "
                             f"of {self.dim} dimensions.")
        return np.frombuffer(blob, dtype="<f4").reshape(len(rows), self.dim).astype(
            np.float32)

    def batches(self, batch_size, start=0):
        cursor = self.conn.cursor().execute(self.select() + " LIMIT -1 OFFSET ?", (int(start),))
        try:
            while rows := list(itertools.islice(cursor, batch_size)):
                yield self._vectors(rows), rows, None
        finally:
            cursor.close()

    def row(self, rows, k):
        return {"id": rows[k][0], **dict(zip(self.fields, rows[k][2:]))}

    def batch_ids(self, rows, n):
        return [r[0] for r in rows]

    def take(self, positions, batch_size):
        rows = []
        for first, count in consecutive_runs(positions):
            rows += self.conn.execute(self.select() + " LIMIT ? OFFSET ?",
                                      (count, first)).fetchall()
        return list(self._vectors(rows)), [self.row(rows, k) for k in range(len(rows))]

    def read_all(self):
        parts = [v for v, _, _ in self.batches(8192)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


@EDGE.edges
class Writer(StoreWriter):
    pipelined = False  # the inserts run in SQLite holding the file's lock: nothing to overlap

    def __init__(self, address, job):
        self.address, self.job, self.display = address, job, address.display
        self.src = job.reader
        self.shadow = None
        path = address.path
        if path.exists() and not path.is_file():
            raise StoreError(f"{self.display}: {path} is not a file; give an SQLite database "
                             "file or a new file's path.")
        if path.is_file() and table_type(self.conn, address.name) is None:
            taken = parts(self.conn, address.name)
            if taken:  # the output's own tables would need these names
                raise StoreError(f"{self.display}: the file already has a table {taken[0]!r}, "
                                 f"a name the vec0 table {address.name!r} keeps its data in; "
                                 "name another output table.")

    @property
    def conn(self):
        """The output file's connection; a new file gets the source file's permission bits
        (its owner's read and write kept)."""
        from ..files.shadow import output_modes

        return connect(self.address, create=True, mode=output_modes(self.src.address.path)[0])

    def lock(self):
        return lock_for(self.address)

    def exists(self):
        if not self.address.path.exists():
            return False
        return table_type(self.conn, self.address.name) is not None

    def begin(self, fp):
        conn, name = self.conn, self.address.name
        self.shadow = shadow_name(name, fp)
        prefix = shadow_prefix(name).lower()
        for (other,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                     "sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall():
            low = other.lower()
            if low.startswith(prefix) and low != self.shadow.lower() \
                    and len(low) == len(prefix) + 12 \
                    and all(c in "0123456789abcdef" for c in low[len(prefix):]):
                with writing(conn):
                    drop(conn, other)
        if table_type(conn, self.shadow) is not None:
            n = conn.execute(f"SELECT count(*) FROM {ident(self.shadow)}").fetchone()[0]
            return resume_point(n, self.src.n_rows, self.job.batch_size)
        with writing(conn):
            conn.execute(self.src.table.create(self.shadow, self.src.column, self.job.d_out))
            token(conn, self.shadow, create=True)
        return 0

    def write_unit(self, out, rows, shard, start):
        out = np.ascontiguousarray(out, dtype="<f4")
        cols = (self.src.id_name, self.src.column, *self.src.fields)
        sql = (f"INSERT INTO {ident(self.shadow)} ({', '.join(ident(c) for c in cols)}) "
               f"VALUES ({', '.join('?' * len(cols))})")
        with writing(self.conn) as conn:
            conn.executemany(sql, ((r[0], out[k].tobytes(), *r[2:])
                                   for k, r in enumerate(rows)))

    def finish(self):
        return self.conn.execute(f"SELECT count(*) FROM {ident(self.shadow)}").fetchone()[0]

    def fetch(self, positions, rows=None):
        src = self.src
        where = f" WHERE {ident(src.id_name)} = ?"
        got = []
        for row in rows:
            found = self.conn.execute(src.select(self.shadow) + where, (row["id"],)).fetchone()
            if found is None:
                raise StoreError(f"{self.display}: verification failed: row {row['id']!r} is "
                                 "missing from the translation; it was not published.")
            got.append(found)
        vectors = np.frombuffer(b"".join(r[1] for r in got), "<f4").reshape(
            len(got), self.job.d_out).astype(np.float32)
        return vectors, [src.row(got, k) for k in range(len(got))]

    def publish(self, replace, stamp=None):
        """In one transaction: an existing output renamed to its backup, the shadow's stamp
        (marked :data:`PUBLISHING`), the shadow renamed into place, and the renamed table's
        row count and first vector read back."""
        conn, name = self.conn, self.address.name
        backup = None
        first = f"SELECT {ident(self.src.column)} FROM {{}} LIMIT 1"
        rows = conn.execute(f"SELECT count(*) FROM {ident(self.shadow)}").fetchone()[0]
        vector = conn.execute(first.format(ident(self.shadow))).fetchone()
        with writing(conn):
            if table_type(conn, name) is not None:
                if not replace:
                    raise StoreExistsError(f"{self.display}: exists; pass --replace.")
                bname = backup_name(name)
                if table_type(conn, bname) is not None:
                    drop(conn, bname)
                rename(conn, name, bname)
                backup = self.address.with_name(bname)
            if stamp is not None:
                _set_stamp(conn, self.shadow, pending_stamp(stamp, backup is not None))
            kill_point("publishing")  # (rolled back with the transaction)
            rename(conn, self.shadow, name)
            if conn.execute(f"SELECT count(*) FROM {ident(name)}").fetchone()[0] != rows \
                    or conn.execute(first.format(ident(name))).fetchone() != vector:
                raise StoreError(f"{self.display}: the renamed translation does not read back "
                                 "(this sqlite-vec renames its tables otherwise); nothing was "
                                 "published.")
        self.publishing = True
        return backup

    def end_publish(self, stamp):
        with writing(self.conn) as conn:
            _set_stamp(conn, self.address.name, final_stamp(stamp))

    def discard(self):
        if self.shadow is None or not self.address.path.exists():
            return
        try:
            with writing(self.conn) as conn:
                if table_type(conn, self.shadow) is not None:
                    drop(conn, self.shadow)
        except Exception:  # the error that led here is the one raised
            pass


# ------------------------------------------------------------------------ provenance stamp
def _get_stamp(conn, name):
    """The stamp of the ``vec0`` table ``name`` as stored (text), or ``None``."""
    tid = token(conn, name) if table_type(conn, name) is not None else None
    if tid is None or table_type(conn, STAMPS) is None:
        return None
    row = conn.execute(f"SELECT stamp FROM {ident(STAMPS)} WHERE id = ?", (tid,)).fetchone()
    return row[0] if row is not None else None


def _parse(text):
    try:
        stamp = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
    return stamp if isinstance(stamp, dict) else None


def _set_stamp(conn, name, stamp):
    """``stamp`` as the provenance of the ``vec0`` table ``name`` (a parameter: never SQL);
    inside the caller's transaction."""
    tid = token(conn, name, create=True)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {ident(STAMPS)} (id TEXT PRIMARY KEY, stamp TEXT "
                 "NOT NULL)")
    conn.execute(f"INSERT INTO {ident(STAMPS)} (id, stamp) VALUES (?, ?) ON CONFLICT (id) DO "
                 "UPDATE SET stamp = excluded.stamp", (tid, json.dumps(stamp, sort_keys=True)))


@EDGE.edge
def read_stamp(address):
    """The provenance stamp of the table at ``address``, or ``None`` (no file, no table, no
    stamp)."""
    if not address.path.is_file():
        return None
    return _parse(_get_stamp(connect(address), address.name))


@EDGE.edge
def write_stamp(address, stamp):
    """Record ``stamp`` as the provenance of the table at ``address``."""
    conn = connect(address)
    if table_type(conn, address.name) is None:
        raise StoreNotFoundError(f"{address}: no table {address.name[:80]!r} to stamp.")
    with writing(conn):
        _set_stamp(conn, address.name, stamp)


@EDGE.edge
def restore(address):
    """Swap the table and its backup (``skalign restore``) in one transaction; return the
    backup's address."""
    conn = connect(address)
    name, bname = address.name, backup_name(address.name)
    swap = f"{name}_skalign_swap"
    with lock_for(address):
        if table_type(conn, bname) is None:
            raise StoreNotFoundError(f"{address}: no backup table {bname[:80]!r} to restore; a "
                                     "backup is kept only by `skalign translate --replace`.")
        with writing(conn):
            present = table_type(conn, name) is not None
            if present:
                rename(conn, name, swap)
            rename(conn, bname, name)
            if present:
                rename(conn, swap, bname)
    return address.with_name(bname)
