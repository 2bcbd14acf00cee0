""".npy stores: a 2-D numpy array, read memory-mapped in windows of ``batch_size`` rows (each
window unmapped after use, so the resident set stays bounded), written to a hidden full-size
``.npy`` with a one-block header (:func:`create_npy`) filled with sequential writes (direct I/O
where the file system allows it, :mod:`skalign._stores.files.direct_io`).

Live (:class:`NpyLive`): ids are row numbers, texts come from a text file beside the store
(:class:`~skalign._stores.files.live.LineTexts`), ranking is exact (memory-mapped windows),
encoded rows go to the overlay (:mod:`skalign._stores.files.overlay`)."""

from __future__ import annotations

import math

import numpy as np

from ..exceptions import StoreError
from ..utils._backend import iter_batches
from .base import StoreReader
from .files.direct_io import BLOCK, SequentialWriter
from .files.engine import FileEngine
from .files.live import (
    WINDOW_ROWS,
    FileLiveStore,
    LineTexts,
    RowNumbers,
    check_metric,
    files_state,
)
from .files.overlay import HEADER_LOCK
from .files.shadow import FileShadow, open_file
from .journal import write_journal

__all__ = ["NpyEngine", "NpyLive", "NpyReader", "NpyShadow", "create_npy"]


def _map(f):
    """The array of the ``.npy`` file open as ``f``, memory-mapped through that descriptor."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise ValueError(f"unsupported .npy format version {version}")
    read = {(1, 0): fmt.read_array_header_1_0}.get(version, fmt.read_array_header_2_0)
    with HEADER_LOCK:  # see the lock: numpy parses the header with ast
        shape, fortran, dtype = read(f)
    if dtype.hasobject:
        raise ValueError("the array holds Python objects")
    return np.memmap(f, dtype=dtype, mode="r", shape=shape, offset=f.tell(),
                     order="F" if fortran else "C")


class NpyReader(StoreReader):
    kind = "npy"

    def __init__(self, address, column=None):
        path = self.path = address.path
        if not path.is_file():
            raise StoreError(f"{path}: no such file; check the path.")
        try:
            # the file opened once, mapped and read through that one descriptor: a store
            # replaced under its name later (--replace, --continue) is read as it was opened
            self._file = open(path, "rb")  # noqa: SIM115  (kept for the reader's life)
            mm = _map(self._file)
        except (ValueError, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(
                f"{path}: not a readable .npy array ({msg}); save embeddings with numpy.save."
            ) from None
        if mm.ndim != 2:
            raise StoreError(
                f"{path}: expected a 2-D array of shape (rows, dim), got shape {mm.shape}; "
                "reshape it before saving."
            )
        if mm.dtype.kind not in "fiu":
            raise StoreError(
                f"{path}: vectors must be numbers, got dtype {mm.dtype}; save them as float32."
            )
        self._mm = mm
        self.n_rows, self.dim = mm.shape
        self.dtype = mm.dtype

    def batches(self, batch_size, start=0):
        mm = self._mm
        row_bytes = self.dim * self.dtype.itemsize
        for rows in iter_batches(self.n_rows, batch_size):
            if rows.stop <= start:
                continue
            if mm.flags.c_contiguous and row_bytes:
                # a fresh mapping per window: unmapped when dropped, so the pages read so far
                # leave the resident set instead of accumulating over the whole file
                window = np.memmap(
                    self._file, dtype=self.dtype, mode="r",
                    offset=mm.offset + rows.start * row_bytes,
                    shape=(rows.stop - rows.start, self.dim),
                )
            else:
                window = np.ascontiguousarray(mm[rows])
            yield window, None, None
            del window

    def take(self, positions, batch_size):
        """Rows at ``positions`` (sorted): their vectors, and no other fields."""
        return np.array(self._mm[positions]), [None] * len(positions)

    def read_all(self):
        return self._mm

    def close(self):
        self._file.close()


def create_npy(path, shape, dtype, align=BLOCK, mode=0o666):
    """Create the ``.npy`` file ``path`` for an array of ``shape`` (its data not written yet: a
    sparse file of zeros) with a header padded to ``align`` bytes; return the data's offset.
    The file is created afresh with the permission bits ``mode`` (less the umask): anything at
    ``path``, a link included, is refused (:func:`~skalign._stores.files.shadow.open_file`).

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
    with open_file(path, "xb", mode) as f:
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
            with HEADER_LOCK:
                mm = np.load(self.partial, mmap_mode="r")
            if mm.shape == (job.reader.n_rows, job.d_out) and mm.dtype == np.float32:
                self.offset, self.rows = mm.offset, int(state["rows"])
                del mm
                self._open()
                return self.rows
            del mm
            self.discard()
        self.offset = create_npy(self.partial, (job.reader.n_rows, job.d_out), np.float32,
                                 mode=self.file_mode)
        self.rows = 0
        self._open()
        write_journal(self.journal, fingerprint=fp, rows=0)
        return 0

    def _open(self):
        self._file = open_file(self.partial, "r+b")  # never through a link
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
        with HEADER_LOCK:
            mm = np.load(self.partial, mmap_mode="r")
        return mm[positions].copy(), None


class NpyEngine(FileEngine):
    """The ``.npy`` engine: a default batch is whole blocks of output (written from the
    translation's buffers uncopied, :class:`SequentialWriter`)."""

    suffix = ".npy"
    interchangeable = True
    texts_in_lines = True

    def batch_rows(self, batch_size, d_out):
        rows = BLOCK // math.gcd(BLOCK, 4 * d_out)
        return max(rows, batch_size - batch_size % rows)


# ---------------------------------------------------------------------------- live
class NpyLive(FileLiveStore):
    """A ``.npy`` array searched live.

    Parameters
    ----------
    address : Address
    column : None
        ``.npy`` stores have one array.
    text_field : str or path-like, default=None
        The text file holding row ``i``'s text on line ``i`` (``*.jsonl``: JSON strings or
        objects with a ``"text"``; otherwise plain lines).
    metric : {"cosine", "ip", "l2"}, default="cosine"
        The similarity the search ranks by.
    """

    kind = "npy"
    texts_in_lines = True

    def __init__(self, address, *, column=None, text_field=None, metric="cosine"):
        if column is not None:
            raise StoreError(f"{address}: an .npy store holds one array; leave the column out.")
        self.address, self.path = address, address.path
        self._reader = NpyReader(address)
        self.n_rows, self.dim = int(self._reader.n_rows), int(self._reader.dim)
        self.metric = check_metric(metric, self.path)
        self._ids = RowNumbers(self.n_rows)
        self.text_field = text_field
        self._texts = {}
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "files": files_state(self.path)})

    def _windows(self):
        start = 0
        for window, _, _ in self._reader.batches(WINDOW_ROWS):
            yield start, window
            start += len(window)

    def _rows(self, positions, text_field):
        order = np.argsort(positions)
        vectors = np.empty((len(positions), self.dim), np.float32)
        vectors[order] = self._reader.take(positions[order], len(positions))[0]
        return vectors, self._row_texts(positions, text_field)

    def _row_texts(self, positions, text_field):
        if text_field is None:
            return None
        key = str(text_field)
        if key not in self._texts:
            self._texts[key] = LineTexts(text_field, self.n_rows, self.path)
        return self._texts[key].get(positions)

    def close(self):
        self._reader.close()
