"""A large write-back step into a pgvector table under an HNSW index (a real PostgreSQL, no
mocks): staged, then written in one transaction that builds the index again
(:mod:`skalign._stores.pgvector.writes`). It writes what the batches written one by one
write (compare-and-set included), a reader never sees a row without its mark or the table
without its index, a kill at any step leaves the table as it was with its index, and hostile
names stay names."""

import os
import signal
import threading

import numpy as np
import pytest
from store_backends import VECTOR_INDEXES

from skalign._stores import open_live
from skalign._stores.pipeline.translate import RowMarks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DIM, N = 8, 300


@pytest.fixture(scope="module")
def pg(pg_base):
    if VECTOR_INDEXES.get(pg_base):
        pytest.skip(VECTOR_INDEXES[pg_base])
    return pg_base


def _conn(base):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(base, autocommit=True)
    register_vector(conn)
    return conn


def _make(base, table, schema="public", key="id", col="emb", mark="skalign_vector",
          index=None):
    """The table ``schema.table`` of :data:`N` rows under an HNSW index ``index``; every third
    row marked ``translated:m0``, the others without a mark. Returns its address."""
    from psycopg import sql

    rng = np.random.default_rng(0)
    V = rng.normal(size=(N, DIM)).astype(np.float32)
    t, index = sql.Identifier(schema, table), index or f"{table}_hnsw"
    with _conn(base) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
        conn.execute(sql.SQL("CREATE TABLE {} ({} bigint PRIMARY KEY, text text, {} vector({}), "
                             "{} text)").format(t, sql.Identifier(key), sql.Identifier(col),
                                                sql.Literal(DIM), sql.Identifier(mark)))
        conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS 'skalign provenance'").format(
            t, sql.Identifier(mark)))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(t),
                            [(i, f"t{i}", V[i], None if i % 3 else "translated:m0")
                             for i in range(N)])
        conn.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw ({} vector_cosine_ops) WITH "
                             "(m = 8)").format(sql.Identifier(index), t, sql.Identifier(col)))
    name = table if schema == "public" else f"{schema}.{table}"
    from urllib.parse import quote

    return f"{base}&table={quote(name, safe='')}&column={quote(col, safe='')}"


def _state(base, table, schema="public", key="id", col="emb", mark="skalign_vector"):
    """Every row ``(id, vector, mark)`` in id order, and the table's indexes: ``(name, oid,
    definition without the name)``."""
    from psycopg import sql

    with _conn(base) as conn:
        rows = conn.execute(sql.SQL("SELECT {}, {}, {} FROM {} ORDER BY 1").format(
            sql.Identifier(key), sql.Identifier(col), sql.Identifier(mark),
            sql.Identifier(schema, table))).fetchall()
        idx = conn.execute(
            "SELECT c.relname, c.oid::int, replace(pg_get_indexdef(c.oid), c.relname, ''), "
            "i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE "
            "i.indrelid = %s::regclass ORDER BY 1",
            (sql.Identifier(schema, table).as_string(conn),)).fetchall()
    return [(r[0], r[1].to_numpy().tolist(), r[2]) for r in rows], idx


def _step(share=0.4, seed=1):
    """Two batches of new vectors: the rows of a ``share`` of the table (every third row's
    ``expected`` wrong: not written), then again the first 10 of them, expecting the mark
    the first batch gives them (written after it)."""
    rng = np.random.default_rng(seed)
    ids = sorted(int(i) for i in rng.choice(N, int(share * N), replace=False))
    first = [None if i % 3 else "translated:m0" for i in ids]
    first = [e if k % 3 else "encoded:someone" for k, e in enumerate(first)]
    V = rng.normal(size=(len(ids), DIM)).astype(np.float32)
    again = ids[:10]
    return [RowMarks(ids, V, ["translated:m1"] * len(ids), first),
            RowMarks(again, V[:10] * 2, ["translated:m2"] * 10, ["translated:m1"] * 10)]


def _written_batch_by_batch(address, parts):
    with open_live(address) as store:
        return [sum(int(store.write_back(p.ids[lo:lo + 64], p.vectors[lo:lo + 64],
                                          p.marks[lo:lo + 64], p.expected[lo:lo + 64]).sum())
                    for lo in range(0, len(p.ids), 64)) for p in parts]


