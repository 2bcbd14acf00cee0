"""What the database connectors share: shadow and backup names, the resume point, the lock."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from .._journal import FileLock

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
    """A lock file in the database's folder (local modes) or, for a server, in the temporary
    folder of this machine: two runs on one machine exclude each other; runs on two machines
    against one server do not (said in the guide)."""
    key = hashlib.sha256(repr(address.identity).encode()).hexdigest()[:16]
    if folder is not None:
        return FileLock(Path(folder) / f".{address.name}.skalign-lock", address.display)
    return FileLock(Path(tempfile.gettempdir()) / f"skalign-{key}.lock", address.display)


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
