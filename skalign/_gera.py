r"""GeRA: contrastive alignment regularised by diffusion operators on unpaired data."""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import torch
import torch.nn.functional as F

from ._backend import (
    SOLVE_DTYPE,
    NumericalError,
    make_generator,
    row_normalize,
    to_numpy,
    to_tensor,
)
from ._compat import Interval, StrOptions, _fit_context
from ._knn import knn_graph
from ._optim import LossHistory
from .base import BaseAligner, SharedSpaceMixin, check_unpaired

__all__ = ["GeRAAligner"]

_KERNELS = ("heat", "linear", "squared", "inverse")
_DIVERGENCES = ("kl", "js", "frobenius")
_LOG_FLOOR = 1e-30  # probabilities below this are treated as 0 inside logarithms
_VALIDATION_GALLERY = 4096  # max. training pairs used as distractors for the validation loss
_MIN_VALIDATION_PAIRS = 50  # fewer validation pairs than this: early stopping is turned off


# ------------------------------------------------------------------------------ maps
def _preprocess(A, mean):
    """Centre on the pool mean and L2-normalise: the coordinates in which both the original
    geometry is measured and the maps are applied."""
    return row_normalize(A - mean)


def _forward(params, U):
    """Apply a map (linear, or linear + residual MLP) to preprocessed rows; unit-norm output."""
    Z = torch.addmm(params["intercept"], U, params["coef"])
    if "hidden_coef" in params:
        H = F.gelu(torch.addmm(params["hidden_intercept"], U, params["hidden_coef"]))
        Z = Z + H @ params["output_coef"]
    return row_normalize(Z)


def _initial_params(U, k, *, init, mapping, hidden_size, generator, coef=None):
    """Initial parameters of one map.

    ``coef`` given (``init="procrustes"``, see :func:`_procrustes_factors`): the map starts there.
    ``init="pca"``: the top-``k`` principal directions of the preprocessed pool (orthonormal
    columns; when ``k > d`` an isometric embedding padded with zero columns), so the map starts as
    close to an isometry as its width allows. ``init="random"``: the orthonormal polar factor of a
    Gaussian matrix. The MLP branch starts at zero output, so every map starts linear.
    """
    d = U.shape[1]
    dev = U.device
    if coef is not None:
        W = coef
    elif init == "pca":
        U64 = U.to(SOLVE_DTYPE)
        _, vecs = torch.linalg.eigh(U64.T @ U64)
        V = vecs.flip(-1)  # descending eigenvalues
        W = V[:, :k] if k <= d else torch.cat([V, V.new_zeros(d, k - d)], dim=1)
    else:
        G = torch.randn(d, k, generator=generator, device=dev, dtype=SOLVE_DTYPE)
        Us, _, Vh = torch.linalg.svd(G, full_matrices=False)
        W = Us @ Vh
    params = {"coef": W.to(U.dtype), "intercept": U.new_zeros(k)}
    if mapping == "mlp":
        params["hidden_coef"] = (
            torch.randn(d, hidden_size, generator=generator, device=dev) / math.sqrt(d)
        ).to(U.dtype)
        params["hidden_intercept"] = U.new_zeros(hidden_size)
        params["output_coef"] = U.new_zeros(hidden_size, k)
    return params


def _procrustes_factors(Ux, Uy, k):
    r"""Initial coefficients ``(F, G)`` of the two maps with :math:`F G^\top` = Procrustes.

    With the full SVD :math:`U_x^\top U_y = P \Sigma Q^\top` of the paired rows'
    cross-covariance, the orthogonal Procrustes map is :math:`W = P_r Q_r^\top` with
    :math:`r = \min(d_x, d_y)`. ``F`` holds the first ``k`` columns of ``P`` and ``G`` the first
    ``k`` of ``Q`` (zero columns where a space is narrower than ``k``), so for ``k >= r`` the
    shared-space similarity :math:`f(u_x) \cdot g(u_y) \propto u_x F G^\top u_y^\top = u_x W
    u_y^\top` is exactly Procrustes' (for ``k < r``, its best rank-``k`` part), and both maps are
    isometries of the columns they keep.
    """
    M = Ux.to(SOLVE_DTYPE).T @ Uy.to(SOLVE_DTYPE)
    P, _, Qh = torch.linalg.svd(M, full_matrices=True)
    Q = Qh.mT

    def first(V):
        V = V[:, :k]
        return torch.cat([V, V.new_zeros(V.shape[0], k - V.shape[1])], 1) if V.shape[1] < k else V

    return first(P).to(Ux.dtype), first(Q).to(Uy.dtype)


