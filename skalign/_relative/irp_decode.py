"""The regularised decode of the inverse relative projection, one direction at a time.

The ridge is chosen by generalised cross-validation on the anchors (:func:`_gcv_alpha`); the
averaged map of the anchor subsets is built by Cholesky factorisations (:func:`_ridge_map`) or,
for small or zero ridges and an explicit ``rtol``, by exact SVDs (:func:`_spectral_map`). Used
by :class:`~skalign.InverseRelativeProjector`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..utils._backend import SOLVE_DTYPE, lapack_threads, to_numpy
from .anchors import subset_decoders

#: Distinct anchor subsets whose GCV curves are pooled to choose the ridge. The ω pruning runs are
#: exchangeable draws of the same procedure, so a couple suffice; each costs one eigendecomposition.
_GCV_POOL = 1
#: The ridges GCV chooses from (0.05 decades apart). The anchor Gram matrices have a unit diagonal,
#: so the scale is the same for every pair of encoders.
_GCV_GRID = np.logspace(-10, 3, 261)
#: Warn when a decode's largest noise gain exceeds this multiple of the GCV ridge's bound.
_WARN_GAIN = 10.0
#: A ridge α has gains σ/(σ² + α) ≤ 1/(2√α), under the warning bound whenever α is at least this
#: fraction of the GCV ridge: it is solved by Cholesky factorisations. Smaller ridges (and an
#: explicit ``rtol``) go through exact SVDs, whose spectra decide the warning.
_FAST_RIDGE = 1.0 / _WARN_GAIN**2


class _Side:
    """One direction of the translation: anchors of the encoding and decoding spaces and their
    Gram matrices (``K_dec`` = ``dec decᵀ`` when ``k × k`` fits in ``working_memory``, else None;
    ``C = encᵀ dec``)."""

    def __init__(self, *, enc, dec, G_enc, G_dec, K_dec, C):
        self.enc, self.dec, self.G_enc, self.G_dec, self.K_dec, self.C = (
            enc, dec, G_enc, G_dec, K_dec, C)

    def kernel_side(self, k_i):
        """Solve in the ``k_i × k_i`` anchor Gram (True) or the ``d × d`` one (False)."""
        return k_i <= 1.5 * self.dec.shape[1]

    def K(self, idx):
        if self.K_dec is not None:
            return self.K_dec[idx][:, idx]
        S = self.dec[idx]
        return S @ S.T

    def G(self, idx):
        """``Ŝᵀ Ŝ`` of the decoding anchors in ``idx``, downdated from all anchors when cheaper."""
        return _downdate(self.G_dec, self.dec, self.dec, idx)

    def C_sub(self, idx):
        return _downdate(self.C, self.enc, self.dec, idx)


def _downdate(full, A, B, idx):
    """``A[idx]ᵀ B[idx]`` as ``AᵀB`` (precomputed in ``full``) minus the excluded rows' part."""
    mask = torch.ones(A.shape[0], dtype=torch.bool, device=A.device)
    mask[idx] = False
    if int(mask.sum()) < len(idx):
        return full - A[mask].T @ B[mask]
    return A[idx].T @ B[idx]


def _unique(subsets):
    """Distinct subsets (as sorted index tensors), each with how many runs produced it."""
    seen = {}
    for idx in subsets:
        key = tuple(sorted(idx.tolist()))
        if key in seen:
            seen[key][1] += 1
        else:
            seen[key] = [torch.sort(idx).values, 1]
    return list(seen.values())


