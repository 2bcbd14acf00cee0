r"""Which rows ``skalign migrate`` encodes: the rows nearest k-means centres of the old vectors,
found on a bounded sample of the store.

Measured on the development set (``benchmarks/bench_migrate_budget.py``; 2,000-row stores, three
splits, MiniLM → MPNet, MiniLM → e5, e5 → MiniLM): encoding the rows nearest the centres of a
k-means with one cluster per encoded row kept +0.01 to +0.06 more recall@10 than a uniform
sample at 2–20 % of the rows encoded, and tied it at 40 %; hubs, a stratified sample and the
rows two half-maps disagree on did not beat it.

The k-means is bounded so that its cost does not grow with the store: it runs on a seeded
uniform sample of at most :data:`SAMPLE_PER_ROW` rows per row to encode
(:func:`rows_to_cluster`), in the span of the sample's :data:`CLUSTER_DIMS` leading principal
directions of the unit rows, from ``budget`` sample rows drawn uniformly as the first centres,
for :data:`LLOYD_ROUNDS` Lloyd rounds (fewer once no row changes cluster); each centre then
takes the sample row of its cluster nearest it. Every round is one matrix product of the sample
against the centres, in blocks, on one thread (each block is a small product):
:math:`O(m\,k\,p)` for ``m`` sample rows, ``k`` centres and ``p`` dimensions, where a
mini-batch k-means on a sample of 50,000 rows cost 34 s of a 115 s migration at a budget of 2,000.
On the row-choice study (two encoder pairs, two splits) uniform first centres and ten rounds
kept +0.043 over a uniform sample at 2 % encoded and +0.021 at 10 % (the mini-batch k-means
+0.046 and +0.033); k-means++ seeding, sequential over the ``k`` centres, cost more and kept no
more (+0.039 and +0.024, three and ten rounds alike), and so did a batched seeding (+0.029 to
+0.033 at 2 %).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CENTRES_MAX_BUDGET", "CLUSTER_DIMS", "LLOYD_ROUNDS", "SAMPLE_PER_ROW",
           "centre_rows", "choose_rows", "rows_to_cluster"]

#: above this budget the rows are drawn uniformly: a k-means with that many clusters costs more
#: than it can gain (the centres' advantage was gone at 40 % encoded)
CENTRES_MAX_BUDGET = 4096
#: the k-means runs on a uniform sample of at most this many rows per row to encode
SAMPLE_PER_ROW = 20
#: principal directions of the sample's unit rows the k-means clusters in
CLUSTER_DIMS = 64
#: Lloyd rounds after the uniform first centres
LLOYD_ROUNDS = 10
#: sample rows per matrix product with the centres: a block of scores (1,024 × 2,000) stays in
#: the cache for its argmax (a 40,000-row sample, 2,000 centres, one thread: 0.37 s per round
#: against 1.5 s in blocks of 8,192)
_CHUNK = 1024


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
    ``n_rows`` rows: a seeded uniform sample of :data:`SAMPLE_PER_ROW` rows per row to encode
    (every row of a smaller store); none where the rows are drawn uniformly instead
    (:func:`choose_rows`: above :data:`CENTRES_MAX_BUDGET`, a budget under 2 or covering the
    store).

    Returns
    -------
    ndarray of int
        Sorted positions (empty: draw the rows with :func:`choose_rows`).
    """
    if budget > CENTRES_MAX_BUDGET or budget >= n_rows or budget < 2:
        return np.zeros(0, dtype=np.int64)
    return choose_rows(n_rows, min(n_rows, SAMPLE_PER_ROW * budget), random_state=random_state)


