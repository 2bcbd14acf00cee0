"""What keeps ``migrate``, ``--continue`` and the live Parquet store's reads bounded in the
store's size: vectors read by position from the vector column alone, the output scanned
without its vectors into compact arrays, and the map fitted on at most ``FIT_PAIRS`` pairs
(the same ones again when ``--continue`` refits the previous step's map). The memory itself is
measured by ``benchmarks/bench_scale.py``."""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skalign._migrate import migration as migration_module
from skalign._migrate.counts import count_provenance
from skalign._migrate.migration import fit_rows, migrate_store
from skalign._migrate.scan import ENCODED, STALE, TRANSLATED, all_ids, same_ids, scan_rows
from skalign._stores import open_live
from skalign._stores.address import parse_address
from skalign._stores.live import encoded_mark, mark_state, translated_mark
from skalign._stores.parquet.live import ParquetLive
from skalign.encoders import CachedEncoder

D_OLD, D_NEW = 12, 16


def _table(lo, n, rng):
    H = rng.normal(size=(n, 4)).astype(np.float32)
    X = np.tanh(H @ rng.normal(size=(4, D_OLD)).astype(np.float32) + 0.05 * rng.normal(
        size=(n, D_OLD)).astype(np.float32))
    ids = np.arange(lo, lo + n)
    return pa.table({"id": ids, "text": [f"t{i}" for i in ids],
                     "vector": pa.FixedSizeListArray.from_arrays(X.ravel(), D_OLD)}), X


def _store(path, n, shards=1):
    rng = np.random.default_rng(3)
    parts, lo = [], 0
    if shards > 1:
        path.mkdir()
    for s in range(shards):
        m = n // shards if s < shards - 1 else n - lo
        table, X = _table(lo, m, rng)
        target = path / f"part-{s}.parquet" if shards > 1 else path
        pq.write_table(table, target, row_group_size=37)
        parts.append(X)
        lo += m
    return parse_address(str(path)), np.concatenate(parts)


def hashed(text):
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).normal(size=D_NEW).astype(np.float32)


class HashEncoder:
    fingerprint = "scale-hash-v1"

    def __call__(self, texts):
        return np.stack([hashed(t) for t in texts])


@pytest.mark.parametrize("shards", [1, 3])
def test_vectors_by_position_equal_the_stored_rows(tmp_path, shards):
    address, X = _store(tmp_path / ("s.parquet" if shards == 1 else "s"), 500, shards)
    with open_live(address) as store:
        rng = np.random.default_rng(0)
        for pos in (rng.integers(0, 500, 200), np.array([499, 0, 0, 250, 36, 37]),
                    np.arange(500)[::-1], np.zeros(0, np.int64)):
            got = store._take_vectors(np.asarray(pos, dtype=np.int64))
            assert got.dtype == np.float32 and np.array_equal(got, X[pos])


def test_fit_rows_are_a_fixed_sample_of_at_most_fit_pairs():
    cap = migration_module.FIT_PAIRS
    assert np.array_equal(fit_rows(cap, 0), np.arange(cap))
    big = fit_rows(cap * 3 + 1, 5)
    assert len(big) == cap == len(np.unique(big)) and np.all(np.diff(big) > 0)
    assert big.max() <= cap * 3 and np.array_equal(big, fit_rows(cap * 3 + 1, 5))
    assert not np.array_equal(big, fit_rows(cap * 3 + 1, 6))


def test_the_scan_reads_no_vector_and_holds_compact_arrays(tmp_path, monkeypatch):
    address, _ = _store(tmp_path / "s.parquet", 300)
    with open_live(address, text_field="text") as store:
        ids = store.ids()
        texts = store.fetch(ids[:80], text_field="text").texts
        store.write_back(ids[:60], np.ones((60, D_OLD), np.float32),
                         [encoded_mark("a", "text", t) for t in texts[:60]])
        store.write_back(ids[60:70], np.ones((10, D_OLD), np.float32),
                         [encoded_mark("b", "text", t) for t in texts[60:70]])
        store.write_back(ids[70:80], np.ones((10, D_OLD), np.float32),
                         [encoded_mark("a", "text", "another text")] * 10)
        store.write_back(ids[80:90], np.ones((10, D_OLD), np.float32),
                         [translated_mark("m")] * 10)
    with open_live(address, text_field="text") as store:
        every = store.fetch(store.ids(), text_field="text")
        expected = [mark_state(p, "a", "text", t) for p, t in zip(every.provenance, every.texts)]
        monkeypatch.setattr(ParquetLive, "_take_vectors", lambda *a: pytest.fail("vectors"))
        ids = all_ids(store)
        assert isinstance(ids, np.ndarray) and ids.dtype == np.int64
        rows = scan_rows(store, ids, "text", "text")
    assert rows.state.dtype == np.int8 and rows.provenance.codes.dtype == np.int32
    assert len(rows.provenance.values) == 60 + 10 + 1 + 1  # distinct values only
    names = {ENCODED: "encoded", STALE: "stale", TRANSLATED: "translated"}
    assert [names[s] for s in rows.states("a")] == expected
    assert [rows.provenance[i] for i in range(300)] == every.provenance
    assert same_ids(ids, list(reversed(ids.tolist()))) and not same_ids(ids, ids[:-1])
    assert not same_ids(ids, np.append(ids[:-1], 10**6))


def test_continue_fits_on_a_capped_sample_and_keeps_every_encoded_row(tmp_path, monkeypatch):
    monkeypatch.setattr(migration_module, "FIT_PAIRS", 40)
    address, _ = _store(tmp_path / "s.parquet", 400)
    out = str(tmp_path / "out.parquet")
    enc = CachedEncoder(HashEncoder())
    first = migrate_store(str(address.path), out, enc, 60, text_field="text", anyway=True)
    steps = [migrate_store(str(address.path), out, enc, 60, text_field="text", continue_=True)
             for _ in range(2)]
    assert first.estimate["store_size"] == 400
    assert [s.n_encoded_rows for s in steps][-1] == (180 if first.n_encoded_rows else 120)
    counts = count_provenance(out)
    assert counts["encoded"] == steps[-1].n_encoded_rows and counts["stale"] == 0
    with open_live(parse_address(out), text_field="text") as store:
        rows = store.fetch(store.ids(), text_field="text")
        hit = [i for i, p in enumerate(rows.provenance) if p and p.startswith("encoded:")]
        assert len(hit) == counts["encoded"]
        want = np.stack([hashed(rows.texts[i]) for i in hit])
        got = rows.vectors[hit]
        cos = np.sum(want * got, 1) / np.linalg.norm(want, axis=1) / np.linalg.norm(got, axis=1)
        assert np.allclose(cos, 1.0, atol=1e-5)  # each encoded row holds its text's vector
