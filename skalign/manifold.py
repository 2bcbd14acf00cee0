"""Statistics on the unit hypersphere.

:func:`karcher_mean` is the batched Karcher (Fréchet) mean that
:class:`~skalign.OrthogonalEnsembleAligner` aggregates aligned views with; it is public so that
users can average embeddings on the sphere outside the estimator.
"""

from ._ensemble.karcher import hemisphere_certified, karcher_mean

__all__ = ["hemisphere_certified", "karcher_mean"]
