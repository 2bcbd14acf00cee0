"""skalign's index beside a file store without one (``.npy``, Parquet): candidates from the
index equal an exact scan's on clustered data (every query's own row found first, the scores
exact), encoded rows still rank by their encoded vectors, a store changed since the index was
built is detected (rebuilt, or refused when no rebuild is allowed), the index never leaves the
store's folder and never replaces a file skalign did not write, and a forged or pickled file at
its name is refused, never loaded."""

import json
import os
import pickle
import re
import shutil
import tempfile

import numpy as np
import pytest
from test_search import FileStore

from skalign._stores import open_live
from skalign._stores.files import ann
from skalign._stores.live import similarity
from skalign.cli import main
from skalign.exceptions import StoreError
from skalign.search import Searcher

N, D, CLUSTERS = 4000, 16, 40


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def data():
    """Clustered rows ``X``, the new encoder's vectors ``Y`` of their texts, and queries that
    are rows of ``X`` (each query's own row is its exact best)."""
    rng = np.random.default_rng(3)
    centres = 4 * rng.normal(size=(CLUSTERS, D))
    X = (centres[rng.integers(0, CLUSTERS, N)] + rng.normal(size=(N, D))).astype(np.float32)
    Y = (X + 0.3 * rng.normal(size=(N, D))).astype(np.float32)
    asked = rng.choice(N, 60, replace=False)
    return X, Y, asked


def lookup(Y):
    def encode(texts):
        return Y[[int(t.split()[1]) for t in texts]]

    encode.fingerprint = "lookup-Y"
    return encode


def exact_top(X, Q, metric, k):
    S = similarity(Q, X, metric)
    return np.argsort(-S, axis=1, kind="stable")[:, :k], S


@pytest.mark.parametrize("kind", ["npy", "parquet", "parquet-dir"])
@pytest.mark.parametrize("metric", ["cosine", "l2", "ip"])
def test_index_candidates_match_an_exact_scan(tmp_path, data, kind, metric):
    """The index's top-10 holds the exact top-10 (recall 1 on these clusters, each query's own
    row first under cosine and L2), each score the exact similarity of its row, and it reads
    a small share of the rows: the lists probed, not the store."""
    pytest.importorskip("pyarrow")
    X, _, asked = data
    maker = FileStore(kind, tmp_path)
    address = maker.make(X, metric=metric)
    Q = X[asked]
    truth, S = exact_top(X, Q, metric, 10)
    with open_live(address, **maker.options) as store:
        assert ann.use_index(store, "build") == "built"
        # 24 of 127 lists probed for each query: a fifth of the rows scored, not all
        assert isinstance(store.ann, ann.IvfIndex) and (store.ann.lists, store.ann.probes) \
            == (127, 24)
        ids, scores = store.top_k(Q, 10)
    pos = [[maker.key(i) for i in row] for row in truth]
    found = [[(i - 1) // 3 if kind != "npy" else i for i in row] for row in ids]
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth.tolist())])
    assert recall >= 0.99, recall
    if metric != "ip":
        assert [row[0] for row in ids] == [row[0] for row in pos]
    for q, (f, s) in enumerate(zip(found, scores)):
        np.testing.assert_allclose(s, S[q, f], rtol=1e-5, atol=1e-3)


def test_searcher_results_with_the_index_equal_the_exact_ones(tmp_path, data):
    """Searcher(index="build") gives the exact search's results; written-back rows rank by
    their encoded vectors through the index; a later searcher loads the current index."""
    X, Y, asked = data
    maker = FileStore("parquet", tmp_path)
    address = maker.make(X)
    enc = lookup(Y)
    with Searcher(address, enc, k_candidates=50, index="exact", write_back=False,
                  **maker.options) as s:
        assert s.index_ == "exact"
        exact = s.search(Y[asked], k=5)
    with Searcher(address, enc, k_candidates=50, index="build", **maker.options) as s:
        assert s.index_ == "built"
        found = s.search(Y[asked], k=5)
    assert found.ids == exact.ids
    for a, b in zip(found.scores, exact.scores):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert s.stats.written > 0
    keys = [maker.key(i) for i in (0, 7, N - 1, 3, 7)]
    with open_live(address, **maker.options) as store:
        plain = store.fetch(keys)
        assert ann.use_index(store, "existing") == "loaded"
        # rows read through the index: the same vectors (the store's), texts and provenance
        through = store.fetch(keys)
        np.testing.assert_array_equal(through.vectors, plain.vectors)
        assert (through.texts, through.provenance) == (plain.texts, plain.provenance)
        # the written rows hold Y: a query equal to a written row's Y finds that row first
        written = [i for i in range(N) if store.fetch([maker.key(i)]).provenance[0]][:20]
        ids, scores = store.top_k(Y[written], 1)
        assert [row[0] for row in ids] == [maker.key(i) for i in written]
        np.testing.assert_allclose([sc[0] for sc in scores], 1, rtol=1e-5)


