"""PostgreSQL tables with a pgvector column:
``postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=TABLE&column=COLUMN`` (``?host=/socket/dir``
for a Unix socket; ``TABLE`` may be ``SCHEMA.TABLE``).

Rows are read in primary-key order (else physical order) by one binary ``COPY ... TO STDOUT`` in
one REPEATABLE READ snapshot. The output is a table in the same database made ``LIKE`` the
source (defaults, constraints, every other column as it is) with the vector column as
``vector(d_out)``, filled by one binary ``COPY ... FROM STDIN`` per batch, each in its own
transaction; two batches load at once on connections of their own (two server processes ingest),
their commits in order (so the shadow's row count is the committed count), while a thread reads
the next batch. The rows pass through as PostgreSQL sent them — every other column's bytes
copied, only the vector's replaced — so no value is converted to Python and back (only the
sampled rows the verification compares). Then the table is given the source's primary key,
unique constraints and indexes — HNSW/IVFFlat with the same operator class and options — built
again from the catalog's facts, never its SQL text, under short hashed names, and counted
(:mod:`.indexes`: an index on an expression or a partial one is skipped with a warning), and
renamed into place in one transaction; with ``--replace`` the existing ``OUTPUT`` is renamed to
``OUTPUT_skalign_backup`` (a name cut to fit 63 bytes with a hash where it would not) in that
same transaction, and the provenance stamp set as the shadow's ``COMMENT`` in that same
transaction too (so the table is never in place without its stamp), marked
:data:`~skalign._stores.journal.PUBLISHING` until the steps after the publish are done: a run
killed after the commit is finished by the same command run again
(:func:`skalign._stores.pgvector.recovery.recover_publish`).
A session-level advisory lock keyed on the output keeps a second run out (PostgreSQL drops it
when the session ends, also after SIGKILL). Errors are one line naming the address (password
masked) and the fix; a lost connection leaves the shadow to resume.
"""

from __future__ import annotations

import re
import struct
from contextlib import contextmanager

import numpy as np

from ...exceptions import StoreError
from ..base import StoreReader, StoreWriter
from ..databases.common import consecutive_runs, resume_point
from ..journal import final_stamp, kill_point, pending_stamp
from ..live import PROVENANCE_KEY

__all__ = ["PROVENANCE_COMMENT", "Reader", "Writer", "read_stamp", "write_stamp"]

#: the comment skalign sets on the provenance column it adds to a table (what says the column
#: is its own: :mod:`.live`)
PROVENANCE_COMMENT = "skalign: each row's provenance (encoded or translated)"

# the binary COPY stream's parsing, and the catalog's names, lookups, errors and
# indexes, live in modules of their own
from .copy import (  # noqa: E402
    _SIGNATURE,
    _TRAILER,
    RawRows,
    _copy_rows,
    _parse_copy,
    _raw_vectors,
)
from .indexes import (  # noqa: E402
    _mapped,
    _pg_error,
    _resolve,
    _schema_of,
    _split,
    _table_oid,
    derived_name,
    rebuild_indexes,
)


def lock_key(address, schema, table):
    """The advisory lock's key of an output table: a 64-bit hash of the server, the database and
    the resolved ``schema.table`` — no credential, and the same for every address of the table
    (``table=out`` and ``table=public.out``, a password in the URI or in ``PGPASSWORD``)."""
    import hashlib

    kind, host, port, database, _ = address.identity
    text = repr((kind, host, port, database, schema, table))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _connect(address, autocommit=True):
    import psycopg
    from pgvector.psycopg import register_vector

    try:
        conn = psycopg.connect(address.url, connect_timeout=5, autocommit=autocommit)
    except psycopg.Error as exc:
        text = " ".join(str(exc).split())
        low = text.lower()
        if "password authentication failed" in low or ("role" in low and "does not exist" in low) \
                or "no password supplied" in low or "authentication failed" in low:
            fix = "wrong credentials; check USER and PASSWORD in the address (or ~/.pgpass)"
        elif "database" in low and "does not exist" in low:
            fix = "no such database; check DB in the address"
        else:
            fix = "cannot reach the server; check HOST, PORT (or host=/socket/dir) and that " \
                  "PostgreSQL runs"
        detail = re.sub(r"password=\S+", "password=***", text)[:160]
        raise StoreError(f"{address}: {fix} ({detail}).") from None
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        conn.close()
        raise StoreError(f"{address}: the database has no pgvector extension; run CREATE "
                         "EXTENSION vector, or check the database.") from None
    return conn


