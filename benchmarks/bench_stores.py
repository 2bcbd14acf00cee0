"""Every store ``skalign translate`` reads and writes: correctness, throughput against the
engine's own bulk load, peak memory, and crash recovery (issue 20).

``python benchmarks/bench_stores.py [--quick] [--rows N | --sizes npy=1e5,chroma=2e4]
[--kills K] [--repeats R] [--backends a,b] [--csv benchmarks/results/stores.csv] [--merge]``
(also writes
``stores_machine.csv``: cores, load average, the lowest and highest load over the rows, sizes;
with kills, ``stores_trials.csv``: each kill's moment, the row its rerun resumed at, the rerun's
time and the time it was allowed, by both rules below, its exit status and last line, and why
the output could not be read where it could not)

Per backend (npy, parquet, parquet-dir, lance, faiss, chroma, qdrant, pgvector):

1. A source store of real-looking 384-d embeddings (the vendored MiniLM vectors of
   :func:`skalign.datasets.load_docstring_embeddings`, tiled with small noise to the size) with
   ids, documents and payloads, made with the engine's own client (``tests/store_backends.py``);
   the model is ``ProcrustesAligner`` fitted MiniLM → MPNet (384 → 768) on the vendored pairs.
2. ``python -m skalign translate model.skops SRC OUT`` as a child process, with this
   process's thread settings (``OMP_NUM_THREADS`` from the environment applies to the command,
   the bulk load and ``transform_s`` alike): rows/s from the command's own summary line, peak
   RSS of the child (``VmHWM``), its CPU seconds (user + system, ``wait4``) and the 1-minute
   load average when it started (``load_1min``: the machine is shared).
3. Checks: output = ``model.transform(source)`` row for row (float32, max |diff| ≤ 1e-5;
   Qdrant's cosine collection compares directions), ids/documents/payloads/other vectors kept,
   source unchanged.
4. Baseline: the engine's own bulk load of the same output vectors with the same fields, timed
   in this process (``np.save``/``pq.write_table``/LanceDB ``create_table``, ``add_with_ids``,
   batched ``add``/``upsert``, binary ``COPY``); ratio = translate rows/s ÷ bulk-load rows/s.
   Qdrant's local mode loads every collection of its folder when a client opens it, and the
   command's time includes its open of the source's folder: the bulk load opens a copy of
   that folder holding the source alone (``prepare_bulk``, untimed) with a new client, as a
   script of the user's own would.
   ``transform_s``: ``model.transform`` of the same rows in the same batches, the floor any
   translation pays; ``ratio_transform_then_bulk`` = (transform + bulk load) ÷
   translate, i.e. against a script that translates in memory and bulk loads the result.
   ``bulk_durable_s``: the bulk load and then an ``os.sync()``, until its output is on the disk
   as the translation's committed batches are (a file store's plain write ends in the page
   cache; a database's load has committed already), and ``ratio_durable`` against that.
   PostgreSQL: an untimed bulk load of the same output first (a fresh cluster's first large
   write also creates its WAL segment files; measured, whichever of the two timed writes came
   first paid about 3 s for it), and a ``VACUUM (ANALYZE)`` of every table and a ``CHECKPOINT``
   before each timed write, so that autovacuum's first pass over a table loaded seconds before
   does not run beside it (``warm_up``/``settle`` in ``tests/store_backends.py``). Every
   backend: an ``os.sync()`` before each timed step, so that the write-back of the pages the
   step before wrote (the source, the translation) does not run beside it. What the bulk load
   wrote is deleted after it, untimed (``remove_bulk``: the translation deletes nothing).
   ``--repeats R``: R alternated pairs (a translation into the same output, dropped first,
   then the bulk load);
   ``translate_s``, ``bulk_load_s`` and ``bulk_durable_s`` are their medians, the ratios are
   ratios of medians, ``translate_runs_s``/``bulk_runs_s``/``ratio_runs`` list every pair and
   ``peak_rss_mib`` is the highest of the R translations. The kill study's allowances use the
   first translation.
5. Kill study: ``--kills`` times, the command is started, SIGKILLed at a seeded random moment
   of its translation (after the measured start-up), run again to completion, and compared with
   the uninterrupted output (identical ids, vectors and fields in the same order: SHA-256
   fingerprints read batch by batch, ``digest`` in ``tests/store_backends.py``), with no
   temporary file, table or collection left (the source's fingerprint is the same after the
   kills as before them); ``resumed_in_time``: the rerun took at most the uninterrupted time × the
   share of rows left after the row it reports resuming at, + 10 % of the uninterrupted time
   (both the command's own "in X s"). ``resumed_in_cpu_time``: the same rule on the CPU
   seconds of the same span (``translate_cpu_s``, all threads), which the machine's other jobs
   do not stretch: where it holds and the wall-time rule does not, the rerun did no more work
   than allowed but got less of the cores. ``resumed_in_measured_time``: the work left
   measured on the uninterrupted run itself instead of as a share of rows, its own time from
   the moment it had written the rows before the resume row to its end, + 10 % of its whole
   time (``measured_allowance``; the command prints when each write was done): where an
   engine's writes grow dearer as the output grows (an HNSW index being built), the last rows
   cost more than their share. ``resumed_in_started_time``: the same, with the uninterrupted
   run's start-up (its time until its stores were open and its resume row known, which the
   command prints) counted as work left too, since a rerun opens the stores again
   (``started_allowance``); the rerun's own start-up is in the trials (``rerun_began_s``), and
   so is each rerun's peak resident set (``rerun_peak_rss_mib``). Each killed run and each
   rerun starts after the same ``settle`` (a sync) as the uninterrupted run, and from the
   store it started from: the uninterrupted output is dropped once its fingerprint is taken
   (until 2026-11-27 it stayed, and Qdrant's local mode loaded it in every rerun).
   ``--adjacent``: each trial also times an uninterrupted run into its output (dropped after),
   before the kill on even trials and after the rerun on odd ones, and judges the rerun
   against that run as well as the first one: ``resumed_in_adjacent_time`` (the share-of-rows
   rule) and ``resumed_in_adjacent_started_time`` (the start-up rule); the trials carry
   ``adjacent_full_s``. On this 2-core virtual machine the same translation's time drifts by
   more than the 10 % margin within minutes (Qdrant's local mode, 50,000 points, six runs in
   a row alternating uninterrupted runs and reruns from row 0: 73.1, 81.2, 83.3, 80.7, 84.8
   and 87.5 s, the CPU seconds with them), so one reference run early in a study misjudges the
   later trials either way.

Targets: output = transform (≤ 1e-5), 100 % of ids/fields kept, source unchanged, ratio ≥ 0.8,
peak RSS < 1.5 GB, K/K kills resumed identically with 0 leftovers. Sizes of the issue: 10^6
rows for the file stores, 2·10^5 for PostgreSQL and Chroma, 5·10^4 for Qdrant's local mode;
``--quick``: 20,000 / 5,000 / 300 rows and 2 kills. The CSV feeds the user guide's table.
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
from _common import write_figures

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from store_backends import (  # noqa: E402
    Chroma,
    Faiss,
    Lance,
    Npy,
    Parquet,
    ParquetDir,
    PgVector,
    Qdrant,
    remove_bulk,
    start_postgres,
)

FULL = {"npy": 1_000_000, "parquet": 1_000_000, "parquet-dir": 1_000_000, "lance": 1_000_000,
        "faiss": 1_000_000, "pgvector": 200_000, "chroma": 200_000, "qdrant": 50_000}
QUICK = {"npy": 20_000, "parquet": 20_000, "parquet-dir": 20_000, "lance": 20_000,
         "faiss": 20_000, "pgvector": 5_000, "chroma": 5_000, "qdrant": 300}


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


# ``python -m skalign ARGS`` with one addition: the CPU seconds (all threads) of the process over
# ``skalign.io.translate``, the span the command's own "in X s" times (its model load and imports
# are before; ``skalign.io`` is imported before that span in both), printed after the summary
_CLI = """import sys, time
import skalign.io
import skalign._stores.pipeline as _pipeline
from skalign.cli import main
_translate, _init, _t0 = skalign.io.translate, _pipeline.WriteBehind.__init__, [0.0]
def translate(*args, **kwargs):
    c0, _t0[0] = time.process_time(), time.perf_counter()
    try:
        return _translate(*args, **kwargs)
    finally:
        print(f"translate_cpu_s={time.process_time() - c0:.3f}", flush=True)
        print(f"translate_wall_s={time.perf_counter() - _t0[0]:.3f}", flush=True)
