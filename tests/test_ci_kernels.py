"""``ci/blas_kernels.py`` picks two OpenBLAS kernels other than the CPU's default, the wanted
Haswell and SkylakeX wherever the CPU can execute them, so CI reruns the suite under kernels of
other machines (issue: a test that held only on the CPU it last ran on)."""

import doctest
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("blas_kernels", ROOT / "ci" / "blas_kernels.py")
blas_kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(blas_kernels)

ZEN = {"sse3", "sse4_2", "avx", "avx2", "fma"}
SKYLAKE_X = ZEN | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}


@pytest.mark.parametrize("flags, default, expected", [
    # an AVX-512 machine whose default is SkylakeX: Haswell, and an older kernel in its place
    (SKYLAKE_X, "SkylakeX", ["Haswell", "Sandybridge"]),
    # the same machine with an OpenBLAS that defaults to something else: both wanted kernels
    (SKYLAKE_X, "Cooperlake", ["Haswell", "SkylakeX"]),
    # this project's 2-core AMD machines: default Haswell, no AVX-512
    (ZEN, "Haswell", ["Sandybridge", "Nehalem"]),
    # an old AVX-only CPU
    ({"sse3", "sse4_2", "avx"}, "Sandybridge", ["Nehalem", "Prescott"]),
])
def test_two_kernels_other_than_the_default(flags, default, expected):
    plan = blas_kernels.choose_kernels(flags, default)
    assert [k for k, _ in plan] == expected
    assert default not in expected
    assert all(blas_kernels.NEEDS[k] <= flags for k in expected)  # never a SIGILL


def test_reasons_say_why_a_wanted_kernel_was_replaced():
    reasons = dict(blas_kernels.choose_kernels(ZEN, "Haswell"))
    assert reasons["Nehalem"] == "in place of SkylakeX: this CPU has no AVX-512"
    assert reasons["Sandybridge"] == "in place of Haswell: Haswell is this CPU's default kernel"
    failures, _ = doctest.testmod(blas_kernels)
    assert failures == 0


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse3 avx2 fma\n\nflags\t\t: other\n")
    assert blas_kernels.cpu_flags(info) == {"fpu", "sse3", "avx2", "fma"}
    assert blas_kernels.cpu_flags(tmp_path / "missing") == set()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux")
def test_each_planned_kernel_is_taken_by_openblas():
    """The override reaches numpy's OpenBLAS here, for the kernels this CPU gets. A check of
    CI's set-up (numpy's wheels, whose OpenBLAS picks its kernel at run time): skipped where
    numpy uses another BLAS."""
    default = blas_kernels.openblas_kernel()
    if not default:
        pytest.skip("numpy here does not use an OpenBLAS that chooses its kernel at run time "
                    "(CI's numpy wheels do): OPENBLAS_CORETYPE cannot be checked")
    plan = blas_kernels.choose_kernels(blas_kernels.cpu_flags(), default)
    assert len(plan) == 2
    for kernel, _ in plan:
        env = dict(os.environ, OPENBLAS_CORETYPE=kernel)
        assert blas_kernels.openblas_kernel(env).lower() == kernel.lower()


def test_plan_option_runs_nothing():
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "blas_kernels.py"), "--plan"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "default OpenBLAS kernel:" in proc.stdout
    assert "test suite under" not in proc.stdout


@pytest.mark.parametrize("argv, select", [
    (["--", "tests/test_demo.py", "-q"], ["-m", "not kernel_independent"]),
    (["--all", "--", "tests/test_demo.py", "-q"], []),
])
def test_passes_leave_out_the_kernel_independent_tests(monkeypatch, argv, select):
    """Each pass runs pytest under its kernel without the ``kernel_independent`` tests (they
    ran once under the default kernel), unless ``--all``."""
    ran = []
    monkeypatch.setattr(blas_kernels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(blas_kernels, "cpu_flags", lambda: SKYLAKE_X)
    monkeypatch.setattr(blas_kernels, "openblas_kernel", lambda env=None: (
        env or {}).get("OPENBLAS_CORETYPE", "SkylakeX"))
    monkeypatch.setattr(blas_kernels.subprocess, "run", lambda cmd, env: ran.append(
        (env["OPENBLAS_CORETYPE"], cmd)) or subprocess.CompletedProcess(cmd, 0))
    assert blas_kernels.main(argv) == 0
    assert [k for k, _ in ran] == ["Haswell", "Sandybridge"]
    for _, cmd in ran:
        assert cmd[1:] == ["-m", "pytest", "-p", "no:cacheprovider", *select,
                           "tests/test_demo.py", "-q"]


def test_the_kernel_independent_modules_exist():
    """A module renamed or removed from conftest's list would silently run under every
    kernel again (or a new name never match): each name is a test module of the suite."""
    from conftest import KERNEL_INDEPENDENT

    assert sorted(n for n in KERNEL_INDEPENDENT if not (ROOT / "tests" / n).is_file()) == []
