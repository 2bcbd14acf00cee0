"""Package-level utilities."""

from __future__ import annotations

import inspect

from sklearn.base import BaseEstimator

__all__ = ["all_estimators"]


def all_estimators():
    """List every public, concrete skalign estimator.

    Discovered from ``skalign.__all__`` so that a new estimator is picked up by the common tests
    as soon as it is exported.

    Returns
    -------
    estimators : list of (str, type) tuples
        ``(name, class)`` pairs, sorted by name.
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
