"""The README's set-up promises, the CI script and pyproject.toml agree."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _readme_commands():
    return re.findall(r"```bash\n(.+?)\n```", README)


def test_readme_has_exactly_two_commands_and_ci_runs_them():
    commands = _readme_commands()
    assert len(commands) == 2
    for command in commands:
        assert command in CI


def test_readme_minimum_versions_match_pyproject():
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, minimum = re.match(r"([A-Za-z0-9_-]+)>=([0-9.]+)", requirement).groups()
        display = {"scikit-learn": "scikit-learn", "pot": "POT"}.get(name, name)
        assert f"{display} ≥ {minimum}" in README, f"README must state {display} ≥ {minimum}"


def test_ci_constraints_pin_cpu_torch_and_importable_geomstats():
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
    assert ns["gera"].score(A[te], B[te]) > 0.58  # chance: 1/719; alpha=0: 0.54
    assert ns["ensemble"].score(ns["views"][te], labels[te]) > 0.9
