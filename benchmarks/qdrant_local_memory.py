"""Where the memory of ``skalign translate`` into Qdrant's local mode goes (issue 20: peak RSS
< 1.5 GB at 50,000 points, 384 → 768).

``python benchmarks/qdrant_local_memory.py 5e4 [--workdir DIR] [--csv PATH] [--steps a,b]``

Makes the source as ``bench_stores.py`` does (``tests/store_backends.py``: 384-d MiniLM-like
points with a second named vector and payloads, cosine; the 384 → 768 Procrustes model), keeps
it as a pristine copy, and runs each step in a fresh process on a fresh copy of the folder:

* ``open`` (skalign's float32 loader, ``_qdrant_load``) and ``open_qdrant_loader``
  (qdrant-client's own): ``import qdrant_client``, then ``QdrantClient(path=...)``; ``VmHWM``
  after the import and after the open, ``VmRSS`` after the open and after glibc's
  ``malloc_trim``, the open's CPU seconds, and the dtype and size of the source's vectors as
  the client holds them; then skalign's rebuild of the per-point objects
  (``_qdrant._compact_local``), its seconds and ``VmRSS`` after it and a trim.
* ``open_traced``: the same under ``tracemalloc``: the peak and the live size of the Python
  allocations of the open (slow: every allocation is traced).
* ``translate`` (skalign as it is: the heap trimmed after opening the folder and after each
  batch), ``translate_no_batch_trim`` (after opening only, as before), ``translate_pymalloc_off``
  (``PYTHONMALLOC=malloc``: Python's small objects from glibc's heap, which the trim can give
  back), ``translate_no_compact`` (without the rebuild after the open, as before),
  ``translate_qdrant_loader`` (qdrant-client's own loader for the open):
  ``skalign.cli.main(["translate", ...])`` in the process, its resident set polled every 0.2 s,
  with ``VmRSS``/``VmHWM`` at the end of the open and of every 8th batch.
* ``rerun_4``, ``rerun_12``, ``rerun_40`` (``..._qdrant_loader``: qdrant-client's own loader,
  its float64 vectors cast to float32 after the open; ``..._float64``: its loader, no cast, as
  in stop 35): a ``translate`` killed with SIGKILL after its 4th, 12th or 40th batch of 1,024
  points, then the same command in a fresh process, measured as ``translate`` is; the rerun
  opens the killed run's shadow with the source and resumes it.

The folder lives under ``--workdir`` (``/dev/shm`` is fastest: the local mode commits every
point with an fsync; the resident set does not depend on the file system). Memory in MiB.
``--csv PATH`` writes one row per step and, beside it, ``<PATH stem>_figures.csv``: the same
numbers as ``key,value`` (``STEP_KEY``; ``open_source_mib``: the source's 384-d vectors as the
client holds them) for the user guide's ``:fig:`` roles.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

_STATUS = """
import json, os, sys, time
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
"""

_OPEN = _STATUS + """
traced = os.environ.get("TRACED") == "1"
if traced:
    import tracemalloc
    tracemalloc.start()
from qdrant_client import QdrantClient
out = {"import_hwm": status("VmHWM:")}
sys.path.insert(0, ROOT)
from skalign._stores import qdrant as _qdrant, qdrant_load as _qdrant_load  # before the open, as in translate
if traced:
    tracemalloc.reset_peak()
t = time.process_time()
with _qdrant_load.opening(os.environ.get("STREAMED", "1") == "1") as streamed:
    client = QdrantClient(path=FOLDER)
out["streamed"] = int(streamed)
out["open_cpu_s"] = time.process_time() - t
out["open_hwm"], out["open_rss"] = status("VmHWM:"), status("VmRSS:")
if traced:
    now, peak = tracemalloc.get_traced_memory()
    out["open_traced_peak"], out["open_traced_live"] = peak / 2**20, now / 2**20
import ctypes
ctypes.CDLL(None).malloc_trim(0)
out["trimmed_rss"] = status("VmRSS:")
t = time.perf_counter()
_qdrant._compact_local(client)
ctypes.CDLL(None).malloc_trim(0)
out["compact_s"], out["compacted_rss"] = time.perf_counter() - t, status("VmRSS:")
vectors = client._client.collections["src"].vectors  # what the client holds (read only)
out["source_vectors"] = {k: [list(v.shape), str(v.dtype), v.nbytes / 2**20]
                         for k, v in vectors.items()}
print("RESULT", json.dumps(out))
"""

_TRANSLATE = _STATUS + """
import threading
sys.path.insert(0, ROOT)
rss, marks, stop = [], [], []
def poll():
    while not stop:
        rss.append(status("VmRSS:"))
        time.sleep(0.2)
threading.Thread(target=poll, daemon=True).start()
def mark(what):
    marks.append([what, status("VmRSS:"), status("VmHWM:")])
from skalign._stores import qdrant as _qdrant
from skalign.cli import main
_qdrant.TRIM_EACH_BATCH = os.environ.get("BATCH_TRIM") == "1"
_qdrant.COMPACT_ON_OPEN = os.environ.get("COMPACT", "1") == "1"
_qdrant.FLOAT32_ON_OPEN = os.environ.get("FLOAT32", "1") == "1"
_qdrant.STREAMED_OPEN = os.environ.get("STREAMED", "1") == "1"
kill_after = int(os.environ.get("KILL_AFTER", "0"))
init, write = _qdrant.Reader.__init__, _qdrant.Writer.write_unit
def opened(self, *a, **k):
    init(self, *a, **k)
    mark("open")
