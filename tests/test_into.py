"""--into FIELD: migration into a second vector field of the same store, against the real engines.

Each engine has a maker (:data:`MAKERS`): it builds a store of M rows (id, text, n, the old
vectors in ``emb``) and returns an :class:`Engine` that reads a field back and measures the
store's size. Another engine plugs in by adding its maker and its kind to tests/
store_capabilities.py's ``--into FIELD`` column.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from store_capabilities import kinds

from skalign.encoders import CachedEncoder, CallableEncoder, EncodeCache
from skalign.exceptions import StoreError
from skalign.io import migrate, translate

N = 600
M = 160  # rows of each store


@pytest.fixture(scope="module")
def corpus():
    from skalign.datasets import load_docstring_embeddings

    data = load_docstring_embeddings()
    return (list(data.texts[:M]), data.embeddings["minilm_l6"][:M].astype(np.float32),
            data.embeddings["mpnet_base"][:M].astype(np.float32))


class Lookup:
    """The "new encoder": the dev set's MPNet vector of each text; counts the texts it ran on."""

    fingerprint = "mpnet-lookup"

    def __init__(self, texts, new):
        self.table = {t: v for t, v in zip(texts, new)}
        self.seen = []

    def __call__(self, texts):
        self.seen.extend(texts)
        return np.stack([self.table[t] for t in texts])


def encoder_for(corpus, tmp_path):
    texts, _, new = corpus
    look = Lookup(texts, new)
    return look, CachedEncoder(CallableEncoder(look, fingerprint=look.fingerprint),
                               cache=EncodeCache(tmp_path / "cache.sqlite"))


@dataclass
class Engine:
    """A store made for a test: its ``address``, the ``keys`` of its rows in order,
    ``read(field)`` -> ``{key: (vector or None, {other columns})}`` (every vector ``None`` where
    the store has no such field yet), ``size()`` -> ``(bytes of the rows, bytes of the
    indexes)``, its ``old`` vector field, and whether a field's rows are in the store as each
    batch is written (``in_place``; file stores keep them beside it until the step ends)."""

    address: str
    keys: list
    read: Callable
    size: Callable
    old: str = "emb"
    in_place: bool = True
    #: ``alone(V, marks)``: the bytes the engine takes to store the vectors ``V`` and their
    #: marks alone (a table or file of those two columns): what adding the field should cost
    alone: Callable | None = None


# ------------------------------------------------------------------------- the engines
def make_pgvector(root, texts, old, request):
    import psycopg
    from pgvector.psycopg import register_vector

    base = request.getfixturevalue("pg_base")
    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS docs CASCADE")
        conn.execute(f"CREATE TABLE docs (id bigint PRIMARY KEY, text text, n int, "
                     f"emb vector({old.shape[1]}))")
        with conn.cursor() as cur, cur.copy("COPY docs (id, text, n, emb) FROM STDIN") as copy:
            for i, (t, x) in enumerate(zip(texts, old)):
                copy.write_row([10 * i, t, i, x])
        from store_backends import VECTOR_INDEXES

        if VECTOR_INDEXES.get(base) is None:
            conn.execute("CREATE INDEX docs_emb ON docs USING hnsw (emb vector_cosine_ops) "
                         "WITH (m = 8, ef_construction = 32)")
        conn.execute("VACUUM FULL docs")

    def read(field):
        from psycopg import sql

        with psycopg.connect(base) as conn:
            register_vector(conn)
            names = [r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'docs'::regclass AND "
                "attnum > 0 AND NOT attisdropped ORDER BY attnum")]
            rows = conn.execute(sql.SQL("SELECT {} FROM docs").format(
                sql.SQL(", ").join(map(sql.Identifier, names)))).fetchall()
        at = names.index(field)
        return {r[0]: (None if r[at] is None else np.asarray(r[at].to_numpy(), np.float32),
                       {n: (v.to_numpy().tobytes() if hasattr(v, "to_numpy") else v)
                        for n, v in zip(names, r) if n != field})
                for r in rows}

    def size():
        """The table's bytes (its TOAST included) and its indexes', after ``VACUUM FULL``
        (the dead row versions the updates leave are reused space, not data)."""
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute("VACUUM FULL docs")
            return conn.execute("SELECT pg_table_size('docs'), pg_indexes_size('docs')"
                                ).fetchone()

    def alone(V, marks):
        with psycopg.connect(base, autocommit=True) as conn:
            register_vector(conn)
            conn.execute("DROP TABLE IF EXISTS into_alone")
            conn.execute(f"CREATE TABLE into_alone (v vector({V.shape[1]}), m text)")
            with conn.cursor() as cur, cur.copy("COPY into_alone (v, m) FROM STDIN") as copy:
                for v, m in zip(V, marks):
                    copy.write_row([v, m])
            conn.execute("VACUUM FULL into_alone")
            got = conn.execute("SELECT pg_table_size('into_alone')").fetchone()[0]
            conn.execute("DROP TABLE into_alone")
            return got

    return Engine(f"{base}&table=docs&column=emb", [10 * i for i in range(len(texts))],
                  read, size, alone=alone)


