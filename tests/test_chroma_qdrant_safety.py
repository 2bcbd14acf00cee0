"""Chroma and Qdrant: the provenance stamp (the collection's metadata; Qdrant's local mode: a
sidecar keyed by the name the user sees) and the guards it drives (this model's output refused
as input, ``--replace`` twice a no-op, a backup refused as input), reads that create nothing
(no ``chroma.sqlite3``, no ``meta.json`` or ``.lock`` where there was none), hostile collection
names (they work end to end or fail with one line), engine exceptions as ``StoreError`` and
passwords never shown. Small stores (Qdrant's local mode commits every point on its own)."""

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from store_backends import Chroma, Qdrant

from skalign import ProcrustesAligner
from skalign._stores.address import parse_address
from skalign._stores.databases.common import private_lock_dir
from skalign._stores.journal import model_fingerprint
from skalign._stores.pipeline.translate import prepare_translation
from skalign._stores.provenance import read_stamp, write_stamp
from skalign.cli import main
from skalign.exceptions import (
    AddressError,
    StoreError,
    StoreNotFoundError,
    UnsafeOperationError,
)
from skalign.io import restore, save, translate

ROWS = {"chroma": 300, "qdrant": 60}


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 16)).astype(np.float32)
    # a square model: its output is a valid input of its own (what the stamp guards against)
    model = ProcrustesAligner().fit(X[:200], rng.normal(size=(200, 16)))
    return X, model


@pytest.fixture(params=["chroma", "qdrant"])
def backend(request):
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client"}[request.param])
    return {"chroma": Chroma, "qdrant": Qdrant}[request.param]()


def _cli(capsys, *argv):
    status = main(list(argv))
    return status, capsys.readouterr().err.strip().splitlines()


def _files(folder):
    """Every file and folder under ``folder`` (relative), or ``None`` where it is missing."""
    folder = Path(folder)
    if not folder.exists():
        return None
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _backup(backend, root):
    return backend.output(root, "out_skalign_backup")


# ------------------------------------------------------------------------- provenance stamp
def test_stamp_reads_back_and_guards_a_second_translation(tmp_path, backend, data):
    X, model = data
    X = X[:ROWS[backend.name]]
    src, out = backend.make(tmp_path, X), backend.output(tmp_path)
    n = translate(model, src, out, batch_size=64)
    stamp = read_stamp(parse_address(out))
    assert stamp["model"] == model_fingerprint(model)
    assert stamp["source"] == str(parse_address(src))
    assert stamp["source_identity"] == repr(parse_address(src).identity)
    assert stamp["rows"] == n == len(X) and (stamp["d_in"], stamp["d_out"]) == (16, 16)
    assert read_stamp(parse_address(src)) is None  # the source is not skalign's output
    if backend.name == "chroma":  # the other metadata kept as it was, the space included
        import chromadb

        meta = chromadb.PersistentClient(path=str(tmp_path / "chroma")).get_collection(
            "out").metadata
        assert meta["hnsw:space"] == "cosine" and meta["owner"] == "tests"
        assert json.loads(meta["skalign"]) == stamp
    else:  # a private sidecar, named by a hash of the name
        (side,) = (tmp_path / "qdrant" / ".skalign-stamps").iterdir()
        assert stat.S_IMODE(side.stat().st_mode) == 0o600 and "out" not in side.name
        assert stat.S_IMODE(side.parent.stat().st_mode) == 0o700
    # the output translated again with the same model: refused, nothing written
    before = backend.inventory(tmp_path)
    with pytest.raises(UnsafeOperationError, match="already this model's output"):
        translate(model, out, backend.output(tmp_path, "again"))
    assert backend.inventory(tmp_path) == before
    # --force translates it all the same
    assert translate(model, src, backend.output(tmp_path, "again"), force=True) == len(X)


def test_replace_twice_is_a_noop(tmp_path, backend, data):
    X, model = data
    X = X[:ROWS[backend.name]]
    src, out = backend.make(tmp_path, X), backend.output(tmp_path)
    translate(model, src, out)
    before = backend.inventory(tmp_path), read_stamp(parse_address(out)), backend.read(out)
    got = translate(model, src, out, replace=True)
    assert got == 0 and got.backup is None
    assert isinstance(got.noop, str) and "already holds this model's translation" in got.noop
    after = backend.inventory(tmp_path), read_stamp(parse_address(out)), backend.read(out)
    assert after[:2] == before[:2]  # no backup, no shadow, the same stamp (its time too)
    np.testing.assert_array_equal(after[2][1], before[2][1])


