"""The README's set-up promises, the CI script and pyproject.toml agree."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _readme_commands():
    """The README's shell commands: one list of lines per ``bash`` block."""
    return [block.splitlines() for block in re.findall(r"```bash\n(.+?)\n```", README, re.S)]


def _ci_lines():
    return [line.strip() for line in CI.splitlines()]


def test_readme_has_two_commands_and_ci_runs_them_in_order():
    """Command 1 makes the venv, installs and runs the demo; command 2 runs the tests; CI runs
    every line of both, verbatim and in the same order."""
    commands = _readme_commands()
    assert len(commands) == 2
    setup, tests = commands
    assert setup[0] == "python3 -m venv .venv"
    assert setup[-1] == ".venv/bin/python -m skalign"
    assert tests == [".venv/bin/python -m pytest"]
    ci = _ci_lines()
    positions = [ci.index(line) for line in setup + tests]
    assert positions == sorted(positions)


def test_no_command_runs_outside_the_venv():
    """A stock machine has ``python3`` only (PEP 668: no ``pip install`` outside a venv), so after
    creating the venv every command goes through ``.venv/bin``."""
    lines = [line for block in _readme_commands() for line in block]
    lines += [line for line in _ci_lines() if line and not line.startswith(("#", "echo", "export"))]
    for line in lines:
        first = line.split()[0]
        assert first not in {"python", "pip", "pip3", "pytest", "ruff", "sphinx-build"}, line
        if first == "python3":
            assert line == "python3 -m venv .venv", line


def test_ci_stops_at_the_first_failure():
    """``set -e`` ignores a failure before the last command of an ``&&`` list: CI has none."""
    assert "set -euo pipefail" in CI
    for line in _ci_lines():
        if line.startswith(".venv/bin/") or line.startswith("python3"):
            assert "&&" not in line and "||" not in line, line


def test_requires_python_matches_what_is_tested():
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"  # tomllib; scipy 1.17 / sklearn 1.9 need 3.11
    prefix = "Programming Language :: Python :: 3."
    tested = [c for c in project["classifiers"] if c.startswith(prefix)]
    assert tested == ["Programming Language :: Python :: 3.11"]


def test_license_metadata():
    project = PYPROJECT["project"]
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "skalign developers" in text
    urls = project["urls"]
    assert all(u.startswith("https://github.com/skalign/skalign") for u in urls.values())


def test_readme_documents_choosing_the_torch_build():
    assert "--index-url https://download.pytorch.org/whl/cpu" in README
    assert "CUDA build" in README
    assert "no multi-GB CUDA wheels" not in README


def test_readme_minimum_versions_match_pyproject():
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, minimum = re.match(r"([A-Za-z0-9_-]+)>=([0-9.]+)", requirement).groups()
        display = {"scikit-learn": "scikit-learn", "pot": "POT"}.get(name, name)
        assert f"{display} ≥ {minimum}" in README, f"README must state {display} ≥ {minimum}"


def test_ci_constraints_pin_torch_and_importable_geomstats():
    constraints = (ROOT / "ci" / "constraints.txt").read_text()
    assert "torch==2.13.0" in constraints
    assert re.search(r"numpy==2\.[0-3]\.", constraints)
    for extra in ("tests", "reference"):
        assert "numpy<2.4" in PYPROJECT["project"]["optional-dependencies"][extra]


def test_readme_tour_runs():
    """Every python block of the README runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.+?)\n```", README, re.S)
    assert len(blocks) == 2
    ns = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    A, B, te, labels = ns["A"], ns["B"], ns["te"], ns["labels"]
    assert ns["stitched"].score(A[te], labels[te]) > 0.9
    exec(compile(blocks[1], "README.md", "exec"), ns)
    assert ns["irp"].score(A[te], B[te]) > 0.9
    assert ns["boot"].anchor_pairs_.shape == (285, 2)
    assert ns["gera"].score(A[te], B[te]) > 0.58  # chance: 1/719; measured 0.64
    assert ns["ensemble"].score(ns["views"][te], labels[te]) > 0.9


def _pins():
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "ci" / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def _built_from_constraints(pins):
    """Whether this environment was installed from ``ci/constraints.txt`` (as CI's is): the
    pinned versions of the packages the README installs directly are the installed ones. A user
    or a packager testing against other releases is not, and the pins say nothing about it."""
    import importlib.metadata as md

    for name in ("numpy", "scipy", "scikit-learn", "chromadb", "pyarrow"):
        try:
            if md.version(name) != pins.get(name):
                return False
        except md.PackageNotFoundError:
            return False
    return True


def test_ci_constraints_pin_every_dependency_of_chromadb():
    """chromadb pulls in some 80 packages; CI is reproducible only if each is pinned, at the
    version installed here. A check of CI's own environment: skipped in one not built from
    ``ci/constraints.txt``."""
    import importlib.metadata as md

    pytest.importorskip("chromadb")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = _pins()
    if not _built_from_constraints(pins):
        pytest.skip("this environment was not installed from ci/constraints.txt (other "
                    "releases of numpy, scipy, scikit-learn, chromadb or pyarrow): its pins "
                    "are CI's, not this environment's")
    seen, todo = set(), ["chromadb"]
    while todo:
        for text in md.distribution(todo.pop()).requires or []:
            req = Requirement(text)
            name = canonicalize_name(req.name)
            if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
                continue
            try:
                md.distribution(name)
            except md.PackageNotFoundError:  # an optional dependency not installed
                continue
            seen.add(name)
            todo.append(name)
    assert len(seen) > 50
    assert sorted(seen - set(pins)) == []
    assert {n: md.version(n) for n in seen} == {n: pins[n] for n in seen}
