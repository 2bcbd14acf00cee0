"""Latent space translation via inverse relative projection (IRP).

The estimator and its collapsed transforms; the anchor pruning is in
:mod:`skalign._relative.irp_pruning`, the regularised decode in :mod:`skalign._relative.irp_decode`.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn import get_config

from ..base import BaseAligner
from ..exceptions import IllConditionedDecodeWarning
from ..utils._backend import (
    COMPUTE_DTYPE,
    SOLVE_DTYPE,
    make_generator,
    to_numpy,
    to_tensor,
    work_threads,
)
from ..utils._compat import Interval, StrOptions, _fit_context
from .anchors import center_normalize, on_mean_floor
from .irp_decode import _FAST_RIDGE, _WARN_GAIN, _gcv_alpha, _ridge_map, _Side, _spectral_map
from .irp_pruning import _pruning_rank, farthest_point_sampling

__all__ = ["InverseRelativeProjector"]


class InverseRelativeProjector(BaseAligner):
    r"""Zero-shot translation between embedding spaces through their shared relative space.

    In plain words: every embedding is described by its cosine similarities to a set of anchor
    items that both encoders have embedded ("relative representation"); since both encoders see
    roughly the same angles between items, the description computed in the source space is
    decoded in the target space by solving for the target vector that has those cosines to the
    target anchors. The solve is regularised (a ridge chosen from the anchors themselves by
    generalised cross-validation), so it cannot blow up noise into garbage.

    Given ``k`` paired anchors :math:`A_X` (source) and :math:`A_Y` (target), each space is
    centred on its anchor mean :math:`\mu` and its anchors L2-normalised (:math:`\hat A`). A source
    embedding is encoded by its cosines to the source anchors, :math:`r = \hat x \hat A_X^\top`
    with :math:`\hat x = (x - \mu_X)/\|x - \mu_X\|`, and decoded with the ridge pseudo-inverse of
    the target anchors (Eq. 2 of Maiorca et al. [1]_, regularised):

    .. math::

        \hat y = \operatorname*{arg\,min}_y \|y \hat A_Y^\top - r\|^2 + \alpha \|y\|^2
        = r\, (\hat A_Y^\top)^{+}_\alpha, \qquad
        (\hat A_Y^\top)^{+}_\alpha = \hat A_Y (\hat A_Y^\top \hat A_Y + \alpha I)^{-1}
        = (\hat A_Y \hat A_Y^\top + \alpha I)^{-1} \hat A_Y .

    With :math:`\alpha = 0` this is the paper's pseudo-inverse, whose gain
    :math:`\sigma_j / (\sigma_j^2 + \alpha)` on the :math:`j`-th singular direction of
    :math:`\hat A_Y` is unbounded: on real text encoders, where the two spaces disagree on angles
    by a few hundredths and the centred anchors have singular values down to :math:`10^{-8}`, the
    disagreement is amplified into noise that swamps the translation. A ridge bounds every gain by
    :math:`1/(2\sqrt\alpha)`.

    **Choosing α** (``alpha="gcv"``). The decode is a ridge regression of the ``k``
    relative coordinates of a query on the rows of :math:`\hat A_Y`. Taking as queries the anchors
    themselves, encoded in the *source* space (responses :math:`r_q = \hat a^X_q \hat A_X^\top`,
    :math:`q = 1, \dots, k`), generalised cross-validation [3]_ estimates how well the decode
    predicts a left-out anchor's cosine, which is exactly what the noise spoils. With the hat
    matrix :math:`H_\alpha = \hat A_Y (\hat A_Y^\top \hat A_Y + \alpha I)^{-1} \hat A_Y^\top` and
    the eigendecomposition :math:`\hat A_Y \hat A_Y^\top = U \Lambda U^\top`,

    .. math::

        \alpha^\star = \operatorname*{arg\,min}_\alpha
        \frac{\frac1k \sum_q \|(I - H_\alpha) r_q\|^2}{(1 - \operatorname{tr} H_\alpha / k)^2},
        \quad \sum_q \|(I - H_\alpha) r_q\|^2 = \sum_j \Big(\frac{\alpha}{\lambda_j +
        \alpha}\Big)^2 \sum_q (u_j^\top r_q)^2, \quad
        \operatorname{tr} H_\alpha = \sum_j \frac{\lambda_j}{\lambda_j + \alpha},

    a closed form in one eigendecomposition, evaluated on a grid of :math:`\alpha` from
    :math:`10^{-10}` to :math:`10^3` (the anchors are unit vectors, so this scale holds for any
    encoder). ``inverse_transform`` gets its own :math:`\alpha` the same way, roles swapped.

    **Pruning and subspaces** (§3.3 of [1]_). The anchors can further be pruned by greedy
    farthest point sampling with distance :math:`1 - |\hat a \cdot \hat b|` until the largest
    distance drops below :math:`\delta` (``pruning_threshold``), repeated from :math:`\omega`
    (``n_subspaces``) distinct random starts giving subsets :math:`S^1, \dots, S^\omega` whose
    decodes are averaged (Eq. 5). The GCV score is then computed on the first subset (the ω runs
    are exchangeable) and its :math:`\alpha` used for all. With the ridge, pruning is no longer
    needed for stability; a large :math:`\delta` keeps few anchors and lowers the map's rank.
    Collapsing the subspaces into one matrix ("anchor completion") makes ``transform`` one
    matrix product whatever :math:`\omega`:

    .. math::

        \hat y = \frac{1}{\omega} \sum_{i=1}^{\omega} \hat x \, \hat S_X^{i\top}
        (\hat S_Y^{i\top})^{+}_\alpha = \hat x \, \bar M, \qquad
        \bar M = \frac{1}{\omega} \sum_{i=1}^{\omega} \hat S_X^{i\top}
        (\hat S_Y^{i\top})^{+}_\alpha \in \mathbb R^{d_x \times d_y}.

    Each subset is solved by a Cholesky factorisation of the smaller of its two regularised Gram
    matrices, :math:`\hat S_Y \hat S_Y^\top + \alpha I` (``k_i × k_i``, sliced from the Gram
    matrix of all anchors, computed once) or :math:`\hat S_Y^\top \hat S_Y + \alpha I`
    (``d × d``, downdated from all anchors'). Finally the output is rescaled to the target
    anchors' scale and de-centred: :math:`y = s_Y\, \hat y / \|\hat y\| + \mu_Y` with :math:`s_Y`
    the mean norm of the centred target anchors (``rescale="normalize"``).

    Read more in the :ref:`User Guide <irp>`.

    Parameters
    ----------
    pruning_threshold : float in [0, 1], default=0.3
        :math:`\delta`: anchors kept in one subspace have pairwise :math:`|\cos| \le 1 - \delta`.
        ``0`` keeps every anchor. Larger values keep fewer, more orthogonal anchors: a lower
        condition number, but a lower-rank map. With the GCV ridge, δ ∈ [0, 0.5] are within 4 %
        of each other on real sentence encoders (0.3 within 0.5 % of the best everywhere
        measured); δ = 0.8 loses 4–35 % and δ = 0.9 more, because few anchors are left.
    n_subspaces : int, default=16
        :math:`\omega`, the number of pruned anchor subsets (distinct random starts) averaged.
        Clipped to the number of usable anchors.
    prune_on : {"target", "source", "joint"}, default="target"
        Space whose anchor cosines drive the pruning. The matrix inverted by ``transform`` is the
        target one, hence the default; ``"joint"`` uses the smaller of both spaces' distances.
        The same anchor indices are used in both spaces.
    rescale : {"normalize", "scale", "fit"}, default="normalize"
        ``"normalize"``: unit-normalise each decoded row, then multiply by :math:`s_Y`;
        ``"scale"``: multiply the raw decode by :math:`s_Y`; ``"fit"``: multiply the raw decode by
        the scalar :math:`c` minimising :math:`\sum_j \|c\, \hat y_j - (a^Y_j - \mu_Y)\|^2` over
        the anchors.
    alpha : "gcv" or float >= 0, default="gcv"
        Ridge :math:`\alpha` of the decode, in units of the squared norm of one (unit-norm)
        anchor. ``"gcv"`` chooses it per direction by generalised cross-validation on the
        anchors (see above); ``0`` is the plain pseudo-inverse of the paper. When the decode used
        amplifies noise more than ten times the bound of the GCV ridge, ``fit`` emits an
        :class:`~skalign.exceptions.IllConditionedDecodeWarning` (a
        :class:`scipy.linalg.LinAlgWarning` and a
        :class:`UserWarning`).
    rtol : float, default=None
        Explicit relative cut-off, an override: singular values of each :math:`\hat S_Y^i` below
        ``rtol · σ_max`` are dropped (computed by float64 SVDs, slower), on top of the ridge.
        ``None`` drops none (beyond ``max(k_i, d) · eps`` when ``alpha=0``). ``alpha=0`` with
        ``rtol=0.1`` and ``pruning_threshold=0`` is a spectrally truncated decode.
    min_anchors : int, default=2
        Subspaces keeping fewer anchors after pruning are discarded (capped at the rank of the
        anchors in the pruned space, so one-dimensional targets work). A :class:`ValueError` is
        raised when no subspace is left.
    random_state : int, RandomState instance or None, default=None
        Draws the distinct starting anchors. They are drawn on the CPU, so CPU and CUDA fits use
        the same anchor subsets.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the fit (float64 solves) and the transforms run; resolved at fit time into
        ``device_``.
    batch_size : int, default=None
        Rows per batch in ``transform``; ``None`` sizes batches from scikit-learn's
        ``working_memory``.

    Attributes
    ----------
    components_ : ndarray of shape (n_features_in, n_features_out)
        :math:`\bar M`, the averaged source→target subspace map (built in float64).
    inverse_components_ : ndarray of shape (n_features_out, n_features_in)
        The averaged target→source map
        :math:`\frac1\omega\sum_i \hat S_Y^{i\top}(\hat S_X^{i\top})^{+}_{\alpha'}`.
    source_mean_, target_mean_ : ndarray of shape (n_features_in,), (n_features_out,)
        Anchor means :math:`\mu_X`, :math:`\mu_Y`.
    source_scale_, target_scale_ : float
        Output scales of ``inverse_transform`` and ``transform`` (:math:`s_X`, :math:`s_Y`, or the
        fitted :math:`c` with ``rescale="fit"``).
    alpha_, inverse_alpha_ : float
        The ridge used by ``transform`` and by ``inverse_transform``.
    gcv_alpha_, inverse_gcv_alpha_ : float
        The ridges GCV chooses (equal to ``alpha_``, ``inverse_alpha_`` with ``alpha="gcv"``);
        the reference of the ill-conditioning warning.
    effective_ranks_ : ndarray of shape (n_kept_subspaces,)
        Effective rank (degrees of freedom) :math:`\operatorname{tr} H_\alpha = \sum_j
        \sigma_j^2 / (\sigma_j^2 + \alpha)` of each subspace's decode; the number of singular
        values kept when ``alpha=0``.
    condition_numbers_ : ndarray of shape (n_kept_subspaces,)
        1-norm condition number :math:`\|A\|_1 \|A^{-1}\|_1` of the matrix each subspace's decode
        solves, :math:`A = \hat S_Y^i \hat S_Y^{i\top} + \alpha I` or
        :math:`\hat S_Y^{i\top} \hat S_Y^i + \alpha I`, whichever is smaller (``inf`` when
        singular). It is within a factor of the size of :math:`A` of the 2-norm one,
        :math:`(\sigma_{\max}^2 + \alpha) / (\sigma_{\min}^2 + \alpha)`.
    inverse_condition_numbers_ : ndarray of shape (n_kept_subspaces,)
        The same for the source anchors (used by ``inverse_transform``).
    n_subspaces_ : int
        Number of subspaces actually averaged (``n_kept_subspaces`` below): ``n_subspaces``
        clipped to the usable anchors, less the subspaces that kept fewer than ``min_anchors``.
    subspace_indices_ : list of ndarray of int
        Anchor row indices kept by each subspace, in selection order (the first is its start;
        with ``pruning_threshold=0``, every usable anchor after the start, in index order).
    anchors_per_subspace_ : ndarray of shape (n_kept_subspaces,)
        Number of anchors kept by each subspace.
    relative_mismatch_ : float
        :math:`\|R_X - R_Y\|_F / \|R_Y\|_F` between the two spaces' relative representations of
        all anchors (:math:`R = \hat A \hat A^\top`): 0 when the spaces agree up to an
        angle-preserving map, the premise of the method.
    device_ : str
    n_features_in_ : int
    n_features_out_ : int
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    RelativeProjector : The relative encode and decode of one space, usable separately.
    ProcrustesAligner : Direct orthogonal map fitted on the same anchors.

    Notes
    -----
    The estimator is two :class:`RelativeProjector` halves sharing the anchor subsets: with
    ``S = irp.subspace_indices_``,
    ``RelativeProjector(anchor_subsets=S, alpha=irp.alpha_).fit(A_Y).inverse_transform(
    RelativeProjector(anchor_subsets=S).fit(A_X).transform(X))`` equals ``irp.transform(X)``, so
    the source and target sides can be fitted at different times, on different machines. Anchor
    subsets that coincide (e.g. ``pruning_threshold=0``) share one factorisation.

    On real sentence encoders (MiniLM, MPNet, multilingual E5; ``benchmarks/bench_irp_real.py``)
    the GCV ridge removes the collapse of the plain pseudo-inverse, but IRP still trails
    orthogonal Procrustes fitted on the same anchors by 0.01–0.1 in top-1 retrieval; prefer
    :class:`ProcrustesAligner` when a direct fit is possible, and IRP when its properties
    (no training, each side fitted on its own anchors) are what is needed.

    References
    ----------
    .. [1] V. Maiorca, L. Moschella, M. Fumero, F. Locatello and E. Rodolà, "Latent Space
       Translation via Inverse Relative Projection", arXiv:2406.15057, 2024.
    .. [2] L. Moschella, V. Maiorca, M. Fumero, A. Norelli, F. Locatello and E. Rodolà,
       "Relative representations enable zero-shot latent space communication", ICLR 2023.
    .. [3] G. H. Golub, M. Heath and G. Wahba, "Generalized cross-validation as a method for
       choosing a good ridge parameter", Technometrics 21(2), 1979.

    Examples
    --------
    >>> from skalign import InverseRelativeProjector
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(600, 16, scale=2.5, shift=7.0, noise=0.05, random_state=0)
    >>> irp = InverseRelativeProjector(random_state=0).fit(X[:300], Y[:300])
    >>> irp.score(X[300:], Y[300:]) > 0.95
    True
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "pruning_threshold": [Interval(Real, 0, 1, closed="both")],
        "n_subspaces": [Interval(Integral, 1, None, closed="left")],
        "prune_on": [StrOptions({"target", "source", "joint"})],
        "rescale": [StrOptions({"normalize", "scale", "fit"})],
        "alpha": [StrOptions({"gcv"}), Interval(Real, 0, None, closed="left")],
        "rtol": [Interval(Real, 0, 1, closed="left"), None],
        "min_anchors": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        pruning_threshold=0.3,
        n_subspaces=16,
        prune_on="target",
        rescale="normalize",
        alpha="gcv",
        rtol=None,
        min_anchors=2,
        random_state=None,
        device="cpu",
        batch_size=None,
    ):
        self.pruning_threshold = pruning_threshold
        self.n_subspaces = n_subspaces
        self.prune_on = prune_on
        self.rescale = rescale
        self.alpha = alpha
        self.rtol = rtol
        self.min_anchors = min_anchors
        self.random_state = random_state
        self.device = device
        self.batch_size = batch_size

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Prune the anchors into subspaces and build the averaged maps.

        Parameters
        ----------
        X : array-like of shape (n_anchors, n_features_in)
            Source embeddings of the anchors.
        y : array-like of shape (n_anchors, n_features_out)
            Target embeddings of the same anchors, row for row.

        Returns
        -------
        self : InverseRelativeProjector
            The fitted estimator.
        """
        X, y = self._validate_pair(X, y)
        # the biggest step: a decomposition of an anchor or feature Gram matrix
        with work_threads(max(len(X), X.shape[1], y.shape[1]) ** 3, self.device_):
            return self._fit_anchors(X, y)

    def _fit_anchors(self, X, y):
        dev = torch.device(self.device_)
        Xt, Yt = to_tensor(X, dev, SOLVE_DTYPE), to_tensor(y, dev, SOLVE_DTYPE)
        mu_x, Ax, s_x, valid_x = center_normalize(Xt)
        mu_y, Ay, s_y, valid_y = center_normalize(Yt)
        valid = valid_x & valid_y
        n_valid = int(valid.sum())
        if n_valid == 0:
            raise ValueError(
                "No usable anchor: every anchor lies on its space's anchor mean, so its centred "
                "embedding has no direction. Provide distinct anchors."
            )

        subsets = self._prune(Ax, Ay, valid, n_valid)
        # Anchor completion: both directions share the subsets, the Gram matrices and Âxᵀ Ây.
        Gx, Gy, C = Ax.T @ Ax, Ay.T @ Ay, Ax.T @ Ay
        small_k = Ax.shape[0] ** 2 * 8 <= get_config()["working_memory"] * 2**20
        Kx, Ky = (Ax @ Ax.T, Ay @ Ay.T) if small_k else (None, None)
        forward = _Side(enc=Ax, dec=Ay, G_enc=Gx, G_dec=Gy, K_dec=Ky, C=C)
        backward = _Side(enc=Ay, dec=Ax, G_enc=Gy, G_dec=Gx, K_dec=Kx, C=C.T)
        M, fwd = self._build_map(forward, subsets)
        M_inv, bwd = self._build_map(backward, subsets)
        self._warn_if_ill_conditioned(fwd, bwd)

        self.components_ = to_numpy(M)
        self.inverse_components_ = to_numpy(M_inv)
        self.source_mean_, self.target_mean_ = to_numpy(mu_x), to_numpy(mu_y)
        if self.rescale == "fit":
            self.target_scale_ = _lstsq_scale(Ax @ M, Yt - mu_y, s_y)
            self.source_scale_ = _lstsq_scale(Ay @ M_inv, Xt - mu_x, s_x)
        else:
            self.target_scale_, self.source_scale_ = float(s_y), float(s_x)
        self.n_subspaces_ = len(subsets)
        self.subspace_indices_ = [to_numpy(idx) for idx in subsets]
        self.anchors_per_subspace_ = np.array([len(idx) for idx in subsets])
        self.alpha_, self.inverse_alpha_ = fwd["alpha"], bwd["alpha"]
        self.gcv_alpha_, self.inverse_gcv_alpha_ = fwd["gcv_alpha"], bwd["gcv_alpha"]
        self.effective_ranks_ = fwd["dof"]
        self.condition_numbers_ = fwd["cond"]
        self.inverse_condition_numbers_ = bwd["cond"]
        self.relative_mismatch_ = _relative_mismatch(Gx, Gy, C)
        return self

    def _build_map(self, side, subsets):
        """The averaged map of one direction and its diagnostics (a dict)."""
        gcv_alpha = _gcv_alpha(side, subsets)
        alpha = gcv_alpha if self.alpha == "gcv" else float(self.alpha)
        info = {"alpha": alpha, "gcv_alpha": gcv_alpha, "gain": None}
        if self.rtol is None and alpha >= _FAST_RIDGE * gcv_alpha and alpha > 0:
            M, info["dof"], info["cond"] = _ridge_map(side, subsets, alpha)
        else:
            M, info["dof"], info["cond"], info["gain"] = _spectral_map(
                side, subsets, alpha, self.rtol
            )
        return M, info

    def _warn_if_ill_conditioned(self, fwd, bwd):
        """Warn when a decode amplifies relative-space noise far beyond the GCV ridge's bound."""
        bad = []
        for name, info in (("transform", fwd), ("inverse_transform", bwd)):
            if info["gain"] is None:
                continue
            bound = 0.5 / np.sqrt(info["gcv_alpha"])  # max of σ/(σ² + α) over σ at α = α_gcv
            worst = float(info["gain"].max())
            if worst > _WARN_GAIN * bound:
                bad.append(f"{name} amplifies it up to {worst:.3g}x ({worst / bound:.0f} times "
                           f"the GCV ridge alpha={info['gcv_alpha']:.3g})")
        if bad:
            warnings.warn(
                "InverseRelativeProjector: the decode is ill-conditioned for the noise in the "
                f"relative representations: {'; '.join(bad)}, so the translation may be "
                f"dominated by noise. Set alpha='gcv' (the default) or a larger alpha (now "
                f"alpha={self.alpha!r}, rtol={self.rtol!r}), or raise rtol or pruning_threshold.",
                IllConditionedDecodeWarning,
                stacklevel=3,
            )

    def _prune(self, Ax, Ay, valid, n_valid):
        """Anchor index subsets, one per kept subspace (torch int64 tensors on the fit device)."""
        n_runs = min(self.n_subspaces, n_valid)
        gen = make_generator(self.random_state, "cpu")
        valid_idx = torch.nonzero(valid.cpu()).squeeze(1)
        starts = valid_idx[torch.randperm(n_valid, generator=gen)[:n_runs]].to(Ax.device)
        pairs = {"target": (Ay, None), "source": (Ax, None), "joint": (Ay, Ax)}
        space, other = pairs[self.prune_on]
        if self.pruning_threshold == 0:
            # Nothing is pruned: each subset is every usable anchor, its start first.
            subsets = [torch.cat([s.view(1), valid_idx.to(Ax.device)[valid_idx.to(Ax.device) != s]])
                       for s in starts]
            return subsets
        order = farthest_point_sampling(
            space, starts, float(self.pruning_threshold), valid=valid, other=other
        )
        subsets = [row[row >= 0] for row in order]
        counts = [len(s) for s in subsets]
        needed = self.min_anchors
        if max(counts) < needed:
            needed = min(needed, _pruning_rank(space, other, valid))
        kept = [s for s in subsets if len(s) >= needed]
        if not kept:
            raise ValueError(
                f"After pruning with pruning_threshold={self.pruning_threshold}, no subspace kept "
                f"at least min_anchors={self.min_anchors} anchors (at most {max(counts)} kept): "
                f"the {self.prune_on} anchors are too similar to each other. Lower "
                "pruning_threshold or provide more diverse anchors."
            )
        return kept

    def _transform_fn(self, device, dtype=COMPUTE_DTYPE):
        return _map_fn(self.components_, self.source_mean_, self.target_mean_, self.target_scale_,
                       self.rescale, device, dtype)

    def _inverse_transform_fn(self, device, dtype=COMPUTE_DTYPE):
        return _map_fn(self.inverse_components_, self.target_mean_, self.source_mean_,
                       self.source_scale_, self.rescale, device, dtype)

    def inverse_transform(self, X):
        """Translate target-space embeddings into the source space through the relative space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Target-space embeddings.

        Returns
        -------
        X_hat : ndarray of shape (n_samples, n_features_in)
            The embeddings translated into the source space.
        """
        return super().inverse_transform(X)


