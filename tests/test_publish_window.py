"""Recoverable at every instant of the publish (issue 54, item 6): ``skalign translate`` killed
(SIGKILL) as its publish begins (the stamp recorded, nothing moved), after ``--replace`` moved
the existing output to its backup, and after the output went in place but before the steps
after it (the stamp's mark, the journal), on every backend; then the same command again exits
0 with the normal summary, the output holds the translation and its stamp (``skalign info``
shows it), a replaced output is the backup with its own stamp and vectors, and nothing of the
killed run is left (no journal, shadow, lock or mark).

The kills use the test hook ``SKALIGN_TEST_KILL_AT`` (:func:`skalign._stores.journal.kill_point`),
set in the process that is killed. As in ``test_resume.py``, every run is
``skalign.cli.main`` in a process forked from a forkserver, and this process never opens an
engine: stores are made and read back in those processes too.
"""

import importlib.util
import multiprocessing
import os
import signal

import numpy as np
import pytest
from store_backends import (
    FILE_BACKENDS,
    Chroma,
    DuckDB,
    Faiss,
    Milvus,
    PgVector,
    Qdrant,
    SqliteVec,
)

from skalign import ProcrustesAligner
from skalign.io import save

_CTX = multiprocessing.get_context("forkserver")
#: engine clients each child would import again (pymilvus: over a second)
_ENGINE_CLIENTS = [m for m in ("pymilvus",) if importlib.util.find_spec(m) is not None]
_CTX.set_forkserver_preload(["skalign.cli", "skalign._stores.pipeline.translate",
                             "skalign._affine.procrustes",
                             "store_backends", *_ENGINE_CLIENTS])

KILL_AT = "SKALIGN_TEST_KILL_AT"


def _run_child(fn, args, kill_at, conn):
    import contextlib
    import io

    if kill_at is not None:
        os.environ[KILL_AT] = kill_at
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = fn(*args)
    conn.send((result, out.getvalue(), err.getvalue()))


def in_child(fn, *args, kill_at=None):
    """``fn(*args)`` in a fresh process: ``(result, stdout, stderr)``; with ``kill_at``, the
    process must die of SIGKILL at that step (``None`` is returned)."""
    recv, send = _CTX.Pipe(duplex=False)
    p = _CTX.Process(target=_run_child, args=(fn, args, kill_at, send))
    p.start()
    send.close()  # a child that dies gives EOFError here instead of a hang
    try:
        msg = recv.recv()
    except EOFError:
        msg = None
    p.join()
    if kill_at is not None:
        assert msg is None and p.exitcode == -signal.SIGKILL, (kill_at, p.exitcode, msg)
        return None
    assert msg is not None, f"child exited with {p.exitcode}"
    return msg


def _cli(*argv):
    from skalign.cli import main

    return main(list(argv))


def _make(backend, root, X):
    return backend.make(root, X)


def _read(backend, address):
    return backend.read(address)


def _inventory(backend, root):
    return backend.inventory(root)


def _reset(backend):
    return backend.reset()


def _stamp(address):
    from skalign._stores.address import parse_address
    from skalign._stores.provenance import read_stamp

    return read_stamp(parse_address(address))


def _fingerprint(path):
    from skalign._stores.journal import model_fingerprint
    from skalign.io import load

    return model_fingerprint(load(path))


def call(fn, *args):
    return in_child(fn, *args)[0]


BACKENDS = [b.name for b in FILE_BACKENDS] + ["faiss", "chroma", "qdrant", "pgvector",
                                               "sqlite-vec", "milvus", "duckdb"]
NEEDS = {"faiss": "faiss", "chroma": "chromadb", "qdrant": "qdrant_client",
         "pgvector": "psycopg", "lance": "lancedb", "sqlite-vec": "sqlite_vec",
         "milvus": "milvus_lite", "duckdb": "duckdb_extension_vss"}
