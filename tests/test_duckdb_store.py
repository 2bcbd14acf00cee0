"""DuckDB with the vss extension against hostile input (a real DuckDB file, no mocks).

Names are only ever names: tables, columns and indexes named with quotes, semicolons, spaces,
accents or ``; DROP TABLE victim; --`` translate end to end and drop nothing; a folder with
quotes in its path works. The source's indexes are built again on the output: HNSW with the
same metric and connectivity (``M``, ``M0``), used by DuckDB's top-k search; an index on an
expression is skipped with a warning, and refuses a ``--replace`` that would lose it. A table
of the user's named like a shadow is never dropped. A missing or mismatched vss wheel, and a
file another process holds, are one line naming what to do.
"""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("duckdb_extension_vss")
pa = pytest.importorskip("pyarrow")

from store_backends import DuckDB  # noqa: E402

from skalign import ProcrustesAligner  # noqa: E402
from skalign.cli import main  # noqa: E402
from skalign.exceptions import MissingDependencyError, StoreError  # noqa: E402
from skalign.io import restore, save, translate  # noqa: E402

D_IN, D_OUT, N = 8, 12, 300


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    rng = np.random.default_rng(0)
    m = ProcrustesAligner().fit(rng.normal(size=(100, D_IN)), rng.normal(size=(100, D_OUT)))
    return m, str(save(m, tmp_path_factory.mktemp("model") / "m.skops"))


def _q(name):
    return '"' + name.replace('"', '""') + '"'


def _address(path, table, column=None):
    from urllib.parse import quote

    text = f"duckdb:{path}?table={quote(table, safe='')}"
    return text + (f"&column={quote(column, safe='')}" if column else "")


def _make(path, table, column="emb", X=None, index=None, hnsw="WITH (metric = 'cosine')"):
    """A table ``id`` (primary key), ``doc``, ``column FLOAT[8]`` with an HNSW index named
    ``index`` and a ``victim`` table beside it."""
    X = np.random.default_rng(1).normal(size=(N, D_IN)).astype(np.float32) if X is None else X
    conn = DuckDB.connect(path)
    conn.execute(f"CREATE TABLE {_q(table)} (id BIGINT PRIMARY KEY, doc VARCHAR, "
                 f"{_q(column)} FLOAT[{D_IN}])")
    rows = pa.table({"id": np.arange(len(X)) * 3 + 1,
                     "doc": [f"document {i}" for i in range(len(X))],
                     "v": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), D_IN)})
    conn.register("rows", rows)
    conn.execute(f"INSERT INTO {_q(table)} SELECT * FROM rows")
    conn.unregister("rows")
    if index is not None:
        conn.execute(f"CREATE INDEX {_q(index)} ON {_q(table)} USING HNSW ({_q(column)}) {hnsw}")
    conn.execute("CREATE TABLE IF NOT EXISTS victim (x INT)")
    conn.execute("INSERT INTO victim VALUES (42)")
    conn.close()
    return X


def _rows(path, table, column="emb"):
    conn = DuckDB.connect(path)
    got = conn.execute(f"SELECT id, doc, {_q(column)} FROM {_q(table)} ORDER BY id").fetchall()
    conn.close()
    return [r[0] for r in got], [r[1] for r in got], np.asarray([r[2] for r in got], np.float32)


def _catalog(path, sql, params=()):
    conn = DuckDB.connect(path)
    got = conn.execute(sql, list(params)).fetchall()
    conn.close()
    return got