def test_auto_uses_the_index_from_the_threshold_on(tmp_path, data, monkeypatch):
    X, Y, _ = data
    maker = FileStore("npy", tmp_path)
    address = maker.make(X)
    with Searcher(address, lookup(Y), **maker.options) as s:
        assert s.index_ == "exact" and not os.path.exists(address + ann.INDEX_SUFFIX)
    monkeypatch.setattr(ann, "INDEX_MIN_ROWS", N)
    with Searcher(address, lookup(Y), **maker.options) as s:
        assert s.index_ == "built"
    with Searcher(address, lookup(Y), **maker.options) as s:
        assert s.index_ == "loaded"


@pytest.mark.parametrize("change", ["rewritten", "same size and time"])
def test_a_stale_index_is_rebuilt_or_refused(tmp_path, data, monkeypatch, change):
    """A store changed since its index was built: ``existing`` refuses it with a message
    naming the way out, ``auto`` rebuilds it and then ranks the new rows."""
    X, _, asked = data
    monkeypatch.setattr(ann, "INDEX_MIN_ROWS", 1)
    maker = FileStore("npy", tmp_path)
    address = maker.make(X)
    with open_live(address) as store:
        assert ann.use_index(store, "auto") == "built"
    X2 = X[::-1].copy()
    if change == "rewritten":
        np.save(address, X2)
    else:  # the same file, rewritten in place, its size and times put back
        st = os.stat(address)
        with open(address, "r+b") as f:
            f.seek(os.path.getsize(address) - X2.nbytes)
            f.write(X2.tobytes())
        os.utime(address, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(address).st_size == st.st_size
    with open_live(address) as store:
        with pytest.raises(ann.IndexStaleError, match="another state of the store.*"
                           r"index='build' \(skalign search --index build\)"):
            ann.use_index(store, "existing")
        assert ann.use_index(store, "build") == "rebuilt"
        ids, _ = store.top_k(X2[asked], 1)
    assert [row[0] for row in ids] == list(asked)
    with open_live(address) as store:
        assert ann.use_index(store, "existing") == "loaded"


@pytest.mark.parametrize("n", [1, 3, 17])
def test_tiny_stores_build_an_index_that_finds_every_row(tmp_path, n):
    X = np.random.default_rng(n).normal(size=(n, D)).astype(np.float32)
    address = FileStore("npy", tmp_path).make(X)
    with open_live(address) as store:
        assert ann.use_index(store, "build") == "built" and store.ann.lists <= n
        ids, _ = store.top_k(X, n)
    assert [row[0] for row in ids] == list(range(n))
    assert all(sorted(row) == list(range(n)) for row in ids)


def test_a_build_waits_for_another_and_uses_its_index(tmp_path, data, monkeypatch):
    """While another holds the folder's lock (building), a searcher waits, then loads the
    index the other built instead of building it again."""
    import fcntl
    import threading

    X, _, _ = data
    monkeypatch.setattr(ann, "INDEX_MIN_ROWS", 1)
    address = FileStore("npy", tmp_path).make(X)
    path = ann.index_path(address, "cosine", None)
    path.parent.mkdir()
    lock = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    got = {}
    with open_live(address) as store, open_live(address) as other:
        waiting = threading.Thread(target=lambda: got.update(how=ann.use_index(store, "auto")))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not path.exists()  # it waits for the lock
        ann.build_index(other, path).close()  # the other process's build
        os.close(lock)
        waiting.join(60)
        assert got == {"how": "loaded"}
        ids, _ = store.top_k(X[:5], 1)
    assert [row[0] for row in ids] == [0, 1, 2, 3, 4]


def test_existing_refuses_a_missing_index(tmp_path, data):
    X, _, _ = data
    address = FileStore("npy", tmp_path).make(X)
    with open_live(address) as store:
        with pytest.raises(StoreError, match="no index beside the store"):
            ann.use_index(store, "existing")


@pytest.mark.parametrize("name", ["..npy", "a b\nc.npy", "-x.npy", "é" * 60 + ".npy"])
def test_hostile_store_names_keep_the_index_in_the_store_folder(tmp_path, data, name):
    X, _, _ = data
    folder = tmp_path / "stores"
    folder.mkdir()
    np.save(folder / name, X)
    before = sorted(p.name for p in tmp_path.iterdir())
    with open_live(str(folder / name)) as store:
        assert ann.use_index(store, "build") == "built"
        where = store.ann.path
    assert where.parent == folder / (name + ann.INDEX_SUFFIX)
    assert re.fullmatch(r"ivf-cosine-[0-9a-f]{16}\.bin", where.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert sorted(p.name for p in folder.iterdir()) == sorted([name, name + ann.INDEX_SUFFIX])
    assert sorted(p.name for p in where.parent.iterdir()) == [".lock", where.name]


def test_hostile_column_name_stays_a_digest(tmp_path, data):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    X, _, _ = data
    col = "../../" + "x" * 300
    pq.write_table(pa.table({col: pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)),
                                                                    D)}),
                   tmp_path / "s.parquet")
    with open_live(str(tmp_path / "s.parquet"), column=col) as store:
        ann.use_index(store, "build")
        assert store.ann.path.parent == tmp_path / ("s.parquet" + ann.INDEX_SUFFIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.parquet", "s.parquet.skalign-index",
                                                          "tmp"]


