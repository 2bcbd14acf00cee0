"""Progress on a terminal (issue 58): ``migrate``, ``search`` and ``plan`` show bars with a rate
and stages with a clock when standard error is a terminal (a pseudo-terminal here), and nothing
with ``--quiet``, with ``--json`` or when standard error is not a terminal."""

import fcntl
import os
import struct
import subprocess
import sys
import termios
import threading

import numpy as np
import pytest
from test_messages import BUDGET, cli_env, make_store, run_cli, spaces

pytest.importorskip("pyarrow")
pytest.importorskip("tqdm")

#: what a tqdm bar with a rate prints: "|  12/50 [00:01<00:03, 9.5queries/s"
BAR = r"\|[^|]*\| *[\d.]+k?/[\d.]+k? \[[\d:]+<[\d:?]+, *[\d.?]+k?{unit}/s"


def run_on_pty(root, *args):
    """``python -m skalign ARGS`` with standard error on a pseudo-terminal (120 columns):
    (status, stdout, what the terminal received)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "skalign", *args], cwd=root,
                            env=cli_env(root), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []

    def pump():  # read as it comes: a full pseudo-terminal would block the command
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)

    reader = threading.Thread(target=pump)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        reader.join(timeout=30)
        os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A Parquet store, its encoder module, 40 query texts and 300 pairs."""
    root = tmp_path_factory.mktemp("progress")
    make_store(root)
    (root / "q.txt").write_text("".join(f"doc {i}\n" for i in range(0, 400, 10)))
    X, Y = spaces()
    np.save(root / "a.npy", X[:300])
    np.save(root / "b.npy", Y[:300])
    return root


def test_migrate_shows_every_step_on_a_terminal(root):
    import re

    status, out, term = run_on_pty(root, "migrate", "src.parquet", "tty.parquet", "--encoder",
                                   "msg_enc:embed", "--budget", str(BUDGET), "--encode-cache",
                                   "tty.sqlite")
    assert status == 0, term
    assert out.startswith("migrated: tty.parquet")  # results on standard output only
    for step in ("loading the encoder msg_enc:embed ... 00:0", f"choosing {BUDGET} of 600 rows",
                 f"planning and fitting a map on {BUDGET} encoded rows ... 00:0"):
        assert step in term, term
    assert re.search(r"encoding \(msg_enc:embed\): 100%" + BAR.format(unit="texts"), term), term
    assert re.search(r"src\.parquet -> tty\.parquet: 100%" + BAR.format(unit="rows"), term), term
    # a warning clears the line it interrupts and is one line of its own
    assert "\r\x1b[Kskalign migrate: warning: every estimate is carried" in term


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_migrate_is_silent_with_quiet_and_json(root, flag):
    status, out, term = run_on_pty(root, "migrate", "src.parquet", f"q{flag[2:]}.parquet",
                                   "--encoder", "msg_enc:embed", "--budget", str(BUDGET),
                                   "--encode-cache", f"q{flag[2:]}.sqlite", flag)
    assert status == 0 and out.startswith("{" if flag == "--json" else "migrated: "), term
    # only the plan's warnings, one line each: no bar, no stage
    lines = term.replace("\r\x1b[K", "").replace("\r\n", "\n").split("\n")
    assert lines[-1] == "" and "\r" not in "".join(lines), repr(term)
    assert all(line.startswith("skalign migrate: warning: ") for line in lines[:-1]), term


def migrated(root):
    """``s.parquet``, a migration of the store (made once, silently)."""
    if not (root / "s.parquet").exists():
        assert run_cli(root, "migrate", "src.parquet", "s.parquet", "--encoder",
                       "msg_enc:embed", "--budget", str(BUDGET), "--quiet")[0] == 0
    return "s.parquet"


def test_search_shows_queries_and_texts_encoded(root):
    import re

    migrated(root)
    status, out, term = run_on_pty(root, "search", "s.parquet", "--queries", "q.txt",
                                   "--encoder", "msg_enc:embed", "--output", "r.jsonl",
                                   "--candidates", "50")
    assert status == 0, term
    assert out.startswith("40 queries, 50 candidates each")
    assert "loading the encoder msg_enc:embed ... 00:0" in term
    assert re.search(r"encoding queries: 100%" + BAR.format(unit="texts"), term), term
    found = re.search(r"searching: 100%" + BAR.format(unit="queries") + r", (\d+) texts encoded",
                      term)
    assert found, term
    assert f"{found[1]} texts encoded (" in out  # the bar's count is the summary's
    status, out, term = run_on_pty(root, "search", "s.parquet", "--queries", "q.txt",
                                   "--encoder", "msg_enc:embed", "--output", "r2.jsonl",
                                   "--candidates", "50", "--quiet")
    assert status == 0 and out == "" and term == "", term


def test_plan_shows_a_clock_on_a_terminal(root):
    args = ("plan", "--source", "a.npy", "--target", "b.npy", "--store-size", "5000",
            "--no-curve")
    status, out, term = run_on_pty(root, *args)
    assert status == 0, term
    assert "planning on 300 pairs for a store of 5000 ... 00:0" in term, term
    assert "recommendation:" in out
    for flag in ("--quiet", "--json"):
        status, _, term = run_on_pty(root, *args, flag)
        assert status == 0 and "planning on" not in term, term


def test_nothing_when_standard_error_is_not_a_terminal(root):
    status, _, err = run_cli(root, "search", migrated(root), "--queries", "q.txt", "--encoder",
                             "msg_enc:embed", "--output", "r3.jsonl", "--candidates", "50")
    assert status == 0 and err == "", err


def test_searcher_progress_is_off_without_a_terminal(tmp_path, capsys):
    from skalign.search import Searcher

    X, Y = spaces()
    np.save(tmp_path / "s.npy", X @ np.linalg.pinv(X) @ Y)  # any 16-d store
    (tmp_path / "s.txt").write_text("".join(f"doc {i}\n" for i in range(len(X))))
    with Searcher(str(tmp_path / "s.npy"), lambda texts: Y[[int(t.split()[1]) for t in texts]],
                  k_candidates=20, text_field=str(tmp_path / "s.txt"), progress=True) as s:
        s.search(["doc 1", "doc 2"], k=3)
    assert capsys.readouterr().err == ""
