"""``skalign info`` of a migrated pgvector table by its size: provenance counted and vector
lengths sampled by PostgreSQL (no vector or text read), against the row-by-row count (the
hooks removed: what ``info`` did before).

Each size is a table made in SQL with ``generate_series`` (384-d vectors, texts ``t<i>``, a
fifth of the rows encoded with their text's digest, a fifth encoded from an older text, the
rest translated) and a migration stamp; ``info`` runs in its own process, timed from its
start and, inside it, from after the imports (the interpreter's and skalign's start apart).
Prints one table: size, how, wall from the process' start, wall of ``info`` itself.

Run: ``python benchmarks/bench_pg_info.py --rows 100000,1000000 --csv
benchmarks/results/bench_pg_info.csv``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: run in a child process: ``info`` with or without the SQL hooks, timed after the imports
CHILD = """
import sys, time
t0 = time.perf_counter()
from skalign.cli import main
from skalign._stores.pgvector.live import PgvectorLive
if sys.argv[2] == "rows":
    del PgvectorLive.count_marks, PgvectorLive.sample_norms
t1 = time.perf_counter()
main(["info", sys.argv[1]])
print("INFO_SECONDS", time.perf_counter() - t1, t1 - t0, file=sys.stderr)
"""


def make_table(conn, n, name):
    """The table ``name`` of ``n`` rows (see the module docstring)."""
    conn.execute(f"DROP TABLE IF EXISTS {name}")
    conn.execute("DROP TABLE IF EXISTS bench_base")
    conn.execute("CREATE TABLE bench_base AS SELECT b, (SELECT array_agg(random()::real) FROM "
                 "generate_series(1, 384) WHERE b >= 0)::vector(384) AS v "
                 "FROM generate_series(0, 999) b")
    conn.execute(
        f"CREATE TABLE {name} AS SELECT g AS id, 't' || g AS text, v AS emb, CASE g % 5 "
        "WHEN 0 THEN 'encoded:enc::' || left(encode(sha256(convert_to('t' || g, 'UTF8')), "
        "'hex'), 16) WHEN 1 THEN 'encoded:enc::' || left(encode(sha256(convert_to('old' || "
        "g, 'UTF8')), 'hex'), 16) ELSE 'translated:map' END AS skalign_vector FROM "
        f"generate_series(0, {int(n) - 1}) g JOIN bench_base ON b = g % 1000")
    conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)")
    conn.execute(f"VACUUM ANALYZE {name}")


def run(address, how):
    """Wall seconds of ``info`` in a child process: from its start, and after its imports."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, address, how], capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - t0
    line = [x for x in done.stderr.splitlines() if x.startswith("INFO_SECONDS")][-1].split()
    return wall, float(line[1]), float(line[2]), done.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000")
    parser.add_argument("--skip-rows-at", type=int, default=10**7,
                        help="no row-by-row run from this size on")
    parser.add_argument("--csv", help="write the figures (key,value) to this file")
    args = parser.parse_args(argv)
    import pgserver
    import psycopg

    from skalign._stores.address import parse_address
    from skalign._stores.provenance import write_stamp

    figures = [("load_avg_1min_start", round(os.getloadavg()[0], 1))]
    workdir = Path(tempfile.mkdtemp(prefix="bench_pg_info-"))
    server = pgserver.get_server(workdir / "pg", cleanup_mode="stop")
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        base = f"postgresql://postgres@/postgres?host={workdir / 'pg'}"
        print(f"{'rows':>9} {'how':5} {'wall s':>7} {'info s':>7} {'start s':>7}")
        for n in map(int, args.rows.split(",")):
            with psycopg.connect(base, autocommit=True) as conn:
                t0 = time.perf_counter()
                make_table(conn, n, "bench")
                made = time.perf_counter() - t0
            address = f"{base}&table=bench&column=emb"
            write_stamp(parse_address(address), {
                "skalign": "bench", "model": "m", "source": "s", "source_identity": "s",
                "written": "now", "rows": n, "d_in": 384, "d_out": 384,
                "migration": {"encoder": "enc", "map": "map", "method": "procrustes",
                              "estimate": None, "encoded_rows": n // 5, "rows": n}})
            outs = {}
            for how in ("sql", "rows") if n < args.skip_rows_at else ("sql",):
                wall, info, start, outs[how] = run(address, how)
                figures += [(f"{how}_{n}_{k}", round(v, 2)) for k, v in
                            (("wall_s", wall), ("info_s", info), ("start_s", start))]
                print(f"{n:9,} {how:5} {wall:7.2f} {info:7.2f} {start:7.2f}   "
                      f"(table made in {made:.0f} s)", flush=True)
            if len(outs) == 2:
                same = [a for a, b in zip(outs["sql"].splitlines(), outs["rows"].splitlines())
                        if a != b and "mean vector length" not in a]
                print(json.dumps({"rows": n, "counts_lines_equal": not same}))
            print(outs["sql"])
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.csv:
        from _common import write_figures

        write_figures(args.csv, figures)


if __name__ == "__main__":
    main()
