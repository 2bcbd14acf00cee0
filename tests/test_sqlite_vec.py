"""sqlite-vec (``sqlite:PATH?table=TABLE``) against the real engine, no mocks: hostile table
names stay data through the translation, the publish and the live store; the other tables of
the user's file are never touched; a second writer is refused at once; pairs are read by
id; a translated table keeps its partition keys, primary key and options."""

import numpy as np
import pytest

pytest.importorskip("sqlite_vec")
pytest.importorskip("apsw")

from store_backends import SqliteVec  # noqa: E402

from skalign import ProcrustesAligner  # noqa: E402
from skalign._stores import open_live  # noqa: E402
from skalign.exceptions import StoreError  # noqa: E402
from skalign.io import translate  # noqa: E402

HOSTILE = 'we"ird; DROP TABLE victim; --'


@pytest.fixture()
def model_and_X():
    rng = np.random.default_rng(56)
    X = rng.normal(size=(200, 16)).astype(np.float32)
    return ProcrustesAligner().fit(X[:80], rng.normal(size=(80, 24))), X


def _victim(conn):
    conn.execute("CREATE TABLE victim (id integer primary key, note text)")
    conn.execute("INSERT INTO victim (note) VALUES ('keep me')")


def test_hostile_table_names_stay_data(tmp_path, model_and_X):
    model, X = model_and_X
    b = SqliteVec()
    conn = b.connect(tmp_path / "vec.db")
    _victim(conn)
    conn.close()
    src = b.make(tmp_path, X, table=HOSTILE)
    out = b.output(tmp_path, HOSTILE + " out")
    assert translate(model, src, out, batch_size=64) == len(X)
    ids, V, fields = b.read(out)
    np.testing.assert_array_equal(ids, np.arange(len(X)) * 3 + 1)
    np.testing.assert_allclose(V, model.transform(X), atol=1e-5)
    assert fields == b.read(src)[2]
    with open_live(out, text_field="doc") as store:
        got, _ = store.top_k(V[:3], 1)
        assert got == [[1], [4], [7]]
        store.write_back([1], V[[1]], "encoded:x")
        assert store.fetch([1]).provenance == ["encoded:x"]
    conn = b.connect(tmp_path / "vec.db")
    assert conn.execute("SELECT note FROM victim").fetchall() == [("keep me",)]
    conn.close()
    assert sorted(b.inventory(tmp_path)) == sorted([HOSTILE, HOSTILE + " out"])


def test_definition_kept_partition_text_key_and_options(tmp_path, model_and_X):
    model, X = model_and_X
    b = SqliteVec()
    conn = b.connect(tmp_path / "vec.db")
    conn.execute("CREATE VIRTUAL TABLE docs USING vec0(doc_id text primary key, lang text "
                 "partition key, emb float[16] distance_metric=cosine, title float[2], "
                 "ok boolean, score float, +body text, chunk_size=64)")
    with conn:
        conn.executemany("INSERT INTO docs (doc_id, lang, emb, title, ok, score, body) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?)",
                         ((f"d{i}", "en" if i % 3 else "fr", x.tobytes(),
                           np.array([1, i], "<f4").tobytes(), i % 2, i / 7, f"body {i}")
                          for i, x in enumerate(X)))
    conn.close()
    address = f"sqlite:{tmp_path / 'vec.db'}?table=docs&column=emb"
    out = f"sqlite:{tmp_path / 'vec.db'}?table=docs2&column=emb"
    translate(model, address, out, batch_size=50)
    conn = b.connect(tmp_path / "vec.db")
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'docs2'").fetchone()[0]
    assert "doc_id text primary key" in sql and "lang text partition key" in sql
    assert "emb float[24] distance_metric=cosine" in sql and "chunk_size=64" in sql
    assert "title float[2]" in sql and "+body text" in sql
    rows = {r[0]: r[1:] for r in conn.execute(
        "SELECT doc_id, lang, emb, title, ok, score, body FROM docs2")}
    before = {r[0]: r[1:] for r in conn.execute(
        "SELECT doc_id, lang, emb, title, ok, score, body FROM docs")}
    conn.close()
    assert set(rows) == set(before)
    T = model.transform(X)
    for i in range(len(X)):
        got, was = rows[f"d{i}"], before[f"d{i}"]
        assert got[0] == was[0] and got[2:] == was[2:]
        np.testing.assert_allclose(np.frombuffer(got[1], "<f4"), T[i], atol=1e-5)
    with open_live(out) as store:  # text ids, the partition searched whole
        assert sorted(store.ids()) == sorted(f"d{i}" for i in range(len(X)))
        assert store.top_k(T[[5]], 1)[0] == [["d5"]]