def _columns(conn, oid):
    """Each column's name, type oid, type as ``format_type`` writes it, typmod, and the oid of
    the type its values are sent as: a domain's base type (followed through domains over
    domains), else its own."""
    return conn.execute(
        "SELECT a.attname, a.atttypid::int, format_type(a.atttypid, a.atttypmod), a.atttypmod, "
        "(WITH RECURSIVE chain(typid, typtype, base, depth) AS (SELECT t.oid, t.typtype, "
        "t.typbasetype, 0 FROM pg_type t WHERE t.oid = a.atttypid UNION ALL SELECT t.oid, "
        "t.typtype, t.typbasetype, c.depth + 1 FROM chain c JOIN pg_type t ON t.oid = c.base "
        "WHERE c.typtype = 'd' AND c.depth < 32) SELECT typid::int FROM chain ORDER BY depth "
        "DESC LIMIT 1) FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT "
        "a.attisdropped ORDER BY a.attnum", (oid,)).fetchall()


def _primary_key(conn, oid):
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(n, o)"
        " ON true JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.o", (oid,)).fetchall()
    return [r[0] for r in rows]


def _stack(vectors):
    """pgvector's binary loader gives ``Vector`` objects (or arrays in older versions)."""
    return np.asarray(np.stack([v.to_numpy() if hasattr(v, "to_numpy") else v
                                for v in vectors]), dtype=np.float32)


def _binary_loader(conn, oid, fmt):
    """psycopg's loader of values of the type ``oid`` (a base type: a domain's values are sent
    as its base type's), else its loader of unknown types, as a cursor picks them: a row
    decoded from the ``COPY`` stream equals the same row read by a query."""
    adapters = conn.adapters
    cls = adapters.get_loader(oid, fmt) or adapters.get_loader(0, fmt)  # 0: unknown types
    return cls(oid, conn)


