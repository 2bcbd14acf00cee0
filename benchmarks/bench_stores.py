"""Every store ``skalign translate`` reads and writes: correctness, throughput against the
engine's own bulk load, peak memory, and crash recovery (issue 20).

``python benchmarks/bench_stores.py [--quick] [--rows N | --sizes npy=1e5,chroma=2e4]
[--kills K] [--repeats R] [--backends a,b] [--csv benchmarks/results/stores.csv] [--merge]``

Per backend (npy, parquet, parquet-dir, lance, faiss, chroma, qdrant, pgvector, sqlite-vec,
milvus, duckdb):

1. A source store of the vendored MiniLM vectors (``load_docstring_embeddings``, tiled with
   small noise to the size) with ids, documents and payloads, made with the engine's own client
   (``_stores_harness.py``); the model is ``ProcrustesAligner`` fitted MiniLM → MPNet.
2. ``python -m skalign translate model.skops SRC OUT`` as a child process with this process's
   thread settings: its own time and rows/s (its summary line), peak RSS (``VmHWM``), CPU
   seconds (``wait4``) and the 1-minute load average when it started.
3. Checks: output = ``model.transform(source)`` row for row (max |diff|; Qdrant's cosine
   collection compares directions), ids and other fields kept, source unchanged.
4. Baseline: the engine's own bulk load of the same output (``bulk_load``), with ``ratio`` =
   its time ÷ the translation's; ``transform_s``, ``model.transform`` alone in the command's
   batches; ``bulk_durable_s``, the bulk load then an ``os.sync()``. Every timed step starts
   after an ``os.sync()`` (PostgreSQL: after an untimed warm-up load, a ``VACUUM (ANALYZE)`` and
   a ``CHECKPOINT``). ``--repeats R``: R alternated pairs of a translation and a bulk load, the
   times and ratios their medians.
5. Kill study (``--kills K``): the command is SIGKILLed at a seeded random moment of its
   translation and run again to completion; the output must be identical to the uninterrupted
   one (SHA-256 fingerprints, ``digest``) with no temporary file, table or collection left, and
   ``resumed_in_time`` counts reruns that took at most the uninterrupted time × the share of
   rows left + 10 % of it.

Beside ``--csv``: ``_machine.csv`` (cores, load averages, the figures the user guide quotes)
and, with kills, ``_trials.csv`` (each kill: its moment, the row its rerun resumed at, the
rerun's time and allowance, exit status and last line). What each column means, the targets
and the studies behind the protocol are in ``doc/developers/stores_study.rst``. Sizes of the
issue: 10^6 rows for the file stores, 2·10^5 for PostgreSQL and Chroma, 5·10^4 for Qdrant's
local mode; ``--quick``: 20,000 / 5,000 / 300 rows and 2 kills.
"""

import argparse
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import batch_rows, write_figures
from _stores_harness import BACKENDS, PgVector, close_clients, start_postgres

ROOT = Path(__file__).resolve().parents[1]

FULL = {"npy": 1_000_000, "parquet": 1_000_000, "parquet-dir": 1_000_000, "lance": 1_000_000,
        "faiss": 1_000_000, "pgvector": 200_000, "chroma": 200_000, "qdrant": 50_000,
        "sqlite-vec": 200_000, "milvus": 200_000, "duckdb": 200_000}
QUICK = {"npy": 20_000, "parquet": 20_000, "parquet-dir": 20_000, "lance": 20_000,
         "faiss": 20_000, "pgvector": 5_000, "chroma": 5_000, "qdrant": 300,
         "sqlite-vec": 5_000, "milvus": 5_000, "duckdb": 5_000}


def make_model_and_rows(n, seed=0):
    from skalign import ProcrustesAligner
    from skalign.datasets import load_docstring_embeddings

    data = load_docstring_embeddings()
    A, B = data.embeddings["minilm_l6"], data.embeddings["mpnet_base"]
    model = ProcrustesAligner().fit(A, B)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(A), size=n)
    X = (A[idx] + 0.01 * rng.standard_normal((n, A.shape[1]))).astype(np.float32)
    return model, X