#: the backends whose publish (the backup's rename with the output's) is one transaction
ONE_TRANSACTION = ("pgvector", "sqlite-vec", "duckdb")


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    if importlib.util.find_spec(NEEDS.get(name, "pyarrow")) is None:  # not imported here
        pytest.skip(f"needs {NEEDS.get(name, 'pyarrow')}")
    if name == "pgvector":
        b = PgVector(request.getfixturevalue("pg_base"))
        call(_reset, b)
        return b
    return {b.name: b for b in FILE_BACKENDS + [Faiss(), Chroma(), Qdrant(), SqliteVec(),
                                                Milvus(), DuckDB()]}[name]


def _backup(backend, root):
    """The address of the backup ``--replace`` keeps of ``backend.output(root)``."""
    if backend.name in ("chroma", "qdrant", "pgvector", "sqlite-vec", "milvus", "duckdb"):
        return backend.output(root, "out_skalign_backup")
    return backend.output(root, "out-skalign-backup")


def _expected(backend, model, X):
    if backend.name != "qdrant":
        return model.transform(X)
    # a cosine collection keeps directions: those of the source are translated, and stored so
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    Y = model.transform(X)
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def _check_clean(backend, root, replace, name="out"):
    """Nothing of a killed run left: no journal, shadow, lock or orphan; the databases hold
    the output (and its backup) only."""
    inventory = call(_inventory, backend, root)
    leftovers = [x for x in inventory
                 if any(w in x for w in ("partial", "journal", "lock", ".tmp-", "orphan"))]
    assert leftovers == [], inventory
    if backend.name in ("chroma", "pgvector", "sqlite-vec", "duckdb"):
        assert [x for x in inventory if "skalign" in x] == (
            [f"{name}_skalign_backup"] if replace else []), inventory
    if backend.name in ("qdrant", "milvus"):  # the outputs: aliases of the runs' collections
        # (or of the copy of a real collection replaced)
        assert sum(x.startswith(f"{name}_skalign_") for x in inventory) == (
            2 if replace else 1), inventory
        assert f"alias {name}" in inventory
        assert (f"alias {name}_skalign_backup" in inventory) == replace, inventory


# (kill step, --replace); "backed-up" exists where the replaced output is moved on its own:
# PostgreSQL moves it in the publish's one transaction, Qdrant switches an output's alias and
# its backup's in one update (a real collection replaced: test_same_store_replaced_...)
WINDOWS = [("publishing", False), ("published", False), ("publishing", True),
           ("backed-up", True), ("published", True)]


@pytest.mark.parametrize("step, replace", WINDOWS, ids=[f"{s}-{'replace' if r else 'new'}"
                                                        for s, r in WINDOWS])
def test_killed_in_the_publish_then_the_same_command_finishes(tmp_path, backend, step,
                                                               replace):
    if step == "backed-up" and backend.name in (*ONE_TRANSACTION, "qdrant", "milvus"):
        pytest.skip("no such instant: the backup and the output change in one step")
    rng = np.random.default_rng(54)
    n = 90 if backend.name == "qdrant" else 300
    X = rng.normal(size=(n, 16)).astype(np.float32)
    old = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    new = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    old_path = str(save(old, tmp_path / "old.skops"))
    path = str(save(new, tmp_path / "new.skops"))
    src = call(_make, backend, tmp_path, X)
    out = backend.output(tmp_path, "out")
    if replace:  # an output of another model, which the translation replaces
        assert call(_cli, "translate", old_path, src, out, "--quiet") == 0
    argv = ("translate", path, src, out, "--batch-size", "64") + (
        ("--replace",) if replace else ())

    assert in_child(_cli, *argv, "--quiet", kill_at=step) is None
    status, stdout, stderr = in_child(_cli, *argv)  # the same command (its summary shown)
    assert status == 0, stderr
    summary = stdout.strip().splitlines()
    assert summary[0].startswith(f"translated {n} rows 16-d -> 24-d"), stdout
    if replace:
        assert summary[-1].startswith(f"previous {out} kept as "), stdout

    ids, V, _ = call(_read, backend, out)
    assert len(ids) == n
    np.testing.assert_allclose(V, _expected(backend, new, X), atol=1e-5)
    stamp = call(_stamp, out)
    assert stamp is not None and stamp["model"] == call(_fingerprint, path)
    assert stamp["rows"] == n and "publishing" not in stamp, stamp
    status, info, _ = in_child(_cli, "info", out)
    assert status == 0 and f"model {stamp['model']}" in info, info
    if replace:  # the replaced output is the backup, with its own vectors and stamp
        backup = _backup(backend, tmp_path)
        _, B, _ = call(_read, backend, backup)
        np.testing.assert_allclose(B, _expected(backend, old, X), atol=1e-5)
        kept = call(_stamp, backup)
        assert kept is not None and kept["model"] == call(_fingerprint, old_path), kept
        assert "publishing" not in kept
    _check_clean(backend, tmp_path, replace)