class Reader(StoreReader):
    has_rows = True
    kind = "pgvector"
    ids_origin = "pgvector ids"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        self.address = address
        self.conn = _connect(address)
        try:
            with _mapped(address, "cannot read the table", "grant SELECT on it to the "
                         "address's user"):
                self._open(self.conn, column)
        except BaseException:
            self.conn.close()
            raise

    def _open(self, conn, column):
        from psycopg import sql

        address = self.address
        self.oid, self.ident = _resolve(conn, address)
        self.columns = _columns(conn, self.oid)
        vector_cols = [c[0] for c in self.columns if c[2].startswith("vector")]
        wanted = address.column or column
        if wanted is None:
            if len(vector_cols) != 1:
                raise StoreError(f"{address}: {'no' if not vector_cols else 'several'} vector "
                                 f"columns ({', '.join(vector_cols)}); name one with &column=.")
            wanted = vector_cols[0]
        names = [c[0] for c in self.columns]
        if wanted not in names:
            raise StoreError(f"{address}: no column {wanted!r} in {address.name} (vector "
                             f"columns: {', '.join(vector_cols) or 'none'}); fix &column=.")
        if wanted not in vector_cols:
            typ = self.columns[names.index(wanted)][2]
            raise StoreError(f"{address}: column {wanted!r} is {typ}, not a pgvector vector; "
                             f"fix &column= ({', '.join(vector_cols) or 'no vector columns'}).")
        # the source's provenance column, where skalign added it, is not copied: the output's
        # marks are what the run that writes it writes
        self.dropped = [n for n in names if n == PROVENANCE_KEY and conn.execute(
            "SELECT col_description(%s, attnum) FROM pg_attribute WHERE attrelid = %s AND "
            "attname = %s", (self.oid, self.oid, n)).fetchone()[0] == PROVENANCE_COMMENT]
        names = [n for n in names if n not in self.dropped]
        self.column, self.names = wanted, names
        self.vindex = names.index(wanted)
        self.key = _primary_key(conn, self.oid)
        self.n_rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            self.ident)).fetchone()[0]
        typmod = self.columns[self.vindex][3]
        if typmod > 0:
            self.dim = int(typmod)
        else:
            row = conn.execute(sql.SQL("SELECT vector_dims({}) FROM {} LIMIT 1").format(
                sql.Identifier(wanted), self.ident)).fetchone()
            self.dim = int(row[0]) if row else 0

    def order_by(self):
        from psycopg import sql

        if self.key:
            return sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        return sql.SQL("ctid")

    def from_row(self, offset):
        """``(condition, offset)``: SQL that starts a read in :meth:`order_by`'s order at row
        ``offset`` (an ``int``, or ``sql.Placeholder()`` for a parameter).

        With a primary key the read starts at that row's key, ``WHERE (key) >= (SELECT key ...
        OFFSET n LIMIT 1)``: the subquery skips ``n`` entries of the key's index, an index-only
        scan where the table's visibility map allows, and the read then starts there. ``ORDER
        BY key OFFSET n`` fetched every row before it from the table (a resumed run read the
        rows its crashed run had translated once more, and the verification's read-back of the
        sampled rows they hold once per sample). Without a key (the order of ``ctid``), the
        ``OFFSET``."""
        from psycopg import sql

        at = offset if isinstance(offset, sql.Composable) else sql.Literal(int(offset))
        if not self.key:
            return sql.SQL(""), sql.SQL(" OFFSET {}").format(at)
        if not isinstance(offset, sql.Composable) and offset == 0:
            return sql.SQL(""), sql.SQL("")
        keys = self.order_by()
        return sql.SQL(" WHERE ({}) >= (SELECT {} FROM {} ORDER BY {} OFFSET {} LIMIT 1)").format(
            keys, keys, self.ident, keys, at), sql.SQL("")

    def batches(self, batch_size, start=0):
        """``(vectors, RawRows, None)`` per batch from row ``start`` on, read one batch ahead in
        a thread of its own: the server sends rows at the pace of a process that shares the
        cores with the loading ones, and the wait for it (a ``select``, without the GIL) and the
        parsing overlap the product of the batch before instead of adding to it."""
        import queue
        import threading

        ahead, stop, end = queue.Queue(maxsize=1), threading.Event(), object()

        def put(item):
            while not stop.is_set():
                try:
                    ahead.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def run():
            gen = self._batches(batch_size, start)
            try:
                for item in gen:
                    if not put(item):
                        return
                put(end)
            except BaseException as exc:  # raised in the consuming thread
                put(_pg_error(exc, self.address, "cannot read the table"))
            finally:
                gen.close()

        thread = threading.Thread(target=run, name="skalign-read", daemon=True)
        thread.start()
        try:
            while (item := ahead.get()) is not end:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()

    def _batches(self, batch_size, start):
        from psycopg import sql

        conn = _connect(self.address, autocommit=False)
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            where, offset = self.from_row(start)
            query = sql.SQL("COPY (SELECT {} FROM {}{} ORDER BY {}{}) TO STDOUT "
                            "(FORMAT BINARY)").format(
                sql.SQL(", ").join(sql.Identifier(n) for n in self.names),
                self.ident, where, self.order_by(), offset)
            with conn.cursor() as cur, cur.copy(query):
                for raw in _parse_copy(_copy_rows(conn.pgconn), self.vindex, batch_size,
                                       self.address, self.column):
                    yield _raw_vectors(raw, self.dim, self.address), raw, None
        finally:
            conn.close()

    def row(self, rows, k):
        """Row ``k`` of a batch without its vector, decoded as psycopg decodes binary values."""
        if isinstance(rows, RawRows):
            rows = [self._decode(rows, k)]
            k = 0
        return {n: v for i, (n, v) in enumerate(zip(self.names, rows[k])) if i != self.vindex}

    def read_with_ids(self, batch_size=8192):
        """Rows are named by a one-column primary key (else an error)."""
        if len(self.key) != 1:
            has = "no primary key" if not self.key else "a primary key of several columns"
            raise StoreError(f"{self.address}: the table has {has}; pairs are matched by a "
                             "one-column primary key.")
        return super().read_with_ids(batch_size)

    def batch_ids(self, rows, n):
        return [self.row(rows, k)[self.key[0]] for k in range(n)]

    def take(self, positions, batch_size):
        """Rows at ``positions`` (sorted) in the read order, decoded as :meth:`row` decodes them:
        one query per run of consecutive positions."""
        from psycopg import sql

        where, offset = self.from_row(sql.Placeholder())
        query = sql.SQL("SELECT {} FROM {}{} ORDER BY {}{} LIMIT %s").format(
            sql.SQL(", ").join(sql.Identifier(n) for n in self.names),
            self.ident, where, self.order_by(), offset)
        cur = self.conn.cursor(binary=True)
        with _mapped(self.address, "cannot read the table"):
            got = [r for run in consecutive_runs(positions)
                   for r in cur.execute(query, run).fetchall()]
        return list(_stack([r[self.vindex] for r in got])), [self.row(got, k)
                                                               for k in range(len(got))]

    def _decode(self, raw, k):
        from psycopg.pq import Format

        if not hasattr(self, "_loaders"):
            self._loaders = [_binary_loader(self.conn, c[4], Format.BINARY)
                             for c in self.columns]
        buf, (start, _, _, _) = raw.buf, raw.spans[k]
        (nf,) = struct.unpack_from(">h", buf, start)
        p, out = start + 2, []
        for i in range(nf):
            (ln,) = struct.unpack_from(">i", buf, p)
            p += 4
            if i == self.vindex or ln < 0:
                out.append(None)
            else:
                out.append(self._loaders[i].load(buf[p:p + ln]))
            p += max(ln, 0)
        return out

    def read_all(self):
        parts = [v for v, _, _ in self.batches(8192)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


class Writer(StoreWriter):
    normalizes = False
    encodes = True
    pipelined = True  # its own connections; a COPY waits on the server without the GIL

    def __init__(self, address, job):
        self.address, self.job, self.display = address, job, address.display
        self.src = job.reader
        self.conn = _connect(address)
        self._idle, self._loaders = [], []  # the loading connections: free ones, all
        self._shadow_id = None
        try:
            self._given_schema, self.table = _split(address.name, self.display)
            with _mapped(self.display, "cannot open the output's schema"):
                self.pg_schema, may_create = _schema_of(self.conn, self._given_schema,
                                                        self.display)
            if not may_create:
                raise StoreError(f"{self.display}: cannot create the output table: permission "
                                 f"denied for schema {self.pg_schema!r}; grant CREATE on the "
                                 "schema or write to another schema.")
        except BaseException:
            self.conn.close()
            raise

    @property
    def encode_depth(self):
        """Batches loaded at once: ``ENCODE_DEPTH`` where the source has a primary key, one at
        a time where it has none. Two ``COPY``s at once interleave their pages, and the rows of
        a table without a key are found, and ordered, by ``ctid`` (the verification reads the
        sampled rows back from the shadow that way): loaded in parallel, a translation of such
        a table failed its verification from a few batches on."""
        from ..base import ENCODE_DEPTH

        return ENCODE_DEPTH if self.src.key else 1

    @contextmanager
    def lock(self):
        conn = _connect(self.address)
        try:
            _advisory_lock(conn, self.address, self.pg_schema, self.table)
            yield self
        finally:
            conn.close()  # ends the session, so releases the lock

    def exists(self):
        with _mapped(self.display, "cannot look the output up"):
            return _table_oid(self.conn, self.pg_schema, self.table) is not None

    def _named(self, name):
        from psycopg import sql

        return sql.Identifier(self.pg_schema, name)

    def _table(self, name):
        """``name`` as the address names its table: qualified where it is."""
        return f"{self._given_schema}.{name}" if self._given_schema else name

    def begin(self, fp):
        from psycopg import sql

        self.fp = fp
        name = derived_name(self.table, fp[:12])  # TABLE_skalign_FP, hashed where too long
        self.shadow, self._shadow_name = self._table(name), name  # shadow: as the address names it
        self._shadow_id = self._named(name)
        prefix = derived_name(self.table, "0" * 12)[:-12]
        with _mapped(self.display, "cannot create the output table", "grant CREATE on the "
                     "schema or write to another schema"):
            for (other,) in self.conn.execute(  # leftovers of other jobs: removed
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
                    "c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND "
                    "starts_with(c.relname, %s)", (self.pg_schema, prefix)).fetchall():
                if other != name and re.fullmatch(re.escape(prefix) + "[0-9a-f]{12}", other):
                    self.conn.execute(sql.SQL("DROP TABLE {}").format(self._named(other)))
            if _table_oid(self.conn, self.pg_schema, name) is not None:
                n = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    self._shadow_id)).fetchone()[0]
                return resume_point(n, self.src.n_rows, self.job.batch_size)
            with self.conn.transaction():
                self.conn.execute(sql.SQL(
                    "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING "
                    "COMMENTS INCLUDING STORAGE INCLUDING COMPRESSION)").format(
                        self._shadow_id, self.src.ident))
                self.conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE vector({})")
                                  .format(self._shadow_id, sql.Identifier(self.src.column),
                                          sql.Literal(int(self.job.d_out))))
                for name in self.src.dropped:
                    self.conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(
                        self._shadow_id, sql.Identifier(name)))
        return 0

    def encode_unit(self, out, raw, shard, start):
        """Load a batch into the shadow in a transaction of its own, left open for
        :meth:`write_unit` to commit: the write-behind runs ``ENCODE_DEPTH`` of these at once, on
        connections of their own, so that as many server processes ingest (a ``COPY`` runs on
        one core; 200,000 768-d rows took 4.5 s on one connection and 2.9 s on two) while the
        commits stay in order and the shadow's committed rows a prefix of the input's. A crash
        or a failed batch leaves the open ones to the server, which rolls them back."""
        conn = self._idle_connection()
        try:
            with _mapped(self.display, "cannot load rows into the output"):
                conn.execute("BEGIN")
                self._copy(conn, out, raw, start)
        except BaseException:
            self._drop(conn)
            raise
        return conn

    def write_unit(self, conn, raw, shard, start):
        """Commit the batch :meth:`encode_unit` loaded on ``conn`` (``WriteBehind`` loads every
        batch before its write)."""
        try:
            with _mapped(self.display, "cannot load rows into the output"):
                conn.execute("COMMIT")
        except BaseException:
            self._drop(conn)
            raise
        self._idle.append(conn)

    def _idle_connection(self):
        try:
            return self._idle.pop()
        except IndexError:
            conn = _connect(self.address)
            self._loaders.append(conn)
            return conn

    def _drop(self, conn):
        """Close a loading connection (the server rolls back its open transaction)."""
        if conn in self._loaders:
            self._loaders.remove(conn)
        conn.close()

    def _copy(self, conn, out, raw, start=0):
        from psycopg import sql

        d = self.job.d_out
        # each row's vector field: length word, int16 dimensions, int16 unused, the values
        vec = np.empty((len(out), d + 2), dtype=">f4")
        with np.errstate(over="ignore", invalid="ignore"):
            vec[:, 2:] = out
        finite = np.isfinite(vec[:, 2:]).all(axis=1)
        if not finite.all():  # pgvector refuses them: said here, before anything is sent
            bad = start + int(np.flatnonzero(~finite)[0])
            raise StoreError(f"{self.display}: row {bad} translates to numbers a float32 cannot "
                             "hold (infinite or NaN), which pgvector does not store; rescale "
                             "that row of the input or check the model.")
        words = vec.view(">i4")
        words[:, 0] = 4 + 4 * d
        vec.view(">i2")[:, 2:4] = (d, 0)
        vec = memoryview(vec).cast("B")  # slices of views: the bytes are copied once, by join
        width = 4 * (d + 2)
        buf, parts = memoryview(raw.buf), [_SIGNATURE]
        for k, (rs, vs, ve, re_) in enumerate(raw.spans):
            parts += (buf[rs:vs], vec[k * width:(k + 1) * width], buf[ve:re_])
        parts.append(_TRAILER)
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self._shadow_id, sql.SQL(", ").join(sql.Identifier(n) for n in self.src.names))
        with conn.cursor() as cur, cur.copy(query) as copy:
            copy.write(b"".join(parts))

    def finish(self):
        """Build the source's indexes on the shadow (:func:`rebuild_indexes`: from the
        catalog's facts, never its SQL text; those it cannot describe are skipped, each with a
        line on standard error, kept in ``skipped_indexes``); return the shadow's rows."""
        import sys

        from psycopg import sql

        with _mapped(self.display, "cannot build the output's indexes", "the address's user "
                     "must own the output's schema objects"):
            shadow = _table_oid(self.conn, self.pg_schema, self._shadow_name)
            self.skipped_indexes = rebuild_indexes(self.conn, self.src.oid, shadow,
                                                   self._shadow_id, (self.pg_schema, self.table),
                                                   self.display)
            for line in self.skipped_indexes:
                print(f"skalign: warning: {line}", file=sys.stderr)
            return self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                self._shadow_id)).fetchone()[0]

    def fetch(self, positions, rows=None):
        with _mapped(self.display, "cannot read the translation back for its verification"):
            return self._fetch(positions, rows)

    def _fetch(self, positions, rows):
        from psycopg import sql

        cols = sql.SQL(", ").join(sql.Identifier(n) for n in self.src.names)
        got = []
        cur = self.conn.cursor(binary=True)  # values decoded as the source's sampled rows
        for pos, row in zip(positions, rows):
            if self.src.key:
                cond = sql.SQL(" AND ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(k)) for k in self.src.key)
                r = cur.execute(sql.SQL("SELECT {} FROM {} WHERE {}").format(
                    cols, self._shadow_id, cond), [row[k] for k in self.src.key]).fetchone()
            else:
                r = cur.execute(sql.SQL("SELECT {} FROM {} ORDER BY ctid OFFSET %s LIMIT 1")
                                .format(cols, self._shadow_id), (int(pos),)).fetchone()
            if r is None:
                raise StoreError(f"{self.display}: verification failed: a row is missing from "
                                 "the translation; it was not published.")
            got.append(r)
        vecs = _stack([r[self.src.vindex] for r in got])
        return vecs, [self.src.row(got, k) for k in range(len(got))]

    def publish(self, replace, stamp=None):
        """Rename the shadow into place, in one transaction with the backup's rename and the
        shadow's stamp (``COMMENT``, marked :data:`PUBLISHING`)."""
        from psycopg import sql

        from ...exceptions import StoreExistsError

        backup = None
        with _mapped(self.display, "cannot rename the translation into place", "the address's "
                     "user must own the output table"), self.conn.transaction():
            if self.exists():
                if not replace:
                    raise StoreExistsError(f"{self.display}: exists; pass --replace.")
                bname = derived_name(self.table, "backup")
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._named(bname)))
                self.conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    self._named(self.table), sql.Identifier(bname)))
                backup = self.address.with_name(self._table(bname))
            if stamp is not None:
                _comment(self.conn, self._shadow_id, pending_stamp(stamp, backup is not None))
            kill_point("publishing")  # (rolled back with the transaction)
            self.conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                self._shadow_id, sql.Identifier(self.table)))
        self.publishing = True
        return backup

    def end_publish(self, stamp):
        """The stamp without its :data:`PUBLISHING` mark."""
        with _mapped(self.display, "cannot stamp the output table"):
            _comment(self.conn, self._named(self.table), final_stamp(stamp))

    def discard(self):
        """Drop the shadow; where the connection broke, on a new one (best effort: the error
        that led here is the one raised)."""
        from psycopg import sql

        if self._shadow_id is None:
            return
        drop = sql.SQL("DROP TABLE IF EXISTS {}").format(self._shadow_id)
        try:
            self.conn.execute(drop)
        except Exception:
            try:
                with _connect(self.address) as conn:
                    conn.execute(drop)
            except Exception:
                pass

    def close(self):
        """Close the loading connections; a batch loaded but not committed is rolled back."""
        for conn in self._loaders:
            conn.close()
        self._idle, self._loaders = [], []


