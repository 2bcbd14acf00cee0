"""Row provenance that binds what a vector was computed from, and writers that compare and set.

A row is *encoded* only when its mark names the encoder, the text field and a digest of the text
it now holds; a row whose text changed is *stale*. Every writer that shares rows (the searcher's
write-back, ``migrate --continue``) writes a row only where its provenance is still the value it
read. Checked on every live kind (compare-and-set, the key's owner) and, with an application
editing texts, a searcher writing back and ``--continue`` running at once, on PostgreSQL, Chroma,
Qdrant and a file store: at the end every row marked encoded holds exactly the encoder's vector
of its current text, and no encoded vector was lost.
"""

import hashlib
import os
import tempfile
import threading
import time

import numpy as np
import pytest
from test_search import backend  # noqa: F401  (the fixture: a store of every live kind)

from skalign._migrate.migration import count_provenance, migrate_store
from skalign._stores import open_live
from skalign._stores.live import (
    encoded_mark,
    field_token,
    mark_state,
    parse_mark,
    text_digest,
    translated_mark,
)
from skalign.encoders import CachedEncoder, CallableEncoder
from skalign.exceptions import StoreError
from skalign.search import Searcher

D = 16


def hashed(text):
    """The stand-in encoder's vector of ``text``: a function of the text alone."""
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).normal(size=D).astype(np.float32)


class HashEncoder:
    fingerprint = "hash-enc-v1"

    def __init__(self):
        self.calls = 0

    def __call__(self, texts):
        self.calls += len(texts)
        return np.stack([hashed(t) for t in texts])


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ------------------------------------------------------------------------------------ marks
def test_a_mark_binds_encoder_field_and_text():
    mark = encoded_mark("callable:ab:cd", "ti:tle\x1b[2J", "héllo")
    parsed = parse_mark(mark)
    assert parsed.fingerprint == "callable:ab:cd" and parsed.digest == text_digest("héllo")
    assert "\x1b" not in mark and parsed.field == field_token("ti:tle\x1b[2J")
    assert mark_state(mark, "callable:ab:cd", "ti:tle\x1b[2J", "héllo") == "encoded"
    assert mark_state(mark, None, "ti:tle\x1b[2J", "héllo") == "encoded"
    assert mark_state(mark, "callable:ab:cd", "ti:tle\x1b[2J", "hello") == "stale"  # text
    assert mark_state(mark, "callable:ab:cd", "title", "héllo") == "stale"  # field
    assert mark_state(mark, "other", "ti:tle\x1b[2J", "héllo") == "stale"  # encoder
    assert mark_state(mark, "callable:ab:cd", "ti:tle\x1b[2J", None) == "stale"  # no text
    assert mark_state("encoded:fp", "fp", None, "x") == "stale"  # an earlier version's
    assert mark_state(translated_mark("m"), "fp", None, "x") == "translated"
    assert mark_state(None, "fp", None, "x") == "translated"
    assert parse_mark("encoded:fp:f:" + "0" * 15) is None and parse_mark(5) is None


# ------------------------------------------------------------------- every live kind
def test_write_back_compares_and_sets(backend, tmp_path):  # noqa: F811
    """Rows whose provenance is not the expected one are left as they are, on every kind."""
    X = np.random.default_rng(1).normal(size=(60, D)).astype(np.float32)
    address = backend.make(X, "l2")
    keys = [backend.key(i) for i in range(4)]
    first = encoded_mark("e1", None, "a")
    with open_live(address, **backend.options) as store:
        written = store.write_back(keys, X[:4] + 1, first, expected=[None] * 4)
        assert written.tolist() == [True] * 4
        # another writer read the rows before that write: it expected no mark
        again = store.write_back(keys[:2], X[:2] + 2, encoded_mark("e2", None, "b"),
                                 expected=[None, None])
        assert again.tolist() == [False, False]
        # a writer that read the current mark wins for its row only
        mixed = store.write_back(keys[2:], X[2:4] + 3, translated_mark("m"),
                                 expected=[first, None])
        assert mixed.tolist() == [True, False]
        rows = store.fetch(keys)
    assert rows.provenance == [first, first, translated_mark("m"), first]
    want = np.vstack([X[:2] + 1, X[2:3] + 3, X[3:4] + 1])  # an l2 store keeps vectors as given
    np.testing.assert_allclose(rows.vectors, want, rtol=1e-5, atol=1e-5)


