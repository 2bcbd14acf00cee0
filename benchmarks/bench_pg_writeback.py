"""Write-back of a ``--continue`` step into a pgvector table under an HNSW index, by the step's
share of the table: where rebuilding the index beats updating rows under it.

A table of ``--rows`` rows (``id bigint`` primary key, a text, a 384-d ``vector`` column with an
HNSW ``vector_cosine_ops`` index, pgvector's defaults ``m = 16, ef_construction = 64``, and a
provenance column) is made anew before each measurement from a template (``CREATE TABLE AS``
and the index built, untimed). A step writes new vectors and marks into a random share of its
rows, compare-and-set against the marks read before, in one of these ways:

``batches``
    :meth:`~skalign._stores.pgvector.live.PgvectorLive.write_back` per 2,048 rows, each an
    ``UPDATE … FROM unnest(…)`` in its own transaction: the index gets every new row version
    (what ``RowMarks.write`` did before the bulk path).
``shadow``
    the rows ``COPY``-ed into a temporary table, then one ``UPDATE … FROM`` it, the index
    still in place.
``rebuild``
    in one transaction: ``DROP INDEX``, the rows ``COPY``-ed and one ``UPDATE … FROM``,
    ``CREATE INDEX`` again; readers wait for it, a kill rolls it all back.
``concurrent``
    ``DROP INDEX`` (committed), the ``UPDATE`` from the copied rows, then ``CREATE INDEX
    CONCURRENTLY`` (searches scan the table meanwhile).
``auto``
    ``RowMarks.write`` as it is now (the store's choice: :meth:`PgvectorLive.write_many`).

``batches`` or ``shadow``, where it took over ``--give-up`` times the best way at a share, is
not run at the larger shares (``-``). Prints seconds per way and share and the
cut-over: the smallest share where ``rebuild`` is faster than ``batches``.

Run: ``python benchmarks/bench_pg_writeback.py --rows 20000 --shares 0.01,0.05,0.1,0.2
--csv benchmarks/results/bench_pg_writeback.csv``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WAYS = ("batches", "shadow", "rebuild", "concurrent", "auto")
DIM = 384


def _connect(base):
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(base, autocommit=True)
    register_vector(conn)
    return conn


def make_template(conn, n, seed=0):
    """The table ``bench_tpl`` of ``n`` rows (vectors random normal), no vector index."""
    conn.execute("DROP TABLE IF EXISTS bench_tpl")
    conn.execute(f"CREATE TABLE bench_tpl (id bigint PRIMARY KEY, text text, emb vector({DIM}), "
                 "skalign_vector text)")
    rng = np.random.default_rng(seed)
    with conn.cursor() as cur, cur.copy("COPY bench_tpl FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["bigint", "text", "vector", "text"])
        for lo in range(0, n, 10000):
            V = rng.normal(size=(min(10000, n - lo), DIM)).astype(np.float32)
            for i, v in enumerate(V, lo):
                copy.write_row([i, f"t{i}", v, None if i % 3 else "translated:m0"])
    conn.execute("VACUUM ANALYZE bench_tpl")


def fresh_table(conn):
    """``bench`` anew from the template, with its HNSW index (untimed)."""
    conn.execute("DROP TABLE IF EXISTS bench")
    conn.execute("CREATE TABLE bench AS SELECT * FROM bench_tpl")
    conn.execute("ALTER TABLE bench ADD PRIMARY KEY (id)")
    conn.execute("COMMENT ON COLUMN bench.skalign_vector IS 'skalign provenance'")
    conn.execute("CREATE INDEX bench_hnsw ON bench USING hnsw (emb vector_cosine_ops)")
    conn.execute("VACUUM ANALYZE bench")


def step_rows(n, share, seed=1):
    """A step: sorted random ids, new vectors, their marks and the marks expected."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(n, max(1, int(round(share * n))), replace=False))
    V = rng.normal(size=(len(ids), DIM)).astype(np.float32)
    expected = [None if i % 3 else "translated:m0" for i in ids]
    return [int(i) for i in ids], V, ["translated:m1"] * len(ids), expected


