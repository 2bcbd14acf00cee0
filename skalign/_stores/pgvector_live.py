r"""A PostgreSQL table with a pgvector column as a :class:`~skalign._stores.live.LiveStore`:
searched with the table's own vector index, read by primary key, written back with one
``UPDATE``.

Rows are named by the table's primary key, which must be one column (``ctid`` changes with
every update, so it cannot name a row). The metric is that of the vector column's HNSW (else
IVFFlat) index, by its operator class; a table without one is searched by an exact scan, with
the ``metric`` option (default cosine). Scores are those of
:func:`~skalign._stores.live.similarity`:

=============  =====================  ======================  ===============================
metric         operator class         ``ORDER BY``            score
=============  =====================  ======================  ===============================
``"cosine"``   ``vector_cosine_ops``  ``emb <=> q``           :math:`1 - d_{\cos}(q, x)`
``"ip"``       ``vector_ip_ops``      ``emb <#> q``           :math:`\langle q, x \rangle`
                                                              (``<#>`` is its negation)
``"l2"``       ``vector_l2_ops``      ``emb <-> q``           :math:`-\lVert q - x \rVert_2^2`
=============  =====================  ======================  ===============================

All queries run in one statement, a ``LATERAL`` join of each query's ``ORDER BY … LIMIT k``
(an index scan per query) over ``unnest`` of the query array, in a transaction that raises
``hnsw.ef_search`` to ``k`` where it is lower (an HNSW scan returns at most ``ef_search`` rows).
An IVFFlat index is searched with the session's ``ivfflat.probes``.

A row's text is the column ``text_field`` names (default: ``text``, else ``document``); its
provenance is the column ``skalign_vector`` (:data:`~skalign._stores.live.PROVENANCE_KEY`), added
(``ALTER TABLE … ADD COLUMN IF NOT EXISTS``, type ``text``) by the first write-back, in the
same transaction. A write-back is one ``UPDATE … FROM unnest(ids, vectors)`` setting the vector
and the provenance column: each row's new version holds both, so a concurrent reader sees the
old pair or the new one, and every other column is kept.

Every name (schema, table, columns, the key) is passed as an identifier and every value as a
parameter; the operator classes read from the catalog only select one of the three operators
above.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import StoreError
from .live import LiveRows, LiveStore
from .live_input import (
    check_ids,
    check_k,
    check_key_name,
    check_options,
    check_vectors,
    check_write,
    missing_id,
)
from .pg_indexes import _mapped
from .pgvector import Reader, _stack

__all__ = ["PgvectorLive"]

#: pgvector's operator class → the metric
OPCLASSES = {"vector_cosine_ops": "cosine", "vector_ip_ops": "ip", "vector_l2_ops": "l2"}
#: the metric → pgvector's distance operator
OPERATORS = {"cosine": "<=>", "ip": "<#>", "l2": "<->"}
#: Column names of each row's text, in order, when no ``text_field`` is given
TEXT_COLUMNS = ("text", "document")
#: pgvector's largest ``hnsw.ef_search``
MAX_EF_SEARCH = 1000
#: Rows per ``fetch`` and ``UPDATE`` statement
PAGE = 4096
#: the comment skalign sets on the provenance column it adds (what says the column is its own)
OWNED_COMMENT = "skalign: each row's provenance (encoded or translated)"


def _index_metric(conn, oid, column):
    """The metric of the first valid HNSW (else IVFFlat) index whose key is ``column`` alone
    (no expression, no predicate) and whose operator class is one of :data:`OPCLASSES`, with
    the index's name; ``(None, None)`` where there is none."""
    rows = conn.execute(
        "SELECT am.amname, o.opcname, c.relname FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
        "JOIN pg_opclass o ON o.oid = i.indclass[0] "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indrelid = %s AND a.attname = %s AND i.indnkeyatts = 1 AND i.indisvalid "
        "AND i.indexprs IS NULL AND i.indpred IS NULL AND am.amname IN ('hnsw', 'ivfflat') "
        "ORDER BY am.amname = 'hnsw' DESC, c.relname", (oid, column)).fetchall()
    for _, opclass, name in rows:
        if opclass in OPCLASSES:
            return OPCLASSES[opclass], name
    return None, None


def _column_type(conn, oid, column):
    """``schema.type`` of ``column`` as an identifier (the ids' array is cast to its array
    type: psycopg sends a list of text as an array of unknown type)."""
    from psycopg import sql

    schema, name = conn.execute(
        "SELECT n.nspname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE a.attrelid = %s AND a.attname = %s",
        (oid, column)).fetchone()
    return sql.Identifier(schema, name)


