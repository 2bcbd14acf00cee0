"""The foundation's transform benchmark runs at tiny sizes and its translations are right.

No timing is asserted (the machine may be busy); what is asserted would catch a wrong result:
each estimator × batch size row is present, the memory-mapped, batched translation of sampled
rows equals the known rotation the anchors were generated with, and the reported sizes match.
"""

import pytest


def test_bench_transform_translations_are_correct(capsys, load_benchmark):
    n, d = 3000, 16
    rows = load_benchmark("bench_transform").main(["-n", str(n), "-d", str(d)])
    assert [(r[0], r[1]) for r in rows] == [
        ("ProcrustesAligner", "auto (256 MiB)"), ("ProcrustesAligner", 4096),
        ("LinearAligner", "auto (256 MiB)"), ("LinearAligner", 4096),
    ]
    for name, _, secs, rate, _, out_mb, err in rows:
        assert err < 1e-4, (name, err)  # x Q recovered from 2000 exact pairs, float32
        assert rate == pytest.approx(n / secs)
        assert out_mb == pytest.approx(n * d * 4 / 2**20)
    out = capsys.readouterr().out
    assert "max |err|" in out and f"{n:,} x {d}" in out


def test_write_figures_takes_a_mapping_or_pairs(load_benchmark, tmp_path):
    import csv

    common = load_benchmark("_common")
    for figures in ({"rows": 3, "ratio": 0.5}, [("rows", 3), ("ratio", 0.5)],
                    ((k, v) for k, v in [("rows", 3), ("ratio", 0.5)])):
        path = tmp_path / "figures.csv"
        common.write_figures(path, figures)
        with open(path, newline="") as f:
            assert list(csv.reader(f)) == [["key", "value"], ["rows", "3"], ["ratio", "0.5"]]


def test_bench_bootstrap_runs(load_benchmark):
    """Quick mode: AnchorBootstrapper finds the pairs; the paper's loop runs in full."""
    rows = load_benchmark("bench_bootstrap").main(["--quick"])
    assert len(rows) == 4 and rows[0][4] > 0.9  # exact-pair rate of the default
    assert "paper loop" in rows[3][0] and rows[3][2] > 0


def test_bench_startup_runs(load_benchmark):
    """One run per command: the table has every command and none of them loads torch (no
    timing is asserted)."""
    rows = load_benchmark("bench_startup").main(["--runs", "1", "--no-translate", "--no-torch"])
    torch_loaded = {r["command"]: r["torch"] for r in rows}
    assert torch_loaded == {"python -c pass": False, 'python -c "import numpy"': False,
                            "skalign --help": False, "import skalign": False}
    assert all(r["median"] > 0 for r in rows)


def test_scale_mismatch_benchmark_runs(load_benchmark):
    """Vendored subset, small: auto normalises raw MiniLM against unit MPNet and reproduces the
    fit on L2-normalised sources; both raw: unchanged."""
    rows = load_benchmark("scale_mismatch").main(["--n-pairs", "200", "--n-test", "150",
                                                  "--seeds", "1"])
    by = {(r["pair"], r["estimator"], r["setting"]): r for r in rows}
    for est in ("Procrustes", "Linear"):
        auto = by[("minilm_l6->mpnet_base_unit", est, "defaults (auto)")]
        ref = by[("minilm_l6->mpnet_base_unit", est, "L2-normalised source")]
        assert auto["normalize_"] == "source"
        assert auto["top1"] >= 0.95 * ref["top1"] and auto["r10_l2"] >= 0.95 * ref["r10_l2"]
        raw = by[("minilm_l6->mpnet_base", est, "defaults (auto)")]
        old = by[("minilm_l6->mpnet_base", est, "normalize=False")]
        assert raw["normalize_"] == "none" and raw["top1"] == old["top1"]