def test_qdrant_replace_forced_by_the_same_job_writes_a_new_collection(tmp_path, data):
    """``--replace --force`` with the same model and source: the output and its backup are two
    collections (the job's shadow name is taken by the served output, so the run writes under
    another); one collection under both aliases would make removing the backup, as the next
    run's message asks, remove the output too."""
    X, model = data
    backend = Qdrant()
    src, out = backend.make(tmp_path, X[:ROWS["qdrant"]]), backend.output(tmp_path)
    translate(model, src, out)
    assert translate(model, src, out, replace=True, force=True).backup is not None
    inventory = backend.inventory(tmp_path)
    assert {"alias out", "alias out_skalign_backup"} <= set(inventory)
    assert len([c for c in inventory if c.startswith("out_skalign_")]) == 2, inventory
    np.testing.assert_array_equal(backend.read(out)[1], backend.read(_backup(backend,
                                                                              tmp_path))[1])


def test_backup_as_input_refused_and_stamps_follow_replace_and_restore(tmp_path, backend,
                                                                         data):
    X, model = data
    X = X[:ROWS[backend.name]]
    src, out = backend.make(tmp_path, X), backend.output(tmp_path)
    translate(model, src, out)
    first = read_stamp(parse_address(out))
    time.sleep(1.1)  # a second stamp's time differs
    got = translate(model, src, out, replace=True, force=True)
    assert got.backup is not None
    second = read_stamp(parse_address(out))
    assert second["written"] != first["written"]
    assert read_stamp(parse_address(_backup(backend, tmp_path))) == first  # moved with it
    # the backup translated into the output it backs up: the only copy would be lost
    before = backend.inventory(tmp_path)
    for force in (False, True):
        with pytest.raises(UnsafeOperationError, match="INPUT is OUTPUT's backup"):
            translate(model, _backup(backend, tmp_path), out, replace=True, force=force)
    assert backend.inventory(tmp_path) == before
    # a backup as the input of another output: refused too (unless forced)
    with pytest.raises(UnsafeOperationError, match="backup"):
        translate(model, _backup(backend, tmp_path), backend.output(tmp_path, "other"))
    restore(out)  # the stamps swap with the collections
    assert read_stamp(parse_address(out)) == first
    assert read_stamp(parse_address(_backup(backend, tmp_path))) == second
    restore(out)
    assert read_stamp(parse_address(out)) == second


def test_qdrant_stamp_bound_to_the_collection_it_was_written_for(tmp_path, data):
    """A name dropped and made again outside skalign has no stamp: the sidecar is bound to the
    collection the name resolved to."""
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    from skalign._stores.qdrant import store as _qdrant

    X, model = data
    b = Qdrant()
    src, out = b.make(tmp_path, X[:40]), b.output(tmp_path)
    translate(model, src, out)
    assert read_stamp(parse_address(out)) is not None
    client = b._client(tmp_path)
    client.update_collection_aliases(change_aliases_operations=[models.DeleteAliasOperation(
        delete_alias=models.DeleteAlias(alias_name="out"))])
    client.create_collection("out", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.DOT))
    assert read_stamp(parse_address(out)) is None
    _qdrant._close_all()  # and read from meta.json, with no client open
    assert read_stamp(parse_address(out)) is None


# ------------------------------------------------------------------- reading creates nothing
def test_reading_a_folder_that_is_no_store_creates_nothing(tmp_path, backend, data):
    X, model = data
    empty, missing = tmp_path / "empty", tmp_path / "missing"
    empty.mkdir()
    other = tmp_path / "other"  # the other engine's store, or any folder with files
    other.mkdir()
    (other / "meta.json" if backend.name == "chroma" else other / "chroma.sqlite3").write_text(
        "{}")
    (other / "notes.txt").write_text("mine")
    kind = backend.name
    for folder in (empty, missing, other):
        before = _files(folder)
        src = f"{kind}:{folder}/src" + ("?vector=text" if kind == "qdrant" else "")
        with pytest.raises(StoreNotFoundError) as info:
            translate(model, src, backend.output(tmp_path / "empty", "out"))
        assert "\n" not in str(info.value) and str(folder) in str(info.value)
        assert read_stamp(parse_address(src)) is None
        assert _files(folder) == before, folder
    assert _files(empty) == [] and not missing.exists()


