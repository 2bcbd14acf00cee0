"""The package's import graph: no cycles (imports inside functions count), a command line that
starts without torch or scikit-learn, and the public names where the docs say they are."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from skalign._registry import PUBLIC, SUBMODULES

PACKAGE = Path(__file__).resolve().parents[1] / "skalign"

#: modules that import other modules by name from a table (importlib), with those tables
DYNAMIC = {
    "skalign": sorted(set(PUBLIC.values()) | {f"skalign.{m}" for m in SUBMODULES}),
    "skalign._discovery": sorted(set(PUBLIC.values())),
}


def _modules(root=PACKAGE):
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(root=PACKAGE):
    """``module -> set of skalign modules it imports``, from every ``import`` statement anywhere
    in the file (module level, functions, methods) plus the table-driven imports of
    :data:`DYNAMIC`."""
    modules = _modules(root)
    graph = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        targets = set(DYNAMIC.get(name, ()))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module
                # `from pkg import sub` imports the submodule; `from mod import name` imports mod
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules]
                targets.update(subs or [mod])
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 30 and graph["skalign.cli"], "the walk found too few modules"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_cycle_finder_finds_a_lazy_import_cycle(tmp_path):
    """Negative control: a cycle closed by an import inside a function is found."""
    pkg = tmp_path / "skalign"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("import skalign.a\n")
    graph = import_graph(pkg)
    assert graph["skalign.c"] == {"skalign.a"}
    assert find_cycle(graph) in (["skalign.a", "skalign.b", "skalign.a"],
                                 ["skalign.b", "skalign.a", "skalign.b"])


def test_registry_names_where_each_public_name_lives():
    import skalign

    for name, module in PUBLIC.items():
        assert getattr(skalign, name).__module__ == module, name
    assert sorted(skalign.__all__) == sorted(PUBLIC)


@pytest.mark.parametrize("module", ["skalign", "skalign.cli"])
def test_command_line_starts_without_torch_or_sklearn(module):
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('torch', 'sklearn', 'scipy', 'pandas', 'pyarrow') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out


def test_help_does_not_import_torch():
    code = ("import sys\nfrom skalign.cli import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\nprint('torch' in sys.modules, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "False False", out


def test_exceptions_exports():
    from skalign import exceptions

    for name in ("StoreError", "DeviceWarning", "ModelFileError"):
        assert name in exceptions.__all__
    assert issubclass(exceptions.StoreError, ValueError)
    assert issubclass(exceptions.DeviceWarning, UserWarning)
