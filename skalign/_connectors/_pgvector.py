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
sampled rows the verification compares). Then the table is given the source's primary key and
indexes — HNSW/IVFFlat with the same operator class and options — and renamed into place in one
transaction; with ``--replace`` the existing ``OUTPUT`` is renamed to ``OUTPUT_skalign_backup``
in that same transaction. A session-level advisory lock keyed on the output keeps a second run
out (PostgreSQL drops it when the session ends, also after SIGKILL).
"""

from __future__ import annotations

import re
import struct
from contextlib import contextmanager

import numpy as np

from ..exceptions import StoreError
from ._common import backup_name, consecutive_runs, resume_point, shadow_name, shadow_prefix

__all__ = ["Reader", "Writer", "restore"]

#: the start of a binary COPY stream (signature, flags, no header extension), and its end
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_TRAILER = b"\xff\xff"
_UNPACK_I = struct.Struct(">i").unpack_from


class RawRows:
    """A batch of rows as a binary COPY stream holds them: ``buf`` and, per row, the offsets of
    the row, of its vector field (its length word) and of the end of both."""

    def __init__(self, buf, spans):
        self.buf, self.spans = buf, spans

    def __len__(self):
        return len(self.spans)


def _parse_copy(chunks, vindex, batch_size, where, column):
    """Batches of :class:`RawRows` from the chunks of a binary ``COPY ... TO STDOUT``.

    libpq hands over one row per chunk: then a batch's rows are found with array arithmetic
    over all its rows at once (:func:`_rows_of`). Chunks cut otherwise (nothing promises one
    row each) go through :func:`_parse_stream`, which follows the stream field by field.
    """
    from itertools import chain, islice

    chunks = iter(chunks)
    head = bytearray()
    for chunk in chunks:
        head += chunk
        if len(head) >= 19 and len(head) >= 19 + _UNPACK_I(head, 15)[0]:
            break
    else:
        return
    if bytes(head[:11]) != _SIGNATURE[:11]:
        raise StoreError(f"{where}: unexpected COPY data from the server.")
    rest = bytes(head[19 + _UNPACK_I(head, 15)[0]:])  # the first row, sent with the header
    first = [rest] if rest else []
    while True:
        batch = first + list(islice(chunks, batch_size - len(first)))
        first = []
        done = bool(batch) and bytes(batch[-1]) == _TRAILER
        rows = batch[:-1] if done else batch
        raw = _rows_of(rows, vindex, where, column) if rows else None
        if rows and raw is None:  # not one row per chunk
            yield from _parse_stream(chain(batch, chunks), vindex, batch_size, where, column)
            return
        if raw is not None:
            yield raw
        if done or len(batch) < batch_size:
            return


def _be_ints(a, pos, width):
    """The big-endian signed integers of ``width`` bytes at the offsets ``pos`` of ``a``."""
    return a[pos[:, None] + np.arange(width)].view(f">i{width}")[:, 0].astype(np.int64)


def _rows_of(rows, vindex, where, column):
    """The :class:`RawRows` of chunks that each hold one whole row, or ``None`` where they do
    not: every row's fields walked at once, a field at a time."""
    lens = np.fromiter(map(len, rows), np.int64, len(rows))
    buf = b"".join(rows)
    a = np.frombuffer(buf, np.uint8)
    ends = np.cumsum(lens)
    starts = ends - lens
    if (lens < 2).any():
        return None
    nf = _be_ints(a, starts, 2)
    if (nf != nf[0]).any() or not vindex < nf[0]:
        return None
    p, null = starts + 2, False
    for i in range(int(nf[0])):
        if (p + 4 > ends).any():
            return None
        ln = _be_ints(a, p, 4)
        if i == vindex:
            vs, null = p, bool((ln < 0).any())
        p = p + 4 + np.maximum(ln, 0)
        if i == vindex:
            ve = p
    if (p != ends).any():
        return None
    if null:
        raise StoreError(f"{where}: column {column!r} has NULL vectors; drop or re-embed those "
                         "rows first.")
    return RawRows(buf, list(zip(starts.tolist(), vs.tolist(), ve.tolist(), ends.tolist())))