def test_plan_pseudo_pairs_runs_on_the_vendored_subset(load_benchmark):
    """``plan_pseudo_pairs.py`` imports plan's private helpers (a change of their signatures
    broke it once unnoticed). On the vendored subset, both directions with 25 known pairs: most
    free rows are paired and almost every pair is the true one (random pairs: 0.1 %)."""
    from importlib import resources

    data = resources.files("skalign.datasets") / "data" / "docstrings_en_subset.npz"
    with resources.as_file(data) as npz:
        rows = load_benchmark("plan_pseudo_pairs").main(
            [str(npz), "--encoders", "minilm_l6", "mpnet_base", "--half", "1000",
             "--pairs", "25"])
    assert len(rows) == 2
    for found, right, certificate in rows:
        assert found >= 800 and right >= 0.98 and certificate >= 0.9


def test_bench_small_lapack_runs(load_benchmark):
    """One repeat, no busy process: every case has a row, and the cases below the size limit
    (the soft loop's 128 × 128 polar map) ran on one thread, the larger ones on the default."""
    rows = load_benchmark("bench_small_lapack").main(["--busy", "0", "--repeats", "1",
                                                      "--threads", "2"])
    one = {r["case"].split(" (")[0]: r["small_lapack_threads"] for r in rows}
    assert one == {"svd 128 x 128": 1, "svd 384 x 768": 2, "eigh 384 x 384": 2,
                   "eigh 768 x 768": 2, "svd 2000 x 384": 2}
    assert all(r["threads_ms"] > 0 and r["small_lapack_ms"] > 0 for r in rows)


def test_qdrant_local_memory_runs(load_benchmark, tmp_path):
    """``qdrant_local_memory.py`` reads what qdrant-client's local mode holds and patches
    skalign's Qdrant connector: a change of either shows up here, on a tiny folder."""
    pytest.importorskip("qdrant_client")
    import csv

    module = load_benchmark("qdrant_local_memory")
    rows = module.main(["100", "--steps", "open,translate", "--csv", str(tmp_path / "q.csv")])
    by = {r["step"]: r for r in rows}
    assert by["open"]["source_dtype"] in ("float32", "float64")
    assert by["open"]["open_hwm"] >= by["open"]["import_hwm"] > 0
    assert by["translate"]["status"] == 0 and by["translate"]["peak_hwm"] > 0
    assert "open" in by["translate"]["rss_hwm_mib_at"]
    with open(tmp_path / "q_figures.csv", newline="") as f:
        keys = {r["key"] for r in csv.DictReader(f)}
    assert {"open_open_hwm", "open_source_mib", "translate_peak_hwm", "translate_cpu_s"} <= keys
    assert by["open"]["compacted_rss"] > 0 and by["open"]["compact_s"] >= 0


def test_chroma_memory_runs(load_benchmark, tmp_path):
    """``chroma_memory.py`` switches skalign's Chroma trim and phases off by their module flags
    and reads its children's high-water marks: a change of either shows up here, on a tiny
    folder."""
    pytest.importorskip("chromadb")
    import csv

    module = load_benchmark("chroma_memory")
    rows = module.main(["300", "--repeats", "1", "--add-records", "8192",
                        "--csv", str(tmp_path / "c.csv")])
    runs = {r["variant"]: r for r in rows if r["kind"] == "translate"}
    assert set(runs) == {"trim", "no_trim", "arena1", "stream", "phases_100k", "add_2048",
                         "add_4096", "add_8192"}
    assert all(r["status"] == 0 and r["peak_rss_mib"] > 0 for r in runs.values())
    rises = [r for r in rows if r["kind"] == "add"]
    assert len(rises) == 4 and all(r["add_rise_mib"] > 0 for r in rises)
    with open(tmp_path / "c_figures.csv", newline="") as f:
        keys = {r["key"] for r in csv.DictReader(f)}
    assert {"trim_peak_rss_mib", "no_trim_peak_rss_mib", "add_2048_default_rise_mib",
            "add_4096_wall_s", "add_4096_peak_rss_mib"} <= keys


