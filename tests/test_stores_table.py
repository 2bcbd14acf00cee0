"""The table at the top of doc/user_guide/stores.rst says what tests/store_capabilities.py says,
for every engine of the registry, and each "yes" there is a test that the suite collects for that
engine and that runs here (its engine installed, so not skipped)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from store_capabilities import ENGINES, FORMS, TESTS, rows

from skalign._stores.address import parse_address
from skalign._stores.registry import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "doc" / "user_guide" / "stores.rst"

#: the modules a test of each kind needs beyond the registry's client (its importorskip)
ALSO_NEEDS = {"pgvector": ["pgserver", "pgvector"], "milvus": ["milvus_lite"],
              "sqlite-vec": ["sqlite_vec"], "duckdb": ["duckdb_extension_vss"],
              "lance": ["lancedb"]}

#: a pytest plugin that prints each collected test's function and its parameters' values
PLUGIN = '''
import json


def pytest_collection_modifyitems(items):
    seen = {}
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = item.nodeid.split("::")[0].rsplit("/", 1)[-1] + "::" + item.originalname
        seen.setdefault(name, []).extend(str(v) for v in params.values())
    print("COLLECTED " + json.dumps(seen))
'''


def list_table(text):
    """The rows of the first ``list-table`` of ``text``: a list of cells per row."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(".. list-table::"))
    table, row = [], None
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        if (m := re.match(r"   \* - (.*)", line)):
            row = [m.group(1)]
            table.append(row)
        elif (m := re.match(r"     - (.*)", line)):
            row.append(m.group(1))
        elif line.strip() and not line.strip().startswith(":"):
            row[-1] += " " + line.strip()  # a cell continued on the next line
    return table


def test_the_guide_table_is_the_capabilities():
    got = list_table(PAGE.read_text(encoding="utf-8"))
    assert got == rows()


def test_every_engine_of_the_registry_has_a_row():
    assert sorted(ENGINES) == sorted(BACKENDS) and len(set(ENGINES)) == len(ENGINES)
    assert sorted(FORMS) == sorted(BACKENDS)


@pytest.mark.parametrize("kind", sorted(FORMS))
def test_each_address_form_is_the_engines(kind):
    for form, example, _ in FORMS[kind]:
        assert parse_address(example, output=True).kind == kind, (form, example)


def test_every_yes_is_collected_for_its_engine_and_runs_here(tmp_path):
    """Collect every test of :data:`TESTS` in one pytest process: a test parametrised over
    engines runs exactly the kinds listed (other variants beside them allowed, e.g. a keyless
    table), a test that is not names its engines; the modules those engines import are
    installed."""
    (tmp_path / "table_plugin.py").write_text(PLUGIN)
    tests = {test for column in TESTS.values() for test in column}
    modules = sorted({f"tests/{t.split('::')[0]}" for t in tests})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "table_plugin",
         "--collect-only", "-q", "--basetemp", str(tmp_path / "bt"), *modules],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("COLLECTED "))
    collected = json.loads(line[len("COLLECTED "):])
    for column, by_test in TESTS.items():
        for test, kinds in by_test.items():
            assert test in collected, f"{column}: {test} is not collected"
            ran = {v for v in collected[test] if v in ENGINES}
            if ran:
                assert ran == set(kinds), (column, test, sorted(ran))
            else:  # a test of its engines alone names them
                named = [k for k in kinds if k.replace("-", "_") not in test.lower()]
                assert not named, f"{column}: {test} is not parametrised over {named}"
            for kind in kinds:
                needs = [BACKENDS[kind]["needs"], *ALSO_NEEDS.get(kind, [])]
                missing = [m for m in needs if m and importlib.util.find_spec(m) is None]
                assert not missing, f"{column} of {kind}: {missing} not installed here"