def init(self, write, *args, **kwargs):
    def timed(out, *rest):
        done = write(out, *rest)
        print(f"wrote_from={rest[-1]} t={time.perf_counter() - _t0[0]:.3f}", flush=True)
        return done
    _init(self, timed, *args, **kwargs)
_pipeline.WriteBehind.__init__ = init
_positions = _pipeline.verification_positions
def positions(*args, **kwargs):  # called once the output is open and its resume row known
    print(f"began t={time.perf_counter() - _t0[0]:.3f}", flush=True)
    return _positions(*args, **kwargs)
_pipeline.verification_positions = positions
skalign.io.translate = translate
sys.exit(main(sys.argv[1:], default_command="demo"))
"""


def run_cli(argv, env, kill_after=None):
    """``python -m skalign ...``: (status or None if killed, wall s, peak RSS MiB, output, CPU s).

    The output goes to a file (a pipe could fill up and stall the child); the peak RSS is
    polled every 20 ms until the child exits; the CPU seconds (user + system, all threads) are
    the child's own, from ``wait4``."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        p = subprocess.Popen([sys.executable, "-c", _CLI, *argv], stdout=log,
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
    from skalign._stores.pipeline import default_batch_size, output_dim

    batch = default_batch_size(X.shape[1], output_dim(model))
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


