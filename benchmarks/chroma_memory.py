"""Peak memory of ``skalign translate`` into Chroma, in phases or as one stream, with and without
giving the C heap's free pages back after each add (issue 20: peak RSS < 1.5 GB at 200,000
records, 384 → 768).

``python benchmarks/chroma_memory.py [ROWS] [--repeats R] [--variants a,b] [--add-records N]
[--workdir DIR] [--csv PATH]``

Makes the source as ``bench_stores.py`` does (``tests/store_backends.py``: 384-d MiniLM-like
records with documents and metadata; the 384 → 768 Procrustes model), then:

* **translations**, each a fresh process on a fresh copy of the folder, ``R`` alternated
  rounds of: ``trim`` (skalign as it is: in phases, ``malloc_trim`` after each add of the
  shadow, ``_chroma.TRIM_EACH_ADD``), ``no_trim`` (without it) and ``arena1`` (as ``trim``, with
  ``MALLOC_ARENA_MAX=1``: one glibc heap for every thread of Chroma's Rust core), ``stream``
  (as ``trim``, the source read and the output written as one stream, ``_chroma.PHASE_ROWS =
  0``, as before phases) and ``phases_100k`` (phases of up to 100,000 records instead of
  65,536), ``add_2048``, ``add_4096`` and ``add_8192`` (as ``trim``, with adds of that many
  records whether in phases or not); the peak resident set (``VmHWM``, polled every 20 ms as
  ``bench_stores.py`` does), the wall seconds and the CPU seconds (user + system, all threads)
  of each (``--variants`` a subset);
* **one add's transient**: a new collection, ``N`` (40,000) random 768-d records added in adds of
  2,048 or 1,024 records, with and without ``MALLOC_ARENA_MAX=1``; before each add the heap is
  trimmed and the high-water mark reset (``/proc/self/clear_refs``), and the median over the
  adds after the first two of the high-water mark's rise above the resident set before the
  add is reported. Chroma allocates it in its Rust core (Python's own allocations during an
  add peak near 1.4 MB, ``tracemalloc``).

Memory in MiB. ``--csv PATH`` writes one row per run and, beside it,
``<PATH stem>_figures.csv``: medians per variant as ``key,value`` for the user guide.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

VARIANTS = {
    "trim": ("", {}),
    "no_trim": ("import skalign._stores.chroma as c; c.TRIM_EACH_ADD = False\n", {}),
    "arena1": ("", {"MALLOC_ARENA_MAX": "1"}),
    "stream": ("import skalign._stores.chroma as c; c.PHASE_ROWS = 0\n", {}),
    "phases_100k": ("import skalign._stores.chroma as c; c.PHASE_ROWS = 100000\n", {}),
    **{f"add_{rows}": ("import skalign._stores.chroma as c; "
                       f"c.ADD_ROWS = c.PHASE_ADD_ROWS = {rows}\n", {})
       for rows in (2048, 4096, 8192)},
}

_TRANSLATE = "import sys\nfrom skalign.cli import main\nsys.exit(main(sys.argv[1:]))\n"

_ADD = """
import ctypes, shutil, sys
import numpy as np
import chromadb
def status():
    d = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmHWM:", "VmRSS:")):
            d[line[:5]] = int(line.split()[1]) / 1024
    return d
rows, total = ROWS, TOTAL
c = chromadb.PersistentClient(path=FOLDER)
col = c.create_collection("adds", embedding_function=None)
X = np.random.default_rng(0).normal(size=(rows, 768)).astype(np.float32)
rises = []
for k in range(total // rows):
    ctypes.CDLL(None).malloc_trim(0)
    before = status()["VmRSS"]
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark
    col.add(ids=[f"i{k}_{i}" for i in range(rows)], embeddings=X,
            documents=[f"d{i}" for i in range(rows)], metadatas=[{"k": i} for i in range(rows)])
    rises.append(status()["VmHWM"] - before)
print("RISE", float(np.median(rises[2:])))
"""


def run_translation(variant, work, model):
    """One translation in a fresh process on a fresh copy of the source's folder: (peak MiB,
    wall s, status)."""
    from bench_stores import _peak_rss

    folder = work / "run"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(work / "chroma", folder)
    pre, extra = VARIANTS[variant]
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", pre + _TRANSLATE, "translate", str(model),
                          f"chroma:{folder}/src", f"chroma:{folder}/out", "--quiet"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0.0
    while True:  # wait4: the child's own CPU seconds (user + system, all threads)
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _peak_rss(p.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    shutil.rmtree(folder, ignore_errors=True)
    return peak, wall, usage.ru_utime + usage.ru_stime, p.returncode


def add_rise(rows, arena1, work, total=40000):
    folder = work / "adds"
    shutil.rmtree(folder, ignore_errors=True)
    env = dict(os.environ, **({"MALLOC_ARENA_MAX": "1"} if arena1 else {}))
    code = (f"import warnings; warnings.simplefilter('ignore')\nFOLDER = {str(folder)!r}\n"
            f"ROWS = {rows}\nTOTAL = {total}\n" + _ADD)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    shutil.rmtree(folder, ignore_errors=True)
    return float(out.split("RISE")[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="?", type=float, default=2e5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--add-records", type=int, default=40000, help="0: no add transients")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    import store_backends as sb
    from _common import write_rows
    from bench_stores import make_model_and_rows

    from skalign.io import save

    n = int(args.rows)
    work = Path(tempfile.mkdtemp(prefix="chroma-memory-", dir=args.workdir))
    rows = []
    try:
        model, X = make_model_and_rows(n)
        model_path = save(model, work / "model.skops")
        sb.Chroma().make(work, X)
        del X
        for r in range(args.repeats):
            for variant in args.variants.split(","):
                peak, wall, cpu, status = run_translation(variant, work, model_path)
                row = {"kind": "translate", "variant": variant, "rows": n, "run": r,
                       "status": status, "peak_rss_mib": round(peak), "wall_s": round(wall, 1),
                       "cpu_s": round(cpu, 1), "load_1min": round(os.getloadavg()[0], 2)}
                print(row, flush=True)
                rows.append(row)
        for add in (2048, 1024) if args.add_records else ():
            for arena1 in (False, True):
                rise = add_rise(add, arena1, work, args.add_records)
                row = {"kind": "add", "variant": "arena1" if arena1 else "default",
                       "rows": add, "add_rise_mib": round(rise, 1)}
                print(row, flush=True)
                rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.csv:
        write_rows(args.csv, rows)  # every key of any row; a missing one left empty
        figures = []
        for variant in args.variants.split(","):
            mine = [r for r in rows if r["kind"] == "translate" and r["variant"] == variant]
            for key in ("peak_rss_mib", "wall_s", "cpu_s"):
                figures.append({"key": f"{variant}_{key}",
                                "value": float(np.median([r[key] for r in mine]))})
        for r in rows:
            if r["kind"] == "add":
                figures.append({"key": f"add_{r['rows']}_{r['variant']}_rise_mib",
                                "value": r["add_rise_mib"]})
        path = Path(args.csv).with_name(Path(args.csv).stem + "_figures.csv")
        write_rows(path, figures)
        print(f"wrote {args.csv} and {path}")
    return rows


if __name__ == "__main__":
    main()
