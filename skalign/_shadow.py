"""Shadow outputs on the file system, shared by the file stores and the FAISS connector.

Every output is written under a hidden name in the destination's folder (so the final rename is
atomic), committed about every ``COMMIT_SECONDS`` (the data fsynced, then a fsynced journal
beside it saying how far it reaches), and renamed into place when complete; ``--replace`` keeps
the previous output as ``STEM-skalign-backup SUFFIX``.
"""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from glob import escape as glob_escape
from pathlib import Path

import numpy as np

from ._direct_io import BLOCK, SequentialWriter
from ._journal import CommitClock, FileLock, fsync_dir, read_journal, write_journal
from .exceptions import StoreError

__all__ = ["FileShadow", "NpyShadow", "atomic_file", "check_parent", "create_npy",
           "remove_path", "replace_path", "swap_paths", "tmp_sibling"]


def tmp_sibling(path, suffix=""):
    """A fresh hidden name next to ``path`` (same folder, so the final rename is atomic)."""
    stem = path.name[: -len(suffix)] if suffix and path.name.endswith(suffix) else path.name
    return path.with_name(f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")


def remove_path(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


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


class FileShadow:
    """What the file outputs share: the shadow (``.NAME.skalign-partial``), its journal, the
    lock, and the backup (``STEM-skalign-backup SUFFIX``) that ``--replace`` keeps.

    A writer's life: :meth:`begin` (resume a leftover shadow of the same job, or remove it and
    start afresh) returns the committed row count; :meth:`write_unit` appends one batch and
    commits durably when a commit is due; :meth:`finish` closes the shadow; :meth:`fetch`
    reads rows back for the verification; :meth:`publish` renames the shadow into place.
    """

    suffix = ""

    def __init__(self, path, job):
        self.path, self.job = Path(path), job
        name, suffix = self.path.name, self.suffix
        stem = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
        self.partial = self.path.with_name(f".{name}.skalign-partial{suffix}")
        self.journal = self.path.with_name(f".{name}.skalign-journal")
        self.lock_path = self.path.with_name(f".{name}.skalign-lock")
        self.backup = self.path.with_name(f"{stem}-skalign-backup{suffix}")
        self.display = str(self.path)
        self.clock = CommitClock()

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
        return [p for p in (self.partial, self.journal, journal_new) if p.exists()] + old

    def discard(self):
        for p in self.leftovers():
            remove_path(p)

    def _resumable(self, fp):
        state = read_journal(self.journal)
        if state is None or state.get("fingerprint") != fp or not self.partial.exists():
            self.discard()
            return None
        return state

    def publish(self, replace):
        """Rename the shadow to the output; an existing output becomes the backup."""
        backup = None
        if self.path.exists() or self.path.is_symlink():
            if not replace:  # checked before starting; re-checked in case it appeared since
                raise StoreError(f"{self.path}: exists; pass --replace (keeps it as a backup).")
            remove_path(self.backup)
            os.rename(self.path, self.backup)
            backup = self.backup
        os.rename(self.partial, self.path)
        fsync_dir(self.path.parent)
        self.journal.unlink(missing_ok=True)
        return backup


def create_npy(path, shape, dtype, align=BLOCK):
    """Create the ``.npy`` file ``path`` for an array of ``shape`` (its data not written yet: a
    sparse file of zeros) with a header padded to ``align`` bytes; return the data's offset.

    numpy pads a header to 64 bytes; the format allows any padding of the header's dictionary
    with spaces (``numpy.load`` reads the length it declares), and at a block boundary every
    batch of whole blocks can be written directly from the translation's buffers
    (:meth:`SequentialWriter.write`)."""
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
         "shape": tuple(int(k) for k in shape)}
    text = repr(d).encode("latin1")
    prefix = np.lib.format.magic(1, 0)
    room = align - len(prefix) - 2
    if len(text) + 1 > room:  # pragma: no cover - a shape with thousands of digits
        raise ValueError(f"{path}: .npy header of {len(text)} bytes does not fit in {align}")
    header = prefix + room.to_bytes(2, "little") + text.ljust(room - 1) + b"\n"
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(align + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    return align


class NpyShadow(FileShadow):
    """The shadow is a full-size ``.npy`` filled in order (its header one block long, so that
    its rows start at a block boundary, :func:`create_npy`); the journal holds the committed
    rows."""

    suffix = ".npy"
    pipelined = True  # writes and fsyncs release the GIL
    #: write past the page cache where the system allows (:class:`SequentialWriter`)
    direct = True

    @property
    def busy_threads(self):
        """Direct writes wait on the disk and leave the cores to the product; writes through
        the page cache keep one busy copying."""
        seq = getattr(self, "_seq", None)
        return 0 if seq is not None and seq.direct else 1

    def begin(self, fp):
        job = self.job
        self.fp = fp
        self.row_bytes = 4 * job.d_out
        state = self._resumable(fp)
        if state is not None:
            mm = np.load(self.partial, mmap_mode="r")
            if mm.shape == (job.reader.n_rows, job.d_out) and mm.dtype == np.float32:
                self.offset, self.rows = mm.offset, int(state["rows"])
                del mm
                self._open()
                return self.rows
            del mm
            self.discard()
        self.offset = create_npy(self.partial, (job.reader.n_rows, job.d_out), np.float32)
        self.rows = 0
        self._open()
        write_journal(self.journal, fingerprint=fp, rows=0)
        return 0

    def _open(self):
        self._file = open(self.partial, "r+b")
        self._seq = SequentialWriter(self._file, self.offset + self.rows * self.row_bytes,
                                     direct=self.direct)

    def write_unit(self, out, rb, shard, start):
        if start != self.rows:  # pragma: no cover - a reader that skipped or repeated rows
            raise StoreError(f"{self.path}: internal error, row {start} after {self.rows}.")
        # sequential writes after the header, straight to the disk where the system allows
        # the translator's buffers are block-aligned: their whole blocks are written uncopied
        self._seq.write(np.ascontiguousarray(out, dtype=np.float32).data)
        self.rows += len(out)
        if self.clock.due():
            self.commit()

    def commit(self):
        """Make the rows written so far durable, then record them in the journal: a rerun
        after a crash resumes there (rows written after it are written again)."""
        self._seq.sync()
        write_journal(self.journal, fingerprint=self.fp, rows=self.rows)
        self.clock.reset()

    def finish(self):
        self._seq.sync()
        self.close()
        return self.rows

    def fetch(self, positions, rows=None):
        return np.load(self.partial, mmap_mode="r")[positions].copy(), None


def swap_paths(a, b):
    """Exchange two files or folders (three renames; ``a`` may be missing)."""
    tmp = tmp_sibling(a, ".swap")
    if a.exists() or a.is_symlink():
        os.rename(a, tmp)
    os.rename(b, a)
    if tmp.exists() or tmp.is_symlink():
        os.rename(tmp, b)
    fsync_dir(a.parent)