def within_span(took, span, allowed):
    """Whether a rerun's translation span (``span``, ``_CLI``) took at most ``allowed``: a rerun
    that found the output published (``took`` None) counts as in time, a missing timing as
    not."""
    return took is None or (None not in (allowed, span) and span <= allowed)


def rerun_times(text, n, full_s):
    """(the rerun's own time, the row it resumed at, the time it was allowed): the uninterrupted
    time × (rows left ÷ rows) + 0.1 × the uninterrupted time; (None, n, ...) for a rerun that
    found the output published."""
    if "already exists" in text:
        return None, n, 0.1 * full_s
    took = command_seconds(text)
    at = resumed_row(text)
    return (float("inf") if took is None else took), at, share_allowance(n, at, full_s)


def share_allowance(n, at, full_s):
    """The issue's rule for a rerun resumed at row ``at`` of ``n``: the uninterrupted time
    ``full_s`` × the share of rows left, + 10 % of ``full_s``."""
    return full_s * (n - at) / n + 0.1 * full_s


def write_times(text):
    """``[(first row of a write, seconds into the translation when it was done), ...]`` from the
    command's output (``_CLI`` prints a line per batch written)."""
    return [(int(a), float(b)) for a, b in re.findall(r"wrote_from=(\d+) t=([\d.]+)", text)]


def translate_wall(text):
    """The wall seconds of the command's translation span (``_CLI``), or None."""
    got = re.search(r"translate_wall_s=([\d.]+)", text)
    return float(got.group(1)) if got else None


def measured_allowance(full_text, at):
    """The remaining-work rule with the work left *measured*: the uninterrupted run's own time
    from the moment it had written the rows before ``at`` to its end, + 10 % of its whole time
    (``None`` without the timings). The row-share rule (:func:`rerun_times`) assumes every row
    costs the same; where an engine's writes grow dearer as the output grows (an HNSW index),
    the last rows cost more than their share."""
    wall, writes = translate_wall(full_text), write_times(full_text)
    if wall is None or not writes:
        return None
    return wall - _reached(writes, at) + 0.1 * wall


def _reached(writes, at):
    """Seconds into the run when its last write of rows before ``at`` was done (0 if none)."""
    return max([t for start, t in writes if start < at], default=0.0)


def began_at(text):
    """Seconds into the command's translation when its stores were open and its resume row
    known (``_CLI``), or None."""
    got = re.search(r"began t=([\d.]+)", text)
    return float(got.group(1)) if got else None


def started_allowance(full_text, at):
    """:func:`measured_allowance` with the uninterrupted run's start-up counted as work left:
    any run opens the stores (and loads what the engine loads with them) before its first row,
    a rerun as well, so the work left after a kill is that start-up and the uninterrupted run's
    own time from the last write before ``at`` to its end, + 10 % of its whole time (``None``
    without the timings)."""
    wall, writes, began = translate_wall(full_text), write_times(full_text), began_at(full_text)
    if wall is None or not writes or began is None:
        return None
    return began + wall - max(_reached(writes, at), began) + 0.1 * wall