def test_pairs_by_id_and_second_writer_refused(tmp_path, model_and_X):
    from skalign._stores.address import parse_address
    from skalign._stores.databases.common import lock_for
    from skalign._stores.pipeline.translate import open_reader

    model, X = model_and_X
    b = SqliteVec()
    src = b.make(tmp_path, X)
    V, ids = open_reader(parse_address(src)).read_with_ids()
    assert ids == list(np.arange(len(X)) * 3 + 1)
    np.testing.assert_array_equal(V, X)
    out = b.output(tmp_path)
    with lock_for(parse_address(out)):  # as a running translation holds it
        with pytest.raises(StoreError, match="another skalign translate"):
            translate(model, src, out)
    assert b.inventory(tmp_path) == ["src"]
    translate(model, src, out)
    assert b.inventory(tmp_path) == ["out", "src"]


def test_output_that_is_not_a_database_file_is_refused(tmp_path, model_and_X):
    model, X = model_and_X
    b = SqliteVec()
    src = b.make(tmp_path, X)
    (tmp_path / "folder").mkdir()
    with pytest.raises(StoreError, match="is not a file"):
        translate(model, src, f"sqlite:{tmp_path / 'folder'}?table=out")
    (tmp_path / "notes.txt").write_text("my notes, not a database " * 50)
    with pytest.raises(StoreError, match="not an SQLite database"):
        translate(model, src, f"sqlite:{tmp_path / 'notes.txt'}?table=out")
    assert (tmp_path / "notes.txt").read_text() == "my notes, not a database " * 50
    with pytest.raises(StoreError, match="no folder"):
        translate(model, src, f"sqlite:{tmp_path / 'nope' / 'x.db'}?table=out")


