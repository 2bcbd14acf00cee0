"""What keeps ``migrate``, ``--continue`` and the live Parquet store's reads bounded in the
store's size: vectors read by position from the vector column alone, the output scanned
without its vectors into compact arrays, and the map fitted on at most ``FIT_PAIRS`` pairs
(the same ones again when ``--continue`` refits the previous step's map). The memory itself is
measured by ``benchmarks/bench_scale.py``; here, with ``tracemalloc``, that an overlay is read
and a ``--continue`` step done without an array of all their rows' vectors."""

import hashlib
import tracemalloc
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from skalign._migrate import continuing as continuing_module
from skalign._migrate import fitting as fitting_module
from skalign._migrate import migration as migration_module
from skalign._migrate.counts import count_provenance
from skalign._migrate.fitting import fit_rows
from skalign._migrate.migration import migrate_store
from skalign._migrate.scan import ENCODED, STALE, TRANSLATED, all_ids, same_ids, scan_rows
from skalign._stores import open_live
from skalign._stores.address import parse_address
from skalign._stores.files import overlay as overlay_module
from skalign._stores.files.overlay import Overlay
from skalign._stores.live import encoded_mark, mark_state, translated_mark
from skalign._stores.parquet import live as parquet_live
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
    cap = fitting_module.FIT_PAIRS
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
    monkeypatch.setattr(fitting_module, "FIT_PAIRS", 40)
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


#: the new vectors' width in the memory tests
WIDE = 768


class WideEncoder(HashEncoder):
    fingerprint = "scale-wide-v1"

    def __call__(self, texts):
        return np.stack([np.resize(hashed(t), WIDE) for t in texts])


