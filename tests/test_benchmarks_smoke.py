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


def test_bench_small_lapack_runs(load_benchmark):
    """One repeat, no busy process: every case has a row, and the cases below the size limit
    (the soft loop's 128 × 128 polar map) ran on one thread, the larger ones on the default."""
    from skalign.utils._backend import SMALL_LAPACK

    bench = load_benchmark("bench_small_lapack")
    assert bench.SMALL_LAPACK == SMALL_LAPACK
    rows = bench.main(["--busy", "0", "--repeats", "1", "--threads", "2"])
    one = {r["case"].split(" (")[0]: r["small_lapack_threads"] for r in rows}
    assert one == {"svd 128 x 128": 1, "svd 384 x 768": 2, "eigh 384 x 384": 2,
                   "eigh 768 x 768": 2, "svd 2000 x 384": 2}
    assert all(r["threads_ms"] > 0 and r["small_lapack_ms"] > 0 for r in rows)


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
    trial say the rerun finished identical with nothing left, and the trial carries the in-time
    rule, the rerun's status and its last line."""
    import csv

    bench = load_benchmark("bench_stores")
    out = tmp_path / "stores.csv"
    bench.TRIALS.clear()
    bench.main(["--backends", "npy", "--rows", "3000", "--kills", "1", "--csv", str(out),
                "--workdir", str(tmp_path / "work")])
    (row,) = list(csv.DictReader(open(out)))
    assert row["backend"] == "npy" and row["max_abs_diff"] == "0.0"
    assert (row["resumed"], row["identical"], row["no_leftovers"]) == ("1", "1", "1")
    assert row["source_unchanged"] == "True" and row["resumed_in_time"] in ("0", "1")
    (trial,) = list(csv.DictReader(open(tmp_path / "stores_trials.csv")))
    assert trial["rerun_status"] in ("0", "2") and trial["output_error"] == ""
    assert trial["rerun_said"].startswith(("translated 3000 rows", "skalign translate: error"))
    assert trial["in_time"] in ("True", "False")
    if trial["rerun_status"] == "0":  # else the kill came after the publish: nothing to open
        assert 0 <= int(trial["resumed_at"]) <= 3000


def test_bench_stores_allowance(load_benchmark):
    """The rerun's allowance: the uninterrupted time × the share of rows left after the row it
    resumed at, + 10 % of the uninterrupted time, from the command's own summary lines."""
    bench = load_benchmark("bench_stores")
    rerun = "resumed at row 100 (of 300)\ntranslated 300 rows in 5.0 s (60 rows/s)\n"
    assert bench.command_seconds(rerun) == 5.0 and bench.command_seconds("none") is None
    assert bench.resumed_row(rerun) == 100 and bench.resumed_row("translated 3 rows") == 0
    took, at, allowed = bench.rerun_times(rerun, 300, 9.0)
    assert (took, at) == (5.0, 100) and allowed == pytest.approx(9.0 * 200 / 300 + 0.9)
    assert bench.resumed_in_time(rerun, 300, 9.0) and not bench.resumed_in_time(rerun, 300, 3.0)
    published = "skalign translate: error: the output already exists"
    assert bench.rerun_times(published, 300, 9.0) == (None, 300, pytest.approx(0.9))
