"""The engines' live stores (Chroma's persistent client, Qdrant's local mode, PostgreSQL with
pgvector) against the real engines, no mocks.

Each store is made and read back with the engine's own client: ``top_k`` equals a brute-force
ranking of the stored vectors (and its scores :func:`~skalign._stores.live.similarity`'s), for
every metric; ``fetch`` returns the rows' texts, vectors and provenance in the order asked;
``write_back`` changes the vector and the provenance and nothing else (ids, documents,
metadata, payloads, other named vectors, other columns); a reader thread that reads the rows
throughout a run of write-backs never sees a row whose vector and provenance disagree; hostile
names and ids (quotes, semicolons) stay data.
"""

import tempfile
import threading

import numpy as np
import pytest

from skalign._stores import open_live
from skalign._stores.live import PROVENANCE_KEY, similarity
from skalign.exceptions import StoreError, StoreNotFoundError

N, D = 300, 16
METRICS = ("cosine", "ip", "l2")
HOSTILE = 'we"ird; DROP TABLE victim; --'


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(7).normal(size=(N, D)).astype(np.float32)


def _sql(template, *names):
    from psycopg import sql

    return sql.SQL(template).format(*(sql.Identifier(n) for n in names))


class Chroma:
    """Records ``id{i}`` with the document ``doc {i}`` and metadata ``{"k": i, "title":
    "t{i}"}``."""

    name, rows, written = "chroma", N, 200

    def __init__(self, root):
        pytest.importorskip("chromadb")
        self.folder = root / "chroma"

    def client(self):
        import chromadb

        return chromadb.PersistentClient(path=str(self.folder))

    def make(self, X, metric, name="src"):
        col = self.client().create_collection(name, metadata={"hnsw:space": metric},
                                              embedding_function=None)
        col.add(ids=[self.key(i) for i in range(len(X))], embeddings=X,
                documents=[f"doc {i}" for i in range(len(X))],
                metadatas=[{"k": i, "title": f"t{i}"} for i in range(len(X))])
        return f"chroma:{self.folder}/{name}"

    def key(self, i):
        return f"id{i}"

    def read(self, name="src"):
        """``{id: (vector, everything else, provenance)}``, read with chromadb."""
        got = self.client().get_collection(name).get(include=["embeddings", "documents",
                                                                "metadatas"])
        out = {}
        for i, e, doc, meta in zip(got["ids"], got["embeddings"], got["documents"],
                                   got["metadatas"]):
            meta = dict(meta)
            mark = meta.pop(PROVENANCE_KEY, None)
            out[i] = (np.asarray(e, np.float32), (doc, meta), mark)
        return out


class Qdrant:
    """Points ``0..n-1`` with the named vectors ``text`` (the metric's) and ``title`` and the
    payload ``{"text": "doc {i}", "k": i}``. The local mode commits each point in an SQLite
    transaction of its own (tens of milliseconds on this disk): fewer points."""

    name, rows, written = "qdrant", 100, 40
    DISTANCES = {"cosine": "COSINE", "ip": "DOT", "l2": "EUCLID"}

    def __init__(self, root):
        pytest.importorskip("qdrant_client")
        self.folder = root / "qdrant"
        self.folder.mkdir(exist_ok=True)

    def client(self):
        from skalign._stores.address import parse_address
        from skalign._stores.qdrant.store import _client

        return _client(parse_address(f"qdrant:{self.folder}/x"))

    def make(self, X, metric, name="src"):
        from qdrant_client import models

        c = self.client()
        c.create_collection(name, vectors_config={
            "text": models.VectorParams(size=X.shape[1],
                                        distance=getattr(models.Distance,
                                                         self.DISTANCES[metric])),
            "title": models.VectorParams(size=2, distance=models.Distance.DOT)})
        c.upsert(name, points=models.Batch(
            ids=list(range(len(X))),
            vectors={"text": X.tolist(), "title": [[1.0, float(i)] for i in range(len(X))]},
            payloads=[{"text": f"doc {i}", "k": i} for i in range(len(X))]))
        return f"qdrant:{self.folder}/{name}?vector=text"

    def key(self, i):
        return i

    def read(self, name="src"):
        points, _ = self.client().scroll(name, limit=10 * self.rows, with_payload=True,
                                         with_vectors=True)
        out = {}
        for p in points:
            payload = dict(p.payload)
            mark = payload.pop(PROVENANCE_KEY, None)
            out[p.id] = (np.asarray(p.vector["text"], np.float32), (payload, p.vector["title"]),
                         mark)
        return out


