"""Typed inputs of the live stores (issue 54, item 8), against the real engines.

A text field must hold text: a PostgreSQL column of another catalog type (a vector, an integer,
jsonb, a domain over an integer) is refused by its name and type when the store opens or when
``fetch`` first names it; a Chroma metadata value or a Qdrant payload value that is not a string
is refused by the record's id, the key and the type; Parquet and LanceDB refuse a column that is
not a string column. ``skalign search`` then exits 2 with that one line, before anything is
encoded or written.

PostgreSQL primary keys of type uuid, numeric, date, bytea and domains over integer and text
work end to end: ``ids``, ``fetch``, ``top_k`` and compare-and-set ``write_back`` on ids that a
results file can hold (``int`` or ``str``), and ``skalign search`` and ``skalign migrate``
(``--continue`` included) through the command line; a key whose type has no array type is
refused by name when the store opens.
"""

import json
import re
import tempfile
import textwrap
from urllib.parse import quote

import numpy as np
import pytest

from skalign._stores import open_live
from skalign._stores.live import PROVENANCE_KEY
from skalign.cli import main
from skalign.exceptions import StoreError, StoreNotFoundError

N, D = 120, 16


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder, and
    the encode cache there too."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))


@pytest.fixture(scope="module")
def spaces():
    """``X``, the stored (old) vectors, a noisy copy of ``Y``, the new encoder's."""
    rng = np.random.default_rng(54)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y + 0.3 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory, spaces):
    """A folder with ``typed_enc.py``: ``embed`` maps ``doc i`` to ``Y[i]`` and logs every text
    it is given to the file ``$TYPED_ENC_LOG``."""
    folder = tmp_path_factory.mktemp("typed_enc")
    np.save(folder / "Y.npy", spaces[1])
    (folder / "typed_enc.py").write_text(textwrap.dedent(f"""
        import os
        import numpy as np
        Y = np.load({str(folder / "Y.npy")!r})
        def embed(texts):
            with open(os.environ["TYPED_ENC_LOG"], "a") as f:
                f.write("".join(repr(t) + "\\n" for t in texts))
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    return folder


@pytest.fixture
def encoder(encoder_folder, tmp_path, monkeypatch):
    """The encoder's spec; ``encoder.log`` (a path) holds the texts it was given."""
    monkeypatch.syspath_prepend(str(encoder_folder))
    log = tmp_path / "encoded.log"
    monkeypatch.setenv("TYPED_ENC_LOG", str(log))
    return "typed_enc:embed", log


def _one_line_error(capsys, command):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"skalign {command}: error:"), err
    return err


# --------------------------------------------------------------------------- PostgreSQL


def _sql(template, *names):
    from psycopg import sql

    return sql.SQL(template).format(*(sql.Identifier(n) for n in names))


def _pg(base):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(base, autocommit=True)
    register_vector(conn)
    return conn


@pytest.fixture(scope="module")
def pg(pg_base):
    """The server, with the domains ``dint`` (integer, positive), ``dtxt`` (text) and
    ``ddtxt`` (a domain over ``dtxt``)."""
    with _pg(pg_base) as conn:
        conn.execute("DROP DOMAIN IF EXISTS ddtxt, dtxt, dint CASCADE")
        conn.execute("CREATE DOMAIN dint AS integer CHECK (VALUE > 0)")
        conn.execute("CREATE DOMAIN dtxt AS text")
        conn.execute("CREATE DOMAIN ddtxt AS dtxt")
    return pg_base


def _address(base, table, column="emb"):
    return f"{base}&table={quote(table, safe='')}&column={quote(column, safe='')}"


#: key types, with row i's key as sent to PostgreSQL and as a live store names the row
KEYS = {
    "uuid": (lambda i: f"00000000-0000-4000-8000-{i:012d}",
             lambda i: f"00000000-0000-4000-8000-{i:012d}"),
    "numeric(10,2)": (lambda i: f"{i}.5", lambda i: f"{i}.50"),
    "date": (lambda i: f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}",
             lambda i: f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}"),
    "bytea": (lambda i: bytes([i, 0, 255]), lambda i: f"\\x{i:02x}00ff"),
    "dint": (lambda i: i + 1, lambda i: i + 1),
    "dtxt": (lambda i: f"k'{i}", lambda i: f"k'{i}"),
}


