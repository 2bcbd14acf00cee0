"""The single-file Parquet output: units appended one after the other, joined by one footer
(skalign._stores.parquet.footer), and its crash safety around the footer."""

import os
import struct

import numpy as np
import pytest

from skalign import ProcrustesAligner
from skalign.io import translate

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from skalign._stores.parquet.footer import decode, encode, footer_of, join_footers  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("doc", pa.string()),
                    ("meta", pa.struct([("k", pa.int64()), ("tags", pa.list_(pa.string()))])),
                    ("v", pa.list_(pa.float32(), 3))])


def _batch(lo, n):
    v = pa.FixedSizeListArray.from_arrays(
        pa.array(np.arange(lo * 3, (lo + n) * 3, dtype=np.float32)), 3)
    meta = pa.array([{"k": i, "tags": ["a", str(i)] * (i % 3)} for i in range(lo, lo + n)],
                    type=SCHEMA.field("meta").type)
    return pa.record_batch([pa.array(np.arange(lo, lo + n)),
                            pa.array([None if i % 7 == 0 else f"d{i}" for i in range(lo, lo + n)]),
                            meta, v], schema=SCHEMA)


def test_units_appended_and_joined_read_as_one_file(tmp_path):
    """Units written by pyarrow one after the other (dictionaries, nulls, nested columns, a page
    index on some) and the joined footer: pyarrow reads the file as the concatenation, row group
    by row group; each unit's footer decodes and encodes again to the same bytes."""
    path = tmp_path / "x.parquet"
    footers, starts, batches, lo = [], [], [], 0
    with open(path, "wb") as f:
        for k in range(17):  # more than 15 row groups: the long form of a Thrift list header
            starts.append(f.tell())
            w = pq.ParquetWriter(f, SCHEMA, use_dictionary=["id", "doc", "meta"],
                                 write_page_index=k % 2 == 0)
            batches.append(_batch(lo, 5 + 3 * k))
            lo += 5 + 3 * k
            w.write_batch(batches[-1])
            w.close()
            f.flush()
            data = path.read_bytes()
            footer = footer_of(data)
            assert encode(decode(footer)) == footer
            footers.append(footer)
        joined = join_footers(footers, starts)
        f.write(joined + struct.pack("<i", len(joined)) + b"PAR1")
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_rows == lo and pf.num_row_groups == 17
    assert pf.read().equals(pa.Table.from_batches(batches))
    for k in (0, 9, 16):
        assert pf.read_row_group(k).equals(pa.Table.from_batches([batches[k]]))


def test_join_rejects_units_of_another_schema(tmp_path):
    footers = []
    for i, schema in enumerate([SCHEMA, pa.schema([("id", pa.int64())])]):
        pq.write_table(schema.empty_table(), tmp_path / f"{i}.parquet")
        footers.append(footer_of((tmp_path / f"{i}.parquet").read_bytes()))
    with pytest.raises(ValueError, match="different schemas"):
        join_footers(footers, [0, 100])


class _Crash(BaseException):
    """Stops a run the way a kill would (not a StoreError: the shadow stays resumable)."""


