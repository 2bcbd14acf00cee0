"""Where ``translate_store``'s time goes, per phase, for one file store (issue 20).

``python benchmarks/profile_stores.py KIND ROWS`` (KIND: npy, parquet, parquet-dir, lance,
faiss; ROWS e.g. 2e5) makes a source of ROWS 384-d rows as ``bench_stores.py`` does, translates
it in this process with the 384 → 768 Procrustes model, and prints the wall and CPU seconds
(CPU: of the thread that ran it; a BLAS product's helper threads are not counted there, only
in the total) spent in each phase: ``read`` (the reader's batches), ``transform`` (each
batch's ``model.transform`` and finite check, main thread), ``write_unit`` (the write-behind
thread, fsyncs and journal included; for the single Parquet file the encoding is apart,
``encode_unit``, in threads of its own, their seconds added up), ``fsync``, ``journal``,
``begin`` (opening the shadow: on a resume, reading the journal and cutting the shadow back),
``finish``, ``verify`` (of which ``verify:
source rows``, the sampled rows a crashed run committed read back from the input, and ``verify:
output rows``, the sampled rows read back from the shadow), ``publish``, ``start to first
write`` (until the writer gets its first batch) — then the engine's bulk load of the same output
and the ratio (not with ``--no-bulk``). Phases overlap (the writes run beside
the transform), so the wall times do not add up to the total.

``python benchmarks/profile_stores.py KIND ROWS --resume-after F``: the same phases for a
resumed run. The store is translated once uninterrupted (its time is the reference), then again
into another output with every batch committed and the run stopped (an exception from the
transform, as a crash would, leaving the shadow) after the batch that reaches the share F of the
rows; the rerun that resumes it is the one profiled, against the time the issue allows it:
uninterrupted × rows left ÷ rows + 10 % of uninterrupted. ``read (first batch)`` is the time to
the first batch, where a reader that skips the committed rows by reading them shows up.

``python benchmarks/profile_stores.py parquet ROWS --kill-at F``: the same, but the run before the
profiled one is ``python -m skalign translate`` in a child process, SIGKILLed as soon as its
shadow holds the share F of the output's vector bytes, as the kill study kills it: commits
every ``COMMIT_SECONDS``, batches written after the last commit cut off by the rerun, their
disk writes perhaps still going on. It prints how much was written and how much committed.

``--encode-depth N``: the single Parquet file encodes N batches at once
(``skalign._stores.ENCODE_DEPTH``, default 2; 1 is the earlier one at a time). ``--help``
lists the options.

``--no-direct``: the ``.npy`` shadow, the single Parquet file and the Parquet folder's parts
written through the page cache, each batch's write-back started at once, as before direct I/O
(``skalign._stores.direct_io.SequentialWriter``).

``--no-writeback`` (with ``--no-direct``, or where a file system has no direct I/O): without
that early write-back (``skalign._stores.direct_io.start_writeback``), so that the commits' ``fsync``
waits with and without it can be compared. ``--no-bulk``: the
translation only, without the bulk load (which reads the whole output back first).
"""

import collections
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import store_backends as sb  # noqa: E402
from bench_stores import make_model_and_rows  # noqa: E402

import skalign._shadow as shadow  # noqa: E402
import skalign._stores as stores  # noqa: E402
import skalign._stores.direct_io as direct_io  # noqa: E402

SPENT = collections.defaultdict(float)
_LOCK = threading.Lock()
T0 = [0.0]  # when the profiled translation started


