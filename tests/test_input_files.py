"""Input files from anyone: plan files (``--candidates``), ``.jsonl`` queries, qrels and
provenance stamps are refused with one line and exit 2 when nested too deep, not finite or of
the wrong types (never a traceback); TREC relevance below 0 counts as 0; ``info`` prints stored
text with its control characters escaped."""

import json
import os
import textwrap

import numpy as np
import pytest
from test_search import FileStore

from skalign._stores.address import parse_address
from skalign._stores.provenance import read_stamp
from skalign.cli import main
from skalign.exceptions import StoreError
from skalign.plan._inputs import read_qrels
from skalign.plan._recommend import ndcg_per_query
from skalign.utils._input_files import InputFileError, json_depth, loads_bounded
from skalign.utils._terminal import escape_control

N, D = 60, 8
DEEP = "[" * 100_000 + "]" * 100_000


def _short(value):
    return repr(value)[:24]


def _one_line(capsys, command):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"skalign {command}: error:"), err
    assert "Traceback" not in captured.err
    return err


# -------------------------------------------------------------------------------- JSON
def test_loads_bounded_refuses_depth_and_non_finite_numbers():
    with pytest.raises(InputFileError, match="nested 100000 levels deep"):
        loads_bounded(DEEP, "f")
    with pytest.raises(InputFileError, match="nested"):
        loads_bounded('{"a":' * 70_000 + "1" + "}" * 70_000, "f")
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}', "[1e999]"):
        with pytest.raises(InputFileError, match="not finite"):
            loads_bounded(text, "f")
    assert loads_bounded('{"a": "[[[[\\"{{", "b": [1.5, -2]}', "f") == {
        "a": '[[[["{{', "b": [1.5, -2]}
    assert json_depth('"[[[" [[1]] {"x": ["]"]}') == 2
    with pytest.raises(ValueError):
        loads_bounded("[1,", "f")  # not JSON: the caller words the message