# -------------------------------------------------------------------------- losses
def contrastive_loss(Zx, Zy, scale):
    r"""Symmetric InfoNCE (CLIP) loss of unit-norm paired rows.

    .. math:: \tfrac12\big[\mathrm{CE}(s Z_X Z_Y^\top, I) + \mathrm{CE}(s Z_Y Z_X^\top, I)\big]
    """
    logits = scale * (Zx @ Zy.T)
    labels = torch.arange(len(Zx), device=Zx.device)
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


def _sq_dist(Z):
    return (2.0 - 2.0 * (Z @ Z.mT)).clamp_min(0.0)


def _bandwidth(D2, neighbor_mask, bandwidth):
    if bandwidth != "median":
        return torch.as_tensor(float(bandwidth), dtype=D2.dtype, device=D2.device)
    return D2.detach()[neighbor_mask].median().clamp_min(1e-8)


def _log_kernel(D2, kernel, eps):
    """Elementwise log of the kernel κ(D); ``eps`` is the space's bandwidth."""
    if kernel == "heat":
        return -D2 / eps
    cos = 1.0 - 0.5 * D2
    if kernel == "linear":
        return torch.log((0.5 * (1.0 + cos)).clamp_min(_LOG_FLOOR))
    if kernel == "squared":
        return 2.0 * torch.log((0.5 * (1.0 + cos)).clamp_min(_LOG_FLOOR))
    # inverse: 1 / (D + c) with c = sqrt(eps); D from a clamped D² keeps the gradient finite at 0
    return -torch.log(D2.clamp_min(1e-12).sqrt() + eps.sqrt())


def _log_operator(D2, support, kernel, eps, steps):
    """log of the row-stochastic diffusion operator P = diag(W1)⁻¹W (or its power Pᵗ)."""
    logW = _log_kernel(D2, kernel, eps)
    if support is not None:
        logW = logW.masked_fill(~support, -torch.inf)
    logP = torch.log_softmax(logW, dim=-1)
    if steps > 1:
        P = torch.linalg.matrix_power(logP.exp(), steps)
        logP = torch.log(P.clamp_min(_LOG_FLOOR))
    return logP


def _row_divergence(logP, logQ, divergence):
    """Divergence between corresponding rows of two operators, averaged over rows."""
    P, Q = logP.exp(), logQ.exp()
    if divergence == "frobenius":
        div = (P - Q).square()
    elif divergence == "kl":
        div = P * (logP - logQ)
    else:
        logM = torch.logaddexp(logP, logQ) - math.log(2.0)
        div = 0.5 * (P * (logP - logM) + Q * (logQ - logM))
    return div.sum(-1).mean()


