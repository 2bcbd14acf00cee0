"""The sequential shadow writes: direct I/O where the file system allows it, the page cache
otherwise, the same bytes either way (``skalign._stores.files.direct_io``)."""

import errno
import os
import sys

import numpy as np
import pytest

from skalign._stores import npy as _npy
from skalign._stores.files import direct_io as _direct_io
from skalign._stores.files import shadow as _shadow
from skalign._stores.files.direct_io import BLOCK, CHUNK, SequentialWriter


def _direct_supported(path):
    """Whether this file system takes ``O_DIRECT`` (tmpfs before Linux 6.6 does not)."""
    if not hasattr(os, "O_DIRECT"):
        return False
    path.touch()
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_DIRECT))
    except OSError:
        return False
    return True


def _pieces(rng, data):
    """``data`` cut at random places: pieces smaller than a block, across blocks, and larger
    than the staging buffer."""
    cuts = np.sort(rng.choice(np.arange(1, len(data)), size=40, replace=False))
    cuts = np.concatenate([cuts[cuts < len(data) - 2 * CHUNK], [len(data) - 2 * CHUNK - 7]])
    return [data[a:b] for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(data)])]


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("at", [0, 128, BLOCK, 3 * BLOCK + 1000])
def test_bytes_written_in_order_from_any_offset_are_the_file(tmp_path, direct, at):
    """Written in pieces of any size from any offset of a file with bytes before it (an ``.npy``
    header, the committed part of a resumed shadow): the file is those bytes followed by the
    pieces, with a sync in the middle and at the end; the bytes before ``at`` are kept."""
    rng = np.random.default_rng(at)
    path = tmp_path / "f.bin"
    head = rng.integers(0, 255, size=at + 5000, dtype=np.uint8).tobytes()
    path.write_bytes(head)  # longer than ``at``: a shadow cut back by the rerun
    data = rng.integers(0, 255, size=2 * CHUNK + 3 * BLOCK + 77, dtype=np.uint8).tobytes()
    pieces = _pieces(rng, data)
    with open(path, "r+b") as f:
        w = SequentialWriter(f, at, direct=direct)
        assert w.direct == (direct and _direct_supported(tmp_path / "probe"))
        for k, piece in enumerate(pieces):
            w.write(piece)
            if k == len(pieces) // 2:
                w.sync()  # every byte given so far durable, the partial block included
                done = sum(map(len, pieces[:k + 1]))
                with open(path, "rb") as g:  # another descriptor: what a crash would leave
                    assert g.read()[:at + done] == head[:at] + data[:done]
        assert w.tell() == at + len(data)
        w.sync()
        w.close()
    assert path.read_bytes() == head[:at] + data


def test_a_numpy_batch_is_written_as_its_bytes(tmp_path):
    """The ``.npy`` shadow's use: float32 rows (a buffer, not bytes) after a 128-byte header."""
    path = tmp_path / "f.npy"
    X = np.random.default_rng(0).standard_normal((1000, 768)).astype(np.float32)
    np.save(path, np.zeros_like(X))
    offset = np.load(path, mmap_mode="r").offset
    with open(path, "r+b") as f:
        w = SequentialWriter(f, offset)
        w.write(X[:333].data)
        w.write(X[333:].data)
        w.sync()
        w.close()
    np.testing.assert_array_equal(np.load(path), X)


