"""Package-level utilities: estimator discovery and (:mod:`skalign.utils.estimator_checks`) the
project-wide checks for estimators built on :mod:`skalign.base`."""

from __future__ import annotations

from ._discovery import public_estimators

__all__ = ["all_estimators"]


def all_estimators():
    """Every public, concrete skalign estimator, sorted by name.

    Read from the registry that :class:`skalign.base.BaseTransformer` fills as each estimator
    class is defined, restricted to the names exported by :mod:`skalign`, so that a new estimator
    is picked up by the common tests as soon as it is exported.

    Returns
    -------
    estimators : list of (str, type)
        ``(class name, class)`` pairs.
    """
    return public_estimators()
