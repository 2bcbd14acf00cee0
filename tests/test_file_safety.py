"""File outputs done right (``skalign translate`` into ``.npy``, Parquet file and folder, LanceDB,
FAISS): a private source gives a private output (and its shadow is never more readable while it
is written), links planted at the output's or its helpers' names are refused or removed, never
followed, a translation that overflows float32 is refused with nothing published, and the
data-loss guards (``--replace`` twice, a backup as input, a translation as input, an existing
backup) hold; the same file under two paths is one store."""

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
from store_backends import Faiss, Lance, Npy, Parquet, ParquetDir  # noqa: E402

from skalign import ProcrustesAligner  # noqa: E402
from skalign._stores.address import parse_address  # noqa: E402
from skalign._stores.journal import FileLock  # noqa: E402
from skalign._stores.pipeline.verify import N_VERIFY  # noqa: E402
from skalign.cli import main  # noqa: E402
from skalign.io import save  # noqa: E402

N, D_IN, D_OUT = 120, 8, 8  # one width: an output can be an input again


class FaissHNSW(Faiss):
    """An index rebuilt at the end (``_BuildWriter``), not filled in place."""

    name = "faiss-hnsw"

    def make(self, root, X):
        import faiss

        index = faiss.IndexHNSWFlat(X.shape[1], 8)
        index.add(np.ascontiguousarray(X, np.float32))
        faiss.write_index(index, str(root / "src.faiss"))
        return str(root / "src.faiss")


def _backends():
    out = [Npy(), Parquet(), ParquetDir()]
    try:
        import lancedb  # noqa: F401

        out.append(Lance())
    except ImportError:  # pragma: no cover - the `stores` extra not installed
        pass
    try:
        import faiss  # noqa: F401

        out += [Faiss(), FaissHNSW()]
    except ImportError:  # pragma: no cover
        pass
    return out


BACKENDS = _backends()
IDS = [b.name for b in BACKENDS]


