"""What the database connectors share: shadow and backup names, the resume point, the lock."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from ..exceptions import StoreLockedError
from .journal import FileLock

__all__ = ["backup_name", "lock_for", "release_freed_memory", "resume_point", "shadow_name",
           "shadow_prefix"]


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
