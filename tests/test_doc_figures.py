"""The figures of the user guide agree with the result files the benchmark scripts write.

Prose figures are ``:fig:`value <file:key>``` roles checked by ``doc/figures.py`` (the same check
fails the ``-W`` docs build); tables are ``csv-table`` directives that include a results file
whole. The test ties the page to the file, not to a rerun: timings are whatever the recorded run
measured.
"""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "doc" / "user_guide"

#: Pages whose measured figures come from benchmarks/results/ and which must quote some.
TIED_PAGES = ["bootstrap.rst", "gera.rst", "irp.rst", "migrate.rst", "plan.rst", "scaling.rst"]


def _figures():
    spec = importlib.util.spec_from_file_location("figures", ROOT / "doc" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _figures()


@pytest.mark.parametrize("page", sorted(p.name for p in [*GUIDE.glob("*.rst"),
                                                          *GUIDE.glob("*.inc")]))
def test_figures_agree_with_their_results_files(page):
    """Every page's figures, and those of the files pages include (``*.inc``)."""
    problems = figures.check_page(GUIDE / page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", TIED_PAGES)
def test_tied_pages_quote_results_files(page):
    text = (GUIDE / page).read_text()
    assert figures.ROLE.search(text), f"{page} quotes no :fig: from benchmarks/results"


@pytest.mark.parametrize("page", sorted(p.name for p in GUIDE.glob("*.rst")))
def test_included_tables_exist(page):
    for target in re.findall(r":file:\s*(\S+)", (GUIDE / page).read_text()):
        assert (GUIDE / target).is_file(), f"{page}: csv-table file {target} is missing"


def test_agreement_is_to_the_figure_precision():
    assert figures.agrees("137", 137.42) and not figures.agrees("138", 137.42)
    assert figures.agrees("0.74", 0.7434) and not figures.agrees("0.75", 0.7434)
    assert figures.agrees("72,912", 72912.3) and not figures.agrees("72,900", 72912.3)
    assert figures.agrees("2.4e-6", 2.41e-6) and not figures.agrees("2.5e-6", 2.41e-6)
    assert figures.agrees("−0.005", -0.0049)
    with pytest.raises(ValueError):
        figures.agrees("about 3", 3.0)


def test_a_hand_edited_figure_is_caught(tmp_path):
    """Negative control: a page whose figure differs from the file, or names a missing key."""
    (tmp_path / "bench.csv").write_text("key,value\ncli_s,137.42\n")
    page = tmp_path / "page.rst"
    page.write_text("took :fig:`137 <bench:cli_s>` s\n")
    assert figures.check_page(page, results=tmp_path) == []
    page.write_text("intro\n\ntook :fig:`139 <bench:cli_s>` s and :fig:`2 <bench:nope>`\n")
    assert figures.check_page(page, results=tmp_path) == [
        "page.rst:3: 139 <bench:cli_s>: the file says 137.42",
        "page.rst:3: 2 <bench:nope>: bench.csv has no key 'nope'",
    ]


def test_gera_tables_are_the_tabulated_cells(load_benchmark, tmp_path):
    """The committed guide tables and figures are exactly what --table-from makes of the cells."""
    bench = load_benchmark("bench_gera_real")
    results = ROOT / "benchmarks" / "results"
    bench.main(["--table-from", str(results / "gera_real_cells.csv"),
                "--doc-csv", str(tmp_path / "gera_real")])
    for made in sorted(tmp_path.iterdir()):
        assert made.read_text() == (results / made.name).read_text(), made.name


def test_irp_script_writes_the_table_and_figures(load_benchmark, tmp_path):
    out = tmp_path / "irp.csv"
    load_benchmark("bench_irp_real").main([
        "--anchors", "40", "--splits", "1", "--heldout", "100", "--deltas", "0.3", "0.8",
        "--pairs", "minilm_l6:mpnet_base", "--csv", str(out)])
    header = out.read_text().splitlines()[0]
    assert header == "pair,anchors,Procrustes,defaults,δ=0.3,δ=0.8,\"α=0, δ=0.3\",\"α=0, δ=0.8\""
    values = figures.load("irp_figures", results=tmp_path)
    assert values["rows"] == 1 and 0 <= values["MiniLM_MPNet_40_gcv_d03"] <= 1
