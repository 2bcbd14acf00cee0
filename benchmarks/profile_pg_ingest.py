"""How fast PostgreSQL ingests a translation's batches on one connection and on two (issue 20):
``python benchmarks/profile_pg_ingest.py [ROWS] [REPEATS]`` (default ``2e5 2``).

Starts PostgreSQL with pgvector (``tests/store_backends.start_postgres``), makes a source table
of ``ROWS`` 384-d rows as ``benchmarks/bench_stores.py`` does, reads and translates every batch
first (384 → 768 Procrustes, the command's 8,192-row batches), then times the shadow writer's
loads alone, after a vacuum and a checkpoint each: ``one``: each batch loaded and committed on
one connection in turn; ``two``: the write-behind of ``skalign translate`` (two batches loading at
once on connections of their own, commits in order)."""

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]


def main(argv):
    import store_backends
    from bench_stores import make_model_and_rows

    from skalign import _stores

    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    n = int(float(argv[0])) if argv else 200_000
    repeats = int(argv[1]) if len(argv) > 1 else 2
    model, X = make_model_and_rows(n)
    with tempfile.TemporaryDirectory() as folder:
        server, base = store_backends.start_postgres(folder)
        try:
            backend = store_backends.PgVector(base)
            job = _stores.prepare_translation(model, backend.make(None, X), backend.output(None))
            batches = [(model.transform(v).astype("float32"), raw)
                       for v, raw, _ in job.reader.batches(job.batch_size)]
            writer = _stores.open_writer(job)
            with writer.lock():
                for rep in range(repeats):
                    for mode in ("one", "two"):
                        writer.begin("0" * 12)
                        backend.settle()
                        t0, start = time.perf_counter(), 0
                        if mode == "one":
                            for out, raw in batches:
                                writer.write_unit(writer.encode_unit(out, raw, None, start), raw,
                                                  None, start)
                                start += len(out)
                        else:
                            behind = _stores._WriteBehind(writer.write_unit, True,
                                                          writer.encode_unit)
                            for out, raw in batches:
                                behind.submit(out, raw, None, start)
                                start += len(out)
                            behind.wait()
                            behind.close()
                        print(f"rep={rep} mode={mode} rows={start} "
                              f"ingest_s={time.perf_counter() - t0:.2f}", flush=True)
                        writer.close()
                        writer.discard()
        finally:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
