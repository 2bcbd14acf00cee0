"""Live LanceDB tables: ids from an id column (``id`` by default: LanceDB's search names its rows
by their columns, so a table needs one), texts from a text column, candidates from the table's
own search (its vector index where it has one, else an exact scan), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`, merged as :mod:`skalign._stores.files.live` says)."""

from __future__ import annotations

import numpy as np

from ..exceptions import StoreError
from .databases.edge import one_line
from .files.arrow import arrow_vectors, import_pyarrow
from .files.arrow_live import id_index, text_column
from .files.live import FileLiveStore, IdIndex, check_metric
from .lance import LanceReader

__all__ = ["LanceLive"]

#: LanceDB's name of each metric, and its distance turned into a score (higher is better)
_LANCE_METRIC = {"cosine": ("cosine", lambda d: 1 - d), "l2": ("l2", lambda d: -d),
                 "ip": ("dot", lambda d: 1 - d)}


class LanceLive(FileLiveStore):
    """A LanceDB table searched live.

    Parameters
    ----------
    address : Address
    column : str, default=None
        The vector column (default: the only list-of-floats column, or vector/embedding).
    text_field : str, default=None
        The column holding each row's text.
    id_field : str, default=None
        The id column (default ``"id"``).
    metric : {"cosine", "ip", "l2"}, default="cosine"
        The similarity the search ranks by (that of the table's vector index, where it has
        one).
    """

    kind = "lance"
    exact = False

    def __init__(self, address, *, column=None, text_field=None, id_field=None,
                 metric="cosine"):
        self.address, self.path = address, address.path
        self._pa, _ = import_pyarrow(self.path)
        self._reader = r = LanceReader(address, column)
        self._table, self.column = r._table, r.column
        self.n_rows, self.dim = int(r.n_rows), int(r.dim)
        self.metric = check_metric(metric, self.path)
        self._ids, self.id_field = id_index(r.schema, id_field, self.n_rows, self._id_column,
                                            self.path)
        if not isinstance(self._ids, IdIndex):
            raise StoreError(f"{self.path}: no id column; LanceDB's search names rows by a "
                             "column of unique ids: pass it with --id-field.")
        self.text_field = text_field
        if text_field is not None:
            text_column(self._pa, r.schema, text_field, self.path)
        st = self.path.stat()
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "version": int(self._table.version),
                            "folder": [st.st_dev, st.st_ino]})

    def _id_column(self, name):
        table = self._table.search().select([name]).limit(max(self.n_rows, 1)).to_arrow()
        if table.num_rows != self.n_rows:
            raise StoreError(f"{self.path}: read {table.num_rows} ids of {self.n_rows} rows; "
                             "was the table changed meanwhile? Open it again.")
        return table.column(0).combine_chunks()

    def _index_top_k(self, queries, k):
        name, to_score = _LANCE_METRIC[self.metric]
        positions, scores = [], []
        for q in queries:
            try:
                hits = (self._table.search(q, vector_column_name=self.column).metric(name)
                        .select([self.id_field, "_distance"]).limit(k).to_arrow())
            except Exception as exc:  # lancedb raises ValueError, RuntimeError or its own
                raise StoreError(f"{self.address}: search failed "
                                 f"({one_line(exc, self.address)}).") from None
            ids = hits.column(self.id_field).to_pylist()
            positions.append(self._ids.positions(ids, self.path))
            scores.append(to_score(hits.column("_distance").to_numpy()).astype(np.float32))
        return positions, scores

    def _rows(self, positions, text_field):
        # take_offsets returns rows in its own order: each is placed by its id
        wanted = np.unique(positions)
        got = self._table.take_offsets([int(p) for p in wanted]).to_arrow()
        at = self._ids.positions(got.column(self.id_field).to_pylist(), self.path)
        if not np.array_equal(np.sort(at), wanted):
            raise StoreError(f"{self.path}: rows read back do not match the rows asked for; "
                             "was the table changed meanwhile? Open it again.")
        slot = np.searchsorted(wanted, at)  # got's row j is wanted[slot[j]]
        where = np.empty(len(wanted), np.int64)
        where[slot] = np.arange(len(at))
        pick = where[np.searchsorted(wanted, positions)]
        V = arrow_vectors(self._pa, got.column(self.column), self.dim, self.path, self.column)
        vectors = np.asarray(V, dtype=np.float32)[pick]
        if text_field is None:
            return vectors, None
        if text_field != self.text_field:
            text_column(self._pa, self._reader.schema, text_field, self.path)
        texts = got.column(text_field).to_pylist()
        return vectors, [texts[j] for j in pick]
