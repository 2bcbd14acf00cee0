"""Results, plan and report files (``search --output``, ``plan --report``): checked before any
work, created exclusively, published without replacing anything unless asked to.

:func:`check_output_file` runs first, before a store is opened or a text encoded: it refuses an
output that is (after following links, and by device and inode where the file exists) a store
the command reads, any file of it (a Parquet folder's shards, a ``.lance`` folder, the sidecar
``PATH.skalign.json``, the overlay ``PATH.skalign-live``, the lock, a shadow, the backup, a
Chroma or Qdrant local folder's content), or one of the command's input files (queries, texts,
plan, qrels, the encode cache); an existing file without ``overwrite``; a folder; a missing
folder.

:func:`write_output_file` then writes the file as the stores' writers write theirs: under a
fresh hidden name in the same folder, created with ``O_EXCL | O_NOFOLLOW`` (a name planted
there is refused, never written through) and the permission bits of what it derives from,
fsynced, then linked into place, which fails if anything appeared at the name meanwhile
(``rename`` would replace it); with ``overwrite``, renamed over it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .._stores.address import FILE_KINDS, Address, parse_address
from .._stores.backups import backup_address
from .._stores.files.shadow import create_file, output_modes, tmp_sibling
from .._stores.journal import fsync_dir

__all__ = ["OutputFileError", "check_output_file", "input_guards", "output_file_mode",
           "store_file", "store_guards", "write_output_file"]

_SQLITE_SIBLINGS = ("", "-wal", "-shm", "-journal")


class OutputFileError(ValueError):
    """An output file refused; the message is one line."""


class _Guard:
    """One thing an output must not be: a ``tree`` (the path, anything under it, or the same
    file by device and inode), or with ``prefix`` the names in the folder ``path`` that start
    with it (and anything under them)."""

    def __init__(self, label, path, prefix=None):
        self.label, self.prefix = label, prefix
        self.path = Path(os.path.realpath(path))

    def hit(self, real, st):
        if self.prefix is not None:
            return any(p.parent == self.path and p.name.startswith(self.prefix)
                       for p in (real, *real.parents))
        if real == self.path or self.path in real.parents:
            return True
        if st is None:
            return False
        try:
            mine = os.stat(self.path)
        except OSError:
            return False
        return (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino)


def _as_address(store):
    if store is None or isinstance(store, Address):
        return store
    try:
        return parse_address(os.fspath(store))
    except (ValueError, OSError):
        return None


def store_file(store):
    """The file or folder of a file store (an address or its text); ``None`` for others."""
    address = _as_address(store)
    return address.path if address is not None and address.kind in FILE_KINDS else None


def _beside(label, path):
    """The guards of the file or folder ``path`` and of the names the stores give their files
    beside it: ``PATH.skalign.json``, ``PATH.skalign-live``, ``.NAME.skalign-lock``,
    ``.NAME.skalign-partial``, ``.NAME.skalign-journal``, ``.STEM.tmp-*``."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return [_Guard(label, path),
            _Guard(f"a file of {label} (its stamp or overlay)", path.parent,
                   prefix=f"{path.name}.skalign"),
            _Guard(f"a file of {label} (its lock, shadow or journal)", path.parent,
                   prefix=f".{path.name}."),
            _Guard(f"a shadow of {label}", path.parent, prefix=f".{stem}.tmp-")]


def store_guards(store, label="the store"):
    """What belongs to ``store`` (an :class:`~skalign._stores.address.Address` or its text):
    its file or folder, the files the stores keep beside it, its backup's; a Chroma or Qdrant
    local folder whole; nothing for a server.

    Returns
    -------
    list of _Guard
    """
    address = _as_address(store)
    if address is None or address.path is None:
        return []
    if address.kind not in FILE_KINDS:
        return [_Guard(f"inside {label} {address} (its database folder)", address.path)]
    backup = backup_address(address).path
    guards = []
    # the name given and the one it resolves to: the overlay and the stamp sit beside the first
    for path in dict.fromkeys((address.path, Path(os.path.realpath(address.path)))):
        guards += _beside(f"{label} {address}", path)
        guards += _beside(f"{label}'s backup {backup.name}", path.with_name(backup.name))
    return guards


