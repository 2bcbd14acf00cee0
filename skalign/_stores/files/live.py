"""What the live file stores (``.npy``, Parquet, LanceDB, FAISS) share: ranking with their
encoded rows (:mod:`.overlay`) merged in, ids mapped to positions, texts read from a
column or from a text file beside the store.

A row's score is always that of the vector :meth:`~FileLiveStore.fetch` returns for it: its
encoded vector when it has one, else the store's. Stores without an index of their own
(``.npy``, Parquet) are ranked exactly, window by window, the encoded rows' scores put in place
of the stored ones. Stores with one (LanceDB, FAISS) ask their index for the best rows,
setting aside those that are encoded, until ``k`` others are found (asking for more each
time), and merge them with the exact best of the encoded rows: the result is the index's own
ranking of the rows that are not encoded, and the exact one of those that are.
"""

from __future__ import annotations

import json
import os
from abc import abstractmethod

import numpy as np

from ...exceptions import StoreError, StoreNotFoundError
from ..live import METRICS, LiveRows, LiveStore, sample_positions, similarity
from ..live_input import check_k, check_vectors, missing_id
from .overlay import Overlay

__all__ = ["FileLiveStore", "IdIndex", "LineTexts", "RowNumbers", "check_metric", "files_state",
           "ids_digest"]

#: rows scored at a time by an exact search
WINDOW_ROWS = 65536
#: bytes of a text file read at a time while its lines are indexed
LINE_BLOCK = 16 << 20


class IdIndex:
    """Positions of ids (any one sortable type: integers or strings), ids of positions.

    Raises :class:`~skalign.exceptions.StoreError` when an id occurs twice.
    """

    def __init__(self, ids, where, field):
        self.ids = np.asarray(ids)
        try:
            ascending = bool(np.all(self.ids[1:] > self.ids[:-1]))
        except TypeError:  # ids numpy cannot compare as one array: sorted below
            ascending = False
        # ids already in increasing order (a row number, an id column written sorted) are
        # their own sorted copy: no order nor copy held (16 bytes a row less)
        self._order = None if ascending else np.argsort(self.ids, kind="stable")
        self._sorted = self.ids if ascending else self.ids[self._order]
        dup = np.flatnonzero(self._sorted[1:] == self._sorted[:-1])
        if len(dup):
            raise StoreError(f"{where}: id {self._sorted[dup[0]]!r} occurs more than once in "
                             f"{field!r}; ids must be unique (give another --id-field).")

    def positions(self, ids, where):
        asked = list(ids)
        if not len(self._sorted):
            if asked:
                raise missing_id(where, asked[0])
            return np.empty(0, np.int64)
        try:
            q = np.asarray(asked, dtype=self._sorted.dtype)
        except (TypeError, ValueError):
            raise StoreNotFoundError(f"{where}: ids of this store are {self._sorted.dtype}; "
                                     f"got {asked[:1]!r}.") from None
        at = np.searchsorted(self._sorted, q).clip(0, len(self._sorted) - 1)
        missing = np.flatnonzero(self._sorted[at] != q)
        if len(missing):
            raise missing_id(where, asked[missing[0]])
        return (at if self._order is None else self._order[at]).astype(np.int64)

    def ids_of(self, positions):
        return self.ids[np.asarray(positions, dtype=np.int64)].tolist()


class RowNumbers:
    """Ids that are row numbers (``.npy`` stores, FAISS indexes without ids)."""

    def __init__(self, n):
        self.n = n

    def positions(self, ids, where):
        out = []
        for i in ids:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) \
                    or not 0 <= i < self.n:
                raise missing_id(where, i)
            out.append(int(i))
        return np.asarray(out, dtype=np.int64)

    def ids_of(self, positions):
        return np.asarray(positions, dtype=np.int64).tolist()


