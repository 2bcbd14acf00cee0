"""Text from stores and files, made safe to print on a terminal.

A provenance stamp, an encoder name or a path can hold whatever whoever wrote it chose:
escape sequences that retitle the window or clear the screen, carriage returns that overwrite
the line already printed, bidirectional overrides that reorder what is shown. Every such
character is printed as an escape (``\\x1b``, ``\\u202e``), never sent raw.
"""

from __future__ import annotations

import re

__all__ = ["escape_control"]

# C0 and C1 controls and DEL, lone surrogates (they cannot even be encoded for output), the
# line and paragraph separators, and the bidirectional marks, embeddings, overrides and
# isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f"
                      "\u202a-\u202e\u2066-\u2069]")


def _escape(char):
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text, keep=""):
    """``text`` with every control character written as a visible escape.

    Parameters
    ----------
    text : object
        Converted with ``str`` first.
    keep : str, default=""
        Characters left as they are (e.g. ``"\\n\\t"`` for text skalign itself lays out).

    Returns
    -------
    str
        The text, each C0/C1 control character, DEL, lone surrogate, U+2028/U+2029 and
        bidirectional formatting character (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069)
        replaced by ``\\xNN`` or ``\\uNNNN``.

    Examples
    --------
    >>> from skalign.utils._terminal import escape_control
    >>> escape_control("\\x1b]0;title\\x07 ok")
    '\\\\x1b]0;title\\\\x07 ok'
    """
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()),
                        str(text))