def test_searcher_marks_bind_the_text_it_encoded(backend):  # noqa: F811
    """The searcher's marks name its encoder, the text field and the text's digest: every
    written row is ``encoded`` against its text now, and the stored vector is the encoder's."""
    X = np.random.default_rng(2).normal(size=(80, D)).astype(np.float32)
    address = backend.make(X, "cosine")
    enc = HashEncoder()
    with Searcher(address, CallableEncoder(enc, fingerprint=enc.fingerprint), k_candidates=20,
                  **backend.options) as s:
        s.search(X[:5], k=3)
        field = s.store.text_source(s.text_field)
    assert s.stats.written > 0 and s.stats.conflicts == 0
    with open_live(address, **backend.options) as store:
        rows = store.fetch([backend.key(i) for i in range(80)], text_field=s.text_field)
    states = rows.states(enc.fingerprint, field)
    assert states.count("encoded") == s.stats.written
    for st, text, vector in zip(states, rows.texts, rows.vectors):
        if st == "encoded":
            want = unit(hashed(text)) if backend.name == "qdrant" else hashed(text)
            np.testing.assert_allclose(vector, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------- the key's owner
def _user_key_store(kind, tmp_path, request):
    """An engine store whose rows already hold ``skalign_vector`` as the user's own data, with
    a function reading those values back."""
    X = np.random.default_rng(3).normal(size=(40, D)).astype(np.float32)
    if kind == "chroma":
        import chromadb

        client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
        col = client.create_collection("mine", metadata={"hnsw:space": "cosine"},
                                       embedding_function=None)
        col.add(ids=[f"i{i}" for i in range(40)], embeddings=X,
                documents=[f"doc {i}" for i in range(40)],
                metadatas=[{"skalign_vector": f"user value {i}"} for i in range(40)])

        def values():
            got = client.get_collection("mine").get(include=["metadatas"])
            return sorted(m.get("skalign_vector") for m in got["metadatas"])

        return f"chroma:{tmp_path}/chroma/mine", values
    if kind == "qdrant":
        from qdrant_client import models

        from skalign._stores.address import parse_address
        from skalign._stores.qdrant.store import _client

        (tmp_path / "q").mkdir()
        client = _client(parse_address(f"qdrant:{tmp_path}/q/x"))
        client.create_collection("mine", vectors_config=models.VectorParams(
            size=D, distance=models.Distance.COSINE))
        client.upsert("mine", points=models.Batch(
            ids=list(range(40)), vectors=X.tolist(),
            payloads=[{"text": f"doc {i}", "skalign_vector": {"user": i}} for i in range(40)]))

        def values():
            points, _ = client.scroll("mine", limit=100, with_payload=True)
            return sorted(str(p.payload.get("skalign_vector")) for p in points)

        return f"qdrant:{tmp_path}/q/mine", values
    import psycopg
    from pgvector.psycopg import register_vector

    base = request.getfixturevalue("pg_base")
    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS mine")
        conn.execute(f"CREATE TABLE mine (id int PRIMARY KEY, text text, skalign_vector text, "
                     f"emb vector({D}))")
        for i, x in enumerate(X):
            conn.execute("INSERT INTO mine VALUES (%s, %s, %s, %s)",
                         (i, f"doc {i}", f"user value {i}", x))

    def values():
        with psycopg.connect(base) as conn:
            return sorted(r[0] for r in conn.execute("SELECT skalign_vector FROM mine"))

    return f"{base}&table=mine&column=emb", values


@pytest.mark.parametrize("kind", ["chroma", "qdrant", "pgvector"])
def test_a_users_own_provenance_key_is_refused_before_any_work(kind, tmp_path, request,
                                                               monkeypatch):
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client",
                         "pgvector": "psycopg"}[kind])
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    address, values = _user_key_store(kind, tmp_path, request)
    before = values()
    enc = HashEncoder()
    with pytest.raises(StoreError, match="--provenance-key"):
        Searcher(address, CallableEncoder(enc, fingerprint=enc.fingerprint), k_candidates=10,
                 text_field="text" if kind != "chroma" else None)
    assert enc.calls == 0 and values() == before
    # another key: the search writes back, the user's values stay
    with Searcher(address, CallableEncoder(enc, fingerprint=enc.fingerprint), k_candidates=10,
                  text_field="text" if kind != "chroma" else None,
                  provenance_key="skalign_mark") as s:
        s.search(np.random.default_rng(4).normal(size=(3, D)), k=3)
    assert s.stats.written > 0 and values() == before
    with open_live(address, provenance_key="skalign_mark") as store:
        marks = store.fetch(store.ids()).provenance
    assert sum(isinstance(m, str) and m.startswith("encoded:hash-enc-v1:") for m in marks) \
        == s.stats.written


