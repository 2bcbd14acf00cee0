"""The encoded rows of a live file store, kept beside it: the store's own files are never written.

A file store (``.npy``, Parquet, LanceDB, FAISS) cannot replace one row in place safely: a
reader holding the file memory-mapped would see a row half written. Its encoded vectors go
instead to an *overlay*, the folder ``PATH.skalign-live`` beside the store, as *segments*:
each write-back is one ``seg-NNNNNNNNNNNN.npz`` (the rows' positions in the store, their
vectors, their provenance marks) written under a temporary name, fsynced and renamed into
place. A reader lists the folder and reads the positions and marks of the segments it has not
seen, later ones winning for the same row (the marks held as their UTF-8 bytes,
:class:`Marks`: a quarter of a segment's ``<U`` array); their vectors stay in the segment
files, held open, and are read by row when asked for (:class:`LazyRows`), so that a reader's
memory does not grow with the encoded rows. A segment is there whole or not at all, so a row
is seen with its old vector and provenance or with its new ones, never a mix. Writers take an
exclusive ``flock`` on ``PATH.skalign-live/.lock`` (waiting for it), so that segment numbers
never collide; every :data:`COMPACT_SEGMENTS` segments, the writer merges them into one
(written first, under the next number, then the older ones removed: a reader that finds a
segment gone loads the folder again).

``base.json`` in the folder records the identity of the store the rows belong to, one another
store cannot share: rows, width, a digest of the ids in row order, and the files' devices,
inodes, sizes and times (a LanceDB table: its folder's device and inode and its version). A
store changed since (translated again with ``--replace``, restored, another table moved into
its place) no longer matches its encoded rows and is refused with one line naming the folder.
Every segment is checked as it is loaded (positions inside the store, finite vectors of its
width, text marks): a planted or truncated one is refused, never merged.

A write-back with ``expected`` provenance is a compare-and-set under the folder's lock: rows
whose mark changed since the writer read it are left as they are. ``skalign migrate
--continue``, which writes a file store anew from the same source (the same ids in the same
order), keeps the overlay: inside :func:`rebinding` the overlay of a store whose rows and ids
are those it recorded is bound to the store now at the path (``base.json`` replaced under the
lock), so every row another writer wrote meanwhile stays, and a kill between publishing the
new store and rebinding is finished by the next ``--continue``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import secrets
import threading
from dataclasses import dataclass

import numpy as np

from ...exceptions import StoreError
from ..journal import fsync_dir, write_durably
from .shadow import create_file, output_modes

__all__ = ["CHUNK_ROWS", "COMPACT_SEGMENTS", "HEADER_LOCK", "OVERLAY_SUFFIX", "SEGMENT", "FileRows",
           "LazyRows", "Marks", "Overlay", "OverlayState", "rebinding"]

#: set by :func:`rebinding`: overlays opened meanwhile follow their store's rewrite
_REBIND = contextvars.ContextVar("skalign_overlay_rebind", default=False)
#: taken while skalign parses a ``.npy`` header (a segment's, a ``.npy`` or FAISS store's,
#: written or read): numpy parses it with ``ast.literal_eval``, and CPython 3.11 keeps the AST
#: constructor's recursion depth in state its threads share (python/cpython#106905): a
#: searcher and a ``--continue`` step reading segments at once once raised a spurious
#: ``SystemError``, and a sound segment was refused
HEADER_LOCK = threading.RLock()
#: reads of a segment that raised ``SystemError`` (the interpreter's, not the file's) before
#: it is refused
_READ_TRIES = 3


@contextlib.contextmanager
def rebinding():
    """Inside, an overlay whose recorded store had the same rows, width and ids as the store
    now at its path is bound to that store instead of refused (``skalign migrate --continue``
    rewrote it from the same source); outside, any change of the store is refused."""
    token = _REBIND.set(True)
    try:
        yield
    finally:
        _REBIND.reset(token)

#: the overlay folder's name is the store's name with this suffix
OVERLAY_SUFFIX = ".skalign-live"


def has_overlay(address):
    """Whether the store at ``address`` is a file store with an overlay folder beside it."""
    from ..address import FILE_KINDS

    return address.kind in FILE_KINDS and \
        address.path.with_name(address.path.name + OVERLAY_SUFFIX).is_dir()

#: segments a writer lets accumulate before merging them into one
COMPACT_SEGMENTS = 64
#: a segment's file name
SEGMENT = re.compile(r"seg-([0-9]{12})\.npz")


#: rows read, checked or written at a time (a segment is never read whole)
CHUNK_ROWS = 8192


class FileRows:
    """Rows of vectors in an open file (a segment's), read on demand (``pread``), never
    loaded whole: a segment removed by a compaction stays readable through the open file.

    Parameters
    ----------
    f : file object
        The file, open for reading.
    offset : int
        Where the rows start (a segment's ``vectors`` array's data).
    n, dim : int
        Its rows and their width.
    dtype : numpy.dtype
        Its values' type (a float type; read as float32).
    """

    def __init__(self, f, offset, n, dim, dtype):
        self.f, self.offset, self.n, self.dim, self.dtype = f, offset, n, dim, dtype
        self.row_bytes = dim * dtype.itemsize

    def span(self, lo, hi):
        """Rows ``lo`` to ``hi`` (excluded), float32, read straight into the array returned."""
        out = np.empty((hi - lo, self.dim), self.dtype)
        buf, at, done = memoryview(out).cast("B"), self.offset + lo * self.row_bytes, 0
        while done < len(buf):  # a read returns at most about 2 GiB
            got = os.preadv(self.f.fileno(), [buf[done:done + (1 << 30)]], at + done)
            if not got:
                raise StoreError(f"{self.f.name}: a file of encoded rows was cut short while "
                                 "it was read; remove it, or its folder, to search the store "
                                 "as it is.")
            done += got
        return out if self.dtype == np.float32 else out.astype(np.float32)

    def rows(self, rows):
        """The rows ``rows`` (any order), float32: one read per run of consecutive rows."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (np.diff(rows) == 1).all():  # one run, in order: read as it is
            return self.span(int(rows[0]), int(rows[-1]) + 1)
        out = np.empty((len(rows), self.dim), np.float32)
        if not len(rows):
            return out
        order = np.argsort(rows, kind="stable")
        r = rows[order]
        cuts = np.flatnonzero(np.diff(r) != 1) + 1
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(r)]])):
            out[order[a:b]] = self.span(int(r[a]), int(r[b - 1]) + 1)
        return out


