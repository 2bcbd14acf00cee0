r"""Encoded rows and translated rows on one scale, and which store ``skalign migrate`` writes.

A migrated store holds two kinds of row: the budget's rows, whose vector is the new encoder's
own, and every other row, whose vector is a map's translation of its old vector. A query (a new
encoder's vector) is ranked against both at once, so their cosines must be on one scale. They
are not: a ridge map predicts the conditional mean of the new vector, shrunk towards the mean
row, and in an anisotropic space (multilingual-e5: every unit row shares a strong common
direction) a shrunk row, normalised, has a *higher* cosine with every query than an encoded row
of the same relevance. The translated rows then crowd the encoded ones out of the top-``k``
(a map that spreads the rows more than the new space does, such as an orthogonal one into e5,
does the opposite), and the store with the exact rows can be *worse* than translating every
row: on the development set, MiniLM → e5 at 40 % encoded, recall@10 0.41 against 0.49.

Calibrations
------------
Every calibration is fitted on the encoded pairs only, with the map's *cross-fitted*
translations :math:`\tilde t_i` of the encoded rows (each translated by a fit that did not see
it, so that they are as far from their new vectors as the other rows' translations are). In
the unit sphere (search is by cosine):

* ``"none"``: the map's output unchanged (what ``migrate`` wrote before).
* ``"moments"``: centring and isotropic rescaling matched to the encoded rows,

  .. math::

      t \mapsto \frac{m_Y + s\,(\hat t - m_T)}{\lVert m_Y + s\,(\hat t - m_T) \rVert},
      \qquad s^2 = \frac{\overline{\lVert \hat y_i - m_Y \rVert^2}}
                        {\overline{\lVert \hat{\tilde t}_i - m_T \rVert^2}},

  with :math:`\hat{\cdot}` the unit row, :math:`m_Y` and :math:`m_T` the mean unit new vector
  and cross-fitted translation of the encoded rows: the translations get the encoded rows'
  mean and spread.

and then a *score scale* :math:`c \le 1` that multiplies every translated row's cosine with
every query while keeping its ranking among the translated rows:

.. math::

    t \mapsto c\,\hat t_{\perp} + \sqrt{1 - c^2}\; z,

with :math:`z` the unit direction of least second moment of the encoded rows' new vectors
(nearly orthogonal to every query) and :math:`\hat t_{\perp}` the unit row less its (small)
component along :math:`z`: :math:`\cos(q, t') = c \cos(q, \hat t_{\perp}) + \sqrt{1-c^2}\,
q^\top z`, the second term the same for every translated row of one query and near zero. A
row written so has unit length times the encoded rows' mean norm, so a store ranked by inner
product or L2 distance ranks it as one ranked by cosine does.

Choosing what to write
----------------------
At run time only the encoded pairs are known, so the choice is made on them, by cross-fitting
(the *held-out check*): the cross-fitted translations (and each calibration, fitted without
the fold it is applied to) make a store of the encoded rows; a random share of them is given
back its exact vector, as ``migrate`` would write it, and the others' new vectors are the
queries; recall@``k`` against the store of exact vectors is measured, per query, for

* ``"mixed"`` with each calibration and each score scale of :data:`SCORE_SCALES`;
* ``"translate all"`` with each calibration (every row translated, none written exactly).

The share is the migration's own, but at least :data:`MIN_CHECK_SHARE`, over
:data:`CHECK_DRAWS` draws (a share of 2 % of a few dozen pairs leaves no exact row to learn
anything from); below it, the exact rows' part of each mixed store's recall (its difference
from translating every row with the same calibration) is taken in proportion to the share.
The check is made of at most :data:`CHECK_ROWS` of the pairs (a seeded sample of more: its
matrices grow with the square of the pairs, and a ``--continue`` step's pairs with every step);
the calibration written is fitted on every pair.

Below :data:`SMALL_SHARE` of the store encoded, a fresh migration translates every row (with
the calibration the check prefers): there the exact rows changed recall@10 by +0.00 to -0.15
on the development set (a few of them winning many queries' top-``k``), and the check, whose
stores are sparser than the store, sees that harm too small. Above it, the *default* store is
the mixed one without calibration (what ``migrate`` wrote before); another option is written
only when its gain over the default on the check is at least :data:`MIN_GAIN` and
:data:`MIN_Z` standard errors (over the queries of one draw); among the score scales of the
winning calibration, the one nearest 1 whose recall is within a standard error of the best.

The check's stores, made of the encoded rows alone (k-means centres, spread apart), are sparser
than the store, and the scale that balances the two kinds of row there lies further from 1
than the store's: towards e5 on the development set the check's best scale was 0.94-0.96, the
store's 0.97 at 1,000-2,000 rows and 0.975 at 4,000, and below it recall@10 collapses (0.28 at
0.95 against 0.44 at 0.975, 4,000 rows, 10 % encoded); towards MPNet and from e5 to MiniLM the
check kept preferring smaller scales where the store gained 0.01-0.03 at 0.94-0.97. The scales
tried therefore stop at 0.97. The best scale drifts towards 1 as the store grows (by about
0.005 from 1,000 to 4,000 rows): in stores of millions of rows 0.97 may be past it, which no
check on a few thousand pairs can see.

The chosen store's retention is then measured at the migration's own share of exact rows and
carried to the store's size by the law of :mod:`skalign.plan._estimate`, with its interval: the
estimate ``migrate`` prints and stamps.

"Translate all" is a store of translations only: the budget rows' exact vectors are not
written and their rows carry no ``encoded`` mark (a mark says the stored vector *is* the
encoder's). They are not lost: the encode cache keeps every vector, so ``skalign search``
rescoring a candidate and ``migrate --continue`` (which reads them back as encoded pairs,
:func:`cached_rows`) never encode them again. The migration stamp records which store was
written (``"store"``) and its calibration.

References
----------
.. [1] Su, Jianlin et al. "Whitening Sentence Representations for Better Semantics and Faster
   Retrieval." arXiv:2103.15316 (2021): centring and whitening of sentence embeddings.
.. [2] Ethayarajh, Kawin. "How Contextual are Contextualized Word Representations?" EMNLP
   2019: the anisotropy of contextual embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .heldout import (
    KINDS,
    MIXED,
    _draw,
    _exact_rows,
    _fold_of,
    _folds,
    _held_out_rows,
    _least_direction,
    _option_recalls,
    _pad,
    _recall,
    _scores,
    _similarities,
    _top_k,
    _unit,
)

__all__ = ["CHECK_DRAWS", "CHECK_ROWS", "MIN_CHECK_SHARE", "MIN_GAIN", "MIN_Z", "SCORE_SCALES",
           "SMALL_SHARE", "CalibratedMap", "RowCalibration", "StoreChoice",
           "cached_rows", "choose_store", "cross_translations", "price_written",
           "recorded_map", "step_notes", "writes_exact"]

#: score scales ``c`` tried for the mixed store (1: the translated rows' cosines unchanged);
#: none below 0.97 (see the module docstring)
SCORE_SCALES = (1.0, 0.995, 0.99, 0.985, 0.98, 0.975, 0.97)
#: the smallest share of exact rows the held-out check simulates when choosing
MIN_CHECK_SHARE = 0.25
#: random draws of the exact rows in the held-out check
CHECK_DRAWS = 5
#: how much a calibrated or a translate-all store must beat today's mixed store on the check
MIN_GAIN = 0.002
#: standard errors of its held-out gain an option needs to replace the default store
MIN_Z = 2.0
#: below this share of the store encoded, every row is translated (a fresh migration)
SMALL_SHARE = 0.05
#: encoded pairs the held-out check is made of at most (a seeded sample of more): its cost
#: grows with the square of the pairs, and a ``--continue`` step's pairs with every step
CHECK_ROWS = 2000

ALL = "translate all"


@dataclass
class RowCalibration:
    """How a translated row is written: see the module docstring.

    Parameters
    ----------
    kind : {"none", "moments"}
        The calibration.
    score_scale : float
        :math:`c` (1 leaves the cosines unchanged).
    mean, centre : ndarray of shape (d,) or None
        :math:`m_Y` and :math:`m_T` (``"moments"``).
    spread : float
        :math:`s` (``"moments"``).
    pad : ndarray of shape (d,) or None
        :math:`z` (``score_scale < 1``).
    norm : float
        Length of every row written (the encoded rows' mean norm).
    """

    kind: str = "none"
    score_scale: float = 1.0
    mean: np.ndarray | None = None
    centre: np.ndarray | None = None
    spread: float = 1.0
    pad: np.ndarray | None = None
    norm: float = 1.0

    @property
    def identity(self):
        """Whether the map's output is written unchanged."""
        return self.kind == "none" and self.score_scale >= 1.0

    def unit_rows(self, T):
        """The calibrated rows, unit length (float64)."""
        U = _unit(T)
        if self.kind == "moments":
            U = _unit(self.mean + self.spread * (U - self.centre))
        if self.score_scale < 1.0:
            U = _pad(U, self.pad, self.score_scale)
        return U

    def apply(self, T):
        """The rows written for the map's output ``T`` (float32), calibrated a block of
        :data:`CAL_ROWS` rows at a time (each row is calibrated on its own)."""
        if self.identity:
            return np.asarray(T, dtype=np.float32)
        T = np.asarray(T)
        out = np.empty(T.shape, dtype=np.float32)
        for lo in range(0, len(T), CAL_ROWS):
            out[lo:lo + CAL_ROWS] = self.norm * self.unit_rows(T[lo:lo + CAL_ROWS])
        return out

    def describe(self):
        """A JSON-able summary (what the stamp records)."""
        out = {"kind": self.kind, "score_scale": round(float(self.score_scale), 4)}
        if self.kind == "moments":
            out["spread"] = round(float(self.spread), 4)
        return out


def fit_calibration(kind, score_scale, T_cross, Y):
    """A :class:`RowCalibration` fitted on the encoded pairs.

    Its statistics (mean norm, the ``"moments"`` means and spreads, the padding direction's
    second moments) are sums over the pairs, taken a block of :data:`CAL_ROWS` rows at a time:
    no float64 copy of all the pairs. The norms, means and spreads are the values the whole
    arrays give (row by row, the means accumulated in row order as numpy's are); the second
    moments are sums of the blocks' products, equal to the whole product's to rounding.

    Parameters
    ----------
    kind : {"none", "moments"}
    score_scale : float
    T_cross : ndarray of shape (n, d)
        Cross-fitted translations of the encoded rows.
    Y : ndarray of shape (n, d)
        Their new vectors.
    """
    norms = np.concatenate([np.linalg.norm(np.asarray(b, np.float64), axis=1)
                            for b in _row_blocks(Y)])
    cal = RowCalibration(kind=kind, score_scale=float(score_scale), norm=float(norms.mean()))
    if kind == "moments":
        cal.mean, cal.centre, cal.spread = _block_moments(T_cross, Y)
    if score_scale < 1.0:
        GY, GT = 0.0, 0.0
        for tb, yb in zip(_row_blocks(T_cross), _row_blocks(Y)):
            Tu, Yu = _unit(tb), _unit(yb)
            GY, GT = GY + Yu.T @ Yu, GT + Tu.T @ Tu
        cal.pad = _least_direction(GY, GT, len(Y))
    return cal


#: rows :func:`fit_calibration` converts to float64 at once (8,192 rows of 768 values: 50 MB)
CAL_ROWS = 8192


def _row_blocks(A):
    """Consecutive blocks of at most :data:`CAL_ROWS` rows of ``A`` (at least one)."""
    return [A[lo:lo + CAL_ROWS] for lo in range(0, max(len(A), 1), CAL_ROWS)]


def _column_mean(blocks, n):
    """The mean of the rows of the blocks, accumulated row after row as ``A.mean(axis=0)``
    accumulates a C-ordered ``A``."""
    total = None
    for b in blocks:
        total = np.add.reduce(b if total is None else np.vstack([total[None], b]), axis=0)
    return total / n


def _block_moments(T_cross, Y):
    """``_moments(_unit(T_cross), _unit(Y))`` a block of rows at a time."""
    n = len(Y)
    mean = _column_mean((_unit(b) for b in _row_blocks(Y)), n)
    centre = _column_mean((_unit(b) for b in _row_blocks(T_cross)), n)

    def spread(A, m):
        return float(np.concatenate([((_unit(b) - m) ** 2).sum(axis=1)
                                     for b in _row_blocks(A)]).mean())

    vt, vy = spread(T_cross, centre), spread(Y, mean)
    return mean, centre, float(np.sqrt(vy / vt)) if vt > 0 else 1.0


class CalibratedMap:
    """A fitted map whose output is calibrated (:class:`RowCalibration`), and which says what
    store ``migrate`` writes with it.

    Parameters
    ----------
    map_ : fitted estimator
    calibration : RowCalibration
    mode : {"mixed", "translate all"}
        ``"mixed"``: the encoded rows' exact vectors are written over their translations
        (:class:`~skalign._migrate.rows.ExactRowsModel`); ``"translate all"``: they are not.
    """

    def __init__(self, map_, calibration, mode=MIXED):
        self.map_ = map_
        self.calibration = calibration
        self.mode = mode
        self.n_features_in_ = int(map_.n_features_in_)
        self.n_features_out_ = int(_width(map_))

    def transform(self, X):
        return self.calibration.apply(self.map_.transform(X))


def _width(map_):
    from .._stores.pipeline.translate import output_dim

    return output_dim(map_)


def writes_exact(model):
    """Whether the store written with ``model`` holds the encoded rows' exact vectors."""
    return getattr(model, "mode", MIXED) == MIXED


def _proto(method, model, n_pairs, random_state):
    """A fresh estimator of ``method`` with the penalty ``model`` chose fixed (the penalty
    search is the slow part of a ridge fit, and the map ``migrate`` writes chose it on all
    pairs)."""
    from ..plan._inputs import make_candidate

    proto = make_candidate(method, n_pairs, random_state)
    if getattr(proto, "alpha", None) == "auto" and hasattr(model, "alpha_"):
        proto.set_params(alpha=float(model.alpha_))
    return proto


def cross_translations(method, model, X, Y, *, n_splits=None, random_state=0):
    """Each encoded row's translation by ``method`` fitted on the other folds.

    Parameters
    ----------
    method : str
        A :func:`~skalign.plan.candidate_methods` name.
    model : fitted estimator
        ``method`` fitted on all pairs (its ridge penalty is kept).
    X, Y : ndarray
        The encoded rows' old and new vectors.
    n_splits : int, default=None
        Folds; ``None``: the plan's, ``n // 40`` clipped to [2, 5].
    random_state : int

    Returns
    -------
    ndarray of shape (n, d_out)
        In the map's output dtype (float32 for float32 pairs: half the memory of float64,
        whose every consumer converts it exactly).
    """
    import warnings

    from sklearn.base import clone
    from sklearn.model_selection import KFold

    n = len(X)
    if n_splits is None:
        n_splits = int(np.clip(n // 40, 2, 5))
    proto = _proto(method, model, n, random_state)
    out = None
    for train, test in KFold(n_splits, shuffle=True, random_state=random_state).split(X):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            est = clone(proto).fit(X[train], Y[train])
        T = np.asarray(est.transform(X[test]))
        if out is None:
            out = np.zeros((n, T.shape[1]), dtype=np.result_type(T.dtype, np.float32))
        out[test] = T
    return out


def _options():
    for kind in KINDS:
        yield (ALL, kind, 1.0)  # a scale changes no ranking among translations only
        for c in SCORE_SCALES:
            yield (MIXED, kind, c)


@dataclass
class StoreChoice:
    """What :func:`choose_store` chose.

    Attributes
    ----------
    mode : {"mixed", "translate all"}
    calibration : RowCalibration
    check : dict
        Held-out recall@k of each option tried, ``"mode|kind|c"`` → recall, at the check's
        share of exact rows.
    share : float
        Share of the store's rows encoded.
    estimate : dict
        The written store's recall@k at the store's size, its interval, and what it is.
    baselines : dict
        Held-out recall@k of translating every row and of the uncalibrated mixed store.
    """

    mode: str
    calibration: RowCalibration
    check: dict
    share: float
    estimate: dict = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)

    def key(self):
        return f"{self.mode}|{self.calibration.kind}|{self.calibration.score_scale:g}"


def _choose(per, modes, default):
    """The option to write from each option's held-out recall per query (``per``: option →
    array over the draws' queries, aligned), see the module docstring: the option whose gain
    over the default store is largest, if that gain is at least :data:`MIN_GAIN` and
    :data:`MIN_Z` standard errors; then, in the mixed store, the score scale nearest 1 within
    a standard error of the best."""
    n_eff = len(per[default]) / CHECK_DRAWS  # queries of one draw: the draws share rows

    def gain(o):
        d = per[o] - per[default]
        return float(d.mean()), float(d.std() / np.sqrt(max(n_eff, 1.0)))

    stats = {o: gain(o) for o in per if o[0] in modes and o != default}
    ok = [o for o, (g, se) in stats.items() if g >= max(MIN_GAIN, MIN_Z * se)]
    if not ok:
        return default
    best = max(ok, key=lambda o: stats[o][0])
    if best[0] == MIXED:
        top, se = per[best].mean(), stats[best][1]
        near = [o for o in per if o[:2] == best[:2] and per[o].mean() >= top - max(se, 1e-9)]
        best = max(near, key=lambda o: o[2])
    return best


def _check_rows(n, random_state):
    """The pairs the held-out check is made of: all ``n``, or a seeded sample of
    :data:`CHECK_ROWS` of them."""
    if n <= CHECK_ROWS:
        return np.arange(n)
    return np.sort(np.random.default_rng([random_state, 59]).choice(n, CHECK_ROWS,
                                                                     replace=False))


def price_written(T_cross, Y, share, store_size, *, k=10, modes=(MIXED, ALL), random_state=0,
                  n_resamples=1000, confidence=0.95, n_splits=None, option=None):
    """Choose the store to write and price it, from the encoded pairs' cross-fitted
    translations (see the module docstring).

    Parameters
    ----------
    T_cross : ndarray of shape (n, d)
        Each encoded row translated by a fit that did not see it.
    Y : ndarray of shape (n, d)
        Their new vectors.
    share : float
        Share of the store's rows that are encoded.
    store_size : int
        Rows in the store.
    k : int, default=10
    modes : tuple, default=("mixed", "translate all")
        The stores allowed (``("mixed",)`` once rows are marked encoded: they are never
        reverted to translations).
    random_state : int, default=0
    n_resamples, confidence
        Of the estimate's interval.
    n_splits : int, default=None
        Folds the calibrations are cross-fitted over; ``None``: as the translations'.
    option : (mode, kind, score_scale), default=None
        Price this option instead of choosing one.

    Returns
    -------
    choice : StoreChoice
        With a calibration of the chosen kind and scale fitted on all pairs.
    """
    from ..plan._estimate import percentile_ci, project, substore_draws

    if n_splits is None:
        n_splits = int(np.clip(len(Y) // 40, 2, 5))
    # the check's cost grows with the square of the pairs: a seeded sample of them past
    # CHECK_ROWS (the calibration itself is fitted on every pair, a block at a time)
    keep = _check_rows(len(Y), random_state)
    n = len(keep)
    folds = _folds(n, n_splits, random_state)
    Y_check = np.asarray(np.asarray(Y)[keep], dtype=np.float64)
    Yu = _unit(Y_check)
    rows = _held_out_rows(np.asarray(np.asarray(T_cross)[keep], dtype=np.float64), Y_check,
                          folds)
    # the draws' matrices are rows of these: computed once
    sims = _similarities(Yu, rows, folds)
    rng = np.random.default_rng([random_state, 60])
    check_share = max(share, MIN_CHECK_SHARE)
    fold = _fold_of(folds, n)
    per = {}
    for _ in range(CHECK_DRAWS):
        recalls = _option_recalls(sims, fold, _exact_rows(n, check_share, rng), _options(), k)
        for opt, r in recalls.items():
            per.setdefault(opt, []).append(r)
    per = {o: np.concatenate(v) for o, v in per.items()}
    # below the check's share, the exact rows' part of each mixed store's recall is taken in
    # proportion to the share: from translating every row (share 0) to the check's share
    w = min(share / check_share, 1.0)
    per = {o: v if o[0] == ALL else per[(ALL, o[1], 1.0)] + w * (v - per[(ALL, o[1], 1.0)])
           for o, v in per.items()}
    results = {o: float(v.mean()) for o, v in per.items()}
    if share < SMALL_SHARE and ALL in modes:
        modes = (ALL,)
    default = (MIXED, "none", 1.0) if MIXED in modes else (ALL, "none", 1.0)
    mode, kind, c = tuple(option) if option is not None else _choose(per, modes, default)
    for other in [o for o in sims.trans if o != kind]:  # the estimate reads one kind's
        del sims.trans[other]

    # the estimate: the chosen store at the migration's own share, carried to the store size
    check = _draw(sims, n, share, k, np.random.default_rng([random_state, 61]))
    scores = _scores(check, kind, mode, c)
    per = _recall(check.truth, _top_k(scores, check.queries, k))
    est_rng = np.random.default_rng([random_state, 62])

    def score(idx):
        sub = np.zeros(n, dtype=bool)
        sub[idx] = True
        qsel = np.flatnonzero(sub[check.queries])
        if not len(qsel):
            return float(per.mean()), 0.0
        S = scores[np.ix_(qsel, idx)]
        T = check.S_exact[np.ix_(qsel, idx)]
        local = np.searchsorted(idx, check.queries[qsel])
        r = _recall(_top_k(T, local, k), _top_k(S, local, k)).mean()
        return float(r), 0.0

    m = n
    if m >= 2 * k + 2:
        sizes, draws = substore_draws(score, m, k, est_rng, full=(float(per.mean()), 0.0))
        ci = percentile_ci(per, n_resamples, confidence, est_rng)
        p = project(sizes, draws[:, :, 0], ci, int(store_size), k, confidence)
    else:
        p = {"value": float(per.mean()), "ci": (0.0, 1.0), "supported": False}
    # the check's matrices go before the calibration's blocks of every pair are made (the
    # peak is what is alive at once)
    sims = check = scores = rows = Yu = Y_check = None
    cal = fit_calibration(kind, c, T_cross, Y)
    estimate = {"recall_at_10": round(float(p["value"]), 4),
                "interval": [round(float(v), 4) for v in p["ci"]],
                "store_size": int(store_size), "store": mode,
                "calibration": cal.describe(), "supported": bool(p["supported"]),
                "measured": round(float(per.mean()), 4), "measured_size": int(m),
                "check": {"share": round(float(check_share), 4),
                          "written": round(results.get((mode, kind, c), np.nan), 4),
                          "translate all": round(results[(ALL, "none", 1.0)], 4),
                          "mixed": round(results[(MIXED, "none", 1.0)], 4)}}
    key = {o: f"{o[0]}|{o[1]}|{o[2]:g}" for o in results}
    return StoreChoice(mode, cal, {key[o]: round(v, 4) for o, v in results.items()}, share,
                       estimate,
                       {"translate all": round(results[(ALL, "none", 1.0)], 4),
                        "mixed": round(results[(MIXED, "none", 1.0)], 4)})


def choose_store(method, model, X, Y, n_rows, *, k=10, modes=(MIXED, ALL), random_state=0,
                 option=None):
    """What ``migrate`` writes with ``model`` (``method`` fitted on the encoded pairs ``X``,
    ``Y``) in a store of ``n_rows`` rows: the store, its calibration and its estimate.

    Returns
    -------
    written : CalibratedMap
        The map to translate with (``mode`` says whether the exact rows are written).
    choice : StoreChoice
    """
    T_cross = cross_translations(method, model, X, Y, random_state=random_state)
    choice = price_written(T_cross, Y, len(X) / n_rows, n_rows, k=k, modes=modes,
                           random_state=random_state, option=option)
    return CalibratedMap(model, choice.calibration, choice.mode), choice


def cached_rows(encoder, texts, exclude=()):
    """Positions of the rows whose text the encode cache holds a vector of (for
    ``encoder``'s fingerprint), less ``exclude``: the rows a "translate all" migration encoded
    without writing their exact vectors.

    Parameters
    ----------
    encoder : CachedEncoder
    texts : list of str or None
    exclude : array-like of int

    Returns
    -------
    ndarray of int
    """
    from ..encoders._grouping import cache_hits

    hit = cache_hits(encoder, texts)
    hit[np.asarray(exclude, dtype=np.int64)] = False
    return np.flatnonzero(hit)


def recorded_map(migration, model, X, Y, random_state=0):
    """``model`` with the store and calibration a migration stamp records (``migration``),
    fitted again on the pairs ``X``, ``Y`` (deterministic: the same pairs give the same rows);
    ``model`` itself for a stamp without them (written before issue 60, or complete)."""
    est = migration.get("estimate") if isinstance(migration, dict) else None
    cal = est.get("calibration") if isinstance(est, dict) else None
    method = migration.get("method") if isinstance(migration, dict) else None
    if not isinstance(cal, dict) or not isinstance(method, str) or len(X) < 4:
        return model
    option = (est.get("store", MIXED), cal.get("kind", "none"),
              float(cal.get("score_scale", 1.0)))
    if option[0] not in (MIXED, ALL) or option[1] not in KINDS:
        return model
    # the recorded option's calibration fitted again: no check, no estimate (the stamp has it)
    T_cross = cross_translations(method, model, X, Y, random_state=random_state)
    return CalibratedMap(model, fit_calibration(option[1], option[2], T_cross, Y), option[0])


def step_notes(estimate, before, better, n_marked):
    """The lines a ``--continue`` step says before it writes, each also issued as a
    ``UserWarning``: its store estimated below the previous step's (the translated rows then
    keep the previous map), or a store of translations only that would keep more but cannot
    be written because rows are marked encoded already (they are never reverted).

    Parameters
    ----------
    estimate : dict
        This step's estimate (:func:`price_written`).
    before : dict or None
        The previous step's, from the stamp.
    better : bool
        Whether this step's map replaces the previous one.
    n_marked : int
        Rows marked encoded before this step.

    Returns
    -------
    list of str
    """
    import warnings

    notes = []
    prev = before.get("recall_at_10") if isinstance(before, dict) else None
    if not better and isinstance(prev, (int, float)):
        lo, hi = estimate.get("interval", [np.nan, np.nan])
        notes.append(
            f"the store refitted on this step's encoded rows is estimated at recall@10 "
            f"{estimate['recall_at_10']:.3f} [{lo:.3f}, {hi:.3f}], below the previous step's "
            f"{prev:.3f}: the translated rows keep the previous step's map")
    check = estimate.get("check") or {}
    if n_marked and check.get("translate all", 0.0) > check.get("written", 1.0) + MIN_GAIN:
        notes.append(
            f"translating every row would keep more on the held-out check "
            f"({check['translate all']:.3f} against {check['written']:.3f}), but {n_marked} "
            "rows are marked encoded already and are never reverted to translations")
    for line in notes:
        warnings.warn(line, UserWarning, stacklevel=3)
    return notes
