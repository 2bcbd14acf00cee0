r"""A success score for an alignment found without (enough) ground truth.

The score is the **mutual-CSLS share**: translate the source pool into the target space, score
every (source, target) pair by CSLS (:math:`2\cos - r^X_i - r^Y_j`, Conneau et al. 2018) and
count the source rows whose best target has them as its best source. A right map pairs most rows
of two pools of the same texts with each other (0.9–1.0 on the development data); a wrong one
leaves them scattered among hubs (0.0–0.3, and about 0.15 against random vectors). The mean
CSLS of the mutual pairs is reported beside it.
"""

from __future__ import annotations

import torch

from ._backend import row_normalize
from ._matching import csls_match

__all__ = ["CERTIFICATE_THRESHOLD", "alignment_certificate"]

CERTIFICATE_THRESHOLD = 0.5  # see benchmarks/certificate_study.py


def alignment_certificate(Y_hat, Y, *, k=10, chunk_size=None):
    """Mutual-CSLS share and mean CSLS of translated source rows against a target pool.

    Parameters
    ----------
    Y_hat : tensor of shape (n, d)
        Source-pool rows translated into the target space.
    Y : tensor of shape (m, d)
        Target-pool rows. Both are centred on the target pool's mean and L2-normalised here.
    k : int, default=10
        CSLS neighbourhood.

    Returns
    -------
    dict
        ``score`` (share of source rows in a mutual CSLS pair, in [0, 1]) and ``mean_csls``
        (mean CSLS of those pairs; NaN when there are none).
    """
    mu = Y.mean(0)
    U, V = row_normalize(Y_hat - mu), row_normalize(Y - mu)
    match = csls_match(U, V, k=k, chunk_size=chunk_size)
    mutual = match.mutual()
    share = float(mutual.float().mean()) if len(mutual) else 0.0
    if bool(mutual.any()):
        i = torch.nonzero(mutual).flatten()
        j = match.forward[i]
        sim = (U[i] * V[j]).sum(1)
        # CSLS of the mutual pairs, with the same neighbourhood means as the matching
        mean_csls = float(2 * sim.mean() - _knn_mean(U[i], V, k).mean()
                          - _knn_mean(V[j], U, k).mean())
    else:
        mean_csls = float("nan")
    return {"score": share, "mean_csls": mean_csls}


def _knn_mean(A, B, k):
    """Mean of the ``k`` largest cosines of each row of ``A`` to the rows of ``B``."""
    k = min(k, len(B))
    out = torch.empty(len(A), dtype=A.dtype, device=A.device)
    step = max(1, 2**24 // max(1, len(B)))
    for s in range(0, len(A), step):
        out[s:s + step] = torch.topk(A[s:s + step] @ B.T, k, dim=1).values.mean(1)
    return out
