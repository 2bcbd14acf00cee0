"""skalign: scikit-learn estimators that align and translate neural embedding spaces.

The estimators are exported here; the base classes for writing new ones live in
:mod:`skalign.base`, exceptions and warnings in :mod:`skalign.exceptions`.
"""

from . import exceptions, manifold  # noqa: F401  (public submodules)
from ._asif import ASIFAligner
from ._bootstrap import AnchorBootstrapper
from ._ensemble import OrthogonalEnsembleAligner
from ._gera import GeRAAligner
from ._irp import InverseRelativeProjector
from ._linear import LinearAligner
from ._procrustes import ProcrustesAligner
from ._relative import RelativeProjector
from ._views import split_views, stack_views
from .base import UnpairedPool

__version__ = "0.1.0.dev0"

__all__ = [
    "ASIFAligner",
    "AnchorBootstrapper",
    "GeRAAligner",
    "InverseRelativeProjector",
    "LinearAligner",
    "OrthogonalEnsembleAligner",
    "ProcrustesAligner",
    "RelativeProjector",
    "UnpairedPool",
    "split_views",
    "stack_views",
]
