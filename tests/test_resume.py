"""Crash safety of ``skalign translate`` on every backend: SIGKILL at seeded random moments,
then the same command resumes from the last committed batch, the result is identical to an
uninterrupted run, and nothing of the crashed runs is left. A second run on the same output
while one is running fails at once.

The runs are ``skalign.cli.main(["translate", ...])`` in processes forked from a forkserver
(a fresh ``python -m skalign`` would spend most of the test importing; a fork of the test process
itself could inherit Chroma's threads and deadlock). This process never opens an engine: stores
are made and read back in those processes too. The benchmark (benchmarks/bench_stores.py) kills
real ``python -m skalign translate`` processes."""

import importlib.util
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
from store_backends import (
    FILE_BACKENDS,
    Chroma,
    DuckDB,
    Faiss,
    Milvus,
    Npy,
    PgVector,
    Qdrant,
    SqliteVec,
    serve_postgres,
)
from store_capabilities import kinds

from skalign import ProcrustesAligner
from skalign._stores.base import ENCODE_DEPTH
from skalign.cli import main
from skalign.exceptions import StoreError
from skalign.io import save, translate

_CTX = multiprocessing.get_context("forkserver")
#: engine clients each child would import again (pymilvus: over a second)
_ENGINE_CLIENTS = [m for m in ("pymilvus",) if importlib.util.find_spec(m) is not None]
_CTX.set_forkserver_preload(["skalign.cli", "skalign._stores.pipeline.translate",
                             "skalign._affine.procrustes",
                             "store_backends", *_ENGINE_CLIENTS])


def _translate_child(argv, conn):
    """``skalign`` with ``argv``; reports each batch it translates, then the exit status and the
    number of rows it translated. Every batch is committed (not only after
    ``COMMIT_SECONDS``), so the batch a kill lands in says how much a rerun may skip."""
    from skalign._stores import journal as _journal
    from skalign._stores.pipeline import streaming as _streaming

    _journal.COMMIT_SECONDS = 0
    calls = []
    translate = _streaming.BatchTranslator.__call__

    def spy(self, X, start):
        calls.append(len(X))
        conn.send(("batch", len(calls)))
        return translate(self, X, start)

    _streaming.BatchTranslator.__call__ = spy
    status = main(argv)
    conn.send(("done", status, sum(calls)))


def _translate_child_held_in_add(argv, conn):
    """``skalign`` with ``argv`` (a LanceDB output), held as it enters the ``add`` of each
    batch after reporting it: a kill at batch ``k`` lands before the ``k``-th add wrote
    anything, with the ``k - 1`` before it committed and in the journal."""
    import time

    from skalign._stores import lance as _lance

    write_unit, calls = _lance.LanceWriter.write_unit, []

    def held(self, *args):
        calls.append(1)
        conn.send(("batch", len(calls)))
        time.sleep(0.5)  # the parent kills meanwhile
        return write_unit(self, *args)

    _lance.LanceWriter.write_unit = held
    conn.send(("done", main(argv), 0))


def _call_child(fn, args, conn):
    conn.send(("done", fn(*args)))


def in_child(target, *args, kill_at_batch=None):
    """Run ``target(*args, conn)`` in a fresh process. With ``kill_at_batch=k`` it is SIGKILLed
    as soon as it reports its k-th translated batch — somewhere in the transform, the write or
    the commit of that batch. Return the final message's payload, or ``None`` when killed."""
    recv, send = _CTX.Pipe(duplex=False)
    p = _CTX.Process(target=target, args=(*args, send))
    p.start()
    send.close()  # a child that dies early then gives EOFError here instead of a hang
    try:
        while True:
            msg = recv.recv()
            if msg[0] == "done":
                p.join()
                return msg[1:] if len(msg) > 2 else msg[1]
            if kill_at_batch is not None and msg[1] >= kill_at_batch:
                os.kill(p.pid, signal.SIGKILL)
                p.join()
                return None
    except EOFError:
        p.join()
        raise AssertionError(f"child exited with {p.exitcode} before finishing") from None


