"""Anchor pruning of the inverse relative projection: greedy farthest point sampling.

:func:`farthest_point_sampling` draws the anchor subsets (subspaces) of
:class:`~skalign.InverseRelativeProjector` (§3.3 of Maiorca et al.), every run from its own
random start; :func:`_pruning_rank` bounds how many anchors a subset can keep.
"""

from __future__ import annotations

import torch
from sklearn import get_config

from ..utils._backend import one_thread

__all__ = ["farthest_point_sampling"]


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
    # about k steps of a few operations on (n_runs, k) matrices: one thread, whatever the
    # caller's setting (each step would synchronise the threads several times)
    with one_thread():
        return _sample(anchors, starts, threshold, valid, other)


def _sample(anchors, starts, threshold, valid, other):
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


def _pruning_rank(space, other, valid):
    ranks = [int(torch.linalg.matrix_rank(A[valid])) for A in (space, other) if A is not None]
    return max(1, min(ranks))
