"""The held-out check's numerics for :mod:`skalign._migrate.calibration`: unit rows, the
``"moments"`` calibration's statistics, the padding direction of the score scale, and the
check's matrices (one draw of exact rows at a time, every draw's cosines rows of matrices made
once), its per-query recall@k, and every option's recall in one draw from each query's few
candidates (:func:`_option_recalls`). What the check is and how its result is used: the
calibration module's docstring."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KINDS", "MIXED"]

#: the store with the encoded rows' exact vectors written (calibration.py's ``MIXED``)
MIXED = "mixed"
#: calibrations tried
KINDS = ("none", "moments")


def _unit(A):
    A = np.asarray(A, dtype=np.float64)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


def _off(U, z):
    """Unit rows ``U`` less their component along the unit vector ``z`` (or per row: ``z`` of
    the same shape as ``U``)."""
    along = (U * z).sum(axis=1, keepdims=True) if z.ndim == 2 else (U @ z)[:, None]
    return _unit(U - along * z)


def _pad(U, z, c):
    r"""Unit rows :math:`c\,u' + \sqrt{1 - c^2}\,z` with :math:`u'` the row less its
    component along ``z``: unit length, and every cosine with a query orthogonal to ``z``
    multiplied by ``c``."""
    return c * _off(U, z) + np.sqrt(1.0 - c * c) * z


def _moments(Tu, Yu):
    """``(m_Y, m_T, s)`` of the ``"moments"`` calibration from unit rows."""
    mean, centre = Yu.mean(axis=0), Tu.mean(axis=0)
    vt = float(((Tu - centre) ** 2).sum(axis=1).mean())
    vy = float(((Yu - mean) ** 2).sum(axis=1).mean())
    return mean, centre, float(np.sqrt(vy / vt)) if vt > 0 else 1.0


def _pad_direction(Yu, Tu):
    """The unit direction of least second moment of the new vectors ``Yu``; where they leave
    several at zero (fewer rows than dimensions), the one of those with least second moment
    of the translations ``Tu``."""
    return _least_direction(Yu.T @ Yu, Tu.T @ Tu, len(Yu))


def _least_direction(GY, GT, n):
    """The unit eigenvector of least eigenvalue of :math:`(G_Y + 10^{-3} G_T) / n`, from the
    second-moment sums ``GY`` and ``GT`` of ``n`` rows, with a fixed sign."""
    from scipy.linalg import eigh

    from ..utils._backend import work_threads

    M = GY / n + 1e-3 * GT / n
    with work_threads(len(M) ** 3):  # 768 x 768 beside the suite: 0.77 s on 2 threads, 0.02 on 1
        z = eigh(M, subset_by_index=[0, 0])[1][:, 0]
    # a fixed sign, so that the same pairs always give the same rows
    return z if z[np.argmax(np.abs(z))] > 0 else -z


def _folds(n, n_splits, random_state):
    from sklearn.model_selection import KFold

    return list(KFold(n_splits, shuffle=True, random_state=random_state).split(np.arange(n)))


def _held_out_rows(T_cross, Y, folds):
    """Per calibration kind, the unit translations calibrated by it fitted without their fold,
    and each row's padding direction (from the other folds)."""
    from ..utils._backend import work_threads

    Tu, Yu = _unit(T_cross), _unit(Y)
    out = {kind: np.empty_like(Tu) for kind in KINDS}
    pads = np.empty_like(Tu)
    # each fold's second moments are all rows' less the fold's own: the products of every row
    # made once, not once per fold (products of the dimensions' size: one thread)
    with work_threads(Tu.shape[1] ** 3):
        GY, GT = Yu.T @ Yu, Tu.T @ Tu
        for train, test in folds:
            out["none"][test] = Tu[test]
            mean, centre, spread = _moments(Tu[train], Yu[train])
            out["moments"][test] = _unit(mean + spread * (Tu[test] - centre))
            pads[test] = _least_direction(GY - Yu[test].T @ Yu[test],
                                          GT - Tu[test].T @ Tu[test], len(train))
    return {kind: (rows, pads) for kind, rows in out.items()}


