r"""Self-learning with stochastic dictionary induction (vecmap, Artetxe et al. ACL 2018).

From a start correspondence between two pools (centred, L2-normalised rows), alternate:

1. fit the orthogonal map :math:`W = \operatorname{polar}(X_a^\top Y_b + w\,L_X^\top L_Y)` on the
   current pseudo-pairs :math:`(a, b)` plus the seed pairs :math:`(L_X, L_Y)` with weight
   :math:`w`;
2. score all pairs by CSLS on :math:`S = (X W) Y^\top`; keep every entry with probability
   :math:`p` (the others are dropped) and take the best target of every source row and the best
   source of every target row as the next pseudo-pairs.

The objective is the mean over source rows of their best CSLS score; when it has not improved
for ``patience`` iterations :math:`p` doubles, and the loop stops when it stalls at
:math:`p = 1`. Dropping entries at random lets a poor start escape the local optimum it would
otherwise lock into: on the development data five seed pairs take MiniLM → multilingual-e5
from 4 % of pool rows paired to 98 %.
"""

from __future__ import annotations

import time

import torch

from ._backend import polar

__all__ = ["csls_scores", "self_learn"]

_DROPPED = -1e4


def csls_scores(S, k):
    """Dense CSLS of a similarity matrix: :math:`2S - r^X_i - r^Y_j` (``k`` nearest means)."""
    kx, ky = min(k, S.shape[1]), min(k, S.shape[0])
    rx = torch.topk(S, kx, dim=1).values.mean(1)
    ry = torch.topk(S, ky, dim=0).values.mean(0)
    return 2 * S - rx[:, None] - ry[None, :]


def self_learn(XP, YP, a, b, LX=None, LY=None, *, seed_weight=5.0, csls_n_neighbors=10, p0=0.1,
               patience=3, max_iter=100, generator=None):
    """Run the loop from pseudo-pairs ``(a, b)``; return the map, the history and the objective.

    Parameters
    ----------
    XP : tensor of shape (n, d_x)
    YP : tensor of shape (m, d_y)
        Centred, unit-norm pool rows.
    a, b : tensors of int
        Starting pseudo-pairs (source-pool row, target-pool row).
    LX, LY : tensors of shape (s, d_x), (s, d_y), optional
        Seed pairs, always part of the fit with weight ``seed_weight`` each.

    Returns
    -------
    W : tensor of shape (d_x, d_y)
    history : list of dict
        Per iteration: ``objective``, ``keep_probability``, ``n_pairs``, ``seconds``.
    objective : float
        The best objective reached (the map returned is the one that reached it).
    """
    n, m = len(XP), len(YP)
    seeds = None
    if LX is not None and len(LX):
        seeds = seed_weight * (LX.T @ LY)
    best, best_W, stall, p = -float("inf"), None, 0, p0
    history = []
    for _ in range(max_iter):
        t0 = time.perf_counter()
        M = XP[a].T @ YP[b]
        if seeds is not None:
            M = M + seeds
        W = polar(M.double()).to(XP.dtype)
        # the narrower side carries the product: n·m·min(d_x, d_y)
        S = XP @ (YP @ W.T).T if W.shape[0] < W.shape[1] else (XP @ W) @ YP.T
        C = csls_scores(S, csls_n_neighbors)
        del S
        objective = float(C.max(1).values.mean())
        if p < 1:
            keep = torch.rand(C.shape, generator=generator, device=C.device,
                              dtype=C.dtype) < p
            C = torch.where(keep, C, torch.full_like(C, _DROPPED))
        forward, backward = C.argmax(1), C.argmax(0)
        del C
        ar = torch.arange(n, device=XP.device)
        a = torch.cat([ar, backward])
        b = torch.cat([forward, torch.arange(m, device=XP.device)])
        history.append({"objective": objective, "keep_probability": p, "n_pairs": len(a),
                        "seconds": time.perf_counter() - t0})
        if objective > best + 1e-6:
            best, best_W, stall = objective, W, 0
        else:
            stall += 1
        if stall >= patience:
            if p >= 1:
                break
            p, stall = min(1.0, 2 * p), 0
    return best_W, history, best
