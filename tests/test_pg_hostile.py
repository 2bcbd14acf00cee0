"""PostgreSQL + pgvector against hostile names and failing servers (a real server, no mocks).

Names are only ever names: an index named ``i USING btree (id); DROP TABLE victim; --`` on the
source drops nothing, and tables named with quotes, semicolons, `` USING ``, accents, mixed case,
63 bytes or a schema translate end to end, indexes included (built again from the catalog's
facts, under short hashed names, and counted). Every failure (a name with two dots, a role that
may only read, a missing schema or table, a row that overflows float32, a killed run's index
build still under way) exits 2 with one line naming the address (password masked) and the fix,
leaves the source as it was and no ``*_skalign_*`` table behind. The server logs every
statement: no password may reach it.
"""

import threading
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from store_backends import VECTOR_INDEXES, serve_postgres

from skalign import ProcrustesAligner
from skalign.cli import main
from skalign.io import save, translate

D_IN, D_OUT, N = 8, 12, 300
RO_PASSWORD = "ro-Pa55-hunter2"  # the read-only role's
RW_PASSWORD = "rw-Pa55-correcthorse"  # the role that may create tables in public


def _configure(base):
    """Two roles that log in with a password (SCRAM over the socket; everyone else is trusted),
    made before every statement is logged; then ``log_statement = all``."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        hba.write_text("local all skalign_ro,skalign_rw scram-sha-256\n" + hba.read_text())
        conn.execute(f"CREATE ROLE skalign_ro LOGIN PASSWORD '{RO_PASSWORD}'")
        conn.execute(f"CREATE ROLE skalign_rw LOGIN PASSWORD '{RW_PASSWORD}'")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute("GRANT CREATE ON SCHEMA public TO skalign_rw")
        conn.execute("ALTER SYSTEM SET log_statement = 'all'")
        conn.execute("SELECT pg_reload_conf()")
        return Path(conn.execute("SHOW data_directory").fetchone()[0]) / "log"


class Server:
    """``base``: the libpq URI; ``log``: the server's log file; ``hnsw``: whether pgvector can
    build an HNSW index on rows here (``VECTOR_INDEXES``)."""

    def __init__(self, base, log):
        self.base, self.log, self.hnsw = base, log, not VECTOR_INDEXES.get(base)


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    """A PostgreSQL with pgvector started for this module (:class:`Server`)."""
    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    server = serve_postgres(tmp_path_factory)
    base = next(server)
    try:
        yield Server(base, _configure(base))
    finally:
        server.close()


@pytest.fixture
def db(pg):
    """An autocommit connection (vectors registered) to a database holding no table."""
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(pg.base, autocommit=True) as conn:
        register_vector(conn)
        for (schema,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname "
                "NOT IN ('public', 'information_schema')").fetchall():
            conn.execute(_sql("DROP SCHEMA {} CASCADE", schema))
        for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = "
                                     "'public'").fetchall():
            conn.execute(_sql("DROP TABLE {} CASCADE", ("public", table)))
        yield conn


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    rng = np.random.default_rng(0)
    m = ProcrustesAligner().fit(rng.normal(size=(100, D_IN)), rng.normal(size=(100, D_OUT)))
    return m, str(save(m, tmp_path_factory.mktemp("model") / "m.skops"))


def _sql(template, *names):
    """``template`` with each ``{}`` an identifier: a name, or ``(schema, name)``."""
    from psycopg import sql

    return sql.SQL(template).format(*(sql.Identifier(*n) if isinstance(n, tuple)
                                      else sql.Identifier(n) for n in names))


def _qualified(name):
    schema, _, table = name.rpartition(".")
    return (schema or "public", table)


def _address(base, name, user=None, password=None):
    if user is not None:
        base = base.replace("postgres@", f"{user}:{quote(password, safe='')}@")
    return f"{base}&table={quote(name, safe='')}&column=emb"


def _make(conn, name, X=None, hnsw=False):
    """A source table: ``id`` (primary key), ``doc`` (unique), ``emb vector(8)``, with a
    descending btree and, with ``hnsw``, an HNSW index."""
    X = np.random.default_rng(1).normal(size=(N, D_IN)).astype(np.float32) if X is None else X
    t = _qualified(name)
    if t[0] != "public":
        conn.execute(_sql("CREATE SCHEMA IF NOT EXISTS {}", t[0]))
    conn.execute(_sql(f"CREATE TABLE {{}} (id bigint PRIMARY KEY, doc text UNIQUE, "
                      f"emb vector({D_IN}))", t))
    with conn.cursor() as cur, cur.copy(_sql("COPY {} (id, doc, emb) FROM STDIN (FORMAT "
                                             "BINARY)", t)) as copy:
        copy.set_types(["bigint", "text", "vector"])
        for i, x in enumerate(X):
            copy.write_row([i * 3 + 1, f"document {i}", x])
    conn.execute(_sql("CREATE INDEX {} ON {} (doc DESC, id)", "by doc", t))
    if hnsw:
        conn.execute(_sql("CREATE INDEX {} ON {} USING hnsw (emb vector_cosine_ops) WITH (m = 4, "
                          "ef_construction = 16)", "by emb", t))
    return X


def _rows(conn, name):
    rows = conn.execute(_sql("SELECT id, doc, emb FROM {} ORDER BY id", _qualified(name)))
    rows = rows.fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], np.array([r[2].to_numpy() for r in rows])


def _indexes(conn, name):
    """The source's or output's index definitions without their names: method, columns,
    operator classes, options; and which is the primary key."""
    rows = conn.execute(
        "SELECT pg_get_indexdef(i.indexrelid), i.indisprimary, i.indisunique FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s", _qualified(name)).fetchall()
    return sorted((r[0].rsplit(" USING ", 1)[1], r[1], r[2]) for r in rows)


def _leftovers(conn):
    return [r[0] for r in conn.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE c.relkind IN ('r', 'p') AND c.relname LIKE '%\\_skalign\\_%'")]


def _tables(conn):
    return sorted(r[0] for r in conn.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', "
        "'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'"))


def _cli(capsys, *argv):
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err.strip().splitlines()


def _fails(capsys, conn, model_path, src, dst, name, match, *more):
    """The translation exits 2 with one line matching ``match``, the source unchanged and no
    table made or left."""
    before, tables = _rows(conn, name), _tables(conn)
    status, err = _cli(capsys, "translate", model_path, src, dst, "--quiet", *more)
    assert status == 2 and len(err) == 1 and match in err[0], err
    after = _rows(conn, name)
    assert after[:2] == before[:2]
    np.testing.assert_array_equal(after[2], before[2])
    assert _tables(conn) == tables and not _leftovers(conn)
    return err[0]


def _translated(conn, model, src_name, out_name):
    ids, docs, V = _rows(conn, src_name)
    got = _rows(conn, out_name)
    assert got[:2] == (ids, docs)
    np.testing.assert_allclose(got[2], model.transform(V), atol=1e-5)
    assert _indexes(conn, out_name) == _indexes(conn, src_name)


def test_an_index_name_is_never_run_as_sql(db, model, pg, capsys):
    """The source's index named ``i USING btree (id); DROP TABLE victim; --``: its name is never
    SQL; the output gets every index of the source (primary key, the unique constraint, the
    btree, the HNSW index with its operator class and options) under hashed names that fit."""
    db.execute("CREATE TABLE victim (x int)")
    _make(db, "src", hnsw=pg.hnsw)
    db.execute(_sql("CREATE INDEX {} ON {} (doc)", "i USING btree (id); DROP TABLE victim; --",
                    ("public", "src")))
    status, err = _cli(capsys, "translate", model[1], _address(pg.base, "src"),
                       _address(pg.base, "out"), "--quiet")
    assert status == 0, err
    assert db.execute("SELECT to_regclass('victim')").fetchone()[0] is not None
    _translated(db, model[0], "src", "out")
    want = [("btree (doc DESC, id)", False, False), ("btree (doc)", False, False),
            ("btree (doc)", False, True), ("btree (id)", True, True)]
    if pg.hnsw:
        want.append(("hnsw (emb vector_cosine_ops) WITH (m='4', ef_construction='16')", False,
                     False))
    assert _indexes(db, "out") == sorted(want)
    names = [r[0] for r in db.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE "
        "i.indrelid = 'out'::regclass").fetchall()]
    assert len(set(names)) == len(want)
    assert all(n.startswith("skalign_") and len(n) == 24 for n in names)
    assert db.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'out'::regclass AND "
                      "contype IN ('p', 'u')").fetchone()[0] == 2
    assert not _leftovers(db)


NAMES = [
    ("t USING x", "t USING x_out"),
    ('a"b', 'a"b_out'),
    ("semi;colon", "semi;colon --out"),
    ("tablé", "tablé_sortie"),
    ("MyTable", "MyOutput"),
    ("n" * 63, "o" * 63),
    ("é" * 31 + "x", "è" * 31 + "y"),  # 63 bytes, 32 characters
    ("s.t", "s.t_out"),
    ('we"ird sch;ema.Tab le', 'we"ird sch;ema.Out put'),
    ("src42", "o" * 42),  # its shadow's name is 63 bytes, where derived names used to collide
]


@pytest.mark.parametrize("name, out", NAMES)
def test_hostile_table_names_translate_end_to_end(db, model, pg, capsys, name, out):
    _make(db, name, hnsw=pg.hnsw)
    status, err = _cli(capsys, "translate", model[1], _address(pg.base, name),
                       _address(pg.base, out), "--quiet")
    assert status == 0, err
    _translated(db, model[0], name, out)
    assert not _leftovers(db)


@pytest.mark.parametrize("name, out", NAMES)
def test_hostile_table_names_replace_and_restore(db, model, pg, capsys, name, out):
    """``--replace`` keeps the first output as the backup (indexes and all) under a name that
    fits; ``restore`` swaps the two back."""
    _make(db, name, hnsw=pg.hnsw)
    src, dst = _address(pg.base, name), _address(pg.base, out)
    for more in ((), ("--replace", "--force")):
        status, err = _cli(capsys, "translate", model[1], src, dst, "--quiet", *more)
        assert status == 0, err
    _translated(db, model[0], name, out)
    (backup,) = _leftovers(db)
    assert backup.endswith("_skalign_backup") and len(backup.split(".", 1)[1].encode()) <= 63
    assert _indexes(db, backup) == _indexes(db, name)
    status, err = _cli(capsys, "restore", dst)
    assert status == 0, err
    _translated(db, model[0], name, out)
    assert _leftovers(db) == [backup]


def test_a_name_with_two_dots_is_refused(db, model, pg, capsys):
    _make(db, "src", hnsw=pg.hnsw)
    line = _fails(capsys, db, model[1], _address(pg.base, "src"), _address(pg.base, "a.b.c"),
                  "src", "'a.b.c'")
    assert "SCHEMA.TABLE" in line


def test_a_role_that_may_only_read(db, model, pg, capsys):
    """SELECT on the source, no CREATE on the schema: one line saying what to grant, the
    password masked."""
    _make(db, "src", hnsw=pg.hnsw)
    db.execute("GRANT SELECT ON src TO skalign_ro")
    line = _fails(capsys, db, model[1], _address(pg.base, "src", "skalign_ro", RO_PASSWORD),
                  _address(pg.base, "out", "skalign_ro", RO_PASSWORD), "src", "permission denied")
    assert "grant CREATE on the schema or write to another schema" in line
    assert RO_PASSWORD not in line and "skalign_ro:***@" in line


def test_a_role_that_may_not_read_the_source(db, model, pg, capsys):
    _make(db, "src", hnsw=pg.hnsw)
    line = _fails(capsys, db, model[1], _address(pg.base, "src", "skalign_rw", RW_PASSWORD),
                  _address(pg.base, "out", "skalign_rw", RW_PASSWORD), "src", "permission denied")
    assert "grant SELECT" in line and RW_PASSWORD not in line


def test_a_missing_schema(db, model, pg, capsys):
    _make(db, "src", hnsw=pg.hnsw)
    line = _fails(capsys, db, model[1], _address(pg.base, "src"), _address(pg.base, "nowhere.out"),
                  "src", "no schema 'nowhere'")
    assert "CREATE SCHEMA" in line
    _fails(capsys, db, model[1], _address(pg.base, "nowhere.src"), _address(pg.base, "out"), "src",
           "no schema 'nowhere'")


def test_a_missing_table_names_a_few_close_matches_only(db, model, pg, capsys):
    _make(db, "documents")
    for i in range(30):
        db.execute(_sql("CREATE TABLE {} (x int)", f"filler_{i:02d}"))
    line = _fails(capsys, db, model[1], _address(pg.base, "documnets"), _address(pg.base, "out"),
                  "documents", "no table 'documnets'")
    assert "'documents'" in line and "filler" not in line
    line = _fails(capsys, db, model[1], _address(pg.base, "zzz"), _address(pg.base, "out"),
                  "documents", "no table 'zzz'")
    assert "filler" not in line and "documents" not in line.split("no table", 1)[1]


# the affine map's second pass over a batch whose product overflowed (streaming.BatchTranslator)
# warns "overflow encountered in matmul" outside np.errstate: the lead's, reported
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_row_that_overflows_float32(db, model, pg, capsys):
    """A finite input row whose translation overflows float32 (pgvector stores no infinity):
    said before the COPY, naming the row; nothing written."""
    X = np.random.default_rng(1).normal(size=(N, D_IN)).astype(np.float32)
    X[217] = 3e38
    _make(db, "src", X, hnsw=False)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(np.asarray(model[0].transform(X[217:218]), np.float32)).all()
    line = _fails(capsys, db, model[1], _address(pg.base, "src"), _address(pg.base, "out"),
                  "src", "row 217")
    assert "float32" in line


def test_expression_and_partial_indexes_are_skipped_with_a_warning(db, model, pg, capsys):
    """Their SQL text is the catalog's: never run. Each is named in a warning; the others are
    built."""
    _make(db, "src", hnsw=False)
    db.execute("CREATE INDEX by_lower ON src (lower(doc))")
    db.execute("CREATE INDEX some_ids ON src (id) WHERE id > 100")
    status, err = _cli(capsys, "translate", model[1], _address(pg.base, "src"),
                       _address(pg.base, "out"), "--quiet")
    assert status == 0, err
    assert len(err) == 2 and "'by_lower'" in err[0] and "expression" in err[0], err
    assert "'some_ids'" in err[1] and "partial" in err[1], err
    assert len(_indexes(db, "out")) == len(_indexes(db, "src")) - 2


def test_an_index_missing_after_the_build_fails_the_translation(db, model, pg, capsys,
                                                                 monkeypatch):
    """Were an index not built (as when derived names were cut at 63 bytes and collided, and
    ``IF NOT EXISTS`` skipped one), the count after the build catches it: exit 2, nothing
    published."""
    from psycopg import sql

    from skalign._stores.pgvector import indexes as pg_indexes

    build = pg_indexes.build_statement
    monkeypatch.setattr(pg_indexes, "build_statement", lambda spec, *a: sql.SQL("SELECT 1")
                        if spec.name == "by doc" else build(spec, *a))
    _make(db, "src", hnsw=False)
    _fails(capsys, db, model[1], _address(pg.base, "src"), _address(pg.base, "out"), "src",
           "indexes")


class _Crash(BaseException):
    """Stops a run as a kill would: the shadow stays, to be resumed."""


def _crash(*args):
    raise _Crash()


@pytest.mark.parametrize("same", [True, False])
def test_a_killed_runs_index_build_still_under_way(db, model, pg, capsys, monkeypatch, same):
    """A run killed while building the indexes leaves a server process that goes on building
    one. The next run resumes the shadow and builds the same index under the same name: it
    waits, then finds the name taken once that process commits. The index committed is
    taken where it is the one wanted; otherwise one line says to run again, and nothing is
    left."""
    import psycopg

    from skalign._stores.pgvector import store as pgvector
    from skalign._stores.pgvector.indexes import index_name

    _make(db, "src", hnsw=False)
    src, out = _address(pg.base, "src"), _address(pg.base, "out")
    with monkeypatch.context() as m:
        m.setattr(pgvector.Writer, "finish", _crash)
        with pytest.raises(_Crash):
            translate(model[0], src, out)
    (shadow,) = [t.split(".", 1)[1] for t in _leftovers(db)]
    oid = db.execute("SELECT %s::regclass::oid", (shadow,)).fetchone()[0]
    name = index_name("public", "out", oid, "by doc")
    other = psycopg.connect(pg.base)  # the killed run's server process, mid-build
    other.execute(_sql("CREATE INDEX {} ON {} (doc DESC, id)" if same else
                       "CREATE INDEX {} ON {} (id)", name, ("public", shadow)))
    built = other.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0]
    result = {}
    rerun = threading.Thread(target=lambda: result.update(
        status=main(["translate", model[1], src, out, "--quiet"])))
    rerun.start()
    for _ in range(600):  # until the rerun waits on the index's name
        if db.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                      "AND pid <> pg_backend_pid()").fetchone()[0]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the rerun never waited on the killed run's index")
    other.commit()
    other.close()
    rerun.join(60)
    err = capsys.readouterr().err.strip().splitlines()
    if same:
        assert result["status"] == 0, err
        _translated(db, model[0], "src", "out")
        assert not _leftovers(db)
        # the killed run's index itself, taken as it was built
        assert db.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0] == built
    else:
        assert result["status"] == 2 and len(err) == 1 and "run the same command again" in \
            err[0], err
        assert _tables(db) == ["public.src"]


def test_a_lost_connection_is_one_line_and_the_rerun_resumes(db, model, pg, capsys,
                                                             monkeypatch):
    """A loading connection's server process terminated mid-run (a restart, a failover): one
    line saying to run again (exit 2), the committed batches kept; the rerun resumes and
    finishes, leaving nothing."""
    from skalign._stores.pgvector import store as pgvector

    _make(db, "src", hnsw=pg.hnsw)
    write, seen = pgvector.Writer.write_unit, []

    def cut(self, conn, *rest):
        seen.append(1)
        if len(seen) == 3:
            db.execute("SELECT pg_terminate_backend(%s, 10000)", (conn.info.backend_pid,))
        return write(self, conn, *rest)

    src, out = _address(pg.base, "src"), _address(pg.base, "out")
    with monkeypatch.context() as m:
        m.setattr(pgvector.Writer, "write_unit", cut)
        status, err = _cli(capsys, "translate", model[1], src, out, "--quiet", "--batch-size",
                           "64")
    assert status == 2 and len(err) == 1 and "run the same command again" in err[0], err
    (shadow,) = _leftovers(db)
    assert db.execute(_sql("SELECT count(*) FROM {}", tuple(shadow.split(".", 1)))).fetchone()[0] \
        == 128
    status, err = _cli(capsys, "translate", model[1], src, out, "--quiet", "--batch-size", "64")
    assert status == 0, err
    _translated(db, model[0], "src", "out")
    assert not _leftovers(db)


def test_no_password_reaches_the_server_log(db, model, pg, capsys):
    """The server logs every statement (and its parameters): a translation, its --replace
    and a restore with a password in the address leave no trace of it there."""
    _make(db, "src", hnsw=False)
    db.execute("GRANT SELECT ON src TO skalign_rw")
    src = _address(pg.base, "src", "skalign_rw", RW_PASSWORD)
    out = _address(pg.base, "out", "skalign_rw", RW_PASSWORD)
    for argv in (("translate", model[1], src, out, "--quiet"),
                 ("translate", model[1], src, out, "--quiet", "--replace", "--force"),
                 ("restore", out)):
        status, err = _cli(capsys, *argv)
        assert status == 0, err
    log = pg.log.read_text(errors="replace")
    assert "statement: " in log  # it does log statements
    assert RW_PASSWORD not in log and quote(RW_PASSWORD, safe="") not in log
