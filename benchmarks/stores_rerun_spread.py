"""How much two runs of the same ``skalign translate`` differ on this machine, against reruns
after a kill (issue 20's ``resumed_in_time`` allows a rerun 10 % of the uninterrupted time).

``python benchmarks/stores_rerun_spread.py KIND ROWS KILL_AFTER [--repeats 3] [--csv PATH]``
(KIND: npy, parquet, parquet-dir): makes a store of ROWS rows as ``bench_stores.py`` does, then
``--repeats`` times: one uninterrupted ``python -m skalign translate`` into a new output, and one
SIGKILLed KILL_AFTER seconds after its start (wall clock, start-up included) and run again. Each
row: the command's own seconds, the CPU seconds of that span (``translate_cpu_s``), the row the
rerun resumed at and the 1-minute load average. Every output is removed after its run.
"""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import store_backends as sb  # noqa: E402
from _common import write_rows  # noqa: E402
from bench_stores import (  # noqa: E402
    command_seconds,
    make_model_and_rows,
    resumed_row,
    run_cli,
    translate_cpu,
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["npy", "parquet", "parquet-dir"])
    ap.add_argument("rows", type=float)
    ap.add_argument("kill_after", type=float)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    from skalign.io import save

    n = int(args.rows)
    model, X = make_model_and_rows(n)
    work = Path(tempfile.mkdtemp(prefix="rerun-spread-"))
    backend = {"npy": sb.Npy(), "parquet": sb.Parquet(), "parquet-dir": sb.ParquetDir()}[args.kind]
    rows = []
    try:
        model_path = str(save(model, work / "m.skops"))
        src = backend.make(work, X)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        for rep in range(args.repeats):
            for what in ("uninterrupted", "rerun after a kill"):
                out = backend.output(work, f"out{rep}{what[0]}")
                if what != "uninterrupted":
                    run_cli(["translate", model_path, src, out], env, kill_after=args.kill_after)
                load = os.getloadavg()[0]
                status, _, _, text, _ = run_cli(["translate", model_path, src, out], env)
                assert status == 0, text
                rows.append({"kind": args.kind, "rows": n, "repeat": rep, "run": what,
                             "translate_s": command_seconds(text),
                             "translate_cpu_s": translate_cpu(text),
                             "resumed_at": resumed_row(text),
                             "load_1min": round(load, 2)})
                print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
                p = Path(out)
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.csv:
        write_rows(args.csv, rows)
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