def test_a_large_step_rebuilds_the_index_and_writes_what_the_batches_write(pg):
    batch, bulk = _make(pg, "by_batch"), _make(pg, "by_step")
    parts = _step()
    _, idx_before = _state(pg, "by_step")
    _, idx_batch_before = _state(pg, "by_batch")
    counts = _written_batch_by_batch(batch, parts)
    with open_live(bulk) as store:
        assert store.bulk_writes
        got = RowMarks.write_parts(store, iter(parts), sum(map(len, parts)), rebuild=True)
        ids, scores = store.top_k(np.ones((1, DIM), np.float32), 5)
    rows_batch, idx_batch = _state(pg, "by_batch")
    rows_bulk, idx_bulk = _state(pg, "by_step")
    assert got == counts == [sum(k % 3 > 0 for k in range(len(parts[0]))), 6]
    assert rows_bulk == rows_batch
    # the index built again: same name and definition, another oid, valid
    assert [(r[0], r[2], r[3]) for r in idx_bulk] == [(r[0], r[2], r[3]) for r in idx_before]
    assert {r[1] for r in idx_bulk if r[0] == "by_step_hnsw"} != \
        {r[1] for r in idx_before if r[0] == "by_step_hnsw"}
    assert idx_batch == idx_batch_before  # batch by batch: the same index, updated
    assert len(ids[0]) == 5 and np.all(np.diff(scores[0]) <= 0)


def test_a_small_step_is_written_batch_by_batch_under_the_index(pg):
    address = _make(pg, "small")
    _, before = _state(pg, "small")
    part = _step(share=0.05)[0]
    with open_live(address) as store:
        assert part.write(store, rebuild=True) == sum(k % 3 > 0 for k in range(len(part)))
    _, after = _state(pg, "small")
    assert after == before  # the same index (oid): updated, not rebuilt


def test_a_row_another_writer_encodes_during_the_step_is_kept(pg):
    address = _make(pg, "cas")
    part = _step()[0]
    target = part.ids[1]  # expected None or translated:m0: would be written

    def batches():
        yield part.ids[:64], part.vectors[:64], part.marks[:64], part.expected[:64]
        # another session encodes a row while the step stages (it holds no lock yet)
        with _conn(pg) as other:
            other.execute("UPDATE cas SET skalign_vector = 'encoded:other', emb = %s WHERE "
                          "id = %s", (np.full(DIM, 7, np.float32), target))
        yield part.ids[64:], part.vectors[64:], part.marks[64:], part.expected[64:]

    with open_live(address) as store:
        written = store.write_many(batches(), len(part), rebuild=True)
    rows, _ = _state(pg, "cas")
    row = next(r for r in rows if r[0] == target)
    assert row[2] == "encoded:other" and row[1] == [7.0] * DIM
    assert not written[0][1] and written[0].sum() == sum(
        e is None or e == "translated:m0" for e in part.expected[:64]) - 1


def test_a_reader_during_the_step_sees_old_or_new_rows_whole_and_the_index(pg):
    address = _make(pg, "readers")
    part = _step(share=0.6)[0]
    new = {i: (v.tolist(), m) for i, v, m in zip(part.ids, part.vectors, part.marks)}
    old = {r[0]: (r[1], r[2]) for r in _state(pg, "readers")[0]}
    seen, stop = [], threading.Event()

    def read():
        with open_live(address) as store, _conn(pg) as cat:
            while not stop.is_set():
                rows = store.fetch(part.ids[:50])
                # the catalog as of the query's snapshot (pg_get_indexdef, in pg_indexes,
                # reads the latest catalog: an index dropped since the snapshot reads NULL)
                hnsw = cat.execute(
                    "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'readers'::regclass "
                    "AND a.amname = 'hnsw'").fetchone()[0]
                seen.append((hnsw, [(v.tolist(), m) for v, m in zip(rows.vectors,
                                                                     rows.provenance)]))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with open_live(address) as store:
            RowMarks(part.ids, part.vectors, part.marks, part.expected).write(store, rebuild=True)
    finally:
        stop.set()
        reader.join()
    assert seen
    for hnsw, rows in seen:
        assert hnsw == 1
        for i, (v, m) in zip(part.ids[:50], rows):
            assert (v, m) in (old[i], new[i]), (i, m)


def _write_half(address):
    """Every other row written ``translated:m1`` in one step (a share over the cut-over)."""
    ids = list(range(0, N, 2))
    V = np.random.default_rng(5).normal(size=(len(ids), DIM)).astype(np.float32)
    with open_live(address) as store:
        RowMarks(ids, V, ["translated:m1"] * len(ids), None).write(store, rebuild=True)