class Pg:
    """Rows ``id = 3 i + 1`` (the primary key) with ``text``, ``meta jsonb`` and ``emb``, and an
    HNSW index of the metric's operator class."""

    name, rows, written = "pgvector", N, 200
    OPCLASS = {"cosine": "vector_cosine_ops", "ip": "vector_ip_ops", "l2": "vector_l2_ops"}

    def __init__(self, base):
        self.base = base

    def conn(self):
        import psycopg
        from pgvector.psycopg import register_vector

        conn = psycopg.connect(self.base, autocommit=True)
        register_vector(conn)
        return conn

    def make(self, X, metric, name="src", column="emb", text="text", index=True):
        from urllib.parse import quote

        from psycopg.types.json import Jsonb

        with self.conn() as conn:
            conn.execute(_sql("DROP TABLE IF EXISTS {}", name))
            conn.execute(_sql(f"CREATE TABLE {{}} (id bigint PRIMARY KEY, {{}} text, meta jsonb, "
                              f"{{}} vector({X.shape[1]}))", name, text, column))
            with conn.cursor() as cur, cur.copy(_sql("COPY {} (id, {}, meta, {}) FROM STDIN",
                                                     name, text, column)) as copy:
                for i, x in enumerate(X):
                    copy.write_row([self.key(i), f"doc {i}", Jsonb({"k": i}), x])
            if index:
                conn.execute(_sql(f"CREATE INDEX ON {{}} USING hnsw ({{}} {self.OPCLASS[metric]})",
                                  name, column))
        return f"{self.base}&table={quote(name, safe='')}&column={quote(column, safe='')}"

    def key(self, i):
        return 3 * i + 1

    def read(self, name="src", column="emb"):
        with self.conn() as conn:
            rows = conn.execute(_sql("SELECT * FROM {}", name)).fetchall()
            names = [c.name for c in conn.execute(_sql("SELECT * FROM {} LIMIT 0", name))
                     .description]
        out = {}
        for r in rows:
            row = dict(zip(names, r))
            vector = row.pop(column).to_numpy()
            mark = row.pop(PROVENANCE_KEY, None)
            out[row["id"]] = (np.asarray(vector, np.float32), row, mark)
        return out


class Vec:
    """A sqlite-vec ``vec0`` table of ``root/vec.db``: rowids ``3 i + 1``, the vector ``emb``
    (the metric's ``distance_metric``), the text metadata column ``text``, the integer ``n`` and
    the auxiliary ``+meta``; its marks are read from skalign's table beside it."""

    name, rows, written = "sqlite-vec", N, 200
    metrics = ("cosine", "l2")  # sqlite-vec has no inner-product distance

    def __init__(self, root):
        pytest.importorskip("sqlite_vec")
        self.path = root / "vec.db"

    def conn(self):
        from store_backends import SqliteVec

        return SqliteVec.connect(self.path)

    def make(self, X, metric, name="src"):
        from urllib.parse import quote

        conn = self.conn()
        table = '"' + name.replace('"', '""') + '"'
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING vec0(emb float[{X.shape[1]}] "
                     f"distance_metric={metric}, text text, n integer, +meta text)")
        with conn:
            conn.executemany(f"INSERT INTO {table} (rowid, emb, text, n, meta) VALUES "
                             "(?, ?, ?, ?, ?)", ((self.key(i), x.astype("<f4").tobytes(),
                                                  f"doc {i}", i, f'{{"k": {i}}}')
                                                 for i, x in enumerate(X)))
        conn.close()
        return f"sqlite:{self.path}?table={quote(name, safe='')}"

    def key(self, i):
        return 3 * i + 1

    def read(self, name="src"):
        conn = self.conn()
        table = '"' + name.replace('"', '""') + '"'
        marks = {}
        tid = conn.execute(f"SELECT value FROM \"{name.replace(chr(34), 2 * chr(34))}_info\" "
                           "WHERE key = 'skalign_id'").fetchone()
        if tid is not None and conn.execute("SELECT 1 FROM sqlite_master WHERE name = "
                                            "'skalign_marks'").fetchone():
            marks = dict(conn.execute("SELECT id, mark FROM skalign_marks WHERE tid = ? AND "
                                      "key = ?", (tid[0], PROVENANCE_KEY)))
        out = {r[0]: (np.frombuffer(r[1], "<f4").copy(), tuple(r[2:]), marks.get(r[0]))
               for r in conn.execute(f"SELECT rowid, emb, text, n, meta FROM {table}")}
        conn.close()
        return out


