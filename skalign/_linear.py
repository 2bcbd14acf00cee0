"""Least-squares / ridge affine map, the unconstrained baseline."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ._backend import affine_fn, ridge_svd, to_numpy
from ._compat import Interval, _fit_context
from .base import BaseAligner

__all__ = ["LinearAligner"]


class LinearAligner(BaseAligner):
    r"""Affine map from source to target embeddings fitted by (ridge) least squares.

    .. math::

        W = \operatorname*{arg\,min}_W \|\bar X W - \bar Y\|_F^2 + \alpha \|W\|_F^2
          = V \operatorname{diag}\!\Big(\frac{\sigma_i}{\sigma_i^2 + \alpha}\Big) U^\top \bar Y,

    with :math:`\bar X = U \Sigma V^\top` the SVD of the centred source anchors, and
    ``transform(x) = (x − μ_X) W + μ_Y``. The solve runs in float64 through the SVD, so
    rank-deficient anchors (fewer pairs than dimensions) give the minimum-norm solution for
    ``alpha=0`` instead of a wrong answer.

    Parameters
    ----------
    alpha : float, default=0.0
        Ridge penalty. ``0`` is ordinary (minimum-norm) least squares.
    fit_intercept : bool, default=True
        Centre both spaces on their anchor means (an affine rather than a linear map).
    rtol : float, default=None
        For ``alpha=0``: singular values below ``rtol * σ_max`` are dropped. ``None`` uses
        ``max(n, d) · eps``.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
    batch_size : int, default=None

    Attributes
    ----------
    coef_ : ndarray of shape (n_features_in, n_features_out)
        The linear map ``W`` (float64).
    intercept_ : ndarray of shape (n_features_out,)
        ``μ_Y − μ_X W``, so that ``transform(x) = x W + intercept_``.
    device_ : str
    n_features_in_ : int
    n_features_out_ : int
    feature_names_in_ : ndarray of shape (n_features_in,)

    See Also
    --------
    ProcrustesAligner : the same problem restricted to isometries.

    Examples
    --------
    >>> from skalign import LinearAligner
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(n_samples=200, n_features=16, relation="linear", random_state=0)
    >>> round(LinearAligner().fit(X, Y).score(X, Y), 4)
    1.0
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "rtol": [Interval(Real, 0, 1, closed="left"), None],
    }

    def __init__(self, *, alpha=0.0, fit_intercept=True, rtol=None, device="cpu", batch_size=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.rtol = rtol
        self.device = device
        self.batch_size = batch_size

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the affine map on paired anchors.

        Parameters
        ----------
        X : array-like of shape (n_pairs, n_features_in)
        y : array-like of shape (n_pairs, n_features_out)

        Returns
        -------
        self : LinearAligner
        """
        X, y = self._validate_pair(X, y)
        Xc, Yc, mx, my = self._centered_pair_tensors(X, y, center=self.fit_intercept)
        W = ridge_svd(Xc, Yc, float(self.alpha), rtol=self.rtol)
        self.coef_ = to_numpy(W)
        self.intercept_ = to_numpy(my - mx @ W)
        return self

    def _transform_fn(self, device):
        return affine_fn(self.coef_, np.zeros(self.n_features_in_), self.intercept_, device)