class _Sims:
    r"""Every new vector's cosines with every row of the check (:func:`_similarities`): with
    the exact vectors (``SE``), per calibration kind with the translations (``trans[kind][0]``),
    and what gives, for any entries wanted, the cosines with the translations less their
    padding direction (:meth:`off`) and ``q . z`` of each row's fold's direction (:meth:`pad`)
    without an ``n x n`` matrix of either.

    Attributes
    ----------
    SE : ndarray of shape (n, n)
    P : ndarray of shape (n, n_folds)
        :math:`q^\top z_f`, query by fold.
    fold : ndarray of shape (n,)
        Each row's fold.
    trans : dict
        Kind → ``(ST, along, scale)``: the cosines with the translations, each translation's
        component along its fold's direction and the norm of the rest (1 where it is 0).
    """

    def __init__(self, SE, P, fold, trans):
        self.SE, self.P, self.fold, self.trans = SE, P, fold, trans

    def pad(self, q, cols):
        """``q . z`` of the row's fold for the entries ``(q, cols)`` (broadcast indices)."""
        return self.P[q, self.fold[cols]]

    def off(self, kind, q, cols):
        """The cosines with the translations of ``kind`` less their padding direction, for the
        entries ``(q, cols)``: the same operations, entry by entry, as on whole matrices."""
        ST, along, scale = self.trans[kind]
        return (ST[q, cols] - along[cols] * self.pad(q, cols)) / scale[cols]


@dataclass
class _Check:
    """The held-out check for one draw of exact rows (the cosines are rows of ``sims``)."""

    queries: np.ndarray      # positions of the query rows (not exact)
    exact: np.ndarray        # bool mask over the rows
    truth: np.ndarray        # (n_queries, k): true top-k among the exact vectors
    S_exact: np.ndarray      # (n_queries, n): cosines with the exact vectors
    sims: _Sims = None       # the matrices the draw's rows are taken from


def _top_k(S, queries, k):
    """Columns of each row's ``k`` largest entries of ``S`` (in no particular order), row
    ``i``'s own column ``queries[i]`` left out; on one thread (a few milliseconds each)."""
    import torch

    from ..utils._backend import one_thread

    with one_thread():
        T = torch.from_numpy(np.ascontiguousarray(S)).clone()
        T[torch.arange(len(queries)), torch.from_numpy(np.asarray(queries))] = -torch.inf
        return torch.topk(T, k, dim=1, sorted=False).indices.numpy()


def _recall(truth, got):
    return (truth[:, :, None] == got[:, None, :]).any(axis=2).mean(axis=1)


def _similarities(Yu, rows, folds):
    r"""Every new vector's cosines with every row of the check (all draws index them): with the
    exact vectors, and per calibration kind with the translations; the same less their padding
    direction and ``q . z`` of each row's fold's padding direction are made from them, entry by
    entry, where they are read (:class:`_Sims`: two ``n x n`` matrices fewer per kind).

    With :math:`u` a unit translation, :math:`z` its fold's direction and :math:`a = u^\top z`,
    the row less that component is :math:`(u - a z) / \lVert u - a z \rVert`, so its cosine
    with ``q`` is :math:`(q^\top u - a\, q^\top z) / \lVert u - a z \rVert`: products with the
    few folds' directions instead of one with every row."""
    SE = Yu @ Yu.T
    pads = next(iter(rows.values()))[1]  # one padding direction per fold, for every kind
    P = np.empty((len(Yu), len(folds)))
    for f, (_, test) in enumerate(folds):
        P[:, f] = Yu @ pads[test[0]]
    trans = {}
    for kind, (Tu, _) in rows.items():
        along = (Tu * pads).sum(axis=1)
        norm = np.linalg.norm(Tu - along[:, None] * pads, axis=1)
        trans[kind] = (Yu @ Tu.T, along, np.where(norm > 0, norm, 1.0))
    return _Sims(SE, P, _fold_of(folds, len(Yu)), trans)


def _exact_rows(n, share, rng):
    """One draw of the check's exact rows: ``share`` of the ``n`` rows (at least one left to
    be a query), a bool mask."""
    n_exact = int(round(share * n))
    n_exact = min(max(n_exact, 0), n - 1)
    exact = np.zeros(n, dtype=bool)
    exact[rng.choice(n, n_exact, replace=False)] = True
    return exact


def _draw(sims, n, share, k, rng, kinds=None):
    """A check: ``share`` of the ``n`` rows exact, the others' new vectors the queries (every
    kind's cosines are read from ``sims``; ``kinds`` is kept for the callers' sake)."""
    exact = _exact_rows(n, share, rng)
    queries = np.flatnonzero(~exact)
    S_exact = sims.SE[queries]
    return _Check(queries, exact, _top_k(S_exact, queries, k), S_exact, sims)


def _scores(check, kind, mode, c):
    """Each query's cosines with every row of the store ``(mode, kind, c)``."""
    q, cols = check.queries[:, None], np.arange(len(check.exact))[None, :]
    if c < 1.0:
        S = c * check.sims.off(kind, q, cols) + np.sqrt(1.0 - c * c) * check.sims.pad(q, cols)
    else:
        S = check.sims.trans[kind][0][check.queries]
    if mode == MIXED:
        S = np.where(check.exact[None, :], check.S_exact, S)
    return S


def _per_query(check, kind, mode, c, k):
    S = _scores(check, kind, mode, c)
    return _recall(check.truth, _top_k(S, check.queries, k))