def _make_pg(base, table, X, key_type="bigint", key=lambda i: 3 * i + 1):
    """``table`` with the primary key ``id`` of ``key_type`` (row i's value ``key(i)``), the
    text ``doc i`` in ``text`` (of the domain ``dtxt``) and in columns of other text types,
    ``n`` (the domain ``dint``), ``meta`` (jsonb), ``emb`` (with an HNSW index)."""
    from psycopg.types.json import Jsonb

    with _pg(base) as conn:
        conn.execute(_sql("DROP TABLE IF EXISTS {}", table))
        conn.execute(_sql(f"CREATE TABLE {{}} (id {key_type} PRIMARY KEY, text dtxt, "
                          f"v varchar(20), c char(12), dd ddtxt, n dint, meta jsonb, "
                          f"emb vector({X.shape[1]}))", table))
        with conn.cursor() as cur, cur.copy(_sql(
                "COPY {} (id, text, v, c, dd, n, meta, emb) FROM STDIN", table)) as copy:
            for i, x in enumerate(X):
                doc = f"doc {i}"
                copy.write_row([key(i), doc, doc, doc, doc, i + 1, Jsonb({"k": i}), x])
        conn.execute(_sql("CREATE INDEX ON {} USING hnsw (emb vector_cosine_ops)", table))
    return _address(base, table)