def test_bench_cuda_runs_its_transform_part(load_benchmark, tmp_path):
    """``--gpu cpu`` (only to try the script out where there is no GPU): one fitted map applied
    by both paths gives the same rows, and the figures file names what the guide quotes."""
    import csv

    import numpy as np

    from skalign.datasets import load_docstring_embeddings

    data = tmp_path / "pair.npz"
    np.savez(data, **load_docstring_embeddings().embeddings)
    bench = load_benchmark("bench_cuda")
    bench.main([str(data), "--out", str(tmp_path), "--parts", "transform", "--gpu", "cpu",
                "--repeats", "1", "--rows", "5000"])
    with open(tmp_path / "bench_cuda_transform.csv", newline="") as f:
        rows = {r["what"]: r for r in csv.DictReader(f)}
    assert float(rows["transform, numpy in/out (gpu)"]["max_abs_diff"]) == 0.0
    assert int(rows["transform, numpy in/out (cpu)"]["rows"]) == 5000
    assert float(rows["CPU fit vs GPU fit, real rows"]["max_abs_diff"]) < 1e-5
    with open(tmp_path / "bench_cuda_figures.csv", newline="") as f:
        keys = {r["key"] for r in csv.DictReader(f)}
    assert {"transform_cpu__rows_per_s", "transform_gpu__seconds"} <= keys


def test_bench_seedless_crosslingual_runs(load_benchmark, tmp_path):
    """The cross-lingual pairs at a small pool: the ceiling, the no-map reference for the
    one-model pair, a five-seed fit, each row with its figures."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "crosslingual_de.npz"
    bench = load_benchmark("bench_seedless")
    out = tmp_path / "cl.csv"
    table = bench.main([str(data), "--crosslingual", "--pool", "400", "--states", "0",
                        "--seeds", "5", "--no-mv2v", "--pairs", "1", "--out", str(out)])
    methods = [r["method"] for r in table]
    assert methods == ["Procrustes 1,000 pairs", "no map", "skalign 5 pairs"]
    no_map = table[1]
    assert no_map["pair"] == "en_me5_small_q4 → de_me5_small_q4" and no_map["seconds"] == ""
    assert 0.5 < no_map["top1"] <= 1  # one model: the raw embeddings already translate
    assert (tmp_path / "cl_runs.csv").exists() and (tmp_path / "cl_figures.csv").exists()


def test_bench_stores_kill_study_runs(load_benchmark, tmp_path):
    """``bench_stores.py`` end to end on a small ``.npy`` store with one kill: the row and the
    trial say the rerun finished identical with nothing left, and the trial carries both
    in-time rules, the rerun's status and its last line."""
    import csv

    bench = load_benchmark("bench_stores")
    out = tmp_path / "stores.csv"
    bench.TRIALS.clear()
    bench.main(["--backends", "npy", "--rows", "3000", "--kills", "1", "--csv", str(out),
                "--workdir", str(tmp_path / "work"), "--adjacent"])
    (row,) = list(csv.DictReader(open(out)))
    assert row["backend"] == "npy" and row["max_abs_diff"] == "0.0"
    assert (row["resumed"], row["identical"], row["no_leftovers"]) == ("1", "1", "1")
    assert row["resumed_in_measured_time"] in ("0", "1")
    (trial,) = list(csv.DictReader(open(tmp_path / "stores_trials.csv")))
    assert trial["rerun_status"] in ("0", "2") and trial["output_error"] == ""
    assert trial["rerun_said"].startswith(("translated 3000 rows", "skalign translate: error"))
    assert trial["in_measured_time"] in ("True", "False")
    assert trial["in_started_time"] in ("True", "False")
    assert float(trial["full_began_s"]) > 0
    if trial["rerun_status"] == "0":  # else the kill came after the publish: nothing to open
        assert float(trial["rerun_began_s"]) > 0
    assert row["resumed_in_started_time"] in ("0", "1")
    # --adjacent: an uninterrupted run timed beside the trial, and the rules against it
    assert row["resumed_in_adjacent_time"] in ("0", "1")
    assert row["resumed_in_adjacent_started_time"] in ("0", "1")
    assert float(trial["adjacent_full_s"]) > 0
    assert trial["in_adjacent_time"] in ("True", "False")
    if trial["rerun_status"] == "0":
        rows_left = 3000 - int(trial["resumed_at"])
        assert float(trial["adjacent_allowed_s"]) == pytest.approx(
            float(trial["adjacent_full_s"]) * (rows_left / 3000 + 0.1), abs=0.01)


