"""The foundation's benchmark script still runs (tiny sizes; no timing is asserted)."""


def test_bench_transform_runs(capsys, load_benchmark):
    rows = load_benchmark("bench_transform").main(["-n", "3000", "-d", "16"])
    assert len(rows) == 4 and all(r[2] > 0 for r in rows)
    assert "rows/s" in capsys.readouterr().out
