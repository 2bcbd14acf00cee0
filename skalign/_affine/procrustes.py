"""Orthogonal Procrustes alignment, the classic baseline for latent space translation."""

from __future__ import annotations

import numpy as np

from ..base import BaseAligner
from ..utils._backend import affine_fn, affine_numpy_fn, polar, to_numpy, work_threads
from ..utils._compat import _fit_context
from .norms import NORMALIZE_CONSTRAINT, NormalizeMixin

__all__ = ["ProcrustesAligner"]


class ProcrustesAligner(NormalizeMixin, BaseAligner):
    r"""Orthogonal (optionally scaled) Procrustes map from source to target embeddings.

    The rotation (with one global scale if ``scale=True``) that best carries the centred source
    anchors onto the centred target anchors. It preserves angles and distances, so it cannot
    overfit the way a general linear map can; on real text encoders it is the strongest simple
    translator from about 100 pairs on (user guide, "Defaults on real encoders").

    With centred anchors :math:`\bar X = X - \mu_X` and :math:`\bar Y = Y - \mu_Y`, the map is

    .. math::

        W = \operatorname*{arg\,min}_{W W^\top = I} \|\bar X W - \bar Y\|_F = U V^\top,
        \qquad U \Sigma V^\top = \operatorname{svd}(\bar X^\top \bar Y),

    and ``transform(x) = s · (x − μ_X) W + μ_Y`` (with ``x`` and the anchors L2-normalised
    per row, and the output scaled by ``target_norm_``, on the sides ``normalize_`` names).
    When ``d_x ≠ d_y`` the thin SVD gives a ``d_x × d_y`` map with orthonormal rows
    (``d_x ≤ d_y``) or columns (``d_x > d_y``); this is exactly the solution obtained by
    zero-padding the narrower space to the wider dimension and solving the square problem.
    With ``scale=True`` the global factor :math:`s = \operatorname{tr}\Sigma / \|\bar X\|_F^2`
    is fitted as well.

    Read more in the :ref:`User Guide <procrustes>`.

    Parameters
    ----------
    center : bool, default=True
        Centre both spaces on their anchor means (and add the target mean back).
    scale : bool, default=False
        Fit a global scale factor ``s`` (similarity Procrustes).
    normalize : {"auto", "source", "target", "both"} or bool, default="auto"
        L2-normalise the rows of one side or both before fitting, and the same side's rows in
        ``transform`` and ``inverse_transform`` (row by row, so a row's image does not depend on
        the others). Rows the map produces in a normalised space are scaled to its mean anchor
        norm: ``target_norm_`` in ``transform``, ``source_norm_`` in ``inverse_transform`` (which
        therefore returns directions at one typical norm, not each row's own norm). ``"auto"``
        normalises a side whose row norms carry nothing the other side can reproduce: a raw
        encoder (norms varying) against one whose norms are constant, such as all-MiniLM-L6-v2
        without its Normalize module against multilingual-e5 (unit norm), or two
        constant-norm spaces of very different sizes; when both sides' norms vary it keeps them.
        ``False`` fits the plain map (the behaviour before this parameter), ``True`` means
        ``"both"``. An explicit choice that keeps raw a side ``"auto"`` would normalise warns with
        :class:`~skalign.exceptions.ScaleMismatchWarning`. The choice and its reason are stored in
        ``normalize_`` and ``normalize_reason_`` (``skalign fit`` prints them).

        Keep ``"auto"``; when both sides are raw encoders (nothing is normalised then), pass
        ``normalize=True`` if the translated store is searched by Euclidean distance or inner
        product. Measured on real encoders in the :ref:`User Guide <baselines>` ("Raw and
        normalised encoders").
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the SVD and the transforms run.
    batch_size : int, default=None
        Rows per batch in ``transform``; ``None`` sizes from ``sklearn.get_config()``.

    Attributes
    ----------
    components_ : ndarray of shape (n_features_in, n_features_out)
        The orthogonal map ``W`` (float64).
    scale_ : float
        The fitted scale ``s`` (1.0 when ``scale=False``).
    source_mean_ : ndarray of shape (n_features_in,)
    target_mean_ : ndarray of shape (n_features_out,)
    normalize_ : {"none", "source", "target", "both"}
        The sides whose rows are L2-normalised (see ``normalize``).
    normalize_reason_ : str
        Why, with the anchors' row-norm statistics (mean and coefficient of variation per side).
    source_norm_ : float
        Mean row norm of the source anchors.
    target_norm_ : float
        Mean row norm of the target anchors.
    device_ : str
        The device the model was fitted on.
    n_features_in_ : int
    n_features_out_ : int
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    LinearAligner : Unconstrained (ridge) affine map.

    References
    ----------
    .. [1] P. H. Schönemann, "A generalized solution of the orthogonal Procrustes problem",
       Psychometrika 31, 1966.

    Examples
    --------
    >>> from skalign import ProcrustesAligner
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(n_samples=200, n_features=16, relation="orthogonal",
    ...                           random_state=0)
    >>> round(ProcrustesAligner().fit(X, Y).score(X, Y), 4)
    1.0
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "center": ["boolean"],
        "scale": ["boolean"],
        "normalize": NORMALIZE_CONSTRAINT,
    }

    def __init__(self, *, center=True, scale=False, normalize="auto", device="cpu",
                 batch_size=None):
        self.center = center
        self.scale = scale
        self.normalize = normalize
        self.device = device
        self.batch_size = batch_size

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the orthogonal map on paired anchors.

        Parameters
        ----------
        X : array-like of shape (n_pairs, n_features_in)
            Source embeddings of the anchors.
        y : array-like of shape (n_pairs, n_features_out)
            Target embeddings of the same anchors, row for row.

        Returns
        -------
        self : ProcrustesAligner
            The fitted aligner.
        """
        import torch

        X, y = self._validate_pair(X, y)
        # the biggest product is (d_x, n) x (n, d_y): below the work rule's size a busy
        # machine's second thread only waits (skalign.utils._backend.work_threads)
        with work_threads(len(X) * X.shape[1] * y.shape[1], self.device_):
            X, y = self._fit_normalization(X, y)
            Xc, Yc, mx, my = self._centered_pair_tensors(X, y, center=self.center)
            M = Xc.T @ Yc
            W = polar(M)
            s = 1.0
            if self.scale:
                denom = float((Xc * Xc).sum())
                s = float(torch.linalg.svdvals(M).sum()) / denom if denom > 0 else 1.0
        self.components_ = to_numpy(W)
        self.scale_ = s
        self.source_mean_ = to_numpy(mx)
        self.target_mean_ = to_numpy(my)
        return self

    def _affine(self, inverse=False):
        normalize_in, scale_out = self._affine_io(inverse)
        if inverse:
            W = self.components_.T / (self.scale_ if self.scale_ else 1.0)
            means = self.target_mean_, self.source_mean_
        else:
            W, means = self.components_ * self.scale_, (self.source_mean_, self.target_mean_)
        return (W, *means), {"normalize_in": normalize_in, "scale_out": scale_out}

    def _transform_fn(self, device, dtype=None):
        args, kw = self._affine()
        return affine_fn(*args, device, dtype=dtype, **kw)

    def _transform_numpy_fn(self, dtype=np.float32):
        args, kw = self._affine()
        return affine_numpy_fn(*args, dtype=dtype, **kw)

    def _inverse_transform_fn(self, device, dtype=None):
        args, kw = self._affine(inverse=True)
        return affine_fn(*args, device, dtype=dtype, **kw)

    def _inverse_transform_numpy_fn(self, dtype=np.float32):
        args, kw = self._affine(inverse=True)
        return affine_numpy_fn(*args, dtype=dtype, **kw)

    def orthogonality_error(self):
        r"""Distance of the fitted map from orthogonality, in float64.

        Returns
        -------
        error : float
            :math:`\|W^\top W - I\|_F` (or :math:`\|W W^\top - I\|_F` for a wide map).
        """
        W = self.components_
        G = W.T @ W if W.shape[0] >= W.shape[1] else W @ W.T
        return float(np.linalg.norm(G - np.eye(len(G))))
