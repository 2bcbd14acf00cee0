"""The import path of the store-size law that :mod:`skalign._migrate.calibration` uses.

The law lives with the estimates, in :mod:`skalign.plan._estimate`, where its module docstring
gives it.
"""

from ._estimate import percentile_ci, project, substore_draws

__all__ = ["percentile_ci", "project", "substore_draws"]
