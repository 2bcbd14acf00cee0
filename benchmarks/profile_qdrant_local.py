"""Where a translation into Qdrant's local mode spends its time, against the engine's own bulk
load (issue 20): ``python benchmarks/profile_qdrant_local.py ROWS`` (e.g. ``5e4``).

Makes a source collection of ``ROWS`` 384-d points (named vectors ``text`` and ``title``,
payloads) in a temporary folder as ``benchmarks/bench_stores.py`` does, translates it in this
process under ``cProfile`` (``skalign._stores.translate_store``, 384 → 768 Procrustes), prints
the wall and CPU seconds and the functions with the most cumulative time, then times the
benchmark's bulk load (batched ``upsert`` of the translated vectors into a new collection)."""

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]


def main(argv):
    import cProfile
    import pstats

    import store_backends
    from bench_stores import make_model_and_rows

    from skalign._stores.pipeline import translate_store

    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    n = int(float(argv[0]))
    model, X = make_model_and_rows(n)
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        backend = store_backends.Qdrant()
        src, out = backend.make(root, X), backend.output(root)
        profile = cProfile.Profile()
        t0, c0 = time.perf_counter(), time.process_time()
        profile.enable()
        translate_store(model, src, out)
        profile.disable()
        print(f"translate_s={time.perf_counter() - t0:.2f} "
              f"translate_cpu_s={time.process_time() - c0:.2f}")
        pstats.Stats(profile).sort_stats("cumulative").print_stats(22)
        ids, V = backend.read(out)[:2]
        t0 = time.perf_counter()
        backend.bulk_load(root, ids, V)
        print(f"bulk_load_s={time.perf_counter() - t0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
