"""Unsupervised orthogonal alignment of several encoders and their ensemble on the sphere."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted

from ..base import BaseTransformer, check_sample_weight
from ..utils._backend import (
    COMPUTE_DTYPE,
    SOLVE_DTYPE,
    as_numpy,
    polar,
    resolve_device,
    row_normalize,
    to_numpy,
    to_tensor,
    work_threads,
)
from ..utils._compat import Interval, StrOptions, _fit_context, validate_data
from ..utils._optim import LossHistory
from .karcher import karcher_mean
from .views import check_stacked_views, split_views

__all__ = ["OrthogonalEnsembleAligner", "geodesic_distance"]


def geodesic_distance(A, B):
    r"""Angle between paired unit rows, :math:`\theta = 2\operatorname{atan2}(\|a-b\|, \|a+b\|)`.

    Accurate over :math:`[0, \pi]` and with a finite gradient everywhere, unlike
    :math:`\arccos\langle a, b\rangle`, whose derivative is infinite at :math:`\pm 1`.
    """
    return 2 * torch.atan2(torch.linalg.vector_norm(A - B, dim=-1),
                           torch.linalg.vector_norm(A + B, dim=-1))


def _unit_views(X, n_views, device, dtype=COMPUTE_DTYPE):
    """Stacked ``(n, m·d)`` → unit-norm views ``(n, m, d)`` and the mask of present ones."""
    V = split_views(to_tensor(X, device, dtype), n_views)
    U = row_normalize(V)
    return U, (U != 0).any(-1)


class OrthogonalEnsembleAligner(BaseTransformer):
    r"""Align several encoders' embedding spaces without labels and average them on the sphere.

    ``X`` holds the embeddings of the same ``n`` samples by ``m = n_views`` encoders of equal
    width ``d``, stacked horizontally (see :func:`skalign.stack_views`); rows are L2-normalised
    per view. ``fit`` learns one orthogonal matrix :math:`R_i` per encoder, with
    :math:`R_{\text{ref}} = I`, so that the aligned rows :math:`x_{ij} R_i` of sample ``j`` agree;
    ``transform`` returns, per sample, the mean of the aligned embeddings on the unit sphere.

    **Solvers.** ``"geodesic"`` (the objective of [1]_) minimises, for each :math:`i \ne` ref,

    .. math::

        \frac1n \sum_{j=1}^n
        \theta\big(\operatorname{normalize}(x_{ij} R_i),\, x_{\text{ref},j}\big)
        + \lambda \|R_i^\top R_i - I\|_F^2,
        \qquad \theta(a, b) = 2 \operatorname{atan2}(\|a - b\|, \|a + b\|),

    with Adam, started from the Procrustes solution and finished by the polar projection
    :math:`R_i \leftarrow U V^\top` (:math:`U \Sigma V^\top = R_i`), so that the maps are exact
    isometries (reflections allowed). The mean angle is an L1 criterion, less sensitive to
    samples on which the encoders disagree than the least-squares ``"procrustes"`` solution

    .. math:: R_i = U V^\top, \qquad U \Sigma V^\top = X_i^\top X_{\text{ref}}.

    ``"gpa"`` (generalised Procrustes analysis) aligns all views to their consensus
    :math:`Y = \operatorname{normalize}(\frac1m \sum_i X_i R_i)`, alternating
    :math:`R_i = \operatorname{polar}(X_i^\top Y)` and the update of ``Y``, and then fixes the
    gauge :math:`R_i \leftarrow R_i R_{\text{ref}}^\top`; no view is privileged during the fit.

    **Aggregation.** ``"karcher"`` returns the intrinsic (Karcher) mean
    :math:`\arg\min_{\|\mu\|=1} \sum_i \theta(\mu, x_{ij} R_i)^2` (see
    :func:`skalign.manifold.karcher_mean`), ``"extrinsic"`` the normalised arithmetic mean, and
    ``None`` the aligned views themselves, stacked as ``(n, m·d)``.

    **Missing embeddings.** An all-zero embedding has no direction; it is treated as missing:
    left out of the fit's sums and of the means, and kept as zero by ``transform_views``. A
    sample whose embeddings are all zero is mapped to the zero vector.

    Read more in the :ref:`User Guide <ensemble>`.

    Parameters
    ----------
    n_views : int, default=1
        Number of encoders stacked in ``X``; its width must be divisible by it. With one view
        there is nothing to align and ``transform`` only L2-normalises.
    reference : int, default=0
        Index of the view whose space the others are rotated into (:math:`R_{\text{ref}} = I`).
    solver : {"geodesic", "procrustes", "gpa"}, default="geodesic"
        How the rotations are learned (see above).
    aggregation : {"karcher", "extrinsic"} or None, default="karcher"
        What ``transform`` returns (see above).
    orthogonality_penalty : float, default=1.0
        Weight λ of :math:`\|R^\top R - I\|_F^2` in the ``"geodesic"`` objective.
    learning_rate : float, default=1e-3
        Adam's step size for ``"geodesic"``.
    max_iter : int, default=200
        Iteration cap of ``"geodesic"`` (Adam steps) and ``"gpa"`` (alternations).
    tol : float, default=1e-6
        Convergence: stop when the loss has not improved by more than
        ``tol · max(|best loss|, 1)`` for 10 Adam steps, or for 2 GPA alternations.
    karcher_tol : float, default=1e-6
        Stopping threshold (radians) of the Karcher iteration in ``transform``.
    karcher_max_iter : int, default=100
        Iteration cap of the Karcher iteration.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where fit and transform run; resolved into ``device_``.
    batch_size : int, default=None
        Rows per batch in ``transform``; ``None`` sizes batches from scikit-learn's
        ``working_memory``.
    verbose : int, default=0
        Print the loss during the fit.

    Attributes
    ----------
    components_ : ndarray of shape (n_views, d, d)
        The orthogonal maps :math:`R_i` (float64); aligned view ``i`` is ``x_i @ components_[i]``
        and ``components_[reference]`` is the identity.
    loss_curve_ : list of float
        Objective per iteration: the mean angle (radians) plus the penalty, averaged over the
        non-reference views, for ``"geodesic"``; the mean squared chordal distance to the
        consensus for ``"gpa"``; one value for ``"procrustes"``.
    n_iter_ : int
        Iterations run (1 for ``"procrustes"`` and for a single view).
    device_ : str
        The device the model was fitted on.
    n_features_in_ : int
        ``n_views · d``.
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    skalign.ProcrustesAligner : Supervised orthogonal map between two spaces.

    Notes
    -----
    ``fit`` is unsupervised: ``y`` is ignored, so the model can be fitted on unlabelled samples
    and placed first in a :class:`~sklearn.pipeline.Pipeline` whose classifier uses the labels.
    The ensemble only makes sense when the encoders recover the same latent variables up to an
    isometry each — e.g. encoders trained with a contrastive (InfoNCE) objective on the same data
    with different seeds [1]_.

    References
    ----------
    .. [1] Z. Peng, M. Khoeini, A. Vaswani and M. Ester, "Improving OOD generalization of
       pre-trained encoders via aligned embedding-space ensembles", NeurIPS 2024 Workshop on
       Self-Supervised Learning, arXiv:2411.13073.
    .. [2] J. C. Gower, "Generalized Procrustes analysis", Psychometrika 40, 1975.
    .. [3] H. Karcher, "Riemannian center of mass and mollifier smoothing", Comm. Pure Appl.
       Math. 30, 1977.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from skalign import OrthogonalEnsembleAligner, stack_views
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.standard_normal((500, 8))
    >>> Q = ortho_group.rvs(8, size=3, random_state=0)
    >>> X = stack_views([Z @ q + 0.05 * rng.standard_normal((500, 8)) for q in Q])
    >>> ens = OrthogonalEnsembleAligner(n_views=3, solver="procrustes").fit(X)
    >>> np.allclose(ens.components_[1], Q[1].T @ Q[0], atol=0.05)
    True
    >>> ens.transform(X).shape
    (500, 8)
    """

    _parameter_constraints: dict = {
        **BaseTransformer._parameter_constraints,
        "n_views": [Interval(Integral, 1, None, closed="left")],
        "reference": [Interval(Integral, 0, None, closed="left")],
        "solver": [StrOptions({"geodesic", "procrustes", "gpa"})],
        "aggregation": [StrOptions({"karcher", "extrinsic"}), None],
        "orthogonality_penalty": [Interval(Real, 0, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "karcher_tol": [Interval(Real, 0, None, closed="neither")],
        "karcher_max_iter": [Interval(Integral, 1, None, closed="left")],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_views=1, reference=0, solver="geodesic", aggregation="karcher",
                 orthogonality_penalty=1.0, learning_rate=1e-3, max_iter=200, tol=1e-6,
                 karcher_tol=1e-6, karcher_max_iter=100, device="cpu", batch_size=None,
                 verbose=0):
        self.n_views = n_views
        self.reference = reference
        self.solver = solver
        self.aggregation = aggregation
        self.orthogonality_penalty = orthogonality_penalty
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.karcher_tol = karcher_tol
        self.karcher_max_iter = karcher_max_iter
        self.device = device
        self.batch_size = batch_size
        self.verbose = verbose

    # ------------------------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn one orthogonal map per encoder from unlabelled samples.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_views * d)
            The encoders' embeddings of the same samples, stacked horizontally.
        y : None
            Ignored; present for API consistency (a pipeline may pass labels through).

        Returns
        -------
        self : OrthogonalEnsembleAligner
            The fitted estimator.
        """
        X = validate_data(self, check_stacked_views(as_numpy(X), self.n_views), dtype=FLOAT_DTYPES,
                          ensure_min_samples=2)
        if X.shape[1] % self.n_views:
            raise ValueError(
                f"X has {X.shape[1]} features, which is not divisible by n_views={self.n_views}; "
                "stack views of equal width with skalign.stack_views."
            )
        if self.reference >= self.n_views:
            raise ValueError(
                f"reference={self.reference} must be smaller than n_views={self.n_views}."
            )
        self.device_ = str(resolve_device(self.device))
        # the biggest step: one view's rows times a d x d map, at every iteration
        with work_threads(len(X) * (X.shape[1] // self.n_views) ** 2, self.device_):
            return self._fit_views(X)

    def _fit_views(self, X):
        dev = torch.device(self.device_)
        m, d = self.n_views, X.shape[1] // self.n_views
        V, present = _unit_views(X, m, dev, SOLVE_DTYPE)  # (n, m, d), (n, m)
        if m == 1:
            R, curve = torch.eye(d, dtype=SOLVE_DTYPE, device=dev).unsqueeze(0), [0.0]
        elif self.solver == "gpa":
            R, curve = self._fit_gpa(V, present)
        else:
            R = self._procrustes(V)
            curve = [float(self._geodesic_objective(V, present, R, penalty=0.0))]
            if self.solver == "geodesic":
                R, curve = self._fit_geodesic(V, present, R)
        self.components_ = to_numpy(R)
        self.loss_curve_ = curve
        self.n_iter_ = len(curve)
        return self

    def _procrustes(self, V):
        R = polar(torch.einsum("nmd,ne->mde", V, V[:, self.reference]))
        R[self.reference] = torch.eye(R.shape[-1], dtype=R.dtype, device=R.device)
        return R

    def _geodesic_objective(self, V, present, R, *, penalty):
        """Mean angle to the reference plus the penalty, averaged over non-reference views.

        Pairs where either embedding is missing (zero) are left out of the mean.
        """
        others = [i for i in range(self.n_views) if i != self.reference]
        Ro = R[others]
        A = row_normalize(torch.einsum("nmd,mde->mne", V[:, others], Ro))
        both = (present[:, others] & present[:, [self.reference]]).T.to(V.dtype)  # (m-1, n)
        theta = geodesic_distance(A, V[:, self.reference].unsqueeze(0))
        theta = (theta * both).sum(1) / both.sum(1).clamp_min(1.0)
        eye = torch.eye(Ro.shape[-1], dtype=Ro.dtype, device=Ro.device)
        ortho = ((Ro.mT @ Ro - eye) ** 2).sum((1, 2))
        return (theta + penalty * ortho).mean()

    def _fit_geodesic(self, V, present, R0):
        others = [i for i in range(self.n_views) if i != self.reference]
        Vc = V.to(COMPUTE_DTYPE)
        R = R0.to(COMPUTE_DTYPE).clone()
        param = torch.nn.Parameter(R[others].clone())
        opt = torch.optim.Adam([param], lr=self.learning_rate)
        history = LossHistory(
            type(self).__name__, max_iter=self.max_iter, tol=self.tol, verbose=self.verbose,
            divergence_hint="Lower learning_rate or orthogonality_penalty.",
        )
        index = (torch.tensor(others, device=R.device),)
        penalty = float(self.orthogonality_penalty)

        def snapshot():
            return param.detach().clone()

        for _ in range(self.max_iter):
            opt.zero_grad()
            R_full = R.index_put(index, param)
            loss = self._geodesic_objective(Vc, present, R_full, penalty=penalty)
            if history.record(float(loss.detach()), snapshot=snapshot):
                break
            loss.backward()
            opt.step()
        history.finish()
        R_out = R0.clone()
        R_out[others] = polar(history.best_state.to(SOLVE_DTYPE))  # the best iterate
        # The projection can in principle undo the gain; never return worse than the start.
        if (self._geodesic_objective(V, present, R_out, penalty=0.0)
                > self._geodesic_objective(V, present, R0, penalty=0.0)):
            R_out = R0
        return R_out, history.curve

    def _fit_gpa(self, V, present):
        Y = V[:, self.reference]
        weight = present.to(V.dtype)
        history = LossHistory(type(self).__name__, max_iter=self.max_iter, tol=self.tol,
                              n_iter_no_change=2, verbose=self.verbose)
        for _ in range(self.max_iter):
            R = polar(torch.einsum("nmd,ne->mde", V, Y))
            A = torch.einsum("nmd,mde->nme", V, R)
            Y = row_normalize(A.sum(1))
            sq = ((A - Y.unsqueeze(1)) ** 2).sum(-1) * weight
            if history.record(float(sq.sum() / weight.sum().clamp_min(1.0))):
                break
        history.finish()
        R = R @ R[self.reference].mT.unsqueeze(0)
        R[self.reference] = torch.eye(R.shape[-1], dtype=R.dtype, device=R.device)
        return R, history.curve

    # ------------------------------------------------------------------------------ transform
    def _aligned_fn(self, device, dtype=COMPUTE_DTYPE):
        R = to_tensor(self.components_, device, dtype)
        m = self.n_views

        def aligned(B):
            return torch.einsum("nmd,mde->nme", row_normalize(split_views(B, m)), R)

        return aligned

    def _transform_fn(self, device, dtype=COMPUTE_DTYPE):
        aligned = self._aligned_fn(device, dtype)
        if self.aggregation is None:
            return lambda B: aligned(B).flatten(1)
        if self.aggregation == "extrinsic":
            return lambda B: _extrinsic_mean(aligned(B))
        return lambda B: karcher_mean(aligned(B), tol=self.karcher_tol,
                                      max_iter=self.karcher_max_iter)

    def transform(self, X):
        """Ensemble embedding of each sample: the mean of its aligned embeddings on the sphere.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_views * d)
            Stacked embeddings by the same encoders, in the same order, as in ``fit``.

        Returns
        -------
        E : ndarray of shape (n_samples, d), or (n_samples, n_views * d) when ``aggregation=None``
            Unit-norm ensemble embeddings (float64 for float64 input, float32 otherwise).
        """
        check_is_fitted(self)
        X = self._validate_X(check_stacked_views(X, self.n_views))
        return self._apply(self._transform_fn, X, self._n_features_out)

    def transform_views(self, X):
        """The aligned, L2-normalised views ``normalize(x_i) @ R_i``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_views * d)
            Stacked views (:func:`~skalign.stack_views`).

        Returns
        -------
        views : ndarray of shape (n_samples, n_views, d)
            The aligned views, one unit vector per sample and view.
        """
        check_is_fitted(self)
        X = self._validate_X(check_stacked_views(X, self.n_views))
        return self._apply(self._aligned_fn, X, self.n_features_in_)

    def score(self, X, y=None, sample_weight=None):
        """Agreement of the aligned views: mean cosine between each view and their consensus.

        The consensus is the normalised mean of the aligned views; a perfect alignment of
        noiseless isometric encoders scores 1. Greater is better, so the default scoring of a
        grid search prefers better-aligned models; with labels, use
        :data:`skalign.metrics.recall_at_1_scorer` instead.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_views * d)
            Stacked views (:func:`~skalign.stack_views`).
        y : None
            Ignored.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample's views in the mean.

        Returns
        -------
        score : float in [-1, 1]
            Mean cosine between the aligned views and their consensus.
        """
        A = torch.from_numpy(np.asarray(self.transform_views(X), dtype=np.float64))
        w = check_sample_weight(sample_weight, len(A))
        present = (A != 0).any(-1)
        cos = (A * _extrinsic_mean(A).unsqueeze(1)).sum(-1)
        weights = present.to(A.dtype) * (1.0 if w is None else torch.from_numpy(w).unsqueeze(1))
        total = weights.sum()
        return float((cos * weights).sum() / total) if bool(total > 0) else 0.0

    @property
    def _n_features_out(self):
        d = self.n_features_in_ // self.n_views
        return d if self.aggregation is not None else self.n_features_in_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        return tags


def _extrinsic_mean(A):
    """Normalised arithmetic mean over views (zero = missing views add nothing).

    Rows whose mean vanishes (e.g. two antipodal views) fall back to their first present view;
    rows with no present view stay zero.
    """
    s = A.sum(1)
    norms = torch.linalg.vector_norm(s, dim=-1, keepdim=True)
    tiny = torch.finfo(A.dtype).eps * A.shape[1]
    first = A[torch.arange(len(A), device=A.device), (A != 0).any(-1).to(torch.int8).argmax(1)]
    return torch.where(norms > tiny, s / norms.clamp_min(tiny), first)