def geometric_term(U, Z, *, kernel="heat", divergence="kl", bandwidth="median", steps=1,
                   neighbors=None, original_sq_dist=None):
    r"""Divergence between the diffusion operators of the same points in two spaces.

    ``U`` holds the points in the original space and ``Z`` their images under the map, both with
    unit-norm rows. Two layouts:

    * local (``neighbors=None``): ``U`` of shape (A, K + 1, d) and ``Z`` of shape (A, K + 1, k),
      one neighbourhood :math:`S_i = \{i\} \cup N_K(i)` per anchor (the anchor first), each with
      its own :math:`(K+1) \times (K+1)` operator;
    * batch: ``U`` of shape (B, d) and ``Z`` of shape (B, k), one operator over the B points
      restricted to ``neighbors`` (B, K + 1), the indices of each row's K nearest points in the
      original space (itself first). For ``steps=1`` only these B × (K + 1) entries are computed.
      ``original_sq_dist`` may pass the (B, B) squared distances of ``U`` already computed to find
      the neighbours.

    .. math::

        W_{jl} = \kappa(\|u_j - u_l\|),\quad P = \operatorname{diag}(W\mathbf 1)^{-1} W,\quad
        L_g = \operatorname{mean}_{\text{rows } j}\ \mathrm{Div}\big(P^{\circ\,t}_{j\cdot}
        \,\|\, P^{a\,t}_{j\cdot}\big).

    The bandwidth :math:`\varepsilon` of each space is the median squared distance between
    neighbours in that space (the aligned one detached), so an isometry gives exactly 0.

    Returns
    -------
    loss : scalar tensor (differentiable with respect to ``Z``)
    """
    if neighbors is not None and neighbors.shape[1] < 2:
        return Z.sum() * 0.0
    support = None
    Do_full = _sq_dist(U) if original_sq_dist is None else original_sq_dist
    if neighbors is None:
        Do, Da = Do_full, _sq_dist(Z)
        nb = torch.zeros(Do.shape[-2:], dtype=torch.bool, device=Do.device)
        nb[0, 1:] = True
        nb = nb.expand_as(Do)
    elif steps == 1:  # sparse rows: entry (j, m) is the pair (j, neighbors[j, m])
        Do = Do_full.gather(1, neighbors)  # a B x B GEMM beats gathering B(K+1) rows
        Da = _sq_dist(Z).gather(1, neighbors)
        nb = torch.ones_like(Do, dtype=torch.bool)
        nb[:, 0] = False
    else:  # powers need the whole (sparse-supported) B x B operator
        Do, Da = Do_full, _sq_dist(Z)
        support = torch.zeros(Do.shape, dtype=torch.bool, device=Do.device)
        support.scatter_(1, neighbors, True)
        support |= torch.eye(len(support), dtype=torch.bool, device=support.device)
        nb = support & ~torch.eye(len(support), dtype=torch.bool, device=support.device)
    eps_o, eps_a = _bandwidth(Do, nb, bandwidth), _bandwidth(Da, nb, bandwidth)
    logPo = _log_operator(Do, support, kernel, eps_o, steps)
    logPa = _log_operator(Da, support, kernel, eps_a, steps)
    return _row_divergence(logPo, logPa, divergence)


