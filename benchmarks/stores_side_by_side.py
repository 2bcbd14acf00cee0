"""Two versions of skalign through ``bench_stores.py``, whole runs alternated (issue 20).

``python benchmarks/stores_side_by_side.py --old-commit REV [--runs 3] [--backends npy]
[--repeats 5] [--rows N] [--csv OUT]``

On this machine the same translation's time drifts by more than a change is worth within
minutes, so one run of each version says little. This script extracts ``REV``'s whole tree
(``git archive``) into a temporary folder and runs ``bench_stores.py --kills 0`` of the old
tree and of this checkout in turn, ``--runs`` times each, the old one first: each run makes its
store, then times ``--repeats`` alternated pairs of the command and the engine's bulk load
(the run's ``ratio`` is their median, as in the guide's table). Written to ``--csv``: one row
per run and backend (``code`` old or new, the commit, the run's time, bulk load, ratio,
durable ratio, load and single pairs); beside it ``<stem>_summary.csv`` (``key,value``): per
backend and version the median over runs of the translation's time and of the ratio, and how
many runs reached a ratio of 0.8.
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import git_tree, write_figures, write_rows  # noqa: E402

KEEP = ["translate_s", "bulk_load_s", "ratio", "ratio_durable", "peak_rss_mib", "load_1min",
        "translate_runs_s", "bulk_runs_s", "ratio_runs"]


def commit(rev):
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                          capture_output=True, text=True).stdout.strip()


def bench_run(tree, args, out):
    """``tree``'s ``bench_stores.py``, with that tree first on ``PYTHONPATH`` (for the script's
    own process too: it makes the stores with that tree's helpers)."""
    cmd = [sys.executable, str(tree / "benchmarks" / "bench_stores.py"), "--kills", "0",
           "--repeats", str(args.repeats), "--backends", args.backends, "--csv", str(out)]
    if args.rows:
        cmd += ["--rows", str(args.rows)]
    if args.workdir:
        cmd += ["--workdir", args.workdir]
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run(cmd, check=True, cwd=tree, stdout=subprocess.DEVNULL, env=env)
    with open(out, newline="") as f:
        return list(csv.DictReader(f))


def summarize(rows):
    out = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        for code in ("old", "new"):
            mine = [r for r in rows if r["backend"] == backend and r["code"] == code]
            if not mine:
                continue
            key = f"{code}_{backend}".replace("-", "_")
            out[f"{key}_runs"] = len(mine)
            out[f"{key}_translate_s"] = round(
                statistics.median(float(r["translate_s"]) for r in mine), 2)
            ratios = [float(r["ratio"]) for r in mine]
            out[f"{key}_ratio"] = round(statistics.median(ratios), 2)
            out[f"{key}_ratio_min"] = min(ratios)
            out[f"{key}_ratio_max"] = max(ratios)
            out[f"{key}_runs_at_target"] = sum(x >= 0.8 for x in ratios)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-commit", required=True)
    ap.add_argument("--runs", type=int, default=3, help="runs of each version")
    ap.add_argument("--backends", default="npy")
    ap.add_argument("--repeats", type=int, default=5, help="pairs per run (bench_stores)")
    ap.add_argument("--rows", type=int, default=None, help="one size for every backend")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    old = git_tree(args.old_commit)  # its benchmarks run its own package
    trees = {"old": (old, commit(args.old_commit)), "new": (ROOT, commit("HEAD"))}
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(args.runs):
                for code in ("old", "new"):
                    tree, rev = trees[code]
                    got = bench_run(tree, args, Path(tmp) / f"{code}{run}.csv")
                    for r in got:
                        row = {"run": run, "code": code, "commit": rev, "backend": r["backend"],
                               "rows": r["rows"], **{k: r.get(k, "") for k in KEEP}}
                        rows.append(row)
                        print(f"run {run} {code:3s} {r['backend']:8s} translate {r['translate_s']} "
                              f"s, bulk load {r['bulk_load_s']} s, ratio {r['ratio']} "
                              f"(pairs {r.get('ratio_runs', '')})", flush=True)
    finally:
        shutil.rmtree(old, ignore_errors=True)
    summary = summarize(rows)
    for k, v in summary.items():
        print(f"{k},{v}")
    if args.csv:
        write_rows(args.csv, rows)
        stem = os.path.splitext(args.csv)[0]
        write_figures(f"{stem}_summary.csv", summary)
    return rows, summary


if __name__ == "__main__":
    main()
