"""Anchor math shared by :class:`~skalign.RelativeProjector` and the inverse relative projection.

Centring and normalising anchors, the relative encoding and its rescaling, and the (ridge)
pseudo-inverse decoders of anchor subsets, in one place so that both estimators use the same
code.
"""

from __future__ import annotations

import numpy as np
import torch

from ..utils._backend import SOLVE_DTYPE, check_finite, lapack_threads, to_numpy

#: Centred anchors whose norm is below this fraction of the mean centred norm have no direction.
DEGENERATE_RTOL = 1e-10


def center_normalize(A: torch.Tensor):
    """Anchor statistics of the relative representation.

    Returns the anchor mean ``μ``, the centred and L2-normalised anchors ``Â`` (rows of degenerate
    anchors, those lying on the mean, are set to zero), the mean norm ``s`` of the centred anchors
    and the boolean mask of non-degenerate anchors.
    """
    mu = A.mean(0)
    C = A - mu
    norms = torch.linalg.vector_norm(C, dim=1)
    scale = norms.mean()
    valid = norms > DEGENERATE_RTOL * scale
    safe = torch.where(valid, norms, torch.ones_like(norms))
    A_hat = torch.where(valid.unsqueeze(1), C / safe.unsqueeze(1), torch.zeros_like(C))
    return mu, A_hat, scale, valid


def on_mean_floor(mean: torch.Tensor) -> float:
    """Norm below which ``B − μ`` is rounding error: the row *is* the mean.

    ``μ`` computed by another library (``numpy.mean`` of the same anchors) differs from the fitted
    one by a few ulps; in float32 the cast hid that, in float64 the difference would be normalised
    into a noise direction.
    """
    return 16 * torch.finfo(mean.dtype).eps * float(torch.linalg.vector_norm(mean))


def encode(B: torch.Tensor, mean: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """``normalize(B − μ)``; a row on the mean (``‖B − μ‖ ≤ floor``) stays zero, not NaN."""
    C = B - mean
    norms = torch.linalg.vector_norm(C, dim=1, keepdim=True)
    return torch.where(norms > floor, C / norms.clamp_min(torch.finfo(C.dtype).tiny),
                       torch.zeros_like(C))


def rescale(Y_hat: torch.Tensor, mode: str, scale: float, mean: torch.Tensor) -> torch.Tensor:
    """De-normalise and de-centre decoded rows (step 4–5 of the inverse relative projection)."""
    if mode == "normalize":
        Y_hat = Y_hat / torch.linalg.vector_norm(Y_hat, dim=1, keepdim=True).clamp_min(
            torch.finfo(Y_hat.dtype).tiny
        )
    return Y_hat * scale + mean


def spectral_filter(s, rtol, alpha):
    """Filter factors ``s / (s² + α)`` of a ridge pseudo-inverse, zero below ``rtol · s_max``.

    ``rtol=None`` uses ``max(shape) · eps`` through the caller (it passes the resolved value).
    """
    keep = s > rtol * (s.max() if s.numel() else 0.0)
    safe = torch.where(keep, s, torch.ones_like(s))
    return torch.where(keep, safe / (safe * safe + alpha), torch.zeros_like(s)), keep


def subset_decoders(A_hat: torch.Tensor, subsets, rtol, alpha=0.0):
    r"""Ridge pseudo-inverses :math:`(\hat A_S^\top)^{+}_\alpha` of every anchor subset ``S``.

    With the thin SVD :math:`\hat A_S = U \Sigma V^\top` (float64), the decoder is
    :math:`U \operatorname{diag}\big(\sigma / (\sigma^2 + \alpha)\big) V^\top`, singular
    values below ``rtol · σ_max`` dropped (``rtol=None``: ``max(k_S, d) · eps``); ``alpha=0`` is
    the Moore–Penrose pseudo-inverse. Subsets holding the same anchors (as sets) share one SVD.

    Returns the list of ``(k_S, d)`` decoders with rows in each subset's own order, the condition
    numbers :math:`\sigma_{\max} / \sigma_{\min}` of the ``Â_S``, the numbers of singular values
    kept and the list of each subset's kept singular values.
    """
    cache, decoders, conds, ranks, svals = {}, [], [], [], []
    for idx in subsets:
        order = torch.argsort(idx)
        key = tuple(idx[order].tolist())
        if key not in cache:
            A = A_hat[idx[order]].to(SOLVE_DTYPE)
            with lapack_threads(A):
                U, s, Vh = torch.linalg.svd(A, full_matrices=False)
            tol = max(A.shape) * torch.finfo(SOLVE_DTYPE).eps if rtol is None else rtol
            f, keep = spectral_filter(s, tol, alpha)
            P = (U * f) @ Vh
            check_finite(P, what="the pseudo-inverse", hint="Increase alpha or rtol.")
            cache[key] = (P, condition_number(to_numpy(s)), int(keep.sum()), s[keep])
        P, cond, rank, kept = cache[key]
        decoders.append(P[torch.argsort(order)])
        conds.append(cond)
        ranks.append(rank)
        svals.append(kept)
    return decoders, np.array(conds), np.array(ranks), svals




def condition_number(s: np.ndarray) -> float:
    if s.size == 0:
        return float("inf")
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")