# ------------------------------------------------------------------------ estimator
class GeRAAligner(SharedSpaceMixin, BaseAligner):
    r"""Geometrically regularised alignment (GeRA) of two embedding spaces.

    Two maps, :math:`f` for the source and :math:`g` for the target, send both spaces into a shared
    L2-normalised ``n_components``-dimensional space. They are trained with a contrastive loss on
    the paired rows plus a geometric term that keeps each space's local neighbourhoods — found in
    its *original* coordinates over the paired and the *unpaired* points — undistorted:

    .. math::

        L = \underbrace{\tfrac12\big[\mathrm{CE}(s\,Z_X Z_Y^\top, I)
            + \mathrm{CE}(s\,Z_Y Z_X^\top, I)\big]}_{\text{symmetric InfoNCE on pairs}}
          + \alpha\,\tfrac12\big(L_g^X + L_g^Y\big),

    with :math:`s = 1/\tau`. For each space, with :math:`u = (x - \mu)/\|x - \mu\|` (centred on the
    pool mean) and :math:`z = f(u)`, :math:`L_g` compares the diffusion operators
    :math:`P = \operatorname{diag}(W\mathbf 1)^{-1}W` of the kernels
    :math:`W^\circ_{jl} = \kappa(\|u_j - u_l\|)` and :math:`W^a_{jl} = \kappa(\|z_j - z_l\|)`
    row by row with a divergence (KL, Jensen–Shannon or squared Frobenius). Kernels:
    heat :math:`e^{-D^2/\varepsilon}`, linear :math:`(1 + \cos)/2`, squared
    :math:`((1 + \cos)/2)^2`, inverse :math:`1/(D + \sqrt\varepsilon)`; :math:`\varepsilon` is the
    median squared neighbour distance of each space, measured per batch. ``alpha=0`` is the
    contrastive-only baseline (no graph is built).

    Defaults (chosen on real sentence-encoder embeddings, ``benchmarks/tune_gera_real.py``):
    training starts from the orthogonal Procrustes solution of the pairs (``init="procrustes"``)
    and runs a fixed budget of ``max_iter=20`` epochs of Adam at ``learning_rate=1e-2`` with
    ``temperature=0.5``, without early stopping. With 25–100 pairs this contrastive fine-tuning
    raised held-out top-1 far above Procrustes and leave-one-out-tuned ridge on both encoder pairs
    tried (e.g. 0.79 against 0.45 and 0.39 with 50 MiniLM → MPNet pairs); with 300–1,000
    MiniLM → MPNet pairs it ends about 1 point below its own Procrustes start and 0.5 below
    :class:`ProcrustesAligner`. ``alpha`` defaults to ``0``: on those encoders the geometric term
    changed held-out top-1 by less than 1 point from 50 pairs on (at best +0.7 with 300 pairs) and
    cost 5 points with 25 MiniLM → MPNet pairs. Turn it on (``alpha`` ≈ 1–10) and compare by
    cross-validation where the encoders' neighbourhoods are known to carry the structure to
    transfer, or with ``init="pca"``/``"random"``.

    Read more in the :ref:`User Guide <gera>`.

    Parameters
    ----------
    n_components : int, default=None
        Width ``k`` of the shared space; ``None`` uses ``min(n_features_in, n_features_out)``.
    alpha : float, default=0.0
        Weight of the geometric term. ``0`` (default) gives plain contrastive alignment.
    n_neighbors : int, default=10
        ``K`` of the nearest-neighbour graphs (clipped to the pool size minus one in
        ``n_neighbors_``).
    kernel : {"heat", "linear", "squared", "inverse"}, default="heat"
        Kernel :math:`\kappa` of the diffusion operators.
    divergence : {"kl", "js", "frobenius"}, default="kl"
        Row-wise divergence between the original and the aligned operators.
    mode : {"local", "batch"}, default="local"
        ``"local"``: one ``(K+1) × (K+1)`` operator per anchor over the anchor and its K nearest
        neighbours in the whole pool (graph built once, block-wise). ``"batch"``: one operator over
        the mini-batch (pairs plus sampled unpaired rows), restricted to each row's K nearest
        neighbours within the batch.
    geometric_batch_size : int, default=None
        Rows per mini-batch and space drawn for the geometric term: the anchors whose
        neighbourhoods are compared (``"local"``; half from the batch's pairs, half drawn from
        the pool) or the unpaired rows added to the batch (``"batch"``).
        ``None``: ``ceil(2 B / (K + 1))`` for ``"local"`` (the term then maps about twice as many
        rows as the contrastive term) and ``B`` for ``"batch"``, with ``B`` the pair batch size.
    diffusion_steps : int, default=1
        Compare the operators' powers :math:`P^t`.
    bandwidth : "median" or float, default="median"
        :math:`\varepsilon` of the heat and inverse kernels; a float fixes it for both spaces.
    temperature : float, default=0.5
        Contrastive temperature :math:`\tau`. CLIP's ``0.07`` separates a few dozen pairs
        perfectly from the first step, so the loss gives almost no signal and the maps drift; a
        softer ``0.2``–``0.5`` keeps the gradient informative.
    learn_temperature : bool, default=False
        Learn :math:`\log(1/\tau)` (clamped at ``log 100``) with the maps.
    mapping : {"linear", "mlp"}, default="linear"
        ``"mlp"`` adds a one-hidden-layer GELU branch (initialised to output 0) to the linear map.
    hidden_size : int, default=128
        Width of the MLP branch.
    init : {"procrustes", "pca", "random"}, default="procrustes"
        ``"procrustes"``: with the SVD :math:`U_x^\top U_y = P \Sigma Q^\top` of the
        preprocessed training pairs, :math:`f` starts at :math:`P` and :math:`g` at :math:`Q`
        (first ``n_components`` columns), so that :math:`f(u_x)\cdot g(u_y) \propto u_x P Q^\top
        u_y^\top` — the orthogonal Procrustes map :math:`W = PQ^\top` of the pairs — at
        iteration 0. ``"pca"``: each map at its space's principal directions (not aligned).
        ``"random"``: a random orthonormal map.
    learning_rate : float, default=1e-2
        Adam step size.
    pair_batch_size : int, default=256
        Pairs per mini-batch (clipped to the number of training pairs).
    max_iter : int, default=20
        Number of epochs (passes over the training pairs); with ``tol=None`` and no early stopping
        exactly this many run. With few pairs an epoch is one Adam step, and the held-out
        retrieval of the contrastive fine-tuning peaks after 10–40 of them and then declines as
        the maps overfit the pairs, so the default is a fixed budget rather than a convergence cap.
    tol : float, default=None
        Minimum improvement of the monitored loss (validation loss with ``early_stopping``, training
        loss otherwise); training stops after ``n_iter_no_change`` epochs without it, and a
        :class:`~sklearn.exceptions.ConvergenceWarning` is raised when ``max_iter`` comes first.
        ``None``: no convergence test (a fixed budget of ``max_iter`` epochs, no warning; with
        early stopping, any improvement counts).
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the pairs, monitor their contrastive loss against up
        to 4096 training targets, stop when it stalls and keep the maps of the epoch with the
        lowest validation loss. Needs at
        least 50 validation pairs (500 pairs at the default fraction): with fewer, a
        :class:`UserWarning` is raised and training runs for ``max_iter`` epochs, because a
        validation loss over a handful of pairs stops at noise.
    validation_fraction : float, default=0.1
        Fraction of the pairs held out for early stopping.
    random_state : int, RandomState instance or None, default=None
        Seeds the local torch generator (initialisation, batches, anchors, validation split).
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where training and the transforms run.
    batch_size : int, default=None
        Rows per batch in :meth:`transform` and :meth:`transform_target`; ``None`` sizes batches
        from scikit-learn's ``working_memory``. Training always runs in float32; the transforms
        compute in float64 for float64 input.
    verbose : int, default=0
        ``1`` prints the loss every ``max_iter // 10`` epochs, ``2`` every epoch.

    Attributes
    ----------
    n_components_ : int
    n_neighbors_ : int
        The ``K`` actually used (0 when ``alpha=0`` or a pool has a single point).
    source_params_, target_params_ : dict of str to ndarray
        Parameters of ``f`` and ``g``: ``coef`` (d, k), ``intercept`` (k,) and, for
        ``mapping="mlp"``, ``hidden_coef``, ``hidden_intercept``, ``output_coef``.
    source_mean_ : ndarray of shape (n_features_in,)
    target_mean_ : ndarray of shape (n_features_out,)
    temperature_ : float
    n_unpaired_source_, n_unpaired_target_ : int
        Sizes of the unpaired pool seen by this fit.
    n_iter_ : int
        Epochs run.
    loss_curve_ : list of float
        Mean training loss per epoch.
    validation_scores_ : list of float or None
        Validation contrastive loss per epoch (``None`` without early stopping).
    best_validation_score_ : float or None
    device_ : str
    n_features_in_ : int
    n_features_out_ : int
        Width of the target embeddings ``y``.
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    ASIFAligner : Training-free relative-representation baseline.
    ProcrustesAligner : Closed-form isometry from pairs only (GeRA's starting point).
    LinearAligner : Ridge map with a leave-one-out penalty, the strong pair-only baseline.

    References
    ----------
    .. [1] Z. Klebe, T. Shnitzer, M. Yurochkin, L. Karlinsky, J. Solomon, "GeRA: Label-Efficient
       Geometrically Regularized Alignment", arXiv:2310.00672, 2023.
    .. [2] R. R. Coifman, S. Lafon, "Diffusion maps", Applied and Computational Harmonic
       Analysis 21, 2006.
    .. [3] A. Radford et al., "Learning Transferable Visual Models From Natural Language
       Supervision", ICML 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign import GeRAAligner, UnpairedPool
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(n_samples=400, n_features=8, relation="orthogonal",
    ...                           random_state=0)
    >>> pool = UnpairedPool(X=X[100:], y=Y[100:])
    >>> gera = GeRAAligner(alpha=1.0, random_state=0).fit(X[:100], Y[:100], unpaired=pool)
    >>> gera.transform(X[100:]).shape
    (300, 8)
    >>> bool(gera.score(X[100:], Y[100:]) > 0.5)
    True
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "kernel": [StrOptions(set(_KERNELS))],
        "divergence": [StrOptions(set(_DIVERGENCES))],
        "mode": [StrOptions({"local", "batch"})],
        "geometric_batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "diffusion_steps": [Interval(Integral, 1, None, closed="left")],
        "bandwidth": [StrOptions({"median"}), Interval(Real, 0, None, closed="neither")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "learn_temperature": ["boolean"],
        "mapping": [StrOptions({"linear", "mlp"})],
        "hidden_size": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"pca", "procrustes", "random"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "pair_batch_size": [Interval(Integral, 2, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_components=None, alpha=0.0, n_neighbors=10, kernel="heat",
                 divergence="kl", mode="local", geometric_batch_size=None, diffusion_steps=1,
                 bandwidth="median", temperature=0.5, learn_temperature=False, mapping="linear",
                 hidden_size=128, init="procrustes", learning_rate=1e-2, pair_batch_size=256,
                 max_iter=20, tol=None, n_iter_no_change=10, early_stopping=False,
                 validation_fraction=0.1, random_state=None, device="cpu", batch_size=None,
                 verbose=0):
        self.n_components = n_components
        self.alpha = alpha
        self.n_neighbors = n_neighbors
        self.kernel = kernel
        self.divergence = divergence
        self.mode = mode
        self.geometric_batch_size = geometric_batch_size
        self.diffusion_steps = diffusion_steps
        self.bandwidth = bandwidth
        self.temperature = temperature
        self.learn_temperature = learn_temperature
        self.mapping = mapping
        self.hidden_size = hidden_size
        self.init = init
        self.learning_rate = learning_rate
        self.pair_batch_size = pair_batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.device = device
        self.batch_size = batch_size
        self.verbose = verbose

    # ------------------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, unpaired=None):
        """Train the two maps on paired rows and the unpaired pool.

        Parameters
        ----------
        X : array-like of shape (n_pairs, n_features_in)
            Source embeddings of the pairs.
        y : array-like of shape (n_pairs, n_features_out)
            Target embeddings of the same items, row for row.
        unpaired : UnpairedPool, default=None
            Unpaired source (``unpaired.X``) and/or target (``unpaired.y``) embeddings, used by the
            geometric term and for the centring means. Passed whole to every cross-validation fold.

        Returns
        -------
        self : GeRAAligner
            The fitted aligner.
        """
        X, y = self._validate_pair(X, y)
        pool = check_unpaired(unpaired, X.shape[1], y.shape[1])
        dev = torch.device(self.device_)
        gen = make_generator(self.random_state, dev)
        self.n_components_ = self.n_components or min(X.shape[1], y.shape[1])
        self.n_unpaired_source_ = 0 if pool is None else pool.n_source
        self.n_unpaired_target_ = 0 if pool is None else pool.n_target

        val_idx, train_idx = self._validation_split(len(X), gen)
        n_train, early_stopping = len(train_idx), len(val_idx) > 0
        data = _Pools.build(X, y, pool, train_idx, val_idx, dev)
        graphs = self._neighbour_graphs(data.Ux, data.Uy)
        fp, gp, log_scale = self._initial_maps(data.Ux, data.Uy, n_train, gen)
        leaves = list(fp.values()) + list(gp.values())
        if self.learn_temperature:
            leaves.append(log_scale)
        for t in leaves:
            t.requires_grad_(True)

        trainer = _Trainer(self, n_train, data.Ux, data.Uy, graphs, fp, gp, log_scale, gen)
        validation = None
        if early_stopping:
            def validation():
                return _validation_loss(fp, gp, log_scale, data.Vx, data.Vy,
                                        data.gallery(n_train))
        history = self._train(trainer, leaves, validation)

        self.source_params_ = {name: to_numpy(t) for name, t in fp.items()}
        self.target_params_ = {name: to_numpy(t) for name, t in gp.items()}
        self.source_mean_, self.target_mean_ = to_numpy(data.mx), to_numpy(data.my)
        self.temperature_ = float(torch.exp(-log_scale.detach()))
        self.loss_curve_ = history.curve
        self.n_iter_ = history.n_iter
        self.validation_scores_ = history.validation_scores
        self.best_validation_score_ = history.best_value if early_stopping else None
        return self

    def _validation_split(self, n, gen):
        """``(validation rows, training rows)`` of the pairs; no validation rows without early
        stopping or when they would be too few to stop on (then a warning)."""
        perm = torch.randperm(n, generator=gen, device=gen.device)
        n_val = math.ceil(self.validation_fraction * n) if self.early_stopping else 0
        if n_val and (n_val < _MIN_VALIDATION_PAIRS or n - n_val < 2):
            warnings.warn(
                f"{type(self).__name__}: early stopping needs at least {_MIN_VALIDATION_PAIRS} "
                f"validation pairs, but validation_fraction={self.validation_fraction} of {n} "
                f"pairs gives {n_val}; a validation loss on so few pairs stops at noise. Training "
                f"runs for max_iter={self.max_iter} epochs instead.", UserWarning, stacklevel=3,
            )
            n_val = 0
        return perm[:n_val], perm[n_val:]

    def _neighbour_graphs(self, Ux, Uy):
        """Set ``n_neighbors_``; the pools' k-NN graphs for ``mode="local"`` (else ``None``)."""
        K = min(self.n_neighbors, len(Ux) - 1, len(Uy) - 1) if self.alpha > 0 else 0
        self.n_neighbors_ = max(int(K), 0)
        if self.n_neighbors_ and self.mode == "local":
            return knn_graph(Ux, self.n_neighbors_)[0], knn_graph(Uy, self.n_neighbors_)[0]
        return None

    def _initial_maps(self, Ux, Uy, n_train, gen):
        """Initial parameters of ``f`` and ``g`` and the log inverse temperature."""
        k = self.n_components_
        init_kw = dict(init=self.init, mapping=self.mapping, hidden_size=self.hidden_size,
                       generator=gen)
        coefs = (None, None)
        if self.init == "procrustes":  # training pairs = the first rows of the pools
            coefs = _procrustes_factors(Ux[:n_train], Uy[:n_train], k)
        fp = _initial_params(Ux, k, coef=coefs[0], **init_kw)
        gp = _initial_params(Uy, k, coef=coefs[1], **init_kw)
        log_scale = torch.tensor(math.log(1.0 / self.temperature), device=Ux.device)
        return fp, gp, log_scale

    def _train(self, trainer, leaves, validation):
        """Adam epochs until ``max_iter`` or the :class:`LossHistory` stopping rule; with a
        ``validation`` loss, the best epoch's weights are restored."""
        opt = torch.optim.Adam(leaves, lr=self.learning_rate)
        history = LossHistory(
            type(self).__name__, max_iter=self.max_iter, tol=self.tol,
            n_iter_no_change=self.n_iter_no_change, verbose=self.verbose,
            divergence_hint="Lower learning_rate (or alpha, or raise temperature).",
            early_stopping=validation is not None,
        )
        snapshot = None
        if validation is not None:
            def snapshot():
                return [t.detach().clone() for t in leaves]
        for _ in range(self.max_iter):
            epoch_loss = trainer.epoch(opt)
            _check_weights(leaves, history.n_iter + 1)
            score = None if validation is None else validation()
            if history.record(epoch_loss, validation_score=score, snapshot=snapshot):
                break
        history.finish()
        if history.best_state is not None:
            with torch.no_grad():
                for t, b in zip(leaves, history.best_state):
                    t.copy_(b)
        return history

    # ------------------------------------------------------------------------- transform
    def _map_fn(self, params, mean, device, dtype):
        P = {name: to_tensor(a, device, dtype) for name, a in params.items()}
        mu = to_tensor(mean, device, dtype)
        return lambda B: _forward(P, _preprocess(B, mu))

    def _transform_fn(self, device, dtype=torch.float32):
        return self._map_fn(self.source_params_, self.source_mean_, device, dtype)

    def _target_transform_fn(self, device, dtype=torch.float32):
        return self._map_fn(self.target_params_, self.target_mean_, device, dtype)