def first_write(text):
    """Seconds into the translation when its first batch was written (committed), or None:
    the start-up and the pipeline's fill (the first batch read, translated and written with
    nothing before it to overlap)."""
    writes = write_times(text)
    return writes[0][1] if writes else None


def paced_s(text, at):
    """Seconds from the run's write of the batch that starts at row ``at`` to the end of its
    translation: the same rows, after the start-up and the fill, in a rerun resumed at ``at``
    and in an uninterrupted run (``None`` without that write)."""
    wall, writes = translate_wall(text), dict(write_times(text))
    return None if wall is None or at not in writes else wall - writes[at]


def filled_allowance(full_text, at):
    """The work left after row ``at`` with the start-up *and the pipeline's fill* counted: the
    uninterrupted run's time to its first write, then its own time from the write of the
    batch that starts at ``at`` to its end, + 10 % of its whole time (where every row was
    committed, its start-up and its time after the last write); ``None`` without the timings.
    Any run, a rerun too, writes its first batch only once that batch has been read,
    translated and loaded with nothing before it to overlap; the rows after it then come at
    the run's steady pace."""
    wall, writes, began = translate_wall(full_text), write_times(full_text), \
        began_at(full_text)
    if wall is None or not writes or began is None:
        return None
    paced = paced_s(full_text, at)
    if paced is not None:
        return writes[0][1] + paced + 0.1 * wall
    if at >= writes[-1][0]:
        return began + wall - writes[-1][1] + 0.1 * wall
    return None


def translate_cpu(text):
    """The CPU seconds of the command's translation span (``_CLI``), or None."""
    got = re.search(r"translate_cpu_s=([\d.]+)", text)
    return float(got.group(1)) if got else None


def resumed_in_time(text, n, full_s):
    """Whether a rerun after a kill took at most the remaining work + 10 %: its time ≤ the
    uninterrupted time × (rows left ÷ rows) + 0.1 × the uninterrupted time (a rerun that found
    the output published counts as in time)."""
    took, _, allowed = rerun_times(text, n, full_s)
    return took is None or took <= allowed


def leftovers(backend, root):
    inv = backend.inventory(root)
    bad = [x for x in inv if any(w in x for w in ("partial", "journal", "lock", ".tmp-"))]
    if backend.name in ("chroma", "pgvector"):
        bad += [x for x in inv if "skalign" in x and x not in bad]
    if backend.name == "chroma":  # a deleted collection's files left on the disk
        bad += [x for x in inv if x.startswith("orphan segment")]
    if backend.name == "qdrant":
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