def _peak_rss(pid):
    """The process's own high-water resident set (``VmHWM``, MiB), or 0 once it is gone.

    Not ``wait4``'s ``ru_maxrss``: after a fork it starts from the parent's resident set (the
    benchmark holds the whole input), which is not the child's use."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_cli(argv, env, kill_after=None):
    """``python -m skalign ...``: (status or None if killed, wall s, peak RSS MiB, output, CPU s).

    The output goes to a file (a pipe could fill up and stall the child); the peak RSS is
    polled every 20 ms until the child exits; the CPU seconds (user + system, all threads) are
    the child's own, from ``wait4``."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        p = subprocess.Popen([sys.executable, "-m", "skalign", *argv], stdout=log,
                             stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        peak = 0.0
        while True:
            peak = max(peak, _peak_rss(p.pid))
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if kill_after is not None and time.perf_counter() - t0 >= kill_after:
                os.kill(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = 0  # reaped here; keeps Popen from waiting again
        log.seek(0)
        out = log.read().decode()
    wall = time.perf_counter() - t0
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    code = None if killed else os.waitstatus_to_exitcode(status)
    return code, wall, peak, out, usage.ru_utime + usage.ru_stime


def compare(backend, model, source, out):
    ids, X, fields = source
    oids, V, ofields = out
    if backend.name == "qdrant":  # a cosine collection keeps directions: compare those
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        V = V / np.linalg.norm(V, axis=1, keepdims=True)
    same_ids = bool(np.array_equal(ids, oids))
    kept = same_ids and (fields == ofields)
    if V.shape[0] != X.shape[0]:
        return float("inf"), kept
    worst = 0.0
    for lo in range(0, len(X), 65536):  # in blocks: a million translated rows are 3 GB
        T = np.asarray(model.transform(X[lo:lo + 65536]), np.float32)
        if backend.name == "qdrant":
            T /= np.linalg.norm(T, axis=1, keepdims=True)
        if T.shape[1] != V.shape[1]:
            return float("inf"), kept
        worst = max(worst, float(np.abs(V[lo:lo + 65536] - T).max(initial=0.0)))
    return worst, kept


def transform_time(model, X):
    """Seconds of ``model.transform`` over ``X`` in the batches ``skalign translate`` uses,
    with the thread settings the command has (the environment's): the floor any translation of
    the store pays."""
    from skalign.io import output_dim

    batch = batch_rows(X.shape[1], output_dim(model))
    t0 = time.perf_counter()
    for lo in range(0, len(X), batch):
        model.transform(X[lo:lo + batch])
    return time.perf_counter() - t0


def command_seconds(text):
    """The command's own time, its "in X s" (``None`` where it printed none)."""
    took = re.search(r" in ([\d.]+) s", text)
    return float(took.group(1)) if took else None


def resumed_row(text):
    """The row the command resumed at, from its "resumed at row N" (0 for a run from the start)."""
    at = re.search(r"resumed at row (\d+)", text)
    return int(at.group(1)) if at else 0


def rerun_times(text, n, full_s):
    """(the rerun's own time, the row it resumed at, the time it was allowed): the uninterrupted
    time × (rows left ÷ rows) + 0.1 × the uninterrupted time; (None, n, ...) for a rerun that
    found the output published."""
    if "already exists" in text:
        return None, n, 0.1 * full_s
    took = command_seconds(text)
    at = resumed_row(text)
    took = float("inf") if took is None else took
    return took, at, full_s * (n - at) / n + 0.1 * full_s


def resumed_in_time(text, n, full_s):
    """Whether a rerun after a kill took at most the remaining work + 10 %: its time ≤ the
    uninterrupted time × (rows left ÷ rows) + 0.1 × the uninterrupted time (a rerun that found
    the output published counts as in time)."""
    took, _, allowed = rerun_times(text, n, full_s)
    return took is None or took <= allowed


def leftovers(backend, root):
    inv = backend.inventory(root)
    bad = [x for x in inv if any(w in x for w in ("partial", "journal", "lock", ".tmp-"))]
    if backend.name in ("chroma", "pgvector", "sqlite-vec", "duckdb"):
        bad += [x for x in inv if "skalign" in x and x not in bad]
    if backend.name == "chroma":  # a deleted collection's files left on the disk
        bad += [x for x in inv if x.startswith("orphan segment")]
    if backend.name in ("qdrant", "milvus"):  # the output: an alias of one such collection
        bad += [x for x in inv if x.startswith("out_skalign_")][1:]
    return bad


TRIALS = []  # one row per kill: when, where the rerun resumed, its time and what it was allowed


def _output_digest(backend, target):
    """The output's digest, or ``None`` and why it could not be read: a kill study records a
    rerun that left no readable output (as not identical) instead of stopping there."""
    try:
        return backend.digest(target), ""
    except Exception as exc:  # the engine's own "not found" errors differ from one to the next
        return None, f"{type(exc).__name__}: {exc}"


def _last_line(text):
    """The last line the command printed (its summary, or its one-line error)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def bench_backend(backend, n, kills, model_path, model, X, workdir, env, seed, repeats=1):
    root = Path(tempfile.mkdtemp(dir=workdir, prefix=f"{backend.name}-"))
    row = {"backend": backend.name, "rows": n}
    try:
        t0 = time.perf_counter()
        src = backend.make(root, X[:n])
        row["make_s"] = round(time.perf_counter() - t0, 1)
        source = backend.read(src)
        close_clients()
        out = backend.output(root)
        engine_settle = getattr(backend, "settle", lambda: None)

        def settle():  # the pages written by the step before reach the disk before a timed one
            os.sync()
            engine_settle()

        def translate(target, kill_after=None):
            settle()
            return run_cli(["translate", model_path, src, target], env, kill_after=kill_after)

        if hasattr(backend, "warm_up"):
            backend.warm_up(root, source[0], np.asarray(model.transform(source[1]), np.float32))
        load = os.getloadavg()[0]
        status, wall, rss, text, cpu = translate(out)
        assert status == 0, text
        secs = command_seconds(text)
        row.update(load_1min=round(load, 2), translate_s=round(secs, 2),
                   rows_per_s=round(n / secs), cli_wall_s=round(wall, 2), cli_cpu_s=round(cpu, 2),
                   peak_rss_mib=round(rss))
        result = backend.read(out)
        row["max_abs_diff"], row["fields_kept"] = compare(backend, model, source, result)
        after = backend.read(src)
        row["source_unchanged"] = bool(np.array_equal(after[1], source[1])
                                       and after[2] == source[2]
                                       and np.array_equal(after[0], source[0]))
        close_clients()

        def bulk_load(ids, V):
            if hasattr(backend, "prepare_bulk"):
                backend.prepare_bulk(root)
            settle()
            t0 = time.perf_counter()
            backend.bulk_load(root, ids, V)
            bulk = time.perf_counter() - t0
            os.sync()  # a file store's load is in the page cache; the translation's is on disk
            durable = time.perf_counter() - t0
            backend.drop_bulk(root)  # not timed: the translation deletes nothing
            close_clients()
            return bulk, durable

        runs = [(secs, *bulk_load(result[0], result[1]))]
        for _ in range(1, repeats):  # alternated pairs: translation, then bulk load
            # into the same output, dropped first: the store holds what it held for the first
            # run (Qdrant's local mode loads every collection of the folder when it opens it)
            _drop(backend, root, out)
            status, _, r_rss, r_text, _ = translate(out)
            assert status == 0, r_text
            rss = max(rss, r_rss)
            runs.append((command_seconds(r_text), *bulk_load(result[0], result[1])))
        t_med, bulk, durable = (float(np.median([r[k] for r in runs])) for k in range(3))
        floor = transform_time(model, source[1])
        row.update(bulk_load_s=round(bulk, 2), bulk_rows_per_s=round(n / bulk),
                   ratio=round(bulk / t_med, 2), transform_s=round(floor, 2),
                   ratio_transform_then_bulk=round((floor + bulk) / t_med, 2),
                   bulk_durable_s=round(durable, 2), ratio_durable=round(durable / t_med, 2),
                   repeats=repeats, peak_rss_mib=round(rss), translate_s=round(t_med, 2),
                   rows_per_s=round(n / t_med))
        if repeats > 1:
            row.update(translate_runs_s=";".join(f"{r[0]:.2f}" for r in runs),
                       bulk_runs_s=";".join(f"{r[1]:.2f}" for r in runs),
                       ratio_runs=";".join(f"{r[1] / r[0]:.2f}" for r in runs))
        # the kills compare fingerprints, read batch by batch: three million-row stores held
        # whole (as ``read`` returns them) outgrow the machine's memory
        want, source_before = backend.digest(out), backend.digest(src)
        del result, source
        _drop(backend, root, out)  # the trials start from the store the first run started from
        rng = np.random.default_rng(seed)
        resumed = identical = clean = mid_run = timely = 0
        for k in range(kills):
            target = backend.output(root, f"kill{k}")
            kill_after = (wall - secs) + rng.uniform(0, 1) * secs
            status, _, _, _, _ = translate(target, kill_after=kill_after)
            killed = status is None  # else it had finished before the kill
            mid_run += killed
            load = os.getloadavg()[0]
            status, _, rerun_rss, text, _ = translate(target)
            took, at, allowed = rerun_times(text, n, secs)
            got, output_error = _output_digest(backend, target)
            TRIALS.append({"backend": backend.name, "rows": n, "kill": k,
                           "kill_after_s": round(kill_after, 2), "killed": killed,
                           "load_1min": round(load, 2), "full_s": secs, "resumed_at": at,
                           "rerun_s": "published" if took is None else took,
                           "allowed_s": round(allowed, 2),
                           "in_time": took is None or took <= allowed,
                           "rerun_peak_rss_mib": round(rerun_rss), "rerun_status": status,
                           "rerun_said": _last_line(text), "output_error": output_error})
            # 0: resumed and finished; "already exists": the kill landed after the publish
            resumed += status == 0 or "already exists" in text
            timely += resumed_in_time(text, n, secs)
            identical += got == want
            close_clients()
            clean += not leftovers(backend, root)
            _drop(backend, root, target)
        if kills:
            row["source_unchanged"] &= backend.digest(src) == source_before
        row.update(kills=kills, killed_mid_run=mid_run, resumed=resumed,
                   resumed_in_time=timely, identical=identical, no_leftovers=clean)
    finally:
        close_clients()
        if backend.name == "pgvector":
            backend.reset()
        shutil.rmtree(root, ignore_errors=True)
    return row


def _drop(backend, root, address):
    """Remove a translation's output so the next run starts from nothing."""
    backend.drop(root, address)
    close_clients()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, help="one size for every backend")
    ap.add_argument("--sizes", help="sizes of some backends, e.g. npy=1e5,chroma=2e4")
    ap.add_argument("--kills", type=int, help="SIGKILLs per backend (default 10, quick 2)")
    ap.add_argument("--repeats", type=int, default=1, help="alternated translation/bulk-load "
                    "pairs per backend; the times and ratios are their medians (default 1)")
    ap.add_argument("--backends", default="npy,parquet,parquet-dir,lance,faiss,chroma,qdrant,"
                    "pgvector,sqlite-vec,milvus,duckdb")
    ap.add_argument("--workdir", default=None,
                    help="where the stores are made (a temporary folder inside it, removed "
                    "at the end)")
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "stores.csv"))
    ap.add_argument("--merge", action="store_true",
                    help="replace the rows of the backends run in an existing --csv (and its "
                    "_trials file) and keep the others (the _machine file then sums up every "
                    "row)")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()[0]
    sizes = dict(QUICK if args.quick else FULL)
    for item in (args.sizes or "").split(","):
        if item:
            name, rows = item.split("=")
            sizes[name] = int(float(rows))
    kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    names = args.backends.split(",")
    n_max = max(args.rows or sizes[b] for b in names)
    model, X = make_model_and_rows(n_max)
    # a folder of our own, inside ``--workdir`` when given: it is removed at the end
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-stores-", dir=args.workdir))
    from skalign.io import save

    model_path = str(save(model, workdir / "model.skops"))
    # the command runs with this process's thread settings, the same as the bulk loads timed
    # here (``OMP_NUM_THREADS`` in the environment applies to both, or to neither)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    backends = dict(BACKENDS)
    server = None
    rows = []
    try:
        if "pgvector" in names:
            server, base = start_postgres(workdir / "pg")
            backends["pgvector"] = PgVector(base)
        for i, name in enumerate(names):
            n = args.rows or sizes[name]
            row = bench_backend(backends[name], n, kills, model_path, model, X, workdir, env,
                                seed=i, repeats=args.repeats)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            write_results(args, rows, load_start, kills)  # after each backend: a long run
            # stopped part-way keeps what it measured
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def _merged(path, rows):
    """The rows of an earlier run in ``path`` with those of the backends run now replaced, in
    the earlier order (backends new to the file at the end)."""
    if not Path(path).exists():
        return rows
    with open(path, newline="") as f:
        old = list(csv.DictReader(f))
    fresh = {r["backend"]: r for r in rows}
    out = [fresh.pop(r["backend"], r) for r in old]
    return out + list(fresh.values())