def timed(owner, name, label):
    """Wrap ``owner.name`` so its wall and thread CPU seconds add up under ``label``."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            with _LOCK:
                SPENT[label] += time.perf_counter() - t0
                SPENT[label + " (cpu)"] += time.thread_time() - c0

    setattr(owner, name, wrapper)


class _Crash(BaseException):
    """Stops a run the way a kill would: not a ``StoreError``, so the shadow stays resumable."""


def instrument(model_cls):
    """Wrap the phases of :func:`skalign._stores.translate_store` (in this process) with timers
    adding up in ``SPENT``. On the model's class: an attribute of the model would change the
    job's fingerprint (a resume would start afresh)."""
    timed(stores._BatchTranslator, "__call__", "transform")
    timed(stores, "_verify", "verify")
    for cls in (stores._NpyReader, stores._ParquetReader, stores._LanceReader):
        timed(cls, "take", "verify: source rows")  # rows a crashed run committed
    timed(os, "fsync", "fsync")
    timed(stores, "write_journal", "journal")
    timed(shadow, "write_journal", "journal")
    # inside write_unit (the single Parquet file: encode_unit, in ENCODE_DEPTH threads, their
    # seconds added up): the output batch made, pyarrow's encoding and the unit's footer
    # written (Parquet), the early write-back started, the footer read back (single file)
    timed(stores, "_output_batch", "write: output batch")
    timed(direct_io, "start_writeback", "write: start write-back")
    timed(stores._ParquetFileWriter, "_footer", "write: footer read back")
    import pyarrow.parquet as pq

    timed(pq.ParquetWriter, "write_batch", "write: pyarrow write_batch")
    timed(pq.ParquetWriter, "close", "write: pyarrow close")
    open_writer, open_reader = stores.open_writer, stores.open_reader

    def writer(job):
        w = open_writer(job)
        for name in ("write_unit", "encode_unit", "finish", "publish", "begin"):
            if hasattr(w, name):
                timed(w, name, name)
        timed(w, "fetch", "verify: output rows")
        write_unit = w.write_unit

        def first_write(*args, **kwargs):  # how long the writer waited for its first batch
            if "start to first write" not in SPENT:
                SPENT["start to first write"] = time.perf_counter() - T0[0]
            return write_unit(*args, **kwargs)

        w.write_unit = first_write
        return w

    def reader(*args, **kwargs):
        T0[0] = time.perf_counter()  # the first thing a translation does is open its input
        r = open_reader(*args, **kwargs)
        batches = r.batches

        def timed_batches(*a, **k):
            it = batches(*a, **k)
            first = True
            while True:
                t0 = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    SPENT["read"] += time.perf_counter() - t0
                    if first:
                        SPENT["read (first batch)"] += time.perf_counter() - t0
                        first = False
                yield item

        r.batches = timed_batches
        return r

    stores.open_writer, stores.open_reader = writer, reader


def report():
    for label, secs in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"  {label:28s} {secs:7.2f}")


def _killed_run(model, src, out, root, n, share):
    """``skalign translate`` in a child process, SIGKILLed once its shadow holds ``share`` of
    the output's vector bytes (what is written then, committed or not, as a kill leaves it)."""
    import json
    import signal
    import subprocess

    from skalign.io import save

    model_path = str(save(model, root / "model.skops"))
    job = stores.prepare_translation(model, src, out)
    writer = stores.open_writer(job)
    partial, journal = writer.partial, writer.journal
    want = share * n * job.d_out * 4
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-m", "skalign", "translate", model_path, src,
                              out, "--quiet"], env=env, cwd=ROOT)
    while child.poll() is None:
        if partial.exists() and partial.stat().st_size >= want:
            child.send_signal(signal.SIGKILL)
            child.wait()
            break
        time.sleep(0.005)
    else:
        raise SystemExit(f"the translation ended before {share:.0%} of it was written")
    size = partial.stat().st_size
    state = json.loads(journal.read_text()) if journal.exists() else {}
    committed = state.get("rows", sum(u[-1] for u in state.get("units", state.get("parts", []))))
    print(f"killed with {size / 2**20:.0f} MiB in the shadow (about "
          f"{size / (job.d_out * 4):,.0f} rows' vectors), {committed:,} rows committed")


