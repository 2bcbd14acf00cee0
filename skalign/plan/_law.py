r"""The statistics of the estimates of :mod:`skalign.plan`: the percentile interval and the
store-size law, which carries retention measured on a small store to a larger one.

The estimates stage draws the sub-stores (:func:`substores`), scores them and carries the
result on (:func:`project`); nothing here calls back into a stage.

A top-``k`` search gets harder as the store grows: the items that make the true top-``k`` of a
store of ``N`` are ever more extreme, and a map's errors move more of them out. A random ranking
keeps ``c_N = k / (N - 1)`` of the top-``k``; the part above chance,

.. math::

    \rho(N) = \frac{r(N) - c_N}{1 - c_N},

falls as a **power of the store size**, :math:`\rho(N) = \rho(m)\,(N/m)^{b}` with
:math:`b \le 0`: steeply for a poor map and hardly for a good one, while staying on the old
model hardly decays at all (measured on the development data: :doc:`/developers/studies`).
``b`` is fitted by least squares on :math:`\log \rho` against :math:`\log m` over nested
random sub-stores of the evaluation store (``m_max, m_max / 2, ...`` down to
``MIN_STORE_K * k`` items), and the prediction is anchored at the full evaluation store.
(Without the chance correction the slope measured on small stores overstates the decay: chance
inflates the small stores.)

The interval adds, in log space, the spread of the anchor (over queries, and over which items
make up the store: the spread of random half-stores), the slope's spread
across the sub-store draws and a model term ``LAW_SPREAD`` per unit of :math:`\log(N/m_{max})`
for the law itself. With fewer than two sub-store sizes the slope cannot be measured: the
estimate is then **unsupported** and its interval runs from chance to the anchor's upper bound
(retention does not grow with the store).
"""

from __future__ import annotations

import numpy as np

#: smallest sub-store the slope is measured on, in multiples of k (below it chance dominates)
MIN_STORE_K = 4
#: random sub-stores drawn per size
SUBSTORE_DRAWS = 6
#: model spread of the law, in log retention per unit of log(N / m_max)
LAW_SPREAD = 0.04


def chance(k, m):
    """What a random ranking keeps of the top-``k`` in a store of ``m`` (leave-one-out)."""
    return min(k / max(m - 1, 1), 1.0)