count = [0]
def written(self, *a, **k):
    write(self, *a, **k)
    count[0] += 1
    if count[0] == kill_after:  # the killed run of a rerun step: SIGKILL after this batch
        os.kill(os.getpid(), 9)
    if count[0] % 8 == 0:
        mark(f"batch {count[0]}")
_qdrant.Reader.__init__, _qdrant.Writer.write_unit = opened, written
mark("imported")
t = time.process_time()
code = main(["translate", MODEL, f"qdrant:{FOLDER}/src?vector=text",
             f"qdrant:{FOLDER}/out?vector=text", "--quiet"])
cpu = time.process_time() - t
stop.append(1)
print("RESULT", json.dumps({"status": code, "peak_hwm": status("VmHWM:"), "cpu_s": cpu,
                            "marks": marks}))
"""

STEPS = {
    "open": (_OPEN, {}),
    "open_qdrant_loader": (_OPEN, {"STREAMED": "0"}),
    "open_traced": (_OPEN, {"TRACED": "1"}),
    "translate": (_TRANSLATE, {"BATCH_TRIM": "1"}),
    "translate_no_batch_trim": (_TRANSLATE, {"BATCH_TRIM": "0"}),
    "translate_pymalloc_off": (_TRANSLATE, {"BATCH_TRIM": "1", "PYTHONMALLOC": "malloc"}),
    "translate_no_compact": (_TRANSLATE, {"BATCH_TRIM": "1", "COMPACT": "0"}),
    "translate_qdrant_loader": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0"}),
    # a run killed after its 4th, 12th or 40th batch of 1,024 points, then the same command
    # again in a fresh process: what is measured is the rerun, which loads the killed run's
    # shadow with the source
    "rerun_4": (_TRANSLATE, {"BATCH_TRIM": "1"}, 4),
    "rerun_12": (_TRANSLATE, {"BATCH_TRIM": "1"}, 12),
    "rerun_40": (_TRANSLATE, {"BATCH_TRIM": "1"}, 40),
    "rerun_12_qdrant_loader": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0"}, 12),
    "rerun_40_qdrant_loader": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0"}, 40),
    "rerun_4_float64": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0", "FLOAT32": "0"}, 4),
    "rerun_12_float64": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0", "FLOAT32": "0"},
                         12),
    "rerun_40_float64": (_TRANSLATE, {"BATCH_TRIM": "1", "STREAMED": "0", "FLOAT32": "0"},
                         40),
}


def run_step(step, pristine, work, model):
    folder = work / "run"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(pristine, folder)
    code, extra, *kill_after = STEPS[step]
    head = (f"import warnings; warnings.simplefilter('ignore')\nFOLDER = {str(folder)!r}\n"
            f"MODEL = {str(model)!r}\nROOT = {str(ROOT)!r}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    if kill_after:
        killed = subprocess.run([sys.executable, "-c", head + code], capture_output=True,
                                text=True, env=dict(env, KILL_AFTER=str(kill_after[0])))
        if killed.returncode != -9:
            raise RuntimeError(f"{step}: the run to kill ended with {killed.returncode}: "
                               + killed.stderr[-2000:])
    out = subprocess.run([sys.executable, "-c", head + code], capture_output=True, text=True,
                         env=env)
    shutil.rmtree(folder, ignore_errors=True)
    if "RESULT" not in out.stdout:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.split("RESULT", 1)[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=float)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--steps", default=",".join(STEPS))
    args = ap.parse_args(argv)
    import store_backends as sb
    from _common import write_rows
    from bench_stores import make_model_and_rows

    from skalign._stores import qdrant as _qdrant
    from skalign.io import save

    n = int(args.rows)
    work = Path(tempfile.mkdtemp(prefix="qdrant-memory-", dir=args.workdir))
    rows = []
    try:
        model, X = make_model_and_rows(n)
        model_path = save(model, work / "model.skops")
        sb.Qdrant().make(work, X)
        _qdrant._close_all()
        del X
        for step in args.steps.split(","):
            got = run_step(step, work / "qdrant", work, model_path)
            print(step, json.dumps(got), flush=True)
            rows.append(table_row(step, n, os.getloadavg()[0], got))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.csv:
        write_rows(args.csv, rows)  # every key of any row; a missing one left empty
        print(f"wrote {args.csv} and {write_figures(args.csv)}")
    return rows


def table_row(step, n, load, got):
    """One row of the table: numbers rounded, the marks as ``WHEN RSS/HWM; ...``."""
    row = {"step": step, "rows": n, "load_1min": round(load, 2)}
    for key, value in got.items():
        if key == "marks":
            row["rss_hwm_mib_at"] = "; ".join(f"{w} {r:.0f}/{h:.0f}" for w, r, h in value)
        elif key == "source_vectors":
            shape, dtype, mib = value["text"]
            row["source_dtype"], row["source_mib"] = dtype, round(mib, 1)
        else:
            row[key] = round(value, 1) if isinstance(value, float) else value
    return row


def write_figures(table):
    """The numbers of the table ``table`` as a ``key,value`` file beside it; its path."""
    import csv

    from _common import write_rows

    figures = []
    with open(table, newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                try:
                    number = float(value)
                except ValueError:  # words, the marks, or a step without this column
                    continue
                if key not in ("rows", "load_1min"):
                    figures.append({"key": f"{row['step']}_{key}", "value": number})
    path = Path(table).with_name(Path(table).stem + "_figures.csv")
    write_rows(path, figures)
    return path


if __name__ == "__main__":
    main()