def make_qdrant(root, texts, old, request):
    """A local-mode collection ``docs``: point ids ``10 i``, the payload ``text`` and ``n``, the
    old vectors under the named vector ``emb`` (dot product: stored as given; a cosine one's
    directions, and another vector beside them, in tests/test_into_qdrant.py). Every read
    closes skalign's client of the folder after it (one client per folder: the command line's
    processes open it)."""
    pytest.importorskip("qdrant_client")
    import sqlite3

    from qdrant_client import models

    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import store as qdrant

    folder = root / "qdrant"
    folder.mkdir()
    at = parse_address(f"qdrant:{folder}/docs")

    def client():
        return qdrant._client(at)

    def release():
        c = qdrant._CLIENTS.pop(qdrant._client_key(at), None)
        if c is not None:
            c.close()

    client().create_collection("docs", vectors_config={
        "emb": models.VectorParams(size=old.shape[1], distance=models.Distance.DOT)})
    client().upsert("docs", points=models.Batch(
        ids=[10 * i for i in range(len(texts))], vectors={"emb": old.tolist()},
        payloads=[{"text": t, "n": i} for i, t in enumerate(texts)]))
    release()

    def read(field):
        points, _ = client().scroll("docs", limit=10 * len(texts), with_payload=True,
                                    with_vectors=True)
        release()
        out = {}
        for p in points:
            vectors = dict(p.vector)
            value = vectors.pop(field, None)
            vectors.pop("new", None)
            other = {**p.payload, **{f"vector {n}": np.asarray(v, np.float32).tobytes()
                                     for n, v in vectors.items()}}
            out[p.id] = (None if value is None else np.asarray(value, np.float32), other)
        return out

    def size():
        """The collection's SQLite file after a ``VACUUM`` (qdrant-client's local mode keeps
        each point as one pickled row, rewritten whole when a vector changes: the free pages
        the old rows leave are reused space, not data); no index (the local mode has none)."""
        release()
        path = folder / "collection" / "docs" / "storage.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("VACUUM")
        conn.close()
        return path.stat().st_size, 0

    def alone(V, marks):
        """A collection of the points' new vectors and marks alone, in another folder."""
        from qdrant_client import QdrantClient

        c = QdrantClient(path=str(root / "alone"))
        c.create_collection("a", vectors_config={"new": models.VectorParams(
            size=V.shape[1], distance=models.Distance.DOT)})
        c.upsert("a", points=models.Batch(
            ids=[10 * i for i in range(len(V))], vectors={"new": V.tolist()},
            payloads=[{"skalign_vector_new": m} for m in marks]))
        c.close()
        path = root / "alone" / "collection" / "a" / "storage.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("VACUUM")
        conn.close()
        return path.stat().st_size

    return Engine(f"qdrant:{folder}/docs?vector=emb", [10 * i for i in range(len(texts))],
                  read, size, alone=alone)



def _arrow_rows(table, field):
    """``read(field)`` of an Arrow table with an ``id`` column."""
    names = table.column_names
    cols = {n: table.column(n).to_pylist() for n in names}
    out = {}
    for r, key in enumerate(cols["id"]):
        vec = cols[field][r] if field in cols else None
        out[key] = (None if vec is None else np.asarray(vec, np.float32),
                    {n: (np.asarray(cols[n][r], np.float32).tobytes()
                         if isinstance(cols[n][r], list) else cols[n][r])
                     for n in names if n != field})
    return out


