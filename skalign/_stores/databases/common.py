"""What the database connectors share: shadow and backup names, the resume point, the lock."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from ...exceptions import StoreLockedError
from ..journal import FileLock

__all__ = ["LocalFolder", "backup_name", "lock_for", "release_freed_memory", "resume_point",
           "shadow_name", "shadow_prefix"]


def shadow_prefix(name):
    return f"{name}_skalign_"


def shadow_name(name, fp):
    """The shadow's name carries the job's fingerprint: a leftover of another job never
    resumes into this one (it is dropped instead)."""
    return f"{shadow_prefix(name)}{fp[:12]}"


def backup_name(name):
    return f"{name}_skalign_backup"


def resume_point(count, n_rows, batch_size):
    """Rows to skip: whole batches only (batches are written in order and upserts are
    idempotent, so a batch cut short by a crash is written again in full)."""
    return n_rows if count >= n_rows else count - count % batch_size


def consecutive_runs(positions):
    """``(first, count)`` of each run of consecutive positions in the sorted ``positions``: one
    engine read per run where an engine reads a range (offset and limit) at a time."""
    runs = []
    for pos in positions:
        if runs and pos == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([int(pos), 1])
    return [tuple(r) for r in runs]


def lock_for(address, folder=None):
    """A lock file in the database's folder (local modes) or, for a server, in this user's
    private lock folder (:func:`private_lock_dir`): two runs on one machine exclude each other;
    runs on two machines against one server do not (said in the guide). The file's name is a
    hash of the address's identity, which holds no credentials."""
    key = hashlib.sha256(repr(address.identity).encode()).hexdigest()[:24]
    if folder is not None:
        return FileLock(Path(folder) / f".{key}.skalign-lock", str(address))
    return FileLock(private_lock_dir() / f"{key}.lock", str(address))


def private_lock_dir():
    """``$TMPDIR/skalign-UID``, created 0700 and checked to be this user's own real folder
    (not a link another user planted, not open to others)."""
    folder = Path(tempfile.gettempdir()) / f"skalign-{os.getuid()}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise StoreLockedError(f"{folder}: the lock folder is not a private folder of this user "
                               "(a link, another owner or open permissions); remove it.")
    return folder


def release_freed_memory():
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere a
    no-op).

    The engines' Python clients free what they build per call (lists of floats, pickled points)
    in small blocks among blocks they keep, so the heap's free pages stay in the resident set;
    Qdrant's local mode unpickles every point of the folder when it opens it and keeps a
    large part of that freed memory resident otherwise."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return
    trim(0)


class LocalFolder:
    """The folder of an engine's local mode (Chroma's persistent client, Qdrant's local mode):
    recognised by a ``marker`` file, checked before a client is opened (a client creates the
    engine's files in any folder it is given), and created only when a translation starts.

    Parameters
    ----------
    engine : str
        The engine's name in messages (``"Chroma"``).
    scheme : str
        The address's scheme (``"chroma"``), for the form messages show.
    marker : str
        The file every such folder holds (``chroma.sqlite3``, ``meta.json``).
    """

    def __init__(self, engine, scheme, marker):
        self.engine, self.scheme, self.marker = engine, scheme, marker

    def is_store(self, folder):
        return (Path(folder) / self.marker).is_file()

    def check_store(self, address):
        """Refuse a folder that is not the engine's store, before a client is opened."""
        from ...exceptions import StoreNotFoundError

        path, form = address.path, f"({self.scheme}:DIR/COLLECTION)"
        if not path.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path}; check the path {form}.")
        if not self.is_store(path):
            raise StoreNotFoundError(f"{address}: {path} is not a {self.engine} folder (it has "
                                     f"no {self.marker}); check the path {form}.")

    def check_output(self, address):
        """Refuse, before any work, an output folder that cannot become the engine's store:
        its parent missing, a file, or a folder holding other things than such a store."""
        from ...exceptions import StoreError, StoreNotFoundError

        path, engine = address.path, self.engine
        if path.is_dir():
            if not self.is_store(path) and any(not _is_lock_file(p) for p in os.listdir(path)):
                raise StoreError(f"{address}: {path} is neither a {engine} folder nor empty; "
                                 f"give a {engine} folder, an empty folder or a new one.")
        elif path.exists() or path.is_symlink():
            raise StoreError(f"{address}: {path} is not a folder; give a {engine} folder or a "
                             f"new one ({self.scheme}:DIR/COLLECTION).")
        elif not path.parent.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {path.parent} to create {path.name} "
                                     f"in; check the path ({self.scheme}:DIR/COLLECTION).")

    @contextlib.contextmanager
    def creating(self, address):
        """Create a local output's folder (0700, where missing), then hold its lock."""
        from ...exceptions import StoreError

        try:
            address.path.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{address}: cannot create the folder {address.path} "
                             f"({exc.strerror}).") from None
        with lock_for(address, address.path) as held:
            yield held


    def writer_lock(self, address):
        """An output's lock; a local output's new folder is created first (the translation's
        first write: nothing before it creates anything)."""
        return lock_for(address) if address.path is None else self.creating(address)


def _is_lock_file(name):
    return name.startswith(".") and name.endswith(".skalign-lock")