def test_a_file_system_that_refuses_direct_writes_falls_back(tmp_path, monkeypatch):
    """A direct write refused with ``EINVAL`` (a file system that opens with ``O_DIRECT`` but
    will not write so) turns to the page cache, bytes staged so far included; other errors
    (a full disk) are raised."""
    if not _direct_supported(tmp_path / "probe"):
        pytest.skip("no O_DIRECT on this file system")
    path = tmp_path / "f.bin"
    path.write_bytes(b"h" * 100)
    data = np.random.default_rng(1).integers(0, 255, size=CHUNK + 5 * BLOCK + 3,
                                             dtype=np.uint8).tobytes()
    real = os.pwrite

    def refuse(fd, view, offset):
        if os.get_blocking(fd) and fd == w.fd:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, view, offset)

    with open(path, "r+b") as f:
        w = SequentialWriter(f, 100)
        assert w.direct
        monkeypatch.setattr(os, "pwrite", refuse)
        w.write(data[:CHUNK])
        assert not w.direct
        w.write(data[CHUNK:])
        w.sync()
        w.close()
    assert path.read_bytes() == b"h" * 100 + data

    monkeypatch.undo()
    with open(path, "r+b") as f:
        w = SequentialWriter(f, 0)

        def full(fd, view, offset):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", full)
        with pytest.raises(OSError, match="No space"):
            w.write(data)
        monkeypatch.undo()
        w.close()


def test_start_writeback_starts_the_disk_write_and_changes_nothing(tmp_path):
    """The early write-back of the page cache path (Linux's ``sync_file_range``) is only
    advice: the bytes read back are those written, before and after the fsync, and an empty
    range is no call at all."""
    data = np.random.default_rng(0).integers(0, 255, size=1 << 20, dtype=np.uint8).tobytes()
    with open(tmp_path / "f.bin", "wb") as f:
        f.write(data[: 1 << 19])
        _direct_io.start_writeback(f, 0, 1 << 19)
        f.write(data[1 << 19:])
        _direct_io.start_writeback(f, 1 << 19, 1 << 19)
        _direct_io.start_writeback(f, 1 << 20, 0)
        assert (tmp_path / "f.bin").read_bytes() == data
        _shadow._fsync(f)
    assert (tmp_path / "f.bin").read_bytes() == data
    if sys.platform.startswith("linux"):
        assert _direct_io._SYNC_FILE_RANGE[0] is not None


@pytest.mark.parametrize("busy", [0, 1, 2, 64])
def test_blas_threads_left_to_the_busy_writers(busy):
    """Beside ``busy`` write threads the products get the cores left (one at least), never
    more threads than they had; afterwards the setting is back."""
    from threadpoolctl import threadpool_info

    from skalign._stores.pipeline.streaming import blas_threads_beside as _blas_threads_beside

    def blas():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas()
    if not before:
        pytest.skip("numpy's BLAS is not one threadpoolctl sees")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with _blas_threads_beside(busy):
        inside = blas()
    assert blas() == before
    if busy == 0:
        assert inside == before
    else:
        assert inside == [min(n, max(1, cores - busy)) for n in before]


