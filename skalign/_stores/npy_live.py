"""Live ``.npy`` stores: ids are row numbers, texts come from a text file beside the store
(:class:`~skalign._stores.files.live.LineTexts`), ranking is exact (memory-mapped windows),
encoded rows go to the overlay (:mod:`skalign._stores.files.overlay`)."""

from __future__ import annotations

import numpy as np

from ..exceptions import StoreError
from .files.live import (
    WINDOW_ROWS,
    FileLiveStore,
    LineTexts,
    RowNumbers,
    check_metric,
    files_state,
)
from .npy import NpyReader

__all__ = ["NpyLive"]


class NpyLive(FileLiveStore):
    """A ``.npy`` array searched live.

    Parameters
    ----------
    address : Address
    column : None
        ``.npy`` stores have one array.
    text_field : str or path-like, default=None
        The text file holding row ``i``'s text on line ``i`` (``*.jsonl``: JSON strings or
        objects with a ``"text"``; otherwise plain lines).
    metric : {"cosine", "ip", "l2"}, default="cosine"
        The similarity the search ranks by.
    """

    kind = "npy"
    texts_in_lines = True

    def __init__(self, address, *, column=None, text_field=None, metric="cosine"):
        if column is not None:
            raise StoreError(f"{address}: an .npy store holds one array; leave the column out.")
        self.address, self.path = address, address.path
        self._reader = NpyReader(address)
        self.n_rows, self.dim = int(self._reader.n_rows), int(self._reader.dim)
        self.metric = check_metric(metric, self.path)
        self._ids = RowNumbers(self.n_rows)
        self.text_field = text_field
        self._texts = {}
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "files": files_state(self.path)})

    def _windows(self):
        start = 0
        for window, _, _ in self._reader.batches(WINDOW_ROWS):
            yield start, window
            start += len(window)

    def _rows(self, positions, text_field):
        order = np.argsort(positions)
        vectors = np.empty((len(positions), self.dim), np.float32)
        vectors[order] = self._reader.take(positions[order], len(positions))[0]
        if text_field is None:
            return vectors, None
        key = str(text_field)
        if key not in self._texts:
            self._texts[key] = LineTexts(text_field, self.n_rows, self.path)
        return vectors, self._texts[key].get(positions)

    def close(self):
        self._reader.close()
