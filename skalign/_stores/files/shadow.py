"""Shadow outputs on the file system, shared by the file stores (``.npy``, Parquet, LanceDB, FAISS).

Every output is written under a hidden name in the destination's folder (so the final rename is
atomic), committed about every ``COMMIT_SECONDS`` (the data fsynced, then a fsynced journal
beside it saying how far it reaches), and renamed into place when complete; ``--replace`` keeps
the previous output as ``STEM-skalign-backup SUFFIX``.

The publish (:meth:`FileShadow.publish`) is recorded in the journal before its first step (the
phase, the stamp, whether an existing output goes to the backup), each step done so that doing
it again is harmless, and the journal removed only when every step after it is done
(:func:`end_publish`): a kill at any instant leaves a journal that the same command, run again,
finishes from (:func:`recover_publish`) — the backup moved with its stamp, the stamp written
beside the output before the output is renamed into place (never an output without its stamp,
nor one with another's), the shadow's other files removed.

The shadow is created with the permission bits of the source (and, under ``--replace``, no
looser than those of the output it replaces; :meth:`FileShadow.file_mode`), so that a private
source never has a world-readable translation, not even while it is written. Every name the
writer creates is created afresh without following a link planted there (``O_EXCL |
O_NOFOLLOW``, :func:`create_file`); leftovers at those names, links included, are removed
first, never written through.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from contextlib import contextmanager
from glob import escape as glob_escape
from pathlib import Path

from ...exceptions import StoreError, StoreExistsError
from ..base import StoreWriter
from ..journal import (
    CommitClock,
    FileLock,
    Interrupted,
    fsync_dir,
    kill_point,
    read_journal,
    write_durably,
    write_journal,
)

__all__ = ["BACKUP_SUFFIX", "PUBLISH_PHASES", "FileShadow", "atomic_file", "check_output",
           "check_parent", "create_file", "end_publish", "file_backup", "is_file_backup",
           "journal_path", "open_file", "output_modes", "recover_publish", "remove_path",
           "replace_path", "restore_file", "sidecar_path", "swap_paths", "tmp_sibling",
           "write_sidecar"]

#: the suffix of a backup's name: ``STEM-skalign-backup.EXT`` for files,
#: ``NAME_skalign_backup`` for tables and collections
BACKUP_SUFFIX = "skalign-backup"

#: The phases of a publish in a file store's journal: ``publish`` (the stamp recorded, the
#: existing output being moved to the backup with its stamp) and ``moved`` (no output in the
#: way: the stamp is written beside the output, then the shadow renamed into place). The journal
#: stays until the steps after the publish are done (:func:`end_publish`).
PUBLISH_PHASES = ("publish", "moved")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def tmp_sibling(path, suffix=""):
    """A fresh hidden name next to ``path`` (same folder, so the final rename is atomic)."""
    stem = path.name[: -len(suffix)] if suffix and path.name.endswith(suffix) else path.name
    return path.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def remove_path(path):
    """Remove a file or a folder; a link is removed, not what it points to."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        path.unlink(missing_ok=True)


