"""A live file store's ids and texts read without a copy that grows with the store: a Parquet
store's ids a row group at a time into one array, a text column larger than
``TEXT_CACHE_BYTES`` a row group at a time (the last ``TEXT_GROUPS`` kept), with the same
answers as the column read whole; a text file's lines indexed a block at a time."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skalign._migrate.counts import count_provenance
from skalign._stores import open_live
from skalign._stores.address import parse_address
from skalign._stores.files import live as files_live
from skalign._stores.live import encoded_mark
from skalign._stores.parquet import live as parquet_live
from skalign.exceptions import StoreError

D = 4


def _table(lo, n, ids=None):
    rng = np.random.default_rng(lo)
    texts = [None if i % 97 == 5 else f"text {i} " + "é" * (i % 5) for i in range(lo, lo + n)]
    return pa.table({"id": np.arange(lo, lo + n) * 5 + 3 if ids is None else ids,
                     "text": texts,
                     "vector": pa.FixedSizeListArray.from_arrays(
                         rng.normal(size=n * D).astype(np.float32), D)})


@pytest.fixture
def sharded(tmp_path):
    """A folder of two shards, of 5 and 4 row groups of unequal sizes (1,150 rows)."""
    folder = tmp_path / "store"
    folder.mkdir()
    pq.write_table(_table(0, 700), folder / "a.parquet", row_group_size=150)
    pq.write_table(_table(700, 450), folder / "b.parquet", row_group_size=120)
    return parse_address(str(folder))


def test_texts_by_row_group_equal_the_column_read_whole(sharded, monkeypatch):
    rng = np.random.default_rng(0)
    asks = [rng.integers(0, 1150, 300), np.arange(1150), np.array([1149, 0, 699, 700, 0]),
            np.zeros(0, np.int64)]
    with open_live(sharded, text_field="text") as store:
        whole = [store.texts_at(p) for p in asks]
        assert "text" in store._columns  # a small column: read whole, once
    monkeypatch.setattr(parquet_live, "TEXT_CACHE_BYTES", 0)
    with open_live(sharded, text_field="text") as store:
        assert not store._columns  # the id column is not kept as Arrow either
        for p, expected in zip(asks, whole):
            assert store.texts_at(p) == expected
            assert len(store._groups) <= parquet_live.TEXT_GROUPS
        assert not store._columns
        ids = store.ids()
        assert ids == (np.arange(1150) * 5 + 3).tolist()
        rows = store.fetch([ids[5], ids[1149], ids[3]], text_field="text")
        assert rows.texts == [None, "text 1149 " + "é" * 4, "text 3 ééé"]


def test_counts_by_row_group_equal_the_whole_column_counts(sharded, monkeypatch):
    with open_live(sharded, text_field="text") as store:
        ids = store.ids()
        rows = list(range(0, 1150, 3))
        texts = store.texts_at(rows)
        marks = [encoded_mark("enc", "text", t if k % 10 else "changed")
                 for k, t in enumerate(texts)]
        store.write_back([ids[r] for r in rows], np.ones((len(rows), D), np.float32), marks)
    whole = count_provenance(sharded, text_field="text")
    assert whole["stale"] > 0 and whole["encoded"] > 0
    monkeypatch.setattr(parquet_live, "TEXT_CACHE_BYTES", 0)
    monkeypatch.setattr("skalign._migrate.counts.TEXT_BATCH", 50)
    folder = sharded.path.with_name("store.skalign-live")
    (folder / "counts.json").unlink()
    assert count_provenance(sharded, text_field="text") == whole


def test_ids_come_a_row_group_at_a_time(tmp_path):
    """Integer ids are copied into one array as the row groups come; string ids are joined;
    a missing id in a later row group and a repeated id across shards are refused."""
    path = tmp_path / "s.parquet"
    pq.write_table(_table(0, 500, ids=[f"k{i:04d}" for i in range(500)]), path,
                   row_group_size=64)
    with open_live(parse_address(str(path)), text_field="text") as store:
        assert store.ids() == [f"k{i:04d}" for i in range(500)]
        assert store.fetch(["k0499"], text_field="text").texts == ["text 499 éééé"]
    ids = pa.array([*range(300), None, *range(301, 500)], type=pa.int64())
    pq.write_table(_table(0, 500, ids=ids), path, row_group_size=64)
    with pytest.raises(StoreError, match="missing"):
        open_live(parse_address(str(path)))
    folder = tmp_path / "dup"
    folder.mkdir()
    pq.write_table(_table(0, 100), folder / "a.parquet", row_group_size=30)
    pq.write_table(_table(99, 50), folder / "b.parquet", row_group_size=30)
    with pytest.raises(StoreError, match="more than once"):
        open_live(parse_address(str(folder)))


def test_a_large_text_column_is_never_held_whole(tmp_path, monkeypatch):
    """20 row groups of 2,000 texts of 200 characters, the column over ``TEXT_CACHE_BYTES``:
    reading every row's text in order, 2,048 at a time, holds at most ``TEXT_GROUPS`` row
    groups (Arrow's own allocations), not the column's 8 MB."""
    n, size = 40_000, 2000
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": np.arange(n), "text": [f"{i:08d}" + "x" * 192
                                                          for i in range(n)],
                             "vector": pa.FixedSizeListArray.from_arrays(
                                 np.zeros(n * D, np.float32), D)}), path,
                   row_group_size=size)
    monkeypatch.setattr(parquet_live, "TEXT_CACHE_BYTES", 1 << 20)
    peak = 0
    with open_live(parse_address(str(path)), text_field="text") as store:
        for lo in range(0, n, 2048):
            got = store.texts_at(np.arange(lo, min(n, lo + 2048)))
            assert got[0][:8] == f"{lo:08d}" and len(got[-1]) == 200
            peak = max(peak, sum(c.nbytes for c in store._groups.values()))
        assert not store._columns
    assert 0 < peak <= parquet_live.TEXT_GROUPS * size * 210, peak


@pytest.mark.parametrize("block", [1, 2, 7, 16 << 20])
@pytest.mark.parametrize("data", [b"a\nbb\n\nc\xc3\xa9\n", b"a\r\nb", b"\n\n", b"",
                                  b"x" * 30 + b"\n" + b"y" * 5])
def test_text_lines_are_indexed_a_block_at_a_time(tmp_path, monkeypatch, block, data):
    """Any block size finds the lines Python's own split finds (a last line without its
    newline, empty lines, CRLF); a count of lines other than the rows is refused."""
    monkeypatch.setattr(files_live, "LINE_BLOCK", block)
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines = lines[:-1]
    texts = files_live.LineTexts(path, len(lines), "s.npy")
    expected = [line.decode().rstrip("\r") or None for line in lines]
    assert texts.get(range(len(lines))[::-1]) == expected[::-1]
    with pytest.raises(StoreError, match="lines for the"):
        files_live.LineTexts(path, len(lines) + 1, "s.npy")


def test_indexing_a_text_file_holds_a_block_not_the_file(tmp_path, monkeypatch):
    """A 20 MB text file of 200,000 lines indexed 1 MB at a time peaks under 10 MB (a
    comparison over the whole file takes 20)."""
    import tracemalloc

    monkeypatch.setattr(files_live, "LINE_BLOCK", 1 << 20)
    path = tmp_path / "t.txt"
    n = 200_000
    path.write_bytes(b"".join(b"%09d " % i + b"z" * 89 + b"\n" for i in range(n)))
    tracemalloc.start()
    try:
        texts = files_live.LineTexts(path, n, "s.npy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20, peak
    assert texts.get([0, n - 1, 12345]) == [f"{i:09d} " + "z" * 89 for i in (0, n - 1, 12345)]
