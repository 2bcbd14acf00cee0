"""``skalign info``'s provenance counts of a file store: from the overlay's marks and the marked
rows' texts (never the vectors), kept beside the overlay with what they were computed from,
and never shown once any of that changed (a write-back, a compaction, a text file replaced,
another encoder in the stamp)."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skalign._migrate import counts as counts_module
from skalign._migrate.counts import COUNTS_FILE, count_provenance
from skalign._stores import open_live
from skalign._stores.address import parse_address
from skalign._stores.files import overlay as overlay_module
from skalign._stores.live import encoded_mark, mark_state, translated_mark

N, D = 300, 8


def _parquet(path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    pq.write_table(pa.table({"id": np.arange(N) * 3 + 7, "text": [f"text {i}" for i in range(N)],
                             "vector": pa.FixedSizeListArray.from_arrays(X.ravel(), D)}), path)
    return parse_address(str(path))


def _npy(folder):
    rng = np.random.default_rng(1)
    np.save(folder / "s.npy", rng.normal(size=(N, D)).astype(np.float32))
    (folder / "s.txt").write_text("".join(f"line {i}\n" for i in range(N)))
    return parse_address(str(folder / "s.npy"))


def _oracle(address, text_field):
    """Counts read row by row through ``fetch`` (every row's vector, mark and text)."""
    out = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0}
    with open_live(address, text_field=text_field) as store:
        ids = store.ids()
        rows = store.fetch(ids, text_field=text_field)
        field = store.text_source(text_field)
        for p, t in zip(rows.provenance, rows.texts):
            out["rows"] += 1
            out[mark_state(p, None, field, t)] += 1
    return out


def _plain(counts):
    return {k: counts[k] for k in ("rows", "encoded", "stale", "translated")}


def _write(address, text_field, rows, marks):
    with open_live(address, text_field=text_field) as store:
        ids = [store.ids()[i] for i in rows]
        V = np.ones((len(ids), D), np.float32)
        store.write_back(ids, V, marks)


def _encoded(address, text_field, rows, fp="enc-1"):
    with open_live(address, text_field=text_field) as store:
        ids = [store.ids()[i] for i in rows]
        texts = store.fetch(ids, text_field=text_field).texts
        field = store.text_source(text_field)
    _write(address, text_field, rows, [encoded_mark(fp, field, t) for t in texts])


@pytest.fixture
def parquet_store(tmp_path):
    address = _parquet(tmp_path / "s.parquet")
    _encoded(address, "text", range(0, 120))
    _write(address, "text", range(200, 230), [translated_mark("m")] * 30)
    _write(address, "text", range(230, 240), [encoded_mark("enc-1", "text", "not its text")] * 10)
    return address


def test_counts_come_from_the_overlay_and_equal_a_row_by_row_count(parquet_store, monkeypatch):
    expected = _oracle(parquet_store, "text")
    assert expected == {"rows": N, "encoded": 120, "stale": 10, "translated": 170}
    got = count_provenance(parquet_store, text_field="text")
    assert _plain(got) == expected and got["encoders"] == {"enc-1": 120}
    folder = parquet_store.path.with_name("s.parquet" + overlay_module.OVERLAY_SUFFIX)
    assert (folder / COUNTS_FILE).exists()

    # the vectors are never read: a store whose vector reads fail still counts
    from skalign._stores.parquet.live import ParquetLive

    def no_vectors(*a, **k):
        raise AssertionError("a vector was read")

    monkeypatch.setattr(ParquetLive, "_take_vectors", no_vectors)
    (folder / COUNTS_FILE).unlink()
    assert _plain(count_provenance(parquet_store, text_field="text")) == expected


def test_kept_counts_are_used_while_nothing_changed(parquet_store, monkeypatch):
    first = count_provenance(parquet_store, text_field="text")
    calls = []
    real = counts_module._count_marks
    monkeypatch.setattr(counts_module, "_count_marks",
                        lambda *a: calls.append(1) or real(*a))
    assert count_provenance(parquet_store, text_field="text") == first
    assert not calls  # read back, not counted again


def test_kept_counts_are_read_without_opening_the_store(parquet_store, monkeypatch):
    first = count_provenance(parquet_store, text_field="text")
    import skalign._stores as stores

    opened, real = [], stores.open_live
    monkeypatch.setattr(stores, "open_live", lambda *a, **k: opened.append(1) or real(*a, **k))
    assert count_provenance(parquet_store, text_field="text") == first and not opened
    # the store's files changed under the same overlay: opened, and refused as search refuses
    os.utime(parquet_store.path, ns=(1, 1))
    assert count_provenance(parquet_store, text_field="text") is None and opened


