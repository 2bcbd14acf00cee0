r"""GeRA: contrastive alignment regularised by diffusion operators on unpaired data."""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
import torch.nn.functional as F

from ..base import BaseAligner, SharedSpaceMixin, check_unpaired
from ..utils._backend import (
    SOLVE_DTYPE,
    NumericalError,
    make_generator,
    row_normalize,
    to_numpy,
    to_tensor,
    work_threads,
)
from ..utils._compat import Interval, StrOptions, _fit_context
from ..utils._optim import LossHistory
from ..utils._validation import EpochSelection, gallery_rows, log_reciprocal_ranks, validation_folds
from .knn import knn_graph
from .losses import _sq_dist, contrastive_loss, geometric_term

__all__ = ["GeRAAligner"]

_KERNELS = ("heat", "linear", "squared", "inverse")
_DIVERGENCES = ("kl", "js", "frobenius")


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

    Defaults (chosen on real sentence-encoder embeddings, ``benchmarks/bench_gera_real.py``):
    training starts from the orthogonal Procrustes solution of the pairs (``init="procrustes"``)
    and fine-tunes it with Adam at ``learning_rate=1e-2`` and ``temperature=0.5`` for at most
    ``max_iter=20`` epochs; ``early_stopping=True`` chooses how many on pairs held out from the
    fit and returns the start itself when no epoch beats it there, so a fit does not end below its
    Procrustes start. With 25–100 pairs the fine-tuning raised held-out top-1 far above
    Procrustes and tuned ridge on both encoder pairs tried (e.g. 0.48 against 0.19 for the start,
    0.12 for :class:`ProcrustesAligner` and 0.10 for ridge with the best penalty, with 25
    MiniLM → MPNet pairs); with 1,000 MiniLM → MPNet pairs, where twenty epochs ended below the
    start, the held-out pairs keep the start (or a few epochs). ``alpha`` defaults to ``0``: on
    those encoders the geometric term changed held-out top-1 by less than 1 point from 100 pairs
    on and cost 7 points with 25 MiniLM → MPNet pairs. Turn it on (``alpha`` ≈ 1–10) and compare
    by cross-validation where the encoders' neighbourhoods are known to carry the structure to
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
        Most epochs (passes over the training pairs). With few pairs an epoch is one Adam step,
        and the held-out retrieval of the contrastive fine-tuning peaks after 10–40 of them and
        then declines as the maps overfit the pairs; ``early_stopping`` picks the count in
        ``0..max_iter``. Without it exactly ``max_iter`` epochs run when ``tol=None``.
    tol : float, default=None
        Minimum improvement of the monitored value (the validation score with ``early_stopping``,
        the training loss otherwise); the run stops after ``n_iter_no_change`` epochs without it,
        and a :class:`~sklearn.exceptions.ConvergenceWarning` is raised when ``max_iter`` comes
        first. ``None``: no warning; any improvement of the validation score counts, and without
        early stopping ``max_iter`` epochs run.
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping.
    early_stopping : bool, default=True
        Choose the number of epochs on held-out pairs and never end below the start. The pairs
        are split into folds of ``validation_fraction`` of them (leave one out when there are
        very few); folds are held out in turn until at least 200 pairs, or all of them, have
        been held out once (one fold from 1,000 pairs at the default fraction). For each, the
        maps start from the other pairs' Procrustes solution and train, in step with the other
        folds, while the held-out pairs score the start and every epoch: the rank of each one's
        target among up to 1,024 target rows of the pool (its fold's targets, the other pairs'
        and the unpaired ones) from its source. Training stops after ``n_iter_no_change``
        epochs without a better mean log rank. The epoch count with the best mean is kept if it
        beats the start by more than one standard error of the per-pair gains in log rank, else
        0. The maps are then trained on all the pairs for that many epochs — bit for bit an
        ``early_stopping=False, max_iter=best_epoch_`` fit — so with 0 the fit returns its
        start, the Procrustes solution of all the pairs. Held-out pairs stay in the unpaired
        pools (centring means, geometric term) without their correspondence. Fewer than 3
        pairs: nothing is held out and the start is kept. Costs about
        ``1 + folds`` training runs.
    validation_fraction : float, default=0.2
        Share of the pairs in each validation fold.
    random_state : int, RandomState instance or None, default=None
        Seeds the local torch generator (initialisation, batches, anchors, validation folds).
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
        Epochs run: by the validation runs with ``early_stopping`` (0 with fewer than 3 pairs),
        else by the fit.
    best_epoch_ : int
        Epochs of training in the returned maps (0: the start).
    kept_start_ : bool
        Whether the returned maps are the start (``best_epoch_ == 0``): no epoch beat it on the
        held-out pairs.
    loss_curve_ : list of float
        Mean training loss per epoch of the returned maps (``best_epoch_`` values; empty when
        the start is kept).
    validation_scores_ : list of float or None
        With ``early_stopping``, the geometric mean over the held-out pairs of the reciprocal
        rank of their targets (1: each retrieved first) at the start (index 0) and after each
        epoch (index ``e``); ``n_iter_ + 1`` values (none with fewer than 3 pairs). ``None``
        without early stopping.
    best_validation_score_ : float or None
        ``validation_scores_[best_epoch_]``.
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
                 max_iter=20, tol=None, n_iter_no_change=10, early_stopping=True,
                 validation_fraction=0.2, random_state=None, device="cpu", batch_size=None,
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

        With ``early_stopping`` (default) the number of epochs is first chosen on held-out pairs
        (0 keeps the start), then the maps are trained on all the pairs for that many epochs.

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
        seed_state = gen.get_state()
        self.n_components_ = self.n_components or min(X.shape[1], y.shape[1])
        self.n_unpaired_source_ = 0 if pool is None else pool.n_source
        self.n_unpaired_target_ = 0 if pool is None else pool.n_target
        n = len(X)
        data = _Pools.build(X, y, pool, dev)
        graphs = self._neighbour_graphs(data.Ux, data.Uy)
        # the training steps: products of a batch of rows with the maps' weights
        width = max(X.shape[1], y.shape[1], self.hidden_size)
        work = max(self.pair_batch_size, self.geometric_batch_size or 0) * width * width
        with work_threads(work, dev):
            return self._train(X, y, data, graphs, n, gen, seed_state)

    def _train(self, X, y, data, graphs, n, gen, seed_state):
        """Choose the epochs (early stopping), train the final maps and set the attributes."""
        self.validation_scores_ = self.best_validation_score_ = None
        epochs, tol = self.max_iter, self.tol
        if self.early_stopping:
            selection, n_run = self._select_epochs(data, graphs, n, gen)
            epochs, tol = selection.best_epoch, None
            self.validation_scores_ = [math.exp(v) for v in selection.scores]
            if self.validation_scores_:
                self.best_validation_score_ = self.validation_scores_[epochs]
            if self.verbose:
                print(f"[{type(self).__name__}] validation: {n_run} epochs scored, keeping "
                      + (f"{epochs}" if epochs else "0 (the start)"))
        gen.set_state(seed_state)  # the final fit draws what a fit of `epochs` epochs draws
        run = _Run(self, data, graphs, n, gen)
        history = self._history(max(epochs, 1), tol, early_stopping=False)
        for _ in range(epochs):
            if history.record(run.epoch(history.n_iter + 1)):
                break
        if epochs:
            history.finish()
        self.best_epoch_ = history.n_iter
        self.kept_start_ = self.best_epoch_ == 0
        self.n_iter_ = n_run if self.early_stopping else history.n_iter

        self.source_params_ = {name: to_numpy(t) for name, t in run.fp.items()}
        self.target_params_ = {name: to_numpy(t) for name, t in run.gp.items()}
        self.source_mean_, self.target_mean_ = to_numpy(data.mx), to_numpy(data.my)
        self.temperature_ = float(torch.exp(-run.log_scale.detach()))
        self.loss_curve_ = history.curve
        return self

    def _select_epochs(self, data, graphs, n, gen):
        """Train one run per validation fold, all in step, scoring the start and every epoch by
        the held-out pairs' log reciprocal ranks; stop when their pooled mean stalls.

        Returns the :class:`EpochSelection` and the number of epochs run."""
        folds = validation_folds(n, self.validation_fraction, gen)
        selection = EpochSelection()
        runs = [_Run(self, data, graphs, train, gen, val) for train, val in folds]
        for run in runs:
            selection.add(0, run.validation_scores())
        if not runs:  # too few pairs to hold any out: keep the start
            return selection, 0
        history = self._history(self.max_iter, self.tol, early_stopping=True)
        for _ in range(self.max_iter):
            it = history.n_iter + 1
            losses = [run.epoch(it) for run in runs]
            for run in runs:
                selection.add(it, run.validation_scores())
            if history.record(sum(losses) / len(losses),
                              validation_score=-selection.score(it)):
                break
        history.finish()
        return selection, history.n_iter

    def _history(self, max_iter, tol, early_stopping):
        return LossHistory(
            type(self).__name__, max_iter=max_iter, tol=tol,
            n_iter_no_change=self.n_iter_no_change, verbose=self.verbose,
            divergence_hint="Lower learning_rate (or alpha, or raise temperature).",
            early_stopping=early_stopping,
        )

    def _neighbour_graphs(self, Ux, Uy):
        """Set ``n_neighbors_``; the pools' k-NN graphs for ``mode="local"`` (else ``None``)."""
        K = min(self.n_neighbors, len(Ux) - 1, len(Uy) - 1) if self.alpha > 0 else 0
        self.n_neighbors_ = max(int(K), 0)
        if self.n_neighbors_ and self.mode == "local":
            return knn_graph(Ux, self.n_neighbors_)[0], knn_graph(Uy, self.n_neighbors_)[0]
        return None

    def _initial_maps(self, Ux, Uy, rows, gen):
        """Initial parameters of ``f`` and ``g`` and the log inverse temperature; ``rows`` are the
        training pairs' pool rows (an int ``n``: the first ``n``)."""
        k = self.n_components_
        init_kw = dict(init=self.init, mapping=self.mapping, hidden_size=self.hidden_size,
                       generator=gen)
        coefs = (None, None)
        if self.init == "procrustes":
            coefs = _procrustes_factors(*_rows(rows, Ux, Uy), k)
        fp = _initial_params(Ux, k, coef=coefs[0], **init_kw)
        gp = _initial_params(Uy, k, coef=coefs[1], **init_kw)
        log_scale = torch.tensor(math.log(1.0 / self.temperature), device=Ux.device)
        return fp, gp, log_scale

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


