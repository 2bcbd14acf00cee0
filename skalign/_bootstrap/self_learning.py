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
:math:`p = 1`, or as soon as its pairs repeat at :math:`p = 1` (a fixed point: the same pairs
give the same map and the same pairs again). Dropping entries at random lets a poor start
escape the local optimum it would otherwise lock into. Started from :func:`soft_self_learn`'s
pairs (as the bootstrapper does), which are mostly right already, the loop only polishes them
in the full dimension, and there is nothing to escape: the bootstrapper starts at :math:`p = 1`
(4 iterations on 3,000-row pools where 0.5 took 7-9, both stopping at the fixed point, to the
same top-1 within 0.001, ``5ae3bf6:benchmarks/seedless_hard_keep.py``; 11-12 from 0.5 without that
stop).

The start can be too weak for the hard loop alone (1–2 % of rows paired right between encoder
families without seeds). :func:`soft_self_learn` runs first: the same alternation with the hard
pseudo-pairs replaced by the soft correspondence of the CSLS scores :math:`C`,
:math:`P^{\rightarrow} = \operatorname{softmax}_j(C_{ij}/\tau)`,
:math:`P^{\leftarrow} = \operatorname{softmax}_i(C_{ij}/\tau)`,

.. math:: W = \operatorname{polar}\big(X^\top P^{\rightarrow} Y + (P^{\leftarrow\top} X)^\top Y
          + w\,L_X^\top L_Y\big),

so every candidate partner votes with its weight instead of only the (mostly wrong) best one
(in the spirit of Wasserstein–Procrustes, Grave et al. AISTATS 2019). The candidates of a row
(column) are its :data:`SOFT_CANDIDATES` most similar rows of the other pool; the softmax runs
over their CSLS scores alone, the other entries weighing nothing. From the signature start
of MiniLM → multilingual-e5 (1.6 % right) it reaches 99 % in about 50 iterations where the
hard loop stays below 5 %.

The first step, on the start scores, decides most: on MPNet → multilingual-e5 (3,000 rows, 1.3 %
of the start right) a first temperature of 0.05 climbs to 5 % right and stalls, 0.02 reaches
98.5 % (a slow climb for about 40 iterations, then a jump;
``5ae3bf6:benchmarks/seedless_soft_diagnosis.py``). :data:`SOFT_SCHEDULE` lists the settings
successive restarts try, so that a restart explores differently instead of only drawing other rows.
"""

from __future__ import annotations

import time

import torch

from ..utils._backend import polar

__all__ = [
    "SOFT_CANDIDATES",
    "SOFT_EXTRAPOLATION",
    "SOFT_LANDED_PATIENCE",
    "SOFT_SCHEDULE",
    "SOFT_TAKEOFF",
    "csls_scores",
    "orthogonal_map",
    "self_learn",
    "soft_self_learn",
]

_DROPPED = -1e4

#: Soft self-learning of restart ``r``: entry ``r % 3`` as (principal components per pool, first
#: temperature, temperature). The first is the default; the second is softer (the setting of an
#: earlier version: it succeeds on most draws of the development data, and explores differently
#: where the first stalls); the third is the first on fewer, stronger directions.
SOFT_SCHEDULE = ((128, 0.02, 0.05), (128, 0.05, 0.1), (64, 0.02, 0.05))

#: Over-relaxation of the soft self-learning's steps (:func:`soft_self_learn`): a step goes
#: ``1 + SOFT_EXTRAPOLATION`` times as far as the plain iteration's, while successive steps
#: keep their direction (a plain step after one that turned back or lowered the objective).
#: The plain iteration creeps for 30-100 iterations, a few tenths of a per cent more right
#: pairs per step, before it takes off; over-relaxed, the soft phase of MiniLM -> e5 (3,000
#: rows, random states 0 and 9) took 32 and 49 iterations instead of 53 and 105, MPNet -> e5
#: (state 1, second setting) 55 instead of 114; 1.0 took 34, 63 and 64, 1.5 33, 54 and 56.
SOFT_EXTRAPOLATION = 2.0

#: A soft phase has taken off once its objective is this many times that of its first
#: iteration; from then on it stops after ``landed_patience`` (:data:`SOFT_LANDED_PATIENCE`)
#: iterations without growth instead of ``patience``. Before the take-off the objective creeps
#: with long flat stretches (MPNet -> e5, 3,000 rows, state 2: up to seven iterations without
#: growth, at 2.25x the first objective, before it takes off after 100), so the full patience
#: stays; after it, the objective sits at its plateau (MiniLM -> e5 state 0 at 6.0x, MPNet ->
#: e5 state 2 at 5.3x) and the eight iterations of the full patience were spent there. The
#: first objective of those two is 0.064; the soft phases that stalled on the development data
#: ended at 0.11-0.14.
SOFT_TAKEOFF = 4.0

#: Iterations without growth that stop a soft phase that has taken off (see SOFT_TAKEOFF).
SOFT_LANDED_PATIENCE = 3

#: Weight of each seed pair in the fits of the map (a pseudo-pair weighs 1).
SEED_WEIGHT = 5.0

#: Candidates per row and per column of the soft self-learning's softmaxes
#: (:func:`soft_self_learn`): the ``SOFT_CANDIDATES`` largest similarities of each source row
#: (target row), their CSLS scores and a softmax over them alone. At the temperatures used
#: (0.02-0.1) an entry 0.2 below a row's best weighs :math:`e^{-4}` or less of it; the dense
#: softmaxes, transposed products and CSLS passes over all ``n × m`` scores were three quarters
#: of a soft iteration's time on one thread (MPNet -> e5, 3,000 rows: 0.33 s per iteration,
#: ``5ae3bf6:benchmarks/profile_seedless.py``). ``None``: the dense softmaxes.
SOFT_CANDIDATES = 32


def orthogonal_map(M, LX=None, LY=None, seed_weight=SEED_WEIGHT):
    r"""The orthogonal map of pair cross products ``M`` (:math:`X_a^\top Y_b`) and weighted
    seed pairs, :math:`W = \operatorname{polar}(M + w\,L_X^\top L_Y)`, solved in float64 and
    returned in ``M``'s dtype."""
    if LX is not None and len(LX):
        M = M + seed_weight * (LX.T @ LY)
    return polar(M.double()).to(M.dtype)