class Milvus:
    """A Milvus Lite database ``root/milvus.db``: entities ``0..n-1`` (odd ones in the
    partition ``odd``) with the field ``text`` (``doc {i}``), the dynamic field ``k``, the
    vector ``emb`` under a FLAT index of the metric's and a second vector ``title``."""

    name, rows, written = "milvus", N, 200
    METRIC = {"cosine": "COSINE", "ip": "IP", "l2": "L2"}

    def __init__(self, root):
        pytest.importorskip("milvus_lite")
        self.path = root / "milvus.db"

    def client(self):
        from pymilvus import MilvusClient

        return MilvusClient(str(self.path))

    def make(self, X, metric, name="src"):
        from pymilvus import DataType, MilvusClient

        c = self.client()
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        s.add_field("id", DataType.INT64, is_primary=True)
        s.add_field("text", DataType.VARCHAR, max_length=64)
        s.add_field("emb", DataType.FLOAT_VECTOR, dim=X.shape[1])
        s.add_field("title", DataType.FLOAT_VECTOR, dim=2)
        index = c.prepare_index_params()
        index.add_index("emb", index_type="FLAT", metric_type=self.METRIC[metric])
        index.add_index("title", index_type="FLAT", metric_type="L2")
        c.create_collection(name, schema=s, index_params=index)
        c.create_partition(name, "odd")
        for part in ("_default", "odd"):
            c.insert(name, [{"id": i, "text": f"doc {i}", "emb": X[i].tolist(),
                             "title": [1.0, float(i)], "k": i}
                            for i in range(len(X)) if (i % 2 == 1) == (part == "odd")],
                     partition_name=part)
        return f"milvus:{self.path}/{name}?vector=emb"

    def key(self, i):
        return i

    def read(self, name="src"):
        c = self.client()
        out = {}
        for part in c.list_partitions(name):
            for e in c.query(name, filter="id >= 0", output_fields=["*"], limit=10 * self.rows,
                             partition_names=[part]):
                mark = e.pop(PROVENANCE_KEY, None)
                out[e["id"]] = (np.asarray(e.pop("emb"), np.float32), (part, e), mark)
        return out


