"""FAISS index files (``PATH.faiss``).

Read: an index whose stored vectors are exact — ``IndexFlat`` (L2 or inner product),
``IndexIVFFlat``, ``IndexHNSWFlat``, each possibly inside ``IndexIDMap``/``IndexIDMap2`` (whose
ids are kept). Compressed indexes (PQ, SQ, LSH …) cannot give their vectors back and are refused.
Write: a Flat index (L2 or inner product, possibly inside ``IndexIDMap``/``IDMap2``) is
written in place — the shadow is the index file itself, laid out at its full size from the start
(header, the vectors, the ids), filled batch by batch and committed like an ``.npy`` output, so
nothing is written twice and memory stays bounded. Other types: the translated vectors go to a
shadow ``.npy`` committed the same way; at the end the same index type is built on them —
trained again on the translated vectors where the type needs training (IVF: the same ``nlist``,
k-means seeded), with the same metric, HNSW ``M`` and ids — written to a hidden file and renamed
into place.

Live (:class:`FaissLive`): candidates from the index's own search, ids from its ``IndexIDMap``
(else row numbers), texts from a text file beside it (row ``i`` of the index on line ``i``,
:class:`~skalign._stores.files.live.LineTexts`), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`, merged as :mod:`skalign._stores.files.live` says)."""

from __future__ import annotations

import os
import struct

import numpy as np

from ..exceptions import StoreError
from ..utils._backend import iter_batches
from .base import StoreReader
from .files.engine import FileEngine
from .files.live import FileLiveStore, IdIndex, LineTexts, RowNumbers, files_state
from .files.overlay import HEADER_LOCK
from .files.shadow import remove_path
from .journal import write_journal
from .npy import NpyShadow

__all__ = ["FaissEngine", "FaissLive", "Reader", "Writer"]


def _faiss():
    import faiss

    return faiss


def _describe(index):
    """``(kind, inner, ids, params)``: what the writer needs to build the same type again."""
    faiss = _faiss()
    index = faiss.downcast_index(index)
    ids, wrapper = None, None
    if isinstance(index, (faiss.IndexIDMap2, faiss.IndexIDMap)):
        wrapper = "IDMap2" if isinstance(index, faiss.IndexIDMap2) else "IDMap"
        ids = faiss.vector_to_array(index.id_map).astype(np.int64)
        index = faiss.downcast_index(index.index)
    metric = int(index.metric_type)
    if isinstance(index, faiss.IndexFlat):
        return "Flat", index, ids, {"metric": metric, "wrapper": wrapper}
    if isinstance(index, faiss.IndexIVFFlat):
        return "IVFFlat", index, ids, {"metric": metric, "wrapper": wrapper,
                                       "nlist": int(index.nlist), "nprobe": int(index.nprobe)}
    if isinstance(index, faiss.IndexHNSWFlat):
        return "HNSWFlat", index, ids, {
            "metric": metric, "wrapper": wrapper, "M": int(index.hnsw.nb_neighbors(1)),
            "efConstruction": int(index.hnsw.efConstruction), "efSearch": int(index.hnsw.efSearch)}
    return type(index).__name__, None, ids, None


