"""The encoded rows of a live file store, kept beside it: the store's own files are never written.

A file store (``.npy``, Parquet, LanceDB, FAISS) cannot replace one row in place safely: a
reader holding the file memory-mapped would see a row half written. Its encoded vectors go
instead to an *overlay*, the folder ``PATH.skalign-live`` beside the store, as *segments*:
each write-back is one ``seg-NNNNNNNNNNNN.npz`` (the rows' positions in the store, their
vectors, their provenance marks) written under a temporary name, fsynced and renamed into
place. A reader lists the folder and loads the segments it has not seen, later ones winning
for the same row; a segment is there whole or not at all, so a row is seen with its old
vector and provenance or with its new ones, never a mix. Writers take an exclusive ``flock``
on ``PATH.skalign-live/.lock`` (waiting for it), so that segment numbers never collide;
every :data:`COMPACT_SEGMENTS` segments, the writer merges them into one (written first,
under the next number, then the older ones removed: a reader that finds a segment gone
loads the folder again).

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

__all__ = ["COMPACT_SEGMENTS", "OVERLAY_SUFFIX", "SEGMENT", "Overlay", "OverlayState",
           "rebinding"]

#: set by :func:`rebinding`: overlays opened meanwhile follow their store's rewrite
_REBIND = contextvars.ContextVar("skalign_overlay_rebind", default=False)


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
#: segments a writer lets accumulate before merging them into one
COMPACT_SEGMENTS = 64
#: a segment's file name
SEGMENT = re.compile(r"seg-([0-9]{12})\.npz")


@dataclass(frozen=True)
class OverlayState:
    """One consistent view of the overlay (replaced whole, never changed in place).

    Attributes
    ----------
    positions : ndarray of int64, sorted
        The store positions of the encoded rows.
    vectors : ndarray of shape (len(positions), dim), float32
    marks : ndarray of str
        Each row's provenance value.
    """

    positions: np.ndarray
    vectors: np.ndarray
    marks: np.ndarray

    @property
    def sq_norms(self):
        """Each row's squared norm (computed once per state)."""
        if "_sq" not in self.__dict__:
            object.__setattr__(self, "_sq", np.einsum("ij,ij->i", self.vectors, self.vectors))
        return self.__dict__["_sq"]

    def lookup(self, positions):
        """Index into this state of each of ``positions`` (-1 where the row is not encoded)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not len(self.positions):
            return np.full(len(positions), -1, dtype=np.int64)
        at = np.searchsorted(self.positions, positions).clip(0, len(self.positions) - 1)
        return np.where(self.positions[at] == positions, at, -1)

    def merged(self, positions, vectors, marks):
        """A new state: this one with the rows ``positions`` set (later rows win)."""
        positions = np.asarray(positions, dtype=np.int64)
        # the last occurrence of each position wins, as it does across segments
        _, last = np.unique(positions[::-1], return_index=True)
        keep = len(positions) - 1 - last
        positions, vectors, marks = positions[keep], vectors[keep], np.asarray(marks)[keep]
        old = ~np.isin(self.positions, positions)
        P = np.concatenate([self.positions[old], positions])
        order = np.argsort(P, kind="stable")
        V = np.concatenate([self.vectors[old], vectors.astype(np.float32, copy=False)])
        M = np.concatenate([self.marks[old].astype(str), np.asarray(marks, dtype=str)])
        return OverlayState(P[order], V[order], M[order])


def _merge(state, parts):
    """``state`` with the rows of ``parts`` (``(positions, vectors, marks)`` each, in order)
    set: the last occurrence of a position wins, as :meth:`OverlayState.merged` does, in one
    pass over all of them."""
    if not parts:
        return state
    P = np.concatenate([state.positions] + [p for p, _, _ in parts])
    _, last = np.unique(P[::-1], return_index=True)
    keep = len(P) - 1 - last  # sorted by position
    V = np.concatenate([state.vectors] + [v.astype(np.float32, copy=False)
                                          for _, v, _ in parts])
    M = np.concatenate([state.marks.astype(str)] + [np.asarray(m, dtype=str)
                                                    for _, _, m in parts])
    return OverlayState(P[keep], V[keep], M[keep])


def _empty_state(dim):
    return OverlayState(np.empty(0, np.int64), np.empty((0, dim), np.float32),
                        np.empty(0, dtype="<U1"))


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
        bad = (f"{self.folder / name}: not a segment of this {self.dim}-d store of "
               f"{self.base.get('rows')} rows ({{}}); remove {self.folder} to search the store "
               "as it is.")
        try:
            with np.load(self.folder / name, allow_pickle=False) as z:
                P, V, M = z["positions"], z["vectors"], z["marks"]
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001  (a planted file: numpy and zipfile raise many)
            raise StoreError(bad.format(f"unreadable: {type(exc).__name__}")) from None
        if P.ndim != 1 or P.dtype.kind not in "iu" or V.dtype.kind != "f" or M.dtype.kind != "U" \
                or V.ndim != 2 or V.shape != (len(P), self.dim) or M.shape != P.shape:
            raise StoreError(bad.format("wrong shapes or types"))
        rows = self.base.get("rows")
        if len(P) and (P.min() < 0 or (isinstance(rows, int) and P.max() >= rows)):
            raise StoreError(bad.format("a position outside the store"))
        if not np.isfinite(V).all() or (len(V) and np.abs(V).max() > 3e30):
            raise StoreError(bad.format("a vector that is not finite"))
        return P.astype(np.int64), V.astype(np.float32, copy=False), M

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
                self._append(positions[written], np.asarray(vectors)[written],
                             marks[written], file_mode)
        return written

    def _append(self, positions, vectors, marks, file_mode):
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
        tmp = self.folder / f".seg-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        fd = create_file(tmp, file_mode)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, positions=np.asarray(positions, dtype=np.int64),
                         vectors=np.ascontiguousarray(vectors, dtype=np.float32),
                         marks=np.asarray(marks, dtype=str))
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self.folder / f"seg-{number:012d}.npz")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.folder)


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
