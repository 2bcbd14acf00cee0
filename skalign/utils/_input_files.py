"""JSON read from files the user (or anyone) can write: plan files given to ``--candidates``,
``.jsonl`` queries, JSON qrels and provenance stamps.

:func:`loads_bounded` refuses what :func:`json.loads` would take but skalign cannot use safely:
nesting deeper than :data:`MAX_DEPTH` (``json.loads`` recurses once per level and a file of
100,000 ``[`` ends in a ``RecursionError``), and ``NaN``, ``Infinity`` or a number beyond
float64's range (``1e999``), which ``json.loads`` accepts as floats. Every refusal is an
:class:`InputFileError`, a :class:`ValueError` whose message is one line naming the file.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

__all__ = ["MAX_DEPTH", "InputFileError", "json_depth", "loads_bounded"]

#: the deepest nesting of arrays and objects accepted (skalign's own files use 3 levels)
MAX_DEPTH = 64

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class InputFileError(ValueError):
    """An input file skalign refuses to use; the message is one line that names it."""


class _NotFinite(ValueError):
    pass


def json_depth(text):
    """The deepest nesting of arrays and objects in the JSON ``text``, without parsing it.

    Brackets inside strings do not count. On text that is not JSON the count is at least the
    depth :func:`json.loads` reaches before it fails, so a bound checked here holds for the
    parse.

    Parameters
    ----------
    text : str

    Returns
    -------
    int
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def _refuse_constant(name):
    raise _NotFinite(name)


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def loads_bounded(text, what, max_depth=MAX_DEPTH):
    """:func:`json.loads` for untrusted text: bounded nesting, finite numbers only.

    Parameters
    ----------
    text : str or bytes
        The JSON (bytes are decoded as UTF-8).
    what : str
        How messages name the input, e.g. ``"q.jsonl, line 3"``.
    max_depth : int, default=MAX_DEPTH
        The deepest nesting of arrays and objects accepted.

    Returns
    -------
    object
        What :func:`json.loads` returns.

    Raises
    ------
    InputFileError
        Nesting deeper than ``max_depth``, or ``NaN``, ``Infinity`` or a number beyond
        float64's range.
    json.JSONDecodeError
        The text is not JSON (a :class:`ValueError`; callers word their own message).
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise InputFileError(f"{what}: not UTF-8 text.") from None
    depth = json_depth(text)
    if depth > max_depth:
        raise InputFileError(f"{what}: JSON nested {depth} levels deep; at most {max_depth} "
                             "are accepted.")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite as exc:
        raise InputFileError(f"{what}: the number {exc} is not finite; NaN and Infinity are "
                             "not accepted.") from None