def percentile_ci(values, n_resamples, confidence, rng):
    """Percentile bootstrap interval of the mean of ``values`` (``n_resamples`` resamples)."""
    n = len(values)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, 256):
        stop = min(start + 256, n_resamples)
        means[start:stop] = values[rng.integers(0, n, (stop - start, n))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def substores(m_max, k, rng):
    """Nested random sub-stores of an evaluation store of ``m_max`` items.

    Parameters
    ----------
    m_max : int
        Items in the evaluation store.
    k : int
        Neighbourhood size.
    rng : numpy.random.Generator

    Returns
    -------
    sizes : ndarray of int
        Sub-store sizes, increasing, the last ``m_max`` (the whole store, not drawn).
    draws : list of list of ndarray
        ``draws[j][d]``: the sorted item rows of draw ``d`` at ``sizes[j]``, for every size but
        the last (``SUBSTORE_DRAWS`` draws each).
    """
    sizes = []
    m = m_max
    while m >= MIN_STORE_K * k:
        sizes.append(m)
        m //= 2
    sizes = np.array(sizes[::-1] or [m_max])
    draws = [[np.sort(rng.choice(m_max, m, replace=False)) for _ in range(SUBSTORE_DRAWS)]
             for m in sizes[:-1]]
    return sizes, draws


def substore_draws(score, m_max, k, rng):
    """Mean retention on nested random sub-stores (:func:`substores`) of an evaluation store
    of ``m_max`` items.

    Parameters
    ----------
    score : callable
        ``score(idx) -> (recall, ndcg)`` of the sub-store ``idx``, each of its items a query
        against the others.
    m_max : int
        Items in the evaluation store.
    k : int
        Neighbourhood size.
    rng : numpy.random.Generator

    Returns
    -------
    sizes : ndarray of int
        Sub-store sizes, increasing, the last ``m_max``.
    draws : ndarray of shape (SUBSTORE_DRAWS, n_sizes, 2)
        Recall and nDCG of each draw at each size (the full store scored once, repeated).
    """
    sizes, subs = substores(m_max, k, rng)
    draws = np.zeros((SUBSTORE_DRAWS, len(sizes), 2))
    draws[:, -1] = score(np.arange(m_max))
    for j, per_size in enumerate(subs):
        for d, idx in enumerate(per_size):
            draws[d, j] = score(idx)
    return sizes, draws


def _slope(sizes, values, k, corrected):
    if corrected:
        values = [(v - chance(k, m)) / (1 - chance(k, m)) for v, m in zip(values, sizes)]
    y = np.log(np.maximum(np.asarray(values, dtype=float), 1e-3))
    return min(float(np.polyfit(np.log(sizes), y, 1)[0]), 0.0)


def _carry(value, m, store_size, k, slope, corrected):
    """``value`` measured on ``m`` items carried to ``store_size`` by one of the two laws."""
    if not corrected:
        return max(value, 1e-3) * (store_size / m) ** slope
    c_m, c_n = chance(k, m), chance(k, store_size)
    rho = max((value - c_m) / (1 - c_m), 1e-3)
    return c_n + (1 - c_n) * rho * (store_size / m) ** slope


def project(sizes, draws, anchor_ci, store_size, k, confidence):
    """Carry a retention measured on ``sizes[-1]`` items to a store of ``store_size``.

    Parameters
    ----------
    sizes : ndarray of int
        Nested sub-store sizes, increasing.
    draws : ndarray of shape (n_draws, n_sizes)
        Mean retention of each draw at each size (one metric).
    anchor_ci : (float, float)
        Interval of the retention on the full evaluation store, over queries.
    store_size : int
        Store size to predict for.
    k : int
        Neighbourhood size.
    confidence : float
        Coverage of the interval.

    Returns
    -------
    projection : dict
        ``{"value", "ci", "slope", "supported"}``; ``slope`` is ``b`` of the law.
    """
    from scipy.stats import norm

    m = int(sizes[-1])
    anchor = float(draws[0, -1])
    means = draws.mean(axis=0)
    z = norm.ppf(0.5 + confidence / 2)
    if len(sizes) > 1 and 2 * sizes[-2] >= m - 1:
        # which items make up the store matters beyond the query sampling (near-duplicate
        # texts share neighbours): random half-stores vary as much as independent stores of m
        # items would, so their spread widens the anchor's interval
        comp = z * float(np.std(draws[:, -2], ddof=1))
        half = np.hypot((anchor_ci[1] - anchor_ci[0]) / 2, comp)
        centre = (anchor_ci[0] + anchor_ci[1]) / 2
        anchor_ci = (max(centre - half, 0.0), min(centre + half, 1.0))
    if store_size <= m:
        # a store no larger than the one measured: read between the sub-stores
        value = float(np.interp(np.log(store_size), np.log(sizes), means))
        shift = value - anchor
        return {"value": value, "ci": (max(anchor_ci[0] + shift, 0.0),
                                       min(anchor_ci[1] + shift, 1.0)),
                "slope": 0.0, "supported": True}
    c_n = chance(k, store_size)
    if len(sizes) < 2:
        return {"value": float(_carry(anchor, m, store_size, k, 0.0, True)),
                "ci": (float(c_n), float(min(anchor_ci[1], 1.0))), "slope": 0.0,
                "supported": False}
    dist = np.log(store_size / m)
    # the two laws: on the recall as measured (steeper: chance inflates the small sub-stores)
    # and above chance (flatter); the estimate is their geometric mean, the gap part of the
    # interval
    ends, spreads = [], []
    for corrected in (False, True):
        slope = _slope(sizes, means, k, corrected)
        slopes = [_slope(sizes, d, k, corrected) for d in draws]
        spreads.append(float(np.std(slopes, ddof=1)))
        ends.append((slope, [np.log(_carry(v, m, store_size, k, slope, corrected))
                             for v in (anchor_ci[0], anchor, anchor_ci[1])]))
    (s_raw, raw), (_, cor) = ends
    centre = (raw[1] + cor[1]) / 2
    spread = np.sqrt(max(spreads) ** 2 + LAW_SPREAD ** 2) * z * dist
    lo = min(raw[0], cor[0]) - spread
    hi = max(raw[2], cor[2]) + spread

    def back(v):
        return float(min(max(np.exp(v), c_n), 1.0))

    return {"value": back(centre), "ci": (back(lo), back(hi)), "slope": s_raw,
            "supported": True}
