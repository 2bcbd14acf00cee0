"""What the engines' live stores (:mod:`.chroma.live`, :mod:`.qdrant.live`,
:mod:`.pgvector.live`) share: the checks of what they are given, before the engine sees it
(queries and vectors of the store's width and finite, ``k`` a positive integer, ids unique and
of a type the engine's client sends as it received it, a provenance mark that is text), and the
process's lock of a database whose engine does not replace a row's vector and metadata at once
(:func:`database_lock`)."""

from __future__ import annotations

import numbers
import os
import stat
import threading
import uuid

import numpy as np

from ..exceptions import StoreError, StoreNotFoundError

__all__ = ["check_ids", "check_k", "check_mark", "check_options", "check_vectors",
           "check_write", "database_lock", "missing_id", "shown"]

#: a database's identity (its folder or server) -> the lock of :func:`database_lock`
_LOCKS = {}
_LOCKS_LOCK = threading.Lock()


def database_lock(address):
    """The lock every live store of ``address``'s database (a local folder, a server; the
    identity without the collection: an alias and its collection share it) takes around its
    reads and write-backs, where the engine applies a row's new vector and its new metadata in
    two steps a concurrent read can fall between, and where a compare-and-set write-back
    re-reads the rows' provenance before it writes.

    Re-entrant in a thread; across threads of the process a lock, and across processes of the
    machine an exclusive ``flock`` on a file named by a digest of the identity, in a folder
    of the user's own (mode 0700: ``$XDG_RUNTIME_DIR/skalign-locks``, else
    ``~/.cache/skalign/locks``)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(address.identity[:-1], _DatabaseLock(address.identity[:-1]))


class _DatabaseLock:
    def __init__(self, identity):
        import hashlib

        self._lock = threading.RLock()
        self._depth = 0
        self._fd = None
        self._name = hashlib.sha256(repr(identity).encode()).hexdigest()[:32] + ".lock"

    def _file(self):
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        folder = os.path.join(runtime, "skalign-locks") if runtime else \
            os.path.join(os.path.expanduser("~"), ".cache", "skalign", "locks")
        try:
            os.makedirs(folder, 0o700, exist_ok=True)
            st = os.lstat(folder)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # not a private folder of ours: the process's lock only
        try:
            return os.open(os.path.join(folder, self._name), os.O_RDWR | os.O_CREAT
                           | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return None

    def __enter__(self):
        import fcntl

        self._lock.acquire()
        if self._depth == 0:
            try:
                self._fd = self._file()
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._lock.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        self._lock.release()
        return False


def check_options(address, options):
    """Refuse options an engine's live store does not take (they belong to file stores)."""
    if options:
        raise StoreError(f"{address}: {address.kind} stores take no option "
                         f"{', '.join(sorted(options))}; leave it out.")


def check_k(k):
    """``k`` as an ``int`` of at least 1."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    return int(k)


def check_vectors(vectors, dim, address, what="queries"):
    """``vectors`` as a C-contiguous float32 array of shape ``(n, dim)``, every value finite.

    Parameters
    ----------
    vectors : array-like of shape (n, dim)
    dim : int
        The store's width (0: a store without rows, whose width is not known yet).
    address : Address
        Named in the messages.
    what : str
        What the rows are, in the messages.
    """
    try:
        X = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise StoreError(f"{address}: {what} are not an array of numbers.") from None
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2:
        raise StoreError(f"{address}: {what} must be a 2-D array (n, {dim}), got shape "
                         f"{X.shape}.")
    if dim and X.shape[1] != dim:
        raise StoreError(f"{address}: {what} have {X.shape[1]} dimensions but the store's "
                         f"vectors have {dim}.")
    finite = np.isfinite(X).all(axis=1)
    if not finite.all():
        raise StoreError(f"{address}: {what} row {int(np.flatnonzero(~finite)[0])} holds a "
                         "value a float32 cannot hold (infinite or NaN).")
    return np.ascontiguousarray(X)


def check_ids(ids, address):
    """``ids`` as a list of Python scalars (a numpy integer as ``int``), each once."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise StoreError(f"{address}: ids must be a list of ids, got {type(ids).__name__}.")
    out = [i.item() if isinstance(i, np.generic) else i for i in ids]
    seen = set()
    for i in out:
        if isinstance(i, bool) or not isinstance(i, (int, str, uuid.UUID)):
            raise StoreError(f"{address}: id {shown(i)} is a {type(i).__name__}; ids are the "
                             "store's own (integers, text or UUIDs), as top_k returns them.")
        if i in seen:
            raise StoreError(f"{address}: id {shown(i)} is given twice; give each row once.")
        seen.add(i)
    return out


def check_mark(mark, address):
    """The provenance value: non-empty text."""
    if not isinstance(mark, str) or not mark:
        raise StoreError(f"{address}: the provenance mark must be non-empty text, got "
                         f"{shown(mark)}.")
    return mark


def check_write(address, ids, vectors, marks, expected, dim):
    """A write-back's input checked once: ``(ids, vectors, marks, expected)`` with ``marks`` a
    list of one value per row (one value given is every row's) and ``expected`` ``None`` or a
    list of one value per row (text, or ``None`` for a row without provenance)."""
    ids = check_ids(ids, address)
    V = check_vectors(vectors, dim, address, "vectors")
    if len(V) != len(ids):
        raise StoreError(f"{address}: {len(ids)} ids but {len(V)} vectors; give one vector per "
                         "id.")
    if isinstance(marks, str) or marks is None:
        marks = [check_mark(marks, address)] * len(ids)
    else:
        marks = [check_mark(m, address) for m in marks]
        if len(marks) != len(ids):
            raise StoreError(f"{address}: {len(ids)} ids but {len(marks)} provenance marks.")
    if expected is not None:
        expected = list(expected)
        if len(expected) != len(ids) or not all(e is None or isinstance(e, str)
                                                for e in expected):
            raise StoreError(f"{address}: expected provenance must be one text or None per id.")
    return ids, V, marks, expected


def shown(value):
    """A value as a message shows it: its ``repr``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def missing_id(address, ident):
    """The error for an id the store does not hold."""
    return StoreNotFoundError(f"{address}: no row with id {shown(ident)}; ids are the "
                              "store's own, as top_k returns them.")
