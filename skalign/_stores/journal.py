"""Crash safety shared by every store: one writer per output (a lock), a fsynced journal of the
rows committed so far in the shadow output, and the fingerprint that says whether a leftover
shadow belongs to the same job (then it is resumed) or to another one (then it is removed).

The publish is the last step that can be interrupted: the output's stamp is written with the
shadow, before it goes in place, marked :data:`PUBLISHING` until the steps after the publish are
done (a file store's journal in a publish phase says the same), so that the same command run
again after a kill anywhere finishes them
(:func:`skalign._stores.pipeline.translate.translate_store`).

No skalign module is imported here, so the store modules and the connectors can both use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

from ..exceptions import StoreLockedError

__all__ = ["COMMIT_SECONDS", "KILL_AT_ENV", "PUBLISHING", "CommitClock", "FileLock",
           "Interrupted", "final_stamp", "fingerprint", "kill_point", "model_fingerprint",
           "pending_stamp", "read_journal", "write_journal", "write_durably"]

#: The key of a stamp written before its output's publish, removed once every step after the
#: publish is done: a store whose stamp holds it had its publish interrupted (its value: what
#: the rest needs, ``{"backup": bool}``, whether the publish kept an earlier output as backup)
PUBLISHING = "publishing"

#: Test hook, never set in use: ``SKALIGN_TEST_KILL_AT=STEP`` makes ``skalign translate`` kill
#: itself (``SIGKILL``) at that step of its publish (:func:`kill_point`): ``publishing`` (the
#: stamp recorded with the shadow, nothing moved yet), ``backed-up`` (an existing output moved
#: to its backup, the translation not yet in place; ``--replace`` only) and ``published`` (the
#: translation in place, the steps after it not done). The kill tests
#: (``tests/test_publish_window.py``) set it in the process they kill.
KILL_AT_ENV = "SKALIGN_TEST_KILL_AT"


def kill_point(step):
    """The test hook :data:`KILL_AT_ENV`: ``SIGKILL`` this process at ``step`` where the
    variable names it (nothing else, and nothing at all where it is unset)."""
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def pending_stamp(stamp, backup):
    """``stamp`` marked :data:`PUBLISHING` (``backup``: whether the publish keeps the existing
    output as the backup)."""
    return {**stamp, PUBLISHING: {"backup": bool(backup)}}


def final_stamp(stamp):
    """``stamp`` without the :data:`PUBLISHING` mark."""
    return {k: v for k, v in stamp.items() if k != PUBLISHING}


class Interrupted(NamedTuple):
    """A publish a killed run left with its output in place (what a backend's
    ``recover_publish`` yields for the same command to finish)."""

    #: the stamp recorded for the output (with the :data:`PUBLISHING` mark where the engine
    #: holds it)
    stamp: dict
    #: the backup's :class:`~skalign._stores.address.Address` that publish kept (``None``: none)
    backup: Any
    #: ``finish(stamp)``: the last step, ``stamp`` (without the mark) as the output's stamp and
    #: the publish's record (the mark, the journal) removed
    finish: Callable[[dict], None]

#: Seconds of work between two durable commits (fsync of the data, then of the journal). A
#: crash loses at most this much work plus one batch; committing every batch instead would
#: make each batch wait for the disk.
COMMIT_SECONDS = 1.0


class CommitClock:
    """When the next durable commit is due: ``COMMIT_SECONDS`` after the last one (read when
    the clock starts, so a test can set it to 0 to commit every batch)."""

    def __init__(self):
        self.seconds = COMMIT_SECONDS
        self.last = time.monotonic()

    def due(self):
        return time.monotonic() - self.last >= self.seconds

    def reset(self):
        self.last = time.monotonic()


def model_fingerprint(model):
    """A short hash of the fitted model alone (what a provenance stamp records)."""
    h = hashlib.sha256()
    _hash_model(h, model)
    return h.hexdigest()[:32]


def _hash_model(h, model):
    try:
        h.update(pickle.dumps(model, protocol=4))
    except (AttributeError, TypeError, pickle.PicklingError):  # e.g. a class defined locally
        h.update(f"{type(model).__module__}.{type(model).__qualname__}".encode())
        for key, value in sorted(vars(model).items()):
            h.update(key.encode())
            h.update(value.tobytes() if hasattr(value, "tobytes") else repr(value).encode())


def fingerprint(model, source, output, batch_size, column):
    """A short hash of everything that decides the output's bytes."""
    h = hashlib.sha256()
    _hash_model(h, model)
    h.update(json.dumps([str(source), str(output), int(batch_size), column]).encode())
    return h.hexdigest()[:32]


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path, data):
    """Write ``data`` (bytes) to ``path`` atomically and durably (fsync, rename, fsync dir).
    The temporary file is created afresh (``O_EXCL``, no link followed: a name planted there
    is refused, not written through)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".new")
    try:
        os.unlink(tmp)  # a crashed run's; a link is removed, not followed
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_journal(path, **state):
    write_durably(path, json.dumps(state, sort_keys=True).encode())


def read_journal(path):
    """The journal's dict, or ``None`` when there is none or it is unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``path``; the second holder fails at once.

    The kernel drops the lock when its process dies (SIGKILL included), so a crashed run never
    blocks the next one; the lock file itself is removed when the lock is released normally.
    """

    def __init__(self, path, what):
        self.path, self.what, self._fd = Path(path), what, None

    def __enter__(self):
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:  # ELOOP: a symbolic link planted at the lock's name
            raise StoreLockedError(
                f"{self.what}: cannot create the lock file {self.path} ({exc.strerror}); "
                "remove what is there if no skalign run is using it.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                pid = os.read(fd, 32).decode().strip() or "?"
            finally:
                os.close(fd)
            raise StoreLockedError(
                f"{self.what}: another skalign translate (pid {pid}) is writing this output; "
                "wait for it to finish (or stop it, then run the same command again to resume)."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc):
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None
        return False