class Reader(StoreReader):
    has_rows = True
    kind = "faiss"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        faiss = _faiss()
        self.address, self.path = address, address.path
        if not self.path.is_file():
            raise StoreError(f"{self.path}: no such FAISS index file; check the path.")
        try:
            # a Flat index's vectors memory-mapped, not read: they are read below a window
            # at a time, so the resident set stays bounded whatever the index's size
            index = faiss.read_index(str(self.path), faiss.IO_FLAG_MMAP_IFC)
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unreadable"
            raise StoreError(f"{self.path}: not a readable FAISS index ({msg}).") from None
        self._index = index  # owns the C++ object the downcast views below point into
        kind, inner, self.ids, self.params = _describe(index)
        if inner is None:
            raise StoreError(
                f"{self.path}: this {kind} stores compressed codes, so its vectors cannot be "
                "reconstructed exactly; translate the embeddings it was built from (Flat, "
                "IVFFlat and HNSWFlat indexes, also inside IDMap/IDMap2, are supported)."
            )
        if kind != "Flat":  # read whole (built again at the end, in memory anyway)
            del index, inner
            index = self._index = faiss.read_index(str(self.path))
            kind, inner, self.ids, self.params = _describe(index)
        if kind == "IVFFlat":
            inner.make_direct_map()
        self.index_kind, self._inner = kind, inner
        self.n_rows, self.dim = int(inner.ntotal), int(inner.d)
        self._offset = self._vector_offset() if kind == "Flat" else None

    def _vector_offset(self):
        """Where a Flat index's vectors start in its file, when the file is laid out as
        :func:`flat_layout` says (checked on the size and the first vector), else ``None``."""
        n, d, p = self.n_rows, self.dim, self.params
        layout = flat_layout(d, n, p["metric"], p["wrapper"],
                             self.ids if self.ids is not None else np.zeros(n, np.int64))
        if layout is None or not n:
            return None
        head, tail = layout
        if self.path.stat().st_size != len(head) + 4 * n * d + len(tail):
            return None
        first = np.fromfile(self.path, dtype="<f4", count=d, offset=len(head))
        return len(head) if np.array_equal(first, self._inner.reconstruct(0)) else None

    def batches(self, batch_size, start=0):
        for rows in iter_batches(self.n_rows, batch_size):
            if rows.stop <= start:
                continue
            n = rows.stop - rows.start
            if self._offset is not None:
                # a fresh mapping per window, dropped after use (as the .npy reader does)
                vectors = np.memmap(self.path, dtype="<f4", mode="r", shape=(n, self.dim),
                                    offset=self._offset + 4 * self.dim * rows.start)
            else:
                vectors = self._inner.reconstruct_n(rows.start, n)
            yield vectors, {"start": rows.start, "n": n}, None
            del vectors

    def row(self, rows, k):
        pos = rows["start"] + k
        return {"id": int(self.ids[pos]) if self.ids is not None else pos}

    def take(self, positions, batch_size):
        """Rows at ``positions``: vectors (reconstructed) and ids."""
        vectors = [self._inner.reconstruct(int(pos)) for pos in positions]
        return vectors, [self.row({"start": int(pos), "n": 1}, 0) for pos in positions]

    def read_all(self):
        return self._inner.reconstruct_n(0, self.n_rows) if self.n_rows else np.empty(
            (0, self.dim), np.float32)

    @property
    def ids_origin(self):
        """An ``IndexIDMap``'s ids name the rows; an index without one is in row order."""
        return "IDMap ids" if self.ids is not None else None

    def read_with_ids(self, batch_size=8192):
        if self.ids is None:
            return self.read_all(), None
        return self.read_all(), [int(i) for i in self.ids]


def Writer(address, job):
    """The writer for ``job``: a Flat index is written in place, any other type built at the
    end."""
    p = job.reader.params
    if job.reader.index_kind == "Flat" and flat_layout(1, 1, p["metric"], p["wrapper"],
                                                       np.zeros(1, np.int64)) is not None:
        return _FlatWriter(address, job)
    return _BuildWriter(address, job)


_HEADER = 37  # fourcc, d, ntotal, two dummies, is_trained, metric (faiss/impl/index_write.cpp)


def flat_layout(d, n, metric, wrapper, ids):
    """``(head, tail)``: the bytes of a ``d``-dimensional Flat index of ``n`` vectors (inside
    ``wrapper``, ``"IDMap"``/``"IDMap2"`` or ``None``, with ``ids``) before and after its
    ``n * d`` float32 vectors, as ``faiss.write_index`` lays them out; ``None`` where that
    layout is not the one this code knows (another metric, another faiss file format)."""
    faiss = _faiss()
    if metric not in (faiss.METRIC_L2, faiss.METRIC_INNER_PRODUCT):
        return None  # metrics with an argument add a field to the header
    index = faiss.IndexFlat(d, metric)
    if wrapper is not None:
        index = (faiss.IndexIDMap2 if wrapper == "IDMap2" else faiss.IndexIDMap)(index)
    empty = faiss.serialize_index(index).tobytes()
    k = 2 if wrapper is not None else 1
    if len(empty) != _HEADER * k + 8 * k or empty[_HEADER * (k - 1):][:3] != b"IxF":
        return None
    head = bytearray(empty[: _HEADER * k + 8])
    for j in range(k):  # ntotal of the wrapper and of the flat index
        head[_HEADER * j + 8: _HEADER * j + 16] = struct.pack("<q", n)
    head[_HEADER * k: _HEADER * k + 8] = struct.pack("<Q", n * d)  # the float count
    tail = b"" if wrapper is None else struct.pack("<Q", n) + np.asarray(
        ids, dtype="<i8").tobytes()
    return bytes(head), tail


