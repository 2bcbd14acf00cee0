r"""GeRA's loss terms: the symmetric InfoNCE loss of the pairs and the geometric term.

The geometric term compares, row by row, the diffusion operators of the same points in their
original space and after the map (see :class:`skalign.GeRAAligner`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["contrastive_loss", "geometric_term"]

_LOG_FLOOR = 1e-30  # probabilities below this are treated as 0 inside logarithms

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
