"""Helpers for several encoders' embeddings of the same samples stacked into one ``X``.

Multi-view estimators take one horizontally stacked ``X`` of shape ``(n, m·d)`` plus an
``n_views=m`` parameter, so that ``Pipeline``, ``FeatureUnion`` and cross-validation handle them
like any other feature matrix.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import torch

from ..utils._backend import as_numpy

__all__ = ["check_stacked_views", "split_views", "stack_views"]


def stack_views(*views):
    """Stack several encoders' embeddings of the same samples into one ``X``.

    Parameters
    ----------
    *views : array-likes of shape (n_samples, d)
        One array per encoder, all with the same number of rows and the same width ``d``
        (a single list or tuple of arrays is also accepted).

    Returns
    -------
    X : ndarray of shape (n_samples, n_views * d)
        The views side by side, in the order given.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign import stack_views, split_views
    >>> X = stack_views(np.zeros((5, 3)), np.ones((5, 3)))
    >>> X.shape, split_views(X, n_views=2).shape
    ((5, 6), (5, 2, 3))
    """
    if len(views) == 1 and isinstance(views[0], (list, tuple)):
        views = tuple(views[0])
    if len(views) < 1:
        raise ValueError("stack_views needs at least one view.")
    arrays = [np.asarray(as_numpy(v)) for v in views]
    for i, a in enumerate(arrays):
        if a.ndim != 2:
            raise ValueError(f"View {i} must be 2D (n_samples, d), got shape {a.shape}.")
    n, d = arrays[0].shape
    for i, a in enumerate(arrays[1:], start=1):
        if a.shape[0] != n:
            raise ValueError(
                f"View {i} has {a.shape[0]} rows but view 0 has {n}; rows must be the same samples."
            )
        if a.shape[1] != d:
            raise ValueError(
                f"View {i} has width {a.shape[1]} but view 0 has {d}; all views need the same "
                "width (reduce them to a common dimension first, e.g. with PCA)."
            )
    return np.hstack(arrays)


def split_views(X, n_views):
    """Split a stacked ``X`` back into its views.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_views * d)
        Stacked views, as made by :func:`stack_views`.
    n_views : int
        Number of views side by side in ``X``; must divide its width.

    Returns
    -------
    views : ndarray or torch.Tensor of shape (n_samples, n_views, d)
        A view (no copy) of ``X`` reshaped; tensors stay tensors.
    """
    if not isinstance(n_views, Integral) or n_views < 1:
        raise ValueError(f"n_views must be a positive integer, got {n_views!r}.")
    if not isinstance(X, torch.Tensor):
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D stacked X, got {X.ndim}D.")
    n, width = X.shape
    if width % n_views:
        raise ValueError(
            f"X has {width} columns, which is not divisible by n_views={n_views}; stack views of "
            "equal width with skalign.stack_views."
        )
    return X.reshape(n, n_views, width // n_views)


def check_stacked_views(X, n_views):
    """Return ``X`` unchanged, or raise a :class:`ValueError` pointing at :func:`stack_views`
    when it holds the views separately (a list of 2-D arrays or a 3-D array).

    Multi-view estimators take one 2-D ``X``; a list of views would otherwise fail deep inside
    validation with "Found array with dim 3".
    """
    def ndim(a):
        return a.ndim if isinstance(a, (np.ndarray, torch.Tensor)) else np.ndim(a)

    separate = (
        isinstance(X, (list, tuple)) and len(X) > 0 and ndim(X[0]) == 2
    ) or (isinstance(X, (np.ndarray, torch.Tensor)) and X.ndim == 3)
    if separate:
        n_given = len(X) if isinstance(X, (list, tuple)) else X.shape[1]
        raise ValueError(
            f"X holds {n_given} separate views; pass them as one 2-D array of shape "
            f"(n_samples, n_views * d): X = skalign.stack_views(views) (n_views={n_views})."
        )
    return X
