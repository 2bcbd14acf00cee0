"""``skalign migrate`` and ``--continue`` on every file store (``.npy``, a Parquet file, a folder
of Parquet shards, a LanceDB table, a FAISS index), and pairs read by id from the file stores
whose ids no other test reads: the "yes" cells of those engines in the guide's stores table
(tests/store_capabilities.py)."""

import tempfile

import numpy as np
import pytest
from store_capabilities import kinds
from test_search import FileStore, lookup_encoder

from skalign._migrate.migration import migrate_store
from skalign._stores import open_live
from skalign.cli._pairs_io import read_pairs
from skalign.encoders import CachedEncoder, CallableEncoder, EncodeCache

N, D = 300, 16


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def spaces():
    rng = np.random.default_rng(11)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y + 0.7 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


def _output(tmp_path, kind):
    suffix = {"npy": ".npy", "parquet": ".parquet", "parquet-dir": "", "lance": ".lance",
              "faiss": ".faiss"}[kind]
    return str(tmp_path / ("db" if kind == "lance" else "") / f"out{suffix}")


@pytest.mark.parametrize("kind", kinds(
    "migrate", "test_migrate_files.py::test_file_store_migration_continued_to_the_end"))
def test_file_store_migration_continued_to_the_end(tmp_path, spaces, kind):
    """Three steps of 100 rows: each text encoded once, the output's every vector the
    encoder's, each row marked ``encoded``, and the source unchanged."""
    X, Y = spaces
    store = FileStore(kind, tmp_path)
    source = store.make(X)
    out = _output(tmp_path, kind)
    seen = []
    enc = CachedEncoder(CallableEncoder(lookup_encoder(Y, seen), fingerprint="lookup-Y"),
                        cache=EncodeCache(tmp_path / "cache.sqlite"))
    text = store.options["text_field"]
    steps = [migrate_store(source, out, enc, 100, text_field=text, anyway=True)]
    for _ in range(2):
        steps.append(migrate_store(source, out, enc, 100, text_field=text, anyway=True,
                                   continue_=True))
    assert [s.n_encoded_rows for s in steps] == [100, 200, 300]
    assert steps[-1].action == "complete" and sum(seen) == N  # each text encoded once
    keys = [store.key(i) for i in range(N)]
    with open_live(out) as written:
        rows = written.fetch(keys)
    np.testing.assert_allclose(rows.vectors, Y, rtol=1e-5, atol=1e-6)
    assert all(p.startswith("encoded:lookup-Y:") for p in rows.provenance)
    with open_live(source) as kept:
        np.testing.assert_array_equal(kept.fetch(keys).vectors, X)


@pytest.mark.parametrize("kind", kinds("pairs by id",
                                       "test_migrate_files.py::test_file_store_pairs_by_id"))
def test_file_store_pairs_by_id(tmp_path, spaces, kind):
    """The store's ids (``3 i + 1``) paired with a Parquet file of the same ids in another
    order, 40 of them missing: each pair is row ``i`` of both sides."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    X, Y = spaces
    source = FileStore(kind, tmp_path).make(X)
    rows = np.random.default_rng(3).permutation(N)[:N - 40]
    pq.write_table(pa.table({
        "id": rows * 3 + 1,
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(Y[rows].reshape(-1)), D)}),
        tmp_path / "new.parquet")
    got_x, got_y = read_pairs(source, str(tmp_path / "new.parquet"), id_column="id")
    np.testing.assert_array_equal(got_x, X[rows])
    np.testing.assert_array_equal(got_y, Y[rows])


@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_continue_encodes_no_earlier_row_again_without_a_cache(tmp_path, spaces, kind):
    """Without an encode cache, a ``--continue`` step reads the rows the earlier steps encoded
    back from the output (marked encoded for their text) instead of encoding them again: the
    encoder sees each text once over three steps, and the refitted map is the same."""
    X, Y = spaces
    store = FileStore(kind, tmp_path)
    source = store.make(X)
    out = _output(tmp_path, kind)
    seen = []
    enc = CallableEncoder(lookup_encoder(Y, seen), fingerprint="lookup-Y")
    text = store.options["text_field"]
    migrate_store(source, out, enc, 100, text_field=text, anyway=True)
    second = migrate_store(source, out, enc, 100, text_field=text, anyway=True,
                           continue_=True)
    assert second.n_encoded_rows == 200 and sum(seen) == 200  # not 100 + 200
    migrate_store(source, out, enc, 100, text_field=text, anyway=True, continue_=True)
    assert sum(seen) == N
    with open_live(out) as written:
        np.testing.assert_allclose(written.fetch([store.key(i) for i in range(N)]).vectors, Y,
                                   rtol=1e-5, atol=1e-6)