def _fold_of(folds, n):
    """The fold of each of the ``n`` rows."""
    fold = np.empty(n, dtype=np.int64)
    for f, (_, test) in enumerate(folds):
        fold[test] = f
    return fold


def _top_in(sub, queries, cols, k):
    """Per query: the columns of its ``k`` largest entries of ``sub`` (its row's entries in the
    columns ``cols``, sorted; all of them when fewer), its own column ``queries[i]`` left out;
    global column indices."""
    import torch

    from ..utils._backend import one_thread

    pos = np.minimum(np.searchsorted(cols, queries), len(cols) - 1)
    mine = np.flatnonzero(cols[pos] == queries)
    sub[mine, pos[mine]] = -np.inf
    with one_thread():
        idx = torch.topk(torch.from_numpy(sub), min(k, len(cols)), dim=1,
                         sorted=False).indices.numpy()
    return cols[idx]


def _option_recalls(sims, fold, exact, options, k):
    r"""Per option ``(mode, kind, c)``: each query's recall@``k`` in one draw of exact rows
    (``exact``, a bool mask), as :func:`_per_query` gives it on :func:`_draw`'s check, from
    each query's few candidates instead of a ranking of every row per option.

    A store's top-``k`` lies among the top-``k`` of each part of it ranked alone: the exact
    rows (by :math:`q^\top y`, the same for every option), and the translated rows, which a
    score scale :math:`c < 1` ranks by :math:`c \cos(q, \hat t_\perp) + \sqrt{1-c^2}\,
    q^\top z_f` with :math:`z_f` constant within a fold :math:`f`: within a fold by
    :math:`\cos(q, \hat t_\perp)` alone, whatever :math:`c`. So per draw and calibration one
    ranking of the translations (:math:`c = 1`, the translated rows and every row) and one of
    their padded parts per fold give every score scale's top-``k`` among at most
    ``(folds + 1) k`` candidates per query: :math:`O(n_q\, n)` per draw instead of per option.

    Parameters
    ----------
    sims : _Sims
        :func:`_similarities`' matrices.
    fold : ndarray of int
        Each row's fold (:func:`_fold_of`).
    exact : ndarray of bool
        The rows written exactly; the others' new vectors are the queries.
    options : iterable of (mode, kind, c)
    k : int

    Returns
    -------
    dict
        Option → recall@``k`` per query (in the order of the queries).
    """
    SE = sims.SE
    queries, ex_cols = np.flatnonzero(~exact), np.flatnonzero(exact)
    q, rows = queries[:, None], np.arange(len(queries))[:, None]
    truth = _top_k(SE[queries], queries, k)
    top_exact = _top_in(SE[np.ix_(queries, ex_cols)], queries, ex_cols, k) if len(ex_cols) else \
        np.zeros((len(queries), 0), dtype=np.int64)
    ranked = {}  # (kind, part, scaled) -> candidate columns per query

    def candidates(kind, mode, scaled):
        # a store of translations only: the top-k of its translated and of its exact rows
        parts = ("translated",) if mode == MIXED else ("translated", "exact")
        for part in parts:
            key = (kind, part, scaled)
            if key in ranked:
                continue
            cols = queries if part == "translated" else ex_cols
            if not len(cols):
                ranked[key] = np.zeros((len(queries), 0), dtype=np.int64)
            elif not scaled:
                ranked[key] = _top_in(sims.trans[kind][0][np.ix_(queries, cols)], queries,
                                      cols, k)
            else:  # within a fold the padding term is one constant: rank by S_off alone
                ranked[key] = np.hstack([
                    _top_in(sims.off(kind, q, part_cols[None, :]), queries, part_cols, k)
                    for part_cols in (cols[fold[cols] == f] for f in np.unique(fold[cols]))])
        return np.hstack([ranked[(kind, part, scaled)] for part in parts])

    out, parts = {}, {}  # parts: (kind, mode) -> the candidates' cosines, read once
    exact_val = SE[q, top_exact]
    for mode, kind, c in options:
        idx = candidates(kind, mode, c < 1.0)
        if c < 1.0:
            if (kind, mode) not in parts:  # every score scale's candidates are the same
                parts[(kind, mode)] = (sims.off(kind, q, idx), sims.pad(q, idx))
            off, pad = parts[(kind, mode)]
            val = c * off + np.sqrt(1.0 - c * c) * pad
        else:
            val = sims.trans[kind][0][q, idx]
        val[idx == queries[:, None]] = -np.inf  # a query's own row (a block short of k)
        if mode == MIXED:
            idx = np.hstack([idx, top_exact])
            val = np.hstack([val, exact_val])
        if idx.shape[1] > k:
            idx = idx[rows, np.argpartition(-val, k - 1, axis=1)[:, :k]]
        out[(mode, kind, c)] = _recall(truth, idx)
    return out
