"""Package-level utilities."""

from __future__ import annotations

import inspect

from sklearn.base import BaseEstimator

__all__ = ["all_estimators"]


def all_estimators():
    """Every public, concrete skalign estimator, as ``(name, class)`` sorted by name.

    Discovered from ``skalign.__all__`` so that a new estimator is picked up by the common tests
    as soon as it is exported.
    """
    import skalign

    found = []
    for name in skalign.__all__:
        obj = getattr(skalign, name)
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseEstimator)
            and not name.startswith("Base")
            and not inspect.isabstract(obj)
        ):
            found.append((name, obj))
    return sorted(found)
