"""The provenance marks of a file store's overlay (:class:`skalign._stores.files.overlay.Marks`):
held as UTF-8 bytes, a byte a character (a segment's ``<U`` array takes four), read a chunk at
a time; every value comes back as a ``<U`` array gives it, segments stay ``<U`` on disk, and a
planted marks member is refused as before."""

import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from skalign._stores.files import overlay as ov
from skalign._stores.files.overlay import Overlay
from skalign._stores.live import encoded_mark
from skalign.exceptions import StoreError

D = 8


def _overlay(tmp_path, rows):
    store = tmp_path / "store.npy"
    store.write_bytes(b"")
    return store, Overlay(store, D, {"rows": rows})


def test_marks_are_held_in_a_byte_a_character(tmp_path):
    """200,000 encoded rows (marks of 55 characters) in two segments: opening the overlay
    holds under 110 bytes a row and peaks under 320 (as ``<U`` arrays, merged: 240 held, about
    720 at the peak)."""
    n = 200_000
    store, writer = _overlay(tmp_path, 10 * n)
    rng = np.random.default_rng(0)
    fp = "st-" + "0123456789abcdef" * 2
    for part in np.array_split(rng.permutation(10 * n)[:n], 2):
        marks = [encoded_mark(fp[:29], None, f"text {p}") for p in part]
        assert len(marks[0]) == 55
        writer.write(part, np.zeros((len(part), D), np.float32), marks)
    tracemalloc.start()
    try:
        state = Overlay(store, D, {"rows": 10 * n}).refresh()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(state.positions) == n
    assert held <= 110 * n, held / n
    assert peak <= 320 * n, peak / n
    at = int(np.flatnonzero(state.positions == part[7])[0])
    assert state.marks[at] == encoded_mark(fp[:29], None, f"text {part[7]}")


#: marks a writer may be given: non-ASCII, control characters, a lone surrogate, empty, a NUL
#: inside and at the end (a ``<U`` array drops a trailing NUL: so does the overlay)
ODD = ["encoded:é☃:doc:0123456789abcdef", "a\x01\x1f\x7fb", "\ud800x", "", "\x00b", "a\x00",
       "translated:" + "z" * 300, "plain ascii"]


def test_marks_round_trip_as_a_unicode_array_gives_them(tmp_path, monkeypatch):
    """Through segments, a later one winning, a compare-and-set and a compaction: every value
    (``str``) is the one ``np.asarray(marks, dtype=str)`` gives, and a segment's marks are a
    ``<U`` array :func:`numpy.load` reads."""
    store, writer = _overlay(tmp_path, 100)
    expect = {}
    for k in range(3):  # rows 0-7 rewritten by each segment: the last wins
        marks = ODD[k:] + ODD[:k]
        writer.write(np.arange(8) + 4 * k, np.zeros((8, D)), marks)
        expect.update(zip(range(4 * k, 4 * k + 8), np.asarray(marks, dtype=str).tolist()))
    state = Overlay(store, D, {"rows": 100}).refresh()
    want = [expect[p] for p in state.positions.tolist()]
    assert [state.marks[i] for i in range(len(want))] == want
    assert list(state.marks) == want and state.marks.tolist() == want
    assert all(type(m) is str for m in state.marks)
    assert state.marks[np.array([1, 0])].tolist() == want[1::-1]
    assert np.asarray(state.marks).tolist() == want
    assert writer.write([0, 1], np.ones((2, D)), ["new", "lost"],
                        expected=[expect[0], "not it"]).tolist() == [True, False]
    expect[0] = "new"
    monkeypatch.setattr(ov, "COMPACT_SEGMENTS", 5)
    writer.write([99], np.ones((1, D)), ["\u2603\x00"])  # the fifth: merged into one
    expect[99] = "\u2603"
    segments = sorted(writer.folder.glob("seg-*.npz"))
    assert len(segments) == 1
    with np.load(segments[0]) as z:
        assert z["marks"].dtype.kind == "U"
        assert dict(zip(z["positions"].tolist(), z["marks"].tolist())) == expect
    state = Overlay(store, D, {"rows": 100}).refresh()
    assert dict(zip(state.positions.tolist(), state.marks.tolist())) == expect