def _rows(rows, *pools):
    """The training pairs' rows of each pool: the first ``rows`` (int) or those indexed."""
    return [P[:rows] if isinstance(rows, int) else P[rows] for P in pools]


class _Pools:
    """Preprocessed rows on the device: the pools (all the pairs first, so pool row ``i`` is pair
    ``i``, then the unpaired rows) and their means. Held-out pairs stay in the pools as unpaired
    rows: their correspondence is used only to score them."""

    def __init__(self, Ux, Uy, mx, my):
        self.Ux, self.Uy, self.mx, self.my = Ux, Uy, mx, my

    @classmethod
    def build(cls, X, y, pool, device):
        extra_x = [to_tensor(pool.X, device)] if pool is not None and pool.X is not None else []
        extra_y = [to_tensor(pool.y, device)] if pool is not None and pool.y is not None else []
        Px = torch.cat([to_tensor(X, device)] + extra_x)
        Py = torch.cat([to_tensor(y, device)] + extra_y)
        mx, my = Px.mean(0), Py.mean(0)
        Ux, Uy = _preprocess(Px, mx), _preprocess(Py, my)
        del Px, Py
        return cls(Ux, Uy, mx, my)

    def gallery(self, val, gen):
        """Target pool rows a validation fold is scored against: its own targets first, then up
        to 1,024 in all of the other pairs' and the unpaired targets (a seeded sample when there
        are more; :func:`~skalign.utils._validation.gallery_rows`)."""
        return gallery_rows(len(self.Uy), val, gen)


