"""The fingerprint the benchmark's kill study compares stores by (``store_backends.digest``):
the same rows give the same digest however they were split into batches or row groups, and
one changed value anywhere changes it."""

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from store_backends import Npy, Parquet, _Digest  # noqa: E402


def _write(path, X, docs, row_group_size):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), X.shape[1])
    pq.write_table(pa.table({"id": np.arange(len(X)) * 3 + 1, "doc": docs, "emb": emb}), path,
                   row_group_size=row_group_size)
    return str(path)


def test_parquet_digest_ignores_row_groups_and_sees_one_change(tmp_path):
    X = np.random.default_rng(0).standard_normal((1000, 6)).astype(np.float32)
    docs = [f"document {i}" for i in range(1000)]
    store = Parquet()
    base = store.digest(_write(tmp_path / "a.parquet", X, docs, 100))
    assert base.startswith("1000:")
    assert store.digest(_write(tmp_path / "b.parquet", X, docs, 333)) == base
    Y = X.copy()
    Y[777, 4] = np.nextafter(Y[777, 4], np.float32(np.inf))  # one ulp, one value
    assert store.digest(_write(tmp_path / "c.parquet", Y, docs, 100)) != base
    assert store.digest(_write(tmp_path / "d.parquet", X, docs[:5] + ["x"] + docs[6:],
                               100)) != base
    # the same content as the engine-independent reader sees it
    ids, V, fields = store.read(str(tmp_path / "a.parquet"))
    d = _Digest()
    d.update(ids, V, [fields])
    assert d.hexdigest() == base


def test_npy_digest_sees_order_and_length(tmp_path):
    X = np.random.default_rng(1).standard_normal((70_000, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", X)
    np.save(tmp_path / "b.npy", X[::-1])
    np.save(tmp_path / "c.npy", X[:-1])
    got = {Npy().digest(str(tmp_path / f"{n}.npy")) for n in "abc"}
    assert len(got) == 3
