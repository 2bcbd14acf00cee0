"""``skalign migrate``, ``--continue``, ``search`` and the overlay against hostile and mistaken
input: every case exits 0 with the right result or 2 with one line, refusals come before any
text is encoded, and nothing of the user's is lost or changed."""

import hashlib
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_search import FileStore

from skalign._stores import open_live
from skalign._stores.live import encoded_mark
from skalign.cli import main
from skalign.exceptions import StoreError

pytest.importorskip("pyarrow")

N, D = 160, 16


@pytest.fixture(scope="module")
def spaces():
    rng = np.random.default_rng(9)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y @ rng.normal(size=(D, D)) + 0.2 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


@pytest.fixture
def encoder(tmp_path, monkeypatch, spaces):
    """``hostile_enc:embed``: the new encoder of ``spaces`` (row ``i``'s text is ``doc i``),
    writing each text it encodes to ``calls.txt``: a refusal before any work leaves it
    empty."""
    _, Y = spaces
    np.save(tmp_path / "Y.npy", Y)
    (tmp_path / "hostile_enc.py").write_text(textwrap.dedent(f"""
        import numpy as np
        Y = np.load({str(tmp_path / "Y.npy")!r})
        def embed(texts):
            with open({str(tmp_path / "calls.txt")!r}, "a") as f:
                f.writelines(t + "\\n" for t in texts)
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    return "hostile_enc:embed"


def calls(tmp_path):
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def digest(path):
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def one_line_error(capsys, command, match):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"skalign {command}: error:"), err
    assert match in err, err
    return err


def migrate(source, output, encoder, *extra, text_field="doc"):
    field = ["--text-field", text_field] if text_field else []
    return main(["migrate", source, output, "--encoder", encoder, "--budget", "40", *field,
                 "--anyway", "--quiet", *extra])


@pytest.mark.parametrize("kind", ["parquet", "npy"])
@pytest.mark.parametrize("continue_", [False, True])
def test_output_equal_to_the_source_is_refused_before_any_work(tmp_path, spaces, encoder,
                                                               capsys, kind, continue_):
    X, _ = spaces
    maker = FileStore(kind, tmp_path)
    source = maker.make(X)
    text = ["--text-field", maker.options["text_field"]] if kind == "npy" else []
    os.symlink(source, tmp_path / ("alias" + Path(source).suffix))
    before = digest(source)
    for output in (source, str(tmp_path / ("alias" + Path(source).suffix))):
        argv = ["migrate", source, output, "--encoder", encoder, "--budget", "40", "--quiet"]
        argv += text + (["--continue"] if continue_ else [])
        assert main(argv) == 2
        err = one_line_error(capsys, "migrate", "is the SOURCE")
        assert "--replace" not in err and "--continue" in err
    assert calls(tmp_path) == [] and digest(source) == before


def test_an_existing_output_is_refused_before_any_work(tmp_path, spaces, encoder, capsys):
    X, _ = spaces
    source = FileStore("parquet", tmp_path).make(X)
    other = tmp_path / "theirs.parquet"
    other.write_bytes(b"the user's own file")
    assert migrate(source, str(other), encoder) == 2
    one_line_error(capsys, "migrate", "already exists")
    assert migrate(source, str(other), encoder, "--continue") == 2
    one_line_error(capsys, "migrate", "not written by skalign migrate")
    assert calls(tmp_path) == [] and other.read_bytes() == b"the user's own file"


def test_a_migration_chained_into_another_never_copies_provenance(tmp_path, spaces, encoder):
    """A -> B, B searched and continued, B -> C with the same encoder's stand-in: C's rows
    carry only the marks the B -> C run wrote."""
    X, Y = spaces
    a = FileStore("parquet", tmp_path).make(X)
    b, c = str(tmp_path / "b.parquet"), str(tmp_path / "c.parquet")
    assert migrate(a, b, encoder) == 0
    assert migrate(a, b, encoder, "--continue") == 0
    assert migrate(b, c, encoder) == 0
    with open_live(c, text_field="doc") as store:
        marks = store.fetch(store.ids()).provenance
    assert sum(m is not None for m in marks) == 40


def test_an_overlay_belongs_to_its_store_only(tmp_path, spaces, encoder, capsys):
    """A LanceDB table migrated (its overlay holds encoded rows), then another table with the
    same ids and the same version moved into its place: the overlay is refused, never applied
    to the new table."""
    pytest.importorskip("lancedb")
    import lancedb
    import pyarrow as pa

    X, Y = spaces
    source = FileStore("lance", tmp_path).make(X)
    with open_live(source, text_field="doc") as store:
        ids = store.ids()
    out = tmp_path / "db" / "out.lance"
    assert migrate(source, str(out), encoder) == 0
    assert (tmp_path / "db" / "out.lance.skalign-live").is_dir()
    db = lancedb.connect(tmp_path / "other")
    rng = np.random.default_rng(1)
    table = pa.table({"id": ids, "doc": [f"doc {i}" for i in range(N)],
                      "emb": pa.FixedSizeListArray.from_arrays(
                          pa.array(rng.normal(size=N * D).astype(np.float32)), D)})
    t = db.create_table("out", data=table.slice(0, N // 2))
    t.add(table.slice(N // 2))
    with open_live(str(tmp_path / "other" / "out.lance"), text_field="doc") as store:
        assert store.overlay.base["version"] == open_live(
            str(out), text_field="doc").overlay.base["version"]
    os.rename(out, tmp_path / "db" / "old.lance")
    os.rename(tmp_path / "other" / "out.lance", out)
    with pytest.raises(StoreError, match="changed since the encoded rows"):
        open_live(str(out), text_field="doc")
    np.save(tmp_path / "q.npy", Y[:3])
    assert main(["search", str(out), "--queries", str(tmp_path / "q.npy"), "--encoder",
                 encoder, "--text-field", "doc", "--output", str(tmp_path / "r.jsonl")]) == 2
    one_line_error(capsys, "search", "changed since the encoded rows")
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("plant", ["negative", "beyond", "nan", "huge", "truncated", "shape",
                                   "object"])
def test_a_planted_overlay_segment_is_refused(tmp_path, spaces, encoder, capsys, plant):
    X, Y = spaces
    maker = FileStore("parquet", tmp_path)
    address = maker.make(X)
    with open_live(address, **maker.options) as store:
        store.write_back([store.ids()[3]], Y[[3]], encoded_mark("e", "doc", "doc 3"))
    folder = Path(address + ".skalign-live")
    seg = folder / "seg-000000000099.npz"
    positions, vectors = np.array([5]), Y[[5]].copy()
    if plant == "negative":
        positions = np.array([-1])
    elif plant == "beyond":
        positions = np.array([N])
    elif plant == "nan":
        vectors[0, 2] = np.nan
    elif plant == "huge":
        vectors[0, 2] = 3e38
    elif plant == "shape":
        vectors = np.ones((1, D + 1), np.float32)
    if plant == "truncated":
        seg.write_bytes((folder / "seg-000000000001.npz").read_bytes()[:50])
    elif plant == "object":
        seg.write_bytes(b"PK\x03\x04 not a zip at all")
    else:
        np.savez(seg, positions=positions, vectors=vectors, marks=np.array(["encoded:x"]))
    with pytest.raises(StoreError, match="not a segment of this"):
        open_live(address, **maker.options)
    np.save(tmp_path / "q.npy", Y[:3])
    assert main(["search", address, "--queries", str(tmp_path / "q.npy"), "--encoder", encoder,
                 "--text-field", "doc", "--output", str(tmp_path / "r.jsonl")]) == 2
    one_line_error(capsys, "search", "not a segment of this")
    assert calls(tmp_path) == []


def test_info_counts_encoded_stale_and_translated(tmp_path, spaces, encoder, capsys):
    """After a migration, a text changed under an encoded row makes it stale: ``info`` tells
    the three apart, and ``--continue`` encodes the stale row again."""
    X, _ = spaces
    maker = FileStore("npy", tmp_path)
    source = maker.make(X)
    lines = Path(maker.options["text_field"])
    out = str(tmp_path / "out.npy")
    base = ["--text-field", str(lines)]
    assert main(["migrate", source, out, "--encoder", encoder, "--budget", "40", "--anyway",
                 "--quiet", *base]) == 0
    capsys.readouterr()
    with open_live(out, text_field=str(lines)) as store:
        rows = store.fetch(store.ids(), text_field=str(lines))
    encoded = [i for i, p in enumerate(rows.provenance) if p is not None]
    assert len(encoded) == 40
    texts = lines.read_text().splitlines()
    texts[encoded[0]] = f"doc {encoded[1]}"  # an edit: the row's text is another now
    lines.write_text("".join(t + "\n" for t in texts))
    assert main(["info", out, "--json"]) == 0
    vectors = json.loads(capsys.readouterr().out)["vectors"]
    assert (vectors["encoded"], vectors["stale"], vectors["translated"]) == (39, 1, N - 40)
    assert main(["info", out]) == 0
    shown = capsys.readouterr().out
    assert "39 of 160 rows" in shown and "1 rows are marked encoded but their text" in shown
    assert main(["migrate", source, out, "--encoder", encoder, "--budget", "10", "--anyway",
                 "--quiet", "--continue", *base]) == 0
    capsys.readouterr()
    assert main(["info", out, "--json"]) == 0
    vectors = json.loads(capsys.readouterr().out)["vectors"]
    assert vectors["stale"] == 0 and vectors["encoded"] == 49  # the stale row came first


# ---------------------------------------------------------------------------- kills
def _source(kind, tmp_path, request, X):
    """(SOURCE, OUTPUT, extra arguments) of a store of ``X`` with texts ``doc i``."""
    if kind in ("npy", "parquet"):
        maker = FileStore(kind, tmp_path)
        source = maker.make(X)
        out = str(tmp_path / ("out" + Path(source).suffix))
        return source, out, ["--text-field", maker.options["text_field"]]
    if kind == "chroma":
        pytest.importorskip("chromadb")
        import chromadb

        col = chromadb.PersistentClient(path=str(tmp_path / "chroma")).create_collection(
            "kill_src", metadata={"hnsw:space": "cosine"}, embedding_function=None)
        col.add(ids=[f"r{i}" for i in range(N)], embeddings=X,
                documents=[f"doc {i}" for i in range(N)])
        return (f"chroma:{tmp_path}/chroma/kill_src", f"chroma:{tmp_path}/chroma/kill_out", [])
    if kind == "sqlite-vec":
        pytest.importorskip("sqlite_vec")
        from store_backends import SqliteVec

        conn = SqliteVec.connect(tmp_path / "app.db")
        conn.execute(f"CREATE VIRTUAL TABLE kill_src USING vec0(emb float[{D}] "
                     "distance_metric=cosine, text text)")
        with conn:
            conn.executemany("INSERT INTO kill_src (rowid, emb, text) VALUES (?, ?, ?)",
                             ((i, x.astype("<f4").tobytes(), f"doc {i}")
                              for i, x in enumerate(X)))
        conn.close()
        db = tmp_path / "app.db"
        return f"sqlite:{db}?table=kill_src", f"sqlite:{db}?table=kill_out", []
    pytest.importorskip("psycopg")
    import psycopg
    from pgvector.psycopg import register_vector

    base = request.getfixturevalue("pg_base")
    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        for t in ("kill_src", "kill_out"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")
        conn.execute(f"CREATE TABLE kill_src (id int PRIMARY KEY, text text, emb vector({D}))")
        for i, x in enumerate(X):
            conn.execute("INSERT INTO kill_src VALUES (%s, %s, %s)", (i, f"doc {i}", x))
    return (f"{base}&table=kill_src&column=emb", f"{base}&table=kill_out&column=emb", [])


def _run(argv, tmp_path, kill_at=None):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    env.pop("SKALIGN_TEST_KILL_AT", None)
    if kill_at:
        env["SKALIGN_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "skalign", *argv], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kind", ["npy", "parquet", "chroma", "pgvector", "sqlite-vec"])
@pytest.mark.parametrize("kill_at", ["publishing", "published"])
def test_migrate_killed_in_the_publish_then_the_same_command_finishes(
        tmp_path, spaces, encoder, request, monkeypatch, kind, kill_at):
    """SIGKILL in the window between publishing the output and writing its marks and stamp,
    for ``migrate`` and for ``--continue``: the same command, run again, finishes (exit 0,
    the rows marked, the stamp's migration record, nothing left behind)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(__import__("tempfile"), "tempdir", str(tmp_path / "tmp"))
    X, Y = spaces
    source, out, extra = _source(kind, tmp_path, request, X)
    argv = ["migrate", source, out, "--encoder", encoder, "--budget", "40", "--anyway",
            "--quiet", *extra]
    for step in (argv, argv + ["--continue"]):
        # --continue writes a database in place (no publish); a file store anew (a publish)
        if kind in ("npy", "parquet") or "--continue" not in step:
            killed = _run(step, tmp_path, kill_at)
            assert killed.returncode == -9, killed.stderr
        again = _run(step, tmp_path)
        assert again.returncode == 0, again.stderr
    info = _run(["info", out, "--json"], tmp_path)
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["vectors"]["encoded"] == 80 and got["vectors"]["stale"] == 0
    from skalign._stores.address import parse_address
    from skalign._stores.provenance import read_stamp

    stamp = read_stamp(parse_address(out))
    assert stamp["migration"]["encoded_rows"] == 80 and "publishing" not in stamp
    if kind in ("npy", "parquet"):
        left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
        assert not left, left


@pytest.mark.parametrize("kind", ["chroma", "pgvector", "sqlite-vec"])
def test_an_engine_migration_chained_into_another_never_copies_provenance(
        tmp_path, spaces, encoder, request, monkeypatch, kind):
    """A -> B, B searched (its marks written back), B -> C: C's rows carry only the marks the
    B -> C run wrote, and ``info`` on C counts those alone."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(__import__("tempfile"), "tempdir", str(tmp_path / "tmp"))
    X, Y = spaces
    a, b, _ = _source(kind, tmp_path, request, X)
    c = b.replace("kill_out", "kill_c")
    if kind == "pgvector":
        import psycopg

        with psycopg.connect(request.getfixturevalue("pg_base"), autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS kill_c")
    field = "text" if kind == "pgvector" else None
    assert migrate(a, b, encoder, text_field=field) == 0
    np.save(tmp_path / "q.npy", Y[:20])
    assert main(["search", b, "--queries", str(tmp_path / "q.npy"), "--encoder", encoder,
                 "--candidates", "30", "--output", str(tmp_path / "r.jsonl"), "--quiet"]
                + (["--text-field", "text"] if kind == "pgvector" else [])) == 0
    with open_live(b) as store:
        before = store.fetch(store.ids()).provenance
    assert sum(p is not None for p in before) > 40  # B's marks: the budget and the searcher's
    assert migrate(b, c, encoder, text_field=field) == 0
    with open_live(c) as store:
        marks = store.fetch(store.ids()).provenance
    assert sum(p is not None for p in marks) == 40


def test_a_source_holding_a_users_own_key_is_refused_before_any_work(tmp_path, spaces,
                                                                     encoder, capsys):
    """Its key would be copied into the output, where skalign writes its marks: refused with
    the option that names another key, nothing encoded; with that option it migrates and the
    user's values are in the output untouched."""
    pytest.importorskip("chromadb")
    import chromadb

    X, _ = spaces
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    col = client.create_collection("mine_src", metadata={"hnsw:space": "cosine"},
                                   embedding_function=None)
    col.add(ids=[f"r{i}" for i in range(N)], embeddings=X,
            documents=[f"doc {i}" for i in range(N)],
            metadatas=[{"skalign_vector": f"user {i}"} for i in range(N)])
    src, out = f"chroma:{tmp_path}/chroma/mine_src", f"chroma:{tmp_path}/chroma/mine_out"
    assert migrate(src, out, encoder, text_field=None) == 2
    one_line_error(capsys, "migrate", "--provenance-key")
    assert calls(tmp_path) == []
    assert migrate(src, out, encoder, "--provenance-key", "skalign_mark", text_field=None) == 0
    got = client.get_collection("mine_out").get(include=["metadatas"])
    assert sorted(m["skalign_vector"] for m in got["metadatas"]) == sorted(
        f"user {i}" for i in range(N))
    assert sum("skalign_mark" in m for m in got["metadatas"]) == 40