def create_file(path, mode=0o666, flags=os.O_RDWR):
    """Create ``path`` afresh with the permission bits ``mode`` (less the umask) and return
    its descriptor: whatever is at that name, a link planted there included, is refused
    (``FileExistsError``), never followed or truncated."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)


def open_file(path, mode="r+b", perms=0o666):
    """``open(path, mode)`` without following a link at ``path`` (``ELOOP``); ``"x"`` modes
    create the file afresh (nothing may be there) with the permission bits ``perms`` (less
    the umask). The file object keeps its name (direct I/O opens it again by it)."""
    return open(path, mode, opener=lambda p, flags: os.open(p, flags | _NOFOLLOW, perms))


def replace_path(tmp, path):
    """Move ``tmp`` to ``path``, replacing a file or folder already there."""
    if path.is_dir() and not path.is_symlink():
        old = tmp_sibling(path, ".old")
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)


def check_parent(path):
    if not path.parent.is_dir():
        raise StoreError(f"{path}: folder {path.parent} does not exist; create it first.")


def check_output(path, makes_parent=False):
    """Refuse, before any work, an output that is a symbolic link (dangling or not: the
    publish would replace the link, not what it points to) or whose folder is missing (unless
    the engine ``makes_parent``: a LanceDB output creates its database's folder)."""
    if path.is_symlink():
        raise StoreError(f"{path}: OUTPUT is a symbolic link; give the real path (or remove the "
                         "link).")
    if not makes_parent:
        check_parent(path)


def sidecar_path(address):
    """A file store's stamp file: ``PATH.skalign.json`` beside it."""
    return address.path.with_name(address.path.name + ".skalign.json")


def _stem(path, suffix):
    name = path.name
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name


def file_backup(address, suffix):
    """Where ``--replace`` keeps the file store at ``address`` (its kind's files ending in
    ``suffix``, ``""`` for a folder): ``STEM-skalign-backup SUFFIX`` beside it."""
    path = address.path
    return address.with_path(path.with_name(f"{_stem(path, suffix)}-{BACKUP_SUFFIX}{suffix}"))


def is_file_backup(address, suffix):
    """Whether the file store at ``address`` is named as a backup (:func:`file_backup`)."""
    return _stem(address.path, suffix).endswith(f"-{BACKUP_SUFFIX}")


def source_mode(path, default=0o644):
    """The permission bits an output derived from ``path`` gets: those of ``path`` (the file,
    or the folder's files), so that a private source never gives a world-readable output."""
    try:
        st = os.stat(path)
    except OSError:
        return default
    mode = st.st_mode & 0o777
    return mode & 0o666 if not os.path.isdir(path) else mode


def _file_bits(path):
    """The read and write bits of ``path``'s files: a file's own, a folder's without the
    search bits; ``None`` where there is nothing there."""
    mode = source_mode(path, default=None)
    return None if mode is None else mode & 0o666


def output_modes(source, replaced=None):
    """``(file mode, folder mode)`` of an output translated from the file store at ``source``
    (a path; ``None``: a database, the default bits) and replacing ``replaced`` (``None``, or a
    path that may not exist): the source's bits, no looser than the replaced output's. The
    umask still applies when the files are created."""
    mode = 0o666
    for path in (source, replaced):
        bits = _file_bits(path) if path is not None else None
        if bits is not None:
            mode &= bits
    mode |= 0o600  # the owner keeps reading and writing their own output
    return mode, mode | (mode & 0o444) >> 2  # folders: searchable by whoever may read


def lock_path(path):
    """The lock file of the file store at ``path`` (its writers and its restore share it)."""
    return path.with_name(f".{path.name}.skalign-lock")


def journal_path(path):
    """The journal of the shadow of the file store at ``path``."""
    return path.with_name(f".{path.name}.skalign-journal")


def restore_file(address, suffix):
    """Swap a file store (its kind's files ending in ``suffix``) and its backup (``skalign
    restore``); return the backup's address."""
    backup = file_backup(address, suffix)
    path, bpath = address.path, backup.path
    if not (bpath.exists() or bpath.is_symlink()):
        from ...exceptions import StoreNotFoundError

        raise StoreNotFoundError(f"{path}: no backup {bpath.name} to restore; a backup is kept "
                                 "only by `skalign translate --replace`.")
    with FileLock(lock_path(path), str(address)):
        swap_paths(path, bpath)
    return backup


@contextmanager
def atomic_file(path, suffix=""):
    """Yield a temporary path next to ``path``; rename it to ``path`` if the block succeeds.

    On any exception the temporary file (or folder) is removed and the exception re-raised.
    """
    path = Path(path)
    check_parent(path)
    tmp = tmp_sibling(path, suffix)
    try:
        yield tmp
        replace_path(tmp, path)
    except BaseException:
        remove_path(tmp)
        raise


def _fsync(f):
    f.flush()
    os.fsync(f.fileno())


class FileShadow(StoreWriter):
    """What the file outputs share: the shadow (``.NAME.skalign-partial``), its journal, the
    lock, and the backup (``STEM-skalign-backup SUFFIX``) that ``--replace`` keeps.

    A writer's life: :meth:`begin` (resume a leftover shadow of the same job, or remove it and
    start afresh) returns the committed row count; :meth:`write_unit` appends one batch and
    commits durably when a commit is due; :meth:`finish` closes the shadow; :meth:`fetch`
    reads rows back for the verification; :meth:`publish` renames the shadow into place.
    """

    suffix = ""

    def __init__(self, address, job):
        self.address, self.job, self.path = address, job, address.path
        name, suffix = self.path.name, self.suffix
        self.partial = self.path.with_name(f".{name}.skalign-partial{suffix}")
        self.journal = journal_path(self.path)
        self.lock_path = lock_path(self.path)
        self.backup = file_backup(address, self.suffix).path
        self.display = str(address)
        self.clock = CommitClock()

    @property
    def file_mode(self):
        """The permission bits of the files of the shadow (:func:`output_modes`)."""
        return self._modes()[0]

    @property
    def dir_mode(self):
        """The permission bits of the folders of the shadow (:func:`output_modes`)."""
        return self._modes()[1]

    def _modes(self):
        if getattr(self, "_modes_", None) is None:
            src = getattr(getattr(self.job, "src", None), "path", None)
            self._modes_ = output_modes(src, self.path)
        return self._modes_

    def create(self, path):
        """Create the file ``path`` of the shadow afresh, with its mode; an open file."""
        return open_file(path, "x+b", self.file_mode)

    def lock(self):
        return FileLock(self.lock_path, self.display)

    def close(self):
        """Close the shadow's sequential writer and file where the writer opened them."""
        seq = getattr(self, "_seq", None)
        if seq is not None:
            seq.close()
        f = getattr(self, "_file", None)
        if f is not None and not f.closed:
            f.close()

    def exists(self):
        return self.path.exists()

    def leftovers(self):
        """Shadows of crashed runs: this layout's, and the older ``.NAME.tmp-PID-HEX`` names."""
        name, suffix = self.path.name, self.suffix
        stem = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
        old = list(self.path.parent.glob(f".{glob_escape(stem)}.tmp-*")) if stem else []
        journal_new = self.journal.with_name(self.journal.name + ".new")
        return [p for p in (self.partial, self.journal, journal_new)
                if os.path.lexists(p)] + old

    def discard(self):
        for p in self.leftovers():
            remove_path(p)

    def _resumable(self, fp):
        state = read_journal(self.journal)
        if state is None or state.get("fingerprint") != fp or not self.partial.exists() \
                or self.partial.is_symlink() or self.journal.is_symlink():
            self.discard()
            return None
        return state

    def publish(self, replace, stamp=None):
        """Rename the shadow to the output with ``stamp`` beside it; an existing output becomes
        the backup, with its stamp. The steps are recorded in the journal first (phase
        ``publish``, or ``moved`` where no output is in the way) and the journal stays until
        :func:`end_publish`: a rerun after a kill finishes them (:func:`recover_publish`)."""
        had = os.path.lexists(self.path)
        if had:
            if not replace:  # checked before starting; re-checked in case it appeared since
                raise StoreError(f"{self.path}: exists; pass --replace (keeps it as a backup).")
            if os.path.lexists(self.backup):  # never dropped (checked before starting too):
                # it may hold the only copy of earlier data
                raise StoreExistsError(f"{self.path}: its backup {self.backup.name} exists; "
                                       "remove or restore it first.")
        state = read_journal(self.journal) or {}
        mine = (self.partial, self.journal, self.journal.with_name(self.journal.name + ".new"))
        state.update(phase="publish" if had else "moved", stamp=stamp, backup=had,
                     partial=self.partial.name,
                     extra=sorted(p.name for p in self.leftovers()
                                  if p not in mine and "skalign-partial" in p.name))
        write_journal(self.journal, **state)
        self.publishing = True
        kill_point("publishing")
        backup = _publish_steps(self.address, state, self.suffix)
        return None if backup is None else backup.path

    def end_publish(self, stamp=None):
        """The publish's last step (:func:`end_publish`): the journal removed."""
        end_publish(self.address)


def _sibling(path, name):
    """``name`` (read from a journal) beside ``path``: a plain name of a shadow's file, or
    ``None``."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or "\0" in name \
            or name in (".", "..") or "skalign-partial" not in name:
        return None
    return path.with_name(name)


def write_sidecar(address, stamp, like):
    """``stamp`` as the sidecar of the file store at ``address`` (durably), with the read and
    write bits of ``like`` (the output, or its shadow before it is renamed)."""
    path = sidecar_path(address)
    write_durably(path, json.dumps(stamp, sort_keys=True).encode())
    try:
        os.chmod(path, os.stat(like).st_mode & 0o666)
    except OSError:
        pass


def _publish_steps(address, state, suffix):
    """Do the publish the journal's ``state`` describes, from where it stands (each step is
    harmless to do again); return the backup's address (``None``: none kept)."""
    path, journal = address.path, journal_path(address.path)
    backup = file_backup(address, suffix)
    partial = _sibling(path, state.get("partial"))
    if partial is None:
        raise StoreError(f"{path}: its journal {journal.name} is not one skalign wrote; remove "
                         "it and the hidden .skalign-partial files beside it, then run again.")
    if state.get("phase") == "publish":
        if state.get("backup"):
            if os.path.lexists(path) and os.path.lexists(partial):  # not moved yet
                if os.path.lexists(backup.path):
                    raise StoreExistsError(f"{path}: its backup {backup.path.name} exists; "
                                           "remove or restore it first.")
                # a stamp where the backup goes is an older backup's (the backup is new)
                remove_path(sidecar_path(backup))
                os.rename(path, backup.path)
                fsync_dir(path.parent)
                kill_point("backed-up")
            if os.path.lexists(sidecar_path(address)):  # the replaced output's own stamp
                os.replace(sidecar_path(address), sidecar_path(backup))
                fsync_dir(path.parent)
        state["phase"] = "moved"
        write_journal(journal, **state)
    if os.path.lexists(partial):
        if os.path.islink(partial):  # planted since: never renamed into place
            raise StoreError(f"{path}: a link is where its translation was ({partial.name}); "
                             "nothing was published. Remove it, then run the same command "
                             "again.")
        if os.path.lexists(path):
            raise StoreError(f"{path}: something was created at OUTPUT while the translation "
                             "was being published; move it away, then run the same command "
                             "again to finish.")
        if isinstance(state.get("stamp"), dict):  # beside it before it is there
            write_sidecar(address, state["stamp"], like=partial)
        os.rename(partial, path)
        fsync_dir(path.parent)
    for name in state.get("extra") or ():
        other = _sibling(path, name)
        if other is not None:
            remove_path(other)
    return backup if state.get("backup") else None