class LazyRows:
    """The overlay's vectors, row ``i`` being row ``rows[i]`` of segment ``segs[seg[i]]``:
    indexing (an integer, a slice, an array of integers or booleans) reads those rows alone;
    ``np.asarray`` reads them all.

    Attributes
    ----------
    shape : tuple
        ``(rows, dim)``.
    """

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, segs, seg, rows, dim):
        self.segs, self.seg, self.rows, self.dim = tuple(segs), seg, rows, dim
        self.shape = (len(seg), dim)

    def __len__(self):
        return len(self.seg)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self[np.array([key])][0]
        if isinstance(key, slice):
            idx = np.arange(len(self))[key]
        else:
            idx = np.asarray(key)
            idx = np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64)
        out = np.empty((len(idx), self.dim), np.float32)
        seg, rows = self.seg[idx], self.rows[idx]
        for s in np.unique(seg):
            at = seg == s
            out[at] = self.segs[s].rows(rows[at])
        return out

    def __array__(self, dtype=None, copy=None):
        V = self[:]
        return V if dtype is None else V.astype(dtype, copy=False)

    def chunks(self, size=None):
        """Yield ``(start, vectors)`` over every row, ``size`` rows at a time (default:
        :data:`CHUNK_ROWS`)."""
        size = size or CHUNK_ROWS
        for lo in range(0, len(self), size):
            yield lo, self[lo:lo + size]