def test_crash_after_the_footer_resumes_without_translating_again(tmp_path, monkeypatch):
    """A run stopped after its last unit and footer are written (in the verification), with a
    torn footer after them as a kill during its write would leave: the rerun cuts the shadow
    back to the committed units, translates nothing again, and gives the same bytes as an
    uninterrupted run; nothing else is left."""
    from skalign._stores import journal as _journal
    from skalign._stores.pipeline import verify as _verify

    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:100], rng.normal(size=(100, 12)))
    np.save(tmp_path / "x.npy", X)
    translate(model, tmp_path / "x.npy", tmp_path / "ref.parquet", batch_size=64)
    monkeypatch.setattr(_journal, "COMMIT_SECONDS", 0)
    calls = []
    transform = ProcrustesAligner.transform

    def crash_in_verify(self, X_):
        calls.append(len(X_))
        if len(calls) > 8:  # 8 batches of 64 rows, then the verification's sample
            raise _Crash
        return transform(self, X_)

    monkeypatch.setattr(ProcrustesAligner, "transform", crash_in_verify)
    with pytest.raises(_Crash):
        translate(model, tmp_path / "x.npy", tmp_path / "out.parquet", batch_size=64)
    shadow = tmp_path / ".out.parquet.skalign-partial.parquet"
    with open(shadow, "ab") as f:
        f.write(b"\x15\x00torn footer")
    calls.clear()
    monkeypatch.setattr(ProcrustesAligner, "transform",
                        lambda self, X_: (calls.append(len(X_)), transform(self, X_))[1])
    result = translate(model, tmp_path / "x.npy", tmp_path / "out.parquet", batch_size=64)
    assert result.resumed_from == 500
    # nothing translated again but the verification's sample, read back from the input
    assert calls == [_verify.N_VERIFY]
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    table = pq.read_table(tmp_path / "out.parquet")
    np.testing.assert_allclose(np.stack(table.column("vector").to_numpy(zero_copy_only=False)),
                               transform(model, X), atol=1e-5)
    assert sorted(os.listdir(tmp_path)) == ["out.parquet", "out.parquet.skalign.json",
                                            "ref.parquet", "ref.parquet.skalign.json", "x.npy"]


def test_sampled_rows_are_read_back_exactly(tmp_path, monkeypatch):
    """The verification's reader picks rows across row groups and decode batches, in any order,
    repeated or not, and stops early in a group without losing a row."""
    from skalign._stores.parquet import store as _parquet

    files = []
    for k, (lo, n) in enumerate([(0, 10), (10, 7), (17, 12)]):  # three files, two groups each
        files.append(tmp_path / f"{k}.parquet")
        pq.write_table(pa.Table.from_batches([_batch(lo, n)]), files[-1],
                       row_group_size=-(-n // 2))
    monkeypatch.setattr(_parquet, "TAKE_BATCH_ROWS", 3)
    positions = [28, 0, 4, 5, 5, 9, 10, 16, 17, 22, 3]
    vecs, rows = _parquet._parquet_take(pa, pq, files, positions, "v")
    whole = pa.concat_tables([pq.read_table(p) for p in files]).to_pylist()
    np.testing.assert_array_equal(vecs, np.array([whole[p]["v"] for p in positions],
                                                  dtype=np.float32))
    assert rows == [{k: v for k, v in whole[p].items() if k != "v"} for p in positions]
    assert [r["id"] for r in rows] == positions


def test_input_rows_read_back_stop_after_the_last_one_wanted(tmp_path, monkeypatch):
    """The verification of a resumed run reads the sampled rows the crashed run committed back
    from a Parquet input in batches of ``TAKE_BATCH_ROWS``, whatever the translation's batch
    size: a row group is decoded up to the batch holding its last wanted row, no further."""
    from skalign._stores.parquet import store as _parquet
    from skalign._stores.pipeline import translate as _pipeline

    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_batches([_batch(0, 400)]), path, row_group_size=200)
    reader = _pipeline.open_reader(path, column="v")
    decoded = []
    iter_batches = pq.ParquetFile.iter_batches

    def counting(self, *args, **kwargs):
        for rb in iter_batches(self, *args, **kwargs):
            decoded.append(rb.num_rows)
            yield rb

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    monkeypatch.setattr(_parquet, "TAKE_BATCH_ROWS", 16)
    positions = [205, 3, 204, 17]
    vectors, rows = reader.take(positions, batch_size=150)
    # group 0 up to row 17 (two batches of 16), group 1 up to its row 5 (one batch)
    assert decoded == [16, 16, 16]
    whole = pq.read_table(path).to_pylist()
    np.testing.assert_array_equal(vectors, np.array([whole[p]["v"] for p in positions],
                                                     dtype=np.float32))
    assert rows == [{k: v for k, v in whole[p].items() if k != "v"} for p in positions]
