"""``id_array`` of the database stores against the real engines, no mocks: the ids of
:meth:`~skalign._stores.live.LiveStore.ids`, in its order, as one ``int64`` array where every
id is an integer that fits it (gaps and negatives included), read a page at a time, and
otherwise the very list ``ids`` gives (text, UUIDs, integers beyond ``int64``, a mix); and a
``skalign migrate`` with ``--continue`` on a pgvector and a DuckDB table keyed by integers
that ends with the same rows and marks as the list path."""

import tempfile
import uuid
from urllib.parse import quote

import numpy as np
import pytest

from skalign._migrate.scan import all_ids, id_list, ids_at
from skalign._stores import open_live
from skalign._stores.databases.ids import id_array

D = 4
ROWS = 60
#: ids per page while a test reads them: several pages, the last one short
PAGE = 7
BIG = 2**63 + 5  # beyond int64


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def _ints(n=ROWS, negative=True):
    """``n`` distinct integers with gaps (and negatives), in an order that is not sorted."""
    rng = np.random.default_rng(5)
    keys = rng.choice(1000 * n, n, replace=False) * 7 - (300 * n if negative else -1)
    assert (not negative or keys.min() < 0) and list(keys) != sorted(keys)
    return keys.tolist()


def _texts(n=ROWS):
    rng = np.random.default_rng(6)
    return [f"{''.join(rng.choice(list('aZé9;-'), 4))}{i}" for i in rng.permutation(n)]


def _uuids(n=ROWS):
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))) for i in range(n)]


# Each engine: kinds of keys -> (ids inserted, whether id_array is one int64 array)
class Pg:
    kinds = {"int": (_ints(), True), "int4": (_ints(), True), "text": (_texts(), False),
             "uuid": (_uuids(), False), "numeric": ([*_ints()[:-1], 2**70], False)}
    types = {"int": "bigint", "int4": "integer", "text": "text", "uuid": "uuid",
             "numeric": "numeric"}
    page = ("skalign._stores.pgvector.live", "ID_PAGE")

    def __init__(self, request, root):
        self.base = request.getfixturevalue("pg_base")

    def make(self, kind):
        import psycopg
        from psycopg import sql

        keys, _ = self.kinds[kind]
        name = f"ids_{kind}"
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL(f"CREATE TABLE {{}} (id {self.types[kind]} PRIMARY KEY, text "
                                 f"text, emb vector({D}))").format(sql.Identifier(name)))
            with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} (id, text, emb) FROM STDIN")
                                                .format(sql.Identifier(name))) as copy:
                for k in keys:
                    copy.write_row([k, f"doc {k}", "[" + ",".join(["0.5"] * D) + "]"])
        return f"{self.base}&table={quote(name, safe='')}"


class Duck:
    kinds = {"int": (_ints(), True), "hugeint": (_ints(), True),
             "hugeint_big": ([*_ints()[:-1], 2**70], False),
             "ubigint_big": ([*_ints(negative=False)[:-1], BIG], False),
             "text": (_texts(), False)}
    types = {"int": "BIGINT", "hugeint": "HUGEINT", "hugeint_big": "HUGEINT",
             "ubigint_big": "UBIGINT", "text": "VARCHAR"}
    page = ("skalign._stores.duckdb.live", "ID_PAGE")

    def __init__(self, request, root):
        pytest.importorskip("duckdb_extension_vss")
        self.path = root / "duck.duckdb"

    def make(self, kind):
        from store_backends import DuckDB

        keys, _ = self.kinds[kind]
        conn = DuckDB.connect(self.path)
        conn.execute(f"CREATE TABLE t_{kind} (id {self.types[kind]} PRIMARY KEY, text VARCHAR, "
                     f"emb FLOAT[{D}])")
        conn.executemany(f"INSERT INTO t_{kind} VALUES (?, ?, ?)",
                         [[k, f"doc {k}", [0.5] * D] for k in keys])
        conn.close()
        return f"duckdb:{self.path}?table=t_{kind}"


class Vec:
    kinds = {"rowid": (_ints(), True), "int": (_ints(), True), "text": (_texts(), False)}
    page = ("skalign._stores.sqlite_vec.live", "ID_PAGE")

    def __init__(self, request, root):
        pytest.importorskip("sqlite_vec")
        self.path = root / "vec.db"

    def make(self, kind):
        from store_backends import SqliteVec

        keys, _ = self.kinds[kind]
        key = {"rowid": "", "int": "id integer primary key, ", "text": "id text primary key, "}
        column = "rowid" if kind == "rowid" else "id"
        conn = SqliteVec.connect(self.path)
        conn.execute(f"CREATE VIRTUAL TABLE t_{kind} USING vec0({key[kind]}emb float[{D}], "
                     "text text)")
        blob = np.full(D, 0.5, "<f4").tobytes()
        with conn:
            conn.executemany(f"INSERT INTO t_{kind} ({column}, emb, text) VALUES (?, ?, ?)",
                             ((k, blob, f"doc {k}") for k in keys))
        conn.close()
        return f"sqlite:{self.path}?table=t_{kind}"