class LineTexts:
    """The texts of a store's rows in a text file beside it, row ``i`` on line ``i``.

    ``*.jsonl``: each line a JSON string, or a JSON object whose ``"text"`` holds the row's
    text (``null`` or a missing key: the row has none). Any other suffix: each line the text
    itself (UTF-8, without its newline; an empty line: the row has none). The file is indexed
    once (the offsets of its lines' ends, found :data:`LINE_BLOCK` bytes at a time), then read
    line by line: it is never held in memory.
    """

    def __init__(self, path, n_rows, where):
        self.path = os.fspath(path)
        self.json = self.path.endswith(".jsonl")
        self.n_rows, self.where = n_rows, where
        self._ident = None
        with self._open() as f:
            self._index(f)

    def _open(self):
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot read the texts of {self.where} "
                             f"({exc.strerror}).") from None

    def _index(self, f):
        """The offsets of the lines of the open file ``f``, unless they are known for it
        already (the same file, unchanged: an application may replace the text file while a
        live store is open, and its texts are then read from the new file)."""
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if ident == self._ident:
            return
        size = st.st_size
        # the newlines found a block at a time: a comparison over the whole file (or a map of
        # it) took as many bytes as the file (3 GB for 10^7 texts of 300 bytes)
        ends, block, at = [], bytearray(LINE_BLOCK), 0
        f.seek(0)
        while at < size:
            got = f.readinto(block)
            if not got:
                break
            ends.append(np.flatnonzero(np.frombuffer(block, np.uint8, got) == 10) + at)
            at += got
        ends = np.concatenate(ends) if ends else np.empty(0, np.int64)
        if at != size:
            raise StoreError(f"{self.path}: the text file changed while it was read; open "
                             "the store again.")
        if size and (not len(ends) or ends[-1] != size - 1):
            ends = np.append(ends, size)
        if len(ends) != self.n_rows:
            raise StoreError(f"{self.path}: {len(ends)} lines for the {self.n_rows} rows of "
                             f"{self.where}; the text file must hold one line per row, in the "
                             "store's order.")
        self._ends = ends.astype(np.int64, copy=False)
        self._ident = ident

    def get(self, positions):
        out = []
        with self._open() as f:
            self._index(f)
            for p in positions:
                start = int(self._ends[p - 1]) + 1 if p > 0 else 0
                f.seek(start)
                line = f.read(int(self._ends[p]) - start).decode("utf-8", errors="replace")
                out.append(self._parse(line.rstrip("\r"), p))
        return out

    def _parse(self, line, p):
        if not self.json:
            return line or None
        try:
            value = json.loads(line)
        except ValueError:
            raise StoreError(f"{self.path}: line {p + 1} is not JSON.") from None
        if isinstance(value, dict):
            value = value.get("text")
        if value is not None and not isinstance(value, str):
            raise StoreError(f"{self.path}: line {p + 1} holds a {type(value).__name__}, not a "
                             "text (a JSON string, or an object with a \"text\" string).")
        return value


def files_state(path):
    """What identifies the files of a store as they are: each file's device, inode, size and
    modification time (a store replaced by another, even of the same size and time, has other
    inodes)."""
    paths = [path] if not os.path.isdir(path) else sorted(
        os.path.join(root, f) for root, _, files in os.walk(path) for f in files)
    out = []
    for p in paths:
        st = os.stat(p)
        out.append([os.path.relpath(p, path) if p != path else "", st.st_size, st.st_mtime_ns,
                    st.st_dev, st.st_ino])
    return out