def test_a_write_back_makes_kept_counts_stale(parquet_store):
    count_provenance(parquet_store, text_field="text")
    _encoded(parquet_store, "text", range(120, 160))  # a searcher's write-back: a new segment
    _write(parquet_store, "text", range(0, 5), [translated_mark("m")] * 5)
    expected = _oracle(parquet_store, "text")
    assert expected["encoded"] == 155
    assert _plain(count_provenance(parquet_store, text_field="text")) == expected


def test_kept_counts_of_another_state_or_malformed_are_not_shown(parquet_store):
    folder = parquet_store.path.with_name("s.parquet" + overlay_module.OVERLAY_SUFFIX)
    count_provenance(parquet_store, text_field="text")
    kept = json.loads((folder / COUNTS_FILE).read_text())
    expected = _plain(kept["counts"])
    # counts planted for this very state but wrong: the sum does not hold -> counted again
    bad = {**kept, "counts": {**kept["counts"], "encoded": N}}
    (folder / COUNTS_FILE).write_text(json.dumps(bad))
    assert _plain(count_provenance(parquet_store, text_field="text")) == expected
    for junk in ("{", "[]", json.dumps({"key": kept["key"], "texts": {}, "counts": "many"}),
                 json.dumps({**kept, "counts": {**kept["counts"], "stale": -1,
                                                "translated": kept["counts"]["translated"] + 1}})):
        (folder / COUNTS_FILE).write_text(junk)
        assert _plain(count_provenance(parquet_store, text_field="text")) == expected
    # counts of an earlier overlay (one segment fewer) are never shown for the current one
    (folder / COUNTS_FILE).write_text(json.dumps(kept))
    _encoded(parquet_store, "text", range(240, 250))
    assert count_provenance(parquet_store, text_field="text")["encoded"] == 130


def test_a_compaction_makes_kept_counts_stale(parquet_store, monkeypatch):
    count_provenance(parquet_store, text_field="text")
    monkeypatch.setattr(overlay_module, "COMPACT_SEGMENTS", 2)
    _write(parquet_store, "text", range(0, 10), [translated_mark("m")] * 10)
    folder = parquet_store.path.with_name("s.parquet" + overlay_module.OVERLAY_SUFFIX)
    assert len(list(folder.glob("seg-*.npz"))) == 1  # merged into one
    expected = _oracle(parquet_store, "text")
    assert expected["encoded"] == 110
    assert _plain(count_provenance(parquet_store, text_field="text")) == expected


def test_another_encoder_in_the_stamp_is_counted_again(parquet_store, monkeypatch):
    count_provenance(parquet_store, text_field="text")
    stamp = {"migration": {"encoder": "enc-2", "map": "m", "method": None, "estimate": None}}
    monkeypatch.setattr("skalign._stores.provenance.read_stamp", lambda address: stamp)
    got = count_provenance(parquet_store, text_field="text")
    assert got["encoded"] == 0 and got["stale"] == 130 and got["encoders"] == {"enc-1": 120}


def test_a_replaced_text_file_makes_kept_counts_stale(tmp_path):
    address = _npy(tmp_path)
    texts = str(tmp_path / "s.txt")
    _encoded(address, texts, range(50, 150))
    assert _plain(count_provenance(address, text_field=texts)) == _oracle(address, texts)
    assert count_provenance(address, text_field=texts)["encoded"] == 100
    # an application rewrites the texts beside the store (same size, 20 of them changed)
    lines = [f"line {i}" if not 60 <= i < 80 else f"lin? {i}" for i in range(N)]
    new = tmp_path / "s.txt.new"
    new.write_text("".join(t + "\n" for t in lines))
    os.replace(new, texts)
    expected = _oracle(address, texts)
    assert expected["encoded"] == 80 and expected["stale"] == 20
    assert _plain(count_provenance(address, text_field=texts)) == expected


