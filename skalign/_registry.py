"""Where each public name of :mod:`skalign` is defined, and the registry of estimator classes.

This module imports nothing from skalign, so every other module may import it. Two tables:

* :data:`PUBLIC` maps each name of ``skalign.__all__`` to the module that defines it; the package
  imports that module the first time the name is used (``skalign/__init__.py``), so
  ``import skalign.cli`` does not pay for torch and scikit-learn.
* :data:`ESTIMATORS` is filled by :class:`skalign.base.BaseTransformer` as each estimator class
  is defined (``__init_subclass__``). Reading it imports nothing; :mod:`skalign.utils._discovery`
  imports the estimator modules first where a complete list is needed (the CLI, model files,
  the tests).
"""

from __future__ import annotations

import inspect

#: public name -> defining module (the estimators, the unpaired pool and the view helpers)
PUBLIC = {
    "ASIFAligner": "skalign._relative.asif",
    "AnchorBootstrapper": "skalign._bootstrap.bootstrapper",
    "GeRAAligner": "skalign._gera.gera",
    "InverseRelativeProjector": "skalign._relative.irp",
    "LinearAligner": "skalign._affine.linear",
    "OrthogonalEnsembleAligner": "skalign._ensemble.ensemble",
    "ProcrustesAligner": "skalign._affine.procrustes",
    "RelativeProjector": "skalign._relative.relative",
    "UnpairedPool": "skalign.base",
    "split_views": "skalign._ensemble.views",
    "stack_views": "skalign._ensemble.views",
}

#: the names of :data:`PUBLIC` that are estimator classes: what a model file may hold, known
#: without importing the estimator modules (``tests/test_imports.py`` checks it against them)
ESTIMATOR_NAMES = frozenset({
    "ASIFAligner", "AnchorBootstrapper", "GeRAAligner", "InverseRelativeProjector",
    "LinearAligner", "OrthogonalEnsembleAligner", "ProcrustesAligner", "RelativeProjector",
})

#: public submodules reachable as attributes of the package (``skalign.metrics``, ...)
SUBMODULES = ("base", "datasets", "encoders", "exceptions", "io", "manifold", "metrics",
              "parallel", "plan", "search", "utils")

#: where the estimator modules of earlier versions live now: model files record the module of
#: each class (skops' ``__module__``), so a file written before a move names the old path.
#: :func:`skalign.io.load` renames these before checking the file's types against the trusted
#: ones; a moved estimator module gets a row here, and a row is never removed.
MOVED_MODULES = {
    "skalign._asif": "skalign._relative.asif",
    "skalign._bootstrap": "skalign._bootstrap.bootstrapper",
    "skalign._ensemble": "skalign._ensemble.ensemble",
    "skalign._gera": "skalign._gera.gera",
    "skalign._irp": "skalign._relative.irp",
    "skalign._linear": "skalign._affine.linear",
    "skalign._procrustes": "skalign._affine.procrustes",
    "skalign._relative": "skalign._relative.relative",
}

#: class name -> class, for every estimator class defined so far (see ``register``)
ESTIMATORS: dict[str, type] = {}


def register(cls):
    """Record an estimator class as it is defined; called by ``BaseTransformer``."""
    ESTIMATORS[f"{cls.__module__}.{cls.__qualname__}"] = cls


def registered():
    """The public, concrete estimator classes defined so far, as ``(name, class)`` sorted by name.

    Imports nothing: an estimator whose module has not run yet is not listed
    (:func:`skalign.utils.all_estimators` imports them all first).
    """
    found = []
    for cls in ESTIMATORS.values():
        name = cls.__qualname__
        if PUBLIC.get(name) == cls.__module__ and not inspect.isabstract(cls):
            found.append((name, cls))
    return sorted(found)
