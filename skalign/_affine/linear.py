"""Least-squares / ridge affine map, the unconstrained baseline, with an efficient
leave-one-out choice of the penalty."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..base import BaseAligner
from ..utils._backend import (
    affine_fn,
    affine_numpy_fn,
    check_finite,
    ridge_svd,
    small_lapack,
    to_numpy,
    to_tensor,
    work_threads,
)
from ..utils._compat import Interval, StrOptions, _fit_context
from .norms import NORMALIZE_CONSTRAINT, NormalizeMixin

__all__ = ["LinearAligner"]

#: default penalty grid of ``alpha="auto"``: 10⁻⁴ … 10⁶, five values per decade.
DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-4, 6, 51))


def ridge_loo_errors(Xc, Yc, alphas, *, center=True):
    r"""Exact leave-one-out mean squared errors of ridge maps for several penalties, from one SVD.

    With the SVD :math:`\bar X = U \Sigma V^\top` of the centred anchors and the shrinkage
    factors :math:`f_j(\alpha) = \sigma_j^2 / (\sigma_j^2 + \alpha)`, the fitted values are
    :math:`\hat Y = \mathbf 1 \bar y^\top + U \operatorname{diag}(f) U^\top \bar Y` and the hat
    matrix's diagonal is :math:`h_i = 1/n + \sum_j U_{ij}^2 f_j` (the intercept is not penalised;
    drop :math:`1/n` without one). The leave-one-out residual of pair :math:`i` is then
    :math:`(\bar y_i - \hat y_i)/(1 - h_i)`, so every candidate costs one
    :math:`O(n\,r\,d_y)` product instead of ``n`` refits — the identity behind
    :class:`sklearn.linear_model.RidgeCV`'s default (``cv=None``).

    Parameters
    ----------
    Xc : tensor of shape (n, d_x)
        Source anchors, centred when ``center``.
    Yc : tensor of shape (n, d_y)
        Target anchors, centred the same way.
    alphas : sequence of float
        Positive penalties.
    center : bool, default=True
        Whether ``Xc`` and ``Yc`` were centred (adds the intercept's :math:`1/n` to :math:`h_i`).

    Returns
    -------
    errors : ndarray of shape (n_alphas,)
        Leave-one-out squared error averaged over pairs and target features (``inf`` where a
        pair has leverage 1).
    """
    import torch

    X64, Y64 = Xc.to(torch.float64), Yc.to(torch.float64)
    n = X64.shape[0]
    U, s, _ = torch.linalg.svd(X64, full_matrices=False)
    UtY = U.mT @ Y64
    U2 = U * U
    s2 = s * s
    base = 1.0 / n if center else 0.0
    errors = np.empty(len(alphas))
    for i, a in enumerate(alphas):
        f = s2 / (s2 + a)
        R = Y64 - U @ (f.unsqueeze(-1) * UtY)
        one_minus_h = 1.0 - base - U2 @ f
        loo = R.square().sum(1) / one_minus_h.square()
        err = float(loo.sum()) / (n * Y64.shape[1])
        errors[i] = err if np.isfinite(err) else np.inf
    return errors


def ridge_cv_retention(Xt, Yt, alphas, n_splits, *, center=True, k=10, return_gram=False,
                       overwrite=False):
    r"""K-fold recall@k retention of ridge maps for several penalties, one decomposition per fold.

    For each of ``n_splits`` folds (shuffled with seed 0), the training part's centred anchors
    are decomposed once, :math:`\bar X = U \Sigma V^\top`, and every penalty's map
    :math:`W(\alpha) = V \operatorname{diag}(\sigma_j/(\sigma_j^2 + \alpha)) U^\top \bar Y`
    translates the held-out part, which is scored by recall@k retention as
    :func:`skalign.metrics.retrieval_retention` defines it (each held-out target a leave-one-out
    query against the others, cosine; the re-embedded top-k computed once per fold). The score
    is the mean over folds.

    Where every training part has at least as many anchors as features, the decomposition is
    the eigendecomposition of the training part's centred Gram matrix, obtained from the whole
    set's by removing the held-out rows: with :math:`\bar X` centred on all ``n`` anchors,
    :math:`T` the held-out rows and :math:`\delta_x = -\frac{1}{n - |T|}\sum_{i \in T} \bar x_i`
    the training part's mean,

    .. math::

        \bar X_{tr}^\top \bar X_{tr} = \bar X^\top \bar X - \bar X_T^\top \bar X_T
        - (n - |T|)\, \delta_x \delta_x^\top

    (and :math:`\bar X_{tr}^\top \bar Y_{tr}` alike), so a fold costs products over its held-out
    rows only. The penalties of a fold are scored a batch at a time, and the held-out queries
    a block of rows at a time.

    Memory: besides the anchors, the centred source anchors and, while the whole set's
    :math:`\bar X^\top \bar Y` is formed, the centred targets (float64 copies of the size of
    the anchors); a fold's matrices are bounded (:func:`_fold_retention`), never
    :math:`n \times n`.

    Parameters
    ----------
    Xt, Yt : tensors of shape (n, d_x), (n, d_y)
        Anchors, not centred.
    alphas : sequence of float
        Non-negative penalties.
    n_splits : int
        Folds; every held-out part must hold more than ``k + 1`` anchors.
    center : bool, default=True
        Centre each training part (fit an intercept).
    k : int, default=10
        Neighbourhood size.
    return_gram : bool, default=False
        Also return the whole set's ``(X̄ᵀX̄, X̄ᵀȲ)`` (float64), for the final fit's solve
        (:func:`~skalign.utils._backend.ridge_svd`'s ``gram``), or ``None`` where the training
        parts are wide and it was not formed.
    overwrite : bool, default=False
        Allow ``Xt`` to be centred in place (its values are then lost): one copy of the
        anchors fewer, where the caller made ``Xt`` for this call.

    Returns
    -------
    scores : ndarray of shape (n_alphas,)
        Mean held-out recall@k retention per penalty.
    gram : tuple of two tensors or None
        With ``return_gram`` only.
    """
    import torch
    from sklearn.model_selection import KFold

    X64, Y64 = Xt.to(torch.float64), Yt.to(torch.float64)
    n, d = X64.shape
    mx = X64.mean(0) if center else torch.zeros_like(X64[0])
    my = Y64.mean(0) if center else torch.zeros_like(Y64[0])
    # the centred targets are only needed whole for the Gram matrix: a fold centres its own
    # rows (the same values: the subtraction is elementwise)
    Xc = X64.sub_(mx) if overwrite or X64 is not Xt else X64 - mx
    del X64
    tall = n - -(-n // n_splits) >= d  # the smallest training part
    gram = (Xc.mT @ Xc, Xc.mT @ (Y64 - my)) if tall else None
    alphas = np.asarray(alphas, dtype=np.float64)
    scores = np.zeros(len(alphas))
    for train, test in KFold(n_splits, shuffle=True, random_state=0).split(np.arange(n)):
        Xte, Yte_c = Xc[test], Y64[test] - my
        if tall:
            dx = -Xte.sum(0) / len(train) if center else torch.zeros_like(mx)
            dy = -Yte_c.sum(0) / len(train) if center else torch.zeros_like(my)
            G = gram[0] - Xte.mT @ Xte - len(train) * torch.outer(dx, dx)
            XtY = gram[1] - Xte.mT @ Yte_c - len(train) * torch.outer(dx, dy)
            V, sv, UtY = _decompose_gram(G, XtY)
        else:
            Xtr, Ytr = Xc[train], Y64[train] - my
            dx = Xtr.mean(0) if center else torch.zeros_like(mx)
            dy = Ytr.mean(0) if center else torch.zeros_like(my)
            V, sv, UtY = _svd_by_gram(Xtr - dx, Ytr - dy)
        scores += _fold_retention(Xte - dx, Y64[test], V, sv, UtY, my + dy, alphas, k)
    scores /= n_splits
    return (scores, gram) if return_gram else scores


def _fold_retention(Xte, Yte, V, sv, UtY, my, alphas, k):
    r"""Recall@``k`` retention of one held-out part (``Xte`` centred on the training part's
    mean, ``Yte`` raw) under each penalty's map :math:`X V \operatorname{diag}(f) U^\top \bar Y
    + \mu_y`, :math:`f_j = \sigma_j / (\sigma_j^2 + \alpha)`.

    Every penalty's prediction is :math:`P(\alpha) U^\top \bar Y + \mu_y` with
    :math:`P = (X V) \operatorname{diag}(f)`. Where the rank ``r`` is below the target width
    (``m r + r^2 < r d_y + m d_y`` per held-out row), its cosines with the held-out targets and
    its norms come from ``r``-sized products, without forming the map or the predictions;
    otherwise the predictions are formed (``m r d_y``) and compared in the target space. The
    decomposition needs float64; the cosines only rank neighbours, and float32 gave the same
    scores on the development data at a quarter less time.

    The ``m`` held-out queries' similarities with the ``m`` held-out targets (re-embedded and
    translated) are formed a block of :func:`_query_rows` queries at a time and reduced to
    their top-``k`` at once, so a fold holds no :math:`m \times m` matrix (a fifth of 20,000
    anchors: 128 MB in float64 per matrix); the blocks are rows of the same products, so the
    scores do not depend on the block size.
    """
    import torch

    m, r, d_y = len(Yte), len(sv), Yte.shape[1]
    Yte = Yte / Yte.norm(dim=1, keepdim=True).clamp_min(1e-12)
    XV = (Xte @ V).float()
    implicit = m * r + r * r < r * d_y + m * d_y
    if implicit:
        Cb = torch.cat([Yte @ UtY.mT, (Yte @ my)[:, None]], 1).float()
        G, g, my2 = (UtY @ UtY.mT).float(), (UtY @ my).float(), float(my @ my)
    else:
        Y32, UtY32, my32 = Yte.float(), UtY.float(), my.float()
    sv32 = sv.float()
    # the re-embedded neighbourhoods do not depend on alpha: once per fold
    own = torch.cat([_top_k_excluding_self(Yte[lo:lo + b] @ Yte.mT, k, lo)
                     for lo, b in _blocks(m, _query_rows(1, m))])
    a32 = torch.as_tensor(alphas, dtype=torch.float32)
    out = np.empty(len(alphas))
    step = max(1, 2 ** 24 // (m * max(m, d_y)))  # penalties per batch: 64 MiB of float32
    for lo in range(0, len(alphas), step):
        f = sv32 / (sv32 * sv32 + a32[lo:lo + step, None])  # (batch, r)
        rows = _query_rows(len(f), m)
        P = XV * f[:, None, :]
        if implicit:  # [C, b] [P, 1]^T / norms: one product, no pass over the similarities
            sq = ((P @ G) * P).sum(2) + 2.0 * (P @ g) + my2
            P = torch.cat([P, torch.ones_like(P[:, :, :1])], 2)
            Q, Pn = Cb, (P / sq.clamp_min(1e-24).sqrt()[:, :, None]).mT
        else:
            pred = P @ UtY32 + my32
            Q, Pn = Y32, (pred / pred.norm(dim=2, keepdim=True).clamp_min(1e-12)).mT
        kept = torch.cat([_kept(Q[q:q + b] @ Pn, own[q:q + b], q, k)
                          for q, b in _blocks(m, rows)], 1)
        out[lo:lo + step] = (kept.double() / k).mean(dim=1).numpy()
    return out


#: similarities a block of held-out queries forms at most (per penalty batch): 16 MiB of float32
QUERY_BLOCK = 2 ** 22


def _query_rows(batch, m):
    """Held-out queries a block holds: :data:`QUERY_BLOCK` similarities over ``batch``
    matrices of ``m`` columns (at least one query)."""
    return max(1, QUERY_BLOCK // (batch * m))


def _blocks(m, rows):
    """``(start, size)`` of consecutive blocks of ``rows`` of ``m`` rows."""
    return [(lo, min(rows, m - lo)) for lo in range(0, m, rows)]


def _kept(S, own, lo, k):
    """Per penalty (``S``: batch, queries ``lo …``, all ``m`` targets), how many of each query's
    re-embedded top-``k`` (``own``) its translated top-``k`` keeps, itself left out."""
    import torch

    S.diagonal(offset=lo, dim1=1, dim2=2).fill_(-torch.inf)
    got = torch.topk(S, k, dim=2, sorted=False).indices
    return (own[None, :, :, None] == got[:, :, None, :]).any(dim=3).sum(dim=2)


def _decompose_gram(G, XtY, rtol=1e-12):
    r"""``V``, ``sigma`` and :math:`U^\top Y` of the thin SVD :math:`X = U \Sigma V^\top` from
    :math:`X^\top X` (``G``) and :math:`X^\top Y`; directions with :math:`\sigma^2 \le`
    ``rtol`` :math:`\sigma^2_{max}` are dropped (every ridge penalty considered shrinks them to
    nothing)."""
    import torch

    with small_lapack(G):
        s2, V = torch.linalg.eigh(G)
    keep = s2 > rtol * s2.max()
    s2, V = s2[keep], V[:, keep]
    sv = s2.sqrt()
    return V, sv, (V.mT @ XtY) / sv.unsqueeze(-1)


def _svd_by_gram(Xc, Yc, rtol=1e-12):
    r"""``V``, ``sigma`` and :math:`U^\top Y` of the thin SVD :math:`X = U \Sigma V^\top`, from the
    eigendecomposition of the smaller Gram matrix (:math:`X^\top X` or :math:`X X^\top`),
    several times cheaper than the SVD for tall or wide anchors. Directions with
    :math:`\sigma^2 \le` ``rtol`` :math:`\sigma^2_{max}` are dropped: every ridge penalty
    considered shrinks them to nothing."""
    import torch

    n, d = Xc.shape
    if n >= d:  # E = V
        return _decompose_gram(Xc.mT @ Xc, Xc.mT @ Yc, rtol)
    gram = Xc @ Xc.mT
    with small_lapack(gram):
        s2, E = torch.linalg.eigh(gram)
    keep = s2 > rtol * s2.max()
    s2, E = s2[keep], E[:, keep]
    sv = s2.sqrt()
    return (Xc.mT @ E) / sv, sv, E.mT @ Yc  # E = U


def _top_k_excluding_self(S, k, lo=0):
    """Column indices of each row's ``k`` largest entries of ``S`` (in no particular order),
    row ``i``'s own column ``lo + i`` left out (``S``: rows ``lo …`` of a square matrix, whose
    entries ``(i, lo + i)`` are overwritten)."""
    import torch

    S.diagonal(offset=lo).fill_(-torch.inf)
    return torch.topk(S, k, dim=1, sorted=False).indices


def _centred(A, center, device):
    """``(A - μ, μ)``: ``A`` as a float64 tensor on ``device`` less its column means (zero
    without ``center``), centred in place in a copy of its own, so that making it holds two
    arrays of its size at most, not three (the values of
    ``BaseAligner._centered_pair_tensors``: the subtraction is elementwise)."""
    import torch

    T = to_tensor(A, torch.device(device), torch.float64)
    source = A.data_ptr() if isinstance(A, torch.Tensor) else np.asarray(A).ctypes.data
    if T.data_ptr() == source:  # to_tensor aliased the caller's array
        T = T.clone()
    mu = T.mean(0) if center else torch.zeros(T.shape[1], dtype=T.dtype, device=T.device)
    return T.sub_(mu), mu


class LinearAligner(NormalizeMixin, BaseAligner):
    r"""Affine map from source to target embeddings fitted by (ridge) least squares.

    The least-squares linear map plus offset that best predicts each target embedding from its
    source embedding, with the ridge penalty chosen by exact leave-one-out cross-validation by
    default. The penalty minimises squared error, which favours strong shrinkage; for
    nearest-neighbour retrieval among raw targets, :class:`ProcrustesAligner` or a penalty tuned
    with :data:`skalign.metrics.top1_scorer` usually does better on real text encoders (user
    guide, "Defaults on real encoders").

    .. math::

        W = \operatorname*{arg\,min}_W \|\bar X W - \bar Y\|_F^2 + \alpha \|W\|_F^2
          = V \operatorname{diag}\!\Big(\frac{\sigma_i}{\sigma_i^2 + \alpha}\Big) U^\top \bar Y,

    with :math:`\bar X = U \Sigma V^\top` the SVD of the centred source anchors, and
    ``transform(x) = (x − μ_X) W + μ_Y``, stored in scikit-learn's layout: ``coef_`` is
    :math:`W^\top`, of shape ``(n_features_out, n_features_in)``. The solve runs in float64
    through the SVD, so rank-deficient anchors (fewer pairs than dimensions) give the
    minimum-norm solution for ``alpha=0`` instead of a wrong answer.

    With ``alpha="auto"`` (default) the penalty is chosen among ``alphas`` by exact leave-one-out
    error over the anchor pairs, computed from the same SVD for every candidate: with
    :math:`f_j = \sigma_j^2/(\sigma_j^2 + \alpha)` and :math:`h_i = 1/n + \sum_j U_{ij}^2 f_j`
    (the diagonal of the hat matrix),

    .. math::

        \alpha^\star = \operatorname*{arg\,min}_{\alpha}\ \frac{1}{n\,d_y} \sum_{i=1}^n
        \frac{\|\bar y_i - \hat y_i(\alpha)\|^2}{(1 - h_i(\alpha))^2},

    the criterion of :class:`sklearn.linear_model.RidgeCV` (same alphas, same choice). A map
    from one encoder to another is underdetermined with a few hundred pairs of 384- or 768-d
    embeddings, and its best penalty depends on the pair count and the spaces' scales, so a fixed
    ``alpha`` is rarely close to the best one; the leave-one-out choice costs a few milliseconds.

    Read more in the :ref:`User Guide <linear>`.

    Parameters
    ----------
    alpha : "auto" or float, default="auto"
        Ridge penalty. ``0`` is ordinary (minimum-norm) least squares; ``"auto"`` picks the
        leave-one-out best of ``alphas`` (the choice is stored in ``alpha_``).
    alphas : array-like of float, default=None
        Positive candidate penalties for ``alpha="auto"``. ``None`` uses 51 values spaced
        evenly in log scale from ``1e-4`` to ``1e6``. Ignored when ``alpha`` is a number.
    scoring : {None, "recall_retention"}, default=None
        How ``alpha="auto"`` chooses: ``None`` by leave-one-out squared error (above);
        ``"recall_retention"`` by 5-fold cross-validated recall@10 retention of the held-out
        anchors' neighbourhoods (one SVD per fold, the folds shuffled with seed 0), which is
        what a migrated search index keeps. Squared error favours shrinkage, which
        neighbourhoods do not need: choose ``"recall_retention"`` for a map that translates a
        search index (the :ref:`User Guide <linear>` has the measurements). With fewer than 24
        anchors per fold (under 48 pairs) the leave-one-out choice is used;
        ``alpha_criterion_`` says which.
    center : bool, default=True
        Centre both spaces on their anchor means (an affine rather than a linear map).
    rtol : float, default=None
        For ``alpha=0``: singular values below ``rtol * σ_max`` are dropped. ``None`` uses
        ``max(n, d) · eps``.
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
        ``normalize_`` and ``normalize_reason_`` (``skalign fit`` prints them). Normalised rows
        are put at their side's mean anchor norm rather than on the unit sphere, so ``alpha``
        means the same with and without normalisation (a global rescale would move the
        leave-one-out choice along the ``alphas`` grid).

        Keep ``"auto"``; when both sides are raw encoders (nothing is normalised then), pass
        ``normalize=True`` if the translated store is searched by Euclidean distance or inner
        product. Measured on real encoders in the :ref:`User Guide <baselines>` ("Raw and
        normalised encoders").
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the solve and the transforms run.
    batch_size : int, default=None
        Rows per batch in ``transform``; ``None`` sizes from ``sklearn.get_config()``.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features_out, n_features_in)
        The linear map, as in scikit-learn's linear models: :math:`W^\top` (float64), so that
        ``transform(X) = X @ coef_.T + intercept_``.
    intercept_ : ndarray of shape (n_features_out,)
        ``μ_Y − μ_X W``, so that ``transform(x) = x @ coef_.T + intercept_`` (zero when
        ``center=False``), with ``x`` L2-normalised first and the result multiplied by
        ``target_norm_`` on the sides ``normalize_`` names.
    alpha_ : float
        The penalty used: ``alpha`` itself, or the leave-one-out choice for ``alpha="auto"``.
    loo_errors_ : ndarray of shape (n_alphas,) or None
        Leave-one-out mean squared error of each candidate in ``alphas`` (``None`` unless
        ``alpha="auto"`` chose by it).
    cv_scores_ : ndarray of shape (n_alphas,) or None
        Cross-validated recall@10 retention of each candidate (``None`` unless
        ``scoring="recall_retention"`` chose by it).
    alpha_criterion_ : {"fixed", "loo", "recall_retention"}
        How ``alpha_`` was chosen.
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
        Width of the source embeddings ``X``.
    n_features_out_ : int
        Width of the target embeddings ``y``.
    feature_names_in_ : ndarray of shape (n_features_in,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    ProcrustesAligner : The same problem restricted to isometries.
    sklearn.linear_model.RidgeCV : The same leave-one-out choice for one-target regression.

    References
    ----------
    .. [1] G. H. Golub, M. Heath, G. Wahba, "Generalized cross-validation as a method for choosing
       a good ridge parameter", Technometrics 21, 1979.

    Examples
    --------
    >>> from skalign import LinearAligner
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y = make_paired_spaces(n_samples=200, n_features=16, relation="linear", random_state=0)
    >>> round(LinearAligner(alpha=0.0).fit(X, Y).score(X, Y), 4)
    1.0
    >>> est = LinearAligner().fit(X, Y)
    >>> bool(est.alpha_ <= 1e-3)  # noise-free pairs: the smallest penalty wins
    True
    """

    # normalised rows keep their side's mean norm, so a given alpha means what it did without
    # normalisation (a global rescale moves the leave-one-out choice across the alpha grid)
    _norm_radius = "mean"

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "alpha": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
        "alphas": ["array-like", None],
        "scoring": [StrOptions({"recall_retention"}), None],
        "center": ["boolean"],
        "rtol": [Interval(Real, 0, 1, closed="left"), None],
        "normalize": NORMALIZE_CONSTRAINT,
    }

    def __init__(self, *, alpha="auto", alphas=None, scoring=None, center=True, rtol=None,
                 normalize="auto", device="cpu", batch_size=None):
        self.alpha = alpha
        self.alphas = alphas
        self.scoring = scoring
        self.center = center
        self.rtol = rtol
        self.normalize = normalize
        self.device = device
        self.batch_size = batch_size

    def _candidate_alphas(self):
        alphas = DEFAULT_ALPHAS if self.alphas is None else self.alphas
        alphas = np.asarray(alphas, dtype=np.float64).ravel()
        if alphas.size == 0 or not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
            raise ValueError(
                "alphas must be a non-empty sequence of positive finite penalties; got "
                f"{self.alphas!r}."
            )
        return alphas

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the affine map on paired anchors.

        Parameters
        ----------
        X : array-like of shape (n_pairs, n_features_in)
            Source embeddings of the anchors.
        y : array-like of shape (n_pairs, n_features_out)
            Target embeddings of the same anchors, row for row.

        Returns
        -------
        self : LinearAligner
            The fitted aligner.
        """
        X, y = self._validate_pair(X, y)
        self.loo_errors_ = self.cv_scores_ = None
        # one product of the fit and of the alpha search is (n, d_x) x (d_x, d_y): below the
        # work rule's size a busy machine's second thread only waits
        # (skalign.utils._backend.work_threads)
        with work_threads(len(X) * X.shape[1] * y.shape[1], self.device_):
            X, y = self._fit_normalization(X, y)
            (Xc, mx), (Yc, my) = (_centred(A, self.center, self.device_) for A in (X, y))
            gram = self._choose_alpha(Xc, Yc, mx, my)
            if self.alpha_criterion_ == "recall_retention":  # the search used them up
                del Xc, Yc
                (Xc, _), (Yc, _) = (_centred(A, self.center, self.device_) for A in (X, y))
            W = ridge_svd(Xc, Yc, self.alpha_, rtol=self.rtol, gram=gram)
        self.coef_ = to_numpy(W.T)  # scikit-learn's (n_targets, n_features)
        self.intercept_ = to_numpy(my - mx @ W)
        return self

    def _choose_alpha(self, Xc, Yc, mx, my):
        """Set ``alpha_`` and ``alpha_criterion_`` (and the search's scores); return the
        search's ``(X̄ᵀX̄, X̄ᵀȲ)`` where it formed them (``None`` otherwise). The search by
        ``"recall_retention"`` overwrites ``Xc`` and ``Yc``: it is given the anchors as
        ``Xc + mx`` and ``Yc + my``, made in place to hold no other copy of them."""
        n_splits = min(5, len(Xc) // 24)  # held-out parts of at least 2 (k + 2) anchors
        gram = None
        if isinstance(self.alpha, str) and self.scoring is not None and n_splits >= 2:
            alphas = self._candidate_alphas()
            self.cv_scores_, gram = ridge_cv_retention(
                Xc.add_(mx), Yc.add_(my), alphas, n_splits, center=self.center,
                return_gram=True, overwrite=True)
            self.alpha_ = float(alphas[int(np.argmax(self.cv_scores_))])
            self.alpha_criterion_ = "recall_retention"
        elif isinstance(self.alpha, str):
            alphas = self._candidate_alphas()
            self.loo_errors_ = ridge_loo_errors(Xc, Yc, alphas, center=self.center)
            check_finite(float(self.loo_errors_.min()), what="every leave-one-out error",
                         hint="Pass larger alphas or a fixed alpha.")
            self.alpha_ = float(alphas[int(np.argmin(self.loo_errors_))])
            self.alpha_criterion_ = "loo"
        else:
            self.alpha_ = float(self.alpha)
            self.alpha_criterion_ = "fixed"
        return gram

    def _affine(self):
        normalize_in, scale_out = self._affine_io()
        args = (self.coef_.T, np.zeros(self.n_features_in_), self.intercept_)
        return args, {"normalize_in": normalize_in, "scale_out": scale_out}

    def _transform_fn(self, device, dtype=None):
        args, kw = self._affine()
        return affine_fn(*args, device, dtype=dtype, **kw)

    def _transform_numpy_fn(self, dtype=np.float32):
        args, kw = self._affine()
        return affine_numpy_fn(*args, dtype=dtype, **kw)
