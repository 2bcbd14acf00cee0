"""The package's import graph: no cycles (imports inside functions count), a command line that
starts without torch or scikit-learn, and the public names where the docs say they are."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from skalign._registry import PUBLIC, SUBMODULES
from skalign._stores.registry import BACKENDS

PACKAGE = Path(__file__).resolve().parents[1] / "skalign"

#: modules that import other modules by name from a table (importlib), with those tables
DYNAMIC = {
    "skalign": sorted(set(PUBLIC.values()) | {f"skalign.{m}" for m in SUBMODULES}),
    "skalign.utils._discovery": sorted(set(PUBLIC.values())),
    "skalign._stores.registry": sorted({f"skalign._stores.{m}" for b in BACKENDS.values()
                                        for m in (b["module"], b["engine"].rpartition(".")[0],
                                                  b["live"].rpartition(".")[0])}),
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


def test_estimator_names_table_matches_the_estimator_classes():
    from skalign._registry import ESTIMATOR_NAMES
    from skalign.utils._discovery import public_estimators

    assert ESTIMATOR_NAMES == {name for name, _ in public_estimators()}


_TRANSLATE_WITHOUT_TORCH = r"""
import sys
from skalign.cli import main
from skalign.io import load, translate

folder = sys.argv[1]
translate(load(folder + "/procrustes.skops"), folder + "/in.npy", folder + "/procrustes.npy")
main(["translate", "--quiet", folder + "/linear.skops", folder + "/in.npy", folder + "/linear.npy"])
print(sorted(m for m in ("torch", "dask") if m in sys.modules))
"""


def test_translating_with_a_numpy_model_never_imports_torch(tmp_path):
    """``skalign translate`` (and skalign.io) with an affine model: numpy from load to write."""
    import numpy as np
    import torch

    from skalign import LinearAligner, ProcrustesAligner
    from skalign.io import save

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((300, 12)) * rng.uniform(2, 8, (300, 1))).astype(np.float32)
    Y = rng.standard_normal((300, 6)).astype(np.float32)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)  # raw -> unit: the normalising path runs too
    models = {"procrustes": ProcrustesAligner().fit(X, Y), "linear": LinearAligner().fit(X, Y)}
    assert {m.normalize_ for m in models.values()} == {"source"}
    for name, model in models.items():
        save(model, tmp_path / f"{name}.skops")
    new = (rng.standard_normal((1000, 12)) * 3).astype(np.float32)
    np.save(tmp_path / "in.npy", new)
    proc = subprocess.run([sys.executable, "-c", _TRANSLATE_WITHOUT_TORCH, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
    for name, model in models.items():
        out = np.load(tmp_path / f"{name}.npy")
        assert out.dtype == np.float32 and out.shape == (1000, 6)
        # the torch path (a tensor input) computes the same map
        np.testing.assert_allclose(out, model.transform(torch.from_numpy(new)), rtol=1e-5,
                                   atol=1e-6)


def test_pot_is_not_a_runtime_dependency():
    """POT is the tests' reference for Sinkhorn, not something the package imports."""
    import tomllib

    graph_imports = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                graph_imports.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                graph_imports.add(node.module.split(".")[0])
    assert "ot" not in graph_imports
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("pot") for d in project["dependencies"])
    assert any(d.startswith("pot") for d in project["optional-dependencies"]["tests"])


#: the translation's own layers above the backends: no backend imports them
PIPELINE = {"skalign._stores.pipeline.translate", "skalign._stores.pipeline.streaming",
            "skalign._stores.pipeline.verify", "skalign._stores.backups",
            "skalign._stores.provenance", "skalign._stores.registry"}


def _reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_no_backend_reaches_the_pipeline(kind):
    """A store backend imports only the layers below it (address, base, shadow, journal, its
    engine's helpers), directly or through anything it imports."""
    graph = import_graph()
    entry = BACKENDS[kind]
    for module in (entry["module"], entry["engine"].rpartition(".")[0],
                   entry["live"].rpartition(".")[0]):
        module = f"skalign._stores.{module}"
        assert not (_reachable(graph, module) & PIPELINE), module


def test_no_module_over_700_lines():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > 700}
    assert long == {}


#: where a string naming an engine's kind may stand outside the engine's own module or folder:
#: ``(module, top-level name it is assigned to)`` (``None``: anywhere in the module), with why
KIND_NAMES_ALLOWED = {
    # the registry's table: kind -> engine, reader, writer, live store (it names every kind)
    ("skalign._stores.registry", "BACKENDS"): "the registry's table",
    # the address syntax: which suffix, scheme or form names which kind
    ("skalign._stores.address", "PATH_KINDS"): "the scheme table (file suffixes)",
    ("skalign._stores.address", "FOLDER_KIND"): "the scheme table (a folder of shards)",
    ("skalign._stores.address", "LIBPQ_KIND"): "the scheme table (postgresql://)",
    ("skalign._stores.address", "COLLECTION_KINDS"): "the scheme table (KIND:DIR/COLLECTION)",
    ("skalign._stores.address", "NAMED_VECTOR_KINDS"): "the scheme table (?vector=NAME)",
    ("skalign._stores.address", "FILE_TABLE_KINDS"): "the scheme table (SCHEME:PATH?table=)",
    ("skalign._stores.address", "SERVER_SCHEMES"): "the scheme table (SCHEME://HOST/NAME)",
}


def _engine_homes():
    """The module or folder of each engine: ``skalign._stores.npy``, ``skalign._stores.chroma``
    (a folder: every module in it)."""
    return {f"skalign._stores.{entry[key].split('.')[0]}" for entry in BACKENDS.values()
            for key in ("engine", "module", "live")}


def kind_names_outside_engines(root=PACKAGE):
    """``(module, line, kind)`` of each string literal that is an engine's kind in a module
    outside that engine's module or folder, except where :data:`KIND_NAMES_ALLOWED` says."""
    kinds, homes, found = set(BACKENDS), _engine_homes(), []
    for name, path in _modules(root).items():
        if any(name == home or name.startswith(home + ".") for home in homes):
            continue
        tree = ast.parse(path.read_text(), str(path))
        owner = {}  # literal node -> the top-level name its statement assigns or defines
        for stmt in tree.body:
            targets = [getattr(stmt, "name", None)] + [
                t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
                if isinstance(t, ast.Name)]
            for node in ast.walk(stmt):
                owner[node] = next((t for t in targets if t), None)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in kinds \
                    and (name, None) not in KIND_NAMES_ALLOWED \
                    and (name, owner.get(node)) not in KIND_NAMES_ALLOWED:
                found.append((name, node.lineno, node.value))
    return found


def test_no_kind_named_outside_its_engine():
    """What the shared code asks of a kind it asks of the kind's Engine: no module outside
    ``skalign/_stores/<engine>`` names an engine's kind (but the tables allowed above)."""
    assert kind_names_outside_engines() == []


def test_kind_name_check_finds_a_branch(tmp_path):
    """Negative control: a branch on a kind's name outside the engines is found; the engines'
    own modules are not."""
    pkg = tmp_path / "skalign"
    (pkg / "_stores" / "chroma").mkdir(parents=True)
    for init in (pkg, pkg / "_stores", pkg / "_stores" / "chroma"):
        (init / "__init__.py").write_text("")
    (pkg / "shared.py").write_text("def f(a):\n    return a.kind == 'qdrant'\n")
    (pkg / "_stores" / "chroma" / "store.py").write_text("kind = 'chroma'\n")
    assert kind_names_outside_engines(pkg) == [("skalign.shared", 2, "qdrant")]
