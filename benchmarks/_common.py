"""What the benchmark scripts share: a peak-memory probe, a table writer and an older version
of skalign to run beside the working tree's.

The scripts run as ``python benchmarks/bench_*.py`` (this folder is then on ``sys.path``); the
test suite's ``load_benchmark`` fixture puts it there too.
"""

import atexit
import csv
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil


class PeakRSS:
    """Peak resident set size of this process above its value at ``__enter__``.

    Sampled every ``interval`` seconds in a background thread (and once more on exit), so a
    spike shorter than the interval can be missed; use it for allocations that live at least
    tens of milliseconds, which is what the benchmarks measure.
    """

    def __init__(self, interval=0.005):
        self.interval, self.proc = interval, psutil.Process()

    def __enter__(self):
        self.start = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def mib(self):
        """Peak above the start, in MiB."""
        return (self.peak - self.start) / 2**20


def write_rows(path, rows):
    """Write ``rows`` (dicts) to the CSV file ``path``, a header first: every key of any row, in
    the order they first appear (a row without a key leaves its cell empty)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def write_figures(path, figures):
    """Write ``figures`` (a mapping, or ``(key, value)`` pairs) to the CSV file ``path`` as
    ``key,value`` rows under that header: the figures the user guide quotes (``:fig:``)."""
    items = figures.items() if hasattr(figures, "items") else figures
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["key", "value"])
        w.writerows(items)


def git_tree(rev, *paths, prefix="skalign_tree_"):
    """``rev``'s tree (or only ``paths`` of it), extracted with ``git archive`` into a new
    temporary folder, which is returned (the caller removes it when done)."""
    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, *paths],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp


def old_package(rev):
    """``rev``'s ``skalign/`` as the importable package ``skalign_old``, extracted with ``git
    archive`` into a temporary folder: a side-by-side run times the same work with the old and
    the new code alternately in one process, since the machine's load moves absolute times. The
    folder is removed when the process exits (its modules are imported by then)."""
    tmp = git_tree(rev, "skalign", prefix="skalign_old_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    (tmp / "skalign").rename(tmp / "skalign_old")
    sys.path.insert(0, str(tmp))
    return "skalign_old"