class Marks:
    """Provenance values, one per row, held as their UTF-8 bytes in one numpy ``S`` array:
    a byte a character for the ASCII marks skalign writes, where a ``<U`` array (a segment's
    ``marks.npy``) takes four (220 bytes a row for a mark of 55 characters).

    An integer index gives the value as ``str``; a slice or an array of indexes or booleans, a
    :class:`Marks` of those rows; iterating and :meth:`tolist` give ``str`` values. A value
    comes back as a ``<U`` array gives it: trailing NUL characters dropped by both (a NUL is
    the only character whose UTF-8 holds a zero byte), a lone surrogate kept
    (``surrogatepass``).

    Parameters
    ----------
    raw : ndarray of bytes (``S``), one-dimensional
        The values' UTF-8 bytes.
    """

    def __init__(self, raw):
        self.raw = raw

    @classmethod
    def from_str(cls, values):
        """The :class:`Marks` of ``values`` (a ``<U`` array or a sequence of ``str``),
        encoded :data:`CHUNK_ROWS` rows at a time."""
        U = np.asarray(values, dtype=str)
        parts = [_utf8(U[lo:lo + CHUNK_ROWS]) for lo in range(0, len(U), CHUNK_ROWS)]
        return cls(_joined(parts))

    @property
    def shape(self):
        """``(rows,)``."""
        return self.raw.shape

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.raw[key].decode("utf-8", "surrogatepass")
        return Marks(self.raw[key])

    def __iter__(self):
        for lo in range(0, len(self.raw), CHUNK_ROWS):
            yield from self[lo:lo + CHUNK_ROWS].tolist()

    def tolist(self):
        """The values, a list of ``str``."""
        return [b.decode("utf-8", "surrogatepass") for b in self.raw.tolist()]

    def __array__(self, dtype=None, copy=None):
        U = np.array(self.tolist(), dtype=str)
        return U if dtype is None else U.astype(dtype, copy=False)

    def str_chunks(self, size=None):
        """``(width, chunks)``: the ``<U`` width that holds every value and an iterator of
        the values as ``<U{width}`` arrays, ``size`` rows at a time (a segment's marks are
        written so, never converted whole)."""
        size, n = size or CHUNK_ROWS, len(self.raw)
        if not n or np.ascontiguousarray(self.raw).view(np.uint8).max() < 0x80:
            width = max(self.raw.itemsize, 1)  # ASCII: numpy's own cast
            return width, (self.raw[lo:lo + size].astype(f"<U{width}")
                           for lo in range(0, n, size))
        width = max(np.array(self[lo:lo + size].tolist(), dtype=str).itemsize // 4
                    for lo in range(0, n, size))
        return width, (np.array(self[lo:lo + size].tolist(), dtype=f"<U{width}")
                       for lo in range(0, n, size))


def _utf8(U):
    """The ``<U`` array ``U`` as its values' UTF-8 bytes (an ``S`` array)."""
    try:
        return U.astype("S")  # ASCII: numpy's own cast, a byte a character
    except UnicodeEncodeError:
        return np.array([v.encode("utf-8", "surrogatepass") for v in U.tolist()], dtype="S")


def _joined(parts):
    """The ``S`` arrays ``parts`` end to end, as wide as the widest."""
    width = max([p.itemsize for p in parts] + [1])
    out = np.empty(sum(len(p) for p in parts), dtype=f"S{width}")
    at = 0
    for p in parts:
        out[at:at + len(p)] = p
        at += len(p)
    return out