def _parse_stream(chunks, vindex, batch_size, where, column):
    """:func:`_parse_copy` on chunks cut anywhere (after the header), field by field."""
    unpack_h, unpack_i = struct.Struct(">h").unpack_from, _UNPACK_I
    acc = bytearray()  # the rows of the batch being gathered, then what has come of the next
    pos, spans = 0, []
    for chunk in chunks:
        acc += chunk
        end = len(acc)
        while pos + 2 <= end:
            (nf,) = unpack_h(acc, pos)
            if nf == -1:  # the trailer
                if spans:
                    yield RawRows(bytes(acc[:pos]), spans)
                return
            p, vs, ve = pos + 2, 0, 0
            for i in range(nf):
                if p + 4 > end:
                    p = end + 1
                    break
                (ln,) = unpack_i(acc, p)
                if i == vindex:
                    if ln < 0:
                        raise StoreError(f"{where}: column {column!r} has NULL vectors; drop or "
                                         "re-embed those rows first.")
                    vs = p
                p += 4 + max(ln, 0)
                if i == vindex:
                    ve = p
            if p > end:  # the row continues in the next chunk
                break
            spans.append((pos, vs, ve, p))
            pos = p
            if len(spans) == batch_size:
                yield RawRows(bytes(acc[:pos]), spans)
                del acc[:pos]
                pos, spans, end = 0, [], len(acc)
    if spans:
        yield RawRows(bytes(acc[:pos]), spans)


def _copy_rows(pgconn):
    """The data of a ``COPY ... TO STDOUT`` psycopg has started, straight from libpq (iterating
    psycopg's ``Copy`` costs a generator and a wait a row, most of the read's time). The rows
    libpq holds are taken without blocking; when it holds none, the wait for the socket is a
    ``select`` that releases the GIL (a blocking ``PQgetCopyData`` holds it, keeping the writing
    threads from running while the server sends). The parser stops at the stream's trailer,
    which comes before libpq's end of copy, so psycopg still finishes the ``COPY`` when its
    block exits."""
    import select

    get, fd = pgconn.get_copy_data, pgconn.socket
    while True:
        nbytes, data = get(1)
        if nbytes > 0:
            yield data
        elif nbytes == 0:  # nothing buffered: wait for the server
            select.select([fd], [], [])
            pgconn.consume_input()
        else:  # the end (or an error, which psycopg raises when the block exits)
            return


def _raw_vectors(raw, dim, where):
    """The vectors of a :class:`RawRows` batch (pgvector's binary form: int16 dimensions,
    int16 unused, big-endian float32 values)."""
    buf = raw.buf
    parts = [buf[vs + 4: ve] for _, vs, ve, _ in raw.spans]
    sizes = {ve - vs - 4 for _, vs, ve, _ in raw.spans}
    if sizes != {4 + 4 * dim}:
        raise StoreError(f"{where}: vectors of another length than {dim} in the table; all "
                         "vectors must have the same length.")
    return np.frombuffer(b"".join(parts), dtype=">f4").reshape(len(parts), dim + 1)[:, 1:] \
        .astype(np.float32)


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


def _split(name):
    schema, _, table = name.rpartition(".")
    return schema or None, table


def _ident(name):
    from psycopg import sql

    schema, table = _split(name)
    return sql.Identifier(schema, table) if schema else sql.Identifier(table)


def _regclass(conn, name):
    return conn.execute("SELECT to_regclass(%s)::oid", (_qualified(name),)).fetchone()[0]


def _qualified(name):
    schema, table = _split(name)
    return f'"{schema}"."{table}"' if schema else f'"{table}"'