def parse_args(argv=None):
    import argparse

    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="See this script's docstring for what each phase covers.")
    ap.add_argument("kind", choices=["npy", "parquet", "parquet-dir", "lance", "faiss"])
    ap.add_argument("rows", type=lambda v: int(float(v)), help="rows of the source, e.g. 1e6")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--resume-after", type=float, metavar="F",
                     help="profile the run that resumes one stopped after the share F of rows")
    how.add_argument("--kill-at", type=float, metavar="F",
                     help="parquet: profile the run after one SIGKILLed at the share F")
    ap.add_argument("--no-writeback", action="store_true",
                    help="without the early write-back after each batch's write")
    ap.add_argument("--no-direct", action="store_true",
                    help="the shadow written through the page cache, not with direct I/O")
    ap.add_argument("--no-bulk", action="store_true", help="the translation only")
    ap.add_argument("--encode-depth", type=int, default=None, metavar="N",
                    help="batches the single Parquet file encodes at once "
                         "(skalign._stores.ENCODE_DEPTH; 1: one at a time, as before)")
    args = ap.parse_args(argv)
    if args.kill_at is not None and args.kind != "parquet":
        ap.error("--kill-at: KIND parquet only")  # the others' shadows do not grow as written
    return args


def main():
    args = parse_args()
    bulk = not args.no_bulk
    if args.no_writeback:  # the commits' fsyncs without the early write-back
        direct_io._SYNC_FILE_RANGE.append(None)
    if args.no_direct:
        for cls in (shadow.NpyShadow, stores._ParquetFileWriter, stores._ParquetWriter):
            cls.direct = False
    if args.encode_depth is not None:
        stores.ENCODE_DEPTH = args.encode_depth
    kind, n = args.kind, args.rows
    resume_after, kill_at = args.resume_after, args.kill_at
    model, X = make_model_and_rows(n)
    backend = {"npy": sb.Npy(), "parquet": sb.Parquet(), "parquet-dir": sb.ParquetDir(),
               "lance": sb.Lance(), "faiss": sb.Faiss()}[kind]
    root = Path(tempfile.mkdtemp(prefix="profile-stores-"))
    try:
        src, out = backend.make(root, X), backend.output(root)
        full_s = None
        if resume_after is not None:
            from skalign._stores import journal as _journal

            t0 = time.perf_counter()
            stores.translate_store(model, src, backend.output(root, "uninterrupted"))
            full_s = time.perf_counter() - t0
            _journal.COMMIT_SECONDS = 0  # the crashed run commits every batch
            # on the class: an attribute of the model would change the job's fingerprint
            cls, done = stores._BatchTranslator, [0]
            transform = cls.__call__

            def crashing(self, X_, start):
                if done[0] + len(X_) > resume_after * n:
                    raise _Crash
                done[0] += len(X_)
                return transform(self, X_, start)

            cls.__call__ = crashing
            try:
                stores.translate_store(model, src, out)
            except _Crash:
                pass
            finally:
                cls.__call__ = transform
            _journal.COMMIT_SECONDS = 1.0
        if kill_at is not None:
            t0 = time.perf_counter()
            stores.translate_store(model, src, backend.output(root, "uninterrupted"))
            full_s = time.perf_counter() - t0
            _killed_run(model, src, out, root, n, kill_at)
        instrument(type(model))
        c0, t0 = time.process_time(), time.perf_counter()
        result = stores.translate_store(model, src, out)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{kind} {n} rows: {total:.2f} s wall, {cpu:.2f} s CPU (all threads), "
              f"load {os.getloadavg()[0]:.2f}")
        if full_s is not None:
            left = n - result.resumed_from
            allowed = full_s * left / n + 0.1 * full_s
            print(f"  resumed at row {result.resumed_from}; uninterrupted {full_s:.2f} s, "
                  f"allowed {allowed:.2f} s, took {total:.2f} s "
                  f"({'in' if total <= allowed else 'NOT in'} time)")
        report()
        if bulk:
            ids, V, _ = backend.read(out)
            t0 = time.perf_counter()
            backend.bulk_load(root, ids, V)
            secs = time.perf_counter() - t0
            sb.remove_bulk(root, backend)
            print(f"  bulk load {secs:.2f} s, ratio {secs / total:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
