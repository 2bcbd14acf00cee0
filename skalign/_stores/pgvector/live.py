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

A row's text is the column ``text_field`` names (default: ``text``, else ``document``), which
must be of a text type (:data:`TEXT_TYPES`: ``text``, ``varchar``, ``char(n)``, ``citext``, or a
domain over one of them): a column of another type is refused by its name and catalog type when
the store opens or when ``fetch`` first names it, before any row is read. Its
provenance is the column ``skalign_vector`` (:data:`~skalign._stores.live.PROVENANCE_KEY`), added
(``ALTER TABLE … ADD COLUMN IF NOT EXISTS``, type ``text``) by the first write-back, in the
same transaction. A write-back is one ``UPDATE … FROM unnest(ids, vectors)`` setting the vector
and the provenance column: each row's new version holds both, so a concurrent reader sees the
old pair or the new one, and every other column is kept.

Row ids are the primary key's values: ``int`` for a key whose type is (a domain over)
``smallint``, ``integer`` or ``bigint``, ``str`` for (a domain over) a text type, and for a key of
any other type (``uuid``, ``numeric``, ``date``, ``bytea``, …) its text form as PostgreSQL writes
it, with the session's ``DateStyle`` set to ISO, ``TimeZone`` to UTC, ``bytea_output`` to hex
and floats written exactly, so that it does not depend on the server's defaults: ids a results
file can hold, that name the same row when given back (each is cast to the key's type in the
statement; one that is not a value of the type names no row). A key whose type has no array
type (an array, for one) cannot be sent as a list of ids and is refused by name when the store
opens.