def _file_table(texts, old):
    import pyarrow as pa

    return pa.table({"id": pa.array([10 * i for i in range(len(texts))], pa.int64()),
                     "text": texts, "n": pa.array(range(len(texts)), pa.int32()),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(old.reshape(-1)),
                                                                 old.shape[1])})


def _vectors_and_marks(V, marks):
    import pyarrow as pa

    return pa.table({"new": pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)),
                                                              V.shape[1]),
                     "skalign_vector_new": pa.array(marks, pa.string())})


def _disk(path):
    """Bytes under ``path`` (a file or a folder)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def make_parquet(root, texts, old, request):
    import pyarrow.parquet as pq

    path = root / "docs.parquet"
    pq.write_table(_file_table(texts, old), path)

    def size():  # the file and everything skalign keeps beside it (the field's overlay)
        return sum(_disk(p) for p in root.glob("docs.parquet*")), 0

    def alone(V, marks):
        pq.write_table(_vectors_and_marks(V, marks), root / "alone.parquet")
        return (root / "alone.parquet").stat().st_size

    return Engine(str(path), [10 * i for i in range(len(texts))],
                  lambda field: _arrow_rows(pq.read_table(path), field), size, "vector",
                  in_place=False, alone=alone)


def make_lance(root, texts, old, request):
    lancedb = pytest.importorskip("lancedb")
    db = lancedb.connect(root / "db")
    db.create_table("docs", _file_table(texts, old))

    def read(field):
        return _arrow_rows(lancedb.connect(root / "db").open_table("docs").to_arrow(), field)

    def size():
        """The table's current version (LanceDB keeps earlier ones until ``optimize``) and
        what skalign keeps beside it."""
        t = lancedb.connect(root / "db").open_table("docs")
        beside = sum(_disk(p) for p in (root / "db").glob("docs.lance?*"))
        return t.stats()["total_bytes"] + beside, 0

    def alone(V, marks):
        t = lancedb.connect(root / "alone").create_table("a", _vectors_and_marks(V, marks))
        return t.stats()["total_bytes"]

    return Engine(str(root / "db" / "docs.lance"), [10 * i for i in range(len(texts))], read,
                  size, "vector", in_place=False, alone=alone)


MAKERS = {"parquet": make_parquet, "lance": make_lance, "pgvector": make_pgvector,
          "qdrant": make_qdrant}


def make(engine, tmp_path, corpus, request):
    texts, old, _ = corpus
    return MAKERS[engine](tmp_path, texts, old, request)


def _other(row):
    """A row's columns but skalign's per-field provenance and the new field."""
    return {k: v for k, v in row.items() if not str(k).startswith("skalign_vector_")
            and k != "new"}


# ------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("engine", kinds(
    "--into FIELD", "test_into.py::test_migrate_into_a_field_to_the_end"))
def test_migrate_into_a_field_to_the_end(engine, corpus, tmp_path, request):
    """migrate --into new, then --continue to the end: the old field bit for bit, the new one
    equal to encoding every text, every other column untouched, growth ~ the new vectors."""
    texts, old, new = corpus
    store = make(engine, tmp_path, corpus, request)
    before, size0 = store.read(store.old), store.size()
    look, enc = encoder_for(corpus, tmp_path)
    steps = [migrate(store.address, None, enc, 40, text_field="text", into="new")]
    mid = store.read("new")
    assert all(v is not None for v, _ in mid.values())  # every row filled by the first step
    steps.append(migrate(store.address, None, enc, 60, text_field="text", into="new",
                         continue_=True))
    steps.append(migrate(store.address, None, enc, 60, text_field="text", into="new",
                         continue_=True))
    assert [s.n_encoded for s in steps] == [40, 60, 60]
    assert [s.n_encoded_rows for s in steps] == [40, 100, 160] and steps[-1].action == "complete"
    assert len(look.seen) == len(set(look.seen)) == M
    after = store.read(store.old)
    for k in store.keys:  # the old field and every other column, bit for bit
        np.testing.assert_array_equal(after[k][0], before[k][0])
        assert after[k][0].tobytes() == before[k][0].tobytes()
        assert _other(after[k][1]) == _other(before[k][1])
    got = store.read("new")
    V = np.stack([got[k][0] for k in store.keys])
    np.testing.assert_allclose(V, new, atol=1e-5, rtol=0)
    marks = [got[k][1]["skalign_vector_new"] for k in store.keys]
    assert all(m.startswith("encoded:mpnet-lookup:text:") for m in marks)
    (data0, index0), (data1, index1) = size0, store.size()
    # the rows grew by what the engine takes to store the new vectors and their marks alone,
    # never by a copy of the rows' other columns (pgvector: 160 rows of 768-d, 491,520 bytes,
    # grew the table by 671,744, its TOAST chunks, as a table of those two columns alone);
    # the indexes by the new field's (an index like the old one's, on vectors twice as wide)
    grown = data1 - data0
    if store.alone is not None:
        ref = store.alone(V, marks)
        print(f"{engine}: grew {grown:,} B; the new vectors and marks alone: {ref:,} B; the "
              f"vectors' raw bytes {new.nbytes:,}")
        assert abs(grown - ref) <= 0.15 * ref + 16384, (grown, ref)
    else:
        assert new.nbytes <= grown < 1.4 * new.nbytes + 100 * M, (data0, data1)
    assert index1 - index0 < 1.5 * index0 * new.shape[1] / old.shape[1] + 65536, \
        (index0, index1)


@pytest.mark.parametrize("engine", ["parquet", "lance", "pgvector"])
def test_into_is_refused_before_anything_is_written(engine, corpus, tmp_path, request):
    """Hostile and taken names, the old field itself, the provenance column, and a field of
    another translation: each refused with one line, nothing written."""
    store = make(engine, tmp_path, corpus, request)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    _, enc = encoder_for(corpus, tmp_path)
    for bad, said in [("a\"b", "letters, digits"), ("x\x1b[31m", "letters, digits"),
                      ("", "letters, digits"), ("1st", "letters, digits"),
                      ("skalign_vector", "skalign's own"), ("skalign_vector_new", "skalign's own"),
                      (store.old, "own vector field"), ("text", "did not add"),
                      ("n" * 49, "letters, digits")]:
        with pytest.raises(StoreError, match=said) as info:
            migrate(store.address, None, enc, 40, text_field="text", into=bad)
        assert "\x1b" not in str(info.value)
    with pytest.raises(StoreError, match="run skalign migrate STORE --into new first"):
        migrate(store.address, None, enc, 40, text_field="text", into="new", continue_=True)
    assert set(next(iter(store.read(store.old).values()))[1]) == {"id", "text", "n"}
    if not store.in_place:  # no file beside the store: no stamp, no overlay, no lock left
        assert sorted(p.name for p in tmp_path.rglob("*")
                      if not p.name.startswith("cache.sqlite")) == before
    with pytest.raises(ValueError, match="not both"):
        migrate(store.address, "elsewhere", enc, 40, into="new")


def lookup_module(corpus, tmp_path, monkeypatch):
    """``into_lookup:embed``: the lookup encoder as a module the command line loads."""
    texts, _, new = corpus
    np.save(tmp_path / "new.npy", new)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    (tmp_path / "into_lookup.py").write_text(
        "import json, pathlib\nimport numpy as np\n"
        "HERE = pathlib.Path(__file__).parent\n"
        "TABLE = dict(zip(json.loads((HERE / 'texts.json').read_text()), "
        "np.load(HERE / 'new.npy')))\n"
        "def embed(texts):\n    return np.stack([TABLE[t] for t in texts])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "c.sqlite"))
    return "into_lookup:embed"


@pytest.mark.parametrize("engine", kinds(
    "--into FIELD", "test_into.py::test_translate_into_resumes_after_a_kill"))
def test_translate_into_resumes_after_a_kill(engine, corpus, tmp_path, request):
    """translate --into, SIGKILLed after its second batch: the same command writes the rows
    left only, and the field equals the model's translation of the old field; a second writer
    is refused at once."""
    from skalign import ProcrustesAligner
    from skalign._stores.address import parse_address
    from skalign._stores.fields import field_lock
    from skalign.exceptions import StoreLockedError
    from skalign.io import save

    texts, old, new = corpus
    store = make(engine, tmp_path, corpus, request)
    model = ProcrustesAligner().fit(old, new)
    path = str(save(model, tmp_path / "m.skops"))
    before = store.read(store.old)
    cmd = [sys.executable, "-m", "skalign", "translate", path, store.address, "--into", "new",
           "--batch-size", "40", "--quiet"]
    env = {**os.environ, "SKALIGN_TEST_KILL_AT": "into-batch-1"}
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    half = store.read("new")
    # two batches committed: in the store, or beside it until the step ends
    assert sum(v is not None for v, _ in half.values()) == (80 if store.in_place else 0)
    with field_lock(parse_address(store.address), "new"):
        with pytest.raises(StoreLockedError, match="another skalign"):
            translate(path, store.address, into="new")
    n = translate(path, store.address, into="new", batch_size=40)
    assert int(n) == M - 80 and n.resumed_from == 80
    got = store.read("new")
    want = model.transform(old)
    V = np.stack([got[k][0] for k in store.keys])
    np.testing.assert_allclose(V, want, atol=1e-5, rtol=0)
    assert {got[k][1]["skalign_vector_new"] for k in store.keys} == {
        f"translated:{model_fingerprint(model)}"}
    after = store.read(store.old)
    assert all(after[k][0].tobytes() == before[k][0].tobytes() for k in store.keys)
    assert int(translate(path, store.address, into="new")) == 0  # done: nothing to write
    other = ProcrustesAligner().fit(old[::-1], new)
    with pytest.raises(StoreError, match="another model"):
        translate(other, store.address, into="new")


def model_fingerprint(model):
    from skalign._stores.journal import model_fingerprint as fp

    return fp(model)


@pytest.mark.parametrize("engine", kinds(
    "--into FIELD", "test_into.py::test_search_field_and_info_show_both_fields"))
def test_search_field_and_info_show_both_fields(engine, corpus, tmp_path, request, capsys,
                                                monkeypatch):
    """The command line: migrate --into new and --continue, search --field new finds each
    query's own row through the new field (and writes back there), info shows both fields
    and the old field's drop command."""
    from skalign.cli import main

    texts, old, new = corpus
    store = make(engine, tmp_path, corpus, request)
    spec = lookup_module(corpus, tmp_path, monkeypatch)
    base = ["migrate", store.address, "--into", "new", "--encoder", spec, "--text-field",
            "text", "--quiet"]
    assert main(base + ["--budget", "40"]) == 0
    assert "(field new): 40 of 160 rows encoded" in capsys.readouterr().out
    assert main(base + ["--budget", "50", "--continue"]) == 0
    capsys.readouterr()
    queries = tmp_path / "q.txt"
    queries.write_text("\n".join(texts[:20]) + "\n")
    results = tmp_path / "r.jsonl"
    assert main(["search", store.address, "--field", "new", "--queries", str(queries),
                 "--encoder", spec, "--text-field", "text", "-k", "3", "--candidates", "30",
                 "--output", str(results), "--quiet"]) == 0
    hits = [json.loads(line) for line in results.read_text().splitlines()]
    top = [h["ids"][0] for h in hits]
    assert top == store.keys[:20]  # each query's own text's row, through the new field
    assert main(["info", store.address]) == 0
    said = capsys.readouterr().out
    assert f"vector fields: {store.old} (384-d), new (768-d, added by skalign)" in said
    assert f"field new: migrated from {store.old}" in said and "0 not written" in said
    assert f"drop {store.old} yourself" in said
    assert main(["info", store.address, "--json"]) == 0
    fields = json.loads(capsys.readouterr().out)["fields"]
    assert [(f["field"], f["added"]) for f in fields] == [(store.old, False), ("new", True)]
    assert fields[1]["vectors"]["encoded"] >= 90 and fields[1]["vectors"]["empty"] == 0


