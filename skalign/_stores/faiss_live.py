"""Live FAISS indexes (``PATH.faiss``, the types :mod:`skalign._stores.faiss` reads): candidates
from the index's own search, ids from its ``IndexIDMap`` (else row numbers), texts from a text
file beside it (row ``i`` of the index on line ``i``,
:class:`~skalign._stores.files.live.LineTexts`), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`, merged as :mod:`skalign._stores.files.live` says)."""

from __future__ import annotations

import numpy as np

from ..exceptions import StoreError
from .faiss import Reader, _faiss
from .files.live import FileLiveStore, IdIndex, LineTexts, RowNumbers, files_state

__all__ = ["FaissLive"]


class FaissLive(FileLiveStore):
    """A FAISS index searched live.

    Parameters
    ----------
    address : Address
    column : None
        An index has one set of vectors.
    text_field : str or path-like, default=None
        The text file holding the text of the index's row ``i`` on line ``i`` (``*.jsonl``:
        JSON strings or objects with a ``"text"``; otherwise plain lines).
    metric : None
        The index's own (inner product: ``"ip"``, L2: ``"l2"``); any other value is refused.
    """

    kind = "faiss"
    texts_in_lines = True
    exact = False

    def __init__(self, address, *, column=None, text_field=None, metric=None):
        faiss = _faiss()
        if column is not None:
            raise StoreError(f"{address}: a FAISS index holds one set of vectors; leave the "
                             "column out.")
        self.address, self.path = address, address.path
        self._reader = r = Reader(address)
        self.n_rows, self.dim = int(r.n_rows), int(r.dim)
        own = {int(faiss.METRIC_INNER_PRODUCT): "ip", int(faiss.METRIC_L2): "l2"}.get(
            int(r.params["metric"]))
        if own is None:
            raise StoreError(f"{self.path}: the index ranks by FAISS metric "
                             f"{r.params['metric']}; live search supports inner product and L2.")
        if metric is not None and metric != own:
            raise StoreError(f"{self.path}: the index ranks by {own!r}, not {metric!r}; leave "
                             "the metric to the index.")
        self.metric = own
        self._ids = IdIndex(r.ids, self.path, "ids") if r.ids is not None else \
            RowNumbers(self.n_rows)
        self.text_field = text_field
        self._texts = {}
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "files": files_state(self.path)})

    def _index_top_k(self, queries, k):
        D, labels = self._reader._index.search(np.ascontiguousarray(queries, np.float32), k)
        positions, scores = [], []
        for d, lab in zip(D, labels):
            found = lab >= 0  # -1: fewer rows than asked for
            lab, d = lab[found], d[found]
            positions.append(self._ids.positions(lab.tolist(), self.path)
                             if isinstance(self._ids, IdIndex) else lab.astype(np.int64))
            scores.append((d if self.metric == "ip" else -d).astype(np.float32))
        return positions, scores

    def _rows(self, positions, text_field):
        vectors = np.asarray(self._reader.take(positions, len(positions))[0], np.float32)
        if text_field is None:
            return vectors, None
        key = str(text_field)
        if key not in self._texts:
            self._texts[key] = LineTexts(text_field, self.n_rows, self.path)
        return vectors, self._texts[key].get(positions)
