"""The public face names nothing private (issue 59): no public module lists an underscored name
in ``__all__``, and no message skalign raises or warns names one of its private modules
(``skalign._stores``, ``skalign.plan._law``), which a user can neither import nor look up in the
documentation."""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "skalign"

PUBLIC_MODULES = ["skalign", "skalign.base", "skalign.datasets", "skalign.encoders",
                  "skalign.exceptions", "skalign.io", "skalign.manifold", "skalign.metrics",
                  "skalign.parallel", "skalign.plan", "skalign.search", "skalign.utils",
                  "skalign.cli"]

#: a dotted path of the package with a private part: ``skalign._stores``, ``skalign.plan._law``
PRIVATE_MODULE = re.compile(r"\bskalign(?:\.[A-Za-z]\w*)*\._\w+")


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_lists_public_names_that_exist(name):
    module = importlib.import_module(name)
    listed = list(getattr(module, "__all__", []))
    assert listed, f"{name} has no __all__"
    assert [n for n in listed if n.startswith("_")] == []
    assert [n for n in listed if not hasattr(module, n)] == []


def test_every_public_submodule_is_checked():
    """The list above is the package's public submodules (``skalign._registry.SUBMODULES``)
    with the package itself and the command line."""
    from skalign._registry import SUBMODULES

    assert sorted(PUBLIC_MODULES) == sorted(["skalign", "skalign.cli",
                                             *(f"skalign.{n}" for n in SUBMODULES)])


def _strings(node):
    """The literal text of ``node``: string constants and the constant parts of f-strings,
    through concatenations and ``%``/``.format`` calls."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def _call_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _assigned(scope):
    """``{name: [value nodes]}`` of the plain assignments in a function (or module) body."""
    found = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                and isinstance(node.target, ast.Name):
            found.setdefault(node.target.id, []).append(node.value)
    return found


def _docstrings(tree):
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def user_messages(tree):
    """``(line, text)`` of the strings of each message in a module: the arguments of what it
    raises, of ``warn``/``warning``/``print``/``write`` calls and of the command line's
    ``CommandError``, with the values assigned to a name passed there in the same function; and
    any other string that reads as prose (it holds a space: a note, a report line), which a
    table of module paths or an import does not. Docstrings are the developers' and are left
    out."""
    found = []
    scopes = [tree] + [n for n in ast.walk(tree)
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        names = _assigned(scope)
        body = scope.body if isinstance(scope, ast.Module) else [scope]
        for node in (n for part in body for n in ast.walk(part)):
            args = []
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                args = [*node.exc.args, *(k.value for k in node.exc.keywords)]
            elif isinstance(node, ast.Call) and _call_name(node) in {
                    "warn", "warning", "print", "write", "CommandError", "warning_line"}:
                args = [*node.args, *(k.value for k in node.keywords)]
            for arg in args:
                texts = _strings(arg)
                for name in (n.id for n in ast.walk(arg) if isinstance(n, ast.Name)):
                    texts += [t for value in names.get(name, []) for t in _strings(value)]
                found += [(node.lineno, t) for t in texts]
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            text = node.value
        else:
            continue
        if re.search(r"\s", text):
            found.append((node.lineno, text))
    return found


def private_module_messages(root=PACKAGE):
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, text in user_messages(tree):
            for match in PRIVATE_MODULE.finditer(text):
                found.add((str(path.relative_to(root.parent)), line, match.group(0)))
    return sorted(found)


def test_no_message_names_a_private_module():
    found = private_module_messages()
    assert found == [], "\n".join(f"{p}:{line}: {name}" for p, line, name in found)


def test_the_message_search_finds_a_private_module(tmp_path):
    """Negative control: a raised message, a warning, a message assigned before the raise and a
    note that name a private module are found; a docstring and an import path are not."""
    pkg = tmp_path / "skalign"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        '"""See skalign._docs_only."""\n'
        "import importlib\n"
        "import warnings\n"
        "def f(x):\n"
        '    importlib.import_module("skalign._loaded")\n'
        "    if x:\n"
        '        raise ValueError(f"{x}: see skalign._raised")\n'
        '    warnings.warn("skalign._warned " + str(x))\n'
        '    msg = "see skalign.plan._assigned"\n'
        '    notes = [f"{x} items, by the law (skalign.plan._noted)"]\n'
        "    raise RuntimeError(msg, notes)\n")
    assert {name for _, _, name in private_module_messages(pkg)} == {
        "skalign._raised", "skalign._warned", "skalign.plan._assigned", "skalign.plan._noted"}