def _pg_rows(base, table):
    """``{id as text: (vector, provenance or None, every other column)}``."""
    with _pg(base) as conn:
        cur = conn.execute(_sql("SELECT * FROM {}", table))
        names = [c.name for c in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        text_ids = [r[0] for r in conn.execute(_sql("SELECT id::text FROM {}", table))]
    return {t: (np.asarray(r.pop("emb").to_numpy(), np.float32), r.pop(PROVENANCE_KEY, None),
                r) for t, r in zip(text_ids, rows)}


def _leftovers(base):
    with _pg(base) as conn:
        return [r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname ~ '_skalign_'")]


@pytest.mark.parametrize("column", ["text", "v", "c", "dd"])
def test_pg_columns_of_text_types_are_texts(pg, spaces, column):
    """text, varchar, char(n) and domains over text (one over another) are text columns."""
    X, _ = spaces
    address = _make_pg(pg, "texts", X[:10])
    with open_live(address, text_field=column) as store:
        rows = store.fetch([4, 1])
        assert rows.texts == ["doc 1", "doc 0"]
    with open_live(address) as store:
        assert store.fetch([7], text_field=column).texts == ["doc 2"]


@pytest.mark.parametrize("column, shown", [
    ("emb", "vector(16)"), ("n", "dint"), ("meta", "jsonb"), ("id", "bigint")])
def test_pg_text_field_of_another_type_is_refused_by_name(pg, spaces, column, shown):
    X, _ = spaces
    address = _make_pg(pg, "typed", X[:10])
    message = re.escape(f"column '{column}' is {shown}, not text")
    with pytest.raises(StoreError, match=message) as got:  # when the store opens
        open_live(address, text_field=column)
    assert len(str(got.value).splitlines()) == 1
    with open_live(address) as store:  # when fetch first names it
        with pytest.raises(StoreError, match=message):
            store.fetch([1], text_field=column)
        assert store.fetch([1]).texts == ["doc 0"]


def test_pg_default_text_column_of_another_type_is_refused(pg, spaces):
    """A column named ``text`` that holds numbers is not taken for the texts."""
    X, _ = spaces
    with _pg(pg) as conn:
        conn.execute("DROP TABLE IF EXISTS numtext")
        conn.execute(f"CREATE TABLE numtext (id int PRIMARY KEY, text int, emb vector({D}))")
        for i in range(5):
            conn.execute("INSERT INTO numtext VALUES (%s, %s, %s)", (i, i, X[i]))
    with open_live(_address(pg, "numtext")) as store:
        with pytest.raises(StoreError, match="column 'text' is integer, not text"):
            store.fetch([1])


@pytest.mark.parametrize("column", ["emb", "n"])
def test_pg_search_on_a_column_of_another_type_exits_2_before_encoding(
        pg, spaces, encoder, tmp_path, capsys, column):
    X, Y = spaces
    spec, log = encoder
    address = _make_pg(pg, "searched", X)
    before = _pg_rows(pg, "searched")
    np.save(tmp_path / "q.npy", Y[:2])  # query vectors: the encoder is for the rows only
    assert main(["search", address, "--queries", str(tmp_path / "q.npy"), "--encoder", spec,
                 "--output", str(tmp_path / "r.jsonl"), "--text-field", column]) == 2
    err = _one_line_error(capsys, "search")
    assert f"column '{column}' is" in err and "not text" in err
    assert not log.exists() and not (tmp_path / "r.jsonl").exists()
    after = _pg_rows(pg, "searched")
    assert after.keys() == before.keys() and all(
        np.array_equal(after[k][0], before[k][0]) and after[k][1:] == before[k][1:]
        for k in before)


@pytest.mark.parametrize("key_type", list(KEYS))
def test_pg_typed_keys_work_live(pg, spaces, key_type):
    """ids, fetch, top_k and compare-and-set write_back on a key of each type, with ids a JSON
    results file holds and gives back."""
    X, Y = spaces
    sent, named = KEYS[key_type]
    address = _make_pg(pg, "keyed", X[:40], key_type, sent)
    with open_live(address) as store:
        ids = store.ids()
        assert sorted(map(str, ids)) == sorted(str(named(i)) for i in range(40))
        assert all(isinstance(i, (int, str)) for i in ids)
        ids = json.loads(json.dumps(ids))
        order = [5, 0, 39, 17]
        rows = store.fetch([named(i) for i in order])
        assert rows.texts == [f"doc {i}" for i in order]
        np.testing.assert_allclose(rows.vectors, X[order], rtol=1e-6)
        top, _ = store.top_k(X[[3, 8]], 3)
        assert [t[0] for t in top] == [named(3), named(8)]
        json.dumps(top)
        chosen = [named(i) for i in (2, 9)]
        written = store.write_back(chosen, Y[[2, 9]], "encoded:a", expected=[None, None])
        assert written.tolist() == [True, True]
        # compare-and-set: a row whose provenance is no longer what the writer read is kept
        written = store.write_back(chosen, X[[2, 9]], "encoded:b", expected=["encoded:a", None])
        assert written.tolist() == [True, False]
        rows = store.fetch(chosen)
        assert rows.provenance == ["encoded:b", "encoded:a"]
        np.testing.assert_allclose(rows.vectors, np.stack([X[2], Y[9]]), rtol=1e-6)
        with pytest.raises(StoreNotFoundError, match="no row with"):
            store.fetch([named(1), {"uuid": "not-a-uuid", "date": "2024-02-31",
                                    "dint": -4}.get(key_type, "99999.5")])
        with pytest.raises(StoreNotFoundError, match="no row with"):
            store.write_back([named(1), named(200)], Y[:2], "encoded:c")


def test_pg_key_without_an_array_type_is_refused_by_name(pg, spaces):
    X, _ = spaces
    with _pg(pg) as conn:
        conn.execute("DROP TABLE IF EXISTS arraykey")
        conn.execute(f"CREATE TABLE arraykey (id int[] PRIMARY KEY, text text, "
                     f"emb vector({D}))")
        conn.execute("INSERT INTO arraykey VALUES (%s, 'doc 0', %s)", ([1, 2], X[0]))
    with pytest.raises(StoreError, match="primary key 'id' is integer\\[\\], which has no "
                                         "array type") as got:
        open_live(_address(pg, "arraykey"))
    assert len(str(got.value).splitlines()) == 1


@pytest.mark.parametrize("key_type", ["uuid", "numeric(10,2)", "date", "bytea", "dint"])
def test_pg_typed_keys_through_search_and_migrate(pg, spaces, encoder, tmp_path, capsys,
                                                  key_type):
    """``skalign search`` (results file, write-back) and ``skalign migrate`` then
    ``--continue`` to the end, on a table whose key is of each type and whose text and
    another column are of domain types; no text field named (the default is found)."""
    X, Y = spaces
    spec, _ = encoder
    sent, named = KEYS[key_type]
    name = key_type.split("(")[0]
    src = _make_pg(pg, f"src_{name}", X, key_type, sent)
    row_of = {str(named(i)): i for i in range(N)}
    (tmp_path / "q.txt").write_text("doc 3\ndoc 50\ndoc 77\n")
    assert main(["search", src, "--queries", str(tmp_path / "q.txt"), "--encoder", spec,
                 "-k", "3", "--candidates", "30", "--output", str(tmp_path / "r.jsonl"),
                 "--quiet"]) == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line["ids"][0] for line in lines] == [named(3), named(50), named(77)]
    got = _pg_rows(pg, f"src_{name}")
    marked = [k for k, (_, mark, _) in got.items() if mark is not None]
    assert len(marked) >= 30
    for k in marked:
        assert got[k][1].startswith("encoded:")
        np.testing.assert_allclose(got[k][0], Y[row_of[k]], rtol=1e-6)

    # a source of its own: the searched one's provenance would be copied into the output
    src = _make_pg(pg, f"mig_{name}", X, key_type, sent)
    out = _address(pg, f"out_{name}")
    assert main(["migrate", src, out, "--encoder", spec, "--budget", "40", "--anyway",
                 "--quiet"]) == 0, capsys.readouterr().err
    assert main(["migrate", src, out, "--encoder", spec, "--budget", str(N), "--continue",
                 "--quiet"]) == 0, capsys.readouterr().err
    got = _pg_rows(pg, f"out_{name}")
    assert sorted(got) == sorted(row_of)
    for k, (vector, mark, rest) in got.items():
        i = row_of[k]
        assert mark.startswith("encoded:") and rest["text"] == f"doc {i}" and rest["n"] == i + 1
        np.testing.assert_allclose(vector, Y[i], rtol=1e-6)
    assert _leftovers(pg) == []


# --------------------------------------------------------------------------- Chroma, Qdrant


def _chroma(root, X):
    pytest.importorskip("chromadb")
    import chromadb

    col = chromadb.PersistentClient(path=str(root / "chroma")).create_collection(
        "docs", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    col.add(ids=[f"id{i}" for i in range(len(X))], embeddings=X,
            documents=[f"doc {i}" for i in range(len(X))],
            metadatas=[{"n": i, "f": i / 2, "flag": i % 2 == 0, **(
                {"title": f"doc {i}"} if i % 3 else {})} for i in range(len(X))])
    return f"chroma:{root}/chroma/docs"


@pytest.mark.parametrize("key, kind", [("n", "int"), ("f", "float"), ("flag", "bool")])
def test_chroma_metadata_that_is_not_text_is_refused_by_id_key_and_type(tmp_path, spaces, key,
                                                                        kind):
    X, _ = spaces
    address = _chroma(tmp_path, X[:30])
    with open_live(address) as store:
        assert store.fetch(["id4", "id3"], text_field="title").texts == ["doc 4", None]
        assert store.fetch(["id4"]).texts == ["doc 4"]  # the document
        with pytest.raises(StoreError, match=f"record 'id4' holds {kind} .* under the metadata "
                                             f"key '{key}', not text") as got:
            store.fetch(["id4"], text_field=key)
        assert len(str(got.value).splitlines()) == 1


def _qdrant(root, X):
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    from skalign._stores.address import parse_address
    from skalign._stores.qdrant.store import _client

    (root / "qdrant").mkdir()
    client = _client(parse_address(f"qdrant:{root}/qdrant/x"))
    client.create_collection("docs", vectors_config=models.VectorParams(
        size=X.shape[1], distance=models.Distance.COSINE))
    payloads = [{"text": f"doc {i}", "meta": {"k": i}, "k": i, "tags": ["a", "b"]}
                for i in range(len(X))]
    payloads[7] = {"text": {"en": "doc 7"}}
    client.upsert("docs", points=models.Batch(ids=list(range(len(X))), vectors=X.tolist(),
                                              payloads=payloads))
    return f"qdrant:{root}/qdrant/docs"


@pytest.mark.parametrize("key, kind", [("meta", "dict"), ("k", "int"), ("tags", "list")])
def test_qdrant_payload_that_is_not_text_is_refused_by_id_key_and_type(tmp_path, spaces, key,
                                                                      kind):
    X, _ = spaces
    address = _qdrant(tmp_path, X[:20])
    with open_live(address) as store:
        assert store.fetch([4, 5]).texts == ["doc 4", "doc 5"]
        assert store.fetch([4], text_field="missing").texts == [None]
        with pytest.raises(StoreError, match=f"point 4 holds {kind} .* under the payload key "
                                             f"'{key}', not text"):
            store.fetch([4], text_field=key)
        # the default key too: a point whose "text" is an object
        with pytest.raises(StoreError, match="point 7 holds dict .* payload key 'text'"):
            store.fetch([6, 7])


@pytest.mark.parametrize("engine", ["chroma", "qdrant"])
def test_search_on_a_key_that_is_not_text_exits_2_before_encoding(tmp_path, spaces, encoder,
                                                                   capsys, engine):
    X, Y = spaces
    spec, log = encoder
    address = (_chroma if engine == "chroma" else _qdrant)(tmp_path, X[:30])
    key = "n" if engine == "chroma" else "meta"
    np.save(tmp_path / "q.npy", Y[:2])  # query vectors: the encoder is for the rows only
    assert main(["search", address, "--queries", str(tmp_path / "q.npy"), "--encoder", spec,
                 "--candidates", "10", "--output", str(tmp_path / "r.jsonl"),
                 "--text-field", key]) == 2
    err = _one_line_error(capsys, "search")
    assert f"key '{key}', not text" in err
    assert not log.exists() and not (tmp_path / "r.jsonl").exists()
    with open_live(address) as store:
        assert store.fetch(store.ids(), text_field="absent").provenance == [None] * 30


# --------------------------------------------------------------------------- Parquet, LanceDB


@pytest.mark.parametrize("kind", ["parquet", "lance"])
def test_arrow_stores_refuse_a_text_column_of_another_type(tmp_path, spaces, kind):
    pa = pytest.importorskip("pyarrow")
    X, _ = spaces
    n = 20
    table = pa.table({
        "id": np.arange(n), "doc": pa.array([f"doc {i}" for i in range(n)], pa.large_string()),
        "cat": pa.array([f"doc {i}" for i in range(n)]).dictionary_encode(),
        "n": np.arange(n), "meta": pa.array([{"k": i} for i in range(n)]),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(X[:n].reshape(-1)), D)})
    if kind == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, tmp_path / "s.parquet")
        address = str(tmp_path / "s.parquet")
    else:
        lancedb = pytest.importorskip("lancedb")
        lancedb.connect(tmp_path / "db").create_table("s", data=table)
        address = str(tmp_path / "db" / "s.lance")
    with open_live(address, text_field="doc") as store:
        assert store.fetch([3, 1]).texts == ["doc 3", "doc 1"]
        assert store.fetch([2], text_field="cat").texts == ["doc 2"]
        for column, shown in [("n", "int64"), ("meta", "struct"), ("emb", "fixed_size_list")]:
            with pytest.raises(StoreError, match=f"column '{column}' holds {shown}.*not text"):
                store.fetch([1], text_field=column)
    with pytest.raises(StoreError, match="column 'n' holds int64, not text"):
        open_live(address, text_field="n")