@dataclass(frozen=True)
class OverlayState:
    """One consistent view of the overlay (replaced whole, never changed in place).

    Attributes
    ----------
    positions : ndarray of int64, sorted
        The store positions of the encoded rows.
    vectors : LazyRows of shape (len(positions), dim)
        Their vectors, read from the segments when indexed (never held whole).
    marks : Marks
        Each row's provenance value (``str`` when indexed by an integer or iterated).
    """

    positions: np.ndarray
    vectors: LazyRows
    marks: np.ndarray

    @property
    def sq_norms(self):
        """Each row's squared norm (computed once per state, a chunk of rows at a time)."""
        if "_sq" not in self.__dict__:
            sq = np.empty(len(self.positions), np.float32)
            for lo, V in self.vectors.chunks():
                sq[lo:lo + len(V)] = np.einsum("ij,ij->i", V, V)
            object.__setattr__(self, "_sq", sq)
        return self.__dict__["_sq"]

    def lookup(self, positions):
        """Index into this state of each of ``positions`` (-1 where the row is not encoded)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not len(self.positions):
            return np.full(len(positions), -1, dtype=np.int64)
        at = np.searchsorted(self.positions, positions).clip(0, len(self.positions) - 1)
        return np.where(self.positions[at] == positions, at, -1)


def _merge(state, parts):
    """``state`` with the rows of ``parts`` (``(positions, segment, marks)`` each, in order)
    set: the last occurrence of a position wins, as a later segment does, in one pass over
    all of them; no vector is read."""
    if not parts:
        return state
    old = state.vectors
    segs = list(old.segs) + [s for _, s, _ in parts]
    P = np.concatenate([state.positions] + [p for p, _, _ in parts])
    _, last = np.unique(P[::-1], return_index=True)
    keep = len(P) - 1 - last  # sorted by position
    S = np.concatenate([old.seg] + [np.full(len(p), len(old.segs) + j, np.int32)
                                    for j, (p, _, _) in enumerate(parts)])[keep]
    R = np.concatenate([old.rows] + [np.arange(len(p), dtype=np.int64)
                                     for p, _, _ in parts])[keep]
    # each source's kept rows copied straight into place: the marks of every row, kept or not,
    # are never put end to end
    sources = [state.marks] + [m for _, _, m in parts]
    M = np.empty(len(keep), dtype=f"S{max(m.raw.itemsize for m in sources)}")
    at = 0
    for m in sources:
        here = (keep >= at) & (keep < at + len(m))
        M[here] = m.raw[keep[here] - at]
        at += len(m)
    used = np.unique(S)  # segments no row refers to any more are let go (their files closed)
    renum = np.zeros(len(segs), np.int32)
    renum[used] = np.arange(len(used), dtype=np.int32)
    return OverlayState(P[keep], LazyRows([segs[i] for i in used], renum[S], R, old.dim),
                        Marks(M))


def _empty_state(dim):
    return OverlayState(np.empty(0, np.int64),
                        LazyRows([], np.empty(0, np.int32), np.empty(0, np.int64), dim),
                        Marks(np.empty(0, dtype="S1")))


class Overlay:
    """The overlay of the file store at ``store_path`` (see the module docstring).

    Parameters
    ----------
    store_path : pathlib.Path
        The store's file or folder.
    dim : int
        The vectors' width.
    base : dict
        The store's state (JSON-serialisable) that its encoded rows belong to.
    """

    def __init__(self, store_path, dim, base):
        self.store_path = store_path
        self.folder = store_path.with_name(store_path.name + OVERLAY_SUFFIX)
        self.dim, self.base = dim, base
        self.state = _empty_state(dim)
        self._seen = []
        self._mutex = threading.Lock()
        self._checked = False

    # ----------------------------------------------------------------------------- reading
    @property
    def seen(self):
        """The names of the segments the current :attr:`state` holds, in order."""
        return tuple(self._seen)

    def _segments(self):
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if SEGMENT.fullmatch(n))

    def _check_base(self):
        if self._checked:
            return
        try:
            with open(self.folder / "base.json", "rb") as f:
                recorded = json.loads(f.read(1 << 16))
        except FileNotFoundError:
            return  # no row written yet
        except (OSError, ValueError):
            recorded = None
        if recorded != self.base and self._rebind(recorded):
            self._checked = True
            return
        if recorded != self.base:
            raise StoreError(
                f"{self.store_path}: the store changed since the encoded rows in {self.folder} "
                "were written (translated again, restored or edited). If `skalign migrate "
                "--continue` was interrupted, run it again; otherwise remove that folder to "
                "search the store as it is now.")
        self._checked = True

    def _rebind(self, recorded):
        """Within :func:`rebinding`, bind an overlay of the same rows to this store."""
        same = ("rows", "dim", "ids")
        if not _REBIND.get() or not isinstance(recorded, dict) \
                or any(recorded.get(k) != self.base.get(k) for k in same):
            return False
        # an atomic replace: rebinding writers write the same identity (no lock taken here, as
        # a writer calls this while holding the folder's lock)
        write_durably(self.folder / "base.json", json.dumps(self.base, sort_keys=True).encode())
        return True

    def _load(self, name):
        """``(positions, segment, marks)`` of the segment ``name``, checked; its vectors are
        checked a chunk at a time and stay in the file (:class:`FileRows`)."""
        bad = (f"{self.folder / name}: not a segment of this {self.dim}-d store of "
               f"{self.base.get('rows')} rows ({{}}); remove {self.folder} to search the store "
               "as it is.")
        try:
            f = open(self.folder / name, "rb")  # noqa: SIM115  (held by the segment)
        except FileNotFoundError:
            raise
        try:
            for tries in range(_READ_TRIES, 0, -1):
                try:
                    with HEADER_LOCK:
                        P, seg, M = _open_segment(f, self.dim)
                    break
                except SystemError:
                    if tries == 1:
                        raise
                    f.seek(0)
        except _BadSegment as exc:
            f.close()
            raise StoreError(bad.format(str(exc))) from None
        except Exception as exc:  # noqa: BLE001  (a planted file: numpy and zipfile raise many)
            f.close()
            raise StoreError(bad.format(f"unreadable: {type(exc).__name__}")) from None
        rows = self.base.get("rows")
        if len(P) and (P.min() < 0 or (isinstance(rows, int) and P.max() >= rows)):
            f.close()
            raise StoreError(bad.format("a position outside the store"))
        try:
            for lo in range(0, len(P), CHUNK_ROWS):
                V = seg.span(lo, min(len(P), lo + CHUNK_ROWS))
                if not np.isfinite(V).all() or (len(V) and np.abs(V).max() > 3e30):
                    raise _BadSegment("a vector that is not finite")
        except (_BadSegment, StoreError) as exc:
            f.close()
            raise StoreError(bad.format(str(exc) if isinstance(exc, _BadSegment)
                                        else "cut short")) from None
        return P.astype(np.int64), seg, M

    def refresh(self):
        """Load the segments written since the last call; return the current state."""
        with self._mutex:
            self._check_base()
            for _ in range(8):  # a compaction may remove segments while they are listed
                names = self._segments()
                state, seen = self.state, self._seen
                if any(n not in names for n in seen):  # merged into a later segment
                    state, seen = _empty_state(self.dim), []
                try:
                    new = [n for n in names if n not in seen]
                    parts = [self._load(n) for n in new]
                except FileNotFoundError:
                    continue
                # merged at once: one segment at a time copied the whole state per segment
                # (49 segments of 2,048 rows took 25 s to open at 10^5 encoded rows)
                state, seen = _merge(state, parts), seen + new
                self.state, self._seen = state, seen
                return state
            raise StoreError(f"{self.folder}: segments kept changing while read; try again.")

    # ----------------------------------------------------------------------------- writing
    def _folder_for_writing(self):
        file_mode, dir_mode = output_modes(self.store_path)
        if self.folder.is_symlink():
            raise StoreError(f"{self.folder}: is a symbolic link; remove it (encoded rows are "
                             "written in a real folder beside the store).")
        try:
            os.mkdir(self.folder, dir_mode)
        except FileExistsError:
            pass
        return file_mode

    def write(self, positions, vectors, marks, expected=None):
        """Add one segment with these rows (durably, atomically for readers).

        With ``expected`` (one provenance value or ``None`` per row), a compare-and-set under
        the folder's lock: only rows whose mark is still the expected one are written.

        Returns
        -------
        written : ndarray of bool
        """
        file_mode = self._folder_for_writing()
        positions = np.asarray(positions, dtype=np.int64)
        marks = np.asarray(marks, dtype=str)
        with _Flock(self.folder / ".lock"):
            self._check_base()
            if not (self.folder / "base.json").exists():
                write_durably(self.folder / "base.json",
                              json.dumps(self.base, sort_keys=True).encode())
                self._checked = True
            written = np.ones(len(positions), dtype=bool)
            if expected is not None:
                state = self.refresh()
                slot = state.lookup(positions)
                now = [str(state.marks[j]) if j >= 0 else None for j in slot]
                written = np.array([a == b for a, b in zip(now, expected)], dtype=bool)
            if written.any():
                V = np.asarray(vectors)
                self._append(positions[written], V if written.all() else V[written],
                             marks[written], file_mode)
        return written

    def _append(self, positions, vectors, marks, file_mode):
        # in the store's order (stable: of a row written twice, the later still wins), so
        # that rows near one another in the store are read from a segment in one read
        order = np.argsort(positions, kind="stable")
        if (np.diff(order) != 1).any():
            positions, vectors, marks = positions[order], vectors[order], marks[order]
        names = self._segments()
        last = int(SEGMENT.fullmatch(names[-1]).group(1)) if names else 0
        self._write_segment(last + 1, positions, vectors, marks, file_mode)
        if len(names) + 1 >= COMPACT_SEGMENTS:
            state = self.refresh()
            self._write_segment(last + 2, state.positions, state.vectors, state.marks,
                                file_mode)
            for name in names + [f"seg-{last + 1:012d}.npz"]:
                (self.folder / name).unlink(missing_ok=True)
            fsync_dir(self.folder)

    def _write_segment(self, number, positions, vectors, marks, file_mode):
        """Write one segment durably under ``number`` (a ``.npz`` :func:`numpy.load` reads),
        its vectors a chunk at a time (a compaction's come from the older segments)."""
        import zipfile

        tmp = self.folder / f".seg-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = create_file(tmp, file_mode)
        try:
            with os.fdopen(fd, "wb") as f:
                with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
                    with z.open("positions.npy", "w", force_zip64=True) as m:
                        np.lib.format.write_array(m, np.asarray(positions, dtype=np.int64),
                                                  allow_pickle=False)
                    marks = marks if isinstance(marks, Marks) else Marks.from_str(marks)
                    width, chunks = marks.str_chunks()
                    with z.open("marks.npy", "w", force_zip64=True) as m:  # a <U array, as ever
                        np.lib.format.write_array_header_1_0(m, {
                            "descr": np.lib.format.dtype_to_descr(np.dtype(f"<U{width}")),
                            "fortran_order": False, "shape": (len(marks),)})
                        for U in chunks:
                            m.write(memoryview(U).cast("B"))
                    with z.open("vectors.npy", "w", force_zip64=True) as m:
                        np.lib.format.write_array_header_1_0(m, {
                            "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                            "fortran_order": False, "shape": (len(vectors), self.dim)})
                        for lo in range(0, len(vectors), CHUNK_ROWS):
                            m.write(memoryview(np.ascontiguousarray(
                                vectors[lo:lo + CHUNK_ROWS], dtype=np.float32)).cast("B"))
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self.folder / f"seg-{number:012d}.npz")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.folder)


class _BadSegment(Exception):
    """A segment file that is not one skalign wrote (the reason)."""


def _open_segment(f, dim):
    """``(positions, segment, marks)`` of the segment file open as ``f`` (a ``.npz`` of
    uncompressed members, as :func:`numpy.savez` and :meth:`Overlay._write_segment` write
    them): positions and marks read, the vectors' place in the file found."""
    import zipfile

    with zipfile.ZipFile(f) as z:
        names = set(z.namelist())
        if not {"positions.npy", "vectors.npy", "marks.npy"} <= names:
            raise _BadSegment("wrong shapes or types")
        P = _member_array(z, "positions.npy")
        M = _member_marks(z, "marks.npy")
        info = z.getinfo("vectors.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        raise _BadSegment("compressed vectors")
    head = os.pread(f.fileno(), 30, info.header_offset)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise _BadSegment("unreadable: BadZipFile")
    start = info.header_offset + 30 + int.from_bytes(head[26:28], "little") \
        + int.from_bytes(head[28:30], "little")
    f.seek(start)
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
        np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    offset = f.tell()
    if P.ndim != 1 or P.dtype.kind not in "iu" or dtype.kind != "f" \
            or not isinstance(M, Marks) or fortran or len(shape) != 2 \
            or tuple(shape) != (len(P), dim) or M.shape != P.shape:
        raise _BadSegment("wrong shapes or types")
    if offset - start + len(P) * dim * dtype.itemsize != info.file_size:
        raise _BadSegment("wrong shapes or types")
    return P, FileRows(f, offset, len(P), dim, dtype), M


def _member_array(z, name):
    with z.open(name) as m:
        return np.lib.format.read_array(m, allow_pickle=False)


def _member_marks(z, name):
    """The member ``name``: a one-dimensional ``<U`` array as :class:`Marks`, read and encoded
    :data:`CHUNK_ROWS` rows at a time (never held whole as ``<U``); anything else as
    :func:`numpy.lib.format.read_array` reads it (refused by the caller), with its errors."""
    with z.open(name) as m:
        version = np.lib.format.read_magic(m)
        read = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is not None:
            shape, _, dtype = read(m)  # the order of a one-dimensional array changes nothing
            if dtype.kind == "U" and dtype.itemsize and len(shape) == 1 and shape[0] >= 0:
                parts = []
                for lo in range(0, shape[0], CHUNK_ROWS):
                    k = min(CHUNK_ROWS, shape[0] - lo)
                    data = m.read(k * dtype.itemsize)
                    if len(data) != k * dtype.itemsize:  # as read_array says it
                        raise ValueError("EOF: reading array data")
                    parts.append(_utf8(np.frombuffer(data, dtype=dtype)))
                return Marks(_joined(parts))
    M = _member_array(z, name)
    return Marks.from_str(M) if M.dtype.kind == "U" and M.ndim == 1 else M


class _Flock:
    """An exclusive ``flock`` on ``path``, waited for (writers of one overlay take turns)."""

    def __init__(self, path):
        self.path, self._fd = path, None

    def __enter__(self):
        import fcntl

        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                               | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:  # ELOOP: a link planted at the lock's name
            raise StoreError(f"{self.path}: cannot open the lock file ({exc.strerror}); remove "
                             "what is there.") from None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self._fd)  # releases the lock; the file stays (removing it would race)
        self._fd = None
        return False