#: the prefix of the provenance stamp skalign writes as the output table's comment
STAMP_PREFIX = "skalign provenance: "


def read_stamp(address):
    """The provenance stamp of a table (its ``COMMENT``), or ``None``."""
    import json

    conn = _connect(address)
    try:
        with _mapped(address, "cannot read the table's comment"):
            schema, table = _split(address.name, address)
            schema, _ = _schema_of(conn, schema, address)
            oid = _table_oid(conn, schema, table)
            if oid is None:
                return None
            text = conn.execute("SELECT obj_description(%s, 'pg_class')", (oid,)).fetchone()[0]
    finally:
        conn.close()
    if not text or not text.startswith(STAMP_PREFIX):
        return None
    try:
        stamp = json.loads(text[len(STAMP_PREFIX):])
    except ValueError:
        return None
    return stamp if isinstance(stamp, dict) else None


def write_stamp(address, stamp):
    """Record ``stamp`` as the table's ``COMMENT`` (a literal: never SQL)."""
    from psycopg import sql

    conn = _connect(address)
    try:
        with _mapped(address, "cannot stamp the output table"):
            schema, table = _split(address.name, address)
            schema, _ = _schema_of(conn, schema, address)
            _comment(conn, sql.Identifier(schema, table), stamp)
    finally:
        conn.close()


def _comment(conn, ident, stamp):
    """``stamp`` as the ``COMMENT`` of the table ``ident`` (a literal: never SQL)."""
    import json

    from psycopg import sql

    conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(
        ident, sql.Literal(STAMP_PREFIX + json.dumps(stamp, sort_keys=True))))


def _advisory_lock(conn, address, schema, table):
    """Take the output's advisory lock on ``conn``'s session, or fail at once."""
    got = conn.execute("SELECT pg_try_advisory_lock(%s)",
                       (lock_key(address, schema, table),)).fetchone()[0]
    if not got:
        raise StoreError(f"{address.display}: another skalign translate is writing this "
                         "table; wait for it to finish (or stop it, then run the same "
                         "command again to resume).")
