"""DuckDB tables with a vector column (``FLOAT[n]``, searched with the vss extension's HNSW
indexes): ``duckdb:///PATH/FILE.duckdb?table=TABLE&column=COLUMN``.

Rows are read in primary-key order (else in ``rowid`` order) by one streaming query, as Arrow
batches. The output is a table in the output's database file (the shadow,
``TABLE_skalign_FP``) made from the source's columns (their types as the source's where both are
in one file, else as the rows' Arrow types map back) with the vector column as
``FLOAT[d_out]``, the source's ``NOT NULL`` columns and primary key; each batch is one ``INSERT``
of an Arrow table (DuckDB's bulk path) in its own transaction, so the shadow's row count is the
committed count. Every other column passes through as DuckDB gave it.

DuckDB cannot rename a table that has indexes: the publish, one transaction, moves an existing
output to its backup ``TABLE_skalign_backup`` with its indexes (:func:`~.indexes.move_table`),
sets the provenance stamp as the shadow's ``COMMENT`` (marked
:data:`~skalign._stores.journal.PUBLISHING` until the steps after the publish are done), renames
the shadow into place and builds the source's indexes on it: HNSW with the same metric and
connectivity (:mod:`.indexes`). A run killed before the commit leaves nothing of the publish
(DuckDB rolls it back when the file is opened again); after it, the same command finishes it
(:func:`skalign._stores.duckdb.recovery.recover_publish`). The file is checkpointed after the
publish: vss's HNSW persistence is experimental, and an index change left in the write-ahead
log is what it cannot always recover.

One writer per output: a lock in this user's private lock folder, and DuckDB's own lock of the
file (one process writes a file at a time: a second process gets a one-line error).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from contextlib import contextmanager

import numpy as np

from ...exceptions import StoreError, StoreExistsError, StoreNotFoundError
from ..base import StoreReader, StoreWriter
from ..databases.common import backup_name, lock_for, resume_point, shadow_name, shadow_prefix
from ..databases.edge import EngineEdge
from ..files.arrow import arrow_vectors, import_pyarrow
from ..journal import final_stamp, kill_point, pending_stamp
from ..live import PROVENANCE_KEY
from .connect import HERE, checkpoint, classify, errors, ident, literal, open_database, qualified
from .indexes import create_indexes, indexes_of, move_table

__all__ = ["PROVENANCE_COMMENT", "STAMP_PREFIX", "Reader", "Writer", "read_stamp", "write_stamp"]

#: the comment skalign sets on the provenance column it adds to a table (what says the column
#: is its own)
PROVENANCE_COMMENT = "skalign: each row's provenance (encoded or translated)"
#: the prefix of the provenance stamp skalign writes as the output table's comment
STAMP_PREFIX = "skalign provenance: "
#: the comment of a shadow table until its publish (what marks a leftover as skalign's own)
SHADOW_COMMENT = "skalign: a translation under way (its shadow table)"
#: the column types read as vectors
_VECTOR_TYPE = re.compile(r"(FLOAT|DOUBLE)\[(\d*)\]")
_NAMES = itertools.count()


def _classify(address, exc, msg):
    return classify(address, msg)


EDGE = EngineEdge(("duckdb", "_duckdb"), _classify, "DuckDB")


def table_exists(cur, table):
    return cur.execute(f"SELECT count(*) FROM duckdb_tables() WHERE {HERE} AND table_name = ?",
                       [table]).fetchone()[0] > 0


def columns_of(cur, table):
    """``(name, type, nullable, comment)`` of each column of ``table``, in order."""
    return cur.execute(
        "SELECT column_name, data_type, is_nullable, comment FROM duckdb_columns() WHERE "
        f"{HERE} AND table_name = ? ORDER BY column_index",
        [table]).fetchall()


def primary_key(cur, table):
    row = cur.execute(
        f"SELECT constraint_column_names FROM duckdb_constraints() WHERE {HERE} AND "
        "table_name = ? AND constraint_type = 'PRIMARY KEY'",
        [table]).fetchone()
    return list(row[0]) if row else []


def table_comment(cur, table):
    row = cur.execute(f"SELECT comment FROM duckdb_tables() WHERE {HERE} AND table_name = ?",
                      [table]).fetchone()
    return None if row is None else row[0]


def parse_stamp(text):
    """The stamp in a table's comment (``None``: none, or not skalign's)."""
    if not text or not text.startswith(STAMP_PREFIX):
        return None
    try:
        stamp = json.loads(text[len(STAMP_PREFIX):])
    except (ValueError, RecursionError):
        return None
    return stamp if isinstance(stamp, dict) else None


def set_comment(cur, table, stamp):
    """``stamp`` as the ``COMMENT`` of ``table`` (a literal: never SQL)."""
    cur.execute(f"COMMENT ON TABLE {qualified(table)} IS "
                f"{literal(STAMP_PREFIX + json.dumps(stamp, sort_keys=True))}")


@EDGE.edges
class Reader(StoreReader):
    has_rows = True
    kind = "duckdb"
    ids_origin = "duckdb ids"

    def __init__(self, address, column=None):
        self.address = address
        self._pa, _ = import_pyarrow(address)
        db = open_database(address)
        try:
            with errors(address, "cannot read the table"):
                self._open(db.cursor(), column)
        finally:
            db.close()

    def _open(self, cur, column):
        address, table = self.address, self.address.name
        if not table_exists(cur, table):
            raise StoreNotFoundError(f"{address}: no table {table!r} in {address.path}; check "
                                     "?table= (tables of the main schema).")
        cols = columns_of(cur, table)
        types = {c[0]: c[1] for c in cols}
        vector_cols = [c[0] for c in cols if _VECTOR_TYPE.fullmatch(c[1])]
        wanted = address.column or column
        if wanted is None:
            if len(vector_cols) != 1:
                raise StoreError(f"{address}: {'no' if not vector_cols else 'several'} vector "
                                 f"columns ({', '.join(vector_cols)}); name one with &column=.")
            wanted = vector_cols[0]
        if wanted not in types:
            raise StoreError(f"{address}: no column {wanted!r} in {table!r} (vector columns: "
                             f"{', '.join(vector_cols) or 'none'}); fix &column=.")
        match = _VECTOR_TYPE.fullmatch(types[wanted])
        if match is None:
            listed = ", ".join(vector_cols) or "no vector columns"
            raise StoreError(f"{address}: column {wanted!r} is {types[wanted]}, not FLOAT[n] "
                             f"or DOUBLE[n]; fix &column= ({listed}).")
        # skalign's own provenance column is not copied: the output's marks are what the run
        # that writes it writes
        self.dropped = [c[0] for c in cols if c[0] == PROVENANCE_KEY and c[3] ==
                        PROVENANCE_COMMENT]
        self.names = [c[0] for c in cols if c[0] not in self.dropped]
        self.column = wanted
        self.not_null = [c[0] for c in cols if not c[2] and c[0] not in self.dropped]
        self.key = primary_key(cur, table)
        self.indexes = indexes_of(cur, table, [c[0] for c in cols])
        self.dtype = np.dtype(np.float32 if match.group(1) == "FLOAT" else np.float64)
        self.n_rows = cur.execute(f"SELECT count(*) FROM {qualified(table)}").fetchone()[0]
        if match.group(2):
            self.dim = int(match.group(2))
        else:
            row = cur.execute(f"SELECT len({ident(wanted)}) FROM {qualified(table)} "
                              "LIMIT 1").fetchone()
            self.dim = int(row[0] or 0) if row else 0

    def _select(self):
        return (f"SELECT {', '.join(ident(n) for n in self.names)} FROM "
                f"{qualified(self.address.name)} ORDER BY "
                + (", ".join(ident(k) for k in self.key) if self.key else "rowid"))

    def _vectors(self, rb):
        return arrow_vectors(self._pa, rb.column(rb.schema.get_field_index(self.column)),
                             self.dim, self.address, self.column)

    def batches(self, batch_size, start=0):
        """``(vectors, rows, None)``: batches of exactly ``batch_size`` rows (the last one
        less) from row ``start`` on, ``rows`` an Arrow record batch with every column."""
        pa = self._pa
        db = open_database(self.address)
        cur = None
        try:
            cur = db.cursor()
            reader = cur.execute(self._select() + f" OFFSET {int(start)}").to_arrow_reader(
                batch_size)
            pending, held = [], 0
            for rb in reader:
                pending.append(rb)
                held += rb.num_rows
                while held >= batch_size:
                    table = pa.Table.from_batches(pending).combine_chunks()
                    head, rest = table.slice(0, batch_size), table.slice(batch_size)
                    yield from self._batch(head)
                    pending, held = rest.to_batches(), rest.num_rows
            if held:
                yield from self._batch(self._pa.Table.from_batches(pending).combine_chunks())
        finally:
            if cur is not None:
                cur.close()
            db.close()

    def _batch(self, table):
        rb = table.combine_chunks().to_batches()[0] if table.num_rows else None
        if rb is None:
            return
        yield self._vectors(rb), rb, None

    def row(self, rb, k):
        """Row ``k`` of a batch without its vector."""
        out = rb.slice(k, 1).to_pylist()[0]
        out.pop(self.column)
        return out

    def read_with_ids(self, batch_size=8192):
        """Rows are named by a one-column primary key (else an error)."""
        if len(self.key) != 1:
            has = "no primary key" if not self.key else "a primary key of several columns"
            raise StoreError(f"{self.address}: the table has {has}; pairs are matched by a "
                             "one-column primary key.")
        return super().read_with_ids(batch_size)

    def batch_ids(self, rows, n):
        return rows.column(rows.schema.get_field_index(self.key[0])).to_pylist()[:n]

    def take(self, positions, batch_size):
        """Rows at the sorted ``positions`` in the read order."""
        from ..databases.common import consecutive_runs

        db = open_database(self.address)
        vectors, rows = [], []
        try:
            cur = db.cursor()
            for first, count in consecutive_runs(positions):
                rb = cur.execute(self._select() + " LIMIT ? OFFSET ?",
                                 [int(count), int(first)]).to_arrow_table().combine_chunks()
                for b in rb.to_batches():
                    vectors.extend(self._vectors(b))
                    rows.extend(self.row(b, k) for k in range(b.num_rows))
        finally:
            db.close()
        return vectors, rows

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), self.dtype)


@EDGE.edges
class Writer(StoreWriter):
    pipelined = True  # DuckDB releases the GIL while it inserts

    def __init__(self, address, job):
        self.address, self.job, self.display = address, job, address.display
        self.src, self.table = job.reader, address.name
        self.db = self.cur = self.shadow = None
        self.created = False
        if not self.table or "\x00" in self.table:
            raise StoreError(f"{self.display}: the table name is empty or holds a NUL "
                             "character; give ?table=TABLE.")

    def _open(self, create=False):
        if self.db is None:
            self.created = create and not self.address.path.exists()
            self.db = open_database(self.address, create=create)
            self.cur = self.db.cursor()
        return self.cur

    @contextmanager
    def lock(self):
        with lock_for(self.address):
            yield self

    def exists(self):
        if not self.address.path.is_file():
            return False
        with errors(self.address, "cannot look the output up"):
            return table_exists(self._open(), self.table)

    def release(self):
        self.close()

    def begin(self, fp):
        """Resume this job's shadow or make it (the file, where missing); an error closes the
        file (the pipeline closes a writer only once it has begun)."""
        try:
            return self._begin(fp)
        except BaseException:
            self.close()
            raise

    def _begin(self, fp):
        self.fp = fp
        cur = self._open(create=True)
        if table_exists(cur, self.table):  # --replace moves it: refused here if it cannot be
            names = [c[0] for c in columns_of(cur, self.table)]
            for index in indexes_of(cur, self.table, names):
                if index.skip is not None:
                    raise StoreError(
                        f"{self.display}: {index.skip}; DuckDB cannot rename a table with "
                        "indexes, and --replace would lose it: drop it (DROP INDEX), or write "
                        "to another table.")
        self.shadow = shadow_name(self.table, fp)
        prefix = shadow_prefix(self.table)
        for other, comment in cur.execute(  # leftovers of other jobs: removed (only tables
                # skalign marked as its shadows: never a user's table of a similar name)
                f"SELECT table_name, comment FROM duckdb_tables() WHERE {HERE} AND "
                "starts_with(table_name, ?)",
                [prefix]).fetchall():
            if other != self.shadow and comment == SHADOW_COMMENT \
                    and re.fullmatch(re.escape(prefix) + "[0-9a-f]{12}", other):
                cur.execute(f"DROP TABLE {qualified(other)}")
        if table_exists(cur, self.shadow):
            if table_comment(cur, self.shadow) != SHADOW_COMMENT:
                raise StoreExistsError(
                    f"{self.display}: a table {self.shadow!r} that skalign did not make holds "
                    "the name of this translation's shadow; rename it, or write to another "
                    "table.")
            n = cur.execute(f"SELECT count(*) FROM {qualified(self.shadow)}").fetchone()[0]
            keep = resume_point(n, self.src.n_rows, self.job.batch_size)
            if keep == n:
                return keep
            # each batch commits whole: a part of one is not this job's shadow
            self.restarted = "its shadow table held part of a batch"
            cur.execute(f"DROP TABLE {qualified(self.shadow)}")
        self._create(cur)
        return 0

    def _create(self, cur):
        """The shadow: the source's columns with their types (the source's file is attached to
        the same DuckDB instance, the same file or another), the vector column ``FLOAT[d_out]``,
        the source's ``NOT NULL`` columns and primary key, and the comment that marks it."""
        src, d = self.src, int(self.job.d_out)
        replace = f"CAST(NULL AS FLOAT[{d}]) AS {ident(src.column)}"
        cols = ", ".join(ident(n) for n in src.names)
        source = open_database(src.address)
        cur.execute("BEGIN")
        try:
            cur.execute(f"CREATE TABLE {qualified(self.shadow)} AS SELECT * REPLACE "
                        f"({replace}) FROM (SELECT {cols} FROM {ident(source.alias)}.main."
                        f"{ident(src.address.name)}) LIMIT 0")
            for name in src.not_null:
                cur.execute(f"ALTER TABLE {qualified(self.shadow)} ALTER COLUMN {ident(name)} "
                            "SET NOT NULL")
            if src.key:
                cur.execute(f"ALTER TABLE {qualified(self.shadow)} ADD PRIMARY KEY "
                            f"({', '.join(ident(k) for k in src.key)})")
            cur.execute(f"COMMENT ON TABLE {qualified(self.shadow)} IS "
                        f"{literal(SHADOW_COMMENT)}")
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        finally:
            source.close()

    def write_unit(self, out, rb, shard, start):
        """One ``INSERT`` of the batch (its own transaction): the rows as read, the vector
        column replaced by ``out``."""
        pa = self._pa_module()
        d = int(self.job.d_out)
        values = pa.array(np.ascontiguousarray(out, np.float32).reshape(-1))
        vectors = pa.FixedSizeListArray.from_arrays(values, d)
        at = rb.schema.get_field_index(self.src.column)
        table = pa.Table.from_batches([rb]).set_column(at, self.src.column, vectors)
        view = f"skalign_batch_{next(_NAMES)}"
        cur = self.cur
        cur.register(view, table)
        try:
            cur.execute(f"INSERT INTO {qualified(self.shadow)} BY NAME SELECT * FROM "
                        f"{ident(view)}")
        finally:
            cur.unregister(view)

    def _pa_module(self):
        pa, _ = import_pyarrow(self.address)
        return pa

    def finish(self):
        for index in self.src.indexes:
            if index.skip is not None:
                print(f"skalign: warning: {index.skip}", file=sys.stderr)
        return self.cur.execute(f"SELECT count(*) FROM {qualified(self.shadow)}").fetchone()[0]

    def fetch(self, positions, rows=None):
        src, cur = self.src, self.cur
        cols = ", ".join(ident(n) for n in src.names)
        got_v, got_r = [], []
        for pos, row in zip(positions, rows if rows is not None else [None] * len(positions)):
            if src.key and row is not None:
                cond = " AND ".join(f"{ident(k)} = ?" for k in src.key)
                t = cur.execute(f"SELECT {cols} FROM {qualified(self.shadow)} WHERE {cond}",
                                [row[k] for k in src.key]).to_arrow_table()
            else:
                t = cur.execute(f"SELECT {cols} FROM {qualified(self.shadow)} ORDER BY rowid "
                                "LIMIT 1 OFFSET ?", [int(pos)]).to_arrow_table()
            if t.num_rows != 1:
                raise StoreError(f"{self.display}: verification failed: a row is missing from "
                                 "the translation; it was not published.")
            rb = t.combine_chunks().to_batches()[0]
            v = rb.column(rb.schema.get_field_index(src.column)).flatten().to_numpy()
            got_v.append(np.asarray(v, np.float32))
            got_r.append(src.row(rb, 0))
        vecs = np.stack(got_v) if got_v else np.empty((0, int(self.job.d_out)), np.float32)
        return vecs, got_r

    def publish(self, replace, stamp=None):
        """In one transaction: an existing output moved to its backup with its indexes, the
        stamp as the shadow's comment (marked :data:`PUBLISHING`), the shadow renamed into
        place and the source's indexes built on it; then a checkpoint."""
        cur, backup, moved = self.cur, None, []
        cur.execute("BEGIN")
        try:
            if table_exists(cur, self.table):
                if not replace:
                    raise StoreExistsError(f"{self.display}: exists; pass --replace.")
                bname = backup_name(self.table)
                if table_exists(cur, bname):
                    cur.execute(f"DROP TABLE {qualified(bname)}")
                names = [c[0] for c in columns_of(cur, self.table)]
                moved = move_table(cur, self.table, bname, names)
                backup = self.address.with_name(bname)
            if stamp is not None:
                set_comment(cur, self.shadow, pending_stamp(stamp, backup is not None))
            kill_point("publishing")  # (rolled back with the transaction)
            cur.execute(f"ALTER TABLE {qualified(self.shadow)} RENAME TO {ident(self.table)}")
            create_indexes(cur, self.table, self.src.indexes)
            if backup is not None:
                create_indexes(cur, backup.name, moved)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        self.publishing = True
        checkpoint(cur)
        return backup

    def end_publish(self, stamp):
        """The stamp without its :data:`PUBLISHING` mark."""
        set_comment(self.cur, self.table, final_stamp(stamp))
        checkpoint(self.cur)

    def discard(self):
        """Drop the shadow (best effort: the error that led here is the one raised); a database
        file this run created and left empty is removed."""
        if self.shadow is None:
            return
        try:
            cur = self._open()
            cur.execute(f"DROP TABLE IF EXISTS {qualified(self.shadow)}")
            empty = self.created and cur.execute(
                f"SELECT count(*) FROM duckdb_tables() WHERE {HERE}").fetchone()[0] == 0
        except Exception:
            return
        self.close()
        if empty:
            for path in (self.address.path, self.address.path.with_name(
                    self.address.path.name + ".wal")):
                path.unlink(missing_ok=True)

    def close(self):
        if self.db is not None:
            db, cur, self.db, self.cur = self.db, self.cur, None, None
            try:
                cur.close()
            finally:
                db.close()


def read_stamp(address):
    """The provenance stamp of a table (its ``COMMENT``), or ``None``."""
    if not address.path.is_file():
        return None
    db = open_database(address)
    try:
        with errors(address, "cannot read the table's comment"):
            return parse_stamp(table_comment(db.cursor(), address.name))
    finally:
        db.close()


def write_stamp(address, stamp):
    """Record ``stamp`` as the table's ``COMMENT``."""
    db = open_database(address)
    try:
        with errors(address, "cannot stamp the output table"):
            cur = db.cursor()
            set_comment(cur, address.name, stamp)
            checkpoint(cur)
    finally:
        db.close()