@pytest.mark.parametrize("engine", kinds(
    "--into FIELD", "test_into.py::test_migrate_into_killed_then_the_same_command_finishes"))
def test_migrate_into_killed_then_the_same_command_finishes(engine, corpus, tmp_path, request,
                                                            monkeypatch):
    """migrate --into SIGKILLed after every row is written, before the step's end (its stamp
    still says "filling"; a file store's rows still beside it): --continue is refused, the
    same command finishes the step without encoding a text again or rewriting a row, and the
    field equals the one an uninterrupted step writes."""
    store = make(engine, tmp_path, corpus, request)
    spec = lookup_module(corpus, tmp_path, monkeypatch)
    cmd = [sys.executable, "-m", "skalign", "migrate", store.address, "--into", "new",
           "--encoder", spec, "--text-field", "text", "--budget", "40", "--quiet", "--json"]
    env = {**os.environ, "SKALIGN_TEST_KILL_AT": "into-batch-0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    del env["SKALIGN_TEST_KILL_AT"]
    refused = subprocess.run(cmd + ["--continue"], env=env, capture_output=True, text=True,
                             timeout=300)  # a process of its own: Qdrant's local mode
    assert refused.returncode == 2 and "interrupted; run the same" in refused.stderr
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # the texts come from the encode cache, every row was written: nothing written again
    assert report["n_encoded"] == 0 and report["translated"] == 0
    assert report["n_encoded_rows"] == 40
    got = store.read("new")
    texts, old, new = corpus
    want = {k: v for k, v in zip(store.keys, new)}
    exact = [k for k in store.keys if got[k][1]["skalign_vector_new"].startswith("encoded:")]
    assert len(exact) == 40 and all(got[k][0] is not None for k in store.keys)
    V, W = np.stack([got[k][0] for k in exact]), np.stack([want[k] for k in exact])
    # the encoder's vectors (unit length where the store ranks by inner product: auto)
    np.testing.assert_allclose(V / np.linalg.norm(V, axis=1, keepdims=True),
                               W / np.linalg.norm(W, axis=1, keepdims=True), atol=1e-5, rtol=0)
    more = subprocess.run(cmd[:-4] + ["--budget", "30", "--continue", "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert more.returncode == 0 and json.loads(more.stdout)["n_encoded_rows"] == 70


def test_a_field_added_by_a_run_killed_before_its_stamp_is_taken_as_new(corpus, tmp_path,
                                                                        request):
    """pgvector adds the column, then stamps it: a run killed in between leaves a column of
    skalign's without a stamp and without a row written, which the next run takes as its
    own (a column with rows written and no stamp is refused)."""
    from skalign import ProcrustesAligner
    from skalign._stores.address import parse_address
    from skalign._stores.registry import engine

    texts, old, new = corpus
    store = make("pgvector", tmp_path, corpus, request)
    address = parse_address(store.address)
    eng = engine(address)
    eng.add_field(address, "new", new.shape[1], "emb")
    eng.add_field(address, "other", new.shape[1], "emb")
    assert eng.field_state(address, "new") == new.shape[1]
    assert eng.read_field_stamp(address, "new") is None
    _, enc = encoder_for(corpus, tmp_path)
    first = migrate(store.address, None, enc, 40, text_field="text", into="new")
    assert first.n_encoded_rows == 40 and first.translated == M - 40
    model = ProcrustesAligner().fit(old, new)
    assert int(translate(model, store.address, into="other", batch_size=100)) == M
    eng.write_field_stamp(address, "other", {})  # rows written, the stamp lost
    with pytest.raises(StoreError, match="stamp is missing"):
        translate(model, store.address, into="other")


@pytest.mark.parametrize("engine", ["parquet", "lance", "pgvector"])
def test_a_live_store_asked_for_the_new_column_reads_the_field(engine, corpus, tmp_path,
                                                               request):
    """A live store opened on the new column by its name (``search --column new``, not
    ``--field``) is the field: its rows' marks are the field's, and a write-back marks them
    there, never under the old field's provenance key."""
    import dataclasses

    from skalign import ProcrustesAligner
    from skalign._stores import open_live
    from skalign._stores.address import parse_address
    from skalign._stores.live import translated_mark

    texts, old, new = corpus
    store = make(engine, tmp_path, corpus, request)
    model = ProcrustesAligner().fit(old, new)
    translate(model, store.address, into="new")
    address = dataclasses.replace(parse_address(store.address), column=None)
    mark = translated_mark(model_fingerprint(model))
    with open_live(address, column="new", text_field="text") as live:
        rows = live.fetch(store.keys[:3], text_field="text")
        assert rows.provenance == [mark] * 3 and rows.vectors.shape == (3, new.shape[1])
        assert live.write_back(store.keys[:1], new[:1], ["encoded:x:text:" + "0" * 16],
                               [mark]).all()
    with open_live(address, column=store.old) as live:  # the old field's own marks: none
        assert live.fetch(store.keys[:3]).provenance == [None] * 3