def test_missing_collection_names_a_few_and_creates_nothing(tmp_path, backend, data):
    X, model = data
    src = backend.make(tmp_path, X[:20])
    store = tmp_path / backend.name
    if backend.name == "chroma":
        client = backend._client(tmp_path)
        for k in range(8):
            client.create_collection(f"col{k}", embedding_function=None)
    else:
        from qdrant_client import models

        client = backend._client(tmp_path)
        for k in range(8):
            client.create_collection(f"col{k}", vectors_config=models.VectorParams(
                size=4, distance=models.Distance.DOT))
        from skalign._stores.qdrant import store as _qdrant

        _qdrant._close_all()  # the check reads meta.json before any client is opened
    before = _files(store), backend.inventory(tmp_path)
    nope = src.replace("/src", "/nope")
    with pytest.raises(StoreNotFoundError) as info:
        translate(model, nope, backend.output(tmp_path))
    msg = str(info.value)
    assert "no collection 'nope'" in msg and "(9 in all)" in msg and "\n" not in msg
    assert msg.count("'col") + msg.count("'src'") == 5  # a few names, not every one
    assert read_stamp(parse_address(nope)) is None
    assert (_files(store), backend.inventory(tmp_path)) == before


def test_output_folder_created_only_when_the_translation_starts(tmp_path, backend, data):
    X, model = data
    X = X[:ROWS[backend.name]]
    src = backend.make(tmp_path, X)
    new = tmp_path / "new"
    out = backend.output(tmp_path, "out").replace(str(tmp_path / backend.name), str(new))
    job = prepare_translation(model, src, out)  # checks, the existence probe included
    assert job.noop is None and not new.exists()
    assert read_stamp(parse_address(out)) is None and not new.exists()
    assert translate(model, src, out) == len(X)
    assert stat.S_IMODE(new.stat().st_mode) == 0o700
    assert read_stamp(parse_address(out))["rows"] == len(X)
    # refused before any work: a folder that holds other things, a missing parent
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    for folder, error, match in ((busy, StoreError, "neither a"),
                                 (tmp_path / "no" / "such", StoreNotFoundError, "no folder")):
        bad = out.replace(str(new), str(folder))
        with pytest.raises(error, match=match):
            translate(model, src, bad)
    assert _files(busy) == ["notes.txt"] and not (tmp_path / "no").exists()


# ------------------------------------------------------------------------- hostile names
@pytest.mark.parametrize("name", ["a b", "x;y", "a'b", "ééééé", "x" * 600, "a..b",
                                  "127.0.0.1", "ab", "x" * 492, "'; DROP TABLE t; --"])
def test_chroma_hostile_names_one_line(tmp_path, capsys, data, name):
    pytest.importorskip("chromadb")
    X, model = data
    b = Chroma()
    src = b.make(tmp_path, X[:20])
    path = save(model, tmp_path / "m.skops")
    before = b.inventory(tmp_path)
    for args in ((src, b.output(tmp_path, name)), (b.output(tmp_path, name), b.output(tmp_path))):
        status, err = _cli(capsys, "translate", str(path), *args, "--quiet")
        assert status == 2 and len(err) == 1, err
        # (a name of 492 characters is Chroma's, too long for an output's: no such input)
        assert any(m in err[0] for m in ("Chroma collection name", "at most 491",
                                         "no collection")), err
    with pytest.raises(AddressError):
        translate(model, src, b.output(tmp_path, name))
    assert b.inventory(tmp_path) == before


def test_chroma_longest_output_name_works(tmp_path, data):
    pytest.importorskip("chromadb")
    X, model = data
    b = Chroma()
    src = b.make(tmp_path, X[:50])
    out = b.output(tmp_path, "n" * 491)
    assert translate(model, src, out) == 50
    assert translate(model, src, out, replace=True).noop  # the stamp read back
    assert read_stamp(parse_address(out))["rows"] == 50


@pytest.mark.parametrize("name", ["it's; a name", "ünïcødé ☃ name", "x" * 234,
                                  "'; DROP TABLE t; --"])
def test_qdrant_hostile_names_work_end_to_end(tmp_path, data, name):
    pytest.importorskip("qdrant_client")
    X, model = data
    b = Qdrant()
    src = b.make(tmp_path, X[:30])
    out = b.output(tmp_path, name)
    assert translate(model, src, out) == 30
    ids, V, fields = b.read(out)
    assert len(ids) == 30 and V.shape == (30, 16) and fields == b.read(src)[2]
    assert read_stamp(parse_address(out))["rows"] == 30
    again = translate(model, src, out, replace=True)
    assert again.noop
    assert translate(model, src, out, replace=True, force=True).backup is not None
    restore(out)
    # and as an input (the translation of the original, under the hostile name now)
    assert translate(model, src, b.output(tmp_path, "plain")) == 30


