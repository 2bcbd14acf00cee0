"""Sequential file writes that bypass the page cache where the system allows it (``O_DIRECT``).

A shadow output is written once, in order, and made durable by the commits' ``fsync``: keeping
its gigabytes in the page cache only costs the kernel's copy (a CPU second per GB or so, on the
cores the translation needs) and then the write-back anyway. With direct I/O the disk reads the
bytes from a small aligned staging buffer while this thread sleeps, and the cores are left to the
product. Where there is no ``O_DIRECT`` (not Linux, a file system without it), the writes go
through the page cache, their write-back started at once (:func:`start_writeback`).
"""

from __future__ import annotations

import errno
import mmap
import os
import sys

__all__ = ["BLOCK", "SequentialWriter", "aligned_empty", "start_writeback"]

#: alignment of direct I/O offsets, lengths and memory (the page size; covers the usual 512-byte
#: and 4 KiB logical blocks)
BLOCK = 4096
#: bytes staged per direct write
CHUNK = 8 << 20

_SYNC_FILE_RANGE = []  # libc's sync_file_range, once looked up (None where there is none)


def start_writeback(f, offset, nbytes):
    """Start writing bytes ``[offset, offset + nbytes)`` of the open file ``f`` to the disk and
    return at once (Linux's ``sync_file_range(..., SYNC_FILE_RANGE_WRITE)``; nothing elsewhere).

    Durability still comes from the commit's fsync; started early, the disk writes while the
    next batches are translated instead of all at once when the commit waits for it.
    """
    if not _SYNC_FILE_RANGE:
        fn = None
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            except (OSError, AttributeError):
                fn = None
        _SYNC_FILE_RANGE.append(fn)
    fn = _SYNC_FILE_RANGE[0]
    if fn is not None and nbytes > 0:
        f.flush()
        fn(f.fileno(), offset, nbytes, 2)  # SYNC_FILE_RANGE_WRITE; advice: errors are moot


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array whose first byte sits at a ``BLOCK`` boundary: a
    :class:`SequentialWriter` writes such an array's whole blocks straight from its memory."""
    import numpy as np

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + BLOCK, np.uint8)
    k = -raw.ctypes.data % BLOCK
    return raw[k:k + nbytes].view(dtype).reshape(shape)


def _address(mv):
    import numpy as np

    return np.frombuffer(mv, np.uint8).ctypes.data if len(mv) else 0


def _pwrite_all(fd, view, offset):
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class SequentialWriter:
    """Write the bytes of the open file ``f`` in order from byte ``at`` on.

    Direct I/O (``O_DIRECT``) needs block-aligned offsets, lengths and memory: the bytes are
    copied into a page-aligned staging buffer of ``CHUNK`` bytes whose first byte sits at a
    block boundary of the file, and whole blocks are written. The block the next write starts
    in is held back (its bytes before ``at`` read from the file first), so :meth:`sync` writes
    that partial block through the page cache before the ``fsync``: after a sync every byte
    given is durable; the next direct write of that block replaces it (the kernel writes back
    and drops cached pages of a range before writing it directly). Data that is itself
    block-aligned in memory and starts at a block boundary of the file (an ``.npy`` shadow's
    batches from :func:`aligned_empty` buffers after its one-block header) skips the staging
    copy: its whole blocks go to the disk from where they are.

    ``direct=False``, no ``O_DIRECT`` here, or a file system that refuses it (``EINVAL``):
    plain writes through ``f`` with :func:`start_writeback`. Either way the bytes end up the
    same.
    """

    def __init__(self, f, at, *, direct=True):
        self.f, self.pos, self.fd = f, at, None
        f.flush()
        if direct and hasattr(os, "O_DIRECT"):
            try:
                # the same file again, by its name: never a link put there since
                self.fd = os.open(f.name, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC
                                  | getattr(os, "O_NOFOLLOW", 0))
            except (OSError, TypeError):  # TypeError: ``f`` has no path
                self.fd = None
        if self.fd is None:
            return
        self.stage = mmap.mmap(-1, CHUNK)  # anonymous maps are page-aligned
        self.view = memoryview(self.stage)
        self.base, self.fill = at - at % BLOCK, at % BLOCK
        if self.fill:
            head = os.pread(f.fileno(), self.fill, self.base)
            self.view[:len(head)] = head  # a file cut shorter than ``at``: zeros, as a seek

    @property
    def direct(self):
        """Whether the writes bypass the page cache."""
        return self.fd is not None

    def tell(self):
        """The file offset after the last byte given."""
        return self.pos

    def write(self, data):
        """Append ``data`` (bytes-like) at :meth:`tell`.

        Where nothing is staged (the file offset at a block boundary) and ``data`` starts at a
        block boundary in memory (:func:`aligned_empty`), its whole blocks are written straight
        from it, without the copy into the staging buffer; only the rest is staged."""
        mv = memoryview(data).cast("B")
        i = 0
        if (self.fd is not None and self.fill == 0 and len(mv) >= BLOCK
                and _address(mv) % BLOCK == 0):
            i = self._put_from(mv[:len(mv) - len(mv) % BLOCK])
        while i < len(mv) and self.fd is not None:
            k = min(len(mv) - i, CHUNK - self.fill)
            self.view[self.fill:self.fill + k] = mv[i:i + k]
            self.fill += k
            i += k
            self.pos += k
            self._put(self.fill - self.fill % BLOCK)
        if i < len(mv):  # through the page cache (from the start, or since a fall back)
            self.f.seek(self.pos)
            self.f.write(mv[i:])
            start_writeback(self.f, self.pos, len(mv) - i)
            self.pos += len(mv) - i

    def _put(self, whole):
        """Write the staged whole blocks ``[0, whole)`` directly; keep the partial one."""
        if whole == 0:
            return
        try:
            _pwrite_all(self.fd, self.view[:whole], self.base)
            refused = False
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            refused = True
        if refused:  # no direct I/O on this file system after all
            self._fall_back()
            return
        rest = self.fill - whole  # < BLOCK <= whole: the two ranges do not overlap
        self.view[:rest] = self.view[whole:self.fill]
        self.base, self.fill = self.base + whole, rest

    def _put_from(self, view):
        """Write ``view`` (whole blocks at a block boundary of memory and of the file) directly;
        return how many bytes it took: all, or none where direct writes are refused after all
        (then the caller writes them through the page cache, over any block written
        directly before the refusal: the same bytes)."""
        try:
            _pwrite_all(self.fd, view, self.base)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._close_direct()  # nothing staged: fill is 0
            return 0
        self.base += len(view)
        self.pos += len(view)
        return len(view)

    def _fall_back(self):
        _pwrite_all(self.f.fileno(), self.view[:self.fill], self.base)
        self._close_direct()

    def flush(self):
        """Hand every byte given to the system (the held-back partial block through the page
        cache), as a buffered file's ``flush``: in the file for any reader, not yet durable."""
        if self.fd is not None and self.fill:
            _pwrite_all(self.f.fileno(), self.view[:self.fill], self.base)
        self.f.flush()

    def sync(self):
        """Make every byte given durable: :meth:`flush`, then fsync."""
        self.flush()
        os.fsync(self.f.fileno())

    def _close_direct(self):
        if self.fd is not None:
            os.close(self.fd)
            # the map is freed with its last view (a traceback may still hold one)
            self.fd = self.view = self.stage = None

    def close(self):
        """Close the direct descriptor (not ``f``); bytes not synced may be lost, as a crash's."""
        self._close_direct()