class _Run:
    """One training run from the start of its pairs: both maps, the optimiser and the trainer;
    with ``val`` rows, scores them (log reciprocal rank against :meth:`_Pools.gallery`)."""

    def __init__(self, est, data, graphs, rows, gen, val=None):
        self.fp, self.gp, self.log_scale = est._initial_maps(data.Ux, data.Uy, rows, gen)
        self.leaves = list(self.fp.values()) + list(self.gp.values())
        if est.learn_temperature:
            self.leaves.append(self.log_scale)
        for t in self.leaves:
            t.requires_grad_(True)
        self.opt = torch.optim.Adam(self.leaves, lr=est.learning_rate)
        self.trainer = _Trainer(est, rows, data.Ux, data.Uy, graphs, self.fp, self.gp,
                                self.log_scale, gen)
        if val is not None:
            self.Vx, self.Gy = data.Ux[val], data.Uy[data.gallery(val, gen)]

    def epoch(self, it):
        loss = self.trainer.epoch(self.opt)
        _check_weights(self.leaves, it)
        return loss

    def validation_scores(self):
        """``-ln(rank)`` of each held-out pair's target among the gallery's, from its source."""
        with torch.no_grad():
            return log_reciprocal_ranks(_forward(self.fp, self.Vx), _forward(self.gp, self.Gy))


class _Trainer:
    """One epoch of mini-batch training; holds the pools and the graphs on the device."""

    def __init__(self, est, rows, Ux, Uy, graphs, fp, gp, log_scale, gen):
        # the training pairs: the first `rows` rows of both pools (int) or the rows indexed
        self.rows = None if isinstance(rows, int) else rows
        self.n_train = rows if isinstance(rows, int) else len(rows)
        self.est, self.Ux, self.Uy, self.graphs = est, Ux, Uy, graphs
        self.fp, self.gp, self.log_scale, self.gen = fp, gp, log_scale, gen

    def epoch(self, opt):
        est, gen = self.est, self.gen
        dev = self.Ux.device
        n = self.n_train
        B = min(est.pair_batch_size, n)
        order = torch.randperm(n, generator=gen, device=dev)
        if self.rows is not None:
            order = self.rows[order]
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