class PgvectorLive(LiveStore):
    """A table with a pgvector column (``postgresql://…?table=TABLE&column=COLUMN``) searched,
    read by primary key and written back in place.

    Parameters
    ----------
    address : Address
        The table and its vector column.
    column : str, default=None
        The vector column, where the address names none (and the table has several).
    text_field : str, default=None
        The column of each row's text; ``None``: ``text``, else ``document``, else none.
    metric : {"cosine", "ip", "l2"}, default=None
        The metric of a table without a vector index on the column (then searched by an exact
        scan); with an index, the index's, and another value is refused.

    Attributes
    ----------
    kind : str
        ``"pgvector"``.
    dim : int
        The vector column's width.
    n_rows : int
        The rows when the store was opened.
    metric : {"cosine", "ip", "l2"}
        What the search ranks by.
    key : str
        The primary key's column (the rows' ids).
    """

    kind = "pgvector"
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, metric=None,
                 provenance_key=None, **options):
        check_options(address, options)
        self.address, self.text_field = address, text_field
        self.provenance_key = check_key_name(provenance_key, address, 63)
        self._key_checked = False
        self._reader = r = Reader(address, column)
        try:
            if len(r.key) != 1:
                has = "no primary key" if not r.key else "a primary key of several columns"
                raise StoreError(f"{address}: the table has {has}; a live store names rows by "
                                 "a one-column primary key (ALTER TABLE … ADD PRIMARY KEY).")
            self.key, self.column, self.dim, self.n_rows = r.key[0], r.column, r.dim, r.n_rows
            with _mapped(address, "cannot read the table's indexes"):
                found, index = _index_metric(r.conn, r.oid, r.column)
                self._key_type = _column_type(r.conn, r.oid, self.key)
            if metric is not None and metric not in OPERATORS:
                raise StoreError(f"{address}: metric {metric!r} is not one of cosine, ip or "
                                 "l2.")
            if found is not None and metric is not None and metric != found:
                raise StoreError(f"{address}: the index {index!r} ranks by {found}, not "
                                 f"{metric}; leave the metric out or build the index for it.")
            self.metric = found or metric or "cosine"
            self._has_mark = self.provenance_key in r.names
        except BaseException:
            r.conn.close()
            raise

    @property
    def _conn(self):
        return self._reader.conn

    def _ident(self, name):
        from psycopg import sql

        return sql.Identifier(name)

    def top_k(self, queries, k):
        from psycopg import sql

        k = check_k(k)
        Q = check_vectors(queries, self.dim, self.address)
        if not len(Q):
            return [], []
        op = sql.SQL(OPERATORS[self.metric])
        col = sql.SQL("skalign_t.{}").format(self._ident(self.column))
        query = sql.SQL(
            "SELECT skalign_q.n, skalign_s.id, skalign_s.d FROM unnest(%s::vector[]) WITH "
            "ORDINALITY AS skalign_q(v, n) CROSS JOIN LATERAL (SELECT skalign_t.{key} AS id, "
            "{col} {op} skalign_q.v AS d FROM {table} AS skalign_t ORDER BY {col} {op} "
            "skalign_q.v LIMIT %s) AS skalign_s ORDER BY skalign_q.n, skalign_s.d").format(
                key=self._ident(self.key), col=col, op=op, table=self._reader.ident)
        ids, dist = [[] for _ in Q], [[] for _ in Q]
        with _mapped(self.address, "cannot search the table"), self._conn.transaction():
            self._conn.execute(
                "SELECT set_config('hnsw.ef_search', greatest(coalesce(nullif(current_setting("
                "'hnsw.ef_search', true), ''), '40')::int, %s)::text, true)",
                (min(k, MAX_EF_SEARCH),))
            for n, ident, d in self._conn.execute(query, (list(Q), k)).fetchall():
                ids[n - 1].append(ident)
                dist[n - 1].append(d)
        return ids, [self._scores(np.asarray(d, dtype=np.float64)) for d in dist]

    def _scores(self, d):
        if self.metric == "cosine":
            return 1.0 - d
        return -d * d if self.metric == "l2" else -d

    def ids(self):
        """Every row's primary key, in its order."""
        from psycopg import sql

        with _mapped(self.address, "cannot read the table"):
            return [r[0] for r in self._conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY 1").format(
                self._ident(self.key), self._reader.ident)).fetchall()]

    def _text_column(self, text_field):
        names = self._reader.names
        field = self.text_field if text_field is None else text_field
        if field is None:
            return next((c for c in TEXT_COLUMNS if c in names), None)
        if field not in names:
            raise StoreError(f"{self.address}: no column {field!r} for the texts (columns: "
                             f"{', '.join(map(repr, names))}); fix the text field.")
        return field

    def _mark_column(self):
        """Whether the table has the provenance column (looked up again while it had none:
        another session's first write-back adds it)."""
        if not self._has_mark:
            self._has_mark = self._conn.execute(
                "SELECT true FROM pg_attribute WHERE attrelid = %s AND attname = %s AND "
                "attnum > 0 AND NOT attisdropped", (self._reader.oid, self.provenance_key)
            ).fetchone() is not None
        return self._has_mark

    def fetch(self, ids, text_field=None):
        from psycopg import sql

        ids = check_ids(ids, self.address)
        text = self._text_column(text_field)
        if not ids:
            return LiveRows([], np.empty((0, self.dim), np.float32), [], [])
        with _mapped(self.address, "cannot read the table"):
            has_mark = self._mark_column()
            query = sql.SQL(
                "SELECT skalign_q.n, skalign_t.{col}, {text}, {mark} FROM unnest(%s::{ids}[]) WITH "
                "ORDINALITY AS skalign_q(id, n) JOIN {table} AS skalign_t ON skalign_t.{key} "
                "= skalign_q.id ORDER BY skalign_q.n").format(
                    col=self._ident(self.column), key=self._ident(self.key),
                    table=self._reader.ident, ids=self._key_type,
                    text=sql.SQL("skalign_t.{}::text").format(self._ident(text))
                    if text is not None else sql.SQL("NULL::text"),
                    mark=sql.SQL("skalign_t.{}::text").format(
                        self._ident(self.provenance_key))
                    if has_mark else sql.SQL("NULL::text"))
            cur = self._conn.cursor(binary=True)
            got = {}
            for lo in range(0, len(ids), PAGE):
                for n, v, t, p in cur.execute(query, (ids[lo:lo + PAGE],)).fetchall():
                    got[lo + n - 1] = (v, t, p)
        for pos, ident in enumerate(ids):
            if pos not in got:
                raise missing_id(self.address, ident)
        rows = [got[pos] for pos in range(len(ids))]
        return LiveRows(ids, _stack([r[0] for r in rows]), [r[1] for r in rows],
                        [r[2] for r in rows])

    def check_provenance_key(self):
        """The provenance column is skalign's (its comment says so, or it is text holding
        nothing but skalign's marks, an earlier version's column: then adopted) or absent;
        otherwise refused before anything is written."""
        from psycopg import sql

        if self._key_checked:
            return
        with _mapped(self.address, "cannot read the table's columns"):
            row = self._conn.execute(
                "SELECT format_type(atttypid, atttypmod), col_description(attrelid, attnum) "
                "FROM pg_attribute WHERE attrelid = %s AND attname = %s AND attnum > 0 AND NOT "
                "attisdropped", (self._reader.oid, self.provenance_key)).fetchone()
            if row is None or row[1] == OWNED_COMMENT:
                self._key_checked = True
                return
            foreign = [f"a column of type {row[0]}"] if row[0] != "text" else []
            if not foreign:
                foreign = [r[0] for r in self._conn.execute(sql.SQL(
                    "SELECT {col} FROM {table} WHERE {col} IS NOT NULL AND {col} !~ "
                    "'^(encoded|translated):' LIMIT 1").format(
                        col=self._ident(self.provenance_key), table=self._reader.ident))]
        if foreign:
            shown = foreign[0] if row[0] != "text" else f"e.g. {str(foreign[0])[:40]!r}"
            raise StoreError(f"{self.address}: the table already has a column "
                             f"{self.provenance_key!r} that skalign did not add ({shown}); "
                             "skalign never overwrites a user's data: choose another column "
                             "for each row's provenance with --provenance-key NAME.")
        self._key_checked = True

    def write_back(self, ids, vectors, marks, expected=None):
        from psycopg import sql

        ids, V, marks, expected = check_write(self.address, ids, vectors, marks, expected,
                                              self.dim)
        if not ids:
            return np.zeros(0, dtype=bool)
        self.check_provenance_key()
        table, key = self._reader.ident, self._ident(self.key)
        mark_col = self._ident(self.provenance_key)
        update = sql.SQL(
            "UPDATE {table} AS skalign_t SET {col} = skalign_u.v, {mark} = skalign_u.m FROM "
            "unnest(%s::{ids}[], %s::vector[], %s::text[], %s::text[]) AS "
            "skalign_u(id, v, m, e) WHERE skalign_t.{key} = skalign_u.id AND (NOT %s OR "
            "skalign_t.{mark} IS NOT DISTINCT FROM skalign_u.e) RETURNING skalign_u.id").format(
                table=table, col=self._ident(self.column), mark=mark_col, key=key,
                ids=self._key_type)
        exists = sql.SQL("SELECT {key} FROM {table} WHERE {key} = ANY(%s::{ids}[])").format(
            key=key, table=table, ids=self._key_type)
        cas = expected is not None
        written = np.zeros(len(ids), dtype=bool)
        with _mapped(self.address, "cannot write the vectors back", "the address's user needs "
                     "UPDATE on the table (and, for the first write-back, to own it: it adds "
                     f"the column {self.provenance_key})"), self._conn.transaction():
            if not self._mark_column():
                self._conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} text")
                                   .format(table, mark_col))
                self._conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                    table, mark_col, sql.Literal(OWNED_COMMENT)))
            for lo in range(0, len(ids), PAGE):
                part = ids[lo:lo + PAGE]
                done = {r[0] for r in self._conn.execute(update, (
                    part, list(V[lo:lo + PAGE]), marks[lo:lo + PAGE],
                    expected[lo:lo + PAGE] if cas else [None] * len(part), cas)).fetchall()}
                written[lo:lo + len(part)] = [i in done for i in part]
                if len(done) != len(part):
                    held = {r[0] for r in self._conn.execute(
                        exists, ([i for i in part if i not in done],)).fetchall()}
                    lost = [i for i in part if i not in done and i not in held]
                    if lost:
                        raise missing_id(self.address, lost[0])
        self._has_mark = True
        return written

    def close(self):
        self._reader.conn.close()
