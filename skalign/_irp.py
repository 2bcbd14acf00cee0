"""Latent space translation via inverse relative projection (IRP)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn import get_config

from ._backend import SOLVE_DTYPE, make_generator, to_numpy, to_tensor
from ._compat import Interval, StrOptions, _fit_context
from ._relative import _center_normalize, _subset_decoders
from .base import BaseAligner

__all__ = ["InverseRelativeProjector", "farthest_point_sampling"]


# ------------------------------------------------------------------------- anchor pruning (FPS)
def _abs_cosine_rows(spaces):
    """Return ``rows(idx) -> |cos|`` of anchors ``idx`` against all anchors, shape (len(idx), k).

    ``spaces`` holds the normalised anchors of every space the pruning looks at; with several, the
    distance is the minimum over spaces (``|cos|`` the maximum). The full ``k × k`` matrix is
    precomputed when it fits in ``working_memory``, else rows are computed on demand.
    """
    def compute(idx):
        out = None
        for A in spaces:
            c = (A[idx] @ A.T).abs()
            out = c if out is None else torch.maximum(out, c)
        return out

    k = spaces[0].shape[0]
    if k * k * 8 * len(spaces) <= get_config()["working_memory"] * 2**20:
        full = compute(torch.arange(k, device=spaces[0].device))
        return lambda idx: full[idx]
    return compute


def farthest_point_sampling(anchors, starts, threshold, *, valid=None, other=None):
    r"""Greedy farthest point sampling of anchors, batched over several random starts.

    Distances are :math:`d(a, b) = 1 - |\hat a \cdot \hat b|` between L2-normalised anchors, so
    nearly opposite anchors count as near-duplicates. Each run starts from its own anchor and
    repeatedly adds the anchor whose distance to the chosen set is largest, stopping when that
    distance falls below ``threshold``: every pair kept by a run has :math:`|\cos| \le 1 - \delta`.
    All runs advance together on an ``(n_runs, k)`` matrix of minimum distances with a per-run
    stop mask; each step costs :math:`O(n_\text{runs} \, k)`.

    Parameters
    ----------
    anchors : torch.Tensor of shape (k, d)
        L2-normalised anchors.
    starts : torch.Tensor of shape (n_runs,), integer
        First anchor of each run.
    threshold : float in [0, 1]
        The stopping distance :math:`\delta`; ``0`` keeps every valid anchor.
    valid : torch.Tensor of shape (k,), bool, default=None
        Anchors that may be selected (``None``: all).
    other : torch.Tensor of shape (k, d2), default=None
        The same anchors in a second space; the distance is then the minimum of both spaces'.

    Returns
    -------
    order : torch.Tensor of shape (n_runs, max_kept), int64
        Row ``i`` lists the anchors kept by run ``i`` in selection order, padded with ``-1``.
    """
    spaces = [anchors] if other is None else [anchors, other]
    rows_of = _abs_cosine_rows(spaces)
    k, device = anchors.shape[0], anchors.device
    n_runs = starts.shape[0]
    runs = torch.arange(n_runs, device=device)
    neg_inf = torch.tensor(-float("inf"), dtype=anchors.dtype, device=device)
    blocked = torch.zeros(n_runs, k, dtype=torch.bool, device=device)
    if valid is not None:
        blocked |= ~valid
    blocked[runs, starts] = True
    min_dist = torch.where(blocked, neg_inf, (1.0 - rows_of(starts)).clamp_min(0.0))
    picks = [starts]
    active = torch.ones(n_runs, dtype=torch.bool, device=device)
    for _ in range(k - 1):
        best, cand = min_dist.max(dim=1)
        active &= best >= threshold
        if not bool(active.any()):
            break
        picks.append(torch.where(active, cand, -1))
        updated = torch.minimum(min_dist, (1.0 - rows_of(cand)).clamp_min(0.0))
        updated[runs, cand] = neg_inf
        min_dist = torch.where(active.unsqueeze(1), updated, min_dist)
    return torch.stack(picks, dim=1)


# ------------------------------------------------------------------------------- the estimator
class InverseRelativeProjector(BaseAligner):
    r"""Zero-shot translation between embedding spaces through their shared relative space.

    Given ``k`` paired anchors :math:`A_X` (source) and :math:`A_Y` (target), each space is
    centred on its anchor mean :math:`\mu` and its anchors L2-normalised (:math:`\hat A`). A source
    embedding is encoded by its cosines to the source anchors and decoded with the pseudo-inverse
    of the target anchors (Maiorca et al. [1]_, Eq. 2):

    .. math::

        \hat y = \underbrace{\tfrac{x - \mu_X}{\|x - \mu_X\|}\, \hat A_X^\top}_{\text{relative
        representation}}\; (\hat A_Y^\top)^{+} .

    **Stability** (§3.3 of [1]_). The pseudo-inverse is ill-conditioned when anchors are nearly
    collinear, so the anchors are pruned by greedy farthest point sampling with distance
    :math:`1 - |\hat a \cdot \hat b|` until the largest distance drops below
    :math:`\delta` (``pruning_threshold``), and this is repeated from :math:`\omega`
    (``n_subspaces``) distinct random starts giving anchor subsets :math:`S^1, \dots, S^\omega`
    whose decodes are averaged (Eq. 5):

    .. math::

        \hat y = \frac{1}{\omega} \sum_{i=1}^{\omega} \hat x \, \hat S_X^{i\top}
        (\hat S_Y^{i\top})^{+} = \hat x \, \bar M, \qquad
        \bar M = \frac{1}{\omega} \sum_{i=1}^{\omega} \hat S_X^{i\top} (\hat S_Y^{i\top})^{+}
        \in \mathbb R^{d_x \times d_y},

    with :math:`\hat x = (x - \mu_X)/\|x - \mu_X\|`. Collapsing the subspaces into the single
    matrix :math:`\bar M` ("anchor completion") makes ``transform`` one matrix product whatever
    :math:`\omega`. Finally the output is rescaled to the target anchors' scale and de-centred:
    :math:`y = s_Y\, \hat y / \|\hat y\| + \mu_Y` with :math:`s_Y` the mean norm of the centred
    target anchors (``rescale="normalize"``). ``inverse_transform`` runs the same construction
    in the other direction with the same anchor subsets.

    Parameters
    ----------
    pruning_threshold : float in [0, 1], default=0.5
        :math:`\delta`: anchors kept in one subspace have pairwise :math:`|\cos| \le 1 - \delta`.
        ``0`` keeps every anchor. Larger values keep fewer, more orthogonal anchors and lower the
        condition number, at the price of a lower-rank map.
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
    rtol : float, default=None
        Relative cut-off of each pseudo-inverse (singular values below ``rtol · σ_max`` are
        dropped), computed by a float64 SVD. ``None`` uses ``max(k_i, d) · eps``. A large value
        (e.g. ``0.1``) with ``pruning_threshold=0`` gives a spectrally truncated decode, a strong
        alternative to pruning.
    min_anchors : int, default=2
        Subspaces keeping fewer anchors after pruning are discarded (capped at the rank of the
        anchors in the pruned space, so one-dimensional targets work). A :class:`ValueError` is
        raised when no subspace is left.
    random_state : int, RandomState instance or None, default=None
        Draws the distinct starting anchors. They are drawn on the CPU, so CPU and CUDA fits use
        the same anchor subsets.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
    batch_size : int, default=None
        Rows per batch in ``transform``; ``None`` sizes batches from ``working_memory``.

    Attributes
    ----------
    components_ : ndarray of shape (n_features_in, n_features_out)
        :math:`\bar M`, the averaged source→target subspace map (built in float64).
    inverse_components_ : ndarray of shape (n_features_out, n_features_in)
        The averaged target→source map
        :math:`\frac1\omega\sum_i \hat S_Y^{i\top}(\hat S_X^{i\top})^{+}`.
    mean_in_, mean_out_ : ndarray of shape (n_features_in,), (n_features_out,)
        Anchor means :math:`\mu_X`, :math:`\mu_Y`.
    scale_in_, scale_out_ : float
        Output scales of ``inverse_transform`` and ``transform`` (:math:`s_X`, :math:`s_Y`, or the
        fitted :math:`c` with ``rescale="fit"``).
    n_subspaces_ : int
        Number of subspaces actually averaged (``n_kept_subspaces`` below): ``n_subspaces``
        clipped to the usable anchors, less the subspaces that kept fewer than ``min_anchors``.
    subspace_indices_ : list of ndarray of int
        Anchor row indices kept by each subspace, in selection order (the first is its start).
    anchors_per_subspace_ : ndarray of shape (n_kept_subspaces,)
        Number of anchors kept by each subspace.
    condition_numbers_ : ndarray of shape (n_kept_subspaces,)
        Condition number :math:`\sigma_{\max}/\sigma_{\min}` of each :math:`\hat S_Y^i` (the matrix
        pseudo-inverted by ``transform``); ``inf`` when singular.
    inverse_condition_numbers_ : ndarray of shape (n_kept_subspaces,)
        The same for :math:`\hat S_X^i` (used by ``inverse_transform``).
    ranks_ : ndarray of shape (n_kept_subspaces,)
        Singular values of :math:`\hat S_Y^i` kept by the ``rtol`` cut-off.
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
    RelativeProjector : the relative encode and decode of one space, usable separately.
    ProcrustesAligner : direct orthogonal map fitted on the same anchors.

    Notes
    -----
    The estimator is two :class:`RelativeProjector` halves sharing the anchor subsets: with
    ``S = irp.subspace_indices_``,
    ``RelativeProjector(anchor_subsets=S).fit(A_Y).inverse_transform(
    RelativeProjector(anchor_subsets=S).fit(A_X).transform(X))`` equals ``irp.transform(X)``, so
    the source and target sides can be fitted at different times, on different machines. Anchor
    subsets that coincide (e.g. ``pruning_threshold=0``) share one SVD.

    References
    ----------
    .. [1] V. Maiorca, L. Moschella, M. Fumero, F. Locatello and E. Rodolà, "Latent Space
       Translation via Inverse Relative Projection", arXiv:2406.15057, 2024.
    .. [2] L. Moschella, V. Maiorca, M. Fumero, A. Norelli, F. Locatello and E. Rodolà,
       "Relative representations enable zero-shot latent space communication", ICLR 2023.

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
        "rtol": [Interval(Real, 0, 1, closed="left"), None],
        "min_anchors": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        pruning_threshold=0.5,
        n_subspaces=16,
        prune_on="target",
        rescale="normalize",
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
        """
        X, y = self._validate_pair(X, y)
        dev = torch.device(self.device_)
        Xt, Yt = to_tensor(X, dev, SOLVE_DTYPE), to_tensor(y, dev, SOLVE_DTYPE)
        mu_x, Ax, s_x, valid_x = _center_normalize(Xt)
        mu_y, Ay, s_y, valid_y = _center_normalize(Yt)
        valid = valid_x & valid_y
        n_valid = int(valid.sum())
        if n_valid == 0:
            raise ValueError(
                "No usable anchor: every anchor lies on its space's anchor mean, so its centred "
                "embedding has no direction. Provide distinct anchors."
            )

        subsets = self._prune(Ax, Ay, valid, n_valid)
        # Anchor completion: sum_i Ŝx_iᵀ pinv(Ŝy_iᵀ) / ω is one product of the stacked subsets.
        index = torch.cat(subsets)
        P_y, conds, ranks = _subset_decoders(Ay, subsets, self.rtol)
        P_x, inv_conds, _ = _subset_decoders(Ax, subsets, self.rtol)
        M = Ax[index].T @ torch.cat(P_y) / len(subsets)
        M_inv = Ay[index].T @ torch.cat(P_x) / len(subsets)

        self.components_ = to_numpy(M)
        self.inverse_components_ = to_numpy(M_inv)
        self.mean_in_, self.mean_out_ = to_numpy(mu_x), to_numpy(mu_y)
        if self.rescale == "fit":
            self.scale_out_ = _lstsq_scale(Ax @ M, Yt - mu_y, s_y)
            self.scale_in_ = _lstsq_scale(Ay @ M_inv, Xt - mu_x, s_x)
        else:
            self.scale_out_, self.scale_in_ = float(s_y), float(s_x)
        self.n_subspaces_ = len(subsets)
        self.subspace_indices_ = [to_numpy(idx) for idx in subsets]
        self.anchors_per_subspace_ = np.array([len(idx) for idx in subsets])
        self.condition_numbers_ = conds
        self.inverse_condition_numbers_ = inv_conds
        self.ranks_ = ranks
        self.relative_mismatch_ = _relative_mismatch(Ax, Ay)
        return self

    def _prune(self, Ax, Ay, valid, n_valid):
        """Anchor index subsets, one per kept subspace (torch int64 tensors on the fit device)."""
        n_runs = min(self.n_subspaces, n_valid)
        gen = make_generator(self.random_state, "cpu")
        valid_idx = torch.nonzero(valid.cpu()).squeeze(1)
        starts = valid_idx[torch.randperm(n_valid, generator=gen)[:n_runs]].to(Ax.device)
        pairs = {"target": (Ay, None), "source": (Ax, None), "joint": (Ay, Ax)}
        space, other = pairs[self.prune_on]
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

    def _transform_fn(self, device):
        return _map_fn(self.components_, self.mean_in_, self.mean_out_, self.scale_out_,
                       self.rescale, device)

    def _inverse_transform_fn(self, device):
        return _map_fn(self.inverse_components_, self.mean_out_, self.mean_in_, self.scale_in_,
                       self.rescale, device)

    def inverse_transform(self, X):
        """Translate target-space embeddings into the source space through the relative space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Target-space embeddings.

        Returns
        -------
        X_hat : ndarray of shape (n_samples, n_features_in)
        """
        return super().inverse_transform(X)


def _map_fn(M, mean_in, mean_out, scale, rescale, device):
    """Batch function of the collapsed map: ``normalize(B − μ_in) M``, rescaled, plus ``μ_out``.

    With ``rescale="normalize"`` the input normalisation cancels in the output normalisation and
    is skipped; the output is rescaled in place, so a batch costs one subtraction, one matrix
    product and a few in-place row operations.
    """
    M = to_tensor(M, device)
    mu_in, mu_out = to_tensor(mean_in, device), to_tensor(mean_out, device)

    def fn(B):
        C = B - mu_in
        Z = C @ M
        norms = torch.linalg.vector_norm(Z if rescale == "normalize" else C, dim=1, keepdim=True)
        # A row on the source mean has no direction: it maps to the target mean, not to NaN.
        factor = torch.where(norms > 0, scale / norms, torch.zeros_like(norms))
        return Z.mul_(factor).add_(mu_out)

    return fn


def _lstsq_scale(Y_hat, centred, fallback):
    """Scalar ``c`` minimising ``‖c·Ŷ − C‖²_F`` (raw decodes of the anchors vs centred anchors)."""
    denom = float((Y_hat * Y_hat).sum())
    return float((Y_hat * centred).sum()) / denom if denom > 0 else float(fallback)


def _pruning_rank(space, other, valid):
    ranks = [int(torch.linalg.matrix_rank(A[valid])) for A in (space, other) if A is not None]
    return max(1, min(ranks))


def _relative_mismatch(Ax, Ay):
    """‖ÂxÂxᵀ − ÂyÂyᵀ‖_F / ‖ÂyÂyᵀ‖_F through d×d Gram matrices (no k×k matrix)."""
    xx = torch.linalg.matrix_norm(Ax.T @ Ax) ** 2
    yy = torch.linalg.matrix_norm(Ay.T @ Ay) ** 2
    xy = torch.linalg.matrix_norm(Ax.T @ Ay) ** 2
    return float(torch.sqrt((xx + yy - 2 * xy).clamp_min(0)) / torch.sqrt(yy))