#: inputs and outputs of the maps are unit vectors, so healthy weights stay O(1)–O(100); the
#: bounded loss cannot signal a blow-up, the weights can.
_MAX_WEIGHT = 1e6


def _check_weights(leaves, epoch):
    top = max(float(t.detach().abs().max()) for t in leaves)
    if not math.isfinite(top) or top > _MAX_WEIGHT:
        raise NumericalError(
            f"GeRAAligner: the map weights reached {top:.3g} at epoch {epoch}; the optimisation "
            "diverged. Lower learning_rate."
        )


def _validation_loss(fp, gp, log_scale, Vx, Vy, gallery):
    """Symmetric InfoNCE of the validation pairs against validation + training targets."""
    with torch.no_grad():
        scale = log_scale.exp()
        Zx, Zy = _forward(fp, Vx), _forward(gp, Vy)
        Gy, Gx = _forward(gp, gallery[0]), _forward(fp, gallery[1])
        labels = torch.arange(len(Zx), device=Zx.device)
        lx = scale * (Zx @ torch.cat([Zy, Gy]).T)
        ly = scale * (Zy @ torch.cat([Zx, Gx]).T)
        return float(0.5 * (F.cross_entropy(lx, labels) + F.cross_entropy(ly, labels)))


class _Pools:
    """Preprocessed rows on the device: the pools (training pairs first, so pool row ``i`` is
    training pair ``i``, then the unpaired rows), their means, and the validation pairs."""

    def __init__(self, Ux, Uy, Vx, Vy, mx, my):
        self.Ux, self.Uy, self.Vx, self.Vy, self.mx, self.my = Ux, Uy, Vx, Vy, mx, my

    @classmethod
    def build(cls, X, y, pool, train_idx, val_idx, device):
        Xt, Yt = to_tensor(X, device), to_tensor(y, device)
        extra_x = [to_tensor(pool.X, device)] if pool is not None and pool.X is not None else []
        extra_y = [to_tensor(pool.y, device)] if pool is not None and pool.y is not None else []
        Px = torch.cat([Xt[train_idx]] + extra_x)
        Py = torch.cat([Yt[train_idx]] + extra_y)
        mx, my = Px.mean(0), Py.mean(0)
        Ux, Uy = _preprocess(Px, mx), _preprocess(Py, my)
        del Px, Py
        return cls(Ux, Uy, _preprocess(Xt[val_idx], mx), _preprocess(Yt[val_idx], my), mx, my)

    def gallery(self, n_train):
        """Training targets and sources that the validation pairs must be told apart from."""
        n_gal = min(n_train, _VALIDATION_GALLERY)
        return self.Uy[:n_gal], self.Ux[:n_gal]