def call(fn, *args):
    return in_child(_call_child, fn, args)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    pytest.importorskip("pgserver")
    yield from serve_postgres(tmp_path_factory)


BACKENDS = kinds("translate",
                 "test_resume.py::test_sigkill_then_same_command_resumes_to_an_identical_result"
                 ) + ["pgvector-keyless", "duckdb-keyless"]
#: the backends whose shadow is a table or collection with "skalign" in its name
NAMED_SHADOWS = ("chroma", "pgvector", "pgvector-keyless", "sqlite-vec", "duckdb",
                 "duckdb-keyless")


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    module = {"faiss": "faiss", "chroma": "chromadb", "qdrant": "qdrant_client",
              "milvus": "milvus_lite", "sqlite-vec": "sqlite_vec",
              "duckdb": "duckdb_extension_vss", "duckdb-keyless": "duckdb_extension_vss",
              "pgvector": "psycopg", "pgvector-keyless": "psycopg",
              "lance": "lancedb"}.get(name, "pyarrow")
    if importlib.util.find_spec(module) is None:  # not imported here: see the module docstring
        pytest.skip(f"needs {module}")
    if name.startswith("pgvector"):
        # without a primary key the table is read and loaded in ctid order, one load at a time
        b = PgVector(request.getfixturevalue("postgres"), key=name == "pgvector")
        call(_reset, b)
        return b
    return {b.name: b for b in FILE_BACKENDS + [Faiss(), Chroma(), Qdrant(), Milvus(),
                                                SqliteVec(), DuckDB(),
                                                DuckDB(key=False)]}[name]


def _make(backend, root, X):
    return backend.make(root, X)


def _read(backend, address):
    return backend.read(address)


def _inventory(backend, root):
    return backend.inventory(root)


def _reset(backend):
    return backend.reset()


def _vacuum(backend):
    """PostgreSQL: a vacuum, so that space of the loads a kill rolled back is free again."""
    if backend.name.startswith("pgvector"):
        call(backend.settle)