def ids_digest(ids):
    """A digest of a store's ids in row order (an :class:`IdIndex` or :class:`RowNumbers`)."""
    import hashlib

    if isinstance(ids, RowNumbers):
        return f"rows:{ids.n}"
    values = ids.ids
    h = hashlib.sha256(str(values.dtype).encode())
    if values.dtype.kind in "iuf":  # the array's own bytes, not a copy of them
        h.update(memoryview(np.ascontiguousarray(values)).cast("B"))
    else:
        for lo in range(0, len(values), 65536):
            for v in values[lo:lo + 65536].tolist():
                h.update(repr(v).encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()[:32]


def check_metric(metric, where):
    if metric not in METRICS:
        raise StoreError(f"{where}: metric={metric!r}; use one of {', '.join(METRICS)}.")
    return metric


class FileLiveStore(LiveStore):
    """A live file store: the store's files are read only; encoded rows live in its overlay.

    Subclasses set ``path``, ``n_rows``, ``dim``, ``metric``, ``_ids`` (an :class:`IdIndex`
    or row numbers) and ``text_field``, call :meth:`_open_overlay`, and implement
    :meth:`_rows` and either :meth:`_windows` (``exact = True``) or :meth:`_index_top_k`.
    """

    #: ranked exactly here (``True``) or by the engine's index
    exact = True
    #: texts come from a text file beside the store (``.npy``, FAISS), not a column
    texts_in_lines = False
    #: skalign's index beside an exact store (:class:`~skalign._stores.files.ann.IvfIndex`),
    #: set by :func:`~skalign._stores.files.ann.use_index`: the store is then ranked through
    #: it, as an indexed one
    ann = None

    def _open_overlay(self, base):
        base = {**base, "ids": ids_digest(self._ids)}
        self.overlay = Overlay(self.path, self.dim, base)
        self.overlay.refresh()

    @abstractmethod
    def _rows(self, positions, text_field):
        """``(vectors, texts)`` of the store's own rows at ``positions`` (texts ``None``
        where ``text_field`` is ``None``)."""

    def _row_texts(self, positions, text_field):
        """The texts of the store's rows at ``positions`` (``None`` where ``text_field`` is
        ``None``): :meth:`_rows`' by default; a store whose vectors cost more to read than its
        texts reads the texts alone."""
        return self._rows(positions, text_field)[1]

    def text_source(self, text_field=None):
        field = text_field if text_field is not None else self.text_field
        if field is None:
            return None
        if self.texts_in_lines:  # a text file: marks name it by its real path
            return os.path.realpath(os.fspath(field))
        return str(field)

    def _windows(self):
        """Yield ``(start, vectors)`` over every row, in order (exact stores)."""
        raise NotImplementedError

    def _index_top_k(self, queries, k):
        """``(positions, scores)`` per query from the engine's index (indexed stores), or from
        skalign's index beside the store (:attr:`ann`)."""
        if self.ann is None:
            raise NotImplementedError
        return self.ann.search(queries, k)

    def vector_column(self):
        """The column the vectors are read from (``None``: the store has one array)."""
        return getattr(getattr(self, "_reader", None), "column", None)

    # --------------------------------------------------------------------------- LiveStore
    def top_k(self, queries, k):
        Q = check_vectors(queries, self.dim, self.address, "queries")
        k = min(check_k(k), self.n_rows)
        state = self.overlay.refresh()
        if k == 0:
            return [[] for _ in Q], [np.empty(0, np.float32) for _ in Q]
        if self.exact and self.ann is None:
            pos, scores = self._exact_top_k(Q, k, state)
        else:
            pos, scores = self._merged_top_k(Q, k, state)
        return [self._ids.ids_of(p) for p in pos], scores

    def _window_sq_norms(self, start, V):
        """The squared norms of the store's rows in a window: the store's files never change
        under a live store, so they are computed once."""
        cache = self.__dict__.setdefault("_sq_norms", {})
        if start not in cache:
            cache[start] = np.einsum("ij,ij->i", V, V)
        return cache[start]

    def _exact_top_k(self, Q, k, state):
        best_s = np.full((len(Q), 0), -np.inf, np.float32)
        best_p = np.empty((len(Q), 0), np.int64)
        for start, V in self._windows():
            V = np.asarray(V, dtype=np.float32)  # a store of float64 or integers too
            S = similarity(Q, V, self.metric, self._window_sq_norms(start, V))
            lo, hi = np.searchsorted(state.positions, [start, start + len(V)])
            if hi > lo:  # encoded rows score by their encoded vectors
                S[:, state.positions[lo:hi] - start] = similarity(
                    Q, state.vectors[lo:hi], self.metric, state.sq_norms[lo:hi])
            S = np.concatenate([best_s, S], axis=1)
            P = np.concatenate([best_p, np.broadcast_to(
                np.arange(start, start + len(V)), (len(Q), len(V)))], axis=1)
            keep = np.argpartition(-S, k - 1, axis=1)[:, :k] if S.shape[1] > k else \
                np.broadcast_to(np.arange(S.shape[1]), (len(Q), S.shape[1]))
            best_s = np.take_along_axis(S, keep, 1)
            best_p = np.take_along_axis(P, keep, 1)
        order = np.argsort(-best_s, axis=1, kind="stable")
        return (list(np.take_along_axis(best_p, order, 1)),
                list(np.take_along_axis(best_s, order, 1)))

    def _merged_top_k(self, Q, k, state):
        out_p, out_s = [], []
        encoded = np.concatenate([  # the encoded vectors read a chunk at a time
            similarity(Q, V, self.metric, state.sq_norms[lo:lo + len(V)])
            for lo, V in state.vectors.chunks()], axis=1) if len(state.positions) else None
        for i, q in enumerate(Q):
            want = k
            while True:
                (P,), (S,) = self._index_top_k(q[None, :], want)
                plain = state.lookup(P) < 0
                if plain.sum() >= k or len(P) < want or want >= self.n_rows:
                    break
                want = min(self.n_rows, 2 * want + int((~plain).sum()))
            P, S = P[plain][:k], S[plain][:k]
            if encoded is not None:
                top = np.argsort(-encoded[i], kind="stable")[:k]
                P = np.concatenate([P, state.positions[top]])
                S = np.concatenate([S, encoded[i, top]])
            order = np.argsort(-S, kind="stable")[:k]
            out_p.append(P[order].astype(np.int64))
            out_s.append(S[order].astype(np.float32))
        return out_p, out_s

    def ids(self):
        return self._ids.ids_of(np.arange(self.n_rows))

    def id_array(self):
        """Every row's id in row order as one numpy array (no Python object per row)."""
        if isinstance(self._ids, IdIndex):
            return self._ids.ids
        return np.arange(self.n_rows, dtype=np.int64)

    def sample_ids(self, n, random_state):
        """The ids of the rows at :func:`~skalign._stores.live.sample_positions` (see
        :meth:`LiveStore.sample_ids`): drawn by row position, no other id listed."""
        return self._ids.ids_of(sample_positions(self.n_rows, n, random_state))

    def texts_at(self, positions, text_field=None):
        """The texts of the rows at ``positions`` (row numbers) in ``text_field`` (``None``:
        the store's default; ``None`` each where there is none)."""
        field = text_field if text_field is not None else self.text_field
        texts = self._row_texts(np.asarray(positions, dtype=np.int64), field) \
            if field is not None and len(positions) else None
        return [None] * len(positions) if texts is None else list(texts)

    def fetch_marks(self, ids, text_field=None, all_texts=False):
        """:meth:`fetch` without reading the store's vectors (``vectors`` of width 0): each
        row's provenance, and the texts of the rows that carry one (the others' ``None``),
        or of every row with ``all_texts``: what reading every row's provenance needs."""
        ids = [i.item() if isinstance(i, np.generic) else i for i in ids]
        pos = self._ids.positions(ids, self.address)
        text_field = text_field if text_field is not None else self.text_field
        state = self.overlay.refresh()
        slot = state.lookup(pos)
        provenance = [str(state.marks[s]) if s >= 0 else None for s in slot]
        texts = [None] * len(pos)
        read = np.arange(len(pos)) if all_texts else np.flatnonzero(slot >= 0)
        if len(read) and text_field is not None:
            for j, t in zip(read, self._row_texts(pos[read], text_field) or ()):
                texts[j] = t
        return LiveRows(ids=ids, vectors=np.empty((len(pos), 0), np.float32), texts=texts,
                        provenance=provenance)

    def fetch(self, ids, text_field=None):
        ids = [i.item() if isinstance(i, np.generic) else i for i in ids]
        pos = self._ids.positions(ids, self.address)
        text_field = text_field if text_field is not None else self.text_field
        state = self.overlay.refresh()
        if len(pos) and self.ann is not None:  # the index holds the rows' vectors too
            vectors, texts = self.ann.vectors_of(pos), self._row_texts(pos, text_field)
        elif len(pos):
            vectors, texts = self._rows(pos, text_field)
            vectors = np.array(vectors, dtype=np.float32).reshape(len(pos), self.dim)
        else:
            vectors, texts = np.empty((0, self.dim), np.float32), []
        if texts is None:
            texts = [None] * len(pos)
        slot = state.lookup(pos)
        hit = slot >= 0
        vectors[hit] = state.vectors[slot[hit]]
        provenance = [str(state.marks[s]) if s >= 0 else None for s in slot]
        return LiveRows(ids=ids, vectors=vectors, texts=list(texts), provenance=provenance)

    def _write_back(self, ids, V, marks, expected):
        return self.overlay.write(self._ids.positions(ids, self.address), V, marks, expected)