class Duck:
    """A table of the DuckDB file ``root/duck.duckdb``: ``id = 3 i + 1`` (the primary key),
    ``text``, ``meta JSON`` and ``emb FLOAT[16]`` under an HNSW index of the metric's."""

    name, rows, written = "duckdb", N, 200
    VSS = {"cosine": "cosine", "ip": "ip", "l2": "l2sq"}

    def __init__(self, root):
        pytest.importorskip("duckdb_extension_vss")
        self.path = root / "duck.duckdb"

    def conn(self):
        from store_backends import DuckDB

        return DuckDB.connect(self.path)

    def make(self, X, metric, name="src"):
        from urllib.parse import quote

        import pyarrow as pa

        conn = self.conn()
        table = '"' + name.replace('"', '""') + '"'
        conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, text VARCHAR, meta JSON, "
                     f"emb FLOAT[{X.shape[1]}])")
        rows = pa.table({"id": [self.key(i) for i in range(len(X))],
                         "text": [f"doc {i}" for i in range(len(X))],
                         "meta": [f'{{"k": {i}}}' for i in range(len(X))],
                         "emb": pa.FixedSizeListArray.from_arrays(
                             pa.array(np.asarray(X, np.float32).reshape(-1)), X.shape[1])})
        conn.register("rows", rows)
        conn.execute(f"INSERT INTO {table} SELECT * FROM rows")
        conn.unregister("rows")
        conn.execute(f"CREATE INDEX by_emb ON {table} USING HNSW (emb) WITH (metric = "
                     f"'{self.VSS[metric]}')")
        conn.close()
        return f"duckdb:{self.path}?table={quote(name, safe='')}"

    def key(self, i):
        return 3 * i + 1

    def read(self, name="src"):
        conn = self.conn()
        table = '"' + name.replace('"', '""') + '"'
        names = [c[0] for c in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
        out = {}
        for r in conn.execute(f"SELECT * FROM {table}").fetchall():
            row = dict(zip(names, r))
            vector = np.asarray(row.pop("emb"), np.float32)
            mark = row.pop(PROVENANCE_KEY, None)
            out[row["id"]] = (vector, row, mark)
        conn.close()
        return out


@pytest.fixture(params=["chroma", "qdrant", "pgvector", "sqlite-vec", "milvus", "duckdb"])
def engine(request, tmp_path):
    if request.param == "pgvector":
        return Pg(request.getfixturevalue("pg_base"))
    return {"chroma": Chroma, "qdrant": Qdrant, "sqlite-vec": Vec,
            "milvus": Milvus, "duckdb": Duck}[request.param](tmp_path)


def _stored(engine, X, metric):
    """What the engine keeps of ``X``: directions for Qdrant's cosine."""
    if engine.name == "qdrant" and metric == "cosine":
        return X / np.linalg.norm(X, axis=1, keepdims=True)
    return X


@pytest.mark.parametrize("metric", METRICS)
def test_top_k_equals_brute_force(engine, X, metric):
    if metric not in getattr(engine, "metrics", METRICS):
        pytest.skip(f"{engine.name} has no {metric} distance")
    X = X[:engine.rows]
    address = engine.make(X, metric)
    Q = np.random.default_rng(1).normal(size=(12, D)).astype(np.float32)
    with open_live(address) as store:
        assert (store.kind, store.metric, store.dim, store.n_rows) == (engine.name, metric, D,
                                                                       len(X))
        S = similarity(Q, _stored(engine, X, metric), metric)
        # k above pgvector's default hnsw.ef_search (40): only raised, all k rows come back
        for k in (1, 10, 60):
            ids, scores = store.top_k(Q, k)
            assert len(ids) == len(scores) == len(Q)
            for q in range(len(Q)):
                best = np.argsort(-S[q], kind="stable")[:k]
                assert ids[q] == [engine.key(i) for i in best]
                np.testing.assert_allclose(scores[q], S[q][best], rtol=1e-4, atol=1e-4)
        ids, _ = store.top_k(Q[:2], len(X) + 50)  # more than the store holds: every row, once
        assert [sorted(map(str, i)) for i in ids] == [sorted(str(engine.key(i))
                                                             for i in range(len(X)))] * 2


def test_fetch_texts_vectors_provenance(engine, X):
    X = X[:engine.rows]
    address = engine.make(X, "cosine")
    order = [7, 0, len(X) - 1, 42]
    with open_live(address) as store:
        rows = store.fetch([engine.key(i) for i in order])
        assert rows.ids == [engine.key(i) for i in order]
        assert rows.texts == [f"doc {i}" for i in order]
        assert rows.provenance == [None] * len(order)
        assert rows.vectors.dtype == np.float32 and rows.vectors.shape == (len(order), D)
        np.testing.assert_allclose(rows.vectors, _stored(engine, X, "cosine")[order], rtol=1e-5)
        if engine.name == "chroma":
            assert store.fetch([engine.key(3)], text_field="title").texts == ["t3"]
        # a number (metadata, payload) or a jsonb column is not a text: refused by its name
        other = {"chroma": "k", "qdrant": "k", "pgvector": "meta", "sqlite-vec": "n",
                 "milvus": "k", "duckdb": "meta"}[
            engine.name]
        with pytest.raises(StoreError, match=f"'{other}'.*not text"):
            store.fetch([engine.key(3)], text_field=other)
        empty = store.fetch([])
        assert empty.ids == [] and empty.vectors.shape == (0, D)
        with pytest.raises(StoreNotFoundError, match="no row with id"):
            store.fetch([engine.key(1), engine.key(len(X) + 5)])
        assert len(store.ids()) == len(X)
        assert sorted(map(str, store.ids())) == sorted(str(engine.key(i))
                                                       for i in range(len(X)))


def test_write_back_changes_only_vector_and_provenance(engine, X):
    X = X[:engine.rows]
    address = engine.make(X, "l2")
    before = engine.read()
    chosen = [5, 17, len(X) - 1]
    new = np.random.default_rng(2).normal(size=(len(chosen), D)).astype(np.float32)
    with open_live(address) as store:
        store.write_back([engine.key(i) for i in chosen], new, "encoded:fp1")
        rows = store.fetch([engine.key(i) for i in chosen] + [engine.key(6)])
        assert rows.provenance == ["encoded:fp1"] * 3 + [None]
        # an encoded mark of another form than skalign's binds no text: never "encoded"
        assert not rows.encoded_by("fp1", None).any()
        np.testing.assert_allclose(rows.vectors[:3], new, rtol=1e-5)
        # the index finds the new vectors
        ids, _ = store.top_k(new, 1)
        assert ids == [[engine.key(i)] for i in chosen]
        # written again: the new mark replaces the old
        store.write_back([engine.key(5)], X[[5]], "encoded:fp2")
        assert store.fetch([engine.key(5)]).provenance == ["encoded:fp2"]
    after = engine.read()
    assert set(after) == set(before)
    for key, (vector, rest, mark) in after.items():
        assert rest == before[key][1]  # ids, documents, metadata, payloads, other columns
        if key in (engine.key(17), engine.key(len(X) - 1)):
            assert mark == "encoded:fp1"
        elif key == engine.key(5):
            assert mark == "encoded:fp2"
            np.testing.assert_allclose(vector, X[5], rtol=1e-5)
        else:
            assert mark is None
            np.testing.assert_array_equal(vector, before[key][0])


def test_concurrent_reader_never_sees_a_torn_row(engine, X):
    """Round ``r`` writes ``X[i] + r`` with the mark ``encoded:r{r}`` to the first rows, while
    a thread with a store of its own reads them: every pair it sees is the original vector
    without a mark or round ``r``'s vector with round ``r``'s mark."""
    X = X[:engine.rows]
    address = engine.make(X, "l2")
    m = engine.written
    keys = [engine.key(i) for i in range(m)]
    rounds, seen, torn, reads = 12, set(), [], [0]
    done = threading.Event()

    def reader():
        with open_live(address) as mine:
            while not done.is_set() or reads[0] < 2:
                rows = mine.fetch(keys)
                for i, vector, mark in zip(range(m), rows.vectors, rows.provenance):
                    r = 0 if mark is None else int(mark.split(":r")[1])
                    seen.add(r)
                    if not np.allclose(vector, X[i] + r, atol=1e-4):
                        torn.append((i, mark))
                reads[0] += 1

    thread = threading.Thread(target=reader)
    with open_live(address) as store:
        thread.start()
        for r in range(1, rounds + 1):
            store.write_back(keys, X[:m] + r, f"encoded:r{r}")
        done.set()
        thread.join()
    assert not torn, torn[:5]
    assert reads[0] >= 2 and len(seen) >= 2  # the reads overlapped the write-backs


@pytest.mark.parametrize("bad, match", [
    (np.ones((2, D + 1), np.float32), "have 17 dimensions but the store's vectors have 16"),
    (np.full((2, D), np.nan, np.float32), "row 0 holds a value a float32 cannot hold"),
    (np.ones((2, 3, D), np.float32), "must be a 2-D array"),
])
def test_bad_queries_and_vectors_are_refused(engine, X, bad, match):
    X = X[:engine.rows]
    address = engine.make(X, "cosine")
    with open_live(address) as store:
        with pytest.raises(StoreError, match=match):
            store.top_k(bad, 3)
        with pytest.raises(StoreError, match=match):
            store.write_back([engine.key(0), engine.key(1)], bad, "encoded:x")
        with pytest.raises(ValueError, match="k must be a positive integer"):
            store.top_k(X[:1], 0)
        with pytest.raises(StoreError, match="2 ids but 1 vectors"):
            store.write_back([engine.key(0), engine.key(1)], X[:1], "encoded:x")
        with pytest.raises(StoreError, match="given twice"):
            store.write_back([engine.key(0), engine.key(0)], X[:2], "encoded:x")
        with pytest.raises(StoreError, match="provenance mark must be non-empty text"):
            store.write_back([engine.key(0)], X[:1], "")
        with pytest.raises(StoreNotFoundError, match="no row with id"):
            store.write_back([engine.key(0), engine.key(len(X) + 1)], X[:2], "encoded:x")
        with pytest.raises(StoreError, match="take no option"):
            open_live(address, id_field="x")
    # nothing was written by the refused calls
    assert all(mark is None for _, _, mark in engine.read().values())


def test_chroma_hostile_ids_stay_data(tmp_path, X):
    engine = Chroma(tmp_path)
    col = engine.client().create_collection("src", metadata={"hnsw:space": "cosine"},
                                            embedding_function=None)
    ids = [f"{HOSTILE} {i}" for i in range(20)]
    col.add(ids=ids, embeddings=X[:20], documents=[f"doc {i}" for i in range(20)])
    with open_live(f"chroma:{engine.folder}/src") as store:
        got, _ = store.top_k(X[:3], 1)
        assert got == [[ids[0]], [ids[1]], [ids[2]]]
        store.write_back([ids[4]], X[[5]], f"encoded:{HOSTILE}")
        rows = store.fetch([ids[4]])
        assert rows.texts == ["doc 4"] and rows.provenance == [f"encoded:{HOSTILE}"]
        # a metadata key of that name: the record has none
        assert store.fetch([ids[4]], text_field=HOSTILE).texts == [None]
        with pytest.raises(StoreError, match="Chroma ids are text"):
            store.fetch([4])


def test_qdrant_refuses_what_it_cannot_search(tmp_path, X):
    from qdrant_client import models

    engine = Qdrant(tmp_path)
    engine.client().create_collection("man", vectors_config=models.VectorParams(
        size=D, distance=models.Distance.MANHATTAN))
    with pytest.raises(StoreError, match="needs Cosine, Dot or Euclid"):
        open_live(f"qdrant:{engine.folder}/man")
    address = engine.make(X, "cosine")
    with pytest.raises(StoreError, match="choose one with \\?vector=NAME"):
        open_live(address.split("?")[0])
    with open_live(address.split("?")[0], column="text") as store:
        assert store.vector == "text"
        with pytest.raises(StoreError, match="not a Qdrant point id"):
            store.fetch(["not-a-uuid"])


def test_pg_hostile_names_stay_data(pg_base, X):
    engine = Pg(pg_base)
    with engine.conn() as conn:
        conn.execute("DROP TABLE IF EXISTS victim")
        conn.execute("CREATE TABLE victim (x int)")
    column, text = f"e{HOSTILE}", f"t{HOSTILE}"
    address = engine.make(X, "ip", name=HOSTILE, column=column, text=text)
    with open_live(address, text_field=text) as store:
        assert store.metric == "ip"
        ids, _ = store.top_k(X[:2], 3)
        assert ids[0][0] == engine.key(int(np.argmax(X @ X[0])))
        store.write_back([engine.key(3)], X[[4]], f"encoded:{HOSTILE}")
        rows = store.fetch([engine.key(3)])
        assert rows.texts == ["doc 3"] and rows.provenance == [f"encoded:{HOSTILE}"]
        with pytest.raises(StoreError, match="no column 'text'"):
            store.fetch([engine.key(3)], text_field="text")
    with engine.conn() as conn:
        assert conn.execute("SELECT count(*) FROM victim").fetchone() == (0,)
        # a text primary key whose values are SQL
        conn.execute("DROP TABLE IF EXISTS tk")
        conn.execute(f"CREATE TABLE tk (id text PRIMARY KEY, emb vector({D}))")
        for i in range(10):
            conn.execute("INSERT INTO tk VALUES (%s, %s)", (f"{HOSTILE}{i}", X[i]))
    with open_live(f"{pg_base}&table=tk") as store:
        key = f"{HOSTILE}3"
        assert store.top_k(X[[3]], 1)[0] == [[key]]
        store.write_back([key], X[[0]], "encoded:t")
        assert store.fetch([key]).provenance == ["encoded:t"]
    with engine.conn() as conn:
        assert conn.execute("SELECT count(*) FROM victim").fetchone() == (0,)


def test_pg_metric_without_index_and_keys(pg_base, X):
    engine = Pg(pg_base)
    address = engine.make(X, "l2", name="plain", index=False)
    Q = X[:4] + 0.1
    with open_live(address, metric="l2") as store:  # an exact scan
        ids, _ = store.top_k(Q, 5)
        S = similarity(Q, X, "l2")
        assert ids == [[engine.key(i) for i in np.argsort(-S[q])[:5]] for q in range(4)]
    with open_live(address) as store:
        assert store.metric == "cosine"
    indexed = engine.make(X, "l2", name="indexed")
    with pytest.raises(StoreError, match="ranks by l2, not cosine"):
        open_live(indexed, metric="cosine")
    with pytest.raises(StoreError, match="metric 'dot' is not one of"):
        open_live(address, metric="dot")
    with engine.conn() as conn:
        conn.execute("DROP TABLE IF EXISTS nokey")
        conn.execute(f"CREATE TABLE nokey (id int, emb vector({D}))")
        conn.execute("DROP TABLE IF EXISTS twokeys")
        conn.execute(f"CREATE TABLE twokeys (a int, b int, emb vector({D}), PRIMARY KEY (a, b))")
    with pytest.raises(StoreError, match="has no primary key"):
        open_live(f"{pg_base}&table=nokey")
    with pytest.raises(StoreError, match="a primary key of several columns"):
        open_live(f"{pg_base}&table=twokeys")


@pytest.mark.parametrize("engine", ["pgvector", "duckdb"], indirect=True)
@pytest.mark.parametrize("read", ["fetch", "sample_norms"])
def test_a_first_write_back_between_the_mark_check_and_the_read(engine, X, monkeypatch, read):
    """The first write-back adds the provenance column. One landing just after a reader looked
    for that column, before its read (CI caught it once as a torn row), must not show the
    reader new vectors without their marks: the reader sees the old pairs, or reads again."""
    import skalign._stores.duckdb.live as duck

    X = X[:engine.rows]
    address = engine.make(X, "l2")
    ids = [engine.key(i) for i in range(len(X))]
    landed = []

    def then_a_write():
        if not landed:
            landed.append(True)
            with open_live(address) as writer:
                writer.write_back(ids[:5], X[:5] + 1, "encoded:r1")

    with open_live(address) as reader:
        if engine.name == "duckdb":
            real = duck.columns_of
            monkeypatch.setattr(duck, "columns_of",
                                lambda cur, name: (real(cur, name), then_a_write())[0])
        else:
            real = reader._mark_column
            monkeypatch.setattr(reader, "_mark_column", lambda: (real(), then_a_write())[0])
        if read == "fetch":
            rows = reader.fetch(ids)
            norms, marks = np.linalg.norm(rows.vectors, axis=1), rows.provenance
        else:
            norms, marks = reader.sample_norms(len(X))
        monkeypatch.undo()
        assert landed
        old = np.linalg.norm(X, axis=1)
        new = np.linalg.norm(X[:5] + 1, axis=1)
        got = {(round(float(n), 4), m) for n, m in zip(norms, marks)}
        # each row's old length without a mark or its new one with round 1's mark
        allowed = {(round(float(n), 4), None) for n in old} \
            | {(round(float(n), 4), "encoded:r1") for n in new}
        assert got <= allowed, sorted(got - allowed)[:5]
        after = reader.fetch(ids[:5])
        np.testing.assert_allclose(after.vectors, X[:5] + 1, atol=1e-5)
        assert after.provenance == ["encoded:r1"] * 5