@pytest.mark.parametrize("name", ['a"b', "a:b", "a*b", "a?b", "x" * 235, "ü" * 118])
def test_qdrant_names_it_refuses_one_line(tmp_path, capsys, data, name):
    pytest.importorskip("qdrant_client")
    X, model = data
    b = Qdrant()
    src = b.make(tmp_path, X[:20])
    path = save(model, tmp_path / "m.skops")
    before = b.inventory(tmp_path)
    out = f"qdrant:{tmp_path / 'qdrant'}/{name}"  # (no ?vector=: a '?' in the name is kept)
    status, err = _cli(capsys, "translate", str(path), src, out, "--quiet")
    assert status == 2 and len(err) == 1, err
    assert "Qdrant collection name" in err[0] or "bytes" in err[0] \
        or "unknown parameter" in err[0], err
    assert b.inventory(tmp_path) == before


def test_engine_exceptions_are_store_errors(tmp_path, backend, data, monkeypatch):
    """An engine's exception while writing: one StoreError line (the shadow is dropped)."""
    X, model = data
    X = X[:ROWS[backend.name]]
    src = backend.make(tmp_path, X)
    if backend.name == "chroma":
        import chromadb
        from chromadb.errors import InternalError

        def fail(self, *a, **k):
            raise InternalError("the disk said\nno")

        monkeypatch.setattr(chromadb.api.models.Collection.Collection, "add", fail)
    else:
        from qdrant_client import QdrantClient
        from qdrant_client.http.exceptions import ResponseHandlingException

        def fail(self, *a, **k):
            raise ResponseHandlingException(OSError("the disk said\nno"))

        monkeypatch.setattr(QdrantClient, "upsert", fail)
    with pytest.raises(StoreError) as info:
        translate(model, src, backend.output(tmp_path))
    assert type(info.value).__module__ == "skalign.exceptions"
    assert "the disk said no" in str(info.value) and "\n" not in str(info.value)
    assert str(parse_address(backend.output(tmp_path))) in str(info.value)
    monkeypatch.undo()
    assert not [x for x in backend.inventory(tmp_path) if "skalign" in x]


# ------------------------------------------------------------------------------- passwords
@pytest.mark.parametrize("address", [
    "chroma+http://alice:s3cretpw@127.0.0.1:9/docs",
    "qdrant+http://alice:s3cretpw@127.0.0.1:9/docs?vector=text",
])
def test_unreachable_server_with_password(tmp_path, capsys, data, address):
    pytest.importorskip({"c": "chromadb", "q": "qdrant_client"}[address[0]])
    path = save(data[1], tmp_path / "m.skops")
    status, err = _cli(capsys, "translate", str(path), address, address.replace("docs", "out"),
                       "--quiet")
    assert status == 2 and len(err) == 1 and "cannot reach" in err[0], err
    assert "s3cretpw" not in err[0] and "alice:***@127.0.0.1:9" in err[0]
    status, err = _cli(capsys, "restore", address.replace("docs", "out"))
    assert status == 2 and len(err) == 1 and "s3cretpw" not in err[0], err


