"""The anchor optimisation of :class:`~skalign.AnchorBootstrapper` (``refine=True``).

Free target anchors on the unit sphere fitted by Adam to the source relative representations
(Cannistraci et al., ICLR 2023 Tiny Papers), then snapped to their nearest target-pool rows. A
mixin of the estimator: its methods read the estimator's parameters.
"""

from __future__ import annotations

import torch

from ..utils._backend import default_batch_size, row_normalize
from ..utils._optim import LossHistory


class _RefineMixin:
    """``refine=True``: the target anchors optimised after the rounds, snapped to pool rows."""

    def _refine(self, LX, LY, XP, YP, match, pick, gen):
        """Anchor optimisation [1]: free target anchors on the sphere, Adam, snap to nearest."""
        mutual = torch.nonzero(match.mutual()).flatten()
        RX = XP[mutual] @ torch.cat([LX, XP[pick]]).T  # source relative reps of matched rows
        A, history = self._optimise_anchors(YP[match.forward[mutual]], LY, RX, gen)
        self.refine_loss_curve_ = history.curve
        idx, _ = self._snap(A, YP)
        return idx

    def _optimise_anchors(self, YP, LY, T, gen):
        """Adam on the sphere for the free target anchors; closed-form loss via Gram matrices."""
        s = len(LY)
        m, k = len(YP), T.shape[1] - s
        history = LossHistory(type(self).__name__, max_iter=self.refine_max_iter, tol=1e-6,
                              verbose=self.verbose,
                              divergence_hint="Lower refine_learning_rate.")
        seed_loss = float(((T[:, :s] - YP @ LY.T) ** 2).sum())
        denom = m * (s + k)
        if k == 0:
            history.record(seed_loss / denom)
            return YP[:0], history.finish()
        T64, Y64 = T[:, s:].double(), YP.double()
        G = Y64.T @ Y64
        B = Y64.T @ T64  # (d_y, k)
        t_sq = float((T64 * T64).sum())
        ridge = 1e-6 * float(torch.diagonal(G).mean()) + 1e-12  # normalised least-squares start
        W0 = torch.linalg.solve(G + ridge * torch.eye(len(G), dtype=G.dtype, device=G.device), B).T
        bad = torch.linalg.vector_norm(W0, dim=1) == 0
        if bool(bad.any()):
            W0[bad] = B.T[bad]
        W0 = W0 + (torch.linalg.vector_norm(W0, dim=1, keepdim=True) == 0).double()
        W = torch.nn.Parameter(row_normalize(W0).float())
        G32, B32 = G.float(), B.float()
        opt = torch.optim.Adam([W], lr=self.refine_learning_rate)

        def loss_of(W):
            A = row_normalize(W)
            return (t_sq - 2 * (A * B32.T).sum() + ((A @ G32) * A).sum() + seed_loss) / denom

        for _ in range(self.refine_max_iter):
            opt.zero_grad()
            loss = loss_of(W)
            loss.backward()
            opt.step()
            with torch.no_grad():
                W.data = row_normalize(W.data)
                current = float(loss_of(W))
            if history.record(current):
                break
        return row_normalize(W.detach()), history.finish()

    def _snap(self, A, YP):
        """Nearest target-pool row (cosine) of each anchor, with the top-1 minus top-2 margin."""
        k = len(A)
        idx = torch.empty(k, dtype=torch.long, device=YP.device)
        margin = torch.zeros(k, dtype=YP.dtype, device=YP.device)
        if k == 0:
            return idx, margin
        best = torch.full((k, min(2, len(YP))), -torch.inf, dtype=YP.dtype, device=YP.device)
        best_idx = torch.zeros_like(best, dtype=torch.long)
        step = default_batch_size(k, itemsize=YP.element_size())
        for start in range(0, len(YP), step):
            S = A @ YP[start:start + step].T
            top = torch.topk(S, min(best.shape[1], S.shape[1]), dim=1)
            vals = torch.cat([best, top.values], 1)
            ids = torch.cat([best_idx, top.indices + start], 1)
            order = torch.topk(vals, best.shape[1], dim=1)
            best, best_idx = order.values, torch.gather(ids, 1, order.indices)
        idx = best_idx[:, 0]
        if best.shape[1] > 1:
            margin = best[:, 0] - best[:, 1]
        return idx, margin