@pytest.mark.parametrize("step", ["write-many-staged", "write-many-dropped",
                                  "write-many-updated", "write-many-built"])
def test_a_kill_at_any_step_leaves_the_table_whole_with_its_index(pg, step):
    from skalign._stores.journal import KILL_AT_ENV

    address = _make(pg, "killed")
    before = _state(pg, "killed")
    pid = os.fork()  # a process of its own to kill (no connection is open here)
    if pid == 0:
        try:
            os.environ[KILL_AT_ENV] = step
            _write_half(address)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    # the server rolls the killed session back (a read waits for its lock until then)
    assert _state(pg, "killed") == before
    _write_half(address)  # the same command again
    rows, idx = _state(pg, "killed")
    assert [r[2] for r in rows] == ["translated:m1" if i % 2 == 0 else before[0][i][2]
                                    for i in range(N)]
    assert [(r[0], r[2], r[3]) for r in idx] == [(r[0], r[2], r[3]) for r in before[1]]


def test_hostile_names_stay_names(pg):
    from psycopg import sql

    schema, table = 'we"ird; sch', 'docs"; DROP TABLE victim; --'
    key, col, mark = "k ey;", 'e"mb', "prov)--"
    index = 'i USING btree (id); DROP TABLE victim; --'
    with _conn(pg) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS victim (x int)")
    address = _make(pg, table, schema, key, col, mark, index)
    ref = _make(pg, "hostile_ref")
    part = _step()[0]
    with open_live(address, provenance_key=mark) as store:
        got = RowMarks(part.ids, part.vectors, part.marks, part.expected, mark).write(
            store, rebuild=True)
    assert got == _written_batch_by_batch(ref, [part])[0]
    rows, idx = _state(pg, table, schema, key, col, mark)
    assert [r[1:] for r in rows] == [r[1:] for r in _state(pg, "hostile_ref")[0]]
    assert {r[0] for r in idx} == {index, f"{table}_pkey"}
    with _conn(pg) as conn:
        assert conn.execute("SELECT to_regclass('victim')").fetchone()[0] is not None
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_a_continue_step_is_written_as_one_step_equal_to_the_batches(pg, monkeypatch):
    """``migrate --continue`` on a table under an HNSW index: with ``rebuild_index`` its
    encoded and retranslated rows written as one step (the index built again once), the same
    rows as batch by batch, which is what a step does without it (searches never wait)."""
    import hashlib

    from skalign._stores.pgvector import writes
    from skalign.encoders import CallableEncoder
    from skalign.io import migrate

    def embed(texts):
        return np.stack([np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8],
                                                   16)).normal(size=DIM) for t in texts])

    src = _make(pg, "mig_src")
    outputs = {}
    # 0.85 of the table: more than the step's encoded rows or its retranslated rows alone
    # (written one after the other, neither would rebuild), fewer than both together
    seen = []
    write_parts = RowMarks.write_parts

    def counted(store, parts, rows, rebuild=False):
        parts = list(parts)
        seen.append([len(p) for p in parts])
        return write_parts(store, parts, rows, rebuild)

    monkeypatch.setattr(RowMarks, "write_parts", staticmethod(counted))
    monkeypatch.setattr(writes, "REBUILD_SHARE", 0.85)
    for how in ("batches", "step"):
        out = src.replace("table=mig_src", f"table=mig_{how}")
        enc = CallableEncoder(embed, fingerprint="test-writeback")
        migrate(src, out, enc, 40, text_field="text", anyway=True)
        _, before = _state(pg, f"mig_{how}")
        migrate(src, out, enc, 40, text_field="text", anyway=True, continue_=True,
                rebuild_index=how == "step")
        rows, after = _state(pg, f"mig_{how}")
        outputs[how] = rows
        hnsw = [(b[1], a[1]) for b, a in zip(before, after) if "hnsw" in b[2]]
        assert len(hnsw) == 1 and (hnsw[0][0] == hnsw[0][1]) == (how == "batches")
    assert outputs["step"] == outputs["batches"]
    encoded, retranslated = seen[-1][0], sum(seen[-1][1:])
    assert max(encoded, retranslated) < 0.85 * N <= encoded + retranslated, seen
    marks = [(r[2] or "").split(":")[0] for r in outputs["step"]]
    assert marks.count("encoded") > 40 and marks.count("translated") == N - marks.count(
        "encoded")  # the step's encoded rows and every other row translated again
