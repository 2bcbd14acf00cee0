"""The complete list of public estimators, for the layers above them (CLI, model files, tests).

Imports every module that :data:`skalign._registry.PUBLIC` names, by name, so that each estimator
class has registered itself, then reads the registry. No estimator module may import this one
(``tests/test_imports.py`` checks it): it sits above them, like :mod:`skalign.cli`.
"""

from __future__ import annotations

import importlib

from .._registry import PUBLIC, registered


def public_estimators():
    """Every public, concrete skalign estimator as ``(name, class)``, sorted by name."""
    for module in sorted(set(PUBLIC.values())):
        importlib.import_module(module)
    return registered()