def _npy(a, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version, allow_pickle=True)
    return b.getvalue()


def _plant(writer, marks):
    with zipfile.ZipFile(writer.folder / "seg-000000000002.npz", "w") as z:
        z.writestr("positions.npy", _npy(np.array([1, 3])))
        z.writestr("vectors.npy", _npy(np.ones((2, D), np.float32)))
        z.writestr("marks.npy", marks)


@pytest.mark.parametrize("marks", [
    _npy(np.array(["x", "yz"], dtype=">U2")),  # another byte order
    _npy(np.array(["x", "yz"]), version=(3, 0)),  # a header read_array reads alone
    _npy(np.asfortranarray(np.array(["x", "yz"]))),
], ids=["big-endian", "version-3", "fortran"])
def test_unicode_segments_other_writers_wrote_are_read(tmp_path, marks):
    store, writer = _overlay(tmp_path, 10)
    writer.write([0], np.zeros((1, D)), ["first"])
    _plant(writer, marks)
    state = Overlay(store, D, {"rows": 10}).refresh()
    assert state.marks.tolist() == ["first", "x", "yz"]


@pytest.mark.parametrize("marks, reason", [
    (_npy(np.array([1, 2])), "wrong shapes or types"),
    (_npy(np.array([b"a", b"b"])), "wrong shapes or types"),
    (_npy(np.array(["a", "b", "c"])), "wrong shapes or types"),
    (_npy(np.array([["a"], ["b"]])), "wrong shapes or types"),
    (_npy(np.array(["a", "b"], dtype=object)), "unreadable: ValueError"),
    (_npy(np.array(["a", "b"]))[:-3], "unreadable: ValueError"),  # cut short
    (b"\x93NUMPY garbage", "unreadable: ValueError"),
], ids=["int", "bytes", "too-many", "2-d", "object", "cut-short", "garbage"])
def test_planted_marks_are_refused(tmp_path, marks, reason):
    store, writer = _overlay(tmp_path, 10)
    writer.write([0], np.zeros((1, D)), ["first"])
    _plant(writer, marks)
    with pytest.raises(StoreError, match=rf"not a segment of this .*\({reason}\)"):
        Overlay(store, D, {"rows": 10}).refresh()


def test_marks_changed_on_disk_are_refused(tmp_path):
    """A flipped byte in the marks: the member's checksum refuses the segment."""
    store, writer = _overlay(tmp_path, 10)
    writer.write([0, 1], np.zeros((2, D)), ["first", "second"])
    segment = writer.folder / "seg-000000000001.npz"
    data = bytearray(segment.read_bytes())
    data[data.index("second".encode("utf-32-le"))] ^= 1
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"\(unreadable: BadZipFile\)"):
        Overlay(store, D, {"rows": 10}).refresh()


def test_a_spurious_system_error_is_read_again_not_refused(tmp_path, monkeypatch):
    """CPython 3.11 can raise a spurious ``SystemError`` while two threads parse ``.npy``
    headers (python/cpython#106905): a segment whose read raised one is read again, and only
    refused when every try raised it; threads reading segments at once all read them."""
    import threading

    store, writer = _overlay(tmp_path, 100)
    writer.write(np.arange(10), np.zeros((10, D), np.float32), ["translated:m"] * 10)
    real, calls = ov._open_segment, []

    def flaky(f, dim):
        calls.append(1)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch")
        return real(f, dim)

    monkeypatch.setattr(ov, "_open_segment", flaky)
    assert len(Overlay(store, D, {"rows": 100}).refresh().positions) == 10
    assert len(calls) == 2

    def always(f, dim):
        raise SystemError("AST constructor recursion depth mismatch")

    monkeypatch.setattr(ov, "_open_segment", always)
    with pytest.raises(StoreError, match="unreadable: SystemError"):
        Overlay(store, D, {"rows": 100}).refresh()
    monkeypatch.setattr(ov, "_open_segment", real)
    errors = []

    def reader():
        try:
            for _ in range(30):
                assert len(Overlay(store, D, {"rows": 100}).refresh().positions) == 10
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
