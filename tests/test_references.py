"""No reference to a file or a module that does not exist (issue 59).

Every tracked text file of the repository (``git ls-files``: the package, the tests, the
benchmarks, the examples, the documentation, CI's scripts) is searched for

* paths of the repository's own files: ``benchmarks/NAME.py``, ``examples/NAME.py``,
  ``tests/NAME.py``, ``doc/.../NAME.rst``, and any other file under ``benchmarks/``,
  ``examples/``, ``tests/``, ``doc/``, ``ci/``, ``maint_tools/`` or ``skalign/`` named with
  its suffix — each must be in the working tree;
* dotted paths ``skalign.a.b``: a module of the package, or a name defined in one — each must
  be found (the module's file, then the name by import; by the module's source where a
  dependency of it is not installed);
* Sphinx roles with a relative target in the package's docstrings (``:mod:`.name```,
  ``:func:`~.name```) — each must resolve from the module it is written in or a package
  above it.

History is the one exception, and it is checked too: a path that has left the tree may be named
where the text says which commit keeps it — its paragraph names that commit (``commit
``5ae3bf6```` or ``git show 5ae3bf6:benchmarks/NAME.py``), or its page declares one commit for
every name on it with a placeholder path (``git show 5ae3bf6:PATH``,
``5ae3bf6:benchmarks/NAME.py``) — and ``git cat-file`` must find the file in that commit.
The old module paths that model files record (``skalign._registry.MOVED_MODULES``) are history
of the same kind. A path a command line writes (``--csv PATH``, ``> PATH``) is not a reference.
"""

import ast
import functools
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: suffixes of the files searched (and CI's script, which has none)
TEXT_SUFFIXES = {".py", ".rst", ".md", ".txt", ".toml", ".cfg", ".sh"}
TEXT_NAMES = {".ci/run"}

#: a path of one of the repository's files, with its suffix; not part of a longer path or URL
PATH = re.compile(
    r"(?<![\w./-])((?:benchmarks|examples|tests|doc|ci|maint_tools|skalign)/[\w/.-]*\w\.[A-Za-z]\w*)")
#: placeholders in generic paths (``git show 5ae3bf6:benchmarks/NAME.py``)
PLACEHOLDER = re.compile(r"(?:^|/)(?:NAME|PATH|KIND|FILE|STEM)(?:[./]|$)")
#: a dotted path in the package, not part of a longer name, URL or file name
DOTTED = re.compile(r"(?<![\w./-])skalign(?:\.(?!_\b)[A-Za-z_]\w*)+")
#: a Sphinx role whose target is relative to the module it is written in
RELATIVE_ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):`~?(\.[A-Za-z_][\w.]*)`")
#: a commit named in a paragraph (7 to 40 hexadecimal digits)
COMMIT = re.compile(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w-])")
#: what a command line writes is not a reference: ``--csv PATH``, ``> PATH``
OUTPUT = re.compile(r"(?:--(?:csv|out|output)[ =]|>\s*)$")
#: a page's commit for every name on it: a commit, a colon and a placeholder path
PAGE_COMMIT = re.compile(r"([0-9a-f]{7,40}):(?:[\w/.-]*/)?(?:NAME|PATH)\b")

#: strings that look like references and are not: (file, text) -> why
NOT_REFERENCES = {
    ("tests/test_imports.py", "skalign.a"): "a throw-away package the test writes",
    ("tests/test_imports.py", "skalign.b"): "a throw-away package the test writes",
    ("tests/test_imports.py", "skalign.c"): "a throw-away package the test writes",
    ("tests/test_imports.py", "skalign.shared"): "a throw-away package the test writes",
}

#: files whose references are examples made up for their negative controls
EXAMPLE_FILES = {"tests/test_references.py", "tests/test_public_api.py"}


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@functools.lru_cache(maxsize=None)
def tracked_text_files():
    """The tracked text files that are in the working tree, as paths relative to the root."""
    try:
        listed = _git("ls-files", "-z")
    except OSError:
        listed = None
    if listed is None or listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = [n for n in listed.stdout.split("\0") if n]
    return [n for n in names
            if (Path(n).suffix in TEXT_SUFFIXES or n in TEXT_NAMES) and (ROOT / n).is_file()]


@functools.lru_cache(maxsize=None)
def shallow():
    """Whether this checkout lacks the older commits (a shallow clone)."""
    return _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"


@functools.lru_cache(maxsize=None)
def in_commit(commit, path):
    """Whether ``commit`` of this repository holds ``path`` (taken on trust where the commit is
    not in a shallow clone's history)."""
    if _git("cat-file", "-e", f"{commit}:{path}").returncode == 0:
        return True
    return shallow() and _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0