def _peak(fn):
    """``fn()`` and the most memory Python and numpy held at once during it (bytes)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_overlay_is_read_by_row_never_loaded_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(overlay_module, "CHUNK_ROWS", 256)
    monkeypatch.setattr(overlay_module, "COMPACT_SEGMENTS", 4)  # and one compaction, streamed
    n, dim = 8000, 256
    V = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    store = tmp_path / "s.npy"
    writer = Overlay(store, dim, {"rows": n})
    for part in np.array_split(np.random.default_rng(1).permutation(n), 5):
        writer.write(part, V[part], ["translated:m"] * len(part))
    assert len(writer._segments()) < 5  # compacted
    ask = np.random.default_rng(2).integers(0, n, 500)

    def read():
        state = Overlay(store, dim, {"rows": n}).refresh()
        return state, state.vectors[state.lookup(ask)], state.sq_norms, state.vectors[100:300]

    (state, got, sq, span), peak = _peak(read)
    assert np.array_equal(state.positions, np.arange(n)) and np.array_equal(got, V[ask])
    assert np.array_equal(span, V[100:300])
    assert np.allclose(sq, np.einsum("ij,ij->i", V, V), rtol=1e-5)
    assert peak < V.nbytes / 2, peak  # loading the vectors whole takes V.nbytes (8 MB)


def test_a_continue_step_holds_no_array_of_its_pairs(tmp_path, monkeypatch):
    # the fit's and the plan's samples made small, so that what is left is what grows with
    # the step: its pairs' old and new vectors (kept on disk) and the overlay's
    monkeypatch.setattr(fitting_module, "FIT_PAIRS", 100)
    monkeypatch.setattr(fitting_module, "PLAN_PAIRS", 100)
    monkeypatch.setattr(continuing_module, "ENCODE_ROWS", 256)
    monkeypatch.setattr(overlay_module, "CHUNK_ROWS", 256)
    monkeypatch.setattr(parquet_live, "CACHE_BYTES", 0)  # a small store's vectors are cached
    address, _ = _store(tmp_path / "s.parquet", 12000)
    out = str(tmp_path / "out.parquet")
    enc = CachedEncoder(WideEncoder())
    migrate_store(str(address.path), out, enc, 100, text_field="text", anyway=True,
                  batch_size=256)
    fit, before = migration_module.Migration._fit, []

    def fit_aside(self, *a, **k):
        # the plan's and the fit's own memory (a fixed ~35 MB on their capped samples,
        # whatever the step) is set aside: what is measured is what grows with the step
        before.append(tracemalloc.get_traced_memory()[1])
        try:
            return fit(self, *a, **k)
        finally:
            tracemalloc.reset_peak()

    monkeypatch.setattr(migration_module.Migration, "_fit", fit_aside)
    step, peak = _peak(lambda: migrate_store(str(address.path), out, enc, 10000,
                                             text_field="text", continue_=True,
                                             batch_size=256))
    peak = max([peak, *before])
    assert step.n_encoded == 10000 and len(before) == 1
    pairs = 10000 * WIDE * 4  # the step's new vectors alone: 31 MB
    assert peak < pairs * 0.75, (peak, pairs)  # holding them takes 1 x pairs, and more
    with open_live(parse_address(out), text_field="text") as store:
        state = store.overlay.refresh()
        texts = store.texts_at(state.positions)
        marked = np.array([m.startswith("encoded:") for m in state.marks])
        want = np.stack([np.resize(hashed(t), WIDE) for t in np.asarray(texts)[marked]])
        got = state.vectors[np.flatnonzero(marked)]
        assert marked.sum() == step.n_encoded_rows
        assert np.allclose(got / np.linalg.norm(got, axis=1, keepdims=True),
                           want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)


class TensorMemory:
    """The most bytes the CPU tensors torch makes inside a ``with`` block hold at once: a
    storage counts from its first tensor (a torch function's result) until its last one is
    freed. ``tracemalloc`` does not see torch's allocations; a function mode sees every torch
    function called from Python."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        memory = self
        self.live = self.peak = 0
        self.tensors = {}  # storage address -> [tensors alive, bytes]

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                memory._results(out)
                return out

        self.mode = Mode()

    def _results(self, out):
        if isinstance(out, torch.Tensor):
            if out.device.type == "cpu":
                self._seen(out)
        elif isinstance(out, (tuple, list)):
            for item in out:
                self._results(item)

    def _seen(self, t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in self.tensors:
            self.tensors[key] = [0, storage.nbytes()]
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self.tensors[key][0] += 1
        weakref.finalize(t, self._freed, key)

    def _freed(self, key):
        entry = self.tensors[key]
        entry[0] -= 1
        if not entry[0]:
            self.live -= entry[1]
            del self.tensors[key]

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _pairs(n, d_x, d_y, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_x)).astype(np.float32)
    Y = np.tanh(X @ rng.normal(size=(d_x, d_y)).astype(np.float32) / 2)
    return X, Y + 0.3 * rng.normal(size=Y.shape).astype(np.float32)


def test_the_ridge_search_holds_no_square_matrix_of_a_folds_pairs(monkeypatch):
    """The penalty search by held-out recall (the map ``migrate`` fits) on N pairs: a fold's
    N/5 held-out queries are ranked a block of them at a time, never in an (N/5)² matrix of
    similarities, and the search makes no extra copy of the pairs in float64."""
    from skalign import LinearAligner
    from skalign._affine import linear

    monkeypatch.setattr(linear, "QUERY_BLOCK", 2 ** 17, raising=False)
    n, d_x, d_y = 5000, 8, 12
    X, Y = _pairs(n, d_x, d_y, 0)
    with TensorMemory() as memory:
        fitted = LinearAligner(alphas=[1e-2, 1.0, 1e2], scoring="recall_retention").fit(X, Y)
    assert fitted.alpha_criterion_ == "recall_retention"
    assert np.ptp(fitted.cv_scores_) > 0  # the penalties were scored
    square = (n // 5) ** 2 * 8  # one fold's similarities in float64: 8 MB
    pairs = n * (d_x + d_y) * 8  # the pairs in float64: 0.8 MB
    assert memory.peak < square / 2, (memory.peak, square)
    assert memory.peak < 4 * pairs, (memory.peak, pairs)


def test_pricing_the_written_store_holds_no_float64_copy_of_its_pairs(monkeypatch):
    """``price_written`` on N pairs: the held-out check on its capped sample, the calibration
    fitted a block of rows at a time (its statistics: the values of the whole arrays)."""
    from skalign._migrate import calibration
    from skalign._migrate.heldout import _moments, _pad_direction, _unit

    monkeypatch.setattr(calibration, "CHECK_ROWS", 100)
    monkeypatch.setattr(calibration, "CAL_ROWS", 512, raising=False)
    n, d = 40000, 64
    T, Y = _pairs(n, d, d, 1)
    choice, peak = _peak(lambda: calibration.price_written(
        T, Y, 0.1, 10 * n, option=(calibration.MIXED, "moments", 0.98)))
    assert peak < T.nbytes / 2, (peak, T.nbytes)  # one float64 copy of T: 2 x T.nbytes
    cal = choice.calibration
    Yu, Tu = _unit(Y), _unit(T)
    mean, centre, spread = _moments(Tu, Yu)
    assert np.array_equal(cal.mean, mean) and np.array_equal(cal.centre, centre)
    assert cal.spread == spread
    assert cal.norm == np.linalg.norm(Y.astype(np.float64), axis=1).mean()
    np.testing.assert_allclose(cal.pad, _pad_direction(Yu, Tu), atol=1e-9)
    written = cal.apply(T[:1500])
    np.testing.assert_allclose(written, (cal.norm * cal.unit_rows(T[:1500])).astype(np.float32),
                               rtol=1e-6)
