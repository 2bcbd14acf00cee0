r"""A DuckDB table with a ``FLOAT[n]`` column as a :class:`~skalign._stores.live.LiveStore`:
searched with the column's HNSW index (the vss extension), read by primary key, written back
with one ``UPDATE``.

Rows are named by the table's primary key, which must be one column of an integer or text
type (ids a results file holds as they are). The metric is that of the column's HNSW index;
a table without one is searched by an exact scan, with the ``metric`` option (default cosine).
Scores are those of :func:`~skalign._stores.live.similarity`:

=============  ============  ==================================  ===========================
metric         vss metric    ``ORDER BY``                        score
=============  ============  ==================================  ===========================
``"cosine"``   ``cosine``    ``array_cosine_distance``           :math:`1 - d`
``"ip"``       ``ip``        ``array_negative_inner_product``    :math:`-d`
``"l2"``       ``l2sq``      ``array_distance``                  :math:`-d^2`
=============  ============  ==================================  ===========================

Each query is one ``ORDER BY … LIMIT k``, with vss's ``hnsw_ef_search`` raised to ``k`` where
it is lower (an HNSW scan returns at most ``ef_search`` rows).

A row's text is the column ``text_field`` names (default: ``text``, else ``document``), which
must be ``VARCHAR``. Its provenance is the ``VARCHAR`` column ``skalign_vector``
(:data:`~skalign._stores.live.PROVENANCE_KEY`), added with a comment that says it is skalign's
by the first write-back, in the same transaction. A write-back is one transaction of one
``UPDATE … FROM`` an Arrow table of ids, vectors, marks and the marks expected
(compare-and-set): a concurrent reader sees each row's old pair or its new one.

The file is attached only for each call (:func:`~.connect.open_database`): DuckDB lets one
process at a time open a file, so a searcher and ``skalign migrate --continue`` in two
processes take turns; a call that finds the file held waits for it (:data:`WAIT_SECONDS`).
"""

from __future__ import annotations

import itertools
import re
import time
from contextlib import contextmanager

import numpy as np

from ...exceptions import StoreError, StoreLockedError
from ..live import LiveRows, LiveStore, check_key_name, sample_positions
from ..live_input import check_ids, check_k, check_options, check_vectors, missing_id
from .connect import errors, ident, literal, open_database, qualified
from .store import PROVENANCE_COMMENT, Reader, columns_of

__all__ = ["DuckDBLive"]

#: vss's metric of an HNSW index → the live store's
VSS_METRICS = {"cosine": "cosine", "ip": "ip", "l2sq": "l2"}
#: the metric → DuckDB's distance function (the one each HNSW metric serves)
DISTANCES = {"cosine": "array_cosine_distance", "ip": "array_negative_inner_product",
             "l2": "array_distance"}
#: Column names of each row's text, in order, when no ``text_field`` is given
TEXT_COLUMNS = ("text", "document")
#: the key types whose values are ids as they come
KEY_TYPES = re.compile(r"(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|"
                       r"UBIGINT|VARCHAR)")
#: vss's default ``hnsw_ef_search``
EF_SEARCH = 64
#: how long a call waits for a file another process holds
WAIT_SECONDS = 30.0
#: the seed of :meth:`DuckDBLive.sample_norms`' sample (the same rows while the table is
#: unchanged)
SAMPLE_SEED = 0
#: encoded rows per batch of :meth:`DuckDBLive.mark_scan`
SCAN_BATCH = 65536
#: ids per page that :meth:`DuckDBLive.sample_ids` and :meth:`DuckDBLive.id_array` read
ID_PAGE = 8192
_VIEWS = itertools.count()


class _Conflict(Exception):
    """DuckDB refused a transaction that changed rows another one changed meanwhile."""