class _Trainer:
    """One epoch of mini-batch training; holds the pools and the graphs on the device."""

    def __init__(self, est, n_train, Ux, Uy, graphs, fp, gp, log_scale, gen):
        # the training pairs are the first n_train rows of both pools
        self.est, self.n_train, self.Ux, self.Uy, self.graphs = est, n_train, Ux, Uy, graphs
        self.fp, self.gp, self.log_scale, self.gen = fp, gp, log_scale, gen

    def epoch(self, opt):
        est, gen = self.est, self.gen
        dev = self.Ux.device
        n = self.n_train
        B = min(est.pair_batch_size, n)
        order = torch.randperm(n, generator=gen, device=dev)
        total, count = 0.0, 0
        for start in range(0, n, B):
            idx = order[start:start + B]
            if len(idx) < 2:
                continue
            opt.zero_grad(set_to_none=True)
            Zx, Zy = _forward(self.fp, self.Ux[idx]), _forward(self.gp, self.Uy[idx])
            scale = self.log_scale.clamp(max=math.log(100.0)).exp()
            loss = contrastive_loss(Zx, Zy, scale)
            if est.alpha > 0 and est.n_neighbors_ > 0:
                gx = self._geometric(self.fp, self.Ux, Zx, idx, 0)
                gy = self._geometric(self.gp, self.Uy, Zy, idx, 1)
                loss = loss + est.alpha * 0.5 * (gx + gy)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        return total / max(count, 1)

    def _geometric(self, params, U, Zb, idx, side):
        est, gen = self.est, self.gen
        K = est.n_neighbors_
        B = len(idx)
        if est.mode == "local":
            A = est.geometric_batch_size or math.ceil(2 * B / (K + 1))
            n_pairs = min((A + 1) // 2, B)
            extra = torch.randint(len(U), (A - n_pairs,), generator=gen, device=U.device)
            anchors = torch.cat([idx[:n_pairs], extra])
            S = torch.cat([anchors[:, None], self.graphs[side][anchors]], dim=1)
            Uo = U[S]
            Za = _forward(params, Uo.reshape(-1, U.shape[1])).reshape(len(S), K + 1, -1)
            return geometric_term(Uo, Za, kernel=est.kernel, divergence=est.divergence,
                                  bandwidth=est.bandwidth, steps=est.diffusion_steps)
        m = est.geometric_batch_size or B
        extra = torch.randint(len(U), (m,), generator=gen, device=U.device)
        Uo = torch.cat([U[idx], U[extra]])
        Za = torch.cat([Zb, _forward(params, U[extra])])
        Do = _sq_dist(Uo)
        nearest = torch.topk(Do, min(K + 1, len(Uo)), dim=1, largest=False).indices
        return geometric_term(Uo, Za, kernel=est.kernel, divergence=est.divergence,
                              bandwidth=est.bandwidth, steps=est.diffusion_steps,
                              neighbors=nearest, original_sq_dist=Do)
