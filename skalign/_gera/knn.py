"""Exact cosine nearest neighbours, computed block by block on the compute device.

Only ``batch_size × n`` similarities exist at any time (by default as many as fit in
scikit-learn's ``working_memory``), so a pool of ``10⁵`` embeddings needs no more than that budget
instead of the ``n × n`` matrix (40 GB in float32).
"""

from __future__ import annotations

import torch

from ..utils._backend import default_batch_size, iter_batches

__all__ = ["knn_graph"]

def knn_graph(U: torch.Tensor, k: int, *, batch_size: int | None = None):
    """Indices and squared distances of each row's ``k`` nearest other rows.

    Parameters
    ----------
    U : tensor of shape (n, d)
        Unit-norm rows (cosine similarity = dot product); any device.
    k : int
        Number of neighbours, ``1 <= k <= n - 1``. The row itself is excluded.
    batch_size : int, default=None
        Query rows per block; ``None`` keeps each block's similarities within scikit-learn's
        ``working_memory``.

    Returns
    -------
    indices : tensor of shape (n, k), int64
        Neighbours sorted from nearest to farthest.
    sq_distances : tensor of shape (n, k)
        ``‖u_i − u_j‖² = 2 − 2 cos(u_i, u_j)``, clamped at 0.
    """
    n = U.shape[0]
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be in [1, n - 1] = [1, {n - 1}], got {k}.")
    if batch_size is None:
        batch_size = default_batch_size(n, itemsize=U.element_size())
    indices = torch.empty((n, k), dtype=torch.long, device=U.device)
    sq = torch.empty((n, k), dtype=U.dtype, device=U.device)
    for rows in iter_batches(n, batch_size):
        S = U[rows] @ U.T
        local = torch.arange(S.shape[0], device=U.device)
        S[local, local + rows.start] = -torch.inf
        top = torch.topk(S, k, dim=1)
        indices[rows] = top.indices
        sq[rows] = (2.0 - 2.0 * top.values).clamp_min(0.0)
    return indices, sq
