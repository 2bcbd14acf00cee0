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


def test_ci_checks_its_own_install_right_after_installing():
    """CI's environment is checked against ``ci/constraints.txt`` by ``ci/check_install.py``,
    run by ``.ci/run`` on the line after the install; the user's test suite runs anywhere (with
    or without the constraints file), so it holds no check of CI's installed versions."""
    ci = _ci_lines()
    install = next(i for i, line in enumerate(ci) if "pip install -c ci/constraints.txt" in line)
    after = [line for line in ci[install + 1:] if line and not line.startswith("#")]
    assert after[0] == ".venv/bin/python ci/check_install.py"


def _check_install():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_install", ROOT / "ci" / "check_install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_install_finds_a_package_not_pinned_at_its_version(tmp_path, capsys):
    """``ci/check_install.py`` against constraints written from this environment: all pinned
    passes; one pin missing, or at another version, fails and names it."""
    import importlib.metadata as md

    pytest.importorskip("chromadb")
    check = _check_install()
    tree = sorted(check.dependency_tree("chromadb"))
    lines = [f"{name}=={md.version(name)}" for name in tree]
    (tmp_path / "all.txt").write_text("# pins\n" + "\n".join(lines) + "\n")
    assert check.main([str(tmp_path / "all.txt")]) == 0
    (tmp_path / "missing.txt").write_text("\n".join(lines[1:]) + "\n")
    assert check.main([str(tmp_path / "missing.txt")]) == 1
    assert f"{tree[0]}=={md.version(tree[0])}: installed, not pinned" in capsys.readouterr().err
    moved = [f"{tree[0]}==0.0.0", *lines[1:]]
    (tmp_path / "moved.txt").write_text("\n".join(moved) + "\n")
    assert check.main([str(tmp_path / "moved.txt")]) == 1
    assert f"{tree[0]}: pinned 0.0.0, installed {md.version(tree[0])}" in capsys.readouterr().err
    assert check.pins(ROOT / "ci" / "constraints.txt")["torch"] == "2.13.0"