@pytest.fixture(autouse=True)
def umask_022():
    """Modes below are those of a umask of 022 (the test sets it, and puts it back)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, D_IN)).astype(np.float32)
    root = tmp_path_factory.mktemp("models")
    models = []
    for seed in (1, 2):
        Y = (X @ np.random.default_rng(seed).normal(size=(D_IN, D_OUT))).astype(np.float32)
        models.append(str(save(ProcrustesAligner().fit(X, Y), root / f"m{seed}.skops")))
    return X, models


def run(capsys, *argv):
    status = main(["translate", *map(str, argv), "--quiet"])
    out, err = capsys.readouterr()
    return status, out, err


def snapshot(root):
    """Every entry under ``root`` (links not followed): its kind, mode and content's hash."""
    got = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                what = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                what = ("dir", stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    what = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
            got[os.path.relpath(p, root)] = what
    return got


def _names(backend, out):
    """The output's lock, journal's temporary name and shadow (as the writers name them)."""
    p = Path(out)
    partial = {"npy": f".{p.name}.skalign-partial.npy",
               "parquet": f".{p.name}.skalign-partial.parquet",
               "parquet-dir": f".{p.name}.skalign-partial",
               "lance": f"{p.name[:-6]}-skalign-partial.lance",
               "faiss": f".{p.name}.skalign-partial.faiss",
               "faiss-hnsw": f".{p.name}.skalign-partial.npy"}[backend.name]
    return {"lock": p.with_name(f".{p.name}.skalign-lock"),
            "journal-new": p.with_name(f".{p.name}.skalign-journal.new"),
            "journal": p.with_name(f".{p.name}.skalign-journal"),
            "partial": p.with_name(partial)}


def _chmod_store(path, mode):
    """Give a file store, or a folder store and everything in it, the permission bits of
    ``mode`` (files) and the same with search bits (folders)."""
    path = Path(path)
    dmode = mode | (mode & 0o444) >> 2
    if path.is_dir():
        for dirpath, dirs, files in os.walk(path):
            for name in files:
                os.chmod(os.path.join(dirpath, name), mode)
            for name in dirs:
                os.chmod(os.path.join(dirpath, name), dmode)
        os.chmod(path, dmode)
    else:
        os.chmod(path, mode)


def _modes(path):
    """``{relative path: mode}`` of the store at ``path`` (itself: ``"."``)."""
    path = Path(path)
    out = {".": stat.S_IMODE(os.lstat(path).st_mode)}
    if path.is_dir():
        for dirpath, dirs, files in os.walk(path):
            for name in dirs + files:
                p = os.path.join(dirpath, name)
                out[os.path.relpath(p, path)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def _assert_modes(path, file_mode):
    dir_mode = file_mode | (file_mode & 0o444) >> 2
    for rel, mode in _modes(path).items():
        want = dir_mode if (Path(path) / rel).is_dir() else file_mode
        assert mode == want, (rel, oct(mode), oct(want))


def _watch_shadow(monkeypatch, root, seen):
    """Record the modes of the shadows under ``root`` while batches are translated (the shadow
    exists then, partly written); what a shadow folder holds is reached only through it (a
    LanceDB table's files are the umask's until the end: inside a private folder)."""
    import skalign._stores.pipeline.translate as pipeline

    real = pipeline.BatchTranslator

    class Watching(real):
        def __call__(self, vectors, start):
            for p in Path(root).rglob("*"):
                if "skalign-partial" in p.name and "skalign-partial" not in p.parent.name \
                        and not p.is_symlink():
                    seen.append((str(p), stat.S_IMODE(p.stat().st_mode)))
            return super().__call__(vectors, start)

    monkeypatch.setattr(pipeline, "BatchTranslator", Watching)


# ------------------------------------------------------------------------------------ modes
@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_output_keeps_the_source_permission_bits(backend, mode, tmp_path, data, capsys,
                                                 monkeypatch):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    _chmod_store(src, mode)
    out = backend.output(tmp_path)
    seen = []
    _watch_shadow(monkeypatch, tmp_path, seen)
    status, _, err = run(capsys, model, src, out)
    assert status == 0, err
    _assert_modes(out, mode)
    assert seen and all(m & 0o007 == 0 and m & ~(mode | 0o111) == 0 for _, m in seen), seen
    stamp = Path(out).with_name(Path(out).name + ".skalign.json")
    assert stat.S_IMODE(stamp.stat().st_mode) == mode


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_replace_keeps_the_stricter_mode_of_what_it_replaces(backend, tmp_path, data, capsys):
    X, (m1, m2) = data
    src = backend.make(tmp_path, X)
    _chmod_store(src, 0o644)
    out = backend.output(tmp_path)
    assert run(capsys, m1, src, out)[0] == 0
    _chmod_store(out, 0o600)
    status, _, err = run(capsys, m2, src, out, "--replace")
    assert status == 0, err
    _assert_modes(out, 0o600)
    backup = Path(out).with_name(Path(out).name.replace("out", "out-skalign-backup"))
    _assert_modes(backup, 0o600)  # the replaced output, moved as it was


# ------------------------------------------------------------------------------------ links
@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dangling", [False, True])
def test_symlinked_output_refused_before_any_work(backend, dangling, tmp_path, data, capsys):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    out = Path(backend.output(tmp_path))
    victim = tmp_path / "victim"
    if not dangling:
        victim.mkdir() if backend.name in ("parquet-dir", "lance") else victim.write_text("v")
    out.symlink_to(victim)
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, src, out)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "symbolic link" in err, err
    assert snapshot(tmp_path) == before  # nothing created: no lock, no shadow, no journal


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_link_planted_at_the_lock_is_not_followed(backend, tmp_path, data, capsys):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    Path(out).parent.mkdir(exist_ok=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock = _names(backend, out)["lock"]
    lock.symlink_to(victim)
    status, _, err = run(capsys, model, src, out)
    assert status == 2 and "lock file" in err and len(err.strip().splitlines()) == 1
    assert victim.read_text() == "precious"
    assert not Path(out).exists()
    lock.unlink()
    lock.symlink_to(tmp_path / "nowhere")  # dangling: not created through
    assert run(capsys, model, src, out)[0] == 2
    assert not (tmp_path / "nowhere").exists() and not Path(out).exists()


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("where", ["journal-new", "journal", "partial"])
@pytest.mark.parametrize("dangling", [False, True])
def test_link_planted_at_the_journal_or_shadow_is_removed_not_followed(backend, where, dangling,
                                                                       tmp_path, data, capsys):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    Path(out).parent.mkdir(exist_ok=True)
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious")
    link = _names(backend, out)[where]
    link.symlink_to(victim)
    status, _, err = run(capsys, model, src, out)
    assert status == 0, err
    if dangling:  # not created through the link
        assert not os.path.lexists(victim)
    else:
        assert victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not os.path.lexists(link)
    assert {p.name for p in Path(out).parent.iterdir() if "skalign-" in p.name
            and not p.name.endswith(".skalign.json")} == set()


@pytest.mark.skipif(not any(b.name == "faiss-hnsw" for b in BACKENDS), reason="needs faiss")
@pytest.mark.parametrize("dangling", [False, True])
def test_link_planted_at_a_rebuilt_index_is_removed_not_followed(dangling, tmp_path, data,
                                                                 capsys):
    """An index type built at the end (HNSW) is written to a second shadow: never through a
    link there either."""
    X, (model, _) = data
    src = FaissHNSW().make(tmp_path, X)
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious")
    link = tmp_path / ".out.faiss.skalign-partial.faiss"
    link.symlink_to(victim)
    assert run(capsys, model, src, tmp_path / "out.faiss")[0] == 0
    assert (victim.read_text() == "precious") if not dangling else not os.path.lexists(victim)
    assert not os.path.lexists(link)


def test_link_planted_at_the_stamp_is_replaced_not_followed(tmp_path, data, capsys):
    X, (model, _) = data
    src = Npy().make(tmp_path, X)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("out.npy.skalign.json", "out.npy.skalign.json.new"):
        (tmp_path / name).symlink_to(victim)
        assert run(capsys, model, src, tmp_path / "out.npy")[0] == 0
        assert victim.read_text() == "precious"
        assert not (tmp_path / "out.npy.skalign.json").is_symlink()
        for p in (tmp_path / "out.npy", tmp_path / "out.npy.skalign.json"):
            p.unlink()


# ------------------------------------------------------------------------- overflowing rows
def _overflowing(X, bad):
    """``X`` with row ``bad`` made of finite numbers the map sends past float32's range."""
    X = X.copy()
    X[bad] = np.float32(0.9 * np.finfo(np.float32).max) * np.sign(X[bad] + 1e-3)
    return X


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_row_mapped_to_infinity_refused_nothing_published(backend, tmp_path, data, capsys):
    from skalign._stores.pipeline.verify import verification_positions
    from skalign.io import load

    X, (model, _) = data

    class Rows:
        n_rows = N

    sample = set(verification_positions(Rows, 1 << 20))
    assert len(sample) == N_VERIFY
    bad = next(k for k in range(N // 2, N) if k not in sample)  # outside the verification
    Xbad = _overflowing(X, bad)
    with np.errstate(over="ignore", invalid="ignore"):
        assert not np.isfinite(load(model).transform(Xbad[bad:bad + 1])).all()
    src = backend.make(tmp_path, Xbad)
    out = backend.output(tmp_path)
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, src, out)
    assert status == 2
    assert f"the model maps row {bad} to infinite numbers" in err
    assert len(err.strip().splitlines()) == 1
    after = snapshot(tmp_path)
    assert after == before, set(after) ^ set(before)  # no output, shadow, journal or lock


def test_row_mapped_to_infinity_refused_through_model_transform(tmp_path, data, capsys):
    """A float64 input goes through ``model.transform`` (not the float32 affine map): its
    output is checked the same way."""
    X, (model, _) = data
    Xbad = _overflowing(X, 77).astype(np.float64)
    np.save(tmp_path / "src.npy", Xbad)
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, tmp_path / "src.npy", tmp_path / "out.npy")
    assert status == 2 and "the model maps row 77 to infinite numbers" in err
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------ data-loss guards
def _assert_no_op(capsys, folder, model, src, out):
    """``translate --replace`` of ``src`` into ``out`` does nothing, says so, exits 0."""
    before = snapshot(folder)
    status, stdout, err = run(capsys, model, src, out, "--replace")
    assert status == 0 and "already holds this model's translation" in stdout + err, err
    assert snapshot(folder) == before


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_replace_twice_with_the_same_model_is_a_no_op(backend, tmp_path, data, capsys):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    assert run(capsys, model, src, out, "--replace")[0] == 0
    _assert_no_op(capsys, tmp_path, model, src, out)
    # in place: the second run finds its own translation there
    assert run(capsys, model, out, out, "--replace", "--force")[0] == 0
    _assert_no_op(capsys, tmp_path, model, out, out)


def test_replace_in_place_twice_is_a_no_op(tmp_path, data, capsys):
    X, (model, _) = data
    src = Npy().make(tmp_path, X)
    assert run(capsys, model, src, src, "--replace")[0] == 0
    assert np.array_equal(np.load(tmp_path / "src-skalign-backup.npy"), X)
    _assert_no_op(capsys, tmp_path, model, src, src)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_backup_as_input_refused(backend, tmp_path, data, capsys):
    X, (m1, m2) = data
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    assert run(capsys, m1, src, out)[0] == 0
    assert run(capsys, m2, src, out, "--replace")[0] == 0
    backup = Path(out).with_name(Path(out).name.replace("out", "out-skalign-backup"))
    assert backup.exists()
    before = snapshot(tmp_path)
    status, _, err = run(capsys, m1, backup, out, "--replace")
    assert status == 2 and "backup" in err and len(err.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before


def test_in_place_backup_as_input_refused(tmp_path, data, capsys):
    """``translate M s-skalign-backup.npy s.npy --replace`` would overwrite the backup with
    ``s.npy``: the only copy of the original."""
    X, (model, _) = data
    src = Npy().make(tmp_path, X)
    assert run(capsys, model, src, src, "--replace")[0] == 0
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, tmp_path / "src-skalign-backup.npy", src, "--replace")
    assert status == 2 and "backup" in err
    assert snapshot(tmp_path) == before
    assert np.array_equal(np.load(tmp_path / "src-skalign-backup.npy"), X)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_this_models_output_as_input_refused_unless_forced(backend, tmp_path, data, capsys):
    X, (model, _) = data
    src = backend.make(tmp_path, X)
    out, again = backend.output(tmp_path), backend.output(tmp_path, "again")
    assert run(capsys, model, src, out)[0] == 0
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, out, again)
    assert status == 2 and "already this model's output" in err and "--force" in err
    assert snapshot(tmp_path) == before
    assert run(capsys, model, out, again, "--force")[0] == 0


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_second_replace_refused_while_the_backup_exists(backend, tmp_path, data, capsys):
    X, (m1, m2) = data
    src = backend.make(tmp_path, X)
    out = backend.output(tmp_path)
    assert run(capsys, m1, src, out)[0] == 0
    assert run(capsys, m2, src, out, "--replace")[0] == 0
    before = snapshot(tmp_path)
    status, _, err = run(capsys, m1, src, out, "--replace", "--force")
    assert status == 2 and "backup" in err and "still exists" in err
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------------- identity
def test_one_file_under_several_paths_is_one_store(tmp_path, data, capsys, monkeypatch):
    X, (model, _) = data
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    src = Npy().make(real, X)
    monkeypatch.chdir(tmp_path)
    names = ["real/src.npy", src, "link/src.npy", "./link/../real/src.npy"]
    assert len({parse_address(p).identity for p in names}) == 1
    assert all(parse_address(p).identity[1] == str(Path(src).resolve()) for p in names)
    # OUTPUT the same file as INPUT under another name: refused as the same store
    before = snapshot(tmp_path)
    status, _, err = run(capsys, model, "link/src.npy", src)
    assert status == 2 and "same as INPUT" in err
    assert snapshot(tmp_path) == before
    # a run holding the output's lock under one path locks it under the other
    out = parse_address("real/out.npy", output=True)
    with FileLock(Path("link/.out.npy.skalign-lock"), str(out)):
        status, _, err = run(capsys, model, src, "real/out.npy")
    assert status == 2 and "another skalign translate" in err
    assert not Path("real/out.npy").exists()
