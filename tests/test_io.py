"""skalign.io: skops model files with trusted types only, and streaming store translation."""

import os
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import skalign
import skalign._registry
import skalign._version
from skalign import (
    AnchorBootstrapper,
    InverseRelativeProjector,
    LinearAligner,
    ProcrustesAligner,
    UnpairedPool,
)
from skalign._stores import lance as _lance
from skalign._stores.pipeline.translate import open_reader
from skalign.datasets import load_docstring_embeddings
from skalign.exceptions import StoreError
from skalign.io import (
    ModelFileError,
    load,
    model_info,
    read_vectors,
    save,
    translate,
    trusted_types,
)
from skalign.utils import all_estimators

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def real():
    data = load_docstring_embeddings()
    A, B = data.embeddings["minilm_l6"], data.embeddings["mpnet_base"]
    model = ProcrustesAligner().fit(A[:300], B[:300])
    return A[300:600], B[300:600], model


def _listing(folder):
    """The folder's entries but the provenance stamps beside the outputs
    (``*.skalign.json``, tested in test_file_safety.py)."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(".skalign.json"))


# ------------------------------------------------------------------------------- model files
@pytest.mark.parametrize("make", [
    lambda: ProcrustesAligner(scale=True),
    lambda: LinearAligner(alpha=0.1),
    lambda: InverseRelativeProjector(n_subspaces=4, random_state=0),
    lambda: AnchorBootstrapper(n_anchors=30, max_rounds=3, random_state=0),
], ids=["procrustes", "linear", "irp", "bootstrap"])
def test_save_load_round_trip(tmp_path, real, make):
    A, B, _ = real
    est = make()
    kwargs = {}
    if isinstance(est, AnchorBootstrapper):
        kwargs["unpaired"] = UnpairedPool(X=A[:80], y=B[:80])
    est.fit(A[:40], B[:40], **kwargs)
    path = save(est, tmp_path / "m.skops")
    assert _listing(tmp_path) == ["m.skops"]  # no temporary left behind
    info = model_info(path)
    assert info["skalign_version"] == skalign.__version__
    assert (info["n_features_in"], info["n_features_out"]) == (384, 768)
    assert info["estimator_class"] == type(est).__name__
    back = load(path)
    assert type(back) is type(est)
    np.testing.assert_array_equal(back.transform(A[40:60]), est.transform(A[40:60]))


OLD_MODELS = Path(__file__).parent / "data" / "models_before_59"


@pytest.mark.parametrize("name", sorted(skalign._registry.ESTIMATOR_NAMES))
def test_model_files_written_before_the_modules_moved_load_bit_for_bit(name):
    """Files written at ddd22f1 name the estimator modules' old paths (``skalign._linear``);
    they load through the registry's table of moved modules with every fitted array bit for bit
    what ddd22f1's own ``load`` gave (``fitted.npz``), and transform as they did then (to the
    last bits a CPU's BLAS kernel may change: ``OPENBLAS_CORETYPE`` passes differ there)."""
    path = OLD_MODELS / f"{name}.skops"
    with zipfile.ZipFile(path) as archive:  # the fixture really names an old path
        assert '"skalign._' in archive.read("schema.json").decode()
        assert f'"{skalign._registry.PUBLIC[name]}"' not in archive.read("schema.json").decode()
    expected = np.load(OLD_MODELS / "expected.npz")
    model = load(path)
    assert type(model) is getattr(skalign, name)
    fitted = np.load(OLD_MODELS / "fitted.npz")
    attributes = [key for key in fitted.files if key.startswith(f"{name}.")]
    assert attributes
    for key in attributes:
        np.testing.assert_array_equal(getattr(model, key.partition(".")[2]), fitted[key])
    X = expected["X_views" if name == "OrthogonalEnsembleAligner" else "X"]
    np.testing.assert_allclose(model.transform(X), expected[name], rtol=1e-5, atol=1e-6)
    assert model_info(path)["estimator_class"] == name


def test_trusted_types_are_skalign_classes_only():
    names = trusted_types()
    for _, cls in all_estimators():
        assert f"{cls.__module__}.{cls.__qualname__}" in names
    assert all(n.startswith("skalign.") or n.startswith("numpy.") for n in names)


class Suspicious:
    """Not trusted: loading must refuse before instantiating it."""

    def __setstate__(self, state):  # pragma: no cover - must never run
        raise AssertionError("an untrusted type was instantiated")


