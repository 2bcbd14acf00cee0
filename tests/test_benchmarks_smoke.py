"""The foundation's benchmark script still runs (tiny sizes; no timing is asserted)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_transform_runs(capsys):
    rows = _load("bench_transform").main(["-n", "3000", "-d", "16"])
    assert len(rows) == 4 and all(r[2] > 0 for r in rows)
    assert "rows/s" in capsys.readouterr().out