class Qdrant:
    kinds = {"int": (_ints(negative=False), True), "uuid": (_uuids(), False),
             "mixed": ([*_ints(negative=False)[:40], *_uuids(20)], False),
             "big": ([*_ints(negative=False)[:-1], BIG], False)}
    page = ("skalign._stores.qdrant.store", "ID_PAGE")

    def __init__(self, request, root):
        pytest.importorskip("qdrant_client")
        self.folder = root / "qdrant"
        self.folder.mkdir()

    def make(self, kind):
        from qdrant_client import models

        from skalign._stores.address import parse_address
        from skalign._stores.qdrant.store import _client

        keys, _ = self.kinds[kind]
        c = _client(parse_address(f"qdrant:{self.folder}/x"))
        c.create_collection(kind, vectors_config=models.VectorParams(
            size=D, distance=models.Distance.COSINE))
        c.upsert(kind, points=models.Batch(ids=keys, vectors=[[0.5] * D] * len(keys),
                                           payloads=[{"text": f"doc {k}"} for k in keys]))
        return f"qdrant:{self.folder}/{kind}"


class Milvus:
    kinds = {"int": (_ints(), True), "text": (_texts(), False)}
    page = ("skalign._stores.milvus.store", "LITE_ID_PAGE")

    def __init__(self, request, root):
        pytest.importorskip("milvus_lite")
        self.path = root / "milvus.db"

    def make(self, kind):
        from pymilvus import DataType, MilvusClient

        keys, _ = self.kinds[kind]
        c = MilvusClient(str(self.path))
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        s.add_field("id", DataType.INT64 if kind == "int" else DataType.VARCHAR,
                    is_primary=True, **({} if kind == "int" else {"max_length": 64}))
        s.add_field("text", DataType.VARCHAR, max_length=64)
        s.add_field("emb", DataType.FLOAT_VECTOR, dim=D)
        index = c.prepare_index_params()
        index.add_index("emb", index_type="FLAT", metric_type="COSINE")
        c.create_collection(kind, schema=s, index_params=index)
        c.create_partition(kind, "odd")
        for n, part in enumerate(("_default", "odd")):
            c.insert(kind, [{"id": k, "text": f"doc {k}", "emb": [0.5] * D}
                            for k in keys[n::2]], partition_name=part)
        return f"milvus:{self.path}/{kind}"


@pytest.fixture(params=["pgvector", "duckdb", "sqlite-vec", "qdrant", "milvus"])
def engine(request, tmp_path):
    return {"pgvector": Pg, "duckdb": Duck, "sqlite-vec": Vec, "qdrant": Qdrant,
            "milvus": Milvus}[request.param](request, tmp_path)


def test_id_array_is_ids(engine, monkeypatch):
    """For each kind of key the engine has: ``id_array`` (read :data:`PAGE` ids a page)
    equals ``ids`` in values, order and Python types (``int`` after ``tolist``); an ``int64``
    array exactly where every id is an integer that fits it, the very list otherwise (the
    fallback after pages of integers included); ``all_ids`` gives the same."""
    import importlib

    module, name = engine.page
    monkeypatch.setattr(importlib.import_module(module), name, PAGE)
    for kind, (keys, as_array) in engine.kinds.items():
        with open_live(engine.make(kind)) as store:
            listed, got, again = store.ids(), store.id_array(), all_ids(store)
        assert len(listed) == ROWS and sorted(map(str, listed)) == sorted(map(str, keys)), kind
        if as_array:
            assert isinstance(got, np.ndarray) and got.dtype == np.int64, kind
            assert got.tolist() == listed and sorted(listed) == sorted(keys), kind
            assert {type(i) for i in got.tolist()} == {int}, kind
            np.testing.assert_array_equal(again, got)
        else:
            assert isinstance(got, list) and got == listed and again == listed, kind
            assert [type(i) for i in got] == [type(i) for i in listed], kind
            assert {type(i) for i in listed} != {int} or max(listed) > 2**63 - 1, kind


