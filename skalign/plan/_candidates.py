"""The import path of :func:`skalign.plan.make_candidate` that :mod:`skalign._migrate` uses.

The candidates are built with the plan's inputs, in :mod:`skalign.plan._inputs`; new code
imports :func:`~skalign.plan.make_candidate` from :mod:`skalign.plan`.
"""

from ._inputs import make_candidate

__all__ = ["make_candidate"]