def paragraphs(text):
    """``(first line number, paragraph)`` for each block of ``text`` between blank lines."""
    line = 1
    for block in re.split(r"(\n[ \t]*\n)", text):
        if block.strip() and not re.fullmatch(r"\n[ \t]*\n", block):
            yield line, block
        line += block.count("\n")


def module_file(dotted):
    """The source file of the package's module ``dotted``, or ``None``."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined_in_source(path, names):
    """Whether ``names[0]`` is bound at the top of the module ``path`` (and each next name in
    the class before it), read from the source."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    for name in names:
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name == name:
                    found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                    found = node
        if found is None:
            return False
        body = getattr(found, "body", [])
    return True


@functools.lru_cache(maxsize=None)
def resolves(dotted):
    """Whether the dotted path names a module of the package or a name defined in one."""
    parts = dotted.split(".")
    n = len(parts)
    while n > 1 and module_file(".".join(parts[:n])) is None:
        n -= 1
    module, rest = ".".join(parts[:n]), parts[n:]
    if not rest:
        return True
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        if (exc.name or "skalign").split(".")[0] == "skalign":
            return False
        # a dependency of the module is not installed here: read its source instead
        return _defined_in_source(module_file(module), rest)
    for name in rest:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def moved_module(dotted):
    from skalign._registry import MOVED_MODULES

    return any(dotted == old or dotted.startswith(old + ".") for old in MOVED_MODULES)


def dead_references(name, text):
    """``(line, reference, why)`` for each reference in ``text`` (the file ``name``) to a file or
    module that does not exist and that no commit named beside it keeps."""
    page_commits = set(PAGE_COMMIT.findall(text))
    dead = []
    for first, block in paragraphs(text):
        commits = set(COMMIT.findall(block)) | page_commits
        for offset, line in enumerate(block.split("\n")):
            at = first + offset
            for match in PATH.finditer(line):
                path = match.group(1)
                if (ROOT / path).exists() or PLACEHOLDER.search(path) \
                        or OUTPUT.search(line[:match.start()]):
                    continue
                if any(in_commit(c, path) for c in commits):
                    continue
                dead.append((at, path, "no such file (nor a commit named beside it that "
                                       "holds it)"))
            for match in DOTTED.finditer(line):
                dotted = match.group(0)
                if (name, dotted) in NOT_REFERENCES or moved_module(dotted):
                    continue
                if not resolves(dotted):
                    dead.append((at, dotted, "no such module or name"))
            if name.startswith("skalign/") and name.endswith(".py"):
                module = name[:-3].replace("/", ".").removesuffix(".__init__")
                for match in RELATIVE_ROLE.finditer(line):
                    target = match.group(1).rstrip(".")
                    bases = module.split(".")
                    if not any(resolves(".".join(bases[:k]) + target)
                               for k in range(len(bases), 0, -1)):
                        dead.append((at, target, f"resolves from no package above {module}"))
    return dead


def test_every_reference_names_a_file_or_module_that_exists():
    found = []
    for name in tracked_text_files():
        if name in EXAMPLE_FILES:
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        found += [f"{name}:{line}: {ref}: {why}" for line, ref, why in dead_references(name, text)]
    assert not found, ("references to what does not exist (name the commit that keeps a file "
                       "that left the tree beside it; a string that is no reference goes in "
                       "NOT_REFERENCES):\n" + "\n".join(found))


def test_the_search_finds_what_it_must():
    """Not vacuous: a dead path, a dead module and a dead relative role are found; history
    that a named commit keeps is not, and history that it does not keep is."""
    tracked_text_files()  # skips outside a git checkout
    text = ("See ``benchmarks/bench_gone.py`` and :mod:`skalign._gone`, and\n"
            ":func:`skalign.io.no_such_function`.\n\n"
            "Removed, in commit ``5ae3bf6``: ``benchmarks/chroma_memory.py``; not there:\n"
            "``benchmarks/never_was.py``.\n")
    found = {ref for _, ref, _ in dead_references("doc/example.rst", text)}
    assert found == {"benchmarks/bench_gone.py", "skalign._gone", "skalign.io.no_such_function",
                     "benchmarks/never_was.py"}
    assert dead_references("doc/example.rst", "``5ae3bf6:benchmarks/NAME.py`` keeps them.\n\n"
                                              "``benchmarks/chroma_memory.py``\n") == []
    code = '"""The estimator: :class:`.procrustes.ProcrustesAligner`; :mod:`.no_such_part`."""\n'
    found = dead_references("skalign/_affine/__init__.py", code)
    assert [ref for _, ref, _ in found] == [".no_such_part"]
    assert resolves("skalign.search.Searcher.search") and resolves("skalign.ProcrustesAligner")
    assert moved_module("skalign._procrustes") and not resolves("skalign._procrustes")