def test_the_index_never_replaces_a_users_file(tmp_path, data):
    """A file skalign did not write at the index's name, a link or a file at the folder's
    name: refused in every mode, left as it was."""
    X, _, _ = data
    address = FileStore("npy", tmp_path).make(X)
    with open_live(address) as store:
        path = ann.index_path(address, "cosine", None)
        path.parent.mkdir()
        path.write_bytes(b"my own notes\n")
        for mode in ("build", "existing"):
            with pytest.raises(StoreError, match="never overwritten|did not write"):
                ann.use_index(store, mode)
        assert path.read_bytes() == b"my own notes\n"
        # no temporary file left
        assert sorted(os.listdir(path.parent)) == sorted([path.name, ".lock"])
        shutil.rmtree(path.parent)
        (tmp_path / "elsewhere").mkdir()
        os.symlink(tmp_path / "elsewhere", path.parent)
        with pytest.raises(StoreError, match="something else is there"):
            ann.use_index(store, "build")
        assert os.listdir(tmp_path / "elsewhere") == []


def _forge(path, edit):
    """Rewrite the header of the index file ``path`` by ``edit(header)``, its length kept (its
    free ``built`` text cut or padded) so that the arrays stay where they were."""
    data = path.read_bytes()
    n = len(ann._MAGIC)
    size = int.from_bytes(data[n:n + 8], "little")
    header = json.loads(data[n + 8:n + 8 + size])
    edit(header)
    body = json.dumps(header, sort_keys=True).encode()
    header["built"] = header["built"][:len(header["built"]) + size - len(body)].ljust(
        len(header["built"]) + size - len(body))
    body = json.dumps(header, sort_keys=True).encode()
    assert len(body) == size
    path.write_bytes(data[:n + 8] + body + data[n + 8 + size:])