def bench_backend(backend, n, kills, model_path, model, X, workdir, env, seed, repeats=1,
                  adjacent=False):
    root = Path(tempfile.mkdtemp(dir=workdir, prefix=f"{backend.name}-"))
    row = {"backend": backend.name, "rows": n}
    try:
        t0 = time.perf_counter()
        src = backend.make(root, X[:n])
        row["make_s"] = round(time.perf_counter() - t0, 1)
        _close_clients()
        source = backend.read(src)
        _close_clients()
        out = backend.output(root)
        engine_settle = getattr(backend, "settle", lambda: None)

        def settle():  # the pages written by the step before reach the disk before a timed one
            os.sync()
            engine_settle()

        if hasattr(backend, "warm_up"):
            backend.warm_up(root, source[0], np.asarray(model.transform(source[1]), np.float32))
            _close_clients()
        settle()
        load = os.getloadavg()[0]
        status, wall, rss, text, cpu = run_cli(["translate", model_path, src, out], env)
        assert status == 0, text
        secs = command_seconds(text)
        full_cpu, full_text = translate_cpu(text), text
        row.update(load_1min=round(load, 2), translate_s=round(secs, 2),
                   rows_per_s=round(n / secs), cli_wall_s=round(wall, 2), cli_cpu_s=round(cpu, 2),
                   peak_rss_mib=round(rss))
        result = backend.read(out)
        row["max_abs_diff"], row["fields_kept"] = compare(backend, model, source, result)
        after = backend.read(src)
        row["source_unchanged"] = bool(np.array_equal(after[1], source[1])
                                       and after[2] == source[2] and np.array_equal(after[0],
                                                                                    source[0]))
        def bulk_load(ids, V):
            if hasattr(backend, "prepare_bulk"):
                backend.prepare_bulk(root)
            settle()
            t0 = time.perf_counter()
            backend.bulk_load(root, ids, V)
            bulk = time.perf_counter() - t0
            os.sync()  # a file store's load is in the page cache; the translation's is on disk
            durable = time.perf_counter() - t0
            remove_bulk(root, backend)  # not timed: the translation deletes nothing
            _close_clients()
            return bulk, durable

        runs = [(secs, *bulk_load(result[0], result[1]))]
        for _ in range(1, repeats):  # alternated pairs: translation, then bulk load
            # into the same output, dropped first: the store holds what it held for the first
            # run (Qdrant's local mode loads every collection of the folder when it opens it)
            _drop(backend, root, out)
            settle()
            status, _, r_rss, r_text, _ = run_cli(["translate", model_path, src, out], env)
            assert status == 0, r_text
            rss = max(rss, r_rss)
            runs.append((command_seconds(r_text),
                         *bulk_load(result[0], result[1])))
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
        if kills:
            # the kill trials start from the store the uninterrupted run started from: Qdrant's
            # local mode loads every collection of the folder when a run opens it, so a folder
            # that still held the uninterrupted output made every rerun open (and hold) 50,000
            # more 768-d points than the run it is compared with
            _drop(backend, root, out)
        _close_clients()
        rng = np.random.default_rng(seed)
        resumed = identical = clean = mid_run = timely = timely_cpu = timely_measured = 0
        timely_started = timely_adjacent = timely_adjacent_started = 0

        def reference(target):
            """An uninterrupted run into the trial's output (dropped after): its output."""
            settle()
            status, _, _, ref_text, _ = run_cli(["translate", model_path, src, target], env)
            assert status == 0, ref_text
            _close_clients()
            _drop(backend, root, target)
            return ref_text

        for k in range(kills):
            target = backend.output(root, f"kill{k}")
            kill_after = (wall - secs) + rng.uniform(0, 1) * secs
            if adjacent and k % 2 == 0:  # before the kill on even trials, after on odd ones
                ref_text = reference(target)
            settle()  # both runs start as the uninterrupted one did
            status, _, _, _, _ = run_cli(["translate", model_path, src, target], env,
                                      kill_after=kill_after)
            killed = status is None  # else it had finished before the kill
            mid_run += killed
            settle()
            load = os.getloadavg()[0]
            status, _, rerun_rss, text, _ = run_cli(["translate", model_path, src, target],
                                                    env)
            took, at, allowed = rerun_times(text, n, secs)
            got, output_error = _output_digest(backend, target)
            # the same rule on the CPU seconds of the same span: the machine's other jobs
            # stretch wall times by whatever share of the cores they take at the moment
            cpu, cpu_allowed = translate_cpu(text), share_allowance(n, at, full_cpu)
            cpu_ok = took is None or (cpu is not None and cpu <= cpu_allowed)
            timely_cpu += cpu_ok
            # the work left measured on the uninterrupted run itself (see measured_allowance)
            m_allowed, m_took = measured_allowance(full_text, at), translate_wall(text)
            m_ok = within_span(took, m_took, m_allowed)
            timely_measured += m_ok
            s_allowed = started_allowance(full_text, at)
            s_ok = within_span(took, m_took, s_allowed)
            timely_started += s_ok
            TRIALS.append({"backend": backend.name, "rows": n, "kill": k,
                           "kill_after_s": round(kill_after, 2), "killed": killed,
                           "load_1min": round(load, 2), "full_s": secs, "resumed_at": at,
                           "rerun_s": "published" if took is None else took,
                           "allowed_s": round(allowed, 2),
                           "in_time": took is None or took <= allowed,
                           "full_cpu_s": full_cpu, "rerun_cpu_s": cpu,
                           "cpu_allowed_s": round(cpu_allowed, 2), "cpu_in_time": cpu_ok,
                           "rerun_translate_wall_s": m_took,
                           "measured_allowed_s": None if m_allowed is None else round(m_allowed, 2),
                           "in_measured_time": m_ok,
                           "rerun_began_s": began_at(text), "full_began_s": began_at(full_text),
                           "started_allowed_s": None if s_allowed is None
                           else round(s_allowed, 2),
                           "in_started_time": s_ok,
                           "rerun_peak_rss_mib": round(rerun_rss),
                           "rerun_status": status, "rerun_said": _last_line(text),
                           "output_error": output_error})
            # 0: resumed and finished; "already exists": the kill landed after the publish
            resumed += status == 0 or "already exists" in text
            timely += resumed_in_time(text, n, secs)
            identical += got == want
            _close_clients()
            clean += not leftovers(backend, root)
            _drop(backend, root, target)
            if adjacent:
                if k % 2 == 1:
                    ref_text = reference(target)
                ref_s = command_seconds(ref_text)
                _, _, a_allowed = rerun_times(text, n, ref_s)
                a_ok = took is None or took <= a_allowed
                as_allowed = started_allowance(ref_text, at)
                as_ok = within_span(took, m_took, as_allowed)
                timely_adjacent += a_ok
                timely_adjacent_started += as_ok
                TRIALS[-1].update(adjacent_full_s=ref_s, adjacent_allowed_s=round(a_allowed, 2),
                                  in_adjacent_time=a_ok,
                                  adjacent_started_allowed_s=None if as_allowed is None
                                  else round(as_allowed, 2),
                                  in_adjacent_started_time=as_ok)
        if kills:
            row["source_unchanged"] &= backend.digest(src) == source_before
            _close_clients()
        row.update(kills=kills, killed_mid_run=mid_run, resumed=resumed,
                   resumed_in_time=timely, identical=identical, no_leftovers=clean,
                   translate_cpu_s=full_cpu, resumed_in_cpu_time=timely_cpu,
                   resumed_in_measured_time=timely_measured,
                   resumed_in_started_time=timely_started)
        if adjacent:
            row.update(resumed_in_adjacent_time=timely_adjacent,
                       resumed_in_adjacent_started_time=timely_adjacent_started)
    finally:
        _close_clients()
        if backend.name == "pgvector":
            backend.reset()
        shutil.rmtree(root, ignore_errors=True)
    return row


