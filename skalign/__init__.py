"""skalign: scikit-learn estimators that align and translate neural embedding spaces.

The estimators are exported here; the base classes for writing new ones live in
:mod:`skalign.base`, exceptions and warnings in :mod:`skalign.exceptions`.

Names are imported on first use (:pep:`562`), so ``import skalign`` and the ``skalign`` command
line start without torch or scikit-learn; ``from skalign import ProcrustesAligner`` works as
usual.
"""

import importlib

from ._registry import PUBLIC, SUBMODULES
from ._version import __version__  # noqa: F401  (skalign.__version__)

__all__ = sorted(PUBLIC)


def __getattr__(name):
    if name in PUBLIC:
        value = getattr(importlib.import_module(PUBLIC[name]), name)
    elif name in SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(PUBLIC) | set(SUBMODULES))