@pytest.mark.parametrize("step", ["backed-up", "published"])
def test_same_store_replaced_killed_in_the_publish_then_finished(tmp_path, backend, step):
    """``translate MODEL STORE STORE --replace``: killed while the store is its backup and
    the translation not yet in place (no store at INPUT's name), the same command finishes
    the publish before it reads INPUT; the backup holds the original vectors."""
    if backend.name == "parquet-dir":
        pytest.skip("the same store as parquet (the source is a file)")
    if step == "backed-up" and backend.name in ONE_TRANSACTION:
        pytest.skip("no such instant: the backup and the output change in one transaction")
    rng = np.random.default_rng(55)
    n = 90 if backend.name == "qdrant" else 300
    X = rng.normal(size=(n, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src = call(_make, backend, tmp_path, X)
    argv = ("translate", path, src, src, "--batch-size", "64", "--replace")
    assert in_child(_cli, *argv, "--quiet", kill_at=step) is None
    status, stdout, stderr = in_child(_cli, *argv)
    assert status == 0, stderr
    assert stdout.startswith(f"translated {n} rows 16-d -> 24-d"), stdout
    assert f"previous {src} kept as " in stdout, stdout
    _, V, _ = call(_read, backend, src)
    np.testing.assert_allclose(V, _expected(backend, model, X), atol=1e-5)
    stamp = call(_stamp, src)
    assert stamp["model"] == call(_fingerprint, path) and "publishing" not in stamp
    backup = (_backup(backend, tmp_path).replace("out", "src") if backend.name in (
        "chroma", "qdrant", "pgvector", "sqlite-vec", "milvus", "duckdb")
        else backend.output(tmp_path, "src-skalign-backup"))
    _, B, _ = call(_read, backend, backup)
    np.testing.assert_allclose(B, X, atol=1e-6)  # (Qdrant's local mode keeps them as given)
    assert call(_stamp, backup) is None  # the original had none
    _check_clean(backend, tmp_path, True, name="src")


def test_finished_output_still_refuses_the_same_command(tmp_path):
    """Once the rerun has finished the publish, the mark is gone: the same command a third
    time says the output exists, as after any translation."""
    from store_backends import Npy

    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 16)).astype(np.float32)
    path = str(save(ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24))),
                    tmp_path / "m.skops"))
    src, out = Npy().make(tmp_path, X), str(tmp_path / "out.npy")
    argv = ("translate", path, src, out, "--quiet")
    assert in_child(_cli, *argv, kill_at="published") is None
    assert (tmp_path / ".out.npy.skalign-journal").exists()
    assert in_child(_cli, *argv)[0] == 0
    status, _, err = in_child(_cli, *argv)
    assert status == 2 and "OUTPUT already exists" in err, err