def test_ids_from_the_array_reach_the_engine_as_ints(engine):
    """Rows read and written by ids taken from ``id_array`` (numpy slices as :func:`id_list`
    and :func:`ids_at` give them, and numpy scalars as callers that index the array hold):
    the same rows, texts and compare-and-set as with the listed ids."""
    kind = next(iter(engine.kinds))
    with open_live(engine.make(kind)) as store:
        ids, listed = store.id_array(), store.ids()
        pos = [3, 0, 17]
        assert ids_at(ids, pos) == [listed[p] for p in pos] == id_list(ids[[3, 0, 17]])
        rows = store.fetch([ids[p] for p in pos])  # numpy scalars
        assert rows.ids == [listed[p] for p in pos]
        assert rows.texts == [f"doc {listed[p]}" for p in pos]
        V = np.full((2, D), 0.25, np.float32)
        written = store.write_back([ids[0], ids[1]], V, "encoded:x:text:" + "0" * 16,
                                   [None, "translated:y"])
        assert written.tolist() == [True, False]
        after = store.fetch(ids_at(ids, [0, 1]))
        assert after.provenance == ["encoded:x:text:" + "0" * 16, None]


def test_id_array_pages_grow_and_fall_back():
    """The pages' ids whatever the expected count (none, fewer, exact, more), kept from the
    first page to the last; a page that is not of ``int64`` integers turns the whole into the
    list of the pages' own values."""
    pages = [[5, -2, 9], [], [2**62, -2**63], [7]]
    flat = [i for p in pages for i in p]
    for rows in (0, 2, 6, 7, 50):
        got = id_array(iter(pages), rows)
        assert got.dtype == np.int64 and got.tolist() == flat, rows
        assert got.base is None or len(got.base) < 2 * len(got), rows  # no large spare room
    for tail in (["a", 1], [2**63], [1.5], [uuid.UUID(int=3)]):
        got = id_array(iter([*pages, tail, [8]]), 7)
        assert got == [*flat, *tail, 8] and [type(i) for i in got] == \
            [*([int] * len(flat)), *map(type, tail), int]
    empty = id_array(iter([]), 3)
    assert isinstance(empty, np.ndarray) and empty.dtype == np.int64 and len(empty) == 0


# ---------------------------------------------------------------- migrate and --continue
def _corpus(n=120):
    from skalign.datasets import load_docstring_embeddings

    data = load_docstring_embeddings()
    return (list(data.texts[:n]), data.embeddings["minilm_l6"][:n].astype(np.float32),
            data.embeddings["mpnet_base"][:n].astype(np.float32))


def _pg_tables(base, texts, old, keys, name):
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        for t in (name, name + "_out"):
            conn.execute(f"DROP TABLE IF EXISTS {t}")
        conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, text text, "
                     f"emb vector({old.shape[1]}))")
        with conn.cursor() as cur, cur.copy(f"COPY {name} (id, text, emb) FROM STDIN") as copy:
            for k, t, x in zip(keys, texts, old):
                copy.write_row([k, t, x])

    def read():
        with psycopg.connect(base) as conn:
            register_vector(conn)
            return {r[0]: (r[1].to_numpy(), r[2], r[3]) for r in conn.execute(
                f"SELECT id, emb, text, skalign_vector FROM {name}_out")}

    return f"{base}&table={name}&column=emb", f"{base}&table={name}_out&column=emb", read


def _duck_tables(root, texts, old, keys, name):
    import pyarrow as pa
    from store_backends import DuckDB

    path = root / f"{name}.duckdb"
    conn = DuckDB.connect(path)
    conn.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, text VARCHAR, "
                 f"emb FLOAT[{old.shape[1]}])")
    conn.register("rows", pa.table({"id": keys, "text": texts, "emb": pa.FixedSizeListArray
                                    .from_arrays(pa.array(old.reshape(-1)), old.shape[1])}))
    conn.execute(f"INSERT INTO {name} SELECT * FROM rows")
    conn.close()

    def read():
        conn = DuckDB.connect(path)
        got = {r[0]: (np.asarray(r[1], np.float32), r[2], r[3]) for r in conn.execute(
            f"SELECT id, emb, text, skalign_vector FROM {name}_out").fetchall()}
        conn.close()
        return got

    return f"duckdb:{path}?table={name}", f"duckdb:{path}?table={name}_out", read