def csls_scores(S, k, overwrite=False):
    """Dense CSLS of a similarity matrix: :math:`2S - r^X_i - r^Y_j` (``k`` nearest means);
    ``overwrite=True`` computes it in ``S``'s memory (the same numbers, one allocation less)."""
    kx, ky = min(k, S.shape[1]), min(k, S.shape[0])
    rx = torch.topk(S, kx, dim=1).values.mean(1)
    # along rows of the transposed copy: a top-k down the columns is several times slower
    ry = torch.topk(S.T.contiguous(), ky, dim=1).values.mean(1)
    C = S.mul_(2) if overwrite else 2 * S
    C -= rx[:, None]
    C -= ry[None, :]
    return C


def self_learn(XP, YP, a, b, LX=None, LY=None, *, seed_weight=SEED_WEIGHT, csls_n_neighbors=10,
               p0=0.5, patience=3, max_iter=100, generator=None):
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
    best, best_W, stall, p = -float("inf"), None, 0, p0
    history, last = [], None
    for _ in range(max_iter):
        t0 = time.perf_counter()
        W = orthogonal_map(XP[a].T @ YP[b], LX, LY, seed_weight)
        C = csls_scores(_orthogonal_scores(XP, YP, W), csls_n_neighbors, overwrite=True)
        objective = float(C.max(1).values.mean())
        if p < 1:
            drop = torch.rand(C.shape, generator=generator, device=C.device,
                              dtype=C.dtype) >= p
            C.masked_fill_(drop, _DROPPED)
            del drop
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
        # at p = 1 the step is deterministic: pairs that repeat the last ones give the same map
        # and the same pairs from now on, so the iterations left could not change the result
        if p >= 1 and last is not None and torch.equal(forward, last[0]) and torch.equal(
                backward, last[1]):
            break
        last = forward, backward
        if stall >= patience:
            if p >= 1:
                break
            p, stall = min(1.0, 2 * p), 0
    return best_W, history, best


def _orthogonal_scores(XP, YP, W):
    """:math:`(X W) Y^\top`, the narrower side carrying the product."""
    return XP @ (YP @ W.T).T if W.shape[0] < W.shape[1] else (XP @ W) @ YP.T


def _candidate_votes(scores, index, tau, Z):
    """``Σ_k softmax(scores / τ)_ik Z[index_ik]`` per row, without gathering the rows of ``Z``
    into an ``n × k × d`` array (``embedding_bag`` sums the weighted rows in place)."""
    weights = torch.softmax(scores / tau, 1)
    return torch.nn.functional.embedding_bag(index, Z, per_sample_weights=weights, mode="sum")


def _candidate_scores(XP, YP, W, n_candidates, k):
    r"""The ``n_candidates`` best targets of every source row and sources of every target row by
    :math:`S = (X W) Y^\top`, with their CSLS scores :math:`2 S_{ij} - r^X_i - r^Y_j` (the
    ``k``-neighbour means of the same candidates): ``(row scores, row targets, column scores,
    column sources)``. Both orientations are products of their own (no transposed copy)."""
    if W.shape[0] < W.shape[1]:
        YW = YP @ W.T
        S, St = XP @ YW.T, YW @ XP.T
    else:
        XW = XP @ W
        S, St = XW @ YP.T, YP @ XW.T
    sr, jr = torch.topk(S, min(max(n_candidates, k), S.shape[1]), dim=1)
    del S
    sc, jc = torch.topk(St, min(max(n_candidates, k), St.shape[1]), dim=1)
    del St
    rx, ry = sr[:, :k].mean(1), sc[:, :k].mean(1)
    return 2 * sr - rx[:, None] - ry[jr], jr, 2 * sc - ry[:, None] - rx[jc], jc


