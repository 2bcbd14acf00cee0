"""Relative representations: encode embeddings as cosines to a set of anchors, and decode back."""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted

from ..base import BaseAligner
from ..utils._backend import (
    COMPUTE_DTYPE,
    SOLVE_DTYPE,
    as_numpy,
    resolve_device,
    to_numpy,
    to_tensor,
)
from ..utils._compat import Interval, StrOptions, _fit_context, validate_data
from .anchors import (
    center_normalize,
    encode,
    on_mean_floor,
    rescale,
    subset_decoders,
)

__all__ = ["RelativeProjector"]

class RelativeProjector(BaseAligner):
    r"""Relative representation of embeddings with respect to a fixed set of anchors.

    Fitted on the anchors of **one** space only. With the anchor mean :math:`\mu`, the centred
    and L2-normalised anchors :math:`\hat A` (``k × d``, one row per anchor) and the mean norm
    :math:`s` of the centred anchors, the relative representation of an embedding :math:`x` is
    its cosine similarity to every anchor (Moschella et al. [1]_):

    .. math::

        r(x) = \hat x \, \hat A^\top \in [-1, 1]^k, \qquad
        \hat x = \frac{x - \mu}{\|x - \mu\|}.

    :meth:`inverse_transform` decodes a relative representation back into this space with the
    pseudo-inverse (Eq. 2 of [2]_), then rescales and de-centres:

    .. math::

        \tilde x = r \, (\hat A^\top)^{+}_\alpha, \qquad
        x = s \, \frac{\tilde x}{\|\tilde x\|} + \mu \quad (\texttt{rescale="normalize"}),

    where :math:`(\hat A^\top)^{+}_\alpha = \hat A (\hat A^\top \hat A + \alpha I)^{-1}` is the
    ridge (Tikhonov) pseudo-inverse: :math:`\tilde x` minimises
    :math:`\|\tilde x \hat A^\top - r\|^2 + \alpha \|\tilde x\|^2`. ``alpha=0`` (the default) is
    the Moore–Penrose pseudo-inverse, exact when ``r`` comes from this same space; pass the
    ``alpha_`` of a fitted :class:`InverseRelativeProjector` to decode representations that come
    from another encoder.

    With ``anchor_subsets`` :math:`S^1, \dots, S^\omega`, the representation concatenates the
    cosines to each subset and the decode averages the subsets' pseudo-inverse decodes (Eq. 5 of
    [2]_), :math:`\tilde x = \frac1\omega \sum_i r^i (\hat A_{S^i}^\top)^{+}`; the mean and scale
    always come from all the anchors given to ``fit``.

    Because the relative space is shared by every encoder that embeds the same anchors, a
    projector fitted on the source anchors (``transform``) and another fitted, possibly on
    another machine and later, on the target anchors with the same ``anchor_subsets``
    (``inverse_transform``) together translate source embeddings into the target space: this is
    exactly :class:`InverseRelativeProjector` split in two halves.

    Read more in the :ref:`User Guide <irp>`.

    Parameters
    ----------
    anchor_subsets : list of array-like of int, default=None
        Row indices (into the anchors passed to ``fit``) of each anchor subset, e.g. the
        ``subspace_indices_`` of a fitted :class:`InverseRelativeProjector`. ``None`` uses all
        anchors as one subset.
    rescale : {"normalize", "scale"}, default="normalize"
        How decoded rows get back their scale: ``"normalize"`` renormalises each row to unit norm
        and multiplies by ``s``; ``"scale"`` multiplies the raw pseudo-inverse output by ``s``.
    alpha : float >= 0, default=0.0
        Ridge :math:`\alpha` of the decode, in units of the squared norm of one (unit-norm)
        anchor. ``0`` is the plain pseudo-inverse.
    rtol : float, default=None
        Relative cut-off of the pseudo-inverses: singular values of :math:`\hat A_S` below
        ``rtol · σ_max`` are treated as zero. ``None`` uses ``max(k_S, d) · eps`` (float64).
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the fit (float64 SVDs) and the transforms run.
    batch_size : int, default=None
        Rows per batch in ``transform``/``inverse_transform``; ``None`` sizes batches from
        ``sklearn.get_config()["working_memory"]``.

    Attributes
    ----------
    source_mean_ : ndarray of shape (n_features_in,)
        Anchor mean :math:`\mu` (the projector's one space is its source space, as in
        :class:`InverseRelativeProjector`'s ``source_mean_``).
    scale_ : float
        Mean norm :math:`s` of the centred anchors.
    anchor_index_ : ndarray of shape (n_features_out,)
        The anchor (row of the fitted ``X``) behind each column of the relative representation.
    anchors_ : ndarray of shape (n_features_out, n_features_in)
        Centred, L2-normalised anchors, one per output column (float64). An anchor equal to the
        mean has no direction; its row is zero, so its relative coordinate is always 0.
    decoder_ : ndarray of shape (n_features_out, n_features_in)
        The stacked pseudo-inverses :math:`\frac1\omega (\hat A_{S^i}^\top)^{+}_\alpha` (float64):
        ``inverse_transform`` is one product with it before rescaling.
    condition_numbers_ : ndarray of shape (n_subsets,)
        :math:`\sigma_{\max} / \sigma_{\min}` of each :math:`\hat A_{S^i}` (``inf`` when
        singular): the sensitivity of the decode to noise in the relative representation.
    ranks_ : ndarray of shape (n_subsets,)
        Singular values kept by each pseudo-inverse.
    device_ : str
    n_features_in_ : int
    n_features_out_ : int
        Width of the relative representation (the total size of the subsets).
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    InverseRelativeProjector : Translate between two spaces through their relative spaces.

    References
    ----------
    .. [1] L. Moschella, V. Maiorca, M. Fumero, A. Norelli, F. Locatello and E. Rodolà,
       "Relative representations enable zero-shot latent space communication", ICLR 2023.
    .. [2] V. Maiorca, L. Moschella, M. Fumero, F. Locatello and E. Rodolà, "Latent Space
       Translation via Inverse Relative Projection", arXiv:2406.15057, 2024.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign import RelativeProjector
    >>> rng = np.random.default_rng(0)
    >>> anchors, X = rng.standard_normal((50, 8)), rng.standard_normal((5, 8))
    >>> proj = RelativeProjector().fit(anchors)
    >>> proj.transform(X).shape
    (5, 50)
    >>> round(proj.score(X), 4)  # cosine of the round trip, around the anchor mean
    1.0
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "anchor_subsets": [list, None],
        "rescale": [StrOptions({"normalize", "scale"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "rtol": [Interval(Real, 0, 1, closed="left"), None],
    }

    def __init__(self, *, anchor_subsets=None, rescale="normalize", alpha=0.0, rtol=None,
                 device="cpu", batch_size=None):
        self.anchor_subsets = anchor_subsets
        self.rescale = rescale
        self.alpha = alpha
        self.rtol = rtol
        self.device = device
        self.batch_size = batch_size

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Compute the anchor statistics and the decoder.

        Parameters
        ----------
        X : array-like of shape (n_anchors, n_features_in)
            The anchors, embedded by this space's encoder.
        y : None
            Ignored; present for API consistency.

        Returns
        -------
        self : RelativeProjector
            The fitted estimator.
        """
        X = validate_data(self, as_numpy(X), dtype=FLOAT_DTYPES, ensure_min_samples=2)
        self.device_ = str(resolve_device(self.device))
        dev = torch.device(self.device_)
        mu, A_hat, scale, valid = center_normalize(to_tensor(X, dev, SOLVE_DTYPE))
        if not bool(valid.any()):
            raise ValueError(
                "All anchors are identical: their centred embeddings have no direction."
            )
        subsets = self._check_subsets(X.shape[0], dev)
        decoders, self.condition_numbers_, self.ranks_, _ = subset_decoders(
            A_hat, subsets, self.rtol, float(self.alpha)
        )
        index = torch.cat(subsets)
        self.source_mean_ = to_numpy(mu)
        self.scale_ = float(scale)
        self.anchor_index_ = to_numpy(index)
        self.anchors_ = to_numpy(A_hat[index])
        self.decoder_ = to_numpy(torch.cat(decoders) / len(subsets))
        self.n_features_out_ = int(index.shape[0])
        return self

    def _check_subsets(self, n_anchors, device):
        if self.anchor_subsets is None:
            return [torch.arange(n_anchors, device=device)]
        subsets = []
        for i, idx in enumerate(self.anchor_subsets):
            idx = np.asarray(idx)
            if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
                raise ValueError(f"anchor_subsets[{i}] must be a non-empty 1-D array of integers.")
            if idx.min() < 0 or idx.max() >= n_anchors or len(np.unique(idx)) != idx.size:
                raise ValueError(
                    f"anchor_subsets[{i}] must hold distinct row indices in [0, {n_anchors}) "
                    "into the anchors passed to fit."
                )
            subsets.append(torch.as_tensor(idx, dtype=torch.int64, device=device))
        if not subsets:
            raise ValueError("anchor_subsets is an empty list; use None for all anchors.")
        return subsets

    def _transform_fn(self, device, dtype=COMPUTE_DTYPE):
        A = to_tensor(self.anchors_.T, device, dtype)
        mu = to_tensor(self.source_mean_, device, dtype)
        floor = on_mean_floor(mu)
        return lambda B: encode(B, mu, floor) @ A

    def _inverse_transform_fn(self, device, dtype=COMPUTE_DTYPE):
        P = to_tensor(self.decoder_, device, dtype)
        mu = to_tensor(self.source_mean_, device, dtype)
        mode, scale = self.rescale, self.scale_
        return lambda R: rescale(R @ P, mode, scale, mu)

    def inverse_transform(self, X):
        """Decode relative representations into this space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Relative representations, as produced by the ``transform`` of a projector fitted on
            the *same anchors and subsets* in any space.

        Returns
        -------
        X_abs : ndarray of shape (n_samples, n_features_in)
            Absolute embeddings in this projector's space.
        """
        return super().inverse_transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Mean cosine, around the anchor mean, of ``X`` and its round trip via the relative space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Embeddings of the fitted space.
        y : None
            Ignored.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the weighted mean.

        Returns
        -------
        score : float in [-1, 1]
            1 when the anchors span every direction of ``X − μ``.
        """
        from ..metrics import mean_cosine_similarity

        check_is_fitted(self)
        X = self._validate_X(X)
        X = np.asarray(to_numpy(X) if isinstance(X, torch.Tensor) else X, dtype=np.float64)
        back = self.inverse_transform(self.transform(X)).astype(np.float64)
        mu = self.source_mean_
        return mean_cosine_similarity(X - mu, back - mu, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.target_tags.multi_output = False
        tags.target_tags.single_output = True
        return tags