def _map_fn(M, mean_in, mean_out, scale, rescale, device, dtype=COMPUTE_DTYPE):
    """Batch function of the collapsed map: ``normalize(B − μ_in) M``, rescaled, plus ``μ_out``.

    With ``rescale="normalize"`` the input normalisation cancels in the output normalisation and
    is skipped; the output is rescaled in place, so a batch costs one subtraction, one matrix
    product and a few in-place row operations. ``dtype`` is the dtype of the batches (float64 for
    float64 input).
    """
    M = to_tensor(M, device, dtype)
    mu_in, mu_out = to_tensor(mean_in, device, dtype), to_tensor(mean_out, device, dtype)
    # A row on the source mean (to rounding) has no direction: it maps to the target mean, not to
    # NaN or a noise direction. ‖Z‖ ≤ ‖C‖·‖M‖_F bounds the floor for the normalised output.
    floor = on_mean_floor(mu_in)
    if rescale == "normalize":
        floor *= float(torch.linalg.matrix_norm(M))

    def fn(B):
        C = B - mu_in
        Z = C @ M
        norms = torch.linalg.vector_norm(Z if rescale == "normalize" else C, dim=1, keepdim=True)
        factor = torch.where(norms > floor, scale / norms, torch.zeros_like(norms))
        return Z.mul_(factor).add_(mu_out)

    return fn


def _lstsq_scale(Y_hat, centred, fallback):
    """Scalar ``c`` minimising ``‖c·Ŷ − C‖²_F`` (raw decodes of the anchors vs centred anchors)."""
    denom = float((Y_hat * Y_hat).sum())
    return float((Y_hat * centred).sum()) / denom if denom > 0 else float(fallback)


def _relative_mismatch(Gx, Gy, C):
    """‖ÂxÂxᵀ − ÂyÂyᵀ‖_F / ‖ÂyÂyᵀ‖_F through the d×d Gram matrices ``ÂᵀÂ`` and ``C = ÂxᵀÂy``."""
    xx = torch.linalg.matrix_norm(Gx) ** 2
    yy = torch.linalg.matrix_norm(Gy) ** 2
    xy = torch.linalg.matrix_norm(C) ** 2
    return float(torch.sqrt((xx + yy - 2 * xy).clamp_min(0)) / torch.sqrt(yy))
