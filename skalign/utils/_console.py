"""What the commands show on standard error besides errors: progress and warnings.

Progress (bars with a rate, stages with a clock) is written only when standard error is a
terminal: a command whose standard error goes to a file or a pipe (a script, a test, CI) stays
silent, as it does with ``--quiet`` or ``--json`` (the callers pass ``enabled=False`` then).
Warnings are one line each, ``skalign COMMAND: warning: MESSAGE``, never Python's own display
with a file, a line number and a line of source.
"""

from __future__ import annotations

import contextlib
import sys
import threading

__all__ = ["bar", "on_terminal", "stage", "warning_line", "warnings_as_lines"]

#: seconds between two redraws of a stage's clock
_TICK = 0.5


def on_terminal(enabled=True):
    """Whether progress is shown: ``enabled`` and standard error a terminal."""
    try:
        return bool(enabled) and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def bar(total, desc, unit, enabled=True):
    """A tqdm bar on standard error with a rate and an estimate, or ``None`` when progress is
    off (see :func:`on_terminal`).

    Parameters
    ----------
    total : int
        Units to do.
    desc : str
        What is done.
    unit : str
        What one unit is (``"queries"``, ``"texts"``).
    enabled : bool, default=True
        ``False`` for ``--quiet`` and ``--json``.

    Returns
    -------
    tqdm or None
    """
    if not on_terminal(enabled):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=total >= 10_000,
                file=sys.stderr, dynamic_ncols=True)


@contextlib.contextmanager
def stage(desc, enabled=True):
    """A line ``desc ... 12s`` on standard error, its clock kept running by a thread while the
    block runs (a step with no countable units: loading a model, planning, fitting), and
    ended with the time it took; nothing when progress is off (see :func:`on_terminal`).

    Parameters
    ----------
    desc : str
        What is done.
    enabled : bool, default=True
        ``False`` for ``--quiet`` and ``--json``.
    """
    if not on_terminal(enabled):
        yield
        return
    from tqdm.auto import tqdm

    line = tqdm(total=None, desc=desc, file=sys.stderr, bar_format="{desc} ... {elapsed}",
                dynamic_ncols=True)
    done = threading.Event()

    def tick():
        while not done.wait(_TICK):
            line.refresh()

    clock = threading.Thread(target=tick, daemon=True)
    clock.start()
    try:
        yield
    finally:
        done.set()
        clock.join()
        line.close()


def warning_line(command, message):
    """A warning as the command line says it: ``skalign COMMAND: warning: MESSAGE``, the
    message on one line."""
    return f"skalign {command}: warning: {' '.join(str(message).split())}"


@contextlib.contextmanager
def warnings_as_lines(command, scrub=str):
    """Every warning Python displays while the block runs reads as one :func:`warning_line`,
    never Python's ``FILE:LINE: CATEGORY: MESSAGE`` with a line of source.

    Only the format is replaced (``warnings.formatwarning``): which warnings are shown, how
    often, and where to, stay Python's, so a caller recording warnings (``pytest.warns``,
    ``warnings.catch_warnings(record=True)``) still receives them as warnings. On a terminal
    the line first clears the progress line it interrupts (that line is redrawn below it).

    Parameters
    ----------
    command : str
        The command's name.
    scrub : callable, default=str
        Applied to the line (the command line masks passwords and escapes control
        characters).
    """
    import warnings

    def line(message, category, filename, lineno, line=None):
        text = scrub(warning_line(command, message)) + "\n"
        return "\r\x1b[K" + text if on_terminal() else text

    saved = warnings.formatwarning
    warnings.formatwarning = line
    try:
        yield
    finally:
        warnings.formatwarning = saved
