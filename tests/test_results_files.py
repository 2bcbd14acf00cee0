"""Results and report files (``search --output``, ``plan --report``): refused before any work
when they are the store, one of its files, its texts or an input; an existing file only with
``--overwrite``; created exclusively under a temporary name and published without replacing
what appeared meanwhile."""

import errno
import hashlib
import json
import os
import stat
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_search import FileStore

from skalign.cli import main
from skalign.utils._results_files import OutputFileError, write_output_file

N, D = 120, 8


@pytest.fixture(scope="module")
def spaces():
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y + 0.5 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


@pytest.fixture
def encoder(tmp_path, monkeypatch, spaces):
    """``probe_enc:embed``, importable: the new encoder of ``spaces``; every call it gets is
    logged in ``calls.log`` (so a test can say that nothing was encoded)."""
    _, Y = spaces
    np.save(tmp_path / "Y.npy", Y)
    (tmp_path / "probe_enc.py").write_text(textwrap.dedent(f"""
        import numpy as np
        Y = np.load({str(tmp_path / "Y.npy")!r})
        def embed(texts):
            with open({str(tmp_path / "calls.log")!r}, "a") as f:
                f.write(f"{{len(texts)}}\\n")
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    return "probe_enc:embed"


def _digest(root):
    """Every file under ``root`` (links as their target text), by content."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link:" + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _one_line(capsys, command="search"):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"skalign {command}: error:"), err
    return err


def _queries(tmp_path):
    (tmp_path / "q.txt").write_text("doc 0\ndoc 1\ndoc 2\n")
    return "q.txt"


def test_output_equal_to_the_store_is_refused_and_the_store_kept(tmp_path, spaces, encoder,
                                                                  capsys):
    """The reported case: ``search S.parquet --queries q.txt --encoder E --output S.parquet``
    replaced the 120-row store by a 3-row results table and exited 0."""
    X, _ = spaces
    store = FileStore("parquet", tmp_path).make(X)
    queries = _queries(tmp_path)
    before = _digest(tmp_path)
    status = main(["search", store, "--queries", queries, "--encoder", encoder,
                   "--text-field", "doc", "--output", store])
    assert status == 2
    assert "is the store" in _one_line(capsys)
    assert _digest(tmp_path) == before  # no overlay, no cache, no encoding, the store whole
    import pyarrow.parquet as pq

    assert pq.read_table(store).num_rows == N


@pytest.mark.parametrize("kind, target", [
    ("parquet", "link"),           # a link to the store
    ("parquet", "sidecar"),        # PATH.skalign.json
    ("parquet", "overlay"),        # a file inside PATH.skalign-live
    ("parquet", "lock"),           # .PATH.skalign-lock
    ("parquet", "backup"),         # STEM-skalign-backup.parquet
    ("parquet", "queries"),        # --queries q.jsonl
    ("parquet", "queries-link"),   # a hard link to the queries
    ("parquet", "plan"),           # --candidates FILE
    ("parquet", "cache"),          # --encode-cache FILE
    ("parquet-dir", "shard"),      # a shard of the folder store
    ("npy", "texts"),              # --text-field FILE of an .npy store
    ("npy", "texts-link"),         # the same, through a link
])
def test_output_that_belongs_to_the_store_or_an_input_is_refused(tmp_path, spaces, encoder,
                                                                 capsys, kind, target):
    X, _ = spaces
    maker = FileStore(kind, tmp_path)
    store = maker.make(X)
    (tmp_path / "q.jsonl").write_text('"doc 0"\n"doc 1"\n')
    argv = ["search", store, "--queries", "q.jsonl", "--encoder", encoder]
    if kind != "npy":
        argv += ["--text-field", "doc"]
    name = Path(store).name
    if target == "link":
        os.symlink(store, tmp_path / "r.parquet")
        output = "r.parquet"
    elif target == "sidecar":
        output = f"{name}.skalign.json.jsonl"  # a name the stores give their files
    elif target == "overlay":
        (tmp_path / f"{name}.skalign-live").mkdir()
        output = f"{name}.skalign-live/seg.jsonl"
    elif target == "lock":
        output = f".{name}.skalign-lock.jsonl"
    elif target == "backup":
        output = "s-skalign-backup.parquet"
    elif target == "queries":
        output = "q.jsonl"
    elif target == "queries-link":
        os.link(tmp_path / "q.jsonl", tmp_path / "r.jsonl")
        output = "r.jsonl"
    elif target == "plan":
        (tmp_path / "plan.jsonl").write_text('{"rerank": {"k_candidates": 30}}')
        argv += ["--candidates", "plan.jsonl"]
        output = "plan.jsonl"
    elif target == "cache":
        argv += ["--encode-cache", "c.parquet"]
        output = "c.parquet"
    elif target == "shard":
        output = "s/b.parquet"
    else:
        (tmp_path / "t.jsonl").write_text("".join(f'"doc {i}"\n' for i in range(N)))
        argv += ["--text-field", "t.jsonl"]
        output = "t.jsonl"
        if target == "texts-link":
            os.symlink(tmp_path / "t.jsonl", tmp_path / "alias.jsonl")
            output = "alias.jsonl"
    before = _digest(tmp_path)
    # refused even with --overwrite: an input is never an output
    assert main(argv + ["--output", output, "--overwrite"]) == 2
    assert "choose another file" in _one_line(capsys)
    assert _digest(tmp_path) == before


def test_existing_output_needs_overwrite_checked_before_any_work(tmp_path, spaces, encoder,
                                                                 capsys):
    X, _ = spaces
    store = FileStore("parquet", tmp_path).make(X)
    os.chmod(store, 0o600)
    (tmp_path / "r.jsonl").write_text("mine\n")
    argv = ["search", store, "--queries", _queries(tmp_path), "--encoder", encoder,
            "--text-field", "doc", "-k", "2", "--candidates", "10", "--output", "r.jsonl"]
    assert main(argv) == 2
    assert "exists; pass --overwrite" in _one_line(capsys)
    assert (tmp_path / "r.jsonl").read_text() == "mine\n"
    assert not (tmp_path / "calls.log").exists()  # nothing encoded
    assert not (tmp_path / "s.parquet.skalign-live").exists()  # nothing written back
    assert main(argv + ["--overwrite"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line["ids"][0] for line in lines] == [1, 4, 7]
    assert stat.S_IMODE(os.stat(tmp_path / "r.jsonl").st_mode) == 0o600  # as private as the store
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_a_link_at_the_output_is_replaced_not_followed(tmp_path, spaces, encoder, capsys):
    X, _ = spaces
    store = FileStore("parquet", tmp_path).make(X)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "r.jsonl").symlink_to(victim)
    argv = ["search", store, "--queries", _queries(tmp_path), "--encoder", encoder,
            "--text-field", "doc", "-k", "2", "--candidates", "10", "--output", "r.jsonl",
            "--no-write-back"]
    assert main(argv) == 2
    assert "exists" in _one_line(capsys)
    assert main(argv + ["--overwrite"]) == 0
    assert victim.read_text() == "precious"
    assert not (tmp_path / "r.jsonl").is_symlink()


def test_a_folder_or_a_missing_folder_is_refused(tmp_path, spaces, encoder, capsys):
    X, _ = spaces
    store = FileStore("parquet", tmp_path).make(X)
    (tmp_path / "r.jsonl").mkdir()
    base = ["search", store, "--queries", _queries(tmp_path), "--encoder", encoder,
            "--text-field", "doc"]
    assert main(base + ["--output", "r.jsonl", "--overwrite"]) == 2
    assert "is a folder" in _one_line(capsys)
    assert main(base + ["--output", "nope/r.jsonl"]) == 2
    assert "does not exist" in _one_line(capsys)
    assert not (tmp_path / "calls.log").exists()


def test_writer_never_replaces_what_appeared_meanwhile(tmp_path):
    path = tmp_path / "r.jsonl"

    def write(f):
        f.write(b"new\n")
        path.write_text("someone else's\n")  # created while the output is written

    with pytest.raises(OutputFileError, match="exists"):
        write_output_file(path, write)
    assert path.read_text() == "someone else's\n"
    assert os.listdir(tmp_path) == ["r.jsonl"]
    write_output_file(path, lambda f: f.write(b"new\n"), overwrite=True, mode=0o640)
    assert path.read_text() == "new\n"


def test_writer_without_hard_links_still_refuses_to_replace(tmp_path, monkeypatch):
    """On a file system without hard links the no-replace rename is renameat2's
    RENAME_NOREPLACE (or, without it, the narrowest check)."""
    def no_link(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "r.jsonl"
    write_output_file(path, lambda f: f.write(b"a\n"))
    assert path.read_text() == "a\n"
    with pytest.raises(OutputFileError, match="exists"):
        write_output_file(path, lambda f: f.write(b"b\n"))
    assert path.read_text() == "a\n" and os.listdir(tmp_path) == ["r.jsonl"]


def test_writer_creates_its_temporary_file_exclusively(tmp_path, monkeypatch):
    """A link planted at the temporary name is refused, never written through."""
    from skalign.utils import _results_files

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = tmp_path / ".r.tmp-planted.jsonl"
    planted.symlink_to(victim)
    monkeypatch.setattr(_results_files, "tmp_sibling", lambda path, suffix: planted)
    with pytest.raises(OSError):
        write_output_file(tmp_path / "r.jsonl", lambda f: f.write(b"x"))
    assert victim.read_text() == "precious" and not (tmp_path / "r.jsonl").exists()


# ----------------------------------------------------------------------------------- plan
@pytest.fixture
def plan_inputs(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(60, 8)).astype(np.float32)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", A @ np.linalg.qr(rng.normal(size=(8, 8)))[0])
    monkeypatch.chdir(tmp_path)
    return ["plan", "--source", "a.npy", "--target", "b.npy", "--methods", "procrustes",
            "--no-curve"]


@pytest.mark.parametrize("report, message", [
    ("a.npy.skalign.html", "choose another file"),  # a name of the --source store's files
    ("r2.html", None),
    ("r.html", "exists; pass --overwrite"),
])
def test_plan_report_checked_before_any_work(tmp_path, plan_inputs, capsys, monkeypatch,
                                             report, message):
    pytest.importorskip("matplotlib")
    import skalign.plan

    if report == "r.html":
        (tmp_path / "r.html").write_text("mine")
    calls = []
    real = skalign.plan.plan_migration
    monkeypatch.setattr(skalign.plan, "plan_migration",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    status = main(plan_inputs + ["--report", report])
    if message is None:
        assert status == 0 and (tmp_path / report).read_bytes().startswith(b"<!doctype html>")
        return
    assert status == 2 and message in _one_line(capsys, "plan")
    assert calls == []  # refused before planning
    if report == "r.html":
        assert (tmp_path / "r.html").read_text() == "mine"
        assert main(plan_inputs + ["--report", report, "--overwrite"]) == 0
        assert (tmp_path / "r.html").read_bytes().startswith(b"<!doctype html>")


def test_plan_report_refused_when_it_is_an_input(tmp_path, plan_inputs, capsys):
    os.symlink(tmp_path / "a.npy", tmp_path / "r.png")
    assert main(plan_inputs + ["--report", "r.png", "--overwrite"]) == 2
    assert "--source" in _one_line(capsys, "plan")
    (tmp_path / "q.html").write_text("0 0 1 1\n")  # TREC qrels, whatever their name
    np.save(tmp_path / "qa.npy", np.ones((2, 8), np.float32))
    assert main(plan_inputs + ["--queries-source", "qa.npy", "--queries-target", "qa.npy",
                               "--qrels", "q.html", "--report", "q.html", "--overwrite"]) == 2
    assert "--qrels" in _one_line(capsys, "plan")
    assert (tmp_path / "q.html").read_text() == "0 0 1 1\n"
