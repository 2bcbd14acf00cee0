"""What a user reads is true (issue 58): no raw Python warning reaches a command's user, the
migration's counts, ``info`` on a store with no translation left, what decided the plan's
verdict, ``--qrels`` checked before any fit, ``migrate --help``'s row choice, and
``--normalize`` on an inner-product store, chosen, applied and reported."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from skalign.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N, D, BUDGET = 600, 16, 60
#: what Python prints for a warning it shows itself: ``/path/file.py:100: UserWarning: ...``
RAW_WARNING = re.compile(r"\.py:\d+: \w*Warning:")


def spaces():
    """Old vectors ``X`` and the new encoder's ``Y`` (rows of lengths 0.5 to 3: not unit)."""
    rng = np.random.default_rng(9)
    Y = (rng.normal(size=(N, D)) * rng.uniform(0.5, 3, size=(N, 1))).astype(np.float32)
    X = (Y @ rng.normal(size=(D, D)) + 0.2 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


def make_store(root, texts=None, name="src.parquet"):
    """A Parquet store of ``X`` with ids and the texts ``doc i``; the encoder module
    ``msg_enc:embed`` (row ``i``'s text ``doc i`` gives ``Y[i]``) beside it."""
    X, Y = spaces()
    texts = [f"doc {i}" for i in range(N)] if texts is None else texts
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(N)], "text": texts,
                             "vector": pa.array(list(X), type=pa.list_(pa.float32()))}),
                   root / name)
    np.save(root / "Y.npy", Y)
    (root / "msg_enc.py").write_text(textwrap.dedent("""
        import pathlib
        import numpy as np
        Y = np.load(pathlib.Path(__file__).parent / "Y.npy")
        def embed(texts):
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    return str(root / name)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    return make_store(tmp_path)


def cli_env(root):
    env = dict(os.environ, SKALIGN_ENCODE_CACHE=str(root / "cache.sqlite"),
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTHONWARNINGS", None)
    return env


def run_cli(root, *args):
    """``python -m skalign ARGS`` in ``root``: (status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "skalign", *args], cwd=root, env=cli_env(root),
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


# --- warnings -------------------------------------------------------------------------------
def test_no_raw_python_warning_reaches_a_cli_user(tmp_path):
    """The typical commands, as separate processes with Python's own warning display: every
    warning is ``skalign COMMAND: warning: ...`` on one line, none ``FILE.py:N: Warning:``.
    The migration's plan warns (its estimates are carried to the store's size), so the
    route is exercised, not only an absence."""
    make_store(tmp_path)
    X, Y = spaces()
    np.save(tmp_path / "a.npy", X[:200])
    np.save(tmp_path / "b.npy", Y[:200])
    (tmp_path / "q.txt").write_text("".join(f"doc {i}\n" for i in range(0, 50, 5)))
    commands = [
        ["migrate", "src.parquet", "out.parquet", "--encoder", "msg_enc:embed", "--budget",
         str(BUDGET)],
        ["info", "out.parquet"],
        ["search", "out.parquet", "--queries", "q.txt", "--encoder", "msg_enc:embed",
         "--output", "r.jsonl", "--candidates", "30"],
        ["migrate", "src.parquet", "out.parquet", "--continue", "--encoder", "msg_enc:embed",
         "--budget", "100"],
        ["plan", "--source", "a.npy", "--target", "b.npy", "--store-size", "5000",
         "--no-curve"],
        ["fit", "linear", "--source", "a.npy", "--target", "b.npy", "-o", "m.skops"],
    ]
    warned = []
    for argv in commands:
        status, _, err = run_cli(tmp_path, *argv)
        assert status == 0, (argv, err)
        assert not RAW_WARNING.search(err), (argv, err)
        lines = [line for line in err.splitlines() if "warning" in line.lower()]
        assert all(line.startswith(f"skalign {argv[0]}: warning: ") for line in lines), err
        warned += lines
    assert any(line.startswith("skalign migrate: warning: every estimate is carried")
               for line in warned), warned


def test_a_warning_from_any_command_is_one_line(tmp_path, capsys):
    """Any warning shown while a command runs (here one of several lines, from a command
    replaced for the test) reads ``skalign COMMAND: warning:`` on one line; a caller that
    records warnings (``pytest.warns`` around ``main``) still receives it as a warning."""
    import warnings

    script = textwrap.dedent("""
        import sys, warnings
        import skalign.cli as cli
        def warn_and_fail(args, out):
            warnings.warn("first line\\n  second line", UserWarning)
            raise ValueError("stop here")
        cli.cmd_info = warn_and_fail
        sys.exit(cli.main(["info", "x.npy"]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["skalign info: warning: first line second line",
                                        "skalign info: error: stop here"], proc.stderr

    def warn(args, out):
        warnings.warn("recorded", UserWarning)
        return 0

    import skalign.cli as cli

    before = warnings.formatwarning
    with pytest.MonkeyPatch.context() as patch, pytest.warns(UserWarning, match="recorded"):
        patch.setattr(cli, "cmd_info", warn)
        assert main(["info", "x.npy"]) == 0
    assert warnings.formatwarning is before  # Python's own again after the command
    assert "warning" not in capsys.readouterr().err


# --- the migration's counts ----------------------------------------------------------------
def test_migrate_says_where_the_vectors_came_from(store, tmp_path, capsys):
    """A fresh cache: every text encoded now and no word of the cache. The same migration to
    another output: nothing encoded, all from the cache. A store where rows repeat a text:
    the repeats are said as such, not as cache hits."""
    assert main(["migrate", store, str(tmp_path / "o1.parquet"), "--encoder", "msg_enc:embed",
                 "--budget", str(BUDGET), "--quiet"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"encoded (10.0%; {BUDGET} texts encoded now)"), first
    assert main(["migrate", store, str(tmp_path / "o2.parquet"), "--encoder", "msg_enc:embed",
                 "--budget", str(BUDGET), "--quiet"]) == 0
    second = capsys.readouterr().out.splitlines()[0]
    assert f"(10.0%; 0 texts encoded now, {BUDGET} read from the encode cache)" in second
    assert main(["migrate", store, str(tmp_path / "o3.parquet"), "--encoder", "msg_enc:embed",
                 "--budget", str(BUDGET), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["n_encoded"], report["from_cache"], report["repeated"]) == (0, BUDGET, 0)

    twice = tmp_path / "twice"
    twice.mkdir()
    texts = [f"doc {i % (N // 2)}" for i in range(N)]  # rows i and i + 300 share a text
    src = make_store(twice, texts)
    out = str(twice / "out.parquet")
    assert main(["migrate", src, out, "--encoder", "msg_enc:embed", "--budget", "200",
                 "--quiet", "--encode-cache", str(twice / "c.sqlite")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    found = re.search(r"; (\d+) texts encoded now, (\d+) repeating a text of another row\)",
                      line)
    assert found and "encode cache" not in line, line
    assert int(found[1]) + int(found[2]) == 200 and int(found[2]) > 0


# --- info -----------------------------------------------------------------------------------
def test_info_says_translations_only_where_there_are_some(store, tmp_path, capsys):
    out = str(tmp_path / "out.parquet")
    assert main(["migrate", store, out, "--encoder", "msg_enc:embed", "--budget",
                 str(BUDGET), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", out]) == 0
    shown = capsys.readouterr().out
    assert f"{BUDGET} of {N} rows (10.0%) hold their text's vector" in shown
    assert f"; {N - BUDGET} hold translations" in shown
    assert "migrated: the other rows translated by" in shown
    assert main(["migrate", store, out, "--continue", "--encoder", "msg_enc:embed",
                 "--budget", str(N), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"complete: {out}: {N} of {N} rows encoded")
    assert main(["info", out]) == 0
    shown = capsys.readouterr().out
    assert f"{N} of {N} rows (100.0%) hold their text's vector" in shown
    assert "none is a translation" in shown
    assert "hold translations" not in shown and "the others are translations" not in shown
    assert "the other rows translated by" not in shown
    assert main(["info", out, "--json"]) == 0
    vectors = json.loads(capsys.readouterr().out)["vectors"]
    assert (vectors["encoded"], vectors["translated"], vectors["stale"]) == (N, 0, 0)


# --- the plan -------------------------------------------------------------------------------
def test_the_plan_says_what_decided_its_verdict():
    from skalign.datasets import load_docstring_embeddings
    from skalign.plan import plan_migration

    E = load_docstring_embeddings().embeddings
    plan = plan_migration(E["minilm_l6"][:300], E["mpnet_base"][:300], methods=["procrustes"],
                          curve=False, n_resamples=100, min_recall=0.6)
    rec = plan.recommendation
    line = next(r for r in rec["reasons"] if r.startswith("cheapest option that keeps"))
    assert line.startswith(f"cheapest option that keeps --min-recall 0.60: {rec['action']} (")
    # every cheaper option is said with its estimate below the threshold
    tried = re.findall(r"([a-z +]+) (\d\.\d{3}) (<|>=) 0\.60", line.split("(", 1)[1])
    assert tried[0][0].strip() == "stay"
    assert all(sign == "<" for _, _, sign in tried[:-1])
    if rec["action"] != "re-embed":
        assert tried[-1][0].strip() == rec["action"] and tried[-1][2] == ">="
    else:
        assert "re-embedding keeps recall@10 1.000 by definition" in line


def _judged(stay, reembed, translate=None):
    options = [{"option": "stay", "method": None, "ndcg": stay, "ndcg_ci": (0, 1)},
               {"option": "re-embed", "method": None, "ndcg": reembed, "ndcg_ci": (0, 1)}]
    if translate is not None:
        options.append({"option": "translate", "method": "linear", "ndcg": translate,
                        "ndcg_ci": (0, 1)})
    return {"n_queries": 500, "collection": 2000, "k": 10, "options": options}


def test_judged_verdict_names_the_tie_rule_when_it_decides():
    """The issue's case: re-embedding 0.379 against staying's 0.373. Staying is chosen by the
    tie rule, and the text says so instead of "nothing beats staying"; it also says the
    judged queries override the verdict on recall."""
    from skalign.plan._recommend import judged_choice, judged_reasons

    judged = _judged(0.373, 0.379, translate=0.30)
    choice = judged_choice(judged)
    assert choice["option"] == "stay"
    lines = judged_reasons(judged, choice, "translate + rerank")
    text = "\n".join(lines)
    assert "beats staying" not in text
    assert ("re-embed scores best on the judged queries (nDCG@10 0.379), but stay (0.373) is "
            "within 0.01 of it and cheaper, and the tie rule") in text
    assert lines[-1].startswith("the verdict is the judged queries' (stay), not recall@10's "
                                "(translate + rerank)")
    lines = judged_reasons(_judged(0.40, 0.38), judged_choice(_judged(0.40, 0.38)), "stay")
    assert "neither re-embedding nor any translation beats staying" in lines[1]
    assert "(stay nDCG@10 0.400, the best of the others 0.380): stay" in lines[1]
    assert len(lines) == 2  # the same verdict as on recall: nothing overridden
    judged = _judged(0.30, 0.42, translate=0.415)
    lines = judged_reasons(judged, judged_choice(judged), "stay")
    assert "re-embed scores best" in lines[1] and lines[1].endswith(
        "(0.415) is within 0.01 of it and cheaper, and the tie rule takes the cheapest option "
        "within 0.01 nDCG@10 of the best: translate")
    judged = _judged(0.30, 0.42, translate=0.35)
    lines = judged_reasons(judged, judged_choice(judged), "stay")
    assert lines[1] == ("re-embed scores best on the judged queries (nDCG@10 0.420) and no "
                        "cheaper option is within 0.01 of it: re-embed")


def test_qrels_beyond_the_pairs_fail_before_any_fit(tmp_path, capsys, monkeypatch):
    fits = []
    monkeypatch.setattr("skalign.plan._fits.cross_fit", lambda *a, **k: fits.append(a) or 1 / 0)
    X, Y = spaces()
    for name, M in (("a", X[:200]), ("b", Y[:200]), ("qa", X[:20]), ("qb", Y[:20])):
        np.save(tmp_path / f"{name}.npy", M)
    base = ["plan", "--source", str(tmp_path / "a.npy"), "--target", str(tmp_path / "b.npy"),
            "--queries-source", str(tmp_path / "qa.npy"), "--queries-target",
            str(tmp_path / "qb.npy"), "--no-curve"]
    (tmp_path / "doc.trec").write_text("0 0 3 1\n1 0 250 1\n")
    assert main(base + ["--qrels", str(tmp_path / "doc.trec")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("skalign plan: error: qrels: document row 250 (query 1) is out of "
                           "range: doc rows index the 200 pairs (rows 0 to 199).")
    (tmp_path / "query.trec").write_text("0 0 3 1\n20 0 5 2\n")
    assert main(base + ["--qrels", str(tmp_path / "query.trec")]) == 2
    assert "query row 20 is out of range: there are 20 judged queries" in capsys.readouterr().err
    assert fits == []


# --- migrate --help -------------------------------------------------------------------------
def test_migrate_help_says_how_rows_are_chosen(capsys):
    from skalign._migrate.choice import CENTRES_MAX_BUDGET

    with pytest.raises(SystemExit):
        main(["migrate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("BUDGET rows of SOURCE are chosen from their old vectors: up to a budget of "
            f"{CENTRES_MAX_BUDGET:,}, the rows nearest the centres of a seeded k-means (one "
            "centre per row to encode); above it, and for --continue's further rows, rows "
            "drawn uniformly, seeded") in text
    assert "chosen at random (seeded)" not in text


# --- --normalize ----------------------------------------------------------------------------
def _vectors(path):
    from skalign._stores import open_live

    with open_live(path) as live:
        rows = live.fetch(live.ids())
    encoded = np.array([p is not None and p.startswith("encoded:") for p in rows.provenance])
    return np.linalg.norm(rows.vectors, axis=1), encoded


def test_normalize_follows_an_inner_product_store(store, tmp_path, capsys, monkeypatch):
    """``--metric ip``: auto gives unit vectors, recorded and shown by ``info``; ``no`` gives
    the raw lengths; ``--continue`` with another choice is refused before any text is
    encoded; the spec may carry the choice, and may not contradict ``--normalize``; ``search``
    on the store encodes unit vectors too."""
    _, Y = spaces()
    raw = np.linalg.norm(Y, axis=1)
    out = str(tmp_path / "ip.parquet")
    base = ["--encoder", "msg_enc:embed", "--budget", str(BUDGET), "--quiet"]
    assert main(["migrate", store, out, "--metric", "ip", *base]) == 0
    said = capsys.readouterr().out
    assert ("normalize: yes (unit vectors); auto: SOURCE ranks by inner product, where a "
            "vector's length changes the ranking") in said
    norms, encoded = _vectors(out)
    assert encoded.sum() == BUDGET
    np.testing.assert_allclose(norms[encoded], 1.0, atol=1e-5)
    stamp = json.loads((tmp_path / "ip.parquet.skalign.json").read_text())
    assert stamp["migration"]["normalize"] == "yes"
    assert main(["info", out]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"normalize: yes \(unit vectors\); mean vector length over 600 rows: "
                     r"encoded rows 1\.000, translated rows \d\.\d{3}", shown), shown

    # the same store searched: text queries and candidates encoded to unit length, as the
    # migration chose (its stamp says so)
    (tmp_path / "q.txt").write_text("doc 3\ndoc 77\n")
    assert main(["search", out, "--metric", "ip", "--queries", str(tmp_path / "q.txt"),
                 "--encoder", "msg_enc:embed", "--output", str(tmp_path / "r.jsonl"),
                 "--candidates", "40"]) == 0
    assert "normalize: yes (unit vectors); auto: the choice the migration recorded (yes)" in \
        capsys.readouterr().out
    norms, encoded = _vectors(out)
    assert encoded.sum() > BUDGET
    np.testing.assert_allclose(norms[encoded], 1.0, atol=1e-5)
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert first["ids"][0] == "d3" and abs(first["scores"][0] - 1.0) < 1e-5
    # a store no migration wrote: auto by its metric
    assert main(["search", store, "--metric", "ip", "--queries", str(tmp_path / "q.txt"),
                 "--encoder", "msg_enc:embed", "--output", str(tmp_path / "r0.jsonl"),
                 "--no-write-back"]) == 0
    assert ("normalize: yes (unit vectors); auto: STORE ranks by inner product, where a "
            "vector's length changes the ranking") in capsys.readouterr().out

    # --continue with another choice: refused before any text is encoded
    import msg_enc

    encoded = []
    with monkeypatch.context() as patch:
        patch.setattr(msg_enc, "embed", lambda texts: encoded.extend(texts) or 1 / 0)
        assert main(["migrate", store, out, "--continue", "--normalize", "no", *base]) == 2
    err = capsys.readouterr().err
    assert "was migrated with normalize yes, this run's is no" in err and err.count("\n") == 1
    assert encoded == []
    # --continue with auto (and no --metric): the migration's recorded choice
    assert main(["migrate", store, out, "--continue", "--encoder", "msg_enc:embed",
                 "--budget", "40", "--quiet"]) == 0
    assert "normalize: yes (unit vectors); auto: the choice the migration recorded (yes)" in \
        capsys.readouterr().out
    norms, encoded = _vectors(out)
    np.testing.assert_allclose(norms[encoded], 1.0, atol=1e-5)

    # no: the encoder's raw lengths; the same through the spec; a contradiction refused
    for name, extra, why in (
            ("no.parquet", ["--normalize", "no"], "--normalize no"),
            ("spec.parquet", ["--encoder", "msg_enc:embed?normalize=no"],
             "normalize=no in the encoder spec")):
        target = str(tmp_path / name)
        assert main(["migrate", store, target, "--metric", "ip", *base, *extra]) == 0
        assert f"normalize: no (the encoder's raw output); {why}" in capsys.readouterr().out
        norms, encoded = _vectors(target)
        ids = np.flatnonzero(encoded)
        np.testing.assert_allclose(norms[ids], raw[ids], rtol=1e-5)
    assert main(["migrate", store, str(tmp_path / "x.parquet"), *base, "--encoder",
                 "msg_enc:embed?normalize=yes", "--normalize", "no"]) == 2
    assert "disagree" in capsys.readouterr().err

    # a cosine store (the default): auto keeps the encoder's own output
    cos = str(tmp_path / "cos.parquet")
    assert main(["migrate", store, cos, *base]) == 0
    assert ("normalize: the encoder's own output; auto: SOURCE ranks by cosine, where a "
            "vector's length changes nothing") in capsys.readouterr().out
    norms, encoded = _vectors(cos)
    ids = np.flatnonzero(encoded)
    np.testing.assert_allclose(norms[ids], raw[ids], rtol=1e-5)
    # a migration recorded before the choice existed goes on as it was made, even when the
    # store's metric would now say otherwise
    sidecar = tmp_path / "cos.parquet.skalign.json"
    stamp = json.loads(sidecar.read_text())
    del stamp["migration"]["normalize"]
    sidecar.write_text(json.dumps(stamp))
    assert main(["migrate", store, cos, "--continue", "--metric", "ip", *base]) == 0
    assert "normalize: the encoder's own output; auto: the migration's (recorded before " \
        "--normalize existed" in capsys.readouterr().out


def test_normalize_on_a_chroma_inner_product_collection(tmp_path, monkeypatch, capsys):
    """A Chroma collection with ``hnsw:space: ip``: auto reads the engine's own metric."""
    chromadb = pytest.importorskip("chromadb")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    make_store(tmp_path)
    X, _ = spaces()
    client = chromadb.PersistentClient(str(tmp_path / "db"))
    col = client.create_collection("docs", metadata={"hnsw:space": "ip"})
    col.add(ids=[f"d{i}" for i in range(N)], embeddings=X,
            documents=[f"doc {i}" for i in range(N)])
    del client
    out = f"chroma:{tmp_path / 'db'}/docs_new"
    assert main(["migrate", f"chroma:{tmp_path / 'db'}/docs", out, "--encoder",
                 "msg_enc:embed", "--budget", str(BUDGET), "--quiet"]) == 0
    assert "normalize: yes (unit vectors); auto: SOURCE ranks by inner product" in \
        capsys.readouterr().out
    norms, encoded = _vectors(out)
    np.testing.assert_allclose(norms[encoded], 1.0, atol=1e-5)
    assert main(["info", out]) == 0
    assert "normalize: yes (unit vectors)" in capsys.readouterr().out


def test_load_encoder_normalize_and_spec():
    from skalign.encoders import UnitEncoder, load_encoder, resolve_normalize
    from skalign.exceptions import EncoderError

    def embed(texts):
        return np.array([[3.0, 4.0 * len(t)] for t in texts])

    assert [resolve_normalize("auto", m) for m in ("cosine", "ip", "l2", None)] == \
        [None, True, True, None]
    assert (resolve_normalize("yes"), resolve_normalize("no")) == (True, False)
    unit = load_encoder(embed, normalize="yes")
    assert isinstance(unit, UnitEncoder) and unit.unit_vectors
    np.testing.assert_allclose(np.linalg.norm(unit.encode(["a", "bb"]), axis=1), 1.0)
    own = load_encoder(embed, normalize="auto", metric="cosine")
    assert own.fingerprint != unit.fingerprint and unit.fingerprint.endswith(":unit")
    np.testing.assert_allclose(own.encode(["a"]), [[3.0, 4.0]])
    assert isinstance(load_encoder("numpy:ones?normalize=auto", metric="ip"), UnitEncoder)
    with pytest.raises(EncoderError, match="normalize must be auto, yes or no"):
        load_encoder("numpy:ones?normalize=maybe")
    with pytest.raises(EncoderError, match="give one"):
        load_encoder("numpy:ones?normalize=yes", normalize=False)


# --- the guide's snippets -------------------------------------------------------------------
def test_the_guides_pairs_snippet_draws_a_seeded_random_sample(tmp_path, monkeypatch):
    """The migration page's snippet, run as written on a Chroma collection of 5,000 documents:
    its 2,000 pairs are spread over the whole collection (not its first rows), each old vector
    paired with its own document's new one, and the same sample again on a second run."""
    import types

    pytest.importorskip("chromadb")
    import chromadb
    from test_guide_chroma import (
        PAGE,
        FakeSentenceTransformer,
        _python_blocks,
        encode_a,
        encode_b,
    )

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "sentence_transformers",
                        types.SimpleNamespace(SentenceTransformer=FakeSentenceTransformer))
    docs = [f"stored document number {i}" for i in range(5000)]
    A = encode_a(docs)
    col = chromadb.PersistentClient("./chroma").create_collection("docs")
    for lo in range(0, len(docs), 1000):
        col.add(ids=[f"d{i}" for i in range(lo, lo + 1000)], documents=docs[lo:lo + 1000],
                embeddings=A[lo:lo + 1000])
    snippet = next(b for b in _python_blocks(PAGE.read_text()) if "get_collection" in b)
    assert "limit=" not in snippet
    runs = []
    for _ in range(2):
        exec(compile(snippet, str(PAGE), "exec"), {})  # the page's own code
        runs.append((np.load("known_a.npy"), np.load("known_b.npy")))
    known_a, known_b = runs[0]
    np.testing.assert_array_equal(runs[1][0], known_a)  # seeded: the same sample again
    rows = np.array([int(np.argmin(np.abs(A - a).sum(axis=1))) for a in known_a])
    np.testing.assert_allclose(A[rows], known_a, rtol=1e-6)
    assert len(set(rows.tolist())) == 2000
    assert (rows >= 2000).mean() > 0.5 and rows.max() > 4500  # not the first 2,000 rows
    np.testing.assert_allclose(known_b, encode_b([docs[i] for i in rows]), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("counts", [[25, 50, 100, 200, 400], [25, 50, 100, 200, 500, 1000, 1600],
                                    [25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
                                     21000]])
def test_the_report_budget_axis_labels_do_not_overlap(counts):
    import itertools

    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from skalign.plan import Estimate, MigrationPlan
    from skalign.plan._report import _figure

    plan = MigrationPlan(n_pairs=counts[-1], n_unpaired_source=0, n_unpaired_target=0, k=10,
                         normalized=True, row_norms={"source": 1.0, "target": 1.0},
                         store_size=100_000, confidence=0.95, min_recall=0.6,
                         ceiling={"recall": 0.8, "method": "ridge"},
                         stay={"recall": 0.3, "recall_ci": (0.28, 0.32)},
                         recommendation={"action": "translate", "method": "linear"})
    for method in ("procrustes", "linear"):
        plan.learning_curve[method] = {"n_pairs": counts, "recall_std": [0.01] * len(counts),
                                       "recall": list(np.linspace(0.3, 0.7, len(counts)))}
        plan.estimates.append(Estimate(method, "document", "", 0.6, (0.55, 0.65), 0.6,
                                       (0.5, 0.7), 100_000, True, 1.0))
    fig = _figure(plan)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    shown = [t for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True)
             if t.get_visible() and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in shown]
    assert not [pair for pair in itertools.combinations(boxes, 2) if pair[0].overlaps(pair[1])]
    assert shown[-1].get_text() == (f"{counts[-1] / 1000:g}k" if counts[-1] >= 1000
                                    else str(counts[-1]))  # all the pairs: always labelled
    assert len(shown) >= min(len(counts), 5)
    plt.close(fig)
