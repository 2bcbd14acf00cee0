"""skalign's own vector index beside a file store without one (``.npy``, Parquet): an inverted
file (IVF-Flat) kept on disk, read a few lists at a time, checked against the store it was
built from by every reader.

Layout. The rows are grouped into :math:`L` lists by the nearest of :math:`L` centroids
(k-means on a sample of the rows; on the unit sphere for cosine). A query :math:`q` is scored
exactly against the rows of the lists whose centroids score best for it (at least
:attr:`IvfIndex.probes` lists, and as many more as it takes to hold :math:`k` rows), so its
candidates are the exact top-:math:`k` of a small share of the store: :math:`p/L` of the rows
for :math:`p` probes. :math:`L = \\lceil 2\\sqrt{n}\\rceil` and :math:`p` = :data:`PROBES`
(see :func:`choose_lists`): a query scores about :math:`p\\sqrt{n}/2` rows, 1.2 % of 10^6, and
on clustered data the candidate step keeps nearly all of an exact scan's top-100 (the user
guide has the figures: ``python benchmarks/bench_search.py --scale``).

File. ``STORE.skalign-index/ivf-<metric>-<digest of the vector column>.bin`` beside the store
(the folder's name is the store's own name plus :data:`INDEX_SUFFIX`, so no name a store may
have reaches out of its folder), one file: a magic line, a JSON header, then the centroids,
the lists' offsets, each slot's row in the store, each row's slot, each slot's squared norm and
each slot's vector (a copy of the store's row, float32), list after list: the searcher reads
its candidates' vectors here too, by row, rather than from the store (a Parquet file decodes a
whole page for one row). Searching reads the lists it
probes with ``pread``: nothing but the centroids stays in memory, whatever the store's size.
Building streams the store window by window three times (a sample, the assignment, the
writing) and holds a sample of at most :data:`SAMPLE_BYTES` and one list number per row.

Stamp. The header records what the index was computed from: the store's real path, each of
its files' size, modification time, device and inode, a digest of the first and last
:data:`EDGE_BYTES` of each file (a Parquet footer, an ``.npy`` header), its rows, width and
vector column. A reader recomputes them and compares; it also checks the offsets and that the
slots hold each row once, and compares a few slots with the store's rows. An index whose stamp
no longer matches is *stale*: rebuilt, or refused when the caller asked for no rebuild; a file
at that name that skalign did not write (no magic line), or one whose header does not parse as
this format, is refused and never overwritten. The file is written under a temporary name in
the same folder (created exclusively, no link followed), fsynced and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import stat
import time
from pathlib import Path

import numpy as np

from ...exceptions import StoreError
from ..journal import fsync_dir
from ..live import similarity
from .shadow import create_file, output_modes

__all__ = ["EDGE_BYTES", "INDEX_MIN_ROWS", "INDEX_MODES", "INDEX_SUFFIX", "PROBES", "SAMPLE_BYTES",
           "IndexStaleError", "IvfIndex", "build_index", "choose_lists", "index_path",
           "open_index", "store_stamp", "use_index"]

#: the index folder's name is the store's name with this suffix
INDEX_SUFFIX = ".skalign-index"
#: what :func:`open_index`'s ``mode`` takes: the store below :data:`INDEX_MIN_ROWS` ranked
#: exactly, else its index used, built or rebuilt as needed (``"auto"``); every row ranked
#: exactly (``"exact"``); the index built anew now and used (``"build"``); the index used as
#: it is, refused when missing or stale (``"existing"``)
INDEX_MODES = ("auto", "exact", "build", "existing")
#: stores with fewer rows are ranked exactly under ``"auto"``. Measured on 384-d ``.npy`` rows
#: (2 cores, load 14; benchmarks/bench_search.py --scale): a query alone took 141 ms by an
#: exact scan of 10^5 rows and 1.5 s of 10^6 (linear in the rows), 11 and 24 ms by the index,
#: built in 14 s and 146 s; through the searcher (rows and texts read, re-scored) 48 against
#: 43 ms at 10^5 but 192 against 56 ms at 10^6. Below a few 10^5 rows a scan serves as fast
#: as the index does, and a build costs more than hundreds of queries save
INDEX_MIN_ROWS = 250_000
#: bytes of rows the k-means sample may take
SAMPLE_BYTES = 128 << 20
#: bytes at each end of each of the store's files that the stamp digests
EDGE_BYTES = 1 << 16

#: lists a query probes (at least; more where they hold fewer than k rows)
PROBES = 24

_MAGIC = b"SKALIGN-IVF-FLAT\n"
_FORMAT = 1
_MAX_HEADER = 1 << 20
_ALIGN = 64
_KMEANS_ITERATIONS = 10
_CHECK_SLOTS = 8


_BLAS = []


@contextlib.contextmanager
def _one_blas_thread():
    """numpy's BLAS on one thread for the block (threadpoolctl; restored after): a query
    scores a few thousand rows, a product far below what a second thread pays for, and on a
    busy machine two threads waiting for each other made it 50 to 100 times slower (11 ms
    against 0.11 ms for 3,155 rows of 384-d, load 10 on 2 cores)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scikit-learn's dependency, always there
        yield
        return
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    limits = _BLAS[0].limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limits.restore_original_limits()


