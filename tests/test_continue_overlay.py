"""A file output published again by ``skalign migrate --continue`` with no row of its own to
mark (a step that keeps "translate all") binds the overlay other writers left (``skalign
search``'s encoded rows) to the new file instead of leaving it refusing every reader; a plain
``translate --replace`` still leaves it refused, and ``skalign info`` then says why it counted
nothing instead of printing no counts."""

import json
import tempfile

import numpy as np
import pytest
from test_search import FileStore

from skalign import LinearAligner
from skalign._stores import open_live
from skalign._stores.live import parse_mark
from skalign._stores.pipeline.translate import RowMarks, translate_store
from skalign.cli import main
from skalign.exceptions import StoreError

N, D_IN, D_OUT = 400, 12, 16


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def _published_with_encoded_rows(tmp_path):
    """A Parquet output translated from its source, then 30 rows written back encoded (as
    ``skalign search`` writes its candidates): ``(source, output, models, ids, vectors)``."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, D_IN)).astype(np.float32)
    Y = (X @ rng.normal(size=(D_IN, D_OUT)) + 0.3 * rng.normal(size=(N, D_OUT))).astype(
        np.float32)
    store = FileStore("parquet", tmp_path)
    src = store.make(X)
    out = str(tmp_path / "out.parquet")
    first = LinearAligner().fit(X[:200], Y[:200])
    translate_store(first, src, out)
    rows = rng.choice(N, 30, replace=False)
    ids = [store.key(int(i)) for i in rows]
    V = Y[rows] * 1.5  # unlike any translation
    with open_live(out, text_field="doc") as live:
        texts = live.fetch(ids, text_field="doc").texts
        RowMarks(ids, V, None, [None] * len(ids), None, "enc-Y", texts, "doc").write(live)
    second = LinearAligner(alpha=10.0).fit(X[:300], Y[:300])
    return src, out, second, ids, V


def test_a_republish_with_no_mark_of_its_own_keeps_the_overlay(tmp_path):
    src, out, model, ids, V = _published_with_encoded_rows(tmp_path)
    # a --continue step that keeps "translate all": marks given, none of them a row
    translate_store(model, src, out, replace=True, marks=(RowMarks([], np.zeros((0, D_OUT))),
                                                          RowMarks([], np.zeros((0, D_OUT)))))
    with open_live(out, text_field="doc") as live:
        rows = live.fetch(ids, text_field="doc")
        others = live.fetch([1, 4], text_field="doc")
    np.testing.assert_array_equal(rows.vectors, V)
    assert all(parse_mark(p).fingerprint == "enc-Y" for p in rows.provenance)
    # the other rows are the new map's translations (the file was written again)
    assert not np.allclose(others.vectors, 0)


def test_a_plain_replace_leaves_the_overlay_refused_and_info_says_so(tmp_path, capsys):
    src, out, model, ids, V = _published_with_encoded_rows(tmp_path)
    translate_store(model, src, out, replace=True)  # marks=None: skalign translate --replace
    with pytest.raises(StoreError, match="changed since the encoded rows"):
        open_live(out)
    assert main(["info", out, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["vectors"] is None and "changed since the encoded rows" in got["not_counted"]
    assert main(["info", out]) == 0
    said = capsys.readouterr().out
    assert "rows not counted by provenance:" in said and "changed since" in said
