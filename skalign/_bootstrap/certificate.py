r"""A success score for an alignment found without (enough) ground truth.

The score is a **held-out mutual-CSLS share**. The discovered pairs are split in two halves at
random; a map is fitted on the first half (plus the seed pairs) and translates the source rows
of the second half; each is scored against every target-pool row not used in the fit by CSLS
(:math:`2\cos - r^X_i - r^Y_j`, Conneau et al. 2018), and the score is the share of those source
rows whose best target has them as its best source *and* is the partner the discovery gave
them. A right discovery predicts its own held-out half (0.9–1.0 on the development data); wrong
pairs do not predict each other, and a map fitted to pairs of unrelated pools (a target pool of
random vectors) does not generalise (both ≤ 0.1). Computed on the fitted rows themselves, the
same share would be fooled by overfitting (0.6 against random vectors).
"""

from __future__ import annotations

import torch

from ..utils._backend import row_normalize
from .matching import csls_match

__all__ = ["CERTIFICATE_THRESHOLD", "alignment_certificate", "split_halves"]

CERTIFICATE_THRESHOLD = 0.5  # see 5ae3bf6:benchmarks/certificate_study.py


def split_halves(n_pairs, generator):
    """A random split of ``range(n_pairs)`` into a fitting half and a held-out half."""
    order = torch.randperm(n_pairs, generator=generator, device=generator.device)
    half = n_pairs // 2
    return order[:half], order[half:]


def alignment_certificate(Y_hat, Y, partner, *, k=10, batch_size=None):
    """Share of held-out source rows whose translation finds their discovered partner, mutually.

    Parameters
    ----------
    Y_hat : tensor of shape (n, d)
        Held-out source rows translated by a map fitted without them.
    Y : tensor of shape (m, d)
        Candidate target rows (the target pool minus the rows the map was fitted on). Both are
        centred on the mean of ``Y`` and L2-normalised here.
    partner : tensor of int, shape (n,)
        Row of ``Y`` the discovery paired each source row with.
    k : int, default=10
        CSLS neighbourhood.

    Returns
    -------
    dict
        ``score`` (in [0, 1]; 0 without held-out rows) and ``mean_csls_margin`` (mean CSLS
        margin, best minus second best, of the held-out rows; NaN without them).
    """
    if len(Y_hat) == 0 or len(Y) < 2:
        return {"score": 0.0, "mean_csls_margin": float("nan")}
    mu = Y.mean(0)
    U, V = row_normalize(Y_hat - mu), row_normalize(Y - mu)
    match = csls_match(U, V, k=k, batch_size=batch_size)
    hit = match.mutual() & (match.forward == partner)
    return {"score": float(hit.float().mean()),
            "mean_csls_margin": float(match.confidence.mean())}