def centre_rows(vectors, budget, *, random_state=0):
    r"""Positions of the rows of ``vectors`` nearest the centres of a k-means of them.

    A k-means with ``budget`` clusters of the unit rows, in their :data:`CLUSTER_DIMS` leading
    principal directions (the coordinates :math:`z_i = V^\top \hat x_i`), from ``budget`` rows
    drawn uniformly, for :data:`LLOYD_ROUNDS` Lloyd rounds (fewer once no row changes
    cluster, which changes no result): each row joins its nearest centre,
    :math:`\arg\max_c\, z_i^\top \mu_c - \lVert \mu_c \rVert^2 / 2`, and each centre moves to
    its rows' mean. Each cluster then gives the row nearest its centre (distinct rows, as the
    clusters are disjoint); clusters left empty are made up by rows drawn uniformly. Above
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
    from ..utils._backend import work_threads

    U = np.array(vectors, dtype=np.float32)
    n = len(U)
    if budget > CENTRES_MAX_BUDGET or budget >= n or budget < 2:
        return choose_rows(n, budget, random_state=random_state)
    U /= np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
    # every product is a block (_CHUNK rows) against the centres, and the second moment a
    # product of the dimensions' size: one thread (the work rule; on two shared cores a 384 x
    # 384 eigh took 4.1 s on two threads, 0.04 s on one)
    with work_threads(max(_CHUNK * CLUSTER_DIMS * budget, U.shape[1] ** 3)):
        Z = _principal(U, CLUSTER_DIMS)
        del U
        rng = np.random.default_rng(random_state)
        C = Z[np.sort(rng.choice(n, budget, replace=False))].copy()
        label, score = _nearest(Z, C)
        for _ in range(LLOYD_ROUNDS):
            count = np.bincount(label, minlength=budget)
            sums = _cluster_sums(Z, label, budget)
            full = count > 0
            C[full] = sums[full] / count[full, None]  # an empty cluster keeps its centre
            before, (label, score) = label, _nearest(Z, C)
            if np.array_equal(label, before):  # converged: further rounds change nothing
                break
    # per cluster, its member with the highest score (nearest the centre): sort by cluster,
    # then by score descending, and take each cluster's first
    order = np.lexsort((-score, label))
    first = np.ones(n, dtype=bool)
    first[1:] = label[order[1:]] != label[order[:-1]]
    taken = np.zeros(n, dtype=bool)
    taken[order[first]] = True
    short = budget - int(taken.sum())
    if short:  # empty clusters: uniform rows make up the count
        taken[rng.choice(np.flatnonzero(~taken), short, replace=False)] = True
    return np.flatnonzero(taken)


def _principal(U, dims):
    """The rows of ``U`` in the ``dims`` leading principal directions of the sample (centred
    second moment; ``U`` itself when it has at most ``dims`` columns), float32."""
    if U.shape[1] <= dims:
        return U
    mean = U.mean(axis=0, dtype=np.float64)
    G = (U.T @ U).astype(np.float64) / len(U) - np.outer(mean, mean)
    _, vecs = np.linalg.eigh(G)
    V = np.ascontiguousarray(vecs[:, ::-1][:, :dims], dtype=np.float32)
    # a fixed sign per direction, so that the same vectors always give the same rows
    V *= np.where(V[np.abs(V).argmax(axis=0), np.arange(dims)] < 0, -1, 1).astype(np.float32)
    return U @ V


def _nearest(Z, C):
    """Per row of ``Z``: its nearest centre of ``C`` (Euclidean) and the score
    :math:`z^\\top \\mu - \\lVert \\mu \\rVert^2 / 2` (higher: nearer), in batches."""
    half = 0.5 * (C * C).sum(axis=1)
    label = np.empty(len(Z), dtype=np.int64)
    score = np.empty(len(Z), dtype=np.float32)
    for lo in range(0, len(Z), _CHUNK):
        S = Z[lo:lo + _CHUNK] @ C.T
        S -= half
        label[lo:lo + _CHUNK] = S.argmax(axis=1)
        score[lo:lo + _CHUNK] = S[np.arange(len(S)), label[lo:lo + _CHUNK]]
    return label, score


def _cluster_sums(Z, label, k):
    """The sum of the rows of ``Z`` in each of the ``k`` clusters (a sparse product)."""
    from scipy.sparse import csr_matrix

    member = csr_matrix((np.ones(len(Z), dtype=np.float32), (label, np.arange(len(Z)))),
                        shape=(k, len(Z)))
    return np.asarray(member @ Z, dtype=np.float32)
