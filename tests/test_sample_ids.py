"""``sample_ids`` of the database stores (pgvector, DuckDB, sqlite-vec) against the real
engines, no mocks: the engine draws the very rows the documented default draws from the listed
ids (``ids()[p]`` for ``p`` in :func:`~skalign._stores.live.sample_positions`), without
listing every id, for integer ids with gaps and text ids inserted out of the key's order and
a hostile table name; and ``skalign plan --calibrate`` reads the same texts either way."""

import tempfile
from urllib.parse import quote

import numpy as np
import pytest

from skalign._stores import open_live
from skalign._stores.live import LiveStore, sample_positions

D = 4
ROWS = 200
HOSTILE = 'we"ird; DROP TABLE victim; --'
SIZES = (0, 1, 7, 64, ROWS - 1, ROWS, ROWS + 5)
SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def _keys(kind, n=ROWS):
    """``n`` distinct ids in the order they are inserted, which is not the key's order:
    integers with gaps (and one negative), or texts of mixed case, digits, quotes and a
    non-ASCII letter."""
    rng = np.random.default_rng(11)
    if kind == "int":
        keys = (rng.choice(100 * n, n, replace=False) * 7 - 3 * n).tolist()
    else:
        alphabet = list("aZb9'; é-x")
        keys = sorted({"".join(rng.choice(alphabet, 6)) + str(i) for i in range(n)})
        keys = [keys[i] for i in rng.permutation(n)]
    assert n < 2 or keys != sorted(keys)
    return keys


def _text(key):
    return f"doc {key}"


class Pg:
    kinds = ("int", "text", "uuid")

    def __init__(self, base):
        self.base = base

    def make(self, name, kind, n=ROWS):
        import uuid

        import psycopg
        from psycopg import sql

        keys = _keys("text" if kind == "uuid" else kind, n)
        if kind == "uuid":
            keys = [str(uuid.uuid5(uuid.NAMESPACE_URL, k)) for k in keys]
        typ = {"int": "bigint", "text": "text", "uuid": "uuid"}[kind]
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL(f"CREATE TABLE {{}} (id {typ} PRIMARY KEY, text text, emb "
                                 f"vector({D}))").format(sql.Identifier(name)))
            with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} (id, text, emb) FROM STDIN")
                                                .format(sql.Identifier(name))) as copy:
                for k in keys:
                    copy.write_row([k, _text(k), "[" + ",".join(["0.5"] * D) + "]"])
        return f"{self.base}&table={quote(name, safe='')}", keys


class Duck:
    kinds = ("int", "text")

    def __init__(self, root):
        pytest.importorskip("duckdb_extension_vss")
        self.path = root / "duck.duckdb"

    def make(self, name, kind, n=ROWS):
        import pyarrow as pa
        from store_backends import DuckDB

        keys = _keys(kind, n)
        conn = DuckDB.connect(self.path)
        table = '"' + name.replace('"', '""') + '"'
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id {'BIGINT' if kind == 'int' else 'VARCHAR'} "
                     f"PRIMARY KEY, text VARCHAR, emb FLOAT[{D}])")
        conn.register("rows", pa.table({
            "id": keys, "text": [_text(k) for k in keys],
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.full(len(keys) * D, 0.5,
                                                                      np.float32)), D)}))
        conn.execute(f"INSERT INTO {table} SELECT * FROM rows")
        conn.unregister("rows")
        conn.close()
        return f"duckdb:{self.path}?table={quote(name, safe='')}", keys


class Vec:
    kinds = ("int", "text")

    def __init__(self, root):
        pytest.importorskip("sqlite_vec")
        self.path = root / "vec.db"

    def make(self, name, kind, n=ROWS):
        from store_backends import SqliteVec

        keys = _keys(kind, n)
        conn = SqliteVec.connect(self.path)
        table = '"' + name.replace('"', '""') + '"'
        key = "" if kind == "int" else "id text primary key, "
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING vec0({key}emb float[{D}], text text)")
        blob = np.full(D, 0.5, "<f4").tobytes()
        with conn:
            conn.executemany(f"INSERT INTO {table} ({'rowid' if kind == 'int' else 'id'}, emb, "
                             "text) VALUES (?, ?, ?)", ((k, blob, _text(k)) for k in keys))
        conn.close()
        return f"sqlite:{self.path}?table={quote(name, safe='')}", keys