# ---------------------------------------------------------------------------------- search
@pytest.fixture
def search_argv(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    np.save(tmp_path / "Y.npy", Y)
    (tmp_path / "enc60.py").write_text(textwrap.dedent(f"""
        import numpy as np
        Y = np.load({str(tmp_path / "Y.npy")!r})
        def embed(texts):
            return Y[[int(t.split()[1]) for t in texts]]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    store = FileStore("parquet", tmp_path).make(Y + 0.1)
    (tmp_path / "q.txt").write_text("doc 0\ndoc 1\n")
    return ["search", store, "--encoder", "enc60:embed", "--text-field", "doc", "-k", "3",
            "--output", "r.jsonl"]


@pytest.mark.parametrize("plan, match", [
    (DEEP, "nested 100000 levels deep"),
    ('{"rerank": {"k_candidates": NaN}}', "not finite"),
    ('{"rerank": {"k_candidates": 1e999}}', "not finite"),
    ('{"rerank": {"k_candidates": "30"}}', "holds no rerank estimate"),
    ('{"rerank": {"k_candidates": true}}', "holds no rerank estimate"),
    ('{"rerank": [30]}', "holds no rerank estimate"),
    ("[1,", "not a JSON plan file"),
], ids=_short)
def test_candidates_plan_file_validated(tmp_path, search_argv, capsys, plan, match):
    (tmp_path / "plan.json").write_text(plan)
    assert main(search_argv + ["--queries", "q.txt", "--candidates", "plan.json"]) == 2
    assert match in _one_line(capsys, "search")
    assert not (tmp_path / "r.jsonl").exists()


def test_candidates_plan_file_read(tmp_path, search_argv, capsys):
    (tmp_path / "plan.json").write_text('{"rerank": {"k_candidates": 20}}')
    assert main(search_argv + ["--queries", "q.txt", "--candidates", "plan.json"]) == 0
    assert "20 candidates each" in capsys.readouterr().out


@pytest.mark.parametrize("line, match", [
    (DEEP, "line 2: JSON nested 100000 levels deep"),
    ('{"text": NaN}', "not finite"),
    ('{"text": ["doc 1"]}', "line 2 holds no text"),
    ("doc 1", "line 2 is not JSON"),
], ids=_short)
def test_jsonl_queries_validated(tmp_path, search_argv, capsys, line, match):
    (tmp_path / "q.jsonl").write_text('"doc 0"\n' + line + "\n")
    assert main(search_argv + ["--queries", "q.jsonl"]) == 2
    assert match in _one_line(capsys, "search")


def test_query_vectors_must_be_finite(tmp_path, search_argv, capsys):
    Q = np.ones((3, D), np.float32)
    Q[1, 2] = np.nan
    np.save(tmp_path / "q.npy", Q)
    assert main(search_argv + ["--queries", "q.npy"]) == 2
    assert "query 1 holds a NaN" in _one_line(capsys, "search")


# ----------------------------------------------------------------------------------- qrels
@pytest.mark.parametrize("text, match", [
    ('{"0": ' + DEEP[:200_000] + "}", "nested"),
    ('{"0": {"1": NaN}}', "not finite"),
    ('{"0": {"1": Infinity}}', "not finite"),
    ('{"0": {"1": 1e999}}', "not finite"),
    ('{"0": {"1": "2"}}', "relevance '2' is not a number"),
    ('{"0": {"1": true}}', "relevance True is not a number"),
    ('{"0": [1, 2]}', "maps to a list"),
    ('{"x": {"1": 1}}', "row 'x' is not a non-negative integer"),
    ('{"0": {"-1": 1}}', "row '-1' is not a non-negative integer"),
    ("0 0 1 nan\n", "relevance nan is not finite"),
    ("0 0 1 inf\n", "relevance inf is not finite"),
    ("0 0 1 -inf\n", "relevance -inf is not finite"),
    ("0 0 1 1 extra\n", "expected 'QUERY-ROW 0 DOC-ROW RELEVANCE'"),
], ids=_short)
def test_qrels_validated(tmp_path, text, match):
    (tmp_path / "q").write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        read_qrels(tmp_path / "q")
    assert "\n" not in str(info.value)


def test_trec_relevance_below_zero_counts_as_zero(tmp_path):
    (tmp_path / "q.trec").write_text("0 0 1 -1\n0 0 2 1\n1 0 3 -2\n")
    qrels = read_qrels(tmp_path / "q.trec")
    assert qrels == {0: {1: 0.0, 2: 1.0}, 1: {3: 0.0}}
    # as trec_eval: a negative label ranked first costs nothing; the ideal ranking is unchanged
    assert ndcg_per_query([[1, 2]], qrels, [0], 2)[0] == pytest.approx(1 / np.log2(3))


def test_plan_command_refuses_bad_qrels_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for name in ("a", "b", "qa", "qb"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(40, D)).astype(np.float32))
    (tmp_path / "q.json").write_text('{"0": ' + DEEP[:200_000] + "}")
    argv = ["plan", "--source", "a.npy", "--target", "b.npy", "--queries-source", "qa.npy",
            "--queries-target", "qb.npy", "--qrels", "q.json", "--methods", "procrustes",
            "--no-curve"]
    assert main(argv) == 2
    assert "nested" in _one_line(capsys, "plan")
    (tmp_path / "q.json").write_text('{"0": {"1": NaN}}')
    assert main(argv) == 2
    assert "not finite" in _one_line(capsys, "plan")


# ---------------------------------------------------------------------------------- stamps
def _npy_store(tmp_path, stamp_text):
    np.save(tmp_path / "s.npy", np.ones((4, D), np.float32))
    if stamp_text is not None:
        (tmp_path / "s.npy.skalign.json").write_text(stamp_text)
    return str(tmp_path / "s.npy")


GOOD = {"skalign": "0.1", "model": "abc", "source": "src.npy", "source_identity": "x",
        "rows": 4, "d_in": 8, "d_out": 8, "written": "2024-01-01T00:00:00Z"}


@pytest.mark.parametrize("change, match", [
    ({"rows": "x"}, "'rows' is a str"),
    ({"rows": True}, "'rows' is a bool"),
    ({"rows": -3}, "'rows' is negative"),
    ({"migration": 5}, "'migration' is a int"),
    ({"source": {"a": 1}}, "'source' is a dict"),
    ({"model": ["m"]}, "'model' is a list"),
    ({"migration": {"encoder": "e", "map": "m", "method": "linear"}}, "has no 'estimate'"),
    ({"migration": {"encoder": 1, "map": "m", "method": "linear", "estimate": {}}},
     "'encoder' is a int"),
    ({"migration": {"encoder": "e", "map": "m", "method": "linear",
                    "estimate": {"recall_at_10": "high"}}}, "'recall_at_10' is a str"),
], ids=_short)
def test_stamp_of_wrong_types_is_one_line(tmp_path, capsys, change, match):
    store = _npy_store(tmp_path, json.dumps({**GOOD, **change}))
    with pytest.raises(StoreError, match=match) as info:
        read_stamp(parse_address(store))
    assert "s.npy.skalign.json" in str(info.value)
    assert main(["info", store]) == 2
    assert "provenance stamp is malformed" in _one_line(capsys, "info")


@pytest.mark.parametrize("text, match", [
    ('{"source": ' + DEEP[:200_000] + "}", "nested"),
    ('{"source": "x", "extra": ' + "[" * 20 + "]" * 20 + "}", "nested"),
    ('{"rows": NaN}', "not finite"),
    ("[1, 2]", "a list, not an object"),
    ("{not json", "not JSON"),
], ids=_short)
def test_stamp_too_deep_or_not_finite_is_one_line(tmp_path, capsys, text, match):
    store = _npy_store(tmp_path, text)
    with pytest.raises(StoreError, match=match):
        read_stamp(parse_address(store))
    assert main(["info", store]) == 2
    assert "provenance stamp is malformed" in _one_line(capsys, "info")


def test_translate_with_a_malformed_stamp_is_one_line(tmp_path, capsys):
    from skalign import ProcrustesAligner
    from skalign.io import save

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, D)).astype(np.float32)
    model = save(ProcrustesAligner().fit(X, X), tmp_path / "m.skops")
    np.save(tmp_path / "s.npy", X)
    (tmp_path / "s.npy.skalign.json").write_text('{"migration": 5}')
    assert main(["translate", str(model), str(tmp_path / "s.npy"), str(tmp_path / "o.npy"),
                 "--quiet"]) == 2
    assert "provenance stamp is malformed" in _one_line(capsys, "translate")
    assert not (tmp_path / "o.npy").exists()


def test_stamp_behind_a_link_is_not_read(tmp_path):
    store = _npy_store(tmp_path, None)
    (tmp_path / "elsewhere.json").write_text(json.dumps(GOOD))
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "s.npy.skalign.json")
    assert read_stamp(parse_address(store)) is None
    os.unlink(tmp_path / "s.npy.skalign.json")
    (tmp_path / "s.npy.skalign.json").write_text(json.dumps(GOOD))
    assert read_stamp(parse_address(store)) == GOOD


# ------------------------------------------------------------------------------------ info
def test_escape_control():
    text = "a\x1b]0;pwned\x07\x1b[2J\r\n\x9b\u2028\u2029\u202e\u2066\u200f\ud800 é ✓"
    out = escape_control(text)
    assert out == ("a\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0a\\x9b\\u2028\\u2029\\u202e\\u2066"
                   "\\u200f\\ud800 é ✓")
    assert escape_control("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"


@pytest.mark.parametrize("as_json", [False, True])
def test_info_escapes_control_characters(tmp_path, capsys, as_json):
    hostile = "\x1b]0;pwned\x07\x1b[2J"
    stamp = {**GOOD, "source": hostile, "model": "m\u202egnp.exe\r\nfake line",
             "skalign": "\x9b31m"}
    store = _npy_store(tmp_path, json.dumps(stamp))
    assert main(["info", store] + (["--json"] if as_json else [])) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r\x9b\u202e"), repr(out)
    if as_json:
        assert json.loads(out)["stamp"]["source"] == hostile
    else:
        assert "\\x1b]0;pwned\\x07\\x1b[2J" in out
        assert "m\\u202egnp.exe\\x0d\\x0afake line" in out
        assert len(out.strip().splitlines()) == 2