def test_pairs_by_id_with_a_parquet_side(tmp_path):
    """``--source`` a vec0 table with text keys in an order of its own and items the target
    lacks, ``--target`` a Parquet file keyed by the same ids: the pairs are joined by id (a
    join by row would pair other items' vectors), and ``skalign fit`` on them gives the map
    fitted on the true pairs."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from skalign.cli import main
    from skalign.cli._pairs_io import UnmatchedIdsWarning, read_pairs
    from skalign.io import load

    rng = np.random.default_rng(57)
    A = rng.normal(size=(120, 16)).astype(np.float32)
    B = (A @ rng.normal(size=(16, 24))).astype(np.float32)
    conn = SqliteVec.connect(tmp_path / "old.db")
    conn.execute("CREATE VIRTUAL TABLE old USING vec0(item text primary key, emb float[16])")
    order = rng.permutation(120)
    with conn:
        conn.executemany("INSERT INTO old (item, emb) VALUES (?, ?)",
                         ((f"item-{i}", A[i].tobytes()) for i in order))
    conn.close()
    keep = np.arange(100)  # 20 items the target lacks
    vec = pa.FixedSizeListArray.from_arrays(pa.array(B[keep].reshape(-1)), 24)
    pq.write_table(pa.table({"doc_id": [f"item-{i}" for i in keep], "vector": vec}),
                   tmp_path / "new.parquet")
    src = f"sqlite:{tmp_path / 'old.db'}?table=old"
    with pytest.warns(UnmatchedIdsWarning, match="20 ids of --source"):
        X, Y = read_pairs(src, tmp_path / "new.parquet", id_column="doc_id")
    np.testing.assert_array_equal(X, A[keep])
    np.testing.assert_array_equal(Y, B[keep])
    assert main(["fit", "procrustes", "--source", src, "--target", str(tmp_path / "new.parquet"),
                 "--id-column", "doc_id", "-o", str(tmp_path / "m.skops")]) == 0
    want = ProcrustesAligner().fit(A[keep], B[keep])
    np.testing.assert_allclose(load(tmp_path / "m.skops").transform(A[:5]),
                               want.transform(A[:5]), atol=1e-4)


def test_output_whose_own_tables_names_are_taken_is_refused_before_any_work(tmp_path,
                                                                           model_and_X):
    """A user's table ``out_rowids`` (a name the vec0 table ``out`` would keep its rows in):
    the translation into ``out`` is refused before anything is written, and the table kept."""
    model, X = model_and_X
    b = SqliteVec()
    src = b.make(tmp_path, X)
    conn = b.connect(tmp_path / "vec.db")
    conn.execute("CREATE TABLE out_rowids (note text)")
    conn.execute("INSERT INTO out_rowids VALUES ('mine')")
    conn.close()
    with pytest.raises(StoreError, match="already has a table 'out_rowids'"):
        translate(model, src, b.output(tmp_path))
    assert b.inventory(tmp_path) == ["src"]
    conn = b.connect(tmp_path / "vec.db")
    assert conn.execute("SELECT note FROM out_rowids").fetchall() == [("mine",)]
    conn.close()


def test_a_new_output_file_keeps_the_source_files_permission_bits(tmp_path, model_and_X):
    import os
    import stat

    model, X = model_and_X
    b = SqliteVec()
    src = b.make(tmp_path, X)
    os.chmod(tmp_path / "vec.db", 0o640)
    out = f"sqlite:{tmp_path / 'new.db'}?table=out"
    translate(model, src, out)
    assert stat.S_IMODE(os.stat(tmp_path / "new.db").st_mode) == 0o640 & ~_umask()
    np.testing.assert_allclose(b.read(out)[1], model.transform(X), atol=1e-5)


def _umask():
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_wal_database_written_by_another_program_throughout(tmp_path, model_and_X):
    """A database in WAL mode, another connection inserting into its own table of the same
    file all along: the translation into that file reads its snapshot on a connection of its
    own and commits beside the other writer; neither is refused."""
    import threading
    import time

    model, X = model_and_X
    X = np.tile(X, (20, 1))  # 4,000 rows, 16 batches: the other writer commits among them
    b = SqliteVec()
    src = b.make(tmp_path, X)
    conn = b.connect(tmp_path / "vec.db")
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.execute("CREATE TABLE app (x integer)")
    conn.close()
    stop, written, errors = threading.Event(), [0], []

    def app():
        mine = b.connect(tmp_path / "vec.db")
        while not stop.is_set():
            try:
                mine.execute("INSERT INTO app VALUES (1)")
                written[0] += 1
            except Exception as exc:  # reported below
                errors.append(repr(exc))
                break
            time.sleep(0.002)
        mine.close()

    thread = threading.Thread(target=app)
    thread.start()
    try:
        translate(model, src, b.output(tmp_path), batch_size=256)
        with open_live(b.output(tmp_path)) as store:
            store.write_back([1], model.transform(X[:1]), "encoded:x")
    finally:
        stop.set()
        thread.join()
    assert errors == [] and written[0] > 0
    np.testing.assert_allclose(b.read(b.output(tmp_path))[1][:200], model.transform(X[:200]),
                               atol=1e-5)


@pytest.mark.parametrize("text, name, column", [
    ("sqlite:app.db?table=docs", "docs", None),
    ("sqlite:/abs/app.db?table=docs&column=emb", "docs", "emb"),
    ("SQLITE:app.db?table=we%22ird%3B%20x", 'we"ird; x', None),
])
def test_address_forms(text, name, column):
    from skalign._stores.address import parse_address

    a = parse_address(text)
    assert (a.kind, a.name, a.column) == ("sqlite-vec", name, column)
    assert parse_address(str(a)) == a  # rendered, parsed again: the same store
    assert a.identity == ("sqlite-vec", str(a.path.resolve()), name)


@pytest.mark.parametrize("text, match", [
    ("sqlite:app.db", r"no table; add \?table=TABLE"),
    ("sqlite:app.db?table=", r"no table; add \?table=TABLE"),
    ("sqlite:app.db?table=a&table=b", "given twice"),
    ("sqlite:app.db?table=a&column=", "empty column="),
    ("sqlite:app.db?table=a&vector=v", "unknown parameter vector"),
    ("sqlite:?table=a", "no database file"),
    ("sqlite:///app.db?table=a", "with the file's path after sqlite:"),
    ("sqlite:app.db?table=a%00b", "NUL character"),
])
def test_malformed_addresses(text, match):
    from skalign._stores.address import parse_address

    with pytest.raises(StoreError, match=match):
        parse_address(text)


def test_control_characters_in_a_table_name_are_escaped_in_messages(tmp_path, model_and_X,
                                                                     capsys):
    from skalign.cli import main
    from skalign.io import save

    model, X = model_and_X
    b = SqliteVec()
    b.make(tmp_path, X)
    path = save(model, tmp_path / "m.skops")
    bad = f"sqlite:{tmp_path / 'vec.db'}?table=x%0A%1B%5B31mred"
    assert main(["translate", str(path), bad, b.output(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err, err
    assert "no table 'x\\n\\x1b[31mred'" in err, err


def test_a_database_file_replaced_in_the_process_is_opened_again(tmp_path, model_and_X):
    """The process keeps one connection per file: a file removed and made again under the
    same path (a new database) is read as the new one, not through the old connection."""
    import shutil

    model, X = model_and_X
    b = SqliteVec()
    first = tmp_path / "one"
    first.mkdir()
    src = b.make(first, X)
    translate(model, src, b.output(first))
    second = tmp_path / "two"
    second.mkdir()
    b.make(second, X[::-1].copy())
    (first / "vec.db").unlink()
    shutil.copy(second / "vec.db", first / "vec.db")  # the same path, another database
    translate(model, src, b.output(first, "again"))
    np.testing.assert_allclose(b.read(b.output(first, "again"))[1],
                               model.transform(X[::-1].copy()), atol=1e-5)


def test_fetch_of_many_ids_scans_and_gives_the_same_rows(tmp_path, model_and_X):
    """Many ids are read in one scan, few by point queries: the same rows, texts and marks in
    the order asked, and an unknown id refused either way."""
    from skalign._stores.sqlite_vec import live
    from skalign.exceptions import StoreNotFoundError

    _, X = model_and_X
    b = SqliteVec()
    address = b.make(tmp_path, X)
    ids = [3 * i + 1 for i in np.random.default_rng(1).permutation(len(X))]
    with open_live(address, text_field="doc") as store:
        store.write_back(ids[:3], X[:3] + 1, "encoded:x")
        assert len(ids) * live.SCAN_RATIO >= store.n_rows  # scanned
        many = store.fetch(ids)
        few = [store.fetch([i]) for i in ids[:20]]  # point queries
        with pytest.raises(StoreNotFoundError, match="no row with id 2"):
            store.fetch(ids + [2])
    assert many.ids == ids
    assert many.provenance[:3] == ["encoded:x"] * 3 and set(many.provenance[3:]) == {None}
    for k, one in enumerate(few):
        np.testing.assert_array_equal(one.vectors[0], many.vectors[k])
        assert one.texts == [many.texts[k]] and one.provenance == [many.provenance[k]]
    np.testing.assert_array_equal(many.vectors[3:], X[[(i - 1) // 3 for i in ids[3:]]])


def test_rollback_journal_database_with_another_writer(tmp_path, model_and_X):
    """SQLite's default rollback journal: the translation's read holds the file's read lock,
    so another program that begins writing the file cannot commit until it gives up (its own
    busy timeout, then a rollback); the translation's writes, refused at once meanwhile, ask
    again until then, and the translation finishes."""
    import threading
    import time

    import apsw

    model, X = model_and_X
    X = np.tile(X, (20, 1))
    b = SqliteVec()
    src = b.make(tmp_path, X)
    conn = b.connect(tmp_path / "vec.db")
    conn.execute("CREATE TABLE app (x integer)")
    conn.close()
    stop, started, counts = threading.Event(), threading.Event(), {"commits": 0, "refused": 0}

    def app():
        mine = b.connect(tmp_path / "vec.db")
        mine.setbusytimeout(200)
        while not stop.is_set():
            try:
                mine.execute("BEGIN IMMEDIATE")
                mine.execute("INSERT INTO app VALUES (1)")
                mine.execute("COMMIT")
                counts["commits"] += 1
                started.set()
            except apsw.BusyError:
                counts["refused"] += 1
                if not mine.getautocommit():
                    mine.execute("ROLLBACK")
            time.sleep(0.002)
        mine.close()

    thread = threading.Thread(target=app)
    thread.start()
    try:
        assert started.wait(30)  # the other program writes from before the translation on
        translate(model, src, b.output(tmp_path), batch_size=256)
    finally:
        stop.set()
        thread.join()
    assert counts["refused"] > 0  # the two writers met
    np.testing.assert_allclose(b.read(b.output(tmp_path))[1][:200], model.transform(X[:200]),
                               atol=1e-5)