def _drop(backend, root, address):
    """Remove a kill-study output so the next trial starts from nothing."""
    if backend.name == "pgvector":
        with backend._conn() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {address.split('table=')[1].split('&')[0]}")
    elif backend.name == "chroma":
        name = address.rsplit("/", 1)[1]
        if name in backend.inventory(root):  # a rerun that left no output: its trial says so
            backend.drop(root, name)
    elif backend.name == "qdrant":
        c = backend._client(root)
        name = address.split("?")[0].rsplit("/", 1)[1]
        target = {a.alias_name: a.collection_name for a in c.get_aliases().aliases}.get(name)
        if target is not None:
            c.delete_collection(target)
    else:
        p = Path(address)
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    _close_clients()


def _close_clients():
    from skalign._stores import qdrant as _qdrant

    _qdrant._close_all()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, help="one size for every backend")
    ap.add_argument("--sizes", help="sizes of some backends, e.g. npy=1e5,chroma=2e4")
    ap.add_argument("--kills", type=int, help="SIGKILLs per backend (default 10, quick 2)")
    ap.add_argument("--repeats", type=int, default=1, help="alternated translation/bulk-load "
                    "pairs per backend; the times and ratios are their medians (default 1)")
    ap.add_argument("--adjacent", action="store_true",
                    help="kill study: time an uninterrupted run beside each trial and judge "
                    "the rerun against it too (resumed_in_adjacent_time)")
    ap.add_argument("--backends", default="npy,parquet,parquet-dir,lance,faiss,chroma,qdrant,"
                    "pgvector")
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
    backends = {"npy": Npy(), "parquet": Parquet(), "parquet-dir": ParquetDir(),
                "lance": Lance(), "faiss": Faiss(), "chroma": Chroma(), "qdrant": Qdrant()}
    server = None
    rows = []
    try:
        if "pgvector" in names:
            server, base = start_postgres(workdir / "pg")
            backends["pgvector"] = PgVector(base)
        for i, name in enumerate(names):
            n = args.rows or sizes[name]
            row = bench_backend(backends[name], n, kills, model_path, model, X, workdir, env,
                                seed=i, repeats=args.repeats, adjacent=args.adjacent)
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
