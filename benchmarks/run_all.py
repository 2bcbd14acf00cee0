"""Run every ``benchmarks/bench_*.py`` script in turn, forwarding the arguments (e.g. ``--quick``).

    python benchmarks/run_all.py --quick
"""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    for script in sorted(here.glob("bench_*.py")):
        print(f"\n=== {script.name} {' '.join(sys.argv[1:])}", flush=True)
        sys.argv = [str(script)] + sys.argv[1:]
        runpy.run_path(str(script), run_name="__main__")