def _gcv_alpha(side, subsets):
    r"""Ridge minimising the generalised cross-validation score of the decode, pooled over the
    first :data:`_GCV_POOL` distinct subsets.

    For a subset :math:`S` with decoding anchors :math:`\hat S_D` (``k_S × d``) the decode of a
    relative representation :math:`r` is the ridge regression of :math:`r` on the rows of
    :math:`\hat S_D`; its hat matrix is :math:`H_\alpha = \hat S_D(\hat S_D^\top \hat S_D +
    \alpha I)^{-1}\hat S_D^\top`. The responses are the relative representations of all ``k``
    anchors in the *encoding* space, :math:`r_q = \hat a^E_q \hat S_E^\top`, so the score
    estimates how well the decode predicts an anchor's cosine to a left-out anchor of ``S``
    from its cosines to the others — noise in the relative space (the two encoders disagreeing
    on angles) is what it penalises. With :math:`\hat S_D \hat S_D^\top = U \Lambda U^\top`:

    .. math::

        \mathrm{GCV}(\alpha) = \frac{\tfrac{1}{k_S}\sum_q \|(I - H_\alpha) r_q\|^2}
        {\big(1 - \operatorname{tr} H_\alpha / k_S\big)^2}, \quad
        \sum_q \|(I - H_\alpha) r_q\|^2 = \sum_j \Big(\frac{\alpha}{\lambda_j + \alpha}\Big)^2 b_j
        + b_\perp, \quad \operatorname{tr} H_\alpha = \sum_j \frac{\lambda_j}{\lambda_j + \alpha},

    with :math:`b_j = \sum_q (u_j^\top r_q)^2 = w_j G_E w_j^\top`, :math:`w_j = u_j^\top \hat S_E`,
    :math:`G_E = \hat A_E^\top \hat A_E` (``d × d``, so no ``k × k`` product of representations is
    formed) and :math:`b_\perp` the part outside the range of :math:`U`.
    """
    scores = np.zeros_like(_GCV_GRID)
    grid = torch.as_tensor(_GCV_GRID, dtype=SOLVE_DTYPE, device=side.dec.device).unsqueeze(1)
    for idx, _ in _unique(subsets)[:_GCV_POOL]:
        k_i = len(idx)
        S_enc = side.enc[idx]
        if k_i <= side.dec.shape[1]:
            K = side.K(idx)
            with lapack_threads(K):
                lam, U = torch.linalg.eigh(K)
            W = U.T @ S_enc
            B = ((W @ side.G_enc) * W).sum(1)
            perp = 0.0  # U is a complete basis of the k_S-dimensional response space
        else:
            G = side.G(idx)
            with lapack_threads(G):
                lam, V = torch.linalg.eigh(G)
            keep = lam > lam.max() * max(k_i, len(lam)) * torch.finfo(SOLVE_DTYPE).eps
            lam, V = lam[keep], V[:, keep]
            # u_j = Ŝ_D v_j / √λ_j, so u_jᵀ Ŝ_E = v_jᵀ (Ŝ_Eᵀ Ŝ_D)ᵀ / √λ_j.
            W = (V.T @ side.C_sub(idx).T) / lam.sqrt().unsqueeze(1)
            B = ((W @ side.G_enc) * W).sum(1)
            total = ((S_enc @ side.G_enc) * S_enc).sum()
            perp = float((total - B.sum()).clamp_min(0))
        lam = lam.clamp_min(0)
        shrink = grid / (lam + grid)
        rss = perp + (shrink**2 * B).sum(1)
        dof = (lam / (lam + grid)).sum(1)
        scores += to_numpy(rss / k_i / (1 - dof / k_i).clamp_min(1e-300) ** 2)
    return float(_GCV_GRID[int(np.argmin(scores))])


