r"""A sqlite-vec ``vec0`` table as a :class:`~skalign._stores.live.LiveStore`: searched with
the table's own k-nearest-neighbour query, read by id, written back in place.

Rows are named by the table's primary key, else its ``rowid``. The metric is the vector
column's ``distance_metric`` (``l2`` where none is declared); sqlite-vec returns the distance
:math:`d`, and the score is that of :func:`~skalign._stores.live.similarity`:
:math:`1 - d` (cosine), :math:`-d^2` (L2, sqlite-vec's distance being the Euclidean one). A
column declared ``l1`` or ``hamming`` cannot be ranked so and is refused. A search runs one
``WHERE emb MATCH ? AND k = ?`` query per query vector (sqlite-vec's KNN query, at most 4,096
neighbours).

A row's text is a text metadata or ``+auxiliary`` column (``text_field``; default ``text``, else
``document``, else none). Its provenance is kept beside the table, in skalign's table
``skalign_marks`` of the same file, keyed by the table's identity token (stored in the table's
``T_info``, made by the first write-back: :mod:`.tables`), the provenance key and the row's id:
a ``vec0`` table cannot be given a column. A write-back is one ``BEGIN IMMEDIATE`` transaction
that compares each row's mark (compare-and-set), then updates its vector and its mark, so a
concurrent reader sees the old pair or the new one and every other column is kept.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...exceptions import StoreError
from ..live import LiveRows, LiveStore, check_key_name, sample_positions
from ..live_input import check_ids, check_k, check_options, check_vectors, missing_id
from .store import KIND, Reader
from .tables import EDGE, MARKS, connect, ident, table_type, token, writing

__all__ = ["SqliteVecLive"]

#: Column names of each row's text, in order, when no ``text_field`` is given
TEXT_COLUMNS = ("text", "document")
#: sqlite-vec's largest ``k``
MAX_K = 4096
#: ``fetch`` scans the table instead of looking ids up one by one where it is given more than
#: one id in this many of the table's rows
SCAN_RATIO = 16
#: ids per page that :meth:`SqliteVecLive.id_array` reads
ID_PAGE = 8192
#: the vector column's metric -> the similarity ranked by
METRICS = {"cosine": "cosine", "l2": "l2"}


@EDGE.edges
class SqliteVecLive(LiveStore):
    """A ``vec0`` table (``sqlite:PATH?table=TABLE&column=COLUMN``) searched, read by id and
    written back in place.

    Parameters
    ----------
    address : Address
        The table and its vector column.
    column : str, default=None
        The vector column, where the address names none (and the table has several).
    text_field : str, default=None
        The text column of each row's text; ``None``: ``text``, else ``document``, else none.
    metric : {"cosine", "l2"}, default=None
        Must be the column's own where given.
    provenance_key : str, default=None
        The key the rows' provenance is kept under (default ``skalign_vector``).

    Attributes
    ----------
    kind : str
        ``"sqlite-vec"``.
    dim, n_rows : int
        The vector column's width; the rows when the store was opened.
    metric : {"cosine", "l2"}
        What the search ranks by.
    """

    kind = KIND
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, metric=None,
                 provenance_key=None, **options):
        check_options(address, options)
        self.address, self.text_field = address, text_field
        self.provenance_key = check_key_name(provenance_key, address)
        conn = connect(address, own=True)
        try:
            self._reader = r = Reader(address, column, conn=conn)
        except BaseException:
            conn.close()
            raise
        self.conn, self.table, self.column = r.conn, r.table.name, r.column
        self.dim, self.n_rows, self.id_name = r.dim, r.n_rows, r.id_name
        found = METRICS.get(r.metric)
        if found is None:
            raise StoreError(f"{address}: the column {r.column!r} ranks by {r.metric} distance, "
                             "which skalign does not search by (cosine or l2).")
        if metric is not None and metric != found:
            raise StoreError(f"{address}: the column {r.column!r} ranks by {found}, not "
                             f"{metric}; leave the metric out.")
        self.metric = found
        if text_field is not None:
            self._text_column(None)

    def close(self):
        self.conn.close()

    def _text_column(self, text_field):
        """The text column (``None``: none), refused unless it is a text metadata or
        auxiliary column."""
        columns = {c.name: c for c in self._reader.table.fields}
        field = self.text_field if text_field is None else text_field
        if field is None:
            field = next((c for c in TEXT_COLUMNS if c in columns), None)
            if field is None:
                return None
        if field not in columns:
            raise StoreError(f"{self.address}: no column {field!r} for the texts (columns: "
                             f"{', '.join(map(repr, columns))}); fix the text field.")
        col = columns[field]
        if col.role not in ("metadata", "auxiliary", "partition") or \
                (col.type not in ("text", None) and col.role != "auxiliary"):
            raise StoreError(f"{self.address}: column {field!r} is a {col.role} column of type "
                             f"{col.type}, not text; name a text column with --text-field.")
        return field

    def top_k(self, queries, k):
        k = check_k(k)
        Q = check_vectors(queries, self.dim, self.address)
        sql = (f"SELECT {ident(self.id_name)}, distance FROM {ident(self.table)} WHERE "
               f"{ident(self.column)} MATCH ? AND k = ? ORDER BY distance")
        ids, scores = [], []
        for q in Q:
            rows = self.conn.execute(sql, (q.astype("<f4").tobytes(), min(k, MAX_K))).fetchall()
            d = np.asarray([r[1] for r in rows], dtype=np.float64)
            ids.append([r[0] for r in rows])
            scores.append(1.0 - d if self.metric == "cosine" else -d * d)
        return ids, scores

    def _ids_sql(self):
        return f"SELECT {ident(self.id_name)} FROM {ident(self.table)}"

    def ids(self):
        return [r[0] for r in self.conn.execute(self._ids_sql())]

    def id_array(self):
        """Every row's id in :meth:`ids`' order (the same scan read :data:`ID_PAGE` rows a
        page), as one ``int64`` array where the table is keyed by integers (its ``rowid``, an
        integer key); for a text key, the list :meth:`ids` gives
        (:func:`~skalign._stores.databases.ids.id_array`)."""
        from ..databases.ids import id_array

        cursor = self.conn.cursor().execute(self._ids_sql())
        try:
            return id_array(iter(lambda: [r[0] for r in itertools.islice(cursor, ID_PAGE)], []),
                            self.n_rows)
        finally:
            cursor.close()

    def sample_ids(self, n, random_state):
        r"""The ids of the rows at :func:`~skalign._stores.live.sample_positions` (see
        :meth:`LiveStore.sample_ids <skalign._stores.live.LiveStore.sample_ids>`), without
        listing every id.

        A ``vec0`` table's order is that of its scan (:meth:`ids` has no ``ORDER BY``, and a
        row number over it would be an order SQLite does not promise), so the same scan is
        read here: in one read transaction the rows are counted (:math:`N`), the positions
        :math:`p_1 < \dots < p_m` drawn from :math:`N`, and the scan's rows are stepped over
        (in C, ``itertools.islice``) up to each :math:`p_j`, whose id is kept; the scan stops
        after :math:`p_m`. Memory: the :math:`m` ids.
        """
        from ..databases.ids import first_at

        with self.conn:  # one read transaction: the count and the scan of one moment
            rows = self.conn.execute(f"SELECT count(*) FROM {ident(self.table)}").fetchone()[0]
            positions = sample_positions(rows, n, random_state)
            if not len(positions):
                return []
            cursor = self.conn.cursor().execute(self._ids_sql())
            try:
                return first_at(cursor, positions.tolist())
            finally:
                cursor.close()

    def _marks(self, ids, scan=False):
        """The provenance of ``ids`` (``None`` where a row has none): looked up one by one,
        or with ``scan`` every mark of the key read at once."""
        tid = token(self.conn, self.table)
        if tid is None or table_type(self.conn, MARKS) is None:
            return [None] * len(ids)
        if scan:
            found = dict(self.conn.execute(f"SELECT id, mark FROM {ident(MARKS)} WHERE tid = ? "
                                           "AND key = ?", (tid, self.provenance_key)))
            return [found.get(_key(i)) for i in ids]
        sql = f"SELECT mark FROM {ident(MARKS)} WHERE tid = ? AND key = ? AND id = ?"
        out = []
        for i in ids:
            row = self.conn.execute(sql, (tid, self.provenance_key, _key(i))).fetchone()
            out.append(row[0] if row is not None else None)
        return out

    def _rows(self, ids, cols):
        """``{id: (vector, text)}`` of ``ids``: one point query each, or, for many ids, one
        scan of the table kept to those ids (a point query costs about what a scan of a few
        hundred rows does)."""
        keys = [_key(i) for i in ids]
        if len(ids) * SCAN_RATIO < self.n_rows:
            sql = (f"SELECT {', '.join(ident(c) for c in cols)} FROM {ident(self.table)} WHERE "
                   f"{ident(self.id_name)} = ?")
            got = {}
            for k in keys:
                row = self.conn.execute(sql, (k,)).fetchone()
                if row is not None:
                    got[k] = row
            return got, False
        wanted = set(keys)
        sql = (f"SELECT {ident(self.id_name)}, {', '.join(ident(c) for c in cols)} FROM "
               f"{ident(self.table)}")
        return {r[0]: r[1:] for r in self.conn.execute(sql) if r[0] in wanted}, True

    def fetch(self, ids, text_field=None):
        ids = check_ids(ids, self.address)
        text = self._text_column(text_field)
        cols = [self.column] + ([text] if text is not None else [])
        vectors, texts = [], []
        with self.conn:  # one read transaction: the vectors and marks of one moment
            got, scanned = self._rows(ids, cols)
            for i in ids:
                row = got.get(_key(i))
                if row is None:
                    raise missing_id(self.address, i)
                vectors.append(row[0])
                texts.append(row[1] if text is not None and isinstance(row[1], str) else None)
            marks = self._marks(ids, scan=scanned)
        V = np.frombuffer(b"".join(vectors), "<f4").reshape(len(ids), self.dim).astype(
            np.float32) if ids else np.empty((0, self.dim), np.float32)
        return LiveRows(ids, V, texts, marks)

    def count_marks(self, mine=None, empty=False):
        """Rows per provenance, counted by SQLite without reading a vector
        (:func:`~skalign._stores.sqlite_vec.counts.count_marks`)."""
        from .counts import count_marks

        return count_marks(self, mine, empty)

    def _write_back(self, ids, V, marks, expected):
        conn, table, key = self.conn, ident(self.table), self.provenance_key
        written = np.zeros(len(ids), dtype=bool)
        with writing(conn):
            tid = token(conn, self.table, create=True)
            conn.execute(f"CREATE TABLE IF NOT EXISTS {ident(MARKS)} (tid TEXT NOT NULL, key "
                         "TEXT NOT NULL, id NOT NULL, mark TEXT, PRIMARY KEY (tid, key, id)) "
                         "WITHOUT ROWID")
            for n, (i, v, m) in enumerate(zip(map(_key, ids), V, marks)):
                if conn.execute(f"SELECT 1 FROM {table} WHERE {ident(self.id_name)} = ?",
                                (i,)).fetchone() is None:
                    raise missing_id(self.address, i)
                if expected is not None:
                    row = conn.execute(f"SELECT mark FROM {ident(MARKS)} WHERE tid = ? AND "
                                       "key = ? AND id = ?", (tid, key, i)).fetchone()
                    if (row[0] if row is not None else None) != expected[n]:
                        continue
                conn.execute(f"UPDATE {table} SET {ident(self.column)} = ? WHERE "
                             f"{ident(self.id_name)} = ?", (v.astype("<f4").tobytes(), i))
                conn.execute(f"INSERT INTO {ident(MARKS)} (tid, key, id, mark) VALUES (?, ?, ?, "
                             "?) ON CONFLICT (tid, key, id) DO UPDATE SET mark = excluded.mark",
                             (tid, key, i, m))
                written[n] = True
        return written


def _key(ident):
    """An id as SQLite is given it: an ``int`` or text (a UUID as its text)."""
    return ident if isinstance(ident, (int, str)) else str(ident)