def write_results(args, rows, load_start, kills):
    if args.merge:
        rows = _merged(args.csv, rows)
    keys = list(rows[0])
    for r in rows:
        keys += [k for k in r if k not in keys]
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    # the machine, for the guide's prose (``:fig:`` figures): a ``key,value`` file beside it
    summary = Path(args.csv).with_name(Path(args.csv).stem + "_machine.csv")
    loads = [float(r["load_1min"]) for r in rows if r.get("load_1min") not in (None, "")]
    write_figures(summary, [("cpu_count", float(os.cpu_count())),
                            ("load_avg_1min_start", load_start),
                            ("load_avg_1min_end", os.getloadavg()[0]),
                            ("load_1min_min", min(loads, default=float("nan"))),
                            ("load_1min_max", max(loads, default=float("nan"))),
                            ("kills", float(kills))]
                  + [(f"{key}_{r['backend'].replace('-', '_')}", float(r[key]))
                     for key in ("rows", "translate_s", "bulk_load_s", "ratio",
                                 "transform_s", "peak_rss_mib", "bulk_durable_s",
                                 "ratio_durable")
                     for r in rows if r.get(key) not in (None, "")])
    if TRIALS:
        trials = Path(args.csv).with_name(Path(args.csv).stem + "_trials.csv")
        kept = []
        if args.merge and trials.exists():  # the earlier trials of the backends not run now
            run_now = {t["backend"] for t in TRIALS}
            with open(trials, newline="") as f:
                kept = [t for t in csv.DictReader(f) if t["backend"] not in run_now]
        with open(trials, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(TRIALS[0]))
            w.writeheader()
            w.writerows(kept + TRIALS)
        summary = f"{summary} and {trials}"
    print(f"wrote {args.csv} and {summary}")


if __name__ == "__main__":
    main()
