"""Start-up time of the ``skalign`` command line against a bare ``python -c "import numpy"``.

    python benchmarks/bench_startup.py [--runs 20]

Each command runs ``--runs`` times in a fresh interpreter (the same one running this script),
timed from process start to exit, after one untimed warm-up run that fills the OS file cache. The
table gives the median, the minimum and the median's ratio to ``import numpy`` on the same
machine (issue 20's target: ``skalign --help`` ≤ 5x). ``skalign --help`` runs what the console
script runs (``from skalign.cli import main; main()``). ``translate`` loads a
:class:`~skalign.ProcrustesAligner` model file and translates a 10,000 × 384 ``.npy`` store; the
last column says whether torch was imported on the way. ``hyperfine`` gives the same medians
where it is installed; this script needs nothing beyond Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_PROBE = "\nimport sys\nprint('torch' in sys.modules)"

COMMANDS = {
    "python -c pass": "pass",
    'python -c "import numpy"': "import numpy",
    "skalign --help": ("from skalign.cli import main\ntry:\n    main(['--help'])\n"
                       "except SystemExit:\n    pass"),
    "import skalign": "import skalign",
    "import torch": "import torch",
}


def _translate_command(folder):
    return ("from skalign.cli import main; "
            f"main(['translate', '--quiet', {str(folder / 'model.skops')!r}, "
            f"{str(folder / 'in.npy')!r}, {str(folder / 'out.npy')!r}])")


def _make_model(folder, d=384, n=10_000):
    from skalign import ProcrustesAligner
    from skalign.io import save

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, d)).astype(np.float32)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
    save(ProcrustesAligner().fit(X, X @ Q), folder / "model.skops")
    np.save(folder / "in.npy", rng.standard_normal((n, d)).astype(np.float32))


def time_command(code, runs):
    """Wall-clock seconds of ``runs`` fresh interpreters running ``code`` (after one warm-up),
    and whether torch was imported."""
    cmd = [sys.executable, "-c", code + _PROBE]
    env = dict(os.environ)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    torch_loaded = out.strip().splitlines()[-1] == "True"
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, check=True)
        times.append(time.perf_counter() - t0)
    return times, torch_loaded


def run(runs, with_translate=True, with_torch=True, log=print):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        commands = {k: v for k, v in COMMANDS.items() if with_torch or k != "import torch"}
        if with_translate:
            _make_model(Path(tmp))
            commands["skalign translate (Procrustes, 10,000 x 384 .npy)"] = \
                _translate_command(Path(tmp))
        for name, code in commands.items():
            times, torch_loaded = time_command(code, runs)
            rows.append({"command": name, "median": statistics.median(times),
                         "min": min(times), "torch": torch_loaded})
            log(f"{name}: median {rows[-1]['median']:.3f} s")
    base = next(r["median"] for r in rows if r["command"] == 'python -c "import numpy"')
    for r in rows:
        r["ratio"] = r["median"] / base
    return rows


def format_table(rows, runs):
    head = f"{'command':52s} {'median s':>9s} {'min s':>7s} {'/ numpy':>8s}  torch imported"
    lines = [f"{runs} runs each, fresh interpreter per run ({sys.executable})", head,
             "-" * len(head)]
    for r in rows:
        lines.append(f"{r['command']:52s} {r['median']:9.3f} {r['min']:7.3f} "
                     f"{r['ratio']:7.2f}x  {'yes' if r['torch'] else 'no'}")
    helped = next(r for r in rows if r["command"] == "skalign --help")
    lines.append(f"skalign --help / import numpy = {helped['ratio']:.2f}x "
                 f"(target <= 5x: {'met' if helped['ratio'] <= 5 else 'NOT met'})")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--no-translate", action="store_true",
                   help="skip the translate row (it fits and saves a model first)")
    p.add_argument("--no-torch", action="store_true", help="skip the `import torch` row")
    args = p.parse_args(argv)
    rows = run(args.runs, with_translate=not args.no_translate, with_torch=not args.no_torch,
               log=lambda s: None)
    print(format_table(rows, args.runs))
    return rows


if __name__ == "__main__":
    main()