def test_marks_of_two_text_files_are_counted_a_chunk_at_a_time(tmp_path, monkeypatch):
    """Rows encoded from two text files, interleaved, counted 7 marks at a time: the same
    counts as in one chunk; replacing the second file (read only for its rows) makes the kept
    counts stale."""
    address = _npy(tmp_path)
    first, second = str(tmp_path / "s.txt"), tmp_path / "other.txt"
    second.write_text("".join(f"other {i}\n" for i in range(N)))
    _encoded(address, first, range(0, 200, 2))
    _encoded(address, str(second), range(1, 100, 2))
    _write(address, first, range(150, 160, 2), [encoded_mark("enc-1", first, "not it")] * 5)
    whole = count_provenance(address, text_field=first)
    assert _plain(whole) == {"rows": N, "encoded": 145, "stale": 5, "translated": 150}
    sizes = []
    real = counts_module._count_marks
    monkeypatch.setattr(counts_module, "TEXT_BATCH", 7)
    monkeypatch.setattr(counts_module, "_count_marks",
                        lambda marks, *a: sizes.append(len(marks)) or real(marks, *a))
    folder = address.path.with_name("s.npy" + overlay_module.OVERLAY_SUFFIX)
    (folder / COUNTS_FILE).unlink()
    assert count_provenance(address, text_field=first) == whole
    assert max(sizes) == 7 and sum(sizes) == 150
    new = tmp_path / "other.new"
    new.write_text("".join(f"other {i}\n" if i > 9 else f"changed {i}\n" for i in range(N)))
    os.replace(new, second)
    assert count_provenance(address, text_field=first)["encoded"] == 140  # 1, 3, .., 9 stale