def test_load_refuses_untrusted_types(tmp_path, real):
    import skops.io as sio

    path = tmp_path / "evil.skops"
    sio.dump({"format": "skalign-model", "estimator": Suspicious()}, path)
    with pytest.raises(ModelFileError, match=r"untrusted types .*Suspicious"):
        load(path)


def test_load_rejects_missing_foreign_and_non_skalign_files(tmp_path, real):
    import skops.io as sio

    with pytest.raises(ModelFileError, match="no such model file"):
        load(tmp_path / "missing.skops")
    np.save(tmp_path / "a.npy", np.zeros((2, 2)))
    with pytest.raises(ModelFileError, match="not a skops model file"):
        load(tmp_path / "a.npy")
    sio.dump(np.eye(2), tmp_path / "plain.skops")
    with pytest.raises(ModelFileError, match="not a skalign model"):
        load(tmp_path / "plain.skops")


def test_load_warns_on_version_mismatch(tmp_path, real, monkeypatch):
    path = save(real[2], tmp_path / "m.skops")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(path)  # same version: silent
    monkeypatch.setattr(skalign._version, "__version__", "9.9.9")
    with pytest.warns(UserWarning, match=r"saved by skalign .* loaded by skalign 9\.9\.9"):
        load(path)


def test_save_needs_a_fitted_estimator(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        save(LinearAligner(), tmp_path / "m.skops")
    assert _listing(tmp_path) == []


# ------------------------------------------------------------------------------------ stores
def _write_shards(folder, X, n_shards=3, list_type=None, row_group_size=40):
    folder.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(X)), n_shards)):
        vec = pa.array(list(X[rows].astype(np.float64)), type=list_type)
        table = pa.table({"doc_id": [f"doc{j}" for j in rows], "emb": vec,
                          "row": pa.array(rows, pa.int64())})
        pq.write_table(table, folder / f"shard-{i}.parquet", row_group_size=row_group_size)


def _vectors(table, column):
    return np.stack(table[column].to_numpy(zero_copy_only=False)).astype(np.float32)


def test_translate_npy_matches_transform(tmp_path, real):
    X, _, model = real
    np.save(tmp_path / "x.npy", X.astype(np.float16))
    n = translate(model, tmp_path / "x.npy", tmp_path / "out.npy", batch_size=64)
    out = np.load(tmp_path / "out.npy")
    assert n == len(X) and out.dtype == np.float32 and out.shape == (len(X), 768)
    np.testing.assert_allclose(out, model.transform(X.astype(np.float16)), atol=1e-6)
    assert _listing(tmp_path) == ["out.npy", "x.npy"]


def test_npy_reader_windows_are_bounded(tmp_path):
    X = np.arange(1000 * 8, dtype=np.float32).reshape(1000, 8)
    np.save(tmp_path / "x.npy", X)
    sizes, parts = [], []
    for vectors, rb, shard in open_reader(tmp_path / "x.npy").batches(128):
        assert isinstance(vectors, np.memmap) and rb is None and shard is None
        sizes.append(len(vectors))
        parts.append(np.array(vectors))
    assert max(sizes) == 128 and sum(sizes) == 1000
    np.testing.assert_array_equal(np.concatenate(parts), X)