class IndexStaleError(StoreError):
    """The index beside a store was computed from another state of the store."""


def index_path(path, metric, column):
    """Where the index of the store at ``path`` (ranked by ``metric``, vectors in ``column``)
    is kept: a file named by the metric and a digest of the column, in the folder
    ``NAME.skalign-index`` beside the store."""
    path = Path(path)
    key = hashlib.sha256(json.dumps([column]).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return path.with_name(path.name + INDEX_SUFFIX) / f"ivf-{metric}-{key}.bin"


def choose_lists(n):
    r"""``(lists, probes)`` for a store of ``n`` rows: :math:`L = \lceil 2\sqrt{n}\rceil`
    lists (at most 65,536) and :math:`p = \min(L, PROBES)` probes, so that a query scores
    about :math:`p\sqrt{n}/2` rows: 1.2 % of 10^6 rows, 0.4 % of 10^7."""
    lists = max(1, min(65536, n, int(math.ceil(2 * math.sqrt(max(n, 1))))))
    return lists, min(lists, PROBES)


def _edges_digest(path):
    """SHA-256 of the first and last :data:`EDGE_BYTES` of each file of the store at ``path``
    (an ``.npy`` header, a Parquet footer: what changes with the data even when a file's size
    and time are put back)."""
    h = hashlib.sha256()
    paths = [path] if not os.path.isdir(path) else sorted(
        os.path.join(root, f) for root, _, files in os.walk(path) for f in files)
    for p in paths:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            h.update(f.read(EDGE_BYTES))
            if size > EDGE_BYTES:
                f.seek(max(EDGE_BYTES, size - EDGE_BYTES))
                h.update(f.read(EDGE_BYTES))
        h.update(b"\x00")
    return h.hexdigest()


def store_stamp(store):
    """What an index of the live store ``store`` is computed from, as JSON values: its real
    path, its files' state (:func:`~skalign._stores.files.live.files_state`), a digest of each
    file's first and last :data:`EDGE_BYTES`, its rows, width and vector column."""
    from .live import files_state

    path = os.fspath(store.path)
    stamp = {"store": os.path.realpath(path), "files": files_state(path),
             "edges": _edges_digest(path), "rows": int(store.n_rows), "dim": int(store.dim),
             "column": store.vector_column()}
    return json.loads(json.dumps(stamp))


def _layout(n, d, lists):
    """Byte offsets of the sections after a header of ``start`` bytes, and the file's size."""
    sizes = {"centroids": 4 * lists * d, "offsets": 8 * (lists + 1), "positions": 8 * n,
             "slots": 8 * n, "norms": 4 * n, "vectors": 4 * n * d}

    def place(start):
        out, at = {}, start
        for name, size in sizes.items():
            at = -(-at // _ALIGN) * _ALIGN
            out[name] = at
            at += size
        return out, at
    return place


def _header_bytes(header):
    body = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + len(body).to_bytes(8, "little") + body


class IvfIndex:
    """An IVF-Flat index file opened for searching (see the module's docstring).

    Attributes
    ----------
    path : Path
    rows, dim, lists, probes : int
    metric : {"cosine", "ip", "l2"}
    stamp : dict
        What the index was computed from (:func:`store_stamp`).
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            # a file object, closed with the index or when it is collected; never a link
            self._file = open(self.path, "rb", buffering=0, opener=lambda p, flags: os.open(
                p, flags | getattr(os, "O_NOFOLLOW", 0)))
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open the index ({exc.strerror}).") from None
        self._fd = self._file.fileno()
        try:
            self._read_header()
        except BaseException:
            self._file.close()
            raise

    def _refuse(self, why):
        raise StoreError(f"{self.path}: {why}; skalign did not write this file as it is: "
                         "remove it (skalign builds the index again), or give another store.")

    def _read_header(self):
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode):
            self._refuse("not a regular file")
        head = os.pread(self._fd, len(_MAGIC) + 8, 0)
        if len(head) < len(_MAGIC) + 8 or head[:len(_MAGIC)] != _MAGIC:
            self._refuse("not an index file of skalign (no magic line)")
        size = int.from_bytes(head[len(_MAGIC):], "little")
        if size > _MAX_HEADER:
            self._refuse(f"a header of {size} bytes")
        from ...utils._input_files import loads_bounded

        try:
            header = loads_bounded(os.pread(self._fd, size, len(head)), "", max_depth=6)
        except ValueError:
            self._refuse("its header is not JSON")
        ok = isinstance(header, dict) and header.get("format") == _FORMAT and all(
            isinstance(header.get(k), int) and not isinstance(header.get(k), bool)
            for k in ("rows", "dim", "lists", "probes")) \
            and header.get("metric") in ("cosine", "ip", "l2") \
            and isinstance(header.get("stamp"), dict)
        if not ok:
            self._refuse("its header is not that of an index of this format")
        n, d, lists, probes = (header[k] for k in ("rows", "dim", "lists", "probes"))
        if not (1 <= d <= 1 << 16 and 0 <= n < 1 << 40 and 1 <= lists <= max(n, 1)
                and 1 <= probes <= lists):
            self._refuse(f"its header's sizes are out of range (rows {n}, width {d}, "
                         f"{lists} lists, {probes} probes)")
        self.rows, self.dim, self.lists, self.probes = n, d, lists, probes
        self.metric, self.stamp = header["metric"], header["stamp"]
        self._at, end = _layout(n, d, lists)(len(head) + size)
        if st.st_size != end:
            self._refuse(f"{st.st_size} bytes where its header says {end}")
        self.centroids = self._array("centroids", 0, lists * d, np.float32).reshape(lists, d)
        if not np.isfinite(self.centroids).all():
            self._refuse("its centroids hold non-finite values")
        self.offsets = self._array("offsets", 0, lists + 1, np.int64)
        if self.offsets[0] != 0 or self.offsets[-1] != n or np.any(np.diff(self.offsets) < 0):
            self._refuse("its lists' offsets do not cover its rows")
        self._c_sq = np.einsum("ij,ij->i", self.centroids, self.centroids)
        self._c_unit = self.centroids / np.where(self._c_sq > 0, np.sqrt(self._c_sq), 1)[:, None]

    def _array(self, section, lo, count, dtype):
        item = np.dtype(dtype).itemsize
        data = os.pread(self._fd, count * item, self._at[section] + lo * item)
        if len(data) != count * item:
            self._refuse("it is truncated")
        return np.frombuffer(data, dtype=dtype)

    def check(self, store):
        """Raise :class:`IndexStaleError` unless this index was computed from ``store`` as it
        is now (its stamp, its metric), and :class:`~skalign.exceptions.StoreError` unless its
        slots hold each row once and a few of them hold the store's rows."""
        if self.metric != store.metric:
            raise IndexStaleError(f"{self.path}: an index for the {self.metric} metric, not "
                                  f"{store.metric}.")
        if self.stamp != store_stamp(store):
            raise IndexStaleError(f"{self.path}: computed from another state of the store "
                                  "(its files changed since).")
        seen = np.zeros(self.rows, dtype=bool)
        step = 1 << 20
        for lo in range(0, self.rows, step):
            p = self._array("positions", lo, min(step, self.rows - lo), np.int64)
            if len(p) and (p.min() < 0 or p.max() >= self.rows):
                self._refuse("its slots name rows outside the store")
            seen[p] = True
        if not seen.all():
            self._refuse("its slots do not hold each row of the store once")
        del seen
        if self.rows:
            slots = np.unique(np.random.default_rng().integers(0, self.rows, _CHECK_SLOTS))
            pos = np.array([self._array("positions", s, 1, np.int64)[0] for s in slots])
            mine = np.stack([self._array("vectors", s * self.dim, self.dim, np.float32)
                             for s in slots])
            order = np.argsort(pos)
            theirs = np.empty_like(mine)
            theirs[order] = np.asarray(store._rows(pos[order], None)[0], dtype=np.float32)
            if not np.array_equal(mine, theirs):
                raise IndexStaleError(f"{self.path}: its rows are not the store's (computed "
                                      "from other vectors).")

    def search(self, queries, k):
        """``(positions, scores)`` per query: the exact best ``k`` rows of the lists probed.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, dim), float32
        k : int

        Returns
        -------
        positions : list of ndarray of int64
            Rows of the store, best first.
        scores : list of ndarray of float32
            Their similarity under the index's metric.
        """
        with _one_blas_thread():
            return self._search(np.asarray(queries, dtype=np.float32), int(k))

    def _search(self, Q, k):
        dots = Q @ self.centroids.T
        if self.metric == "cosine":
            lead = Q @ self._c_unit.T
        elif self.metric == "l2":
            lead = 2 * dots - self._c_sq[None, :]
        else:
            lead = dots
        sizes = np.diff(self.offsets)
        out_p, out_s = [], []
        for q, row in zip(Q, lead):
            order = np.argsort(-row, kind="stable")
            held = np.cumsum(sizes[order])
            # the lists probed: at least `probes`, and as many as hold k rows
            upto = max(self.probes, int(np.searchsorted(held, min(k, self.rows))) + 1)
            chosen = np.sort(order[:upto])
            P, V, N = self._lists(chosen)
            S = similarity(q[None, :], V, self.metric, N)[0]
            top = np.argpartition(-S, k - 1)[:k] if len(S) > k else np.arange(len(S))
            top = top[np.argsort(-S[top], kind="stable")]
            out_p.append(P[top])
            out_s.append(S[top].astype(np.float32))
        return out_p, out_s

    def _lists(self, chosen):
        """Positions, vectors and squared norms of the lists ``chosen`` (sorted), read straight
        into their arrays, adjacent lists together."""
        starts, ends = self.offsets[chosen], self.offsets[chosen + 1]
        total = int((ends - starts).sum())
        P = np.empty(total, np.int64)
        V = np.empty((total, self.dim), np.float32)
        N = np.empty(total, np.float32)
        runs = np.flatnonzero(np.r_[True, starts[1:] != ends[:-1]])
        at = 0
        for a, b in zip(runs, np.r_[runs[1:], len(chosen)]):
            lo, hi = int(starts[a]), int(ends[b - 1])
            for array, section, item in ((P, "positions", 8), (N, "norms", 4),
                                         (V, "vectors", 4 * self.dim)):
                view = memoryview(array[at:at + hi - lo]).cast("B")
                if os.preadv(self._fd, [view], self._at[section] + lo * item) != len(view):
                    self._refuse("it is truncated")
            at += hi - lo
        return P, V, N

    def vectors_of(self, positions):
        """The vectors of the store's rows ``positions`` (an array of int64), as the index
        holds them (the store's rows as float32): each row's slot read, checked to hold that
        row, and its vector read."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.dim), np.float32)
        if len(positions) and (positions.min() < 0 or positions.max() >= self.rows):
            raise StoreError(f"{self.path}: rows outside the index asked for.")
        for j, p in enumerate(positions.tolist()):
            slot = int(self._array("slots", p, 1, np.int64)[0])
            if not 0 <= slot < self.rows or self._array("positions", slot, 1, np.int64)[0] != p:
                self._refuse(f"its slot of row {p} does not hold that row")
            view = memoryview(out[j]).cast("B")
            if os.preadv(self._fd, [view], self._at["vectors"] + slot * 4 * self.dim) \
                    != len(view):
                self._refuse("it is truncated")
        return out

    def close(self):
        self._file.close()


# ------------------------------------------------------------------------------- building
def _prepare(X, metric):
    """Rows as k-means sees them: unit length for cosine (a zero row stays zero)."""
    X = np.asarray(X, dtype=np.float32)
    if metric != "cosine":
        return X
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms > 0, norms, 1)


def _nearest(X, C, metric, step=8192):
    """The nearest centroid of each row of ``X`` (prepared), in blocks of ``step`` rows."""
    c_sq = np.einsum("ij,ij->i", C, C)
    out = np.empty(len(X), np.int32)
    for lo in range(0, len(X), step):
        S = X[lo:lo + step] @ C.T
        if metric != "cosine":
            S = 2 * S - c_sq[None, :]
        out[lo:lo + step] = np.argmax(S, axis=1)
    return out


def _kmeans(X, lists, metric, rng):
    """Lloyd's k-means of the sample ``X`` (prepared) into ``lists`` centroids, spherical for
    cosine; an emptied centroid is moved to a random row."""
    C = X[rng.choice(len(X), lists, replace=False)].copy()
    for _ in range(_KMEANS_ITERATIONS):
        a = _nearest(X, C, metric)
        counts = np.bincount(a, minlength=lists)
        order = np.argsort(a, kind="stable")
        filled = counts > 0
        sums = np.zeros(C.shape, np.float64)
        sums[filled] = np.add.reduceat(X[order], np.r_[0, np.cumsum(counts)[:-1]][filled],
                                       dtype=np.float64)
        empty = ~filled
        C = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        if empty.any():
            C[empty] = X[rng.choice(len(X), int(empty.sum()), replace=False)]
        if metric == "cosine":
            C = _prepare(C, metric)
    return C


def _sample(store, size, rng):
    """``size`` rows of the store at random, read in one pass over its windows."""
    want = np.sort(rng.choice(store.n_rows, size, replace=False))
    out, at = np.empty((size, store.dim), np.float32), 0
    for start, V in store._windows():
        lo, hi = np.searchsorted(want, [start, start + len(V)])
        out[at:at + hi - lo] = np.asarray(V, dtype=np.float32)[want[lo:hi] - start]
        at += hi - lo
    if at != size:
        raise StoreError(f"{store.path}: read {at} sampled rows of {size}; was the store "
                         "changed meanwhile?")
    return out


def build_index(store, path, *, random_state=0, progress=False):
    """Build the index of the exact live file store ``store`` into ``path`` (see
    :func:`index_path`), atomically: written under a temporary name beside it, fsynced, then
    renamed into place over an older index of skalign's (never over another file).

    Returns
    -------
    IvfIndex
        The new index, opened.
    """
    from ...utils._console import stage

    path = Path(path)
    n, d, metric = int(store.n_rows), int(store.dim), store.metric
    lists, probes = choose_lists(n)
    stamp = store_stamp(store)
    rng = np.random.default_rng(random_state)
    from ..live_input import shown

    # the store's name as repr shows it: no control character reaches the terminal
    with stage(f"building the index of {shown(path.parent.name[:-len(INDEX_SUFFIX)])} "
               f"({n} rows, {lists} lists)", progress):
        size = min(n, max(lists, min(SAMPLE_BYTES // (4 * max(d, 1)), 32 * lists)))
        C = _kmeans(_prepare(_sample(store, size, rng), metric), lists, metric, rng) \
            if n else np.zeros((1, d), np.float32)
        assign = np.empty(n, np.int32)
        for start, V in store._windows():
            assign[start:start + len(V)] = _nearest(_prepare(V, metric), C, metric)
        offsets = np.zeros(lists + 1, np.int64)
        offsets[1:] = np.cumsum(np.bincount(assign, minlength=lists))
        header = {"format": _FORMAT, "rows": n, "dim": d, "lists": lists, "probes": probes,
                  "metric": metric, "stamp": stamp,
                  "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        head = _header_bytes(header)
        at, end = _layout(n, d, lists)(len(head))
        with _publishing(path, store.path, end) as fd:
            os.pwrite(fd, head, 0)
            os.pwrite(fd, np.ascontiguousarray(C, np.float32).tobytes(), at["centroids"])
            os.pwrite(fd, offsets.tobytes(), at["offsets"])
            cursor = offsets[:-1].copy()
            for start, V in store._windows():
                V = np.ascontiguousarray(V, dtype=np.float32)
                a = assign[start:start + len(V)]
                order = np.argsort(a, kind="stable")
                groups, first = np.unique(a[order], return_index=True)
                bounds = np.r_[first, len(order)]
                norms = np.einsum("ij,ij->i", V, V)
                slots = np.empty(len(V), np.int64)
                for g, lo, hi in zip(groups, bounds[:-1], bounds[1:]):
                    rows = order[lo:hi]
                    slot = int(cursor[g])
                    slots[rows] = np.arange(slot, slot + hi - lo)
                    os.pwrite(fd, (rows + start).astype(np.int64).tobytes(),
                              at["positions"] + 8 * slot)
                    os.pwrite(fd, norms[rows].tobytes(), at["norms"] + 4 * slot)
                    os.pwrite(fd, V[rows].tobytes(), at["vectors"] + 4 * d * slot)
                    cursor[g] += hi - lo
                os.pwrite(fd, slots.tobytes(), at["slots"] + 8 * start)
            if not np.array_equal(cursor, offsets[1:]) or store_stamp(store) != stamp:
                raise StoreError(f"{store.path}: the store changed while its index was "
                                 "built; search it again.")
    index = IvfIndex(path)
    return index


@contextlib.contextmanager
def _publishing(path, store_path, size):
    """A descriptor of a new file of ``size`` bytes beside ``path``; on leaving, fsynced and
    renamed to ``path`` (refused when ``path`` holds anything but an index of skalign's)."""
    folder = _index_folder(path, store_path)
    file_mode, _ = output_modes(store_path)
    tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = create_file(tmp, file_mode)
    try:
        os.ftruncate(fd, size)
        yield fd
        os.fsync(fd)
        _check_replaceable(path)
        os.replace(tmp, path)
        fsync_dir(folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def _index_folder(path, store_path):
    """The folder of the index file ``path``, created (with the store's permission bits) where
    it is missing; anything but a folder at its name (a file, a link) is refused."""
    folder = path.parent
    try:
        os.mkdir(folder, output_modes(store_path)[1])
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"{folder}: cannot create the folder of the store's index "
                         f"({exc.strerror}); search with index='exact'.") from None
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise StoreError(f"{folder}: skalign keeps the store's index in this folder, but "
                         "something else is there (a file or a link); move it away.")
    return folder


@contextlib.contextmanager
def _build_lock(path, store_path):
    """An exclusive ``flock`` on ``.lock`` in the index's folder, waited for: one process
    builds an index at a time, the others then find it built."""
    import fcntl

    folder = _index_folder(path, store_path)
    try:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                     output_modes(store_path)[0])
    except OSError as exc:
        raise StoreError(f"{folder / '.lock'}: cannot open the lock of the store's index "
                         f"({exc.strerror}).") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _check_replaceable(path):
    """Refuse to replace anything at ``path`` but an index file of skalign's."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    ours = False
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            ours = f.read(len(_MAGIC)) == _MAGIC
    if not ours:
        raise StoreError(f"{path}: skalign keeps the store's index under this name, but a file "
                         "it did not write is there; it is never overwritten: move it away.")


def open_index(store, mode="auto", *, progress=False):
    """The index to rank the exact live file store ``store`` with, or ``None`` (rank exactly).

    Parameters
    ----------
    store : FileLiveStore
        A store without an index of its own (``store.exact``).
    mode : {"auto", "exact", "build", "existing"}
        See :data:`INDEX_MODES`.
    progress : bool
        A line on standard error while an index is built.

    Returns
    -------
    index : IvfIndex or None
    how : str
        ``"exact"``, ``"loaded"`` (a current index used), ``"built"`` (none was there) or
        ``"rebuilt"`` (the one there was stale).
    """
    if mode not in INDEX_MODES:
        raise ValueError(f"index={mode!r}: use one of {', '.join(INDEX_MODES)}.")
    if mode == "exact" or (mode == "auto" and store.n_rows < INDEX_MIN_ROWS) \
            or store.n_rows == 0:
        return None, "exact"
    path = index_path(store.path, store.metric, store.vector_column())
    if mode == "existing" and not os.path.lexists(path):
        raise StoreError(f"{store.path}: no index beside the store ({path} is missing); build "
                         "it with index='build' (skalign search --index build).")
    if mode != "build" and os.path.lexists(path):
        index, how = _current(store, path, mode)
        if index is not None or mode == "existing":
            return index, how
    with _build_lock(path, store.path):
        how = "built"
        if os.path.lexists(path):
            if mode != "build":  # built by another process while this one waited
                index, how = _current(store, path, mode)
                if index is not None:
                    return index, how
            _check_replaceable(path)
            how = "rebuilt"
        return build_index(store, path, progress=progress), how


def _current(store, path, mode):
    """``(index, "loaded")`` for the index at ``path`` when it is current, ``(None,
    "rebuilt")`` when it is stale (refused under ``"existing"``)."""
    index = IvfIndex(path)
    try:
        index.check(store)
        return index, "loaded"
    except IndexStaleError as exc:
        index.close()
        if mode == "existing":
            raise IndexStaleError(f"{exc} Build it again: index='build' (skalign search "
                                  "--index build).") from None
        return None, "rebuilt"
    except BaseException:
        index.close()
        raise


def use_index(store, mode="auto", progress=False):
    """Rank the live file store ``store`` through skalign's index beside it
    (:func:`open_index`, its ``mode``), setting ``store.ann``; returns how (``"exact"``,
    ``"loaded"``, ``"built"``, ``"rebuilt"``), or ``"own"`` for a store with an index of its
    own, which keeps it."""
    if not store.exact:
        return "own"
    if store.ann is not None:
        store.ann.close()
        store.ann = None
    store.ann, how = open_index(store, mode, progress=progress)
    return how