def _columns(conn, oid):
    return conn.execute(
        "SELECT attname, atttypid::int, format_type(atttypid, atttypmod), atttypmod FROM "
        "pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,)).fetchall()


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


class Reader:
    kind = "pgvector"
    schema = None
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        from psycopg import sql

        self.address = address
        self.conn = conn = _connect(address)
        self.oid = _regclass(conn, address.name)
        if self.oid is None:
            names = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', "
                "'information_schema') ORDER BY 1").fetchall()]
            raise StoreError(f"{address}: no table {address.name!r} (tables: "
                             f"{', '.join(names) or 'none'}); fix ?table=.")
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
        self.column, self.names = wanted, names
        self.vindex = names.index(wanted)
        self.key = _primary_key(conn, self.oid)
        self.n_rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            _ident(address.name))).fetchone()[0]
        typmod = self.columns[self.vindex][3]
        if typmod > 0:
            self.dim = int(typmod)
        else:
            row = conn.execute(sql.SQL("SELECT vector_dims({}) FROM {} LIMIT 1").format(
                sql.Identifier(wanted), _ident(address.name))).fetchone()
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
            keys, keys, _ident(self.address.name), keys, at), sql.SQL("")

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
                put(exc)
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
                _ident(self.address.name), where, self.order_by(), offset)
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

    def take(self, positions, batch_size):
        """Rows at ``positions`` (sorted) in the read order, decoded as :meth:`row` decodes them:
        one query per run of consecutive positions."""
        from psycopg import sql

        where, offset = self.from_row(sql.Placeholder())
        query = sql.SQL("SELECT {} FROM {}{} ORDER BY {}{} LIMIT %s").format(
            sql.SQL(", ").join(sql.Identifier(n) for n in self.names),
            _ident(self.address.name), where, self.order_by(), offset)
        cur = self.conn.cursor(binary=True)
        got = [r for run in consecutive_runs(positions) for r in cur.execute(query, run).fetchall()]
        return list(_stack([r[self.vindex] for r in got])), [self.row(got, k)
                                                               for k in range(len(got))]

    def _decode(self, raw, k):
        from psycopg.pq import Format

        if not hasattr(self, "_loaders"):
            self._loaders = [self.conn.adapters.get_loader(c[1], Format.BINARY)(c[1], self.conn)
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


class Writer:
    normalizes = False
    pipelined = True  # its own connections; a COPY waits on the server without the GIL

    def __init__(self, address, job):
        self.address, self.job, self.display = address, job, address.display
        self.src = job.reader
        self.conn = _connect(address)
        self._idle, self._loaders = [], []  # the loading connections: free ones, all
        schema, table = _split(address.name)
        if len(shadow_name(table, "0" * 12)) > 63:
            raise StoreError(f"{address}: table name too long for its shadow "
                             f"({len(table)} characters, at most 42); choose a shorter name.")

    @property
    def encode_depth(self):
        """Batches loaded at once: ``ENCODE_DEPTH`` where the source has a primary key, one at
        a time where it has none. Two ``COPY``s at once interleave their pages, and the rows of
        a table without a key are found, and ordered, by ``ctid`` (the verification reads the
        sampled rows back from the shadow that way): loaded in parallel, a translation of such
        a table failed its verification from a few batches on."""
        from .._stores import ENCODE_DEPTH

        return ENCODE_DEPTH if self.src.key else 1

    @contextmanager
    def lock(self):
        key = f"skalign:{self.address.identity}"
        conn = _connect(self.address)
        try:
            got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                               (key,)).fetchone()[0]
            if not got:
                raise StoreError(f"{self.display}: another skalign translate is writing this "
                                 "table; wait for it to finish (or stop it, then run the same "
                                 "command again to resume).")
            yield self
        finally:
            conn.close()  # ends the session, so releases the lock

    def exists(self):
        return _regclass(self.conn, self.address.name) is not None

    def _table(self, name):
        schema, _ = _split(self.address.name)
        return f"{schema}.{name}" if schema else name

    def begin(self, fp):
        from psycopg import sql

        schema, table = _split(self.address.name)
        self.fp = fp
        self.shadow = self._table(shadow_name(table, fp))
        leftovers = self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = coalesce(%s, current_schema()) "
            "AND starts_with(tablename, %s) AND tablename <> %s AND tablename <> %s",
            (schema, shadow_prefix(table), shadow_name(table, fp), backup_name(table))).fetchall()
        for (name,) in leftovers:
            self.conn.execute(sql.SQL("DROP TABLE {}").format(_ident(self._table(name))))
        if _regclass(self.conn, self.shadow) is not None:
            n = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                _ident(self.shadow))).fetchone()[0]
            return resume_point(n, self.src.n_rows, self.job.batch_size)
        with self.conn.transaction():
            self.conn.execute(sql.SQL(
                "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING "
                "COMMENTS INCLUDING STORAGE INCLUDING COMPRESSION)").format(
                    _ident(self.shadow), _ident(self.src.address.name)))
            self.conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE vector({})").format(
                _ident(self.shadow), sql.Identifier(self.src.column),
                sql.Literal(int(self.job.d_out))))
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
            conn.execute("BEGIN")
            self._copy(conn, out, raw)
        except BaseException:
            self._drop(conn)
            raise
        return conn

    def write_unit(self, conn, raw, shard, start):
        """Commit the batch :meth:`encode_unit` loaded on ``conn`` (``_WriteBehind`` loads every
        batch before its write)."""
        try:
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

    def _copy(self, conn, out, raw):
        from psycopg import sql

        d = self.job.d_out
        # each row's vector field: length word, int16 dimensions, int16 unused, the values
        vec = np.empty((len(out), d + 2), dtype=">f4")
        vec[:, 2:] = out
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
            _ident(self.shadow), sql.SQL(", ").join(sql.Identifier(n) for n in self.src.names))
        with conn.cursor() as cur, cur.copy(query) as copy:
            copy.write(b"".join(parts))

    def _index_statements(self):
        """The source's indexes (vector ones with their operator class and options) and
        primary key, as statements on the shadow table, with names unique to this job."""
        from psycopg import sql

        out = []
        if self.src.key:
            out.append(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                _ident(self.shadow), sql.SQL(", ").join(sql.Identifier(k) for k in self.src.key)))
        defs = self.conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON "
            "c.oid = i.indexrelid WHERE i.indrelid = %s AND NOT i.indisprimary ORDER BY 1",
            (self.src.oid,)).fetchall()
        for k, (_, definition) in enumerate(defs):
            name = f"{_split(self.shadow)[1]}_i{k}"
            body = definition.split(" USING ", 1)[1]
            unique = "UNIQUE " if definition.startswith("CREATE UNIQUE") else ""
            out.append(sql.SQL("CREATE {}INDEX IF NOT EXISTS {} ON {} USING {}").format(
                sql.SQL(unique), sql.Identifier(name), _ident(self.shadow), sql.SQL(body)))
        return out

    def finish(self):
        from psycopg import sql

        has_pk = self.conn.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = to_regclass(%s) AND indisprimary",
            (_qualified(self.shadow),)).fetchone()[0]
        for stmt in self._index_statements():
            if has_pk and stmt.as_string(self.conn).startswith("ALTER TABLE"):
                continue
            self.conn.execute(stmt)
        return self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            _ident(self.shadow))).fetchone()[0]

    def fetch(self, positions, rows):
        from psycopg import sql

        cols = sql.SQL(", ").join(sql.Identifier(n) for n in self.src.names)
        got = []
        cur = self.conn.cursor(binary=True)  # values decoded as the source's sampled rows
        for pos, row in zip(positions, rows):
            if self.src.key:
                cond = sql.SQL(" AND ").join(
                    sql.SQL("{} = %s").format(sql.Identifier(k)) for k in self.src.key)
                r = cur.execute(sql.SQL("SELECT {} FROM {} WHERE {}").format(
                    cols, _ident(self.shadow), cond), [row[k] for k in self.src.key]).fetchone()
            else:
                r = cur.execute(sql.SQL("SELECT {} FROM {} ORDER BY ctid OFFSET %s LIMIT 1")
                                .format(cols, _ident(self.shadow)), (int(pos),)).fetchone()
            if r is None:
                raise StoreError(f"{self.display}: verification failed: a row is missing from "
                                 "the translation; it was not published.")
            got.append(r)
        vecs = _stack([r[self.src.vindex] for r in got])
        return vecs, [self.src.row(got, k) for k in range(len(got))]

    def publish(self, replace):
        from psycopg import sql

        schema, table = _split(self.address.name)
        backup = None
        with self.conn.transaction():
            if self.exists():
                if not replace:
                    raise StoreError(f"{self.display}: exists; pass --replace.")
                bname = backup_name(table)
                self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
                    _ident(self._table(bname))))
                self.conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    _ident(self.address.name), sql.Identifier(bname)))
                backup = self.address.with_name(self._table(bname))
            self.conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                _ident(self.shadow), sql.Identifier(table)))
        return backup

    def discard(self):
        from psycopg import sql

        if getattr(self, "shadow", None):
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_ident(self.shadow)))

    def close(self):
        """Close the loading connections; a batch loaded but not committed is rolled back."""
        for conn in self._loaders:
            conn.close()
        self._idle, self._loaders = [], []


def restore(address):
    from psycopg import sql

    schema, table = _split(address.name)
    bname = backup_name(table)
    qual = (lambda n: f"{schema}.{n}" if schema else n)
    conn = _connect(address)
    try:
        if _regclass(conn, qual(bname)) is None:
            raise StoreError(f"{address}: no backup table {bname} to restore; a backup is kept "
                             "only by `skalign translate --replace`.")
        swap = f"{table}_skalign_swap"
        with conn.transaction():  # one transaction: readers see the old or the new, never none
            present = _regclass(conn, address.name) is not None
            if present:
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    _ident(address.name), sql.Identifier(swap)))
            conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                _ident(qual(bname)), sql.Identifier(table)))
            if present:
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    _ident(qual(swap)), sql.Identifier(bname)))
    finally:
        conn.close()
    return address.with_name(qual(bname))