# ----------------------------------------------------------------------------- races
N_ROWS = 120
EDITED = range(0, 30)  # rows whose text the application keeps changing


class World:
    """A source store of ``N_ROWS`` texts and old vectors, ``migrate``'s output beside it, and
    the application's edit of a row's text in the output."""

    text_field = "text"

    def __init__(self, kind, tmp_path, request):
        self.kind, self.tmp = kind, tmp_path
        rng = np.random.default_rng(11)
        self.texts = [f"text {i} " + "x" * (i % 7) for i in range(N_ROWS)]
        # the old encoder: a linear image of the new one, so that each step's refitted map
        # estimates higher and --continue translates the remaining rows again (the writes
        # that would revert a searcher's rows without compare-and-set)
        W = rng.normal(size=(D, 8))
        self.old = (np.stack([hashed(t) for t in self.texts]) @ W
                    + 0.3 * rng.normal(size=(N_ROWS, 8))).astype(np.float32)
        getattr(self, "make_" + kind)(request)

    # -------------------------------------------------------------- PostgreSQL
    def make_pgvector(self, request):
        import psycopg
        from pgvector.psycopg import register_vector

        self.base = base = request.getfixturevalue("pg_base")
        with psycopg.connect(base, autocommit=True) as conn:
            register_vector(conn)
            conn.execute("DROP TABLE IF EXISTS race_src")
            conn.execute("DROP TABLE IF EXISTS race_out")
            conn.execute("CREATE TABLE race_src (id bigint PRIMARY KEY, text text, "
                         "emb vector(8))")
            for i, (t, x) in enumerate(zip(self.texts, self.old)):
                conn.execute("INSERT INTO race_src VALUES (%s, %s, %s)", (i, t, x))
        self.src = f"{base}&table=race_src&column=emb"
        self.out = f"{base}&table=race_out&column=emb"
        self.key = lambda i: i

    def edit_pgvector(self, i, text):
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute("UPDATE race_out SET text = %s WHERE id = %s", (text, i))

    # -------------------------------------------------------------- Chroma
    def make_chroma(self, request):
        import chromadb

        self.client = chromadb.PersistentClient(path=str(self.tmp / "chroma"))
        col = self.client.create_collection("race_src", metadata={"hnsw:space": "cosine"},
                                            embedding_function=None)
        col.add(ids=[f"r{i}" for i in range(N_ROWS)], embeddings=self.old,
                metadatas=[{"text": t, "n": i} for i, t in enumerate(self.texts)])
        self.src = f"chroma:{self.tmp}/chroma/race_src"
        self.out = f"chroma:{self.tmp}/chroma/race_out"
        self.key = lambda i: f"r{i}"

    def edit_chroma(self, i, text):
        self.client.get_collection("race_out", embedding_function=None).update(
            ids=[f"r{i}"], metadatas=[{"text": text}])

    # -------------------------------------------------------------- Qdrant
    def make_qdrant(self, request):
        from qdrant_client import models

        from skalign._stores.address import parse_address
        from skalign._stores.qdrant.store import _client

        (self.tmp / "q").mkdir()
        self.client = _client(parse_address(f"qdrant:{self.tmp}/q/x"))
        self.client.create_collection("race_src", vectors_config=models.VectorParams(
            size=8, distance=models.Distance.COSINE))
        self.client.upsert("race_src", points=models.Batch(
            ids=list(range(N_ROWS)), vectors=self.old.tolist(),
            payloads=[{"text": t, "n": i} for i, t in enumerate(self.texts)]))
        self.src = f"qdrant:{self.tmp}/q/race_src"
        self.out = f"qdrant:{self.tmp}/q/race_out"
        self.key = lambda i: i

    def edit_qdrant(self, i, text):
        from skalign._stores.address import parse_address
        from skalign._stores.live_input import database_lock

        # the local mode's client is not thread-safe: an application sharing it in the
        # process takes the lock skalign's live stores take
        with database_lock(parse_address(self.out)):
            self.client.set_payload("race_out", payload={"text": text}, points=[i], wait=True)

    # -------------------------------------------------------------- sqlite-vec
    def make_sqlite(self, request):
        from store_backends import SqliteVec

        self.db = self.tmp / "app.db"
        conn = SqliteVec.connect(self.db)
        conn.execute("CREATE VIRTUAL TABLE race_src USING vec0(emb float[8] "
                     "distance_metric=cosine, text text)")
        with conn:
            conn.executemany("INSERT INTO race_src (rowid, emb, text) VALUES (?, ?, ?)",
                             ((i, x.astype("<f4").tobytes(), t)
                              for i, (t, x) in enumerate(zip(self.texts, self.old))))
        conn.close()
        self.src = f"sqlite:{self.db}?table=race_src"
        self.out = f"sqlite:{self.db}?table=race_out"
        self.key = lambda i: i

    def edit_sqlite(self, i, text):
        from store_backends import SqliteVec

        conn = SqliteVec.connect(self.db)
        conn.execute("BEGIN IMMEDIATE")  # a writer that reads first can be refused at once
        conn.execute("UPDATE race_out SET text = ? WHERE rowid = ?", (text, i))
        conn.execute("COMMIT")
        conn.close()

    # -------------------------------------------------------------- Milvus Lite
    def make_milvus(self, request):
        pytest.importorskip("milvus_lite")
        from pymilvus import DataType, MilvusClient

        self.client = MilvusClient(str(self.tmp / "milvus.db"))
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        s.add_field("id", DataType.INT64, is_primary=True)
        s.add_field("text", DataType.VARCHAR, max_length=256)
        s.add_field("emb", DataType.FLOAT_VECTOR, dim=8)
        index = self.client.prepare_index_params()
        index.add_index("emb", index_type="FLAT", metric_type="COSINE")
        self.client.create_collection("race_src", schema=s, index_params=index)
        self.client.insert("race_src", [{"id": i, "text": t, "emb": x.tolist(), "n": i}
                                        for i, (t, x) in enumerate(zip(self.texts, self.old))])
        self.src = f"milvus:{self.tmp}/milvus.db/race_src"
        self.out = f"milvus:{self.tmp}/milvus.db/race_out"
        self.key = lambda i: i

    def edit_milvus(self, i, text):
        # the application's own partial update of the entity's text
        self.client.upsert("race_out", [{"id": i, "text": text}], partial_update=True)

    # -------------------------------------------------------------- DuckDB
    def make_duckdb(self, request):
        import pyarrow as pa
        from store_backends import DuckDB

        self.db = self.tmp / "app.duckdb"
        conn = DuckDB.connect(self.db)
        conn.execute("CREATE TABLE race_src (id BIGINT PRIMARY KEY, text VARCHAR, emb FLOAT[8])")
        conn.register("rows", pa.table({
            "id": range(N_ROWS), "text": self.texts,
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(self.old.reshape(-1)), 8)}))
        conn.execute("INSERT INTO race_src SELECT * FROM rows")
        conn.execute("CREATE INDEX race_emb ON race_src USING HNSW (emb) WITH (metric = "
                     "'cosine')")
        conn.close()
        self.src = f"duckdb:{self.db}?table=race_src"
        self.out = f"duckdb:{self.db}?table=race_out"
        self.key = lambda i: i

    def edit_duckdb(self, i, text):
        # DuckDB opens a file in one instance per process: an application in the process
        # shares skalign's (whose live stores attach the file for each call)
        import duckdb

        from skalign._stores.address import parse_address
        from skalign._stores.duckdb.connect import open_database

        db = open_database(parse_address(self.out))
        try:
            for _ in range(1000):  # DuckDB's concurrency is optimistic: the later writer retries
                try:
                    db.cursor().execute("UPDATE race_out SET text = ? WHERE id = ?", [text, i])
                    break
                except duckdb.TransactionException:
                    time.sleep(0.005)
        finally:
            db.close()

    # -------------------------------------------------------------- .npy and a text file
    def make_npy(self, request):
        np.save(self.tmp / "src.npy", self.old)
        self.lines = self.tmp / "texts.txt"
        self.lines.write_text("".join(t + "\n" for t in self.texts))
        self.text_field = str(self.lines)
        self.src, self.out = str(self.tmp / "src.npy"), str(self.tmp / "out.npy")
        self.key = lambda i: i
        self._edit_lock = threading.Lock()

    def edit_npy(self, i, text):
        with self._edit_lock:
            lines = self.lines.read_text().splitlines()
            lines[i] = text
            tmp = self.lines.with_name("texts.tmp")
            tmp.write_text("".join(t + "\n" for t in lines))
            os.replace(tmp, self.lines)

    def edit(self, i, text):
        getattr(self, "edit_" + self.kind)(i, text)

    def rows(self):
        """Every output row: (vector, current text, provenance)."""
        with open_live(self.out, text_field=self.text_field) as store:
            field = store.text_source(self.text_field)
            rows = store.fetch([self.key(i) for i in range(N_ROWS)], text_field=self.text_field)
        return rows, field