@pytest.mark.parametrize("kind", ["pgvector", "duckdb"])
def test_migrate_and_continue_equal_the_list_path(kind, request, tmp_path, monkeypatch):
    """``skalign migrate`` then ``--continue`` twice on a table keyed by integers with gaps
    and negatives, inserted out of order: with ``id_array`` (``ids`` never called) the output
    holds the same rows, vectors and marks as with the listed ids (``id_array`` taken away
    from the class), and the encoder ran on the same texts."""
    pytest.importorskip("duckdb_extension_vss" if kind == "duckdb" else "pgvector")
    from skalign._migrate.migration import migrate_store
    from skalign.encoders import CachedEncoder, CallableEncoder, EncodeCache

    texts, old, new = _corpus()
    keys = _ints(len(texts))
    table = {t: v for t, v in zip(texts, new)}

    def run(name, cls_patch):
        if kind == "pgvector":
            src, out, read = _pg_tables(request.getfixturevalue("pg_base"), texts, old, keys,
                                        name)
        else:
            src, out, read = _duck_tables(tmp_path, texts, old, keys, name)
        seen = []

        def embed(batch):
            seen.extend(batch)
            return np.stack([table[t] for t in batch])

        enc = CachedEncoder(CallableEncoder(embed, fingerprint="lookup"),
                            cache=EncodeCache(tmp_path / f"{name}.sqlite"))
        with open_live(src) as store:
            cls = type(store)
        with monkeypatch.context() as m:
            cls_patch(m, cls)
            steps = [migrate_store(src, out, enc, 30, text_field="text")]
            steps += [migrate_store(src, out, enc, 25, text_field="text", continue_=True)
                      for _ in range(2)]
        return [(s.n_encoded, s.n_encoded_rows, s.action) for s in steps], read(), seen

    def no_listing(m, cls):
        def listed(self):
            raise AssertionError("ids() was called where id_array reads the ids")

        m.setattr(cls, "ids", listed)

    steps, rows, seen = run("arr", no_listing)
    steps_l, rows_l, seen_l = run("lst", lambda m, cls: m.delattr(cls, "id_array"))
    assert steps == steps_l and [s[1] for s in steps] == [30, 55, 80]
    assert seen == seen_l and len(seen) == len(set(seen)) == 80
    assert sorted(rows) == sorted(rows_l) == sorted(keys)
    marks = [rows[k][2] for k in keys]
    assert sum(str(m).startswith("encoded:") for m in marks) == 80
    assert all(m is None or m.startswith(("encoded:", "translated:")) for m in marks)
    for k in keys:
        np.testing.assert_array_equal(rows[k][0], rows_l[k][0])
        assert rows[k][1:] == rows_l[k][1:]


def test_positions_of_an_array_and_a_list():
    """:func:`positions_of` finds each id's position by a sorted search in an ``int64`` array
    (ids out of order, negative, with gaps) and by the ids themselves in a list (text); an id
    the store does not hold raises."""
    from skalign._migrate.scan import positions_of

    rng = np.random.default_rng(0)
    ids = rng.permutation(np.arange(-500, 4500, 3))
    wanted = ids[rng.choice(len(ids), 40, replace=False)].tolist()
    got = positions_of(ids, wanted)
    assert got.dtype == np.int64 and ids[got].tolist() == wanted
    texts = [f"id-{i}" for i in ids.tolist()]
    assert positions_of(texts, [f"id-{w}" for w in wanted]).tolist() == got.tolist()
    assert positions_of(ids, []).tolist() == []
    for held, missing in ((ids, [wanted[0], 2]), (texts, ["id-2"]),
                          (np.empty(0, np.int64), [3])):
        with pytest.raises(KeyError):
            positions_of(held, missing)


def test_a_file_stores_id_index_in_any_order():
    """A file store's :class:`IdIndex` finds each id's row the same way whether its ids come in
    increasing order (then no order or sorted copy is held beside them) or not, for integers
    and strings; a missing id and a repeated one are refused."""
    from skalign._stores.files.live import IdIndex
    from skalign.exceptions import StoreError

    rng = np.random.default_rng(3)
    ints = np.arange(-40, 4000, 7)
    for ids in (ints, rng.permutation(ints), np.array([f"k{i:05d}" for i in ints]),
                rng.permutation(np.array([f"k{i:05d}" for i in ints]))):
        index = IdIndex(ids, "s.parquet", "id")
        ascending = bool(np.all(ids[1:] > ids[:-1]))
        assert (index._order is None) == ascending
        wanted = ids[rng.choice(len(ids), 50, replace=False)].tolist()
        where = {key: i for i, key in enumerate(ids.tolist())}
        assert index.positions(wanted, "s").tolist() == [where[w] for w in wanted]
        assert index.ids_of(index.positions(wanted, "s")) == wanted
        with pytest.raises(StoreError):
            index.positions(["k-missing" if ids.dtype.kind == "U" else -1], "s")
    for ids in (np.array([1, 2, 2, 3]), np.array([3, 1, 3])):
        with pytest.raises(StoreError, match="more than once"):
            IdIndex(ids, "s.parquet", "id")