def soft_self_learn(XP, YP, C, LX=None, LY=None, *, seed_weight=SEED_WEIGHT, temperature=0.05,
                    start_temperature=0.02, csls_n_neighbors=10, tol=5e-5, patience=8,
                    max_iter=100, extrapolation=SOFT_EXTRAPOLATION,
                    landed_patience=SOFT_LANDED_PATIENCE, n_candidates=SOFT_CANDIDATES):
    r"""Self-learning on soft correspondences, from the start scores ``C``; see the module notes.

    Parameters
    ----------
    XP : tensor of shape (n, d_x)
    YP : tensor of shape (m, d_y)
        Centred, unit-norm pool rows.
    C : tensor of shape (n, m)
        Start scores (CSLS of the signature similarities); row ``i`` scores the targets of
        source row ``i``.
    LX, LY : tensors of shape (s, d_x), (s, d_y), optional
        Seed pairs, with weight ``seed_weight`` each (a source row's soft pairs weigh 1 in all).
    temperature : float, default=0.05
        :math:`\tau` of the softmax over CSLS scores.
    start_temperature : float, default=0.02
        :math:`\tau` of the first step, on the start scores ``C``.
    tol, patience : float, int
        Stop when the objective (mean best CSLS score of the source rows) has not grown by
        ``tol`` for ``patience`` iterations.
    landed_patience : int, default=SOFT_LANDED_PATIENCE
        ``patience`` once the objective has reached :data:`SOFT_TAKEOFF` times its first
        iteration's (the take-off is over); ``patience`` itself keeps the old rule.
    extrapolation : float, default=SOFT_EXTRAPOLATION
        :math:`\beta` of the over-relaxed step :math:`W_{t+1} = \operatorname{polar}\big(T(W_t)
        + \beta\,(T(W_t) - W_t)\big)`, :math:`T` the plain step above, taken while
        :math:`\langle T(W_t) - W_t, W_t - W_{t-1}\rangle > 0`; after a step that turned back
        or lowered the objective the next one is plain. 0: the plain iteration.
    n_candidates : int or None, default=SOFT_CANDIDATES
        Each softmax runs over the ``n_candidates`` largest similarities of its row (column)
        only, and the objective is the best CSLS score among them (see
        :data:`SOFT_CANDIDATES`); with as many candidates as rows it is the dense iteration
        up to rounding. ``None``: the dense softmaxes over all CSLS scores.

    Returns
    -------
    W : tensor of shape (d_x, d_y)
        The map of the last iteration.
    history : list of dict
        Per iteration: ``objective``, ``temperature``, ``extrapolated`` (an over-relaxed
        step), ``seconds``.
    """
    best, stall, history, first = -float("inf"), 0, [], None
    W, W_prev, tau, last, plain = None, None, start_temperature, -float("inf"), True
    sparse = n_candidates is not None
    if sparse:  # the start scores' candidates; the caller's C stays as it is
        rows = torch.topk(C, min(n_candidates, C.shape[1]), dim=1)
        cols = torch.topk(C.T.contiguous(), min(n_candidates, C.shape[0]), dim=1)
        rows, cols, C = (rows.values, rows.indices), (cols.values, cols.indices), None
    for it in range(max_iter):
        t0 = time.perf_counter()
        if sparse:
            M = XP.T @ _candidate_votes(*rows, tau, YP)
            M += _candidate_votes(*cols, tau, XP).T @ YP
        else:
            # the caller's start scores stay as they are (restarts share them); later are ours
            C = C / tau if it == 0 else C.div_(tau)
            M = XP.T @ (torch.softmax(C, 1) @ YP)
            M += (torch.softmax(C, 0).T @ XP).T @ YP
            del C
        step = orthogonal_map(M, LX, LY, seed_weight)
        # further along the step (see SOFT_EXTRAPOLATION), back onto the orthogonal maps, while
        # the steps keep their direction; a plain one where it turns back (an overshoot)
        extrapolated = bool(extrapolation) and not plain and W_prev is not None and float(
            torch.sum((step - W) * (W - W_prev))) > 0
        W_prev, W = W, (polar(step + extrapolation * (step - W)).to(step.dtype)
                        if extrapolated else step)
        if sparse:
            vr, jr, vc, jc = _candidate_scores(XP, YP, W, n_candidates, csls_n_neighbors)
            rows, cols = (vr, jr), (vc, jc)
            objective = float(vr.max(1).values.mean())
        else:
            C = csls_scores(_orthogonal_scores(XP, YP, W), csls_n_neighbors, overwrite=True)
            objective = float(C.max(1).values.mean())
        history.append({"objective": objective, "temperature": tau,
                        "extrapolated": extrapolated, "seconds": time.perf_counter() - t0})
        plain, last, tau = objective < last, objective, temperature  # overshot: a plain step
        first = objective if first is None else first
        if objective > best + tol:
            best, stall = objective, 0
        else:
            stall += 1
            landed = first > 0 and best >= SOFT_TAKEOFF * first  # see SOFT_TAKEOFF
            if stall >= (landed_patience if landed else patience):
                break
    return W, history
