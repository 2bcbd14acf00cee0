"""What the benchmark scripts share: a peak-memory probe, table writers and the batch-size rule
of skalign's streamed translation.

The scripts run as ``python benchmarks/bench_*.py`` (this folder is then on ``sys.path``); the
test suite's ``load_benchmark`` fixture puts it there too.
"""

import csv
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
    the order they first appear (a row without a key leaves its cell empty). Makes the folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
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


def batch_rows(*floats_per_row, working_memory=128):
    """Rows per batch so that one batch's float32 numbers (``floats_per_row`` per row, summed)
    take about ``working_memory`` MiB: the rule ``skalign.io.translate`` documents for its
    default batches (input and output near 128 MiB), and, with scikit-learn's
    ``working_memory`` (1024 MiB by default), the one its estimators' ``transform`` uses."""
    return max(1, int(working_memory * 2**20 // max(1, 4 * int(sum(floats_per_row)))))
