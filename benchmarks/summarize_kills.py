"""One table of every committed kill study of ``bench_stores.py`` (issue 20), for the user guide.

``python benchmarks/summarize_kills.py [--out benchmarks/results/stores_kills_summary.csv]``

Reads the studies' result files (``results/stores_kills_*.csv``, each written by
``bench_stores.py --kills 10 ... --csv FILE``) in the order they were measured (:data:`STUDIES`,
oldest first) and writes one row per backend and study: the study's file, its size, the kills,
how many landed before the command ended, and of the reruns how many finished (``resumed``),
gave the uninterrupted run's result (``identical``), left nothing behind (``no_leftovers``) and
took at most the uninterrupted time × the share of rows left + 10 %, by wall clock
(``in_time``) and by CPU seconds (``in_cpu_time``), and at most the uninterrupted run's own time
for the rows left + 10 % (``in_measured_time``), and that with its start-up (opening the
stores) counted as work left too (``in_started_time``); with ``--adjacent``, the first and
the last rule against an uninterrupted run timed beside each trial (``in_adjacent_time``,
``in_adjacent_started_time``); empty where a study predates the column or ran without it.
``latest`` marks each backend's most recent study at its largest size.
"""

import argparse
import csv
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

#: The kill studies' files, oldest first (the order of their commits).
STUDIES = [
    "stores_kills_engines.csv",
    "stores_kills_files.csv",
    "stores_kills_readers.csv",
    "stores_kills_chroma.csv",
    "stores_kills_chroma_qdrant.csv",
    "stores_kills_parquet.csv",
    "stores_kills_full.csv",
    "stores_kills_parquet_full.csv",
    "stores_kills_parquet_encode2.csv",
    "stores_kills_parquet_dir_encode2.csv",
    "stores_kills_lance_full.csv",
    "stores_kills_direct.csv",
    "stores_kills_direct_dir.csv",
    "stores_kills_direct_rerun.csv",
    "stores_kills_pgvector.csv",
    "stores_kills_sync.csv",
    "stores_kills_chroma_gathered.csv",
    "stores_kills_chroma_200k.csv",
    "stores_kills_qdrant_50k.csv",
    "stores_kills_chroma_200k_fixed.csv",
    "stores_kills_qdrant_50k_float32.csv",
    "stores_kills_chroma_200k_phases.csv",
    "stores_kills_qdrant_50k_adjacent.csv",
    "stores_kills_chroma_200k_adjacent.csv",
    "stores_kills_chroma_200k_adjacent10.csv",
    "stores_kills_npy_zero_copy.csv",
    "stores_kills_npy_zero_copy2.csv",
]

COLUMNS = ["study", "backend", "rows", "kills", "killed_mid_run", "resumed", "identical",
           "no_leftovers", "in_time", "in_cpu_time", "in_measured_time", "in_started_time",
           "in_adjacent_time", "in_adjacent_started_time", "latest"]


def summarize(results=RESULTS, studies=STUDIES):
    """The summary rows (dicts of :data:`COLUMNS`), oldest study first; files not there are
    skipped."""
    rows = []
    for name in studies:
        path = Path(results) / name
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if not r.get("kills") or int(float(r["kills"])) == 0:
                    continue
                rows.append({"study": name, "backend": r["backend"], "rows": int(r["rows"]),
                             "kills": int(r["kills"]),
                             "killed_mid_run": int(r["killed_mid_run"]),
                             "resumed": int(r["resumed"]), "identical": int(r["identical"]),
                             "no_leftovers": int(r["no_leftovers"]),
                             "in_time": int(r["resumed_in_time"]),
                             "in_cpu_time": r.get("resumed_in_cpu_time") or "",
                             "in_measured_time": r.get("resumed_in_measured_time") or "",
                             "in_started_time": r.get("resumed_in_started_time") or "",
                             "in_adjacent_time": r.get("resumed_in_adjacent_time") or "",
                             "in_adjacent_started_time":
                                 r.get("resumed_in_adjacent_started_time") or "",
                             "latest": False})
    largest = {}
    for r in rows:
        largest[r["backend"]] = max(largest.get(r["backend"], 0), r["rows"])
    last = {}
    for k, r in enumerate(rows):
        if r["rows"] == largest[r["backend"]]:
            last[r["backend"]] = k
    for k in last.values():
        rows[k]["latest"] = True
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(RESULTS / "stores_kills_summary.csv"))
    args = ap.parse_args(argv)
    rows = summarize()
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(",".join(str(r[c]) for c in COLUMNS))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