def test_sigkill_then_same_command_resumes_to_an_identical_result(tmp_path, backend):
    rng = np.random.default_rng(20)
    # enough committed batches that a kill lands part-way (Qdrant's local mode commits each
    # point separately, about 30 ms a point on a busy disk: fewer rows)
    n, batch = {"qdrant": (120, 10), "milvus": (600, 20)}.get(backend.name, (3000, 60))
    X = rng.normal(size=(n, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:100], rng.normal(size=(100, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src = call(_make, backend, tmp_path, X)  # also starts the forkserver
    ref, out = backend.output(tmp_path, "ref"), backend.output(tmp_path, "out")
    opts = ["--batch-size", str(batch), "--quiet"]
    status, rows = in_child(_translate_child, ["translate", path, src, ref] + opts)
    assert status == 0 and rows == n
    reference = call(_read, backend, ref)
    n_batches = -(-n // batch)
    # two crashes at seeded random batches, the second while resuming from the first
    first, second = sorted(rng.choice(np.arange(2, n_batches - 1), size=2, replace=False))
    assert in_child(_translate_child, ["translate", path, src, out] + opts,
                    kill_at_batch=first) is None
    _vacuum(backend)
    assert in_child(_translate_child, ["translate", path, src, out] + opts,
                    kill_at_batch=second - first + 1) is None
    _vacuum(backend)
    status, rows = in_child(_translate_child, ["translate", path, src, out] + opts)
    assert status == 0
    # resumed: at most the batches after the last commit were translated again. A kill as the
    # k-th batch is translated loses it and those written behind it in threads: the (k-1)-th,
    # or the ENCODE_DEPTH before it where they are encoded ahead (Parquet) or loaded ahead
    # (PostgreSQL, two uncommitted COPYs at once; one for a table without a key, whose rows
    # must come back in ctid order: read so, and after a vacuum that frees the loads a kill
    # rolled back for the next load to fill).
    # With b behind, the first kill leaves at least first - 1 - b batches, so the second lands
    # at global batch second - b or later and leaves at least second - 1 - 2b
    behind = ENCODE_DEPTH if backend.name in ("parquet", "parquet-dir", "pgvector") else 1
    assert rows <= n - (second - 1 - 2 * behind) * batch, (rows, second)
    got = call(_read, backend, out)
    np.testing.assert_array_equal(got[0], reference[0])
    np.testing.assert_array_equal(got[1], reference[1])
    assert got[2] == reference[2]
    inventory = call(_inventory, backend, tmp_path)
    leftovers = [x for x in inventory
                 if any(w in x for w in ("partial", "journal", "lock", ".tmp-", "orphan"))]
    assert leftovers == []
    if backend.name in NAMED_SHADOWS:
        assert [x for x in inventory if "skalign" in x] == []
    if backend.name in ("qdrant", "milvus"):
        assert sum(x.startswith("out_skalign_") for x in inventory) == 1
        assert "alias out" in inventory


def _translate_child_stderr(argv, conn):
    """:func:`_translate_child`, its final message with what the command printed to stderr."""
    import contextlib
    import io

    err = io.StringIO()

    class Relay:
        def send(self, msg):
            conn.send(msg + (err.getvalue(),) if msg[0] == "done" else msg)

    with contextlib.redirect_stderr(err):
        _translate_child(argv, Relay())


def _sample(address, batch_size):
    from skalign._stores.pipeline.translate import open_reader
    from skalign._stores.pipeline.verify import verification_positions

    return verification_positions(open_reader(address), batch_size)


def _corrupt(backend, root, position):
    return backend.corrupt_shadow(root, position)


def test_resumed_run_verifies_rows_the_crashed_run_committed(tmp_path, backend):
    """Killed as it translates its last batch, the run leaves every row but the last batches
    committed; one of them, in the verification's sample, is then changed in the shadow. The
    rerun translates only the last batches, yet reads the sampled committed rows back from the
    input, translates them again and refuses to publish: exit status 2, one line naming the
    output and the row, and nothing left (no output, no shadow, journal or lock)."""
    from skalign._stores.pipeline.verify import N_VERIFY

    rng = np.random.default_rng(21)
    n, batch = (120, 10) if backend.name == "qdrant" else (600, 60)
    X = rng.normal(size=(n, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:100], rng.normal(size=(100, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src = call(_make, backend, tmp_path, X)
    out = backend.output(tmp_path, "out")
    opts = ["--batch-size", str(batch), "--quiet"]
    n_batches = n // batch
    assert in_child(_translate_child, ["translate", path, src, out] + opts,
                    kill_at_batch=n_batches) is None
    sample = call(_sample, src, batch)
    assert len(sample) == N_VERIFY
    # the sample's first window lies in the first quarter: committed by the crashed run (a kill
    # as the last batch is translated loses it and those written behind it: the one before, or
    # ENCODE_DEPTH of them for Parquet)
    behind = ENCODE_DEPTH if backend.name in ("parquet", "parquet-dir", "pgvector") else 1
    position = sample[0]
    assert position < (n_batches - 1 - behind) * batch
    call(_corrupt, backend, tmp_path, position)
    status, rows, err = in_child(_translate_child_stderr, ["translate", path, src, out] + opts)
    assert status == 2
    assert rows <= (1 + behind) * batch  # resumed: the committed rows not translated again
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "verification failed: sampled rows differ from the model's translation (row " \
        f"{position} among them); the output was not published" in lines[0]
    inventory = call(_inventory, backend, tmp_path)
    assert [x for x in inventory if any(w in x for w in ("out", "partial", "journal", "lock",
                                                          ".tmp-", "orphan"))] == []


def _wait_for(predicate, timeout=60):
    t0 = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - t0 < timeout
        time.sleep(0.02)


def test_second_concurrent_run_fails_at_once(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4000, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:300], rng.normal(size=(300, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src = Npy().make(tmp_path, X)
    out = tmp_path / "out.npy"
    recv, send = _CTX.Pipe(duplex=False)
    p = _CTX.Process(target=_translate_child, args=(["translate", path, src, str(out),
                                                     "--batch-size", "1", "--quiet"], send))
    p.start()
    send.close()
    assert recv.recv()[0] == "batch"  # it has started writing
    try:
        _wait_for(lambda: (tmp_path / ".out.npy.skalign-journal").exists())
        t0 = time.perf_counter()
        with pytest.raises(StoreError, match=r"out.npy: another skalign translate \(pid \d+\) "
                           "is writing this output"):
            translate(model, src, out)
        assert time.perf_counter() - t0 < 5
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join()
    translate(model, src, out, batch_size=1000)  # the lock died with its process
    np.testing.assert_allclose(np.load(out), model.transform(X), atol=1e-5)


def test_second_concurrent_run_fails_at_once_postgres(tmp_path, postgres):
    b = PgVector(postgres)
    b.reset()
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.normal(size=(300, 24)))
    src, out = b.make(tmp_path, X), b.output(tmp_path)
    import psycopg

    # hold the output's advisory lock the way a running translate does
    with psycopg.connect(postgres, autocommit=True) as other:
        from skalign._stores.address import parse_address
        from skalign._stores.pgvector.store import lock_key

        key = lock_key(parse_address(out), "public", parse_address(out).name)
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        with pytest.raises(StoreError, match="another skalign translate is writing this table"):
            translate(model, src, out)
    assert b.inventory(tmp_path) == ["src"]
    translate(model, src, out)
    assert b.inventory(tmp_path) == ["out", "src"]


def _lance_files(table_dir):
    import lancedb

    db = lancedb.connect(os.path.dirname(table_dir))
    stats = db.open_table(os.path.basename(table_dir)[: -len(".lance")]).stats()
    data = sorted(os.listdir(os.path.join(table_dir, "data")))
    return data, stats["fragment_stats"]["num_fragments"]


def test_lance_data_of_an_uncommitted_add_is_not_published(tmp_path):
    """An ``add`` killed before its commit leaves a data file and a transaction file in the
    shadow table that no version references; the rerun removes them, so the published table
    holds exactly its fragments' files."""
    pytest.importorskip("lancedb")
    import shutil

    from store_backends import Lance

    backend = Lance()
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:100], rng.normal(size=(100, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src = call(_make, backend, tmp_path, X)
    out = backend.output(tmp_path, "out")
    opts = ["--batch-size", "60", "--quiet"]
    # killed as the third add begins: two adds committed and in the journal (the kill cannot
    # land between an add's commit and its journal entry, a moment after which no file is
    # stray and none is removed)
    assert in_child(_translate_child_held_in_add, ["translate", path, src, out] + opts,
                    kill_at_batch=3) is None
    shadow = tmp_path / "db" / "out-skalign-partial.lance"
    data = sorted((shadow / "data").iterdir())
    assert len(data) == 2
    # what the third add, killed before its commit, would leave: its data and transaction files
    stray = [shadow / "data" / ("0" * 30 + "deadbeef" * 2 + "00.lance"),
             shadow / "_transactions" / "3-00000000-0000-0000-0000-000000000000.txn"]
    shutil.copy(data[0], stray[0])
    shutil.copy(next((shadow / "_transactions").iterdir()), stray[1])
    status, rows = in_child(_translate_child, ["translate", path, src, out] + opts)
    assert status == 0 and rows == 600 - 2 * 60, rows  # resumed after the two commits
    published = tmp_path / "db" / "out.lance"
    files, fragments = call(_lance_files, str(published))
    assert stray[0].name not in files and len(files) == fragments == 10
    assert not (published / "_transactions" / stray[1].name).exists()
    got = call(_read, backend, out)
    np.testing.assert_allclose(got[1], model.transform(X), atol=1e-5)