class DuckDBLive(LiveStore):
    """A table of a DuckDB file (``duckdb:PATH?table=TABLE&column=COLUMN``) searched, read by
    primary key and written back in place.

    Parameters
    ----------
    address : Address
        The table and its vector column.
    column : str, default=None
        The vector column, where the address names none (and the table has several).
    text_field : str, default=None
        The column of each row's text; ``None``: ``text``, else ``document``, else none.
    metric : {"cosine", "ip", "l2"}, default=None
        The metric of a table without an HNSW index on the column (then searched by an exact
        scan); with an index, the index's, and another value is refused.
    provenance_key : str, default=None
        The column of each row's provenance (default ``skalign_vector``).

    Attributes
    ----------
    kind : str
        ``"duckdb"``.
    dim : int
        The vector column's width.
    n_rows : int
        The rows when the store was opened.
    metric : {"cosine", "ip", "l2"}
        What the search ranks by.
    key : str
        The primary key's column (the rows' ids).
    """

    kind = "duckdb"
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, metric=None,
                 provenance_key=None, **options):
        check_options(address, options)
        self.address, self.text_field = address, text_field
        self.provenance_key = check_key_name(provenance_key, address)
        self._key_checked = False
        r = self._reader = self._wait(lambda: Reader(address, column))
        if len(r.key) != 1:
            has = "no primary key" if not r.key else "a primary key of several columns"
            raise StoreError(f"{address}: the table has {has}; a live store names rows by a "
                             "one-column primary key (ALTER TABLE … ADD PRIMARY KEY).")
        self.key, self.column, self.dim, self.n_rows = r.key[0], r.column, r.dim, r.n_rows
        self._vector_type = f"{'FLOAT' if r.dtype == np.float32 else 'DOUBLE'}[{int(r.dim)}]"
        with self._session("cannot read the table's indexes") as cur:
            self._types = {c[0]: c[1] for c in columns_of(cur, address.name)}
            found = [(n, VSS_METRICS.get(m)) for n, m in cur.execute(
                "SELECT index_name, metric FROM pragma_hnsw_index_info() WHERE catalog_name = "
                "current_database() AND schema_name = 'main' AND table_name = ?",
                [address.name]).fetchall() if self.column in self._index_columns(cur, n)]
        if not KEY_TYPES.fullmatch(self._types.get(self.key, "")):
            raise StoreError(f"{address}: the primary key {self.key!r} is "
                             f"{self._types.get(self.key)}; a live store names rows by a key "
                             "of an integer or VARCHAR type.")
        if text_field is not None:
            self._text_column(None)
        if metric is not None and metric not in DISTANCES:
            raise StoreError(f"{address}: metric {metric!r} is not one of cosine, ip or l2.")
        index, found = found[0] if found else (None, None)
        if found is not None and metric is not None and metric != found:
            raise StoreError(f"{address}: the index {index!r} ranks by {found}, not {metric}; "
                             "leave the metric out or build the index for it.")
        self.metric = found or metric or "cosine"

    def _index_columns(self, cur, index):
        from .indexes import indexes_of

        return next((d.columns for d in indexes_of(cur, self.address.name, list(self._types))
                     if d.name == index), ())

    def _wait(self, call):
        """``call()``, again while another process holds the file (up to
        :data:`WAIT_SECONDS`)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                return call()
            except StoreLockedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def _session(self, what, fix=None):
        """A cursor on the file, attached for the call; DuckDB's errors as one line."""
        db = self._wait(lambda: open_database(self.address))
        try:
            cur = db.cursor()
            try:
                with errors(self.address, what, fix):
                    yield cur
            finally:
                cur.close()
        finally:
            db.close()

    @contextmanager
    def _snapshot(self, what):
        """A cursor in one read transaction: the column check and the read that depends on it
        see the same table, also while a first write-back adds the provenance column."""
        import duckdb

        with self._session(what) as cur:
            cur.execute("BEGIN")
            try:
                yield cur
            finally:
                try:
                    cur.execute("COMMIT")
                except duckdb.Error:  # an error inside ended the transaction already
                    pass

    def top_k(self, queries, k):
        k = check_k(k)
        Q = check_vectors(queries, self.dim, self.address)
        if not len(Q):
            return [], []
        ids, scores = [], []
        with self._session("cannot search the table") as cur:
            cur.execute(f"SET hnsw_ef_search = {max(EF_SEARCH, k)}")
            for q in Q:
                got = cur.execute(self.search_sql(), [q.tolist(), k]).fetchall()
                ids.append([r[0] for r in got])
                scores.append(self._scores(np.asarray([r[1] for r in got], np.float64)))
        return ids, scores

    def search_sql(self):
        """One query's statement (``$1`` the query vector, ``$2`` ``k``): the distance named
        once, as vss's optimizer needs it to scan the HNSW index."""
        return (f"SELECT {ident(self.key)}, {DISTANCES[self.metric]}({ident(self.column)}, "
                f"$1::{self._vector_type}) AS skalign_d FROM {qualified(self.address.name)} "
                "ORDER BY skalign_d LIMIT $2")

    def _scores(self, d):
        if self.metric == "cosine":
            return 1.0 - d
        return -d * d if self.metric == "l2" else -d

    def _ids_sql(self):
        return f"SELECT {ident(self.key)} FROM {qualified(self.address.name)} ORDER BY 1"

    def ids(self):
        """Every row's primary key, in its order."""
        with self._session("cannot read the table") as cur:
            return [r[0] for r in cur.execute(self._ids_sql()).fetchall()]

    def id_array(self):
        """Every row's primary key in :meth:`ids`' order, as one ``int64`` array where each is
        an integer that fits it: :meth:`ids`' statement read :data:`ID_PAGE` rows a page
        (:func:`~skalign._stores.databases.ids.id_array`; a ``HUGEINT`` or ``UBIGINT`` key
        beyond ``int64`` gives the list); for a ``VARCHAR`` key, the list :meth:`ids` gives."""
        from ..databases.ids import id_array

        if self._types[self.key] == "VARCHAR":
            return self.ids()
        with self._session("cannot read the table") as cur:
            cur.execute(self._ids_sql())
            return id_array(([r[0] for r in page] for page in
                             iter(lambda: cur.fetchmany(ID_PAGE), [])), self.n_rows)

    def sample_ids(self, n, random_state):
        r"""The ids of the rows at :func:`~skalign._stores.live.sample_positions` (see
        :meth:`LiveStore.sample_ids <skalign._stores.live.LiveStore.sample_ids>`), without
        holding every id in Python.

        In one read transaction the rows are counted (:math:`N`), the positions
        :math:`p_1 < \dots < p_m` drawn from :math:`N`, and :meth:`ids`' own statement is
        read :data:`ID_PAGE` rows at a time, each page's rows stepped over (in C,
        ``itertools.islice``) up to each :math:`p_j`, whose id is kept, until :math:`p_m`:
        the ids are ``ids()[p_j]``, of the same Python types. DuckDB has no ordered index
        scan: its sort of the keys (spilled to disk past its ``memory_limit``) is the memory
        that remains; a window's ``row_number()`` joined with the positions held more
        (55 MiB against 17 MiB at :math:`10^6` integer keys, 167 against 110 MiB at
        :math:`10^6` 32-character keys).
        """
        from ..databases.ids import first_at

        table = qualified(self.address.name)
        with self._snapshot("cannot read the table") as cur:
            rows = cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            positions = sample_positions(rows, n, random_state)
            if not len(positions):
                return []
            cur.execute(self._ids_sql())
            return first_at(itertools.chain.from_iterable(
                iter(lambda: cur.fetchmany(ID_PAGE), [])), positions.tolist())

    def _text_column(self, text_field):
        """The column of the rows' texts (``None``: no text), refused unless ``VARCHAR``."""
        names = list(self._types)
        field = self.text_field if text_field is None else text_field
        if field is None:
            field = next((c for c in TEXT_COLUMNS if c in names), None)
            if field is None:
                return None
        elif field not in names:
            raise StoreError(f"{self.address}: no column {field!r} for the texts (columns: "
                             f"{', '.join(map(repr, names))}); fix the text field.")
        if self._types[field] != "VARCHAR":
            raise StoreError(f"{self.address}: column {field!r} is {self._types[field]}, not "
                             "text; a row's text must be a VARCHAR column: name one with "
                             "--text-field.")
        return field

    def _ids_view(self, cur, ids, **columns):
        """An Arrow table of ``ids`` (the key's type) and their positions, registered."""
        import pyarrow as pa

        name = f"skalign_ids_{next(_VIEWS)}"
        try:
            keys = pa.array(ids)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            raise missing_id(self.address, ids[0]) from None
        cur.register(name, pa.table({"id": keys, "n": np.arange(len(ids)), **columns}))
        return name

    def fetch(self, ids, text_field=None):
        ids = check_ids(ids, self.address)
        text = self._text_column(text_field)
        if not ids:
            return LiveRows([], np.empty((0, self.dim), np.float32), [], [])
        with self._snapshot("cannot read the table") as cur:
            has_mark = self.provenance_key in {c[0] for c in columns_of(cur, self.address.name)}
            view = self._ids_view(cur, ids)
            try:
                got = cur.execute(
                    f"SELECT q.n, t.{ident(self.column)}, "
                    + (f"t.{ident(text)}" if text is not None else "NULL") + ", "
                    + (f"t.{ident(self.provenance_key)}" if has_mark else "NULL")
                    + f" FROM {ident(view)} AS q JOIN {qualified(self.address.name)} AS t ON "
                    f"t.{ident(self.key)} = q.id ORDER BY q.n").fetchall()
            finally:
                cur.unregister(view)
        found = {r[0] for r in got}
        for n, ident_ in enumerate(ids):
            if n not in found:
                raise missing_id(self.address, ident_)
        V = np.asarray([r[1] for r in got], np.float32).reshape(len(ids), self.dim)
        return LiveRows(ids, V, [r[2] for r in got], [r[3] for r in got])

    def mark_scan(self):
        """The rows' provenance without their vectors (:meth:`LiveStore.mark_scan
        <skalign._stores.live.LiveStore.mark_scan>`), in one transaction: the rows without a
        mark and those of another mark than ``encoded:…`` counted by DuckDB, then the key,
        mark and default text of each ``encoded:…`` row, :data:`SCAN_BATCH` at a time."""
        table, mark = qualified(self.address.name), ident(self.provenance_key)
        text = self._text_column(None)
        with self._snapshot("cannot count the table's provenance") as cur:
            if self.provenance_key not in {c[0] for c in columns_of(cur, self.address.name)}:
                n = cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                return [(0, n, [], [], None)]
            unmarked, translated = cur.execute(
                f"SELECT count(*) FILTER (WHERE {mark} IS NULL), count(*) FILTER (WHERE NOT "
                f"starts_with({mark}, 'encoded:')) FROM {table}").fetchone()
            encoded = cur.execute(
                f"SELECT {ident(self.key)}, {mark}, "
                + (ident(text) if text is not None else "NULL::VARCHAR")
                + f" FROM {table} WHERE starts_with({mark}, 'encoded:')").to_arrow_table()
        return itertools.chain([(translated, unmarked, [], [], None)], (
            (0, 0, *(c.to_pylist() for c in encoded.slice(lo, SCAN_BATCH).columns))
            for lo in range(0, encoded.num_rows, SCAN_BATCH)))

    def sample_norms(self, rows):
        """The vector lengths and marks of every row of a table of at most ``rows`` rows, else
        of at most ``rows`` rows of DuckDB's ``system`` sample (whole vectors of 2,048 rows,
        seeded by :data:`SAMPLE_SEED`) of about ``rows`` rows, drawn again with twice the
        share while it holds fewer than half of them; a ``NULL`` vector counts as length 0
        (``fetch`` reads it as zeros). ``(norms, marks)``."""
        table, emb = qualified(self.address.name), ident(self.column)
        with self._snapshot("cannot sample the table") as cur:
            has_mark = self.provenance_key in {c[0] for c in columns_of(cur, self.address.name)}
            head = (f"SELECT coalesce(sqrt(array_inner_product({emb}, {emb})), 0), "
                    + (ident(self.provenance_key) if has_mark else "NULL") + f" FROM {table}")
            n = cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if n <= rows:
                got = cur.execute(head).fetchall()
            else:
                share = min(100.0, 100.0 * 1.5 * rows / n)
                while True:  # a small share can draw too few vectors of rows: a larger one
                    got = cur.execute(f"{head} USING SAMPLE {share!r}% (system, {SAMPLE_SEED}) "
                                      f"LIMIT {int(rows)}").fetchall()
                    if 2 * len(got) >= rows or share >= 100.0:
                        break
                    share = min(100.0, 2 * share)
        return np.array([r[0] for r in got], dtype=np.float64), [r[1] for r in got]

    def check_provenance_key(self):
        """The provenance column is skalign's (its comment says so, or it is ``VARCHAR``
        holding nothing but skalign's marks: then adopted) or absent; otherwise refused before
        anything is written."""
        if self._key_checked:
            return
        with self._session("cannot read the table's columns") as cur:
            row = next((c for c in columns_of(cur, self.address.name)
                        if c[0] == self.provenance_key), None)
            foreign = []
            if row is not None and row[3] != PROVENANCE_COMMENT:
                if row[1] != "VARCHAR":
                    foreign = [f"a column of type {row[1]}"]
                else:
                    foreign = [f"e.g. {str(r[0])[:40]!r}" for r in cur.execute(
                        f"SELECT {ident(row[0])} FROM {qualified(self.address.name)} WHERE "
                        f"{ident(row[0])} IS NOT NULL AND NOT regexp_matches("
                        f"{ident(row[0])}, '^(encoded|translated):') LIMIT 1").fetchall()]
        if foreign:
            raise StoreError(f"{self.address}: the table already has a column "
                             f"{self.provenance_key!r} that skalign did not add ({foreign[0]});"
                             " skalign never overwrites a user's data: choose another column "
                             "for each row's provenance with --provenance-key NAME.")
        self._key_checked = True

    def _write_back(self, ids, V, marks, expected):
        """One transaction; run again where DuckDB found another transaction changing the same
        rows (its concurrency is optimistic: the later one fails), up to :data:`WAIT_SECONDS`:
        the compare-and-set is evaluated again against what the other one wrote."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                with self._session("cannot write the vectors back") as cur:
                    done = self._write_once(cur, ids, V, marks, expected)
                return np.array([i in done for i in ids], dtype=bool)
            except _Conflict as exc:
                if time.monotonic() > deadline:
                    raise StoreError(f"{self.address}: cannot write the vectors back: other "
                                     f"writers kept changing the same rows ({exc}); run it "
                                     "again.") from None
                time.sleep(0.01)

    def _write_once(self, cur, ids, V, marks, expected):
        import duckdb
        import pyarrow as pa

        table, mark = qualified(self.address.name), ident(self.provenance_key)
        cas = expected is not None
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), self.dim)
        cur.execute("BEGIN")
        try:
            if self.provenance_key not in {c[0] for c in columns_of(cur, self.address.name)}:
                cur.execute(f"ALTER TABLE {table} ADD COLUMN {mark} VARCHAR")
                cur.execute(f"COMMENT ON COLUMN {table}.{mark} IS "
                            f"{literal(PROVENANCE_COMMENT)}")
            view = self._ids_view(cur, ids, v=vectors, m=pa.array(marks, pa.string()),
                                  e=pa.array(expected if cas else [None] * len(ids),
                                             pa.string()))
            try:
                done = {r[0] for r in cur.execute(
                    f"UPDATE {table} AS t SET {ident(self.column)} = u.v::{self._vector_type}, "
                    f"{mark} = u.m FROM {ident(view)} AS u WHERE t.{ident(self.key)} = u.id "
                    f"AND (NOT ? OR t.{mark} IS NOT DISTINCT FROM u.e) RETURNING "
                    f"t.{ident(self.key)}", [cas]).fetchall()}
                if len(done) != len(ids):
                    held = {r[0] for r in cur.execute(
                        f"SELECT u.n FROM {ident(view)} AS u JOIN {table} AS t ON "
                        f"t.{ident(self.key)} = u.id").fetchall()}
                    lost = [i for n, i in enumerate(ids) if n not in held]
                    if lost:
                        raise missing_id(self.address, lost[0])
            finally:
                cur.unregister(view)
            cur.execute("COMMIT")
        except BaseException as exc:
            try:
                cur.execute("ROLLBACK")
            except duckdb.Error:  # a failed COMMIT ended the transaction already
                pass
            if isinstance(exc, duckdb.TransactionException) and "conflict" in str(exc).lower():
                raise _Conflict(str(exc)) from None
            raise
        return done

    def close(self):
        pass