def test_parquet_reader_reads_one_row_group_at_a_time(tmp_path):
    """Batches never span row groups (pyarrow, reading a whole file, buffers it ahead: 1.5 GB
    for a million 384-d rows), keep their rows' other columns, and a resume from a committed
    row count on any of those boundaries skips exactly the rows before it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)
    table = pa.table({"id": np.arange(1000) * 7,
                      "emb": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 4)})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=300)
    reader = open_reader(tmp_path / "x.parquet")
    got = list(reader.batches(128))
    assert [len(v) for v, _, _ in got] == [128, 128, 44] * 3 + [100]
    np.testing.assert_array_equal(np.concatenate([v for v, _, _ in got]), X)
    assert [i for _, rb, _ in got for i in rb.column(0).to_pylist()] == list(range(0, 7000, 7))
    resumed = list(reader.batches(128, start=556))  # 300 + 256: inside the second row group
    np.testing.assert_array_equal(np.concatenate([v for v, _, _ in resumed]), X[556:])


def test_resumed_parquet_reader_leaves_earlier_row_groups_unread(tmp_path, monkeypatch):
    """A resume reads from the row group holding its first row: the row groups before it are
    skipped by their row counts, not decoded and dropped (that made a rerun's time grow with
    the rows already done)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)
    table = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 4)})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=300)
    reader = open_reader(tmp_path / "x.parquet")
    full = list(reader.batches(128))
    read = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self, *args, row_groups=None, **kwargs):
        read.extend(row_groups)
        return iter_batches(self, *args, row_groups=row_groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    for k in range(len(full)):
        start = sum(len(v) for v, _, _ in full[:k])
        read.clear()
        resumed = list(reader.batches(128, start=start))
        assert [len(v) for v, _, _ in resumed] == [len(v) for v, _, _ in full[k:]]
        np.testing.assert_array_equal(np.concatenate([v for v, _, _ in resumed]), X[start:])
        assert read == list(range(start // 300, 4))


@pytest.mark.parametrize("window", [8192, 50])
def test_resumed_lance_reader_starts_at_its_row(tmp_path, monkeypatch, window):
    """Batches of a LanceDB table run across its fragments (read in windows of at most
    ``LANCE_WINDOW_ROWS`` rows, here also fewer than a batch), and a resume from a committed row
    count reads from that row on: the same rows, in the same batches, as a read from row 0."""
    pa = pytest.importorskip("pyarrow")
    lancedb = pytest.importorskip("lancedb")
    monkeypatch.setattr(_lance, "LANCE_WINDOW_ROWS", window)
    X = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)

    def part(lo, hi):
        return pa.table({"id": np.arange(lo, hi) * 7, "emb": pa.FixedSizeListArray.from_arrays(
            pa.array(X[lo:hi].reshape(-1)), 4)})

    db = lancedb.connect(tmp_path / "db")
    t = db.create_table("x", part(0, 300))
    for lo in (300, 650):  # three fragments: 300, 350 and 350 rows
        t.add(part(lo, lo + 350))
    reader = open_reader(tmp_path / "db" / "x.lance")
    full = list(reader.batches(128))
    assert [len(v) for v, _, _ in full] == [128] * 7 + [104]
    np.testing.assert_array_equal(np.concatenate([v for v, _, _ in full]), X)
    assert [rb.column("id").to_pylist() for _, rb, _ in full] == [
        list(range(lo * 7, min(lo + 128, 1000) * 7, 7)) for lo in range(0, 1000, 128)]
    for k in range(1, len(full)):
        start = 128 * k
        resumed = list(reader.batches(128, start=start))
        assert [len(v) for v, _, _ in resumed] == [len(v) for v, _, _ in full[k:]]
        np.testing.assert_array_equal(np.concatenate([v for v, _, _ in resumed]), X[start:])
        assert resumed[0][1].column("id")[0].as_py() == start * 7


def test_transform_is_called_batch_by_batch(tmp_path, real):
    X, _, model = real

    class Spy(ProcrustesAligner):
        calls = []

        def transform(self, X):
            Spy.calls.append(len(X))
            return super().transform(X)

    spy = Spy()
    spy.__dict__.update(model.__dict__)
    np.save(tmp_path / "x.npy", X)
    translate(spy, tmp_path / "x.npy", tmp_path / "out.npy", batch_size=50)
    # the batches, then one call re-translating the rows sampled for the verification
    *stream, verify = Spy.calls
    assert max(stream) == 50 and sum(stream) == len(X)
    # eight sampled rows of each of at most four batches spread over the store
    assert verify % 8 == 0 and 8 <= verify <= 32 and -(-len(X) // 50) > 4, verify


def test_parquet_shards_keep_ids_and_columns(tmp_path, real):
    X, _, model = real
    _write_shards(tmp_path / "in", X)
    translate(model, tmp_path / "in", tmp_path / "out", batch_size=32)
    assert _listing(tmp_path / "out") == ["shard-0.parquet", "shard-1.parquet", "shard-2.parquet"]
    table = pq.read_table(tmp_path / "out")
    assert table.column_names == ["doc_id", "emb", "row"]
    assert table.schema.field("emb").type == pa.list_(pa.float32(), 768)
    rows = np.asarray(table["row"])
    assert table["doc_id"].to_pylist() == [f"doc{j}" for j in rows]
    np.testing.assert_allclose(_vectors(table, "emb"), model.transform(X)[rows], atol=1e-6)


def test_parquet_to_lance_to_npy(tmp_path, real):
    lancedb = pytest.importorskip("lancedb")
    X, _, model = real
    _write_shards(tmp_path / "in", X, list_type=pa.list_(pa.float64(), 384))
    translate(model, tmp_path / "in", tmp_path / "db" / "docs.lance", batch_size=100)
    table = lancedb.connect(tmp_path / "db").open_table("docs")
    assert table.count_rows() == len(X)
    assert _listing(tmp_path / "db") == ["docs.lance"]
    arrow = table.to_arrow()
    rows = np.asarray(arrow["row"])
    np.testing.assert_allclose(_vectors(arrow, "emb"), model.transform(X)[rows], atol=1e-6)
    # the translated table is a working vector index
    hit = table.search(model.transform(X[:1])[0]).limit(1).to_arrow()
    assert hit["row"].to_pylist() == [0]
    # and a LanceDB table reads back as vectors (here: translate the target space back)
    assert read_vectors(tmp_path / "db" / "docs.lance").shape == (len(X), 768)


def test_npy_to_table_gets_row_ids(tmp_path, real):
    X, _, model = real
    np.save(tmp_path / "x.npy", X)
    translate(model, tmp_path / "x.npy", tmp_path / "out.parquet", column="vec", batch_size=64)
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == ["id", "vec"]
    np.testing.assert_array_equal(np.asarray(table["id"]), np.arange(len(X)))
    np.testing.assert_allclose(_vectors(table, "vec"), model.transform(X), atol=1e-6)


def test_existing_output_needs_replace_and_is_kept_as_backup(tmp_path, real):
    from skalign.io import restore

    X, _, model = real
    np.save(tmp_path / "x.npy", X[:10])
    _write_shards(tmp_path / "in", X[:10], n_shards=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.parquet").write_bytes(b"old")
    with pytest.raises(StoreError, match=r"out: OUTPUT already exists.*--replace"):
        translate(model, tmp_path / "in", tmp_path / "out")
    assert _listing(tmp_path / "out") == ["stale.parquet"]
    n = translate(model, tmp_path / "in", tmp_path / "out", replace=True)
    assert n == 10 and n.backup == str(tmp_path / "out-skalign-backup")
    assert _listing(tmp_path / "out") == ["shard-0.parquet"]
    assert _listing(tmp_path) == ["in", "out", "out-skalign-backup", "x.npy"]
    assert _listing(tmp_path / "out-skalign-backup") == ["stale.parquet"]
    restore(tmp_path / "out")  # swaps: the old output back, the translation as the backup
    assert _listing(tmp_path / "out") == ["stale.parquet"]
    assert _listing(tmp_path / "out-skalign-backup") == ["shard-0.parquet"]


def test_replace_in_place_keeps_the_source_as_backup(tmp_path, real):
    from skalign.io import restore

    X, _, model = real
    np.save(tmp_path / "x.npy", X[:20])
    with pytest.raises(StoreError, match="OUTPUT is the same as INPUT.*--replace"):
        translate(model, tmp_path / "x.npy", tmp_path / "x.npy")
    translate(model, tmp_path / "x.npy", tmp_path / "x.npy", replace=True, batch_size=8)
    assert _listing(tmp_path) == ["x-skalign-backup.npy", "x.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "x-skalign-backup.npy"), X[:20])
    np.testing.assert_allclose(np.load(tmp_path / "x.npy"), model.transform(X[:20]), atol=1e-5)
    restore(tmp_path / "x.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), X[:20])


@pytest.mark.parametrize("case, match", [
    ("missing", "no such file"),
    ("wrong_column", r"no column 'nope'.*--column"),
    ("not_vectors", r"column 'doc_id' holds string, not vectors"),
    ("strings_in_lists", r"holds list<.*string>, not vectors"),
    ("ragged", r"ragged .*same length"),
    ("nulls", r"missing \(null\) vectors"),
    ("two_vector_columns", r"several vector columns .*--column"),
    ("dimension", r"vectors have 5 dimensions but the model translates 384-d"),
    ("not_npy", "not a readable .npy"),
    ("3d", "expected a 2-D array"),
])
def test_store_errors_leave_nothing_behind(tmp_path, real, case, match):
    X, _, model = real
    src = tmp_path / "src"
    src.mkdir()
    column = None
    if case == "missing":
        path = src / "absent.npy"
    elif case in ("wrong_column", "not_vectors"):
        _write_shards(src / "in", X[:20])
        path, column = src / "in", ("nope" if case == "wrong_column" else "doc_id")
    elif case == "strings_in_lists":
        path = src / "s.parquet"
        pq.write_table(pa.table({"emb": [["a", "b"]] * 3}), path)
        column = "emb"
    elif case == "ragged":  # the bad row sits in the last shard: some output was already written
        _write_shards(src / "in", X[:30])
        bad = pa.table({"doc_id": ["x"], "emb": [[1.0, 2.0]], "row": pa.array([99], pa.int64())})
        pq.write_table(bad, src / "in" / "shard-9.parquet")
        path = src / "in"
    elif case == "nulls":
        path = src / "n.parquet"
        vectors = pa.array([list(X[0]), None], pa.list_(pa.float32()))
        pq.write_table(pa.table({"emb": vectors}), path)
    elif case == "two_vector_columns":
        path = src / "t.parquet"
        pq.write_table(pa.table({"a": [list(X[0])], "b": [list(X[1])]}), path)
    elif case == "dimension":
        path = src / "d.npy"
        np.save(path, np.ones((4, 5), dtype=np.float32))
    elif case == "not_npy":
        path = src / "bad.npy"
        path.write_bytes(b"definitely not numpy")
    else:
        path = src / "c.npy"
        np.save(path, np.ones((2, 3, 4)))
    before = _listing(tmp_path)
    for out in ["out.npy", "out", "db/t.lance", "o.parquet"]:
        with pytest.raises(StoreError, match=match):
            translate(model, path, tmp_path / out, column=column, batch_size=8)
        assert _listing(tmp_path) == before, out


def test_write_behind_encodes_ahead_but_writes_in_order_and_stops_at_a_failure():
    """Batches encoded in parallel are written in submission order; once one batch fails
    (in its encoding or its write), no later batch is written and the first error is raised."""
    import threading
    import time as _time

    from skalign._stores.base import ENCODE_DEPTH
    from skalign._stores.pipeline.streaming import WriteBehind as _WriteBehind

    assert ENCODE_DEPTH >= 2
    written, running, most = [], [0], [0]
    lock = threading.Lock()

    def encode(k, *rest):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        _time.sleep(0.05 if k % 2 == 0 else 0.0)  # later batches finish encoding first
        with lock:
            running[0] -= 1
        if k == 5:
            raise ValueError("batch 5 cannot be encoded")
        return f"unit {k}"

    def write(unit, *rest):
        written.append(unit)

    behind = _WriteBehind(write, True, encode)
    assert behind.depth == ENCODE_DEPTH
    for k in range(4):
        behind.submit(k, None, None, k)
    behind.wait()
    assert written == [f"unit {k}" for k in range(4)]
    assert most[0] == ENCODE_DEPTH  # batches were encoded side by side
    with pytest.raises(ValueError, match="batch 5"):
        for k in range(4, 9):
            behind.submit(k, None, None, k)
        behind.wait()
    behind.close()
    assert written == [f"unit {k}" for k in range(5)]  # nothing after the failed batch
    plain = []
    inline = _WriteBehind(lambda unit, *rest: plain.append(unit), False, encode)
    inline.submit(2, None, None, 2)
    assert plain == ["unit 2"] and inline.depth == 1


def test_a_skops_payload_with_a_scikit_learn_estimator_is_refused(tmp_path, capsys):
    """scikit-learn's types load as trusted skops types; a payload in skalign's format holding
    one is still not a model that translates: one line, exit 2, no traceback."""
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression

    from skalign.cli import main
    from skalign.io import _FORMAT, _FORMAT_VERSION

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 8)).astype(np.float32)
    clf = LogisticRegression().fit(X, np.arange(40) % 2)
    sio.dump({"format": _FORMAT, "format_version": _FORMAT_VERSION, "skalign_version": "0",
              "estimator_class": "ProcrustesAligner", "n_features_in": 8, "n_features_out": 8,
              "estimator": clf}, tmp_path / "lr.skops")
    with pytest.raises(ModelFileError, match="holds a LogisticRegression, not a skalign"):
        load(tmp_path / "lr.skops")
    np.save(tmp_path / "x.npy", X)
    assert main(["translate", str(tmp_path / "lr.skops"), str(tmp_path / "x.npy"),
                 str(tmp_path / "out.npy")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "LogisticRegression" in err
    with pytest.raises(TypeError, match="save writes skalign estimators"):
        save(clf, tmp_path / "lr2.skops")