def test_counting_holds_a_chunk_of_marks_and_texts_not_all(tmp_path, monkeypatch):
    """50,000 encoded rows counted 4,096 at a time: the count peaks under 50 bytes a row
    beyond the open store (all of the rows' marks, row numbers and texts at once: about
    136)."""
    import tracemalloc

    n = 50_000
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": np.arange(n), "text": [f"text number {i}" for i in range(n)],
                             "vector": pa.FixedSizeListArray.from_arrays(
                                 np.zeros(n * 2, np.float32), 2)}), path)
    address = parse_address(str(path))
    fp = "enc-" + "a" * 25
    with open_live(address, text_field="text") as store:
        store.write_back(list(range(n)), np.ones((n, 2), np.float32),
                         [encoded_mark(fp, "text", f"text number {i}") for i in range(n)])
    monkeypatch.setattr(counts_module, "TEXT_BATCH", 4096)
    with open_live(address, text_field="text") as store:
        store.overlay.refresh()
        tracemalloc.start()
        try:
            counts = counts_module._overlay_counts(store, fp, None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert counts["encoded"] == n and counts["encoders"] == {fp: n}
    assert peak < 50 * n, peak / n


def test_an_unwritable_overlay_folder_still_counts(parquet_store):
    folder = parquet_store.path.with_name("s.parquet" + overlay_module.OVERLAY_SUFFIX)
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    os.chmod(folder, 0o500)
    try:
        assert _plain(count_provenance(parquet_store, text_field="text")) == \
            _oracle(parquet_store, "text")
        assert not (folder / COUNTS_FILE).exists()
    finally:
        os.chmod(folder, 0o700)


# ------------------------------------------------------------------ databases, counted without
# their vectors (LiveStore.count_marks): equal to a row-by-row count on each real engine
ENGINE_ROWS = 60


def _row_by_row(store, mine, empty=False):
    """Each row read with ``fetch`` (its vector too) and its text read from the field its mark
    names: :func:`mark_state` of every row, counted."""
    from urllib.parse import unquote

    from skalign._stores.live import parse_mark
    from skalign.exceptions import StoreError

    out = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    if empty:
        out["empty"] = 0
    for ident in store.ids():
        p = store.fetch([ident]).provenance[0]
        mark = parse_mark(p)
        field, text = None, None
        if mark is not None and mark.kind == "encoded":
            field = unquote(mark.field) if mark.field else None
            try:
                text = store.fetch([ident], text_field=field).texts[0]
            except StoreError:
                text = None
            if mark_state(p, None, field, text) == "encoded":
                out["encoders"][mark.fingerprint] = out["encoders"].get(mark.fingerprint, 0) + 1
        out["rows"] += 1
        if empty and p is None:
            out["empty"] += 1
        else:
            out[mark_state(p, mine, field, text)] += 1
    return out


@pytest.fixture(params=["duckdb", "sqlite-vec", "qdrant", "chroma", "milvus"])
def engine_store(request, tmp_path, monkeypatch):
    """A store of :data:`ENGINE_ROWS` rows of each engine, made with the engine's own client
    (tests/test_live_stores.py's makers), and its address."""
    import tempfile

    import test_live_stores as makers

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    maker = {"chroma": makers.Chroma, "qdrant": makers.Qdrant, "sqlite-vec": makers.Vec,
             "milvus": makers.Milvus, "duckdb": makers.Duck}[request.param](tmp_path)
    X = np.random.default_rng(3).normal(size=(ENGINE_ROWS, 16)).astype(np.float32)
    address = maker.make(X, "cosine")
    if request.param == "milvus":  # the rows in a segment: those written back go after them
        maker.client().flush("src")
    return address


def _mixed_marks(store):
    """Write fresh, stale, other-encoder, translated, old-version and other-field marks."""
    ids = store.ids()
    field = store.text_source(None)
    texts = store.fetch(ids[:40]).texts
    marks = [encoded_mark("enc-1", field, t) for t in texts[:20]]  # fresh
    marks += [encoded_mark("enc-2", field, t) for t in texts[20:25]]  # another encoder
    marks += [encoded_mark("enc-1", field, "not its text")] * 5  # the text changed since
    marks += [translated_mark("m")] * 5 + ["encoded:enc-0"] * 2  # an earlier version's mark
    marks += [encoded_mark("enc-1", "nope", t) for t in texts[37:39]]  # a field not held
    marks += [encoded_mark("enc-1", "text", texts[39])]  # the text field named
    store.write_back(ids[:40], np.ones((40, store.dim), np.float32), marks)


def _small_pages(monkeypatch):
    """Pages of 16 rows in the engines' scans: a scan of :data:`ENGINE_ROWS` rows takes several,
    after write-backs that moved rows within the engine's storage."""
    import importlib

    for module, names in (("skalign._stores.milvus.live", ("SCAN_PAGE", "LITE_SCAN_PAGE")),
                          ("skalign._stores.milvus.store", ("ID_PAGE", "LITE_ID_PAGE")),
                          ("skalign._stores.qdrant.live", ("SCAN_PAGE",)),
                          ("skalign._stores.chroma.live", ("SCAN_PAGE",))):
        module = importlib.import_module(module)
        for name in names:
            monkeypatch.setattr(module, name, 16)


def test_engines_count_their_marks_as_a_row_by_row_read_does(engine_store, monkeypatch):
    _small_pages(monkeypatch)
    with open_live(engine_store) as store:
        fresh = store.count_marks("enc-1")
        assert fresh == _row_by_row(store, "enc-1")
        assert fresh["rows"] == fresh["translated"] == ENGINE_ROWS
        assert store.count_marks("enc-1", empty=True)["empty"] == ENGINE_ROWS
        _mixed_marks(store)
    with open_live(engine_store) as store:
        fetched = []
        real = type(store).fetch
        monkeypatch.setattr(type(store), "fetch",
                            lambda self, ids, **k: fetched.extend(ids) or real(self, ids, **k))
        got = {mine: store.count_marks(mine) for mine in ("enc-1", None)}
        got["empty"] = store.count_marks("enc-1", empty=True)
        # no row's vector read but those whose mark names another text field
        assert len(fetched) <= 3 * 3
        monkeypatch.setattr(type(store), "fetch", real)
        assert len(set(store.ids())) == ENGINE_ROWS  # rows written back are read once, in pages
        assert got["enc-1"] == _row_by_row(store, "enc-1")
        assert got[None] == _row_by_row(store, None)
        assert got["empty"] == _row_by_row(store, "enc-1", empty=True)
    counts = got["enc-1"]
    assert counts["encoded"] >= 20 and counts["encoders"]["enc-2"] == 5
    assert counts["stale"] >= 5 + 5 + 2 + 2 and counts["translated"] == ENGINE_ROWS - 40 + 5
    assert got["empty"]["empty"] == ENGINE_ROWS - 40
    assert got[None]["encoded"] == counts["encoded"] + 5
    assert count_provenance(engine_store) == got[None]  # `skalign info` (no stamp: any encoder)


def test_duckdb_samples_vector_lengths_itself(tmp_path, monkeypatch):
    """``sample_norms``: every row's length and mark in a small table, a seeded sample of
    whole rows (its lengths and marks those of rows of the table) in a larger one."""
    import tempfile

    import test_live_stores as makers

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    X = np.random.default_rng(4).normal(size=(ENGINE_ROWS, 16)).astype(np.float32) * 3
    address = makers.Duck(tmp_path).make(X, "cosine")
    with open_live(address) as store:
        _mixed_marks(store)
        rows = store.fetch(store.ids())
        lengths = np.linalg.norm(rows.vectors.astype(np.float64), axis=1)
        truth = sorted(zip(lengths.round(3).tolist(), map(str, rows.provenance)))
        norms, marks = store.sample_norms(1000)
        assert sorted(zip(np.round(norms, 3).tolist(), map(str, marks))) == truth
        norms, marks = store.sample_norms(20)
        again = store.sample_norms(20)  # seeded: the same rows
        assert 10 <= len(norms) <= 20 and np.array_equal(norms, again[0]) and marks == again[1]
        assert set(zip(np.round(norms, 3).tolist(), map(str, marks))) <= set(truth)