class _FlatWriter(NpyShadow):
    """The shadow is the index file at its full size; the vectors are filled in order."""

    suffix = ".faiss"

    def __init__(self, address, job):
        super().__init__(address, job)

    def begin(self, fp):
        job, src = self.job, self.job.reader
        n, d = src.n_rows, job.d_out
        ids = src.ids if src.ids is not None else np.arange(n, dtype=np.int64)
        head, tail = flat_layout(d, n, src.params["metric"], src.params["wrapper"], ids)
        self.fp, self.row_bytes, self.offset = fp, 4 * d, len(head)
        size = len(head) + n * d * 4 + len(tail)
        state = self._resumable(fp)
        if state is not None and self.partial.stat().st_size == size:
            self.rows = int(state["rows"])
            self._open()
            return self.rows
        self.discard()
        with self.create(self.partial) as f:  # the source's mode; no link followed
            f.write(head)
            f.truncate(size)
            f.seek(size - len(tail))
            f.write(tail)
        self.rows = 0
        self._open()
        write_journal(self.journal, fingerprint=fp, rows=0)
        return 0

    def fetch(self, positions, rows=None):
        # memory-mapped: faiss parses the whole file but reads only the rows asked for
        return _fetch(self.partial, positions, _faiss().IO_FLAG_MMAP_IFC)


def _fetch(path, positions, flags=0):
    faiss = _faiss()
    owner = faiss.read_index(str(path), flags)
    index = faiss.downcast_index(owner)
    ids = None
    if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)):
        ids = faiss.vector_to_array(index.id_map)
        index = faiss.downcast_index(index.index)
    if isinstance(index, faiss.IndexIVFFlat):
        index.make_direct_map()
    vecs = np.stack([index.reconstruct(int(i)) for i in positions])
    del owner
    rows = [{"id": int(ids[i]) if ids is not None else int(i)} for i in positions]
    return vecs, rows


class _BuildWriter(NpyShadow):
    """The vectors in a shadow ``.npy`` (resumable), then the index built and renamed in."""

    suffix = ".faiss"

    def __init__(self, address, job):
        super().__init__(address, job)
        self.vectors = self.path.with_name(f".{self.path.name}.skalign-partial.npy")
        self.partial_index = self.partial

    def begin(self, fp):
        self.partial = self.vectors  # NpyShadow fills self.partial with the vectors
        return super().begin(fp)

    def leftovers(self):
        out = super().leftovers()
        return out + [p for p in (self.vectors, self.partial_index) if os.path.lexists(p)
                      and p not in out]

    def finish(self):
        faiss = _faiss()
        n = super().finish()
        src = self.job.reader
        with HEADER_LOCK:
            X = np.load(self.vectors, mmap_mode="r")
        d, p = self.job.d_out, src.params
        if src.index_kind == "Flat":
            index = faiss.IndexFlat(d, p["metric"])
        elif src.index_kind == "IVFFlat":
            index = faiss.IndexIVFFlat(faiss.IndexFlat(d, p["metric"]), d, p["nlist"],
                                       p["metric"])
            index.train(np.ascontiguousarray(X))
            index.nprobe = p["nprobe"]
        else:
            index = faiss.IndexHNSWFlat(d, p["M"], p["metric"])
            index.hnsw.efConstruction = p["efConstruction"]
            index.hnsw.efSearch = p["efSearch"]
        if p["wrapper"] is not None:
            index = (faiss.IndexIDMap2 if p["wrapper"] == "IDMap2" else faiss.IndexIDMap)(index)
        for rows in iter_batches(n, 65536):
            chunk = np.ascontiguousarray(X[rows])
            if p["wrapper"] is not None:
                index.add_with_ids(chunk, src.ids[rows])
            else:
                index.add(chunk)
        del X
        # written through a file this run created (the source's mode, no link followed)
        remove_path(self.partial_index)
        with self.create(self.partial_index) as f:
            writer = faiss.PyCallbackIOWriter(f.write)
            faiss.write_index(index, writer)
            del writer  # flushes its buffer into f
            f.flush()
            os.fsync(f.fileno())
        self._built = index
        return int(index.ntotal)

    def fetch(self, positions, rows=None):
        return _fetch(self.partial_index, positions)

    def publish(self, replace, stamp=None):
        self.partial = self.partial_index  # the vectors' .npy: removed by the publish's steps
        return super().publish(replace, stamp)


class FaissEngine(FileEngine):
    """The FAISS engine: an index translates into an index; texts are a file beside it."""

    suffix = ".faiss"
    texts_in_lines = True


# ---------------------------------------------------------------------------- live
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