def _ridge_map(side, subsets, alpha):
    r"""Averaged ridge map :math:`\frac1\omega\sum_i \hat S_E^{i\top}\hat S_D^i(\hat S_D^{i\top}
    \hat S_D^i + \alpha I)^{-1}` by Cholesky factorisations, with effective ranks and 1-norm
    condition numbers of the regularised Gram matrices, one per subset.

    Each subset is solved in whichever Gram matrix is smaller: the ``k_S × k_S`` one (push-through
    identity :math:`\hat S_D(\hat S_D^\top\hat S_D + \alpha)^{-1} = (\hat S_D\hat S_D^\top +
    \alpha)^{-1}\hat S_D`; its inverse is scattered into a ``k × k`` matrix :math:`N` and
    :math:`\hat A_E^\top N \hat A_D` is formed once) or the ``d × d`` one, downdated from the Gram
    matrix of all anchors.
    """
    enc, dec = side.enc, side.dec
    k = enc.shape[0]
    M = torch.zeros(enc.shape[1], dec.shape[1], dtype=SOLVE_DTYPE, device=enc.device)
    N = Q = abs_K = inv_sum = None
    stats = {}
    for idx, count in _unique(subsets):
        k_i = len(idx)
        if side.kernel_side(k_i) and side.K_dec is not None and 2 * (k - k_i) < k_i:
            # Most anchors kept: the inverse is a Schur complement of the inverse for all
            # anchors, (K_SS + α)⁻¹ = Q_SS − Q_SE Q_EE⁻¹ Q_ES with Q = (K + α)⁻¹, computed once.
            if Q is None:
                Q = _spd_inverse(side.K_dec + alpha * torch.eye(k, dtype=SOLVE_DTYPE,
                                                                 device=enc.device))
                abs_K = side.K_dec.abs()
            kept = torch.zeros(k, dtype=SOLVE_DTYPE, device=enc.device)
            kept[idx] = 1.0
            out = kept == 0
            Q_S = Q[idx]
            inv = Q_S[:, idx]
            if int(out.sum()):
                Q_SE = Q_S[:, out]
                inv = inv - Q_SE @ torch.linalg.solve(Q[out][:, out], Q_SE.T)
            norm_A = float((abs_K @ kept)[idx].max()) + alpha  # ‖K_SS + αI‖₁, unit diagonal
            size = k_i
        else:
            A = side.K(idx) if side.kernel_side(k_i) else side.G(idx)
            A = A + alpha * torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
            inv = _spd_inverse(A)
            norm_A, size = float(torch.linalg.matrix_norm(A, ord=1)), A.shape[0]
        dof = size - alpha * float(torch.trace(inv))
        cond = norm_A * float(torch.linalg.matrix_norm(inv, ord=1))
        stats[tuple(idx.tolist())] = (dof, cond)
        if side.kernel_side(k_i):
            if side.K_dec is not None:
                if N is None:
                    N = torch.zeros(k, k, dtype=SOLVE_DTYPE, device=enc.device)
                rows = torch.zeros(k_i, k, dtype=SOLVE_DTYPE, device=enc.device)
                rows.index_add_(1, idx, inv, alpha=count)
                N.index_add_(0, idx, rows)
            else:
                M += count * (enc[idx].T @ (inv @ dec[idx]))
        else:
            # Σ_i C_S Inv_i with C_S = C − (rows left out): one product with Σ_i Inv_i at the end.
            inv_sum = count * inv if inv_sum is None else inv_sum + count * inv
            out = torch.ones(k, dtype=torch.bool, device=enc.device)
            out[idx] = False
            if int(out.sum()):
                M -= count * (enc[out].T @ (dec[out] @ inv))
    if N is not None:
        M += enc.T @ (N @ dec)
    if inv_sum is not None:
        M += side.C @ inv_sum
    M /= len(subsets)
    keys = [tuple(sorted(idx.tolist())) for idx in subsets]
    return M, np.array([stats[key][0] for key in keys]), np.array([stats[key][1] for key in keys])


def _spd_inverse(A):
    """Inverse of a symmetric positive definite matrix by Cholesky (pseudo-inverse if not PD)."""
    with lapack_threads(A):
        L, info = torch.linalg.cholesky_ex(A)
        if int(info) == 0:
            return torch.cholesky_inverse(L)
        return torch.linalg.pinv(A, hermitian=True)


def _spectral_map(side, subsets, alpha, rtol):
    """Averaged map through exact SVDs (``alpha`` small or zero, or an explicit ``rtol``), with
    effective ranks, 1-norm condition numbers of ``Gram + αI`` and the largest noise gain
    ``max σ/(σ² + α)`` of each subset's decode."""
    enc, dec = side.enc, side.dec
    decoders, _, _, svals = subset_decoders(dec, subsets, rtol, alpha)
    P = torch.zeros_like(dec)
    for idx, D in zip(subsets, decoders):
        P.index_add_(0, idx, D)
    M = enc.T @ P / len(subsets)
    dof, cond, gain = [], [], []
    for idx, s in zip(subsets, svals):
        s2 = s * s
        dof.append(float((s2 / (s2 + alpha)).sum()) if alpha > 0 else float(len(s)))
        gain.append(float((s / (s2 + alpha)).max()) if len(s) else 0.0)
        A = side.K(idx) if side.kernel_side(len(idx)) else side.G(idx)
        A = A + alpha * torch.eye(A.shape[0], dtype=A.dtype, device=A.device)
        cond.append(float(torch.linalg.cond(A, p=1)))
    return M, np.array(dof), np.array(cond), np.array(gain)
