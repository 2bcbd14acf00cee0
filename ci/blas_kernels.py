"""Run the test suite again under other OpenBLAS kernels, so a test that holds only on the CPU it
last ran on fails here rather than on a newcomer's machine.

numpy and scipy dispatch their BLAS to a kernel chosen for the CPU (``OPENBLAS_CORETYPE`` overrides
the choice). Kernels sum in different orders, so floats differ in their last bits from one CPU to
another, and anything compared exactly or with a thin margin can pass on one machine and fail on
the next. This script reruns ``pytest`` under the kernels of the CPUs people have — ``Haswell``
(AVX2) and ``SkylakeX`` (AVX-512) — where this CPU can execute them; a kernel it cannot execute
(SkylakeX without AVX-512 dies with SIGILL on the first instruction) is replaced by an older one
it can, so every CI run still tests two kernels other than the default. Each pass gets a fresh
``SKALIGN_DATA`` folder: the cached digit encoders are then trained again under that kernel, as
they would be on another machine.

The passes leave out the tests marked ``kernel_independent`` (``tests/conftest.py`` lists their
modules: the storage engines' transactions, kill points and hostile names, and checks of the
source tree). They compare every vector with a result computed in the same run under the same
kernel, so another kernel tests nothing new in them, and they are about 60 % of the suite's
time: CI runs them once, under the default kernel. ``--all`` runs them too.

Usage::

    python ci/blas_kernels.py              # two passes of the suite less kernel_independent
    python ci/blas_kernels.py --all        # two passes of the whole suite
    python ci/blas_kernels.py --plan       # print the kernels it would use, run nothing
    python ci/blas_kernels.py -- tests/test_demo.py -q   # arguments after -- go to pytest

Exit status: 0 when every pass passes, else the first failing pass's status.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

#: Kernels to run and the CPU flags each needs; a kernel the CPU lacks is replaced by the first
#: fallback it can execute that is neither the default kernel nor already chosen.
WANTED = ("Haswell", "SkylakeX")
FALLBACKS = ("Sandybridge", "Nehalem", "Prescott")
NEEDS = {
    "SkylakeX": {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"},
    "Haswell": {"avx2", "fma"},
    "Sandybridge": {"avx"},
    "Nehalem": {"sse4_2"},
    "Prescott": {"sse3"},
}


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The instruction-set flags of the first CPU in ``/proc/cpuinfo`` (empty set elsewhere)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def openblas_kernel(env=None):
    """The OpenBLAS kernel numpy uses in a fresh interpreter with environment ``env``."""
    code = ("import numpy, threadpoolctl\n"
            "print(next((i['architecture'] for i in threadpoolctl.threadpool_info()"
            " if i['internal_api'] == 'openblas'), ''))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc.stdout.strip() if proc.returncode == 0 else None


def choose_kernels(flags, default):
    """``[(kernel, reason)]``: the wanted kernels this CPU runs, each one it cannot replaced.

    >>> choose_kernels({"sse3", "sse4_2", "avx", "avx2", "fma"}, "Zen")
    [('Haswell', 'wanted'), ('Sandybridge', 'in place of SkylakeX: this CPU has no AVX-512')]
    """
    chosen = []
    for kernel in WANTED:
        if NEEDS[kernel] <= flags and kernel != default:
            chosen.append((kernel, "wanted"))
            continue
        why = (f"{kernel} is this CPU's default kernel" if NEEDS[kernel] <= flags else
               f"this CPU has no {'AVX-512' if kernel == 'SkylakeX' else 'AVX2/FMA'}")
        for other in FALLBACKS:
            if (NEEDS[other] <= flags and other != default
                    and other not in [k for k, _ in chosen]):
                chosen.append((other, f"in place of {kernel}: {why}"))
                break
    return chosen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="print the kernels and exit")
    parser.add_argument("--all", action="store_true",
                        help="run the kernel_independent tests too (tests/conftest.py)")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args(argv)
    if platform.machine() not in ("x86_64", "AMD64"):
        print(f"SKIPPED: OpenBLAS kernels are x86-64 ones; this machine is {platform.machine()}")
        return 0
    default = openblas_kernel()
    plan = choose_kernels(cpu_flags(), default)
    print(f"default OpenBLAS kernel: {default}; passes: "
          + "; ".join(f"{k} ({why})" for k, why in plan))
    if args.plan:
        return 0
    for kernel, _ in plan:
        with tempfile.TemporaryDirectory(prefix=f"skalign-{kernel}-") as data:
            env = dict(os.environ, OPENBLAS_CORETYPE=kernel, SKALIGN_DATA=data)
            got = openblas_kernel(env)
            if got is None or got.lower() != kernel.lower():
                print(f"OpenBLAS did not take OPENBLAS_CORETYPE={kernel} (reports {got!r})")
                return 1
            print(f"::: test suite under OPENBLAS_CORETYPE={kernel}", flush=True)
            select = [] if args.all else ["-m", "not kernel_independent"]
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *select,
                   *args.pytest_args]
            status = subprocess.run(cmd, env=env).returncode
            if status:
                print(f"FAILED under OPENBLAS_CORETYPE={kernel} (exit {status})")
                return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