def input_guards(label, path, sqlite=False):
    """The guards of one input file ``path`` (``sqlite``: with its ``-wal``/``-shm``/
    ``-journal`` files)."""
    if path is None or not os.fspath(path):
        return []
    path = Path(os.fspath(path)).expanduser()
    return [_Guard(label, path.with_name(path.name + s)) for s in
            (_SQLITE_SIBLINGS if sqlite else ("",))]


def check_output_file(path, flag, *, overwrite=False, guards=(), suffixes=None):
    """Refuse ``path`` as an output before any work (see the module docstring).

    Parameters
    ----------
    path : str or path-like
        The output file.
    flag : str
        How messages name it, e.g. ``"--output"``.
    overwrite : bool, default=False
        Whether an existing file may be replaced.
    guards : iterable of _Guard
        What it must not be (:func:`store_guards`, :func:`input_guards`).
    suffixes : tuple of str, optional
        The suffixes allowed (lower case).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    OutputFileError
    """
    path = Path(os.fspath(path)).expanduser()
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise OutputFileError(f"{flag} {path}: the file name must end in "
                              f"{' or '.join(suffixes)}.")
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(path)
    except OSError:
        st = None
    for guard in guards:
        if guard.hit(real, st):
            raise OutputFileError(f"{flag} {path}: is {guard.label}; writing there would "
                                  "destroy it; choose another file.")
    if not real.parent.is_dir():
        raise OutputFileError(f"{flag} {path}: folder {path.parent} does not exist; create it "
                              "first.")
    if os.path.isdir(path):
        raise OutputFileError(f"{flag} {path}: is a folder; give a file name.")
    if os.path.lexists(path) and not overwrite:
        raise OutputFileError(f"{flag} {path}: exists; pass --overwrite to replace it.")
    return path


def output_file_mode(sources=(), replaced=None):
    """The permission bits of an output file derived from the files or folders ``sources``
    (``None`` entries skipped): no looser than any of them
    (:func:`~skalign._stores.files.shadow.output_modes`), nor than the file ``replaced`` it replaces
    under ``--overwrite``; its owner always reads and writes it. The umask still applies."""
    mode = 0o666
    for source in sources:
        if source is not None:
            mode &= output_modes(Path(source))[0]
    if replaced is not None and os.path.lexists(replaced) and not os.path.islink(replaced):
        mode &= output_modes(None, Path(replaced))[0]
    return mode


def _rename_noreplace(tmp, path):
    """Move ``tmp`` to ``path``, failing if anything is at ``path`` (a link included)."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise OutputFileError(f"{path}: exists (it appeared while the output was written); "
                              "pass --overwrite to replace it.") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK,
                             errno.ENOSYS):
            raise
        _renameat2_noreplace(tmp, path)  # a file system without hard links
    else:
        os.unlink(tmp)


def _renameat2_noreplace(tmp, path):
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rename = libc.renameat2
    except (OSError, AttributeError):
        rename = None
    if rename is not None:
        at_fdcwd, noreplace = -100, 1
        if rename(at_fdcwd, os.fsencode(tmp), at_fdcwd, os.fsencode(path), noreplace) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise OutputFileError(f"{path}: exists (it appeared while the output was "
                                  "written); pass --overwrite to replace it.")
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(path))
    if os.path.lexists(path):  # no atomic way left: the narrowest check
        raise OutputFileError(f"{path}: exists; pass --overwrite to replace it.")
    os.rename(tmp, path)


def write_output_file(path, write, *, overwrite=False, mode=0o666):
    """Write a file through ``write(f)`` (``f`` a binary file) under a fresh temporary name
    beside ``path``, fsync it, and publish it at ``path``.

    Parameters
    ----------
    path : str or path-like
        The file; its folder must exist.
    write : callable
        Writes the content to the binary file object it is given.
    overwrite : bool, default=False
        Replace a file already at ``path``; without it, anything there is left alone and
        :class:`OutputFileError` raised.
    mode : int, default=0o666
        The permission bits (less the umask; :func:`output_file_mode`).

    Returns
    -------
    pathlib.Path
    """
    path = Path(os.fspath(path)).expanduser()
    tmp = tmp_sibling(path, path.suffix)
    fd = create_file(tmp, mode | 0o600, os.O_WRONLY)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _rename_noreplace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