def _publishing(state):
    return isinstance(state, dict) and state.get("phase") in PUBLISH_PHASES


@contextmanager
def recover_publish(address, match, suffix):
    """Finish, under the output's lock, a publish of the file store at ``address`` (its kind's
    files ending in ``suffix``) that a killed run left (its journal in a
    :data:`PUBLISH_PHASES` phase), up to the output in place with its stamp. Yield an
    :class:`~skalign._stores.journal.Interrupted` where that publish's stamp satisfies
    ``match`` (the same command: the caller does the steps after the publish, then its
    ``finish``), else ``None`` (nothing was interrupted; or another job's publish, finished
    here for that job, the journal removed)."""
    path = address.path
    journal = journal_path(path)
    if not _publishing(read_journal(journal)):  # the common case: no lock taken
        yield None
        return
    with FileLock(lock_path(path), str(address)):
        state = read_journal(journal)
        partial = _sibling(path, state.get("partial")) if _publishing(state) else None
        if not _publishing(state) or journal.is_symlink():
            yield None
            return
        if partial is not None and not os.path.lexists(partial) \
                and not os.path.lexists(path):  # nothing left to publish: start afresh
            remove_path(journal)
            yield None
            return
        backup = _publish_steps(address, state, suffix)
        stamp = state.get("stamp")
        if isinstance(stamp, dict) and match(stamp):
            yield Interrupted(stamp, backup,
                              lambda final: end_publish(address, final, like=path))
        else:
            end_publish(address)
            yield None


def end_publish(address, stamp=None, like=None):
    """The last step of a file store's publish: ``stamp`` (where given) written beside the
    output, then the journal removed."""
    if stamp is not None:
        write_sidecar(address, stamp, like=address.path if like is None else like)
    journal = journal_path(address.path)
    for p in (journal, journal.with_name(journal.name + ".new")):
        if os.path.lexists(p):
            os.unlink(p)
    fsync_dir(address.path.parent)


def swap_paths(a, b):
    """Exchange two files or folders (three renames; ``a`` may be missing)."""
    tmp = tmp_sibling(a, ".swap")
    if a.exists() or a.is_symlink():
        os.rename(a, tmp)
    os.rename(b, a)
    if tmp.exists() or tmp.is_symlink():
        os.rename(tmp, b)
    fsync_dir(a.parent)