def test_bench_stores_measured_allowance():
    """The work left measured on the uninterrupted run: its time from the end of the last write
    before the resume row to its end, + 10 % of its whole time."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stores.py"
    spec = importlib.util.spec_from_file_location("bench_stores_rules", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = ("wrote_from=0 t=1.000\nwrote_from=100 t=3.000\nwrote_from=200 t=6.000\n"
            "translate_cpu_s=5.0\ntranslate_wall_s=10.000\ntranslated 300 rows\n")
    assert bench.write_times(text) == [(0, 1.0), (100, 3.0), (200, 6.0)]
    assert bench.translate_wall(text) == 10.0
    assert bench.measured_allowance(text, 0) == 10.0 + 1.0  # from the start: all of it
    assert bench.measured_allowance(text, 200) == 10.0 - 3.0 + 1.0
    assert bench.measured_allowance(text, 300) == 10.0 - 6.0 + 1.0
    assert bench.measured_allowance("translated 300 rows\n", 200) is None
    # with the start-up (stores open at 0.5 s) counted as work left too
    assert bench.started_allowance(text, 200) is None  # no start-up printed
    text = "began t=0.500\n" + text
    assert bench.began_at(text) == 0.5
    assert bench.started_allowance(text, 0) == 0.5 + 10.0 - 0.5 + 1.0  # no more than all of it
    assert bench.started_allowance(text, 200) == 0.5 + 10.0 - 3.0 + 1.0
    # the command's own summary: its seconds and the row it resumed at
    rerun = "resumed at row 100 (of 300)\ntranslated 300 rows in 5.0 s (60 rows/s)\n"
    assert bench.command_seconds(rerun) == 5.0 and bench.command_seconds("none") is None
    assert bench.resumed_row(rerun) == 100 and bench.resumed_row(text) == 0
    took, at, allowed = bench.rerun_times(rerun, 300, 9.0)
    assert (took, at) == (5.0, 100) and allowed == pytest.approx(9.0 * 200 / 300 + 0.9)


def test_affine_side_by_side_runs(load_benchmark, tmp_path):
    """Two versions of the affine map side by side (here the committed one against the working
    tree's): every repeat times both, alternating which goes first, and their outputs agree."""
    out = tmp_path / "side.csv"
    rows = load_benchmark("affine_side_by_side").main(
        ["--old-commit", "HEAD", "--rows", "70000", "--repeats", "2", "--csv", str(out)])
    assert [r["first"] for r in rows] == ["old", "new"]
    assert all(r["rows"] == 70000 and r["old_s"] > 0 and r["new_s"] > 0 for r in rows)
    assert all(r["max_abs_diff"] <= 1e-6 for r in rows)
    assert out.read_text().splitlines()[0].startswith("repeat,first,rows,batch,old_s")
    summary = (tmp_path / "side_summary.csv").read_text().splitlines()
    assert summary[0] == "key,value" and "rows,70000" in summary
    assert {line.split(",")[0] for line in summary[1:]} == {
        "rows", "old_s", "new_s", "new_over_old", "max_abs_diff"}


def test_stores_side_by_side_runs(load_benchmark, tmp_path):
    """Two versions' ``bench_stores.py`` alternated on a small ``.npy`` store (here the same
    commit twice): a row per run and version, both translations exact, and the summary's
    medians and counts from those rows."""
    import csv

    bench = load_benchmark("stores_side_by_side")
    out = tmp_path / "side.csv"
    rows, summary = bench.main(["--old-commit", "HEAD", "--runs", "1", "--repeats", "1",
                                "--rows", "3000", "--workdir", str(tmp_path), "--csv",
                                str(out)])
    assert [(r["code"], r["backend"]) for r in rows] == [("old", "npy"), ("new", "npy")]
    assert rows[0]["commit"] == rows[1]["commit"]
    assert summary["old_npy_runs"] == summary["new_npy_runs"] == 1
    assert summary["new_npy_ratio"] == float(rows[1]["ratio"])
    assert summary["new_npy_runs_at_target"] == int(float(rows[1]["ratio"]) >= 0.8)
    got = {r["key"]: r["value"] for r in csv.DictReader(open(tmp_path / "side_summary.csv"))}
    assert float(got["old_npy_translate_s"]) == float(rows[0]["translate_s"])


def test_chroma_resumed_search_runs(load_benchmark, tmp_path):
    """``chroma_resumed_search.py`` on a tiny collection: an uninterrupted run, a killed run
    and its rerun, another uninterrupted run; every output holds the same records, each is
    searched, and the summary counts and medians come from the rows."""
    pytest.importorskip("chromadb")
    import csv

    bench = load_benchmark("chroma_resumed_search")
    out = tmp_path / "crs.csv"
    rows, summary = bench.main(["--rows", "1500", "--pairs", "1", "--queries", "40",
                                "--workdir", str(tmp_path), "--csv", str(out)])
    assert [r["kind"] for r in rows] == ["uninterrupted", "resumed", "uninterrupted"]
    assert all(r["records"] == 1500 for r in rows) and rows[1]["kill_after_s"] > 0
    assert len({r["digest"] for r in rows}) == 1 and summary["check_errors"] == 0
    assert rows[0]["status"] == rows[2]["status"] == 0
    killed = rows[1]
    # each run's summary line (or error), its folder's path shortened
    assert all(str(tmp_path) not in r["said"] for r in rows)
    # a search of 1,500 records finds every query's own record: a broken check would not
    assert all(r["self_top1"] >= 0.95 and r["recall10"] >= 0.9 for r in rows)
    assert summary["uninterrupted_runs"] == 2
    if killed["after_publish"]:  # at this size the kill may come after the publish
        assert killed["status"] == 2 and "already exists" in killed["said"]
        assert summary["resumed_runs"] == 0
    else:
        assert killed["status"] == 0 and killed["said"].startswith("translated 1500 rows")
        assert summary["resumed_runs"] == 1 and summary["resumed_same_records"] == 1
        assert summary["resumed_recall10_median"] == round(killed["recall10"], 4)
    got = {r["key"]: r["value"] for r in csv.DictReader(open(tmp_path / "crs_summary.csv"))}
    assert float(got["uninterrupted_self_top1_min"]) == summary["uninterrupted_self_top1_min"]
    assert not list(tmp_path.glob("chroma-resumed-search-*"))  # its folder removed


@pytest.mark.parametrize("backend", ["npy", "chroma"])
def test_stores_resume_repeats_runs(load_benchmark, tmp_path, backend):
    """``stores_resume_repeats.py`` at a tiny size: every kill's crashed state resumed twice
    beside two uninterrupted runs, each rerun identical to the reference and clean, and the
    figures of each kill and of the summary computed from the runs' own times."""
    if backend == "chroma":
        pytest.importorskip("chromadb")
    import csv

    bench = load_benchmark("stores_resume_repeats")
    out = tmp_path / "rr.csv"
    logs = tmp_path / "logs"
    rows, summary = bench.main([backend, "--rows", "3000", "--kills", "2", "--reruns", "2",
                                "--workdir", str(tmp_path), "--csv", str(out),
                                "--keep-logs", str(logs)])
    assert len(rows) == 2 and summary["kills"] == 2
    for r in rows:
        if r["published"]:  # at this size a kill may come after the publish
            assert "reruns" not in r
            continue
        kept = sorted(p.name for p in logs.glob(f"kill{r['kill']}_*.txt"))
        assert kept == [f"kill{r['kill']}_{w}{k}.txt" for w in ("full", "rerun") for k in (0, 1)]
        assert all("wrote_from=" in (logs / name).read_text() for name in kept)
        # the same rows after each run's write of the resume row's batch (none where every
        # row was committed before the kill)
        assert ("paced_excess" in r) == (r["resumed_at"] < 3000)
        assert r["reruns"] == 2 and r["identical"] == 2 and r["no_leftovers"] == 2
        assert r["rerun_said"].startswith("translated 3000 rows") and "WORK" in r["rerun_said"]
        reruns = [float(x) for x in r["rerun_s"].split(";")]
        fulls = [float(x) for x in r["full_s"].split(";")]
        full = sum(fulls) / 2  # the median of two
        left = full * (3000 - r["resumed_at"]) / 3000
        assert r["allowed_s"] == pytest.approx(left + 0.1 * full, abs=2e-3)
        assert r["excess"] == pytest.approx((sum(reruns) / 2 - left) / full, abs=2e-3)
        assert r["in_time"] == int(sum(reruns) / 2 <= left + 0.1 * full)
        assert r["restarted"] == int(r["resumed_at"] == 0)
        assert r["in_filled_time"] == int(r["rerun_span_median_s"] <= r["filled_allowed_s"])
        assert 0 < r["full_first_write_s"] < r["filled_allowed_s"]
    done = [r for r in rows if not r["published"]]
    assert summary["rerun_kills"] == len(done) and summary["identical"] == 1
    assert summary["pairs"] == 2 * len(done)
    got = {r["key"]: r["value"] for r in csv.DictReader(open(tmp_path / "rr_summary.csv"))}
    assert int(got["in_time"]) == summary["in_time"]
    assert not list(tmp_path.glob("resume-repeats-*"))  # its folder removed


def test_stores_resume_repeats_judges_a_rerun_that_wrote_nothing(load_benchmark):
    """A kill after the last batch was committed and before the publish: the reruns resume at
    the last row and write no batch. ``judge`` still gives every figure, with no first write
    of the reruns (a study stopped on such a kill once: ``median`` of ``None``s)."""
    bench = load_benchmark("stores_resume_repeats")

    def full(total):  # an uninterrupted run of 4 batches of 100 rows, the last done at 0.8 total
        writes = " ".join(f"wrote_from={k * 100} t={total * (0.2 + 0.2 * k):.3f}"
                          for k in range(4))
        return (f"began t={0.1 * total:.3f} {writes} translate_wall_s={total:.3f}\n"
                f"translated 400 rows in {total + 0.5:.2f} s")

    rerun = ("began t=0.100 translate_wall_s=0.300\n"
             "translated 400 rows in 0.80 s, resumed at row 400")
    row = bench.judge(400, 400, [rerun] * 3, [full(4.0), full(5.0), full(6.0)])
    assert row["rerun_median_s"] == 0.8 and row["full_median_s"] == 5.5
    assert row["allowed_s"] == pytest.approx(0.55) and row["in_time"] == 0
    assert row["rerun_first_write_s"] is None and row["full_first_write_s"] == 1.0
    # every row committed: the start-up and the time after the last write are left
    assert row["filled_allowed_s"] == pytest.approx(0.5 + 1.0 + 0.5)
    assert row["in_filled_time"] == 1


def test_stores_resume_repeats_paced_excess(load_benchmark):
    """``paced_excess`` compares the same rows after each run's write of the resume row's
    batch: a rerun that starts later but then works at the uninterrupted runs' pace has none,
    one whose rows after its first write take longer has that much."""
    bench = load_benchmark("stores_resume_repeats")

    def full(total):  # 4 batches of 100 rows; the write of row 200's batch at 0.6 total
        writes = " ".join(f"wrote_from={k * 100} t={total * (0.2 + 0.2 * k):.3f}"
                          for k in range(4))
        return (f"began t={0.1 * total:.3f} {writes} translate_wall_s={total:.3f}\n"
                f"translated 400 rows in {total + 0.5:.2f} s")

    def rerun(first, after):  # resumed at row 200: its first write at ``first``
        return (f"began t=0.200 wrote_from=200 t={first:.3f} wrote_from=300 "
                f"t={first + after / 2:.3f} translate_wall_s={first + after:.3f}\n"
                f"translated 400 rows in {first + after + 0.5:.2f} s, resumed at row 200")

    fulls = [full(4.0), full(5.0), full(6.0)]  # from row 200's write: 1.6, 2.0, 2.4 s
    assert bench.bs.paced_s(fulls[1], 200) == pytest.approx(2.0)
    assert bench.bs.paced_s(fulls[1], 250) is None
    slow_start = bench.judge(400, 200, [rerun(1.5, 2.0)] * 2, fulls)
    assert slow_start["paced_excess"] == pytest.approx(0.0)
    slow_pace = bench.judge(400, 200, [rerun(1.0, 2.5)] * 2, fulls)
    assert slow_pace["paced_excess"] == pytest.approx(0.1)
    s = bench.summarize([dict(r, published=0, restarted=0, refused=0, reruns=2, identical=2,
                              no_leftovers=2) for r in (slow_start, slow_pace)])
    assert s["paced_kills"] == 2 and s["paced_excess_max"] == pytest.approx(0.1)


def test_stores_resume_repeats_counts_failed_reruns(load_benchmark):
    """A rerun that fails (a Chroma rerun once died of SIGSEGV, and the study stopped on it) is
    counted, not timed: a kill whose reruns all failed is neither in time nor identical, and the
    figures of the others stand."""
    bench = load_benchmark("stores_resume_repeats")
    ok = {"published": 0, "restarted": 0, "refused": 0, "failed": 0, "reruns": 2,
          "identical": 2, "no_leftovers": 2, "in_time": 1, "pairs_in_time": 2, "excess": 0.04}
    half = dict(ok, failed=1, reruns=1, identical=1, no_leftovers=2, pairs_in_time=1,
                excess=0.08)
    lost = {"published": 0, "restarted": 0, "refused": 0, "failed": 2, "reruns": 0,
            "identical": 0, "no_leftovers": 2, "in_time": 0, "pairs_in_time": 0,
            "failed_said": "status -11: began t=3.936"}
    s = bench.summarize([ok, half, lost])
    assert s["failed"] == 3 and s["rerun_kills"] == 3 and s["in_time"] == 2
    assert s["identical"] == 0 and s["no_leftovers"] == 1 and s["pairs"] == 3
    assert s["excess_max"] == 0.08 and s["excess_median"] == pytest.approx(0.06)
    assert bench.summarize([ok])["identical"] == 1


def test_chroma_torn_index_runs(load_benchmark, tmp_path):
    """``chroma_torn_index.py`` at a tiny size: two kills of a process adding to a collection,
    the check and Chroma's verdict on each, and the four combinations adding up."""
    pytest.importorskip("chromadb")
    import csv

    bench = load_benchmark("chroma_torn_index")
    rows, summary = bench.main(["--trials", "2", "--dim", "16", "--workdir", str(tmp_path),
                                "--csv", str(tmp_path / "torn.csv")])
    assert [r["trial"] for r in rows] == [0, 1]
    for r in rows:
        assert r["flagged"] == int(bool(r["fault"])) and 2.5 <= r["kill_after_s"] <= 9
        assert r["chroma_failed"] == int(r["probe_status"] != 0) and r["check_s"] >= 0
        assert r["chroma_said"].startswith("opened ") != bool(r["chroma_failed"])
    opened = [r["records"] for r in rows if not r["chroma_failed"]]
    assert all(n % 2048 == 0 for n in opened)  # whole adds: Chroma's add is atomic
    assert summary["trials"] == 2 and sum(summary[k] for k in (
        "flagged_failed", "flagged_opened", "missed", "agreed_opened")) == 2
    got = {r["key"]: r["value"] for r in csv.DictReader(open(tmp_path / "torn_summary.csv"))}
    assert int(got["flagged"]) == summary["flagged"]
    assert not list(tmp_path.glob("chroma-torn-*"))  # its folder removed


def test_pg_batch_rows_runs(load_benchmark, tmp_path):
    """``pg_batch_rows.py`` at a tiny size: one run per batch size and a bulk load per round,
    and the per-size figures computed from those runs."""
    pytest.importorskip("pgserver")
    import csv

    bench = load_benchmark("pg_batch_rows")
    out = tmp_path / "pb.csv"
    rows, runs = bench.main(["--rows", "3000", "--sizes", "500,1000", "--repeats", "2",
                             "--csv", str(out)])
    assert [r["batch_rows"] for r in rows] == [500, 1000]
    assert [x["batch_rows"] for x in runs] == [500, 1000, "bulk", 1000, 500, "bulk"]
    for r in rows:
        mine = [x for x in runs if x["batch_rows"] == r["batch_rows"]]
        assert r["seconds_median"] == pytest.approx(sum(x["seconds"] for x in mine) / 2,
                                                    abs=2e-3)
        assert all(0 < x["began_s"] < x["first_write_s"] < x["seconds"] for x in mine)
    assert out.exists() and (tmp_path / "pb_runs.csv").exists()
    got = {r["key"]: float(r["value"]) for r in csv.DictReader(open(tmp_path / "pb_figures.csv"))}
    assert got["seconds_median_500"] == rows[0]["seconds_median"]
    assert got["first_write_median_s_1000"] == rows[1]["first_write_median_s"]


def test_npy_product_bound_runs(load_benchmark, tmp_path):
    """A tiny size: the five steps timed once per repeat, the bounds from their times, the
    figures and the runs written, and the write's file removed."""
    import csv
    import statistics

    bench = load_benchmark("npy_product_bound")
    figures, times = bench.main(["--rows", "3000", "--repeats", "2", "--peak-n", "256",
                                 "--pause", "0", "--workdir", str(tmp_path),
                                 "--csv", str(tmp_path / "b.csv")])
    assert sorted(times) == ["matmul", "torch_matmul", "translate", "translate_fn", "write",
                             "write_durable"]
    assert 0 < figures["translate_first_write_s"] <= figures["translate_s"]
    assert figures["translate_tail_s"] >= 0
    assert figures["ratio"] == round(statistics.median(times["write"])
                                     / statistics.median(times["translate"]), 2)
    assert all(len(v) == 2 and min(v) > 0 for v in times.values())
    fn = statistics.median(times["translate_fn"])
    assert figures["bound"] == round(statistics.median(times["write"]) / fn, 2)
    assert figures["bound_fastest_write"] == round(min(times["write"]) / fn, 2)
    assert figures["matmul_gflops"] > 0 and figures["peak_gflops"] > 0
    assert figures["touch_after_free_s"] >= 0 and figures["touch_after_pause_s"] >= 0
    with open(tmp_path / "b.csv", newline="") as f:
        written = dict(csv.reader(f))
    assert all(float(v) == figures[k] for k, v in written.items() if k != "key")
    with open(tmp_path / "b_runs.csv", newline="") as f:
        runs = list(csv.DictReader(f))
    assert [float(r["write"]) for r in runs] == [round(v, 3) for v in times["write"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv", "b_runs.csv"]
