"""Live file stores (.npy, Parquet, LanceDB, FAISS) and ``skalign search``: the store's files are
never written, encoded rows live in the overlay beside it and rank by their encoded vectors, a
reader in another process never sees a torn row while segments are written and merged, a store
changed under its overlay is refused, and the command's results and mistakes."""

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_search import FileStore

from skalign._stores import open_live
from skalign._stores.files import overlay as live_overlay
from skalign._stores.live import similarity
from skalign.cli import main
from skalign.exceptions import StoreError, StoreNotFoundError

N, D = 300, 16
FILE_KINDS = ["npy", "parquet", "parquet-dir", "lance", "faiss"]


@pytest.fixture(scope="module")
def spaces():
    rng = np.random.default_rng(5)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y + 0.7 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


def _digest(address):
    path = Path(address)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_encoded_rows_rank_by_their_encoded_vectors(tmp_path, spaces, kind):
    """With a third of the rows encoded, ``top_k`` equals a brute-force ranking of the merged
    vectors (encoded ones where a row has one, stored ones elsewhere), for an exact store and
    for an indexed one; the store's files are unchanged."""
    pytest.importorskip("lancedb" if kind == "lance" else "faiss" if kind == "faiss"
                        else "pyarrow")
    X, Y = spaces
    maker = FileStore(kind, tmp_path)
    address = maker.make(X)
    before = _digest(address)
    chosen = np.random.default_rng(0).choice(N, N // 3, replace=False)
    with open_live(address, **maker.options) as store:
        for part in np.array_split(chosen, 4):
            store.write_back([maker.key(i) for i in part], Y[part], "encoded:fp")
        merged = X.copy()
        merged[chosen] = Y[chosen]
        Q = Y[:12] + 0.1
        S = similarity(Q, merged, store.metric)
        ids, scores = store.top_k(Q, 20)
        for q in range(len(Q)):
            best = np.argsort(-S[q], kind="stable")[:20]
            assert ids[q] == [maker.key(i) for i in best]
            np.testing.assert_allclose(scores[q], S[q][best], rtol=1e-4, atol=1e-4)
        plain = next(i for i in range(N) if i not in chosen)
        rows = store.fetch([maker.key(i) for i in (chosen[0], plain)])
        assert rows.provenance[0] == "encoded:fp" and rows.provenance[1] is None
        assert rows.texts[0] == f"doc {chosen[0]}"
        assert len(store.ids()) == N
    assert _digest(address) == before
    assert sorted(p.name for p in Path(address + ".skalign-live").iterdir()) == [
        ".lock", "base.json"] + [f"seg-{n:012d}.npz" for n in range(1, 5)]


_READER = textwrap.dedent("""
    import sys, numpy as np, json
    from skalign._stores import open_live
    address, options, n, d = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), 16
    keys = json.loads(sys.argv[4])
    X = np.load(sys.argv[5])
    store = open_live(address, **options)
    seen, torn, reads = set(), 0, 0
    stop = sys.stdin.readline  # the parent writes a line when it is done
    import threading
    done = threading.Event()
    threading.Thread(target=lambda: (stop(), done.set()), daemon=True).start()
    print("ready", flush=True)
    while not done.is_set() or reads < 2:
        rows = store.fetch(keys)
        for i, v, mark in zip(range(n), rows.vectors, rows.provenance):
            r = 0 if mark is None else int(mark.split(":r")[1])
            seen.add(r)
            if not np.array_equal(v, X[i] + r):
                torn += 1
        reads += 1
    print(json.dumps({"torn": torn, "seen": sorted(seen), "reads": reads}), flush=True)
""")


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_reader_in_another_process_never_sees_a_torn_row(tmp_path, spaces, kind, monkeypatch):
    """Round ``r`` writes ``X[i] + r`` with the mark ``encoded:r{r}`` to 100 rows (segments
    merged every 5) while another process reads them: every row it sees is the original
    without a mark, or one round's vector with that round's mark."""
    pytest.importorskip("lancedb" if kind == "lance" else "faiss" if kind == "faiss"
                        else "pyarrow")
    monkeypatch.setattr(live_overlay, "COMPACT_SEGMENTS", 5)
    X, _ = spaces
    maker = FileStore(kind, tmp_path)
    address = maker.make(X)
    keys = [maker.key(i) for i in range(100)]
    np.save(tmp_path / "x.npy", X[:100])
    proc = subprocess.Popen(
        [sys.executable, "-c", _READER, address, json.dumps(maker.options), "100",
         json.dumps(keys), str(tmp_path / "x.npy")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    with open_live(address, **maker.options) as store:
        for r in range(1, 31):
            store.write_back(keys, X[:100] + r, f"encoded:r{r}")
    out, _ = proc.communicate("done\n", timeout=120)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["torn"] == 0
    assert got["reads"] >= 2 and len(got["seen"]) >= 2  # the reads overlapped the writes
    segments = [p.name for p in Path(address + ".skalign-live").glob("seg-*.npz")]
    assert len(segments) < 5  # merged as they accumulated
    with open_live(address, **maker.options) as store:
        rows = store.fetch(keys)
    np.testing.assert_array_equal(rows.vectors, X[:100] + 30)
    assert set(rows.provenance) == {"encoded:r30"}


def test_store_changed_under_its_overlay_is_refused(tmp_path, spaces):
    X, Y = spaces
    maker = FileStore("npy", tmp_path)
    address = maker.make(X)
    with open_live(address, **maker.options) as store:
        store.write_back([3], Y[[3]], "encoded:fp")
    np.save(address, X + 1)  # translated again, say
    with pytest.raises(StoreError, match="changed since the encoded rows.*remove that folder"):
        open_live(address, **maker.options)


def test_file_store_mistakes(tmp_path, spaces):
    X, Y = spaces
    maker = FileStore("npy", tmp_path)
    address = maker.make(X)
    (tmp_path / "short.txt").write_text("a\nb\n")
    with pytest.raises(StoreError, match="2 lines for the 300 rows"):
        open_live(address, text_field=str(tmp_path / "short.txt")).fetch([0])
    with pytest.raises(StoreError, match="metric='dot'"):
        open_live(address, metric="dot")
    with open_live(address, **maker.options) as store:
        with pytest.raises(StoreNotFoundError, match="no row with id 300"):
            store.fetch([1, 300])
        with pytest.raises(StoreError, match="2 ids but 1 vectors"):
            store.write_back([0, 1], Y[:1], "encoded:fp")
        with pytest.raises(StoreError, match="16 dimensions|have 5 dimensions"):
            store.top_k(np.ones((1, 5)), 3)
    parquet = FileStore("parquet", tmp_path)
    address = parquet.make(X)
    with pytest.raises(StoreError, match="no id column 'key'"):
        open_live(address, id_field="key")
    with pytest.raises(StoreError, match="no text column 'body'"):
        open_live(address, text_field="body")
    with open_live(address, text_field="doc", id_field="doc") as store:  # text ids work too
        assert store.fetch(["doc 7"]).texts == ["doc 7"]


# ------------------------------------------------------------------------------ the command
@pytest.fixture
def encoder_module(tmp_path, monkeypatch, spaces):
    """``lookup_enc:embed``, importable: the new encoder of ``spaces``."""
    _, Y = spaces
    np.save(tmp_path / "Y.npy", Y)
    (tmp_path / "lookup_enc.py").write_text(textwrap.dedent(f"""
        import numpy as np
        Y = np.load({str(tmp_path / "Y.npy")!r})
        def embed(texts):
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lookup_enc:embed"


def test_command_writes_jsonl_and_parquet_results(tmp_path, spaces, encoder_module, capsys):
    X, Y = spaces
    maker = FileStore("parquet", tmp_path)
    address = maker.make(X)
    np.save(tmp_path / "q.npy", Y[:5])
    (tmp_path / "q.txt").write_text("doc 0\ndoc 1\ndoc 2\ndoc 3\ndoc 4\n")
    base = ["search", address, "--encoder", encoder_module, "-k", "4", "--candidates", "40",
            "--text-field", "doc", "--encode-cache", str(tmp_path / "cache.sqlite")]
    assert main(base + ["--queries", str(tmp_path / "q.npy"), "--output",
                        str(tmp_path / "r.jsonl"), "--no-write-back"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line["ids"][0] for line in lines] == [1, 4, 7, 10, 13]  # ids 3 i + 1
    assert all(len(line["ids"]) == len(line["scores"]) == 4 for line in lines)
    summary = capsys.readouterr().out
    assert re.search(r"5 queries, 40 candidates each: (\d+) texts encoded .*, 0 rows written",
                     summary)
    # the same queries as text, the vectors written back this time (the cache answers all)
    assert main(base + ["--queries", str(tmp_path / "q.txt"), "--output",
                        str(tmp_path / "r.parquet")]) == 0
    summary = capsys.readouterr().out
    written = int(re.search(r": 0 texts encoded .*, (\d+) rows written back", summary)[1])
    assert written > 40
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "r.parquet")
    assert table.column("ids").to_pylist() == [line["ids"] for line in lines]
    np.testing.assert_allclose(np.array(table.column("scores").to_pylist()),
                               np.array([line["scores"] for line in lines]), rtol=1e-6)


@pytest.mark.parametrize("extra, match", [
    (["--output", "r.csv"], "RESULTS must end in .jsonl or .parquet"),
    (["--output", "r.jsonl", "--candidates", "plan.json"], "cannot read the plan"),
    (["--output", "r.jsonl", "--text-field", "body"], "no text column 'body'"),
    (["--output", "r.jsonl", "--encoder", "lookup_enc:nothing"], "has no 'nothing'"),
    (["--output", "r.jsonl", "--queries", "wide.npy"], r"shape \(n, 16\)"),
])
def test_command_mistakes_exit_2_with_one_line(tmp_path, spaces, encoder_module, capsys,
                                               monkeypatch, extra, match):
    X, Y = spaces
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    address = FileStore("parquet", tmp_path).make(X)
    np.save(tmp_path / "q.npy", Y[:2])
    np.save(tmp_path / "wide.npy", np.ones((2, 5), np.float32))
    argv = ["search", address, "--queries", "q.npy", "--encoder", encoder_module,
            "--text-field", "doc"]
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("skalign search: error:")
    assert re.search(match, err), err
    assert not (tmp_path / "r.jsonl").exists()