@pytest.fixture(params=["pgvector", "duckdb", "sqlite-vec"])
def engine(request, tmp_path):
    if request.param == "pgvector":
        return Pg(request.getfixturevalue("pg_base"))
    return {"duckdb": Duck, "sqlite-vec": Vec}[request.param](tmp_path)


def _listed(store, n, seed):
    """The documented default: every id listed, the positions drawn from the list."""
    ids = store.ids()
    return [ids[p] for p in sample_positions(len(ids), n, seed)]


def _no_listing(monkeypatch, store):
    def listed(self):
        raise AssertionError("sample_ids listed every id")

    monkeypatch.setattr(type(store), "ids", listed)


def test_sample_ids_are_the_listed_draw(engine, monkeypatch):
    """For every kind of id the engine keys rows by and a hostile table name: ``sample_ids``
    equals the listing's draw for n = 0, 1, fewer than, as many as and more than the rows,
    and several seeds, without listing the ids; the draws are the whole table for n >= rows
    (in the store's order), differ between seeds and are not the store's first rows."""
    for kind in engine.kinds:
        for name in ("src", HOSTILE):
            address, keys = engine.make(f"{name}_{kind}", kind)
            with open_live(address) as store:
                order = store.ids()
                assert len(order) == ROWS and sorted(map(str, order)) == sorted(map(str, keys))
                expected = {(n, s): _listed(store, n, s) for n in SIZES for s in SEEDS}
                with monkeypatch.context() as m:
                    _no_listing(m, store)
                    got = {(n, s): store.sample_ids(n, s) for n in SIZES for s in SEEDS}
            assert got == expected, (kind, name)
            for s in SEEDS:
                assert got[0, s] == [] and len(got[1, s]) == 1
                assert got[ROWS, s] == got[ROWS + 5, s] == order
                assert len(set(got[64, s])) == 64 and got[64, s] != order[:64]
            assert got[64, 0] != got[64, 1] != got[64, 2]


def test_sample_ids_of_an_empty_table(engine):
    address, _ = engine.make("empty", "int", n=0)
    with open_live(address) as store:
        assert store.ids() == [] and [store.sample_ids(n, 0) for n in (0, 5)] == [[], []]


def test_calibration_reads_the_same_rows(engine, monkeypatch):
    """``skalign plan --calibrate`` (:func:`~skalign.plan._cost.calibrate`) reads the texts of
    the rows ``sample_ids`` draws, no id listed, and they are those it reads where the store
    draws none (the listing path)."""
    from skalign.plan._cost import MAX_BATCHES, calibrate

    address, keys = engine.make("cal", engine.kinds[-1])
    with open_live(address) as store:
        order = store.ids()
        cls = type(store)
    want = [_text(order[p]) for p in sample_positions(ROWS, MAX_BATCHES, 3)]

    def run():
        seen = []

        def embed(texts):
            seen.extend(texts)
            return np.ones((len(texts), 4), np.float32)

        rates = calibrate(address, embed, seconds=600, batch_size=1, random_state=3)
        return rates, seen

    with monkeypatch.context() as m:
        def listed(self):
            raise AssertionError("the calibration listed every id")

        m.setattr(cls, "ids", listed)
        drawn, seen = run()
    monkeypatch.setattr(cls, "sample_ids", LiveStore.sample_ids)
    from_list, seen_listed = run()
    assert seen == seen_listed == want
    assert drawn.store_rows == from_list.store_rows == ROWS
    assert drawn.read_rows == from_list.read_rows == MAX_BATCHES < ROWS