def test_engine_message_quoting_the_password_is_masked():
    pytest.importorskip("chromadb")
    pytest.importorskip("qdrant_client")
    from chromadb.errors import InternalError
    from qdrant_client.http.exceptions import ResponseHandlingException

    from skalign._stores.chroma import names as chroma_names
    from skalign._stores.qdrant import names as qdrant_names

    for module, exc, kind in ((chroma_names, InternalError, "chroma"),
                              (qdrant_names, ResponseHandlingException, "qdrant")):
        address = parse_address(f"{kind}+http://alice:s3cretpw@h.example:1/docs")
        with pytest.raises(StoreError) as info, module._EDGE.errors(address):
            raise exc("GET http://alice:s3cretpw@h.example:1/ failed")
        assert "s3cretpw" not in str(info.value) and "alice:***@" in str(info.value)
        assert info.value.__suppress_context__  # the engine's exception is not printed


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    """A Chroma server (``chroma run``, from the chromadb package) on a free local port."""
    pytest.importorskip("chromadb")
    exe = Path(sys.executable).parent / "chroma"
    if not exe.exists():
        pytest.skip("no chroma executable")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path_factory.mktemp("chroma-server")
    log = open(folder / "log", "wb")
    proc = subprocess.Popen([str(exe), "run", "--path", str(folder / "db"), "--host",
                             "127.0.0.1", "--port", str(port)], stdout=log, stderr=log)
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.skip("chroma run exited")
                time.sleep(0.2)
        else:
            pytest.skip("chroma run did not answer")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_chroma_server_stamps_and_passwords(chroma_server, tmp_path, capsys, data):
    """Over HTTP (credentials sent as basic auth): the stamp in the collection's metadata with
    ``hnsw:space`` kept, the guards, the lock in the private lock folder, no password shown."""
    import chromadb

    X, model = data
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma_server)
    col = client.create_collection(f"src{tmp_path.name[-6:]}".replace("_", "x"), metadata={
        "hnsw:space": "cosine", "owner": "tests"}, embedding_function=None)
    col.add(ids=[f"id{i}" for i in range(100)], embeddings=X[:100],
            documents=[f"d{i}" for i in range(100)])
    base = f"chroma+http://alice:s3cretpw@127.0.0.1:{chroma_server}"
    src, out = f"{base}/{col.name}", f"{base}/{col.name}-out"
    assert translate(model, src, out) == 100
    stamp = read_stamp(parse_address(out))
    assert stamp["model"] == model_fingerprint(model) and stamp["rows"] == 100
    assert "s3cretpw" not in json.dumps(stamp) and "alice:***@" in stamp["source"]
    meta = client.get_collection(f"{col.name}-out").metadata
    assert meta["hnsw:space"] == "cosine" and meta["owner"] == "tests"
    assert translate(model, src, out, replace=True).noop
    with pytest.raises(UnsafeOperationError):
        translate(model, out, f"{base}/{col.name}-again")
    # the lock of a server's output: in this user's private folder, named without credentials
    from skalign._stores.chroma import store as _chroma

    job = prepare_translation(model, src, f"{base}/{col.name}-new")
    lock = _chroma.Writer(job.dst, job).lock()
    assert Path(lock.path).parent == private_lock_dir() and "s3cretpw" not in str(lock.path)
    # a missing collection: a few names listed, and how many there are
    for k in range(6):
        client.get_or_create_collection(f"extra{k}x", embedding_function=None)
    with pytest.raises(StoreNotFoundError, match=r"no collection 'nope' .*, … \(\d+ in all\)"):
        translate(model, f"{base}/nope", f"{base}/nope2")
    # errors quote the address masked
    path = save(model, tmp_path / "m.skops")
    for argv in (("translate", str(path), f"{base}/nope", f"{base}/nope2"),
                 ("translate", str(path), f"{base}/a b", f"{base}/nope2"),
                 ("restore", f"{base}/{col.name}"), ("info", f"{base}/nope")):
        status, err = _cli(capsys, *argv, *(("--quiet",) if argv[0] == "translate" else ()))
        assert not any("s3cretpw" in line for line in err), err
        if status:
            assert status == 2 and len(err) == 1 and "alice:***@" in err[0], err
    write_stamp(parse_address(out), {"model": "x"})  # what the metadata holds is replaced
    assert read_stamp(parse_address(out)) == {"model": "x"}


def test_qdrant_server_stamps_in_collection_metadata(tmp_path, data, monkeypatch):
    """``qdrant+http://``: the stamp in the collection's metadata, behind the aliases (an
    in-memory client stands in for the server), the password used as the API key and never
    shown."""
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient, models

    from skalign._stores.qdrant import store as _qdrant

    X, model = data
    base = "qdrant+http://alice:s3cretpw@q.example:6333"
    client = QdrantClient(":memory:")
    monkeypatch.setitem(_qdrant._CLIENTS, _qdrant._client_key(parse_address(f"{base}/src")),
                        client)
    client.create_collection("src", vectors_config=models.VectorParams(
        size=16, distance=models.Distance.COSINE))
    client.upsert("src", points=models.Batch(ids=list(range(40)), vectors=X[:40].tolist(),
                                             payloads=[{"k": i} for i in range(40)]))
    src, out = f"{base}/src", f"{base}/out"
    assert translate(model, src, out) == 40
    stamp = read_stamp(parse_address(out))
    assert stamp["model"] == model_fingerprint(model) and "s3cretpw" not in json.dumps(stamp)
    target = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}["out"]
    assert json.loads(client.get_collection(target).config.metadata["skalign"]) == stamp
    assert translate(model, src, out, replace=True).noop
    assert translate(model, src, out, replace=True, force=True).backup is not None
    assert read_stamp(parse_address(f"{base}/out_skalign_backup")) == stamp
    with pytest.raises(UnsafeOperationError, match="backup"):
        translate(model, f"{base}/out_skalign_backup", out, replace=True)
    with pytest.raises(StoreNotFoundError) as info:
        translate(model, f"{base}/nope", f"{base}/x")
    assert "s3cretpw" not in str(info.value) and "alice:***@" in str(info.value)
    assert not os.listdir(private_lock_dir()) or all(
        "s3cretpw" not in p for p in os.listdir(private_lock_dir()))