def _check_encoded_rows_hold_their_text(world, enc_fp):
    rows, field = world.rows()
    states = rows.states(enc_fp, field)
    for i, (st, text, vector) in enumerate(zip(states, rows.texts, rows.vectors)):
        if st == "encoded":
            want = unit(hashed(text)) if world.kind == "qdrant" else hashed(text)
            np.testing.assert_allclose(vector, want, rtol=1e-5, atol=1e-5,
                                       err_msg=f"row {i} marked encoded holds another vector")
    return rows, states


@pytest.mark.parametrize("kind", ["pgvector", "chroma", "qdrant", "npy", "sqlite", "milvus",
                                  "duckdb"])
def test_editor_searcher_and_continue_at_once(kind, tmp_path, request, monkeypatch):
    """An application edits texts, a searcher writes back and ``migrate --continue`` runs, all
    at once. Afterwards every row marked encoded holds exactly the encoder's vector of its
    current text, every row the searcher wrote whose text was not edited is still encoded (no
    writer reverted it), and ``--continue`` to the end leaves every row encoded."""
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client",
                         "pgvector": "psycopg", "npy": "numpy", "sqlite": "sqlite_vec",
                         "milvus": "milvus_lite", "duckdb": "duckdb_extension_vss"}[kind])
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    world = World(kind, tmp_path, request)
    enc = HashEncoder()
    cached = CachedEncoder(CallableEncoder(enc, fingerprint=enc.fingerprint))
    tf = world.text_field
    migrate_store(world.src, world.out, cached, 24, text_field=tf, anyway=True)

    stop, errors, searcher_wrote = threading.Event(), [], []
    searcher_started = threading.Event()
    edited = set()

    def application():
        rng = np.random.default_rng(5)
        n = 0
        try:
            while not stop.is_set():
                i = int(rng.choice(list(EDITED)))
                world.edit(i, f"edited {n} of row {i}")
                edited.add(i)
                n += 1
        except Exception as exc:  # pragma: no cover - reported below
            import traceback

            errors.append("".join(traceback.format_exception(exc)))

    def searcher():
        rng = np.random.default_rng(6)
        try:
            with Searcher(world.out, CallableEncoder(enc, fingerprint=enc.fingerprint),
                          k_candidates=15, write_batch=4, text_field=tf) as s:
                write = s.store.write_back

                def recording(ids, vectors, marks, expected=None):
                    done = write(ids, vectors, marks, expected)
                    searcher_wrote.extend(i for i, ok in zip(ids, done) if ok)
                    if searcher_wrote:
                        searcher_started.set()
                    return done

                s.store.write_back = recording
                while not stop.is_set():
                    s.search(rng.normal(size=(2, D)).astype(np.float32), k=3)
        except Exception as exc:  # pragma: no cover - reported below
            import traceback

            errors.append("".join(traceback.format_exception(exc)))

    threads = [threading.Thread(target=application), threading.Thread(target=searcher)]
    for t in threads:
        t.start()
    try:
        # On a loaded machine the two steps can end before the searcher has opened the store;
        # the steps start once it writes, so that they run while it goes on writing.
        for _ in range(1200):
            if searcher_started.wait(0.1) or errors:
                break
        assert searcher_started.is_set() or errors, "the searcher wrote nothing back in 120 s"
        for _ in range(2):
            migrate_store(world.src, world.out, cached, 20, text_field=tf, continue_=True)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert searcher_wrote, "the searcher wrote nothing back: no race was exercised"
    rows, states = _check_encoded_rows_hold_their_text(world, enc.fingerprint)
    by_key = {world.key(i): i for i in range(N_ROWS)}
    lost = [k for k in set(searcher_wrote) if by_key[k] not in edited
            and states[by_key[k]] != "encoded"]
    assert not lost, f"rows the searcher encoded were reverted: {lost[:5]}"
    counts = count_provenance(world.out, text_field=tf)
    assert counts["encoded"] == states.count("encoded")
    assert counts["encoded"] + counts["stale"] + counts["translated"] == N_ROWS
    for _ in range(8):  # to the end, with nothing else running
        result = migrate_store(world.src, world.out, cached, 60, text_field=tf,
                               continue_=True)
        if result.action == "complete":
            break
    assert result.action == "complete"
    rows, states = _check_encoded_rows_hold_their_text(world, enc.fingerprint)
    assert states == ["encoded"] * N_ROWS