Every name (schema, table, columns, the key) is passed as an identifier and every value as a
parameter; the operator classes read from the catalog only select one of the three operators
above.
"""

from __future__ import annotations

import numpy as np

from ...exceptions import StoreError, StoreNotFoundError
from ..live import LiveRows, LiveStore, check_key_name, field_key, sample_positions
from ..live_input import (
    check_ids,
    check_k,
    check_options,
    check_vectors,
    missing_id,
    shown,
)
from .indexes import _mapped
from .store import PROVENANCE_COMMENT as OWNED_COMMENT
from .store import Reader, _stack

__all__ = ["PgvectorLive"]

#: pgvector's operator class → the metric
OPCLASSES = {"vector_cosine_ops": "cosine", "vector_ip_ops": "ip", "vector_l2_ops": "l2"}
#: the metric → pgvector's distance operator
OPERATORS = {"cosine": "<=>", "ip": "<#>", "l2": "<->"}
#: Column names of each row's text, in order, when no ``text_field`` is given
TEXT_COLUMNS = ("text", "document")
#: The base types of a text column (and ``citext``, in whatever schema its extension is)
TEXT_TYPES = {("pg_catalog", "text"), ("pg_catalog", "varchar"), ("pg_catalog", "bpchar")}
#: The base types of keys whose ids are ``int``
INT_TYPES = {("pg_catalog", "int2"), ("pg_catalog", "int4"), ("pg_catalog", "int8")}
#: pgvector's largest ``hnsw.ef_search``
MAX_EF_SEARCH = 1000
#: Rows per ``fetch`` and ``UPDATE`` statement
PAGE = 4096
#: ids per page that :meth:`PgvectorLive.id_array` reads (a page's rows are Python objects
#: for a moment, ~100 bytes each: at 10^6 ids the read held 9.5 MiB with pages of 8,192,
#: 18.6 MiB with pages of 65,536, beside the array's 7.6)
ID_PAGE = 8192



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


def _column_types(conn, oid):
    """Each column's type, as :class:`_Type`, by its name: as declared (domains included) and
    the base type under its domains."""
    rows = conn.execute(
        "WITH RECURSIVE chain(name, typid, depth) AS (SELECT attname, atttypid, 0 FROM "
        "pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped UNION ALL "
        "SELECT c.name, t.typbasetype, c.depth + 1 FROM chain c JOIN pg_type t ON t.oid = "
        "c.typid WHERE t.typtype = 'd' AND c.depth < 32), base AS (SELECT DISTINCT ON (name) "
        "name, typid FROM chain ORDER BY name, depth DESC) "
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), dn.nspname, d.typname, "
        "d.typarray <> 0, bn.nspname, b.typname, b.oid::int FROM pg_attribute a "
        "JOIN base ON base.name = a.attname JOIN pg_type d ON d.oid = a.atttypid "
        "JOIN pg_namespace dn ON dn.oid = d.typnamespace JOIN pg_type b ON b.oid = base.typid "
        "JOIN pg_namespace bn ON bn.oid = b.typnamespace "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped", (oid, oid)).fetchall()
    return {r[0]: _Type(*r[1:]) for r in rows}


class _Type:
    """A column's type: ``shown`` (``format_type``), the declared type's schema and name (a
    domain's own), whether it has an array type, and the base type's schema, name and oid."""

    def __init__(self, shown, schema, name, has_array, base_schema, base_name, base_oid):
        self.shown, self.has_array = shown, has_array
        self.declared, self.base = (schema, name), (base_schema, base_name)
        self.base_oid = base_oid

    @property
    def ident(self):
        """The declared type as an identifier (``schema.name``)."""
        from psycopg import sql

        return sql.Identifier(*self.declared)

    @property
    def is_text(self):
        """Whether values of the type are text (:data:`TEXT_TYPES`)."""
        return self.base in TEXT_TYPES or self.base[1] == "citext"

    @property
    def loads_natively(self):
        """Whether psycopg loads values of the type as ``int`` or ``str`` (ids as they come)."""
        return self.base in INT_TYPES or self.is_text


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
    bulk_writes = True

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
                self._types = _column_types(r.conn, r.oid)
            self._key_type, self._key_text = self._key_form()
            if text_field is not None:
                self._text_column(None)
            if metric is not None and metric not in OPERATORS:
                raise StoreError(f"{address}: metric {metric!r} is not one of cosine, ip or "
                                 "l2.")
            if found is not None and metric is not None and metric != found:
                raise StoreError(f"{address}: the index {index!r} ranks by {found}, not "
                                 f"{metric}; leave the metric out or build the index for it.")
            self.metric = found or metric or "cosine"
            if provenance_key is None and self._added_field():
                # a vector column --into added: its rows' marks are the field's own
                self.provenance_key = field_key(r.column)
            self._has_mark = self.provenance_key in r.names
        except BaseException:
            r.conn.close()
            raise

    def _added_field(self):
        """Whether the vector column is one ``--into`` added (:mod:`.fields`)."""
        from .fields import FIELD_PREFIX

        with _mapped(self.address, "cannot read the column's comment"):
            comment = self._reader.conn.execute(
                "SELECT col_description(attrelid, attnum) FROM pg_attribute WHERE attrelid = "
                "%s AND attname = %s", (self._reader.oid, self._reader.column)).fetchone()
        return bool(comment and comment[0] and comment[0].startswith(FIELD_PREFIX))

    @property
    def _conn(self):
        return self._reader.conn

    def _key_form(self):
        """The key's type as an identifier (the ids' array is cast to its array type: psycopg
        sends a list of text as an array of unknown type), and whether ids are the key's text
        form (a type psycopg would load as another Python type than ``int`` or ``str``: on this
        connection it is loaded as its text, in forms set for the session)."""
        from psycopg.types.string import TextLoader

        typ = self._types.get(self.key)
        if typ is None or not typ.has_array:
            shown = typ.shown if typ is not None else "a type that cannot be read"
            raise StoreError(f"{self.address}: the primary key {self.key!r} is {shown}, which "
                             "has no array type; a live store looks rows up by a list of "
                             "ids: give the table a primary key of a scalar type.")
        if typ.loads_natively:
            return typ.ident, False
        with _mapped(self.address, "cannot set the session's output formats"):
            self._conn.execute(
                "SELECT set_config('datestyle', 'ISO, YMD', false), set_config("
                "'intervalstyle', 'postgres', false), set_config('bytea_output', 'hex', false), "
                "set_config('timezone', 'UTC', false), set_config('extra_float_digits', '3', "
                "false)")
        self._conn.adapters.register_loader(typ.base_oid, TextLoader)
        return typ.ident, True

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
            "SELECT skalign_q.n, skalign_s.id, skalign_s.d FROM unnest(%b::vector[]) WITH "
            "ORDINALITY AS skalign_q(v, n) CROSS JOIN LATERAL (SELECT skalign_t.{key} AS id, "
            "{col} {op} skalign_q.v AS d FROM {table} AS skalign_t WHERE {col} IS NOT NULL "
            "ORDER BY {col} {op} "
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

    def _ids_sql(self):
        from psycopg import sql

        return sql.SQL("SELECT {} FROM {} ORDER BY 1").format(self._ident(self.key),
                                                              self._reader.ident)

    def ids(self):
        """Every row's primary key, in its order."""
        with _mapped(self.address, "cannot read the table"):
            return [r[0] for r in self._conn.execute(self._ids_sql()).fetchall()]

    def id_array(self):
        """Every row's primary key in :meth:`ids`' order, as one ``int64`` array where the
        key is of an integer type: :meth:`ids`' statement read through a server-side cursor,
        :data:`ID_PAGE` rows a page (:func:`~skalign._stores.databases.ids.id_array`); for a
        key of another type, the list :meth:`ids` gives."""
        from ..databases.ids import id_array

        if self._types[self.key].base not in INT_TYPES:
            return self.ids()
        with _mapped(self.address, "cannot read the table"), self._conn.transaction(), \
                self._conn.cursor(name="skalign_ids", binary=True) as cur:
            cur.execute(self._ids_sql())
            return id_array(([r[0] for r in page] for page in
                             iter(lambda: cur.fetchmany(ID_PAGE), [])), self.n_rows)

    def sample_ids(self, n, random_state):
        r"""The ids of the rows at :func:`~skalign._stores.live.sample_positions` (see
        :meth:`LiveStore.sample_ids <skalign._stores.live.LiveStore.sample_ids>`), drawn by
        PostgreSQL: only the drawn ids come back.

        In one ``REPEATABLE READ`` snapshot the rows are counted (:math:`N`), the positions
        :math:`p_1 < \dots < p_m` drawn from :math:`N`, and the rows read in the key's order
        (:meth:`ids`' ``ORDER BY``: the key's index, where it is a B-tree) and numbered
        ``row_number() - 1``; the scan stops after row :math:`p_m` (``LIMIT``), and the row
        numbered :math:`p_j` gives the :math:`j`-th id, so the ids are ``ids()[p_j]``. The
        positions are sent as one ``bigint[]`` parameter.
        """
        from psycopg import sql

        key, table = self._ident(self.key), self._reader.ident
        pick = sql.SQL(
            "SELECT skalign_s.k FROM (SELECT skalign_t.{key} AS k, row_number() OVER (ORDER BY "
            "skalign_t.{key}) - 1 AS p FROM {table} AS skalign_t ORDER BY skalign_t.{key} "
            "LIMIT %s) AS skalign_s WHERE skalign_s.p = ANY(%s::bigint[]) ORDER BY "
            "skalign_s.p").format(key=key, table=table)
        with _mapped(self.address, "cannot read the table"), self._conn.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows = self._conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                table)).fetchone()[0]
            positions = sample_positions(rows, n, random_state)
            if not len(positions):
                return []
            return [r[0] for r in self._conn.execute(
                pick, (int(positions[-1]) + 1, positions.tolist())).fetchall()]

    def _text_column(self, text_field):
        """The column of the rows' texts (``None``: no text), refused unless it is of a text
        type (:data:`TEXT_TYPES`): another column's values are not texts to encode."""
        names = self._reader.names
        field = self.text_field if text_field is None else text_field
        if field is None:
            field = next((c for c in TEXT_COLUMNS if c in names), None)
            if field is None:
                return None
        elif field not in names:
            raise StoreError(f"{self.address}: no column {field!r} for the texts (columns: "
                             f"{', '.join(map(repr, names))}); fix the text field.")
        typ = self._types.get(field)
        if typ is None or not typ.is_text:
            shown = typ.shown if typ is not None else "of a type that cannot be read"
            raise StoreError(f"{self.address}: column {field!r} is {shown}, not text; a row's "
                             "text must be a column of type text, varchar, char(n), citext or "
                             "a domain over one of them: name one with --text-field.")
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

    def _add_mark_column(self):
        """Add the provenance column, ``text`` with skalign's comment, where the table has
        none; inside the caller's transaction (its first write-back's)."""
        from psycopg import sql

        if not self._mark_column():
            table, mark = self._reader.ident, self._ident(self.provenance_key)
            self._conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} text")
                               .format(table, mark))
            self._conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                table, mark, sql.Literal(OWNED_COMMENT)))

    def _read_marked(self, read):
        """``read(has_mark)``, whether the table has the provenance column given; read again
        where it had none at the check but has one after the read: another session's first
        write-back (the column and its vectors) landed in between, and its new vectors must
        not be read without their marks."""
        while True:
            has_mark = self._mark_column()
            got = read(has_mark)
            if has_mark or not self._mark_column():
                return got

    def _fetch_rows(self, keys, text, has_mark):
        """``{position: (vector, text, mark)}`` of ``keys``, the marks ``NULL`` unless
        ``has_mark``."""
        import psycopg
        from psycopg import sql

        query = sql.SQL(
            "SELECT skalign_q.n, skalign_t.{col}, {text}, {mark} FROM unnest(%s::{ids}[]) "
            "WITH ORDINALITY AS skalign_q(id, n) JOIN {table} AS skalign_t ON "
            "skalign_t.{key} = skalign_q.id ORDER BY skalign_q.n").format(
                col=self._ident(self.column), key=self._ident(self.key),
                table=self._reader.ident, ids=self._key_type,
                text=sql.SQL("skalign_t.{}::text").format(self._ident(text))
                if text is not None else sql.SQL("NULL::text"),
                mark=sql.SQL("skalign_t.{}::text").format(self._ident(self.provenance_key))
                if has_mark else sql.SQL("NULL::text"))
        cur = self._conn.cursor(binary=True)
        got = {}
        for lo in range(0, len(keys), PAGE):
            try:
                found = cur.execute(query, (keys[lo:lo + PAGE],)).fetchall()
            except (psycopg.DataError, psycopg.errors.CheckViolation) as exc:
                raise self._not_a_key(exc) from None
            for n, v, t, p in found:
                got[lo + n - 1] = (v, t, p)
        return got

    def fetch(self, ids, text_field=None):
        ids = check_ids(ids, self.address)
        text = self._text_column(text_field)
        if not ids:
            return LiveRows([], np.empty((0, self.dim), np.float32), [], [])
        # a key's text form is sent as text, cast to its type in the statement
        keys = [str(i) for i in ids] if self._key_text else ids
        with _mapped(self.address, "cannot read the table"):
            got = self._read_marked(lambda has_mark: self._fetch_rows(keys, text, has_mark))
        for pos, ident in enumerate(ids):
            if pos not in got:
                raise missing_id(self.address, ident)
        rows = [got[pos] for pos in range(len(ids))]
        # a row of a field not written yet (--into) holds NULL: read as zeros, unmarked
        zero = np.zeros(self.dim, np.float32)
        vectors = _stack([zero if r[0] is None else r[0] for r in rows])
        return LiveRows(ids, vectors, [r[1] for r in rows], [r[2] for r in rows])

    def count_marks(self, mine=None, empty=False):
        """Rows per provenance, counted by PostgreSQL without reading a vector or a text
        (:func:`~skalign._stores.pgvector.marks.count_marks`)."""
        from .marks import count_marks

        return count_marks(self, mine, empty)

    def sample_norms(self, rows):
        """The lengths and marks of every row, or of a block sample of about ``rows`` rows
        (:func:`~skalign._stores.pgvector.marks.sample_norms`)."""
        from .marks import sample_norms

        return sample_norms(self, rows)

    def _not_a_key(self, exc):
        """The error for ids that are not values of the key's type (PostgreSQL could not cast
        one, or a domain's check refused it): no row has them."""
        text = " ".join((getattr(exc.diag, "message_primary", None) or str(exc)).split())
        return StoreNotFoundError(
            f"{self.address}: no row with these ids: the primary key {self.key!r} is "
            f"{self._types[self.key].shown} ({shown(text)}); ids are the store's own, as "
            "top_k returns them.")

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

    def _write_back(self, ids, V, marks, expected):
        from psycopg import sql

        table, key = self._reader.ident, self._ident(self.key)
        mark_col = self._ident(self.provenance_key)
        update = sql.SQL(
            "UPDATE {table} AS skalign_t SET {col} = skalign_u.v, {mark} = skalign_u.m FROM "
            "unnest(%s::{ids}[], %b::vector[], %s::text[], %s::text[]) AS "
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
            self._add_mark_column()
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

    def write_many(self, batches, rows, rebuild=False):
        """:meth:`~skalign._stores.live.LiveStore.write_many`: a step of at least
        :data:`~skalign._stores.pgvector.writes.REBUILD_SHARE` of the table's rows is staged,
        then written in one transaction that builds the column's HNSW index again instead of
        updating it row by row (:func:`~skalign._stores.pgvector.writes.write_rebuilding`),
        where ``rebuild`` allows it (readers wait for that transaction); a smaller one, or any
        without ``rebuild``, batch by batch."""
        from .writes import plan_rebuild, write_rebuilding

        if not rebuild or not plan_rebuild(self, rows):
            return super().write_many(batches, rows)
        self.check_provenance_key()
        return write_rebuilding(self, batches)

    def close(self):
        self._reader.conn.close()
