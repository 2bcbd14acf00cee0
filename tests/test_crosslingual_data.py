"""The vendored cross-lingual development set is whole and its rows are aligned.

``benchmarks/data/crosslingual_de.npz`` (made by ``maint_tools/make_crosslingual.py``): English
msgid / German msgstr pairs from PyPI gettext catalogs, embedded by three encoders. A row
shift or a shuffled array would break the pairing silently, so the test checks it with the
encoders themselves: multilingual-e5 puts a German string next to its English source (top-1
far above chance without any map), and a Procrustes map fitted on one half of a seeded
sample retrieves the other half's translations; both collapse to chance on misaligned rows.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from skalign import ProcrustesAligner
from skalign.metrics import top_k_accuracy

DIMS = {"en_minilm_l6": 384, "en_mpnet_base": 768, "en_me5_small_q4": 384,
        "de_me5_small_q4": 384, "de_minilm_l6": 384}


@pytest.fixture(scope="module")
def xling():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_crosslingual.py"
    spec = importlib.util.spec_from_file_location("_crosslingual", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_crosslingual(texts=True)


def test_shapes_texts_and_provenance(xling):
    arrays, meta = xling
    n = len(meta["en"])
    assert 2000 <= n <= 5000
    assert {k: a.shape for k, a in arrays.items()} == {k: (n, d) for k, d in DIMS.items()}
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for a in arrays.values())
    assert len(meta["de"]) == len(meta["source"]) == n
    assert len(set(meta["en"])) == n and len(set(meta["de"])) == n  # deduplicated both sides
    assert all(en != de for en, de in zip(meta["en"], meta["de"]))
    assert set(meta["source"]) <= set(range(len(meta["sources"])))
    assert {s.split(":")[0].split("==")[0] for s in meta["sources"]} == {
        "Django", "Sphinx", "wagtail", "django-allauth", "Trac"}
    for key in ("en_me5_small_q4", "de_me5_small_q4"):  # the e5 engine L2-normalises
        np.testing.assert_allclose(np.linalg.norm(arrays[key], axis=1), 1.0, atol=2e-3)
    assert meta["meta"]["arrays"]["en_minilm_l6"]["shape"] == [n, 384]


def test_rows_are_aligned_across_languages_and_encoders(xling):
    arrays, _ = xling
    rng = np.random.default_rng(0)
    rows = rng.choice(len(arrays["en_me5_small_q4"]), 600, replace=False)
    fit, held = rows[:300], rows[300:]
    en, de = arrays["en_me5_small_q4"], arrays["de_me5_small_q4"]
    # same multilingual model, no map: chance is 1/300 = 0.003
    assert top_k_accuracy(de[held], en[held]) > 0.6
    assert top_k_accuracy(de[held], np.roll(en[held], 1, axis=0)) < 0.05
    # each English encoder is aligned with German e5 row for row (a fitted map transfers)
    for key in ("en_minilm_l6", "en_mpnet_base"):
        X = arrays[key]
        proc = ProcrustesAligner().fit(X[fit], de[fit])
        assert top_k_accuracy(de[held], proc.transform(X[held])) > 0.3, key
    # the English arrays embed the same texts: MiniLM -> MPNet from 300 pairs is near exact
    proc = ProcrustesAligner().fit(arrays["en_minilm_l6"][fit], arrays["en_mpnet_base"][fit])
    assert top_k_accuracy(arrays["en_mpnet_base"][held],
                          proc.transform(arrays["en_minilm_l6"][held])) > 0.6


@pytest.mark.slow
@pytest.mark.parametrize("name, gera_min", [("e5 en -> e5 de", 0.8), ("MiniLM en -> e5 de", 0.5)])
def test_gera_defaults_beat_tuned_baselines_at_200_crosslingual_pairs(
        xling, load_benchmark, name, gera_min):
    """Issue 15's bar: GeRA's defaults within 0.02 of the tuned baselines; here they lead.

    Split 0 of ``benchmarks/bench_crosslingual_baselines.py``: GeRA led the best of Procrustes,
    ridge with LOO alpha and ridge with the held-out-best alpha by 0.032 (e5) and 0.062 (MiniLM)
    top-1 among 1,000 held-out candidates, and its own Procrustes start by 0.020 and 0.038; a
    GeRA that keeps its start fails.
    """
    bench = load_benchmark("bench_crosslingual_baselines")
    src, tgt = bench.MAPS[name]
    arrays, _ = xling
    cell = bench.run_cell(arrays[src], arrays[tgt], 200, 0, 1000, same_model=False)
    best = max(cell[m]["top1"] for m in ("Procrustes", "ridge LOO", "ridge best (oracle)"))
    assert cell["GeRA defaults"]["top1"] > gera_min
    assert cell["GeRA defaults"]["top1"] >= max(best, cell["GeRA's start"]["top1"]) + 0.01
