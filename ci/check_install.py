"""Check CI's own install against ``ci/constraints.txt``: run by ``.ci/run`` right after
``pip install -c ci/constraints.txt ...``, with the virtual environment's Python.

chromadb pulls in some 80 packages; CI is reproducible only if each of them is pinned, at the
version installed. A check of CI's environment, not of skalign: the user's test suite
(``tests/``) runs in any environment, with or without the constraints file, so it does not
hold this (an environment whose top-level packages match the pins but whose transitive ones
moved on is a fine place to test skalign, and a wrong one for CI).

Exit status 0 when every package of chromadb's dependency tree is pinned at the installed
version, 1 (with the packages that are not, one a line) otherwise, 2 when chromadb is not
installed at all (``.ci/run`` installs the ``stores`` extra, so that is an error there too).

    .venv/bin/python ci/check_install.py [CONSTRAINTS]
"""

import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins(path):
    """``{canonical name: version}`` of each ``name==version`` line of a constraints file."""
    found = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[canonicalize_name(name)] = version.strip()
    return found


def dependency_tree(top):
    """The canonical names of the installed distributions ``top`` requires, all the way down
    (optional dependencies that are not installed left out)."""
    seen, todo = set(), [top]
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
    return seen


def problems(pinned, top="chromadb"):
    """One line for each package of ``top``'s tree that is not pinned at its installed
    version."""
    tree = dependency_tree(top)
    if len(tree) <= 50:
        return [f"{top}: only {len(tree)} dependencies found installed (expected some 80)"]
    out = []
    for name in sorted(tree):
        installed = md.version(name)
        if name not in pinned:
            out.append(f"{name}=={installed}: installed, not pinned")
        elif pinned[name] != installed:
            out.append(f"{name}: pinned {pinned[name]}, installed {installed}")
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    constraints = argv[0] if argv else ROOT / "ci" / "constraints.txt"
    try:
        md.distribution("chromadb")
    except md.PackageNotFoundError:
        print("check_install: chromadb is not installed (the extra `stores` installs it)",
              file=sys.stderr)
        return 2
    found = problems(pins(constraints))
    if found:
        print(f"check_install: chromadb's dependencies are not all pinned in {constraints} "
              "at the installed versions (add or update these lines):", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"check_install: every dependency of chromadb is pinned in {constraints} at the "
          "installed version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