def _copy_rows(conn, ids, V, marks, expected):
    conn.execute("CREATE TEMP TABLE bench_new (id bigint, v vector, m text, e text) "
                 "ON COMMIT DROP")
    with conn.cursor() as cur, cur.copy("COPY bench_new FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["bigint", "vector", "text", "text"])
        for row in zip(ids, V, marks, expected):
            copy.write_row(row)


UPDATE = ("UPDATE bench AS t SET emb = u.v, skalign_vector = u.m FROM bench_new AS u "
          "WHERE t.id = u.id AND t.skalign_vector IS NOT DISTINCT FROM u.e")


def way_shadow(base, address, rows):
    with _connect(base) as conn, conn.transaction():
        _copy_rows(conn, *rows)
        return conn.execute(UPDATE).rowcount


def way_rebuild(base, address, rows):
    with _connect(base) as conn, conn.transaction():
        conn.execute("DROP INDEX bench_hnsw")
        _copy_rows(conn, *rows)
        n = conn.execute(UPDATE).rowcount
        conn.execute("CREATE INDEX bench_hnsw ON bench USING hnsw (emb vector_cosine_ops)")
        return n


def way_concurrent(base, address, rows):
    with _connect(base) as conn:
        conn.execute("DROP INDEX bench_hnsw")
        with conn.transaction():
            _copy_rows(conn, *rows)
            n = conn.execute(UPDATE).rowcount
        conn.execute("CREATE INDEX CONCURRENTLY bench_hnsw ON bench USING hnsw "
                     "(emb vector_cosine_ops)")
        return n


def way_batches(base, address, rows):
    from skalign._stores import open_live

    ids, V, marks, expected = rows
    with open_live(address) as store:
        return sum(int(store.write_back(ids[lo:lo + 2048], V[lo:lo + 2048], marks[lo:lo + 2048],
                                        expected[lo:lo + 2048]).sum())
                   for lo in range(0, len(ids), 2048))


def way_auto(base, address, rows):
    from skalign._stores import open_live
    from skalign._stores.pipeline.translate import RowMarks

    ids, V, marks, expected = rows
    with open_live(address) as store:
        return RowMarks(ids, V, marks, expected).write(store, rebuild=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--shares", default="0.01,0.025,0.05,0.1,0.25,0.5")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--give-up", type=float, default=3.0)
    parser.add_argument("--csv", help="write the figures (key,value) to this file: "
                                      "WAY_ROWS_s per way and step size, rebuild_rows (the "
                                      "rows batches write in the time of a rebuild), "
                                      "cutover_share, load averages")
    parser.add_argument("--base", help="a libpq URI of a server with pgvector (default: one "
                                       "started here with pgserver)")
    args = parser.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",")]
    ways = args.ways.split(",")
    server = None
    if args.base is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _stores_harness import start_postgres

        folder = tempfile.mkdtemp(prefix="bench-pgwb-")
        server, base = start_postgres(folder)
    else:
        base = args.base
    address = f"{base}&table=bench&column=emb"
    fns = {"batches": way_batches, "shadow": way_shadow, "rebuild": way_rebuild,
           "concurrent": way_concurrent, "auto": way_auto}
    times, counts, gave_up = {}, {}, set()
    load_start = os.getloadavg()[0]
    try:
        with _connect(base) as conn:
            make_template(conn, args.rows)
            for share in shares:
                rows = step_rows(args.rows, share)
                for way in ways:
                    if way in gave_up:
                        continue
                    fresh_table(conn)
                    t = time.perf_counter()
                    counts[way, share] = fns[way](base, address, rows)
                    times[way, share] = time.perf_counter() - t
                best = min(times[w, share] for w in ways if (w, share) in times)
                # the ways that write row by row under the index grow with the share
                gave_up |= {w for w in ("batches", "shadow")
                            if times.get((w, share), 0) > args.give_up * best}
                print(f"share {share}: " + ", ".join(
                    f"{w} {times[w, share]:.2f} s ({counts[w, share]} rows)" for w in ways
                    if (w, share) in times), flush=True)
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(folder, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\n{args.rows} rows of {DIM}-d, HNSW (m 16, ef_construction 64); seconds per step "
          f"(rows written); load {load:.1f}")
    print(f"{'share':>7} {'rows':>7}" + "".join(f"{w:>12}" for w in ways))
    for share in shares:
        n = max(1, int(round(share * args.rows)))
        print(f"{share:>7.3f} {n:>7}" + "".join(
            f"{times[w, share]:>12.2f}" if (w, share) in times else f"{'-':>12}" for w in ways))
    cut = next((s for s in shares if ("rebuild", s) in times and ("batches", s) in times
                and times["rebuild", s] < times["batches", s]), None)
    if cut is None and any(("rebuild", s) in times for s in shares):
        cut = next((s for s in shares if ("batches", s) not in times), None)
    print(f"cut-over (rebuild faster than batches from): "
          f"{'not reached' if cut is None else f'share {cut}'}")
    # batches cost about the same per row at any share: the rows they write in a rebuild's time
    per_row = [times["batches", s] / max(1, int(round(s * args.rows))) for s in shares
               if ("batches", s) in times]
    rebuilds = [times["rebuild", s] for s in shares if ("rebuild", s) in times]
    rebuild_rows = np.median(rebuilds) / np.median(per_row) if per_row and rebuilds else None
    if rebuild_rows is not None:
        print(f"a rebuild costs what batches take for {rebuild_rows:.0f} rows "
              f"({rebuild_rows / args.rows:.1%} of the table)")
    if args.csv:
        figures = {"rows": args.rows, "dim": DIM, "load_avg_1min_start": load_start,
                   "load_avg_1min_end": load}
        for (way, share), t in times.items():
            figures[f"{way}_{max(1, int(round(share * args.rows)))}_s"] = round(t, 2)
        if rebuild_rows is not None:
            figures["rebuild_rows"] = round(float(rebuild_rows))
            figures["rebuild_share"] = round(float(rebuild_rows) / args.rows, 4)
            figures["batches_ms_per_row"] = round(1000 * float(np.median(per_row)), 2)
        if cut is not None:
            figures["cutover_share"] = cut
        with open(args.csv, "w") as f:
            f.write("key,value\n" + "".join(f"{k},{v}\n" for k, v in figures.items()))


if __name__ == "__main__":
    main()
