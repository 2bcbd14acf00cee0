"""The foundation's benchmark script still runs (tiny sizes; no timing is asserted)."""


def test_bench_transform_runs(capsys, load_benchmark):
    rows = load_benchmark("bench_transform").main(["-n", "3000", "-d", "16"])
    assert len(rows) == 4 and all(r[2] > 0 for r in rows)
    assert "rows/s" in capsys.readouterr().out


def test_bench_bootstrap_runs(load_benchmark):
    """Quick mode: AnchorBootstrapper finds the pairs; the paper's loop runs in full."""
    rows = load_benchmark("bench_bootstrap").main(["--quick"])
    assert len(rows) == 4 and rows[0][4] > 0.9  # exact-pair rate of the default
    assert "paper loop" in rows[3][0] and rows[3][2] > 0