def test_pickled_or_forged_index_files_are_refused(tmp_path, data):
    """A pickle at the index's name is refused unread (its payload never runs); a header of
    wrong types or sizes, offsets that do not cover the rows or slots naming a row twice are
    refused; a stamp copied onto another store's index is caught by its rows."""
    X, _, _ = data
    address = FileStore("npy", tmp_path).make(X)
    path = ann.index_path(address, "cosine", None)
    path.parent.mkdir()
    ran = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    path.write_bytes(pickle.dumps(Payload()))
    with open_live(address) as store:
        with pytest.raises(StoreError, match="no magic line"):
            ann.use_index(store, "existing")
        assert not ran.exists()
        path.unlink()
        ann.use_index(store, "build")
        good = path.read_bytes()
        for edit, match in [
            (lambda h: h.update(rows="4000"), "not that of an index"),
            (lambda h: h.update(lists=10 ** 9), "out of range"),
            (lambda h: h.update(format=2), "not that of an index"),
        ]:
            path.write_bytes(good)
            _forge(path, edit)
            with pytest.raises(StoreError, match=match):
                ann.use_index(store, "existing")
        # slots naming one row twice
        path.write_bytes(good)
        index = ann.IvfIndex(path)
        at = index._at["positions"]
        index.close()
        forged = bytearray(good)
        forged[at + 8:at + 16] = forged[at:at + 8]
        path.write_bytes(bytes(forged))
        with pytest.raises(StoreError, match="each row of the store once"):
            ann.use_index(store, "existing")
        # a row's slot pointing at another row's vector: caught when the row is read
        at = index._at["slots"]
        forged = bytearray(good)
        forged[at + 8 * 5:at + 8 * 6] = forged[at + 8 * 6:at + 8 * 7]
        path.write_bytes(bytes(forged))
        assert ann.use_index(store, "existing") == "loaded"
        with pytest.raises(StoreError, match="its slot of row 5 does not hold that row"):
            store.fetch([5])
        np.testing.assert_array_equal(store.fetch([6]).vectors[0], X[6])
    # another store's index under this store's stamp
    other = FileStore("npy", tmp_path / "o")
    (tmp_path / "o").mkdir()
    other_address = other.make(np.random.default_rng(9).normal(size=(N, D)).astype(np.float32))
    with open_live(other_address) as store:
        ann.use_index(store, "build")
    path.write_bytes(ann.index_path(other_address, "cosine", None).read_bytes())
    with open_live(address) as store:
        stamp = ann.store_stamp(store)
        _forge(path, lambda h: h.update(stamp=stamp))
        with pytest.raises(ann.IndexStaleError, match="its rows are not the store's"):
            ann.use_index(store, "existing")
        assert ann.use_index(store, "build") == "rebuilt"


def test_stores_with_their_own_index_take_auto_only(tmp_path, data):
    pytest.importorskip("faiss")
    X, Y, _ = data
    maker = FileStore("faiss", tmp_path)
    address = maker.make(X)
    with Searcher(address, lookup(Y), **maker.options) as s:
        assert s.index_ == "own"
    with pytest.raises(ValueError, match="searched by its own index"):
        Searcher(address, lookup(Y), index="exact", **maker.options)
    with pytest.raises(ValueError, match="index='fast': use one of auto, exact"):
        Searcher(address, lookup(Y), index="fast", **maker.options)


def test_command_builds_uses_and_refuses(tmp_path, data, capsys, monkeypatch):
    X, Y, asked = data
    np.save(tmp_path / "Y.npy", Y)
    (tmp_path / "lookup_ix.py").write_text(
        "import numpy as np\n"
        f"Y = np.load({str(tmp_path / 'Y.npy')!r})\n"
        "def embed(texts):\n    return Y[[int(t.split()[1]) for t in texts]]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    maker = FileStore("parquet", tmp_path)
    address = maker.make(X)
    np.save(tmp_path / "q.npy", Y[asked[:5]])
    base = ["search", address, "--encoder", "lookup_ix:embed", "-k", "3", "--text-field", "doc",
            "--queries", str(tmp_path / "q.npy"), "--encode-cache", str(tmp_path / "c.sqlite"),
            "--no-write-back", "--overwrite", "--output", str(tmp_path / "r.jsonl")]
    assert main(base + ["--index", "existing"]) == 2
    assert "no index beside the store" in capsys.readouterr().err
    assert main(base + ["--index", "build"]) == 0
    assert "skalign's index beside the store (built now)" in capsys.readouterr().out
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line["ids"][0] for line in lines] == [3 * int(i) + 1 for i in asked[:5]]
    assert main(base + ["--index", "existing"]) == 0
    assert "(current)" in capsys.readouterr().out
