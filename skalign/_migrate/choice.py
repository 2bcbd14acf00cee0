"""Which rows ``skalign migrate`` encodes: the rows nearest k-means centres of the old vectors.

Measured on the development set (``benchmarks/bench_migrate_budget.py``; 2,000-row stores, three
splits, MiniLM → MPNet, MiniLM → e5, e5 → MiniLM): encoding the rows nearest the centres of a
k-means with one cluster per encoded row kept +0.01 to +0.06 more recall@10 than a uniform
sample at 2–20 % of the rows encoded, and tied it at 40 %; hubs, a stratified sample and the
rows two half-maps disagree on did not beat it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CENTRES_MAX_BUDGET", "CENTRES_MAX_ROWS", "centre_rows", "choose_rows",
           "rows_to_cluster"]

#: above this budget the rows are drawn uniformly: a k-means with that many clusters costs more
#: than it can gain (the centres' advantage was gone at 40 % encoded)
CENTRES_MAX_BUDGET = 4096
#: the k-means runs on a uniform subsample of at most this many rows of a larger store
CENTRES_MAX_ROWS = 50_000
_CHUNK = 8192


def choose_rows(n_rows, budget, *, exclude=None, random_state=0):
    """Positions of ``budget`` of ``n_rows`` rows, uniformly at random, seeded; the rows of a
    smaller budget with the same seed are among those of a larger one.

    Parameters
    ----------
    n_rows : int
        Rows in the store.
    budget : int
        Rows to choose; all that are left when fewer remain.
    exclude : array-like of int, optional
        Positions never chosen (rows encoded before).
    random_state : int
        Seed.

    Returns
    -------
    ndarray of int
        Sorted positions.
    """
    free = np.ones(n_rows, dtype=bool)
    if exclude is not None and len(exclude):
        free[np.asarray(exclude, dtype=np.int64)] = False
    candidates = np.flatnonzero(free)
    if budget >= len(candidates):
        return candidates
    rng = np.random.default_rng(random_state)
    # a prefix of one seeded permutation: a larger budget with the same seed takes every row a
    # smaller one took (their vectors are in the encode cache) and more
    return np.sort(candidates[rng.permutation(len(candidates))[:budget]])


def rows_to_cluster(n_rows, budget, *, random_state=0):
    """The rows whose old vectors :func:`centre_rows` clusters for a budget of ``budget`` of
    ``n_rows`` rows: every row, or a seeded uniform subsample of :data:`CENTRES_MAX_ROWS` of a
    larger store; none where the rows are drawn uniformly instead (:func:`choose_rows`: above
    :data:`CENTRES_MAX_BUDGET`, a budget under 2 or covering the store).

    Returns
    -------
    ndarray of int
        Sorted positions (empty: draw the rows with :func:`choose_rows`).
    """
    if budget > CENTRES_MAX_BUDGET or budget >= n_rows or budget < 2:
        return np.zeros(0, dtype=np.int64)
    return choose_rows(n_rows, min(n_rows, CENTRES_MAX_ROWS), random_state=random_state)


def centre_rows(vectors, budget, *, random_state=0):
    """Positions of the rows of ``vectors`` nearest the centres of a k-means of them.

    A mini-batch k-means with ``budget`` clusters on the unit-normalised rows; each centre
    takes its nearest row, the next nearest when that one is taken. Above
    :data:`CENTRES_MAX_BUDGET` rows, or when the budget covers the rows, :func:`choose_rows`
    draws them uniformly.

    Parameters
    ----------
    vectors : array-like of shape (n_rows, dim)
        The old vectors of the rows to choose from (:func:`rows_to_cluster`).
    budget : int
        Rows to choose.
    random_state : int
        Seed.

    Returns
    -------
    ndarray of int
        Sorted positions in ``vectors``.
    """
    from sklearn.cluster import MiniBatchKMeans

    U = np.array(vectors, dtype=np.float64)
    if budget > CENTRES_MAX_BUDGET or budget >= len(U) or budget < 2:
        return choose_rows(len(U), budget, random_state=random_state)
    U /= np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
    km = MiniBatchKMeans(budget, n_init=1, batch_size=1024,
                         random_state=random_state).fit(U)
    C = km.cluster_centers_
    # per centre, its rows by distance: the nearest few from each chunk of rows, merged
    keep = min(8, len(U))
    best_d = np.full((budget, 0), np.inf)
    best_i = np.empty((budget, 0), dtype=np.int64)
    for lo in range(0, len(U), _CHUNK):
        d = -2 * C @ U[lo:lo + _CHUNK].T + (U[lo:lo + _CHUNK] ** 2).sum(1)
        k = min(keep, d.shape[1])
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        best_d = np.concatenate([best_d, np.take_along_axis(d, part, 1)], axis=1)
        best_i = np.concatenate([best_i, part + lo], axis=1)
        order = np.argsort(best_d, axis=1)[:, :keep]
        best_d = np.take_along_axis(best_d, order, 1)
        best_i = np.take_along_axis(best_i, order, 1)
    taken = np.zeros(len(U), dtype=bool)
    for c in range(budget):  # a loop over centres, not rows: each takes its nearest free row
        free = best_i[c][~taken[best_i[c]]]
        if len(free):
            taken[free[0]] = True
    short = budget - int(taken.sum())
    if short:  # centres whose few nearest rows were all taken: uniform rows make up the count
        rest = np.flatnonzero(~taken)
        taken[np.random.default_rng(random_state).choice(rest, short, replace=False)] = True
    return np.flatnonzero(taken)