def test_writers_say_which_threads_keep_a_core_busy(tmp_path):
    """The ``.npy`` shadow's direct writes leave the cores (its page cache writes do not);
    the Parquet file's encoders each take one."""
    from skalign import ProcrustesAligner
    from skalign._stores.pipeline.streaming import WriteBehind as _WriteBehind
    from skalign._stores.pipeline.translate import open_writer, prepare_translation

    rng = np.random.default_rng(0)
    A = rng.standard_normal((200, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(A, A @ rng.standard_normal((8, 8)).astype(np.float32))
    np.save(tmp_path / "src.npy", A)
    for dst, direct, want in [("o.npy", True, 0 if _direct_supported(tmp_path / "p") else 1),
                              ("p.npy", False, 1), ("o.parquet", True, None)]:
        job = prepare_translation(model, tmp_path / "src.npy", tmp_path / dst)
        writer = open_writer(job)
        writer.direct = direct
        with writer.lock():
            writer.begin("fp")
            behind = _WriteBehind(writer.write_unit, writer.pipelined,
                                  writer.encode_unit if writer.encodes else None)
            got = behind.busy_threads(writer)
            behind.close()
            writer.close()
            writer.discard()
        assert got == (behind.depth if want is None else want), dst
        if want is None:
            assert behind.depth >= 2


def test_aligned_batches_are_written_uncopied_and_the_rest_staged(tmp_path, monkeypatch):
    """Block-aligned memory at a block boundary of the file goes to the disk from where it is
    (no copy into the staging buffer); a tail shorter than a block, unaligned memory and an
    unaligned offset are staged, until the staged bytes fill whole blocks again; the file is
    the same bytes whichever way each piece went."""
    if not _direct_supported(tmp_path / "probe"):
        pytest.skip("no O_DIRECT on this file system")
    rng = np.random.default_rng(3)
    X = _direct_io.aligned_empty((700, 96), np.float32)
    assert X.ctypes.data % BLOCK == 0 and X.flags.c_contiguous
    X[:] = rng.standard_normal(X.shape)
    assert 32 * X.strides[0] == 3 * BLOCK
    # whole blocks, aligned in memory and in the file, twice; 4 rows, less than a block
    # (staged); then pieces that start aligned in memory (row 192) or not (row 300)
    cuts = [0, 64, 96, 100, 192, 300, 700]
    staged, uncopied = [], []
    real_put, real_put_from = SequentialWriter._put, SequentialWriter._put_from

    def spy_put(self, whole):  # whole blocks written from the staging buffer
        staged.append(whole)
        return real_put(self, whole)

    def spy_put_from(self, view):  # whole blocks written from the caller's memory
        uncopied.append(len(view))
        return real_put_from(self, view)

    monkeypatch.setattr(SequentialWriter, "_put", spy_put)
    monkeypatch.setattr(SequentialWriter, "_put_from", spy_put_from)
    path = tmp_path / "f.npy"
    offset = _npy.create_npy(path, X.shape, np.float32)
    assert offset == BLOCK
    with open(path, "r+b") as f:
        w = SequentialWriter(f, offset)
        assert w.direct
        fills = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            w.write(X[a:b].data)
            fills.append(w.fill)  # bytes held in the staging buffer
        assert w.direct  # nothing went through the page cache
        w.sync()
        w.close()
    np.testing.assert_array_equal(np.load(path), X)
    row = X.strides[0]
    # rows 0-96: 9 whole blocks from X's memory, nothing staged; rows 96-100 leave a partial
    # block staged, so rows 100-192 are staged too, which fills whole blocks again; rows
    # 192-300 (X's memory at a block boundary) go out uncopied but for their last 512 bytes
    assert uncopied == [64 * row, 32 * row, 108 * row - 512]
    assert fills[:5] == [0, 0, 4 * row, 0, 512]
    assert sum(uncopied) + sum(staged) + fills[-1] == 700 * row


def test_the_npy_shadow_header_is_one_block_and_numpy_reads_it(tmp_path):
    """``create_npy``: a header numpy reads (dtype, shape, C order) padded to one block, the
    data zeros until written, and the file exactly header plus data long."""
    path = tmp_path / "a.npy"
    offset = _npy.create_npy(path, (10, 3), np.float32)
    assert offset == BLOCK and path.stat().st_size == BLOCK + 10 * 3 * 4
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    assert (shape, fortran, dtype) == ((10, 3), False, np.dtype(np.float32))
    mm = np.load(path, mmap_mode="r")
    assert mm.offset == BLOCK and mm.shape == (10, 3)
    np.testing.assert_array_equal(mm, np.zeros((10, 3), np.float32))


@pytest.mark.parametrize("d_out", [768, 100, 3])
def test_npy_default_batches_are_whole_blocks(tmp_path, d_out):
    """The ``.npy`` output's default batch is a whole number of blocks (every batch then goes
    to the disk from the translator's buffer) and still near the memory budget's size."""
    from skalign import ProcrustesAligner
    from skalign._stores.pipeline.translate import default_batch_size, prepare_translation

    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(A, rng.standard_normal((300, d_out)).astype(np.float32))
    np.save(tmp_path / "src.npy", A)
    job = prepare_translation(model, tmp_path / "src.npy", tmp_path / "out.npy")
    assert job.batch_size * 4 * d_out % BLOCK == 0
    budget = default_batch_size(8, d_out)
    assert budget - BLOCK < job.batch_size <= max(budget, BLOCK)