def test_another_jobs_interrupted_publish_is_finished_for_that_job(tmp_path):
    """A publish interrupted for one model, then a command with another: the first one's
    publish is finished (its output, its stamp), and the second refuses the existing output
    as usual; nothing is lost or left half done."""
    from store_backends import Npy

    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 16)).astype(np.float32)
    a = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    b = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    pa, pb = str(save(a, tmp_path / "a.skops")), str(save(b, tmp_path / "b.skops"))
    src, out = Npy().make(tmp_path, X), str(tmp_path / "out.npy")
    assert in_child(_cli, "translate", pa, src, out, "--quiet", kill_at="published") is None
    status, _, err = in_child(_cli, "translate", pb, src, out, "--quiet")
    assert status == 2 and "OUTPUT already exists" in err, err
    np.testing.assert_allclose(np.load(out), a.transform(X), atol=1e-5)
    assert call(_stamp, out)["model"] == call(_fingerprint, pa)
    assert sorted(os.listdir(tmp_path)) == ["a.skops", "b.skops", "out.npy",
                                            "out.npy.skalign.json", "src.npy"]


def _translate_store(model_path, src, out, extra, marks, fail):
    """:func:`translate_store` with ``stamp_extra`` and an ``after_publish`` that appends a
    line to ``marks`` (and raises where ``fail``)."""
    from skalign._stores.pipeline.translate import translate_store
    from skalign.io import load

    def after(address):
        with open(marks, "a") as f:
            f.write(f"{address}\n")
        if fail:
            raise RuntimeError("after_publish failed")

    try:
        n = translate_store(load(model_path), src, out, stamp_extra=extra, after_publish=after)
    except RuntimeError as exc:
        return str(exc)
    return int(n), n.resumed_from


def test_stamp_extra_and_after_publish(tmp_path):
    """``stamp_extra`` is in the stamp written before the publish (so in the output's stamp
    after a kill between the publish and the end); ``after_publish`` runs before the record is
    removed: killed before it, or failing in it, the same call runs it again and finishes."""
    from store_backends import Npy

    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:60], rng.normal(size=(60, 24)))
    path = str(save(model, tmp_path / "m.skops"))
    src, out = Npy().make(tmp_path, X), str(tmp_path / "out.npy")
    marks = tmp_path / "marks.txt"
    extra = {"migration": {"encoder": "e", "map": "m", "method": None, "estimate": None}}
    assert in_child(_translate_store, path, src, out, extra, str(marks), False,
                    kill_at="published") is None
    assert not marks.exists()
    assert call(_stamp, out)["migration"] == extra["migration"]  # already with the output
    # the rerun: after_publish fails, the record stays
    assert call(_translate_store, path, src, out, extra, str(marks), True) \
        == "after_publish failed"
    assert (tmp_path / ".out.npy.skalign-journal").exists()
    assert call(_translate_store, path, src, out, extra, str(marks), False) == (200, 200)
    assert marks.read_text().splitlines() == [out, out]
    assert not (tmp_path / ".out.npy.skalign-journal").exists()
    stamp = call(_stamp, out)
    assert stamp["migration"] == extra["migration"] and stamp["rows"] == 200
    np.testing.assert_allclose(np.load(out), model.transform(X), atol=1e-5)


def test_stamp_extra_may_not_set_the_stamps_own_fields(tmp_path):
    from skalign._stores.pipeline.translate import translate_store

    model = ProcrustesAligner().fit(np.eye(16, dtype=np.float32), np.eye(16, dtype=np.float32))
    np.save(tmp_path / "src.npy", np.eye(16, dtype=np.float32))
    for bad in ({"model": "x"}, {"publishing": {}}, {"x": float("nan")}, {1: 2}, ["x"]):
        with pytest.raises(ValueError, match="stamp_extra"):
            translate_store(model, tmp_path / "src.npy", tmp_path / "out.npy", stamp_extra=bad)
    assert sorted(os.listdir(tmp_path)) == ["src.npy"]
