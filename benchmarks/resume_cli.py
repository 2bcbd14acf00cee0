"""A resumed ``skalign translate`` of a Parquet file against the uninterrupted one, both through
the command, as the kill study runs them (issue 20).

``python benchmarks/resume_cli.py [ROWS] [--shares 0.2,0.2,0.2]`` makes the Parquet source of
``bench_stores.py`` (default 10^6 384-d rows) and, for each share F: runs the command
uninterrupted, runs it again into another output and SIGKILLs it as soon as its shadow holds the
share F of the output's vector bytes, then runs that command again (the rerun, which resumes).
Printed per share: the command's own "in X s" and the CPU seconds of the same span (all threads,
``bench_stores``'s ``translate_cpu_s``) of the uninterrupted run and of the rerun, the row the
rerun resumed at, and each rerun figure ÷ the uninterrupted one × the share of rows left (1.00:
exactly its share; the issue allows up to 1 + 0.1 ÷ that share). The outputs are removed, the
disk synced and 3 s waited before the next share, so that each uninterrupted run and each rerun
starts after a kill or a pause alike.

``--twice``: no kills; for each share the command runs uninterrupted twice in a row (the first
output kept meanwhile), timed with the process's user and system CPU seconds (``wait4``): what
the run after another costs by itself.

``--afresh``: every other share, the killed run's shadow and journal are removed before the
rerun, which then starts from row 0 right after a kill: against the uninterrupted run, what
following a killed run costs without any resuming.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import store_backends as sb  # noqa: E402
from bench_stores import (  # noqa: E402
    _CLI,
    command_seconds,
    make_model_and_rows,
    resumed_row,
    translate_cpu,
)


def command(model_path, src, out, env, kill_at=None, n=None):
    """Run the command; with ``kill_at``, SIGKILL it once its shadow holds that share of the
    output's vectors and return None; else (seconds, CPU seconds, row resumed at, the process's
    user and system CPU seconds from ``wait4``)."""
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen([sys.executable, "-c", _CLI, "translate", model_path, src, out],
                             stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if kill_at is not None:
            shadow = Path(out).with_name(f".{Path(out).name}.skalign-partial.parquet")
            want = kill_at * n * 768 * 4
            while p.poll() is None:
                if shadow.exists() and shadow.stat().st_size >= want:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    return None
                time.sleep(0.005)
            raise SystemExit(f"the command ended before {kill_at:.0%} of it was written")
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        text = log.read()
    took = command_seconds(text)
    if p.returncode or took is None:
        raise SystemExit(text)
    return took, translate_cpu(text), resumed_row(text), usage.ru_utime, usage.ru_stime


def twice(model_path, src, root, env, k):
    """The command uninterrupted twice in a row, the first output kept meanwhile: what a run
    right after another costs, without any kill."""
    outs = [str(root / f"twice{k}-{i}.parquet") for i in (1, 2)]
    runs = [(os.getloadavg()[0], *command(model_path, src, out, env)) for out in outs]
    print("twice: " + "; ".join(f"{secs:.2f} s, user {user:.2f} s, system {system:.2f} s (load "
                                f"{load:.2f})" for load, secs, _, _, user, system in runs)
          + f"; the second ÷ the first: {runs[1][1] / runs[0][1]:.3f}", flush=True)
    for p in outs:
        os.unlink(p)
    os.sync()
    time.sleep(3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="?", default="1e6")
    ap.add_argument("--shares", default="0.2,0.2,0.2")
    ap.add_argument("--twice", action="store_true",
                    help="no kills: the command uninterrupted twice in a row, per share")
    ap.add_argument("--afresh", action="store_true",
                    help="every other rerun starts from row 0 (the killed run's shadow removed)")
    args = ap.parse_args()
    n = int(float(args.rows))
    model, X = make_model_and_rows(n)
    root = Path(tempfile.mkdtemp(prefix="resume-cli-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        from skalign.io import save

        src = sb.Parquet().make(root, X)
        del X
        model_path = str(save(model, root / "model.skops"))
        for k, share in enumerate(float(s) for s in args.shares.split(",")):
            if args.twice:
                twice(model_path, src, root, env, k)
                continue
            full_out, out = str(root / f"full{k}.parquet"), str(root / f"kill{k}.parquet")
            load = os.getloadavg()[0]
            full_s, full_cpu, _, _, _ = command(model_path, src, full_out, env)
            command(model_path, src, out, env, kill_at=share, n=n)
            afresh = args.afresh and k % 2 == 1
            if afresh:  # the lock file is the command's own; the rest is the shadow
                for p in root.glob(f".{Path(out).name}.skalign-*"):
                    if not p.name.endswith("-lock"):
                        p.unlink()
            rerun_load = os.getloadavg()[0]
            secs, cpu, at, _, _ = command(model_path, src, out, env)
            left = (n - at) / n
            tag = " (afresh)" if afresh else ""
            print(f"F={share}{tag}: uninterrupted {full_s:.2f} s, {full_cpu:.2f} s CPU (load "
                  f"{load:.2f}); rerun from row {at:,}: {secs:.2f} s, {cpu:.2f} s CPU (load "
                  f"{rerun_load:.2f}); ÷ the share: wall {secs / (full_s * left):.3f}, CPU "
                  f"{cpu / (full_cpu * left):.3f} (allowed {1 + 0.1 / left:.3f})", flush=True)
            for p in (full_out, out):
                os.unlink(p)
            os.sync()
            time.sleep(3)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
