"""Figures quoted in the user guide, tied to the result files the benchmark scripts write.

A figure in prose is written ``:fig:`137 <bench_translate:cli_s>``` — the number as the reader
sees it, then ``<file:key>``: the key's value in ``benchmarks/results/<file>.csv``, a ``key,value``
file written by a script's ``--csv`` option. The figure agrees with its source when the value,
rounded to the figure's own precision, reads the same (``137`` for 137.42, ``0.74`` for 0.7434,
``2.4e-6`` for 2.41e-6; thousands separators are ignored). Tables are included whole with
``.. csv-table:: :file:``, so they cannot disagree.

``conf.py`` registers the role, which renders the number and fails the ``-W`` build on a
disagreement; ``tests/test_doc_figures.py`` runs the same check without Sphinx.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
ROLE = re.compile(r":fig:`([^`<]*?)\s*<([\w.-]+):(\w+)>`")
_NUMBER = re.compile(r"^[−-]?\d+(\.\d+)?([eE][−+-]?\d+)?$")


def load(name, results=RESULTS):
    """``{key: float}`` of ``results/<name>.csv``."""
    with open(Path(results) / f"{name}.csv", newline="") as f:
        return {row["key"]: float(row["value"]) for row in csv.DictReader(f)}


def agrees(text, value):
    """Whether the figure ``text`` is ``value`` rounded to ``text``'s precision."""
    number = text.replace(",", "").replace("\u202f", "").replace("−", "-").strip()
    if not _NUMBER.match(number):
        raise ValueError(f"{text!r} is not a number")
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if exponent:
        return float(f"{value:.{decimals}e}") == float(number)
    return f"{value:.{decimals}f}" == f"{float(number):.{decimals}f}"


def check(text, name, key, results=RESULTS):
    """``None`` when the figure agrees with its source, else a message saying why not."""
    try:
        figures = load(name, results)
    except FileNotFoundError:
        return f"{text} <{name}:{key}>: no file {Path(results) / (name + '.csv')}"
    if key not in figures:
        return f"{text} <{name}:{key}>: {name}.csv has no key {key!r}"
    try:
        ok = agrees(text, figures[key])
    except ValueError as exc:
        return f"{text} <{name}:{key}>: {exc}"
    return None if ok else f"{text} <{name}:{key}>: the file says {figures[key]!r}"


def check_page(path, results=RESULTS):
    """Every ``:fig:`` of the page ``path`` that disagrees with its source, as messages."""
    text = Path(path).read_text()
    problems = []
    for match in ROLE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        problem = check(*match.groups(), results=results)
        if problem:
            problems.append(f"{Path(path).name}:{line}: {problem}")
    return problems


def fig_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """The Sphinx role: renders the figure, reports an error when it disagrees with its file."""
    from docutils import nodes

    match = ROLE.fullmatch(rawtext)
    if match is None:
        msg = inliner.reporter.error(f"malformed figure {rawtext!r}; write :fig:`12.3 <file:key>`",
                                     line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    problem = check(*match.groups())
    if problem:
        msg = inliner.reporter.error(f"figure disagrees with its source: {problem}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [nodes.Text(match.group(1))], []
