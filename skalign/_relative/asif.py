"""ASIF: training-free alignment through sparse relative representations to paired anchors."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch

from ..base import BaseAligner, SharedSpaceMixin
from ..utils._backend import row_normalize, to_numpy, to_tensor
from ..utils._compat import Interval, _fit_context

__all__ = ["ASIFAligner"]


def relative_representation(Q, anchors, *, n_nonzero, exponent, mean=None):
    r"""Sparse relative representation of the rows of ``Q`` with respect to unit-norm ``anchors``.

    .. math:: r(q) = \frac{\operatorname{top}_k\big(\max(\hat q \hat A^\top, 0)\big)^{p}}
              {\big\|\operatorname{top}_k\big(\max(\hat q \hat A^\top, 0)\big)^{p}\big\|}

    Parameters
    ----------
    Q : tensor of shape (n, d)
    anchors : tensor of shape (N, d)
        Unit-norm anchor rows.
    n_nonzero : int
        Entries kept per row (``k``), ``<= N``.
    exponent : float
        ``p``.
    mean : tensor of shape (d,), default=None
        Subtracted from ``Q`` before normalising (the anchors must be centred the same way).

    Returns
    -------
    R : tensor of shape (n, N), unit-norm rows (zero rows when no similarity is positive)
    """
    if mean is not None:
        Q = Q - mean
    S = row_normalize(Q) @ anchors.T
    top = torch.topk(S, n_nonzero, dim=1)
    vals = top.values.clamp_min(0.0).pow(exponent)
    R = torch.zeros_like(S).scatter_(1, top.indices, vals)
    return row_normalize(R)


class ASIFAligner(SharedSpaceMixin, BaseAligner):
    r"""ASIF: both spaces represented by their sparse similarities to the same paired anchors.

    No training. With ``N`` anchor pairs :math:`(a^X_i, a^Y_i)`, a source embedding is represented
    by its cosine similarities to the source anchors, and a target embedding by its similarities to
    the target anchors; since anchor ``i`` is the same item in both spaces, the two representations
    live in one ``N``-dimensional space:

    .. math::

        r_X(x) = \frac{\operatorname{top}_k\big(\max(\hat x \hat A_X^\top, 0)\big)^{p}}
                      {\|\operatorname{top}_k(\cdot)^{p}\|},\qquad
        \operatorname{sim}(x, y) = \langle r_X(x), r_Y(y)\rangle,

    where :math:`\hat{\cdot}` denotes L2 normalisation, :math:`\operatorname{top}_k` keeps a row's
    ``k`` largest entries and zeroes the rest, and the power ``p`` sharpens the kept similarities.
    Negative similarities are clipped at 0 before the power (a fractional power of a negative
    number is undefined).

    Read more in the :ref:`User Guide <asif>`.

    Parameters
    ----------
    n_nonzero : int, default=800
        ``k``: similarities kept per row (clipped to the number of anchors in ``n_nonzero_``).
    exponent : float, default=1.0
        ``p``. The reference code's ``p = 8`` suits CLIP-like image and text features; keep
        ``p = 1`` for sentence encoders, where it was the best choice in every setting measured
        (:ref:`User Guide <asif>`).
    center : bool, default=True
        Centre each space on its anchor mean before the cosine similarities (not in the original
        method). Text-encoder embeddings are offset from the origin, so raw cosines are all
        similar: centre them, unless the anchors are few (tens) and the two encoders close, where
        the raw cosines may do better (:ref:`User Guide <asif>`).
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the fit and the transforms run; resolved at fit time into ``device_``.
    batch_size : int, default=None
        Rows per batch in :meth:`transform` and :meth:`transform_target`; ``None`` sizes batches
        from scikit-learn's ``working_memory``.

    Attributes
    ----------
    source_anchors_ : ndarray of shape (n_anchors, n_features_in)
        Unit-norm (centred when ``center``) source anchors; float64 when fitted on float64
        input, float32 otherwise.
    target_anchors_ : ndarray of shape (n_anchors, n_features_out)
    source_mean_ : ndarray of shape (n_features_in,)
        Zero when ``center=False``.
    target_mean_ : ndarray of shape (n_features_out,)
    n_nonzero_ : int
    n_components_ : int
        Width of the shared space = number of anchors.
    device_ : str
    n_features_in_ : int
    n_features_out_ : int
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    GeRAAligner : Trained alignment regularised with unpaired data.

    References
    ----------
    .. [1] A. Norelli, M. Fumero, V. Maiorca, L. Moschella, E. Rodolà, F. Locatello, "ASIF:
       Coupled Data Turns Unimodal Models to Multimodal without Training", NeurIPS 2023.

    Examples
    --------
    >>> from skalign import ASIFAligner
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(n_samples=500, n_features=8, relation="orthogonal",
    ...                           random_state=0)
    >>> asif = ASIFAligner(n_nonzero=50).fit(X[:400], Y[:400])
    >>> asif.transform(X[400:]).shape
    (100, 400)
    >>> bool(asif.score(X[400:], Y[400:]) > 0.5)
    True
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "n_nonzero": [Interval(Integral, 1, None, closed="left")],
        "exponent": [Interval(Real, 0, None, closed="neither")],
        "center": ["boolean"],
    }

    def __init__(self, *, n_nonzero=800, exponent=1.0, center=True, device="cpu",
                 batch_size=None):
        self.n_nonzero = n_nonzero
        self.exponent = exponent
        self.center = center
        self.device = device
        self.batch_size = batch_size

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Store the normalised anchor pairs.

        Parameters
        ----------
        X : array-like of shape (n_anchors, n_features_in)
            Source embeddings of the anchors.
        y : array-like of shape (n_anchors, n_features_out)
            Target embeddings of the same anchors, row for row.

        Returns
        -------
        self : ASIFAligner
            The fitted aligner.
        """
        X, y = self._validate_pair(X, y)
        dtype = torch.float64 if X.dtype == np.float64 else torch.float32
        Xc, Yc, mx, my = self._centered_pair_tensors(X, y, center=self.center, dtype=dtype)
        self.source_anchors_ = to_numpy(row_normalize(Xc))
        self.target_anchors_ = to_numpy(row_normalize(Yc))
        self.source_mean_, self.target_mean_ = to_numpy(mx), to_numpy(my)
        self.n_components_ = len(X)
        self.n_nonzero_ = min(self.n_nonzero, len(X))
        return self

    def _rel_fn(self, anchors, mean, device, dtype):
        # float64 input is compared in float64: a float32 GEMM's rounding depends on how many rows
        # it is given, which would make a row's output depend on its batch
        A, mu = to_tensor(anchors, device, dtype), to_tensor(mean, device, dtype)
        k, p = self.n_nonzero_, float(self.exponent)
        return lambda B: relative_representation(B, A, n_nonzero=k, exponent=p, mean=mu)

    def _transform_fn(self, device, dtype=torch.float32):
        return self._rel_fn(self.source_anchors_, self.source_mean_, device, dtype)

    def _target_transform_fn(self, device, dtype=torch.float32):
        return self._rel_fn(self.target_anchors_, self.target_mean_, device, dtype)