HOSTILE = ['it\'s "quoted"', "semi; DROP TABLE victim; --", "Ünïcode täble", "MiXeD Case",
           "a.b"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_translate_end_to_end(tmp_path, model, name):
    m, _ = model
    path = tmp_path / "h.duckdb"
    column = name + " vec"
    X = _make(path, name, column, index=name + "; DROP TABLE victim; --")
    out = name + " out"
    n = translate(m, _address(path, name, column), _address(path, out))
    assert n == N
    ids, docs, V = _rows(path, out, column)
    assert ids == [i * 3 + 1 for i in range(N)] and docs == [f"document {i}" for i in range(N)]
    np.testing.assert_allclose(V, m.transform(X), atol=1e-5)
    assert _catalog(path, "SELECT x FROM victim") == [(42,)]
    hnsw = _catalog(path, "SELECT table_name, metric FROM pragma_hnsw_index_info() ORDER BY 1")
    assert sorted(hnsw) == sorted([(name, "cosine"), (out, "cosine")])


def test_a_folder_with_quotes_in_its_path(tmp_path, model):
    m, _ = model
    folder = tmp_path / "it's a \"dir\"; DROP TABLE victim; --"
    folder.mkdir()
    path = folder / "q'.duckdb"
    X = _make(path, "src", index="by emb")
    assert translate(m, _address(path, "src"), _address(path, "out")) == N
    np.testing.assert_allclose(_rows(path, "out")[2], m.transform(X), atol=1e-5)
    assert _catalog(path, "SELECT x FROM victim") == [(42,)]


@pytest.mark.parametrize("metric, options", [("cosine", "M = 6, M0 = 20"),
                                             ("ip", "M = 10"), ("l2sq", "")])
def test_hnsw_rebuilt_with_the_same_metric_and_connectivity_and_searched(tmp_path, model,
                                                                         metric, options):
    m, _ = model
    path = tmp_path / "x.duckdb"
    hnsw = f"WITH (metric = '{metric}'" + (f", {options})" if options else ")")
    _make(path, "src", X=np.random.default_rng(2).normal(size=(1000, D_IN)).astype(np.float32),
          index="by emb", hnsw=hnsw)
    translate(m, _address(path, "src"), _address(path, "out"))
    stats = dict((t, (met, [s["max_edges"] // s["nodes"] for s in levels[:2]]))
                 for t, met, levels in _catalog(
                     path, "SELECT table_name, metric, levels_stats FROM "
                     "pragma_hnsw_index_info()"))
    assert stats["out"] == stats["src"]
    assert stats["out"][0] == metric
    assert stats["out"][1] == {"cosine": [6, 20], "ip": [10, 20], "l2sq": [16, 32]}[metric]
    distance = {"cosine": "array_cosine_distance", "ip": "array_negative_inner_product",
                "l2sq": "array_distance"}[metric]
    q = m.transform(np.ones((1, D_IN), np.float32))[0].tolist()
    plan = _catalog(path, f"EXPLAIN SELECT id FROM out ORDER BY {distance}(emb, "
                    f"?::FLOAT[{D_OUT}]) LIMIT 5", [q])
    assert "HNSW_INDEX_SCAN" in plan[0][1]


def test_expression_index_skipped_with_a_warning_and_refuses_a_replace(tmp_path, model,
                                                                      capsys):
    m, path_m = model
    path = tmp_path / "x.duckdb"
    _make(path, "src", index="by emb")
    conn = DuckDB.connect(path)
    conn.execute("CREATE INDEX lowered ON src (lower(doc))")
    conn.close()
    assert main(["translate", path_m, _address(path, "src"), _address(path, "out"),
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning: index 'lowered' of 'src' is on an expression" in err
    before = _rows(path, "src")
    status = main(["translate", path_m, _address(path, "src"), _address(path, "src"),
                   "--replace", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "'lowered'" in err[0] and "DROP INDEX" in err[0]
    after = _rows(path, "src")
    assert after[:2] == before[:2] and np.array_equal(after[2], before[2])
    names = {r[0] for r in _catalog(path, "SELECT table_name FROM duckdb_tables()")}
    assert names == {"src", "out", "victim"}


def test_a_users_table_named_like_a_shadow_is_never_dropped(tmp_path, model):
    m, _ = model
    path = tmp_path / "x.duckdb"
    X = _make(path, "src")
    conn = DuckDB.connect(path)
    conn.execute("CREATE TABLE out_skalign_0123456789ab AS SELECT 7 AS keep")
    conn.close()
    translate(m, _address(path, "src"), _address(path, "out"))
    assert _catalog(path, "SELECT keep FROM out_skalign_0123456789ab") == [(7,)]
    np.testing.assert_allclose(_rows(path, "out")[2], m.transform(X), atol=1e-5)


def test_replace_and_restore_keep_the_indexes(tmp_path, model):
    m, _ = model
    path = tmp_path / "x.duckdb"
    X = _make(path, "src", index="by emb")
    n = translate(m, _address(path, "src"), _address(path, "src"), replace=True)
    assert n.backup.endswith("table=src_skalign_backup")
    np.testing.assert_allclose(_rows(path, "src")[2], m.transform(X), atol=1e-5)
    np.testing.assert_array_equal(_rows(path, "src_skalign_backup")[2], X)
    indexes = "SELECT index_name, table_name FROM duckdb_indexes() ORDER BY 1"
    assert _catalog(path, indexes) == [("by emb", "src"), ("by emb_src_skalign_backup",
                                                           "src_skalign_backup")]
    restore(_address(path, "src"))
    np.testing.assert_array_equal(_rows(path, "src")[2], X)
    assert _catalog(path, indexes) == [("by emb", "src"), ("by emb_src_skalign_backup",
                                                           "src_skalign_backup")]


def test_the_vss_wheel_missing_or_for_another_duckdb(tmp_path, model, monkeypatch):
    import duckdb_extension_vss

    from skalign._stores.duckdb import connect

    m, _ = model
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    monkeypatch.setattr(connect, "_INSTANCE", [None, None])
    monkeypatch.setattr(duckdb_extension_vss, "__path__", [str(tmp_path)])
    with pytest.raises(MissingDependencyError, match=r"not for the installed DuckDB .*pip "
                       r"install 'skalign\[duckdb\]'"):
        translate(m, _address(path, "src"), _address(path, "out"))
    monkeypatch.setitem(sys.modules, "duckdb_extension_vss", None)
    with pytest.raises(MissingDependencyError, match=r"duckdb-extension-vss.*skalign\[duckdb\]"):
        translate(m, _address(path, "src"), _address(path, "out"))


def test_a_file_another_process_holds_is_one_line(tmp_path, model, capsys):
    m, path_m = model
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        status = main(["translate", path_m, _address(path, "src"), _address(path, "out"),
                       "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1, err
        assert "another process has the database file open" in err[0]
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert translate(m, _address(path, "src"), _address(path, "out")) == N


@pytest.mark.parametrize("text, match", [
    ("duckdb:x.duckdb", "no table"),
    ("duckdb:x.duckdb?table=t&nope=1", "unknown parameter nope"),
    ("duckdb:?table=t", "no database file"),
])
def test_malformed_addresses(text, match):
    from skalign._stores.address import parse_address

    with pytest.raises(StoreError, match=match):
        parse_address(text)


def test_control_characters_in_a_name_stay_escaped(tmp_path, model, capsys):
    m, path_m = model
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    status = main(["translate", path_m, _address(path, "no\nsuch\x1b[31m"),
                   _address(path, "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "\x1b" not in err[0], err
    assert "no table 'no\\nsuch\\x1b[31m'" in err[0]


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_live_search_scans_the_hnsw_index(tmp_path, metric):
    from skalign._stores import open_live
    from skalign._stores.duckdb.connect import open_database

    path = tmp_path / "x.duckdb"
    vss = {"cosine": "cosine", "ip": "ip", "l2": "l2sq"}[metric]
    _make(path, "src", index="by emb", hnsw=f"WITH (metric = '{vss}')")
    with open_live(_address(path, "src")) as store:
        assert store.metric == metric
        db = open_database(store.address)
        try:
            plan = db.cursor().execute("EXPLAIN " + store.search_sql(),
                                       [[0.5] * D_IN, 5]).fetchall()[0][1]
        finally:
            db.close()
    assert "HNSW_INDEX_SCAN" in plan


def test_pairs_by_id_with_a_parquet_side(tmp_path):
    """``--source`` a DuckDB table with text keys in an order of its own and items the target
    lacks, ``--target`` a Parquet file keyed by the same ids: the pairs are joined by id, and
    ``skalign fit`` on them gives the map fitted on the true pairs."""
    pq = pytest.importorskip("pyarrow.parquet")
    from skalign.cli._pairs_io import UnmatchedIdsWarning, read_pairs
    from skalign.io import load

    rng = np.random.default_rng(58)
    A = rng.normal(size=(120, D_IN)).astype(np.float32)
    B = (A @ rng.normal(size=(D_IN, D_OUT))).astype(np.float32)
    order = rng.permutation(120)
    conn = DuckDB.connect(tmp_path / "old.duckdb")
    conn.execute(f"CREATE TABLE old (item VARCHAR PRIMARY KEY, emb FLOAT[{D_IN}])")
    conn.register("rows", pa.table({
        "item": [f"item-{i:03d}"[::-1] for i in order],  # an order of their own
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(A[order].reshape(-1)), D_IN)}))
    conn.execute("INSERT INTO old SELECT * FROM rows")
    conn.close()
    keep = np.arange(100)  # 20 items the target lacks
    pq.write_table(pa.table({"doc_id": [f"item-{i:03d}"[::-1] for i in keep],
                             "vector": pa.FixedSizeListArray.from_arrays(
                                 pa.array(B[keep].reshape(-1)), D_OUT)}),
                   tmp_path / "new.parquet")
    src = _address(tmp_path / "old.duckdb", "old")
    with pytest.warns(UnmatchedIdsWarning, match="20 ids of --source"):
        X, Y = read_pairs(src, tmp_path / "new.parquet", id_column="doc_id")
    np.testing.assert_array_equal(X, A[keep])
    np.testing.assert_array_equal(Y, B[keep])
    assert main(["fit", "procrustes", "--source", src, "--target", str(tmp_path / "new.parquet"),
                 "--id-column", "doc_id", "-o", str(tmp_path / "m.skops")]) == 0
    want = ProcrustesAligner().fit(A[keep], B[keep])
    np.testing.assert_allclose(load(tmp_path / "m.skops").transform(A[:5]),
                               want.transform(A[:5]), atol=1e-4)


def test_info_shows_the_stamp_and_the_provenance(tmp_path, model, capsys):
    import json

    m, path_m = model
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    assert main(["translate", path_m, _address(path, "src"), _address(path, "out"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", _address(path, "out"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["stamp"]["rows"] == N and got["stamp"]["d_out"] == D_OUT
    assert got["stamp"]["source"] == _address(path, "src")
    assert main(["info", _address(path, "src")]) == 0  # no stamp: said, not an error
    assert "no provenance stamp" in capsys.readouterr().out


def test_output_that_is_not_a_database_file_is_refused(tmp_path, model):
    m, _ = model
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    (tmp_path / "folder").mkdir()
    with pytest.raises(StoreError, match="is a folder"):
        translate(m, _address(path, "src"), _address(tmp_path / "folder", "out"))
    (tmp_path / "notes.txt").write_text("my notes, not a database " * 50)
    with pytest.raises(StoreError, match="not a DuckDB database file"):
        translate(m, _address(path, "src"), _address(tmp_path / "notes.txt", "out"))
    assert (tmp_path / "notes.txt").read_text() == "my notes, not a database " * 50
    with pytest.raises(StoreError, match="no folder"):
        translate(m, _address(path, "src"), _address(tmp_path / "nope" / "x.duckdb", "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "notes.txt", "x.duckdb"]


def test_stamps_guard_replace_twice_and_follow_restore(tmp_path):
    import time

    from skalign._stores.address import parse_address
    from skalign._stores.journal import model_fingerprint
    from skalign._stores.provenance import read_stamp
    from skalign.exceptions import UnsafeOperationError

    rng = np.random.default_rng(3)
    m = ProcrustesAligner().fit(rng.normal(size=(50, D_IN)), rng.normal(size=(50, D_IN)))
    path = tmp_path / "x.duckdb"
    _make(path, "src")
    src, out, backup = (_address(path, t) for t in ("src", "out", "out_skalign_backup"))
    translate(m, src, out)
    first = read_stamp(parse_address(out))
    assert first["model"] == model_fingerprint(m) and first["rows"] == N
    assert read_stamp(parse_address(src)) is None
    with pytest.raises(UnsafeOperationError, match="already this model's output"):
        translate(m, out, _address(path, "again"))
    got = translate(m, src, out, replace=True)  # twice: nothing to do
    assert got == 0 and "already holds this model's translation" in got.noop
    tables = "SELECT table_name FROM duckdb_tables() ORDER BY 1"
    assert [r[0] for r in _catalog(path, tables)] == ["out", "src", "victim"]
    time.sleep(1.1)  # a second stamp's time differs
    assert translate(m, src, out, replace=True, force=True).backup == backup
    second = read_stamp(parse_address(out))
    assert second["written"] != first["written"]
    assert read_stamp(parse_address(backup)) == first  # moved with its table
    for force in (False, True):
        with pytest.raises(UnsafeOperationError, match="INPUT is OUTPUT's backup"):
            translate(m, backup, out, replace=True, force=force)
    restore(out)
    assert read_stamp(parse_address(out)) == first
    assert read_stamp(parse_address(backup)) == second


def test_into_another_file_keeps_types_and_indexes(tmp_path, model):
    m, _ = model
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    X = _make(a, "src", index="by emb", hnsw="WITH (metric = 'ip', M = 6)")
    conn = DuckDB.connect(a)
    conn.execute("ALTER TABLE src ADD COLUMN meta JSON")
    conn.execute("ALTER TABLE src ADD COLUMN seen TIMESTAMP")
    conn.execute("UPDATE src SET meta = json_object('k', id), "
                 "seen = TIMESTAMP '2024-01-02 03:04:05'")
    conn.close()
    assert translate(m, _address(a, "src"), _address(b, "out")) == N
    np.testing.assert_allclose(_rows(b, "out")[2], m.transform(X), atol=1e-5)
    types = "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY 1"
    src_types = dict(_catalog(a, types, ["src"]))
    assert dict(_catalog(b, types, ["out"])) == {**src_types, "emb": f"FLOAT[{D_OUT}]"}
    assert _catalog(b, "SELECT metric FROM pragma_hnsw_index_info()") == [("ip",)]
    assert _catalog(b, "SELECT count(*) FROM out WHERE meta->>'k' = id::VARCHAR") == [(N,)]


def test_a_crash_after_a_commit_is_replayed_with_its_hnsw_index(tmp_path, model):
    """A process that built an HNSW index and was killed before any checkpoint leaves it in
    the write-ahead log only; skalign, which loads vss before it attaches a file, replays it:
    the table and its index are there, and searched."""
    from skalign._stores import open_live

    path = tmp_path / "x.duckdb"
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[2]); "
            "from store_backends import DuckDB; c = DuckDB.connect(sys.argv[1]); "
            "c.execute('SET wal_autocheckpoint = \\'1TB\\''); "
            "c.execute('CREATE TABLE t (id BIGINT PRIMARY KEY, text VARCHAR, emb FLOAT[4])'); "
            "c.execute('INSERT INTO t SELECT i, \\'doc \\' || i, [i, 1, 2, 3] FROM range(200) "
            "r(i)'); c.execute('CREATE INDEX h ON t USING HNSW (emb) WITH (metric = \\'l2sq\\')');"
            " os.kill(os.getpid(), signal.SIGKILL)")
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", code, str(path), str(Path(__file__).parent)])
    assert done.returncode == -9
    assert path.with_name("x.duckdb.wal").exists()  # the commit is in the log only
    with open_live(_address(path, "t")) as store:
        assert store.metric == "l2" and store.n_rows == 200
        ids, _ = store.top_k(np.array([[7, 1, 2, 3]], np.float32), 3)
        assert ids == [[7, 6, 8]] or ids == [[7, 8, 6]]
