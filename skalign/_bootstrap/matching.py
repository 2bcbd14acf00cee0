r"""Correspondences between two pools in bounded memory: CSLS mutual nearest neighbours, or OT.

Both matchers see the pools through two factor matrices ``U`` (n × p) and ``V`` (m × p) whose
inner products are the similarities, :math:`S = U V^\top`, and never hold more than a block of
rows of ``S`` (``batch_size · m`` entries; by default as many as fit in scikit-learn's
``working_memory``). :class:`~skalign.AnchorBootstrapper` passes the relative
representations of both pools with respect to the current anchors, or their low-rank form (see
:func:`relative_factors`).

CSLS (cross-domain similarity local scaling, Conneau et al. 2018) corrects hubness: with
:math:`r^X_i` the mean of the ``k`` largest similarities of source row ``i`` to target rows and
:math:`r^Y_j` the same for target row ``j``,

.. math::

    \operatorname{CSLS}(i, j) = 2 S_{ij} - r^X_i - r^Y_j .

A pair ``(i, j)`` is *mutual* when ``j`` is the best target of ``i`` and ``i`` the best source of
``j`` under the score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils._backend import default_batch_size, iter_batches, row_normalize
from .sinkhorn import DenseCost, InnerProductCost, knn_support, sinkhorn_log

__all__ = ["Matching", "csls_match", "relative_factors", "sinkhorn_match"]

_MEDIAN_SAMPLE = 2**16


def _block_rows(m, batch_size, itemsize):
    # a block holds S and the score derived from it: 2 m numbers per source row
    return batch_size or default_batch_size(2 * m, itemsize=itemsize)


@dataclass
class Matching:
    """A correspondence between ``n`` source rows and ``m`` target rows.

    Attributes
    ----------
    forward : tensor of shape (n,)
        Best target row of each source row.
    backward : tensor of shape (m,)
        Best source row of each target row.
    confidence : tensor of shape (n,)
        Confidence of each source row's forward pair (greater is surer).
    similarity : tensor of shape (n,)
        :math:`S_{i, \\mathrm{forward}(i)}`, the plain similarity of the forward pair.
    info : dict
        Solver details (Sinkhorn iterations, ε, marginal error) where relevant.
    """

    forward: torch.Tensor
    backward: torch.Tensor
    confidence: torch.Tensor
    similarity: torch.Tensor
    info: dict

    def mutual(self):
        """Boolean mask of the source rows whose forward pair is mutual."""
        n = len(self.forward)
        return self.backward[self.forward] == torch.arange(n, device=self.forward.device)


def relative_factors(XP, YP, AX, AY):
    r"""Factors ``U``, ``V`` with :math:`U V^\top` the cosine between relative representations.

    The relative representation of a source row is :math:`r_X(x) = A_X x / \|A_X x\|` (cosines to
    the anchors when rows are unit vectors), likewise :math:`r_Y(y) = A_Y y / \|A_Y y\|`. Their
    inner product is :math:`x^\top A_X^\top A_Y y / (\|A_X x\| \|A_Y y\|)`, so with ``a`` anchors
    and widths ``d_x``, ``d_y`` the factors are either the relative representations themselves
    (width ``a``) or :math:`U = X A_X^\top A_Y / \|A_X x\|`, :math:`V = Y / \|A_Y y\|` (width
    ``d_y``), whichever is narrower: the pairwise products cost ``n · m · min(a, d_y)``.
    """
    RX, RY = XP @ AX.T, YP @ AY.T
    if AX.shape[0] <= YP.shape[1]:
        return row_normalize(RX), row_normalize(RY)
    nx = torch.linalg.vector_norm(RX, dim=1, keepdim=True).clamp_min(torch.finfo(RX.dtype).tiny)
    ny = torch.linalg.vector_norm(RY, dim=1, keepdim=True).clamp_min(torch.finfo(RY.dtype).tiny)
    del RX, RY
    return (XP @ (AX.T @ AY)) / nx, YP / ny


def csls_match(U, V, k=10, batch_size=None):
    """Mutual-nearest-neighbour candidates under CSLS, two passes over blocks of ``U V^T``.

    Parameters
    ----------
    U : tensor of shape (n, p)
    V : tensor of shape (m, p)
    k : int, default=10
        Neighbourhood size of the hubness correction; ``0`` uses the plain similarity.
    batch_size : int, default=None
        Source rows per block; ``None`` keeps blocks within scikit-learn's ``working_memory``.

    Returns
    -------
    Matching
        ``confidence`` is the CSLS margin: best score minus second best of the source row.
    """
    n, m = U.shape[0], V.shape[0]
    step = _block_rows(m, batch_size, U.element_size())
    dev, dt = U.device, U.dtype
    k = min(k, n, m)
    rx = torch.zeros(n, dtype=dt, device=dev)
    ry = torch.zeros(m, dtype=dt, device=dev)
    S_all = U @ V.T if step >= n else None  # one block: both passes share it
    if k > 0:  # pass 1: the mean of the k largest similarities of every row and column
        col_top = torch.full((k, m), -torch.inf, dtype=dt, device=dev)
        for rows in iter_batches(n, step):
            S = U[rows] @ V.T if S_all is None else S_all
            rx[rows] = torch.topk(S, k, dim=1).values.mean(1)
            kb = min(k, S.shape[0])
            col_top = torch.topk(torch.cat([col_top, torch.topk(S, kb, dim=0).values]), k,
                                 dim=0).values
        ry = col_top.mean(0)
    forward = torch.empty(n, dtype=torch.long, device=dev)
    margin = torch.zeros(n, dtype=dt, device=dev)
    sim = torch.empty(n, dtype=dt, device=dev)
    col_best = torch.full((m,), -torch.inf, dtype=dt, device=dev)
    backward = torch.zeros(m, dtype=torch.long, device=dev)
    for rows in iter_batches(n, step):  # pass 2: argmax of every row and column of the score
        S = U[rows] @ V.T if S_all is None else S_all
        M = 2 * S - rx[rows, None] - ry[None, :] if k > 0 else S
        top = torch.topk(M, min(2, m), dim=1)
        forward[rows] = top.indices[:, 0]
        if m > 1:
            margin[rows] = top.values[:, 0] - top.values[:, 1]
        sim[rows] = torch.gather(S, 1, top.indices[:, :1])[:, 0]
        best, arg = M.max(0)
        better = best > col_best  # strict: the first maximiser wins, as in a dense argmax
        col_best = torch.where(better, best, col_best)
        backward = torch.where(better, arg + rows.start, backward)
    return Matching(forward, backward, margin, sim, {})


def sinkhorn_match(U, V, reg, *, plan="dense", n_neighbors=64, batch_size=None, max_iter=1000,
                   tol=1e-3, generator=None):
    r"""Correspondence from entropic OT with cost :math:`C = 1 - U V^\top`, in the log domain.

    ``reg`` is relative to the median cost. ``plan`` picks the storage: ``"dense"`` (the
    ``n × m`` cost), ``"chunked"`` (exact, recomputed in blocks) or ``"sparse"`` (each row's and
    column's ``n_neighbors`` cheapest partners). ``confidence`` is the share of the source row's
    mass on its forward partner, :math:`\Pi_{i,\mathrm{forward}(i)} / a_i \in [0, 1]`.

    Returns
    -------
    Matching
    """
    n, m = U.shape[0], V.shape[0]
    i = torch.randint(n, (_MEDIAN_SAMPLE,), generator=generator, device=U.device)
    j = torch.randint(m, (_MEDIAN_SAMPLE,), generator=generator, device=U.device)
    med = float((1 - (U[i] * V[j]).sum(1)).median())
    eps = reg * (med if med > 0 else 1.0)
    if plan == "dense":
        cost = DenseCost(1 - U @ V.T)
    elif plan == "chunked":
        cost = InnerProductCost(U, V, batch_size)
    else:
        cost = knn_support(U, V, n_neighbors, batch_size, inner_product=True)
    res = sinkhorn_log(cost, eps, max_iter=max_iter, tol=tol)
    forward, backward = res.row_argmax(), res.col_argmax()
    sim = (U * V[forward]).sum(1)
    log_a = -torch.log(torch.tensor(float(n), dtype=U.dtype, device=U.device))
    conf = torch.exp((res.f + res.g[forward] - (1 - sim)) / eps - log_a).clamp_(0, 1)
    info = {"sinkhorn_reg": res.reg, "sinkhorn_n_iter": res.n_iter,
            "plan_marginal_error": res.marginal_error}
    return Matching(forward, backward, conf, sim, info)
