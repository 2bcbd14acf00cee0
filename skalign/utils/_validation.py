"""Scoring a closed-form start against its refinements, on pairs held out from the fit.

An estimator that starts from a closed-form solution and then refines it (GeRA trains from
Procrustes; :class:`~skalign.AnchorBootstrapper` refits on discovered pairs) must not end below
its start. It holds out pairs (:func:`validation_folds`), scores the start and every refinement
step by retrieval of the held-out pairs among a gallery of targets (:func:`gallery_rows`,
:func:`log_reciprocal_ranks`), and keeps the step that scored best, or the start when no step
beat it (:class:`EpochSelection`).
"""

from __future__ import annotations

import math

import torch

__all__ = ["EpochSelection", "gallery_rows", "log_reciprocal_ranks", "validation_folds"]

#: folds are added until at least this many pairs have been held out once (or all of them)
MIN_VALIDATION_PAIRS = 200
#: target rows a validation fold is scored against, at most
VALIDATION_GALLERY = 1024


def validation_folds(n, fraction, generator, *, min_validation=None):
    """Seeded ``(training rows, validation rows)`` splits of ``n`` pairs.

    The pairs are permuted with ``generator`` and cut into ``K = round(1 / fraction)`` folds
    (more when a fold would leave fewer than two pairs to train on; at most ``n``: leave one
    out). The first fold is held out; further folds are held
    out in turn until at least ``min_validation`` pairs have been held out once, or every pair
    has: one split of ``fraction`` of the pairs when that is enough, a rotation (cross-validation)
    when the pairs are few.

    Parameters
    ----------
    n : int
        Number of pairs.
    fraction : float
        Share of the pairs in each validation fold, in (0, 1).
    generator : torch.Generator
        Draws the permutation.
    min_validation : int, default=None
        Pairs to hold out in all, at least; ``None``: ``MIN_VALIDATION_PAIRS``.

    Returns
    -------
    folds : list of (Tensor, Tensor)
        Sorted int64 row indices on the generator's device; empty when ``n < 3`` (no fold would
        leave two pairs to train a contrastive loss on).
    """
    if n < 3:
        return []
    min_validation = MIN_VALIDATION_PAIRS if min_validation is None else min_validation
    perm = torch.randperm(n, generator=generator, device=generator.device)
    k = min(max(2, round(1.0 / fraction)), n)
    while n - math.ceil(n / k) < 2:  # every fold leaves two pairs to train on
        k += 1
    bounds = [round(i * n / k) for i in range(k + 1)]
    folds, held = [], 0
    for i in range(k):
        val = perm[bounds[i]:bounds[i + 1]].sort().values
        train = torch.cat([perm[:bounds[i]], perm[bounds[i + 1]:]]).sort().values
        folds.append((train, val))
        held += len(val)
        if held >= min_validation:
            break
    return folds


def gallery_rows(n_rows, val, generator, size=VALIDATION_GALLERY):
    """Rows of a target matrix a validation fold is scored against, its own targets first.

    Parameters
    ----------
    n_rows : int
        Rows of the target matrix (the fold's targets, the other pairs' and any unpaired ones).
    val : Tensor of int64
        The fold's own target rows; they come first, in this order.
    generator : torch.Generator
        Draws the others when there are more than fit.
    size : int, default=VALIDATION_GALLERY
        Rows in all, at most (never fewer than ``len(val)``).

    Returns
    -------
    rows : Tensor of int64
        ``val``, then the other rows (a seeded sample, in increasing order, when there are more
        than ``size - len(val)``).
    """
    keep = torch.ones(n_rows, dtype=torch.bool, device=val.device)
    keep[val] = False
    others = keep.nonzero().squeeze(1)
    room = max(size - len(val), 0)
    if len(others) > room:
        pick = torch.randperm(len(others), generator=generator, device=generator.device)[:room]
        others = others[pick.sort().values]
    return torch.cat([val, others])


def log_reciprocal_ranks(queries, gallery):
    """``-ln(rank)`` of each query's own gallery row (row ``i`` of ``queries`` ↔ row ``i``).

    The rank is 1 + the number of gallery rows scoring strictly higher by dot product (cosine for
    unit-norm rows), so a tie counts in the query's favour; 0 means retrieved first. The mean over
    queries is the log of the geometric mean of the reciprocal ranks: unlike the mean reciprocal
    rank, it still moves when the true rows climb from rank 50 to rank 5, which is where most
    queries sit when the pairs are few.

    Parameters
    ----------
    queries : Tensor of shape (m, k)
    gallery : Tensor of shape (g, k), g >= m
        Its first ``m`` rows are the queries' true matches; the rest are distractors.

    Returns
    -------
    scores : Tensor of shape (m,)
    """
    S = queries @ gallery.T
    own = S.diagonal()[:, None]
    return -torch.log1p((S > own).sum(1).to(queries.dtype))


class EpochSelection:
    """Validation scores of a run per epoch, pooled over folds, and the epoch count to keep.

    Feed :meth:`add` the per-query scores of every fold at epoch 0 (the start) and after each
    epoch; :attr:`scores` is their mean per epoch. :attr:`best_epoch` is the first epoch of the
    highest mean if it beats the start by more than ``margin`` standard errors of the per-query
    differences (a paired comparison on the same held-out queries), else 0: keep the start.

    Parameters
    ----------
    margin : float, default=1.0
        Standard errors by which the best epoch must beat the start.

    Examples
    --------
    >>> sel = EpochSelection(margin=0.0)
    >>> for epoch, v in enumerate([0.5, 0.6, 0.7, 0.65]):
    ...     sel.add(epoch, torch.tensor([v, v], dtype=torch.float64))
    >>> sel.scores, sel.best_epoch
    ([0.5, 0.6, 0.7, 0.65], 2)
    >>> sel = EpochSelection()
    >>> for epoch, v in enumerate([[0.5, 0.5], [0.5, 0.6], [0.4, 0.4]]):
    ...     sel.add(epoch, torch.tensor(v, dtype=torch.float64))
    >>> sel.best_epoch  # +0.05 on average, but one of the two queries gained and one did not
    0
    """

    def __init__(self, margin=1.0):
        self.margin = margin
        self._values: list[list] = []

    def add(self, epoch, values):
        """Add the per-query scores ``values`` (a 1-D tensor) of one fold at ``epoch``."""
        if epoch == len(self._values):
            self._values.append([])
        self._values[epoch].append(values.detach().double().cpu())

    def values(self, epoch):
        """The per-query scores at ``epoch``, all folds concatenated."""
        return torch.cat(self._values[epoch]) if self._values[epoch] else torch.zeros(0)

    def score(self, epoch):
        """Mean score at ``epoch`` over all folds' queries."""
        v = self.values(epoch)
        return float(v.mean()) if len(v) else math.nan

    @property
    def scores(self):
        """Mean score per epoch, the start first."""
        return [self.score(epoch) for epoch in range(len(self._values))]

    @property
    def best_epoch(self):
        """The epoch count to keep: 0 unless an epoch beat the start by ``margin`` errors."""
        scores = self.scores
        if len(scores) < 2:
            return 0
        best = max(range(1, len(scores)), key=scores.__getitem__)
        diff = self.values(best) - self.values(0)
        se = float(diff.std()) / math.sqrt(len(diff)) if len(diff) > 1 else math.inf
        return best if float(diff.mean()) > self.margin * se else 0
