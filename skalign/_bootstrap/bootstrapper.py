"""Anchor bootstrapping: grow a set of parallel anchors from a few seed pairs, in rounds.

The estimator, its parameters and ``fit``; the steps of the fit are mixins in their own modules:
the inputs (:mod:`skalign._bootstrap.inputs`), the discovery by relative-representation rounds
(:mod:`skalign._bootstrap.rounds`) or by self-learning (:mod:`skalign._bootstrap.seedless`),
the anchor refinement (:mod:`skalign._bootstrap.refine`), the inner estimator's fit on the
discovered pairs and ``map_rounds`` (:mod:`skalign._bootstrap.anchors`), the success
certificate (:mod:`skalign._bootstrap.certify`) and the guard that keeps the seeds' own map when
the discovered pairs do not beat it (:mod:`skalign._bootstrap.validate`).
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..base import BaseAligner, check_min_pairs, check_unpaired
from ..utils._backend import make_generator, row_normalize, to_numpy, to_tensor
from ..utils._compat import Interval, StrOptions, _fit_context
from .anchors import _AnchorsMixin
from .certificate import CERTIFICATE_THRESHOLD
from .certify import _CertifyMixin
from .inputs import _check_pool_spread, _InputsMixin
from .refine import _RefineMixin
from .rounds import _RoundsMixin
from .seedless import _SelfLearningMixin
from .validate import _StartGuardMixin

__all__ = ["AnchorBootstrapper"]

_ROUNDS_MIN_SEEDS = 25  # discovery="auto": fewer seeds start from signatures + self-learning


def _default_estimator():
    from .._affine.procrustes import ProcrustesAligner

    return ProcrustesAligner()


def _estimator_has(attr):
    def check(self):
        est = getattr(self, "estimator_", None)
        if est is None:
            est = self.estimator if self.estimator is not None else _default_estimator()
        return hasattr(est, attr)

    return check


class AnchorBootstrapper(_InputsMixin, _RoundsMixin, _SelfLearningMixin, _RefineMixin,
                         _AnchorsMixin, _CertifyMixin, _StartGuardMixin, BaseAligner):
    r"""Discover parallel anchors from a few seed pairs, or none, then fit an aligner on them.

    A meta-estimator in the manner of :class:`~sklearn.semi_supervised.SelfTrainingClassifier`:
    ``fit(X_seed, y_seed, unpaired=UnpairedPool(X=source_pool, y=target_pool))`` pairs rows of
    two unpaired pools (of any sizes, the target pool in any order) that describe the same
    items, keeps the mutual best matches, and fits ``estimator_ = clone(estimator)`` on the seed
    plus the discovered pairs; ``fit(None, None, unpaired=...)`` is the zero-pair mode.
    ``transform``, ``predict`` and ``score`` delegate to ``estimator_``.

    **Discovery** (``discovery``). From 25 seed pairs on, *rounds* of relative representations:
    with the current anchors :math:`A_X, A_Y` (the seeds, then the seeds plus the pairs accepted
    so far) on centred, L2-normalised rows, source row ``i`` and target row ``j`` score

    .. math::

        S_{ij} = r_X(x_i)^\top r_Y(y_j), \qquad r_X(x) = \frac{A_X x}{\|A_X x\|}, \quad
        r_Y(y) = \frac{A_Y y}{\|A_Y y\|},

    corrected for hubness by CSLS [3]_, :math:`2 S_{ij} - r^X_i - r^Y_j` (or an entropic
    transport plan [4]_, or :math:`S` itself: ``correspondence``); the ``n_working_anchors``
    most confident mutual best matches are the next round's anchors, until the pairs to return
    stop changing. Below 25 seed pairs, *self-learning* [2]_: isometry-invariant similarity
    signatures (plus the cosines to the seeds) start a soft, then a hard, self-learning of an
    orthogonal map scored by CSLS, restarted up to ``n_restarts`` times. The returned pairs are
    the mutual best matches of the last round (under the learned map). ``refine=True`` adds the
    anchor optimisation of [1]_; ``map_rounds`` pairs the pools again under the fitted map.

    **Checks.** Every fit is checked without ground truth: a clone of ``estimator`` fitted on
    the seeds plus half of the discovered pairs must find the other half's partners
    (``certificate_``); below ``min_certificate`` the fit warns
    (:class:`~skalign.exceptions.DiscoveryFailedWarning`). And the fit never ends measurably
    below its start, ``estimator`` fitted on the seed pairs alone (the *start guard*). A seeded
    split holds out :math:`V` of the seed pairs (``validation_fraction`` of them, at least 10 or
    half) and discovery runs once, on the pools and the other seeds :math:`T`, so the held-out
    pairs guide none of it. The start :math:`f_0` (fitted on :math:`T`) and every stage
    :math:`f_s` of that fit (:math:`T` plus the discovered pairs, then each map round) translate
    the held-out sources; each held-out pair :math:`v` scores :math:`\ell_s(v) = -\ln
    \operatorname{rank}_s(v)`, the rank of its own target among up to 1,024 target rows (the
    seeds' and the target pool's) by cosine. With :math:`\bar\ell_s` the mean over :math:`V`,
    the best stage :math:`s^* = \arg\max_s \bar\ell_s` is kept if

    .. math::

        \bar\ell_{s^*} - \bar\ell_0 > \operatorname{SE}\big(\ell_{s^*}(v) - \ell_0(v)\big)_{v
        \in V},

    one standard error of the paired per-pair gains, else the start. The kept stage (or the
    start) is then refitted on every seed pair plus that stage's discovered pairs, without a
    second discovery: the guard costs the start's and the stages' inner fits and one matching
    of the held-out pairs, not a discovery per validation fold (measured with
    ``benchmarks/bench_busy.py``). ``validation_scores_`` are :math:`\exp \bar\ell_s`. Without
    seed pairs there is no start (no map can be fitted from no pair, and no pair could score
    one): the certificate is the only check.

    Read more in the :ref:`User Guide <bootstrap>`.

    Parameters
    ----------
    estimator : estimator object, default=None
        Aligner fitted on the seed + discovered pairs; ``None`` means
        :class:`~skalign.ProcrustesAligner` with its defaults. Its parameters are searchable as
        ``estimator__<name>`` (also when left at ``None``).
    n_anchors : int or "auto", default="auto"
        Anchors returned in all (seed + discovered); ``"auto"`` returns every mutual pair of
        the final matching, so the inner aligner sees as many pairs as the pools offer.
    anchor_indices : array-like of int, default=None
        Source-pool rows whose counterparts to return (their best targets after the rounds,
        mutual or not); ``None`` returns the most confident mutual pairs.
    n_working_anchors : int, default=1000
        Anchors (seeds included) used for the relative representations during the rounds.
    max_rounds : int, default=10
        Rounds at most.
    map_rounds : int, default=0
        After discovery, rounds at most of pairing the pools *under the fitted map*: the source
        candidates are translated by ``estimator_``, paired with the target pool by mutual CSLS
        nearest neighbours, and ``estimator_`` is refitted on the seeds plus those pairs (all
        of them with ``n_anchors="auto"``). Ignored with ``anchor_indices``; stops early when at
        most ``tol`` of the pairs are new. An inner estimator that searches its penalty
        (``alpha="auto"``) searches it for the first fit and the last round's; the rounds
        between keep the penalty chosen before them.
    tol : float, default=0.01
        Stop when at most this fraction of the pairs to return (the ``n_anchors − s`` most
        confident mutual pairs, or those of ``anchor_indices``) were not already mutual pairs in
        the previous round.
    correspondence : {"csls", "sinkhorn", "cosine"}, default="csls"
        How each round pairs the pools (``discovery="rounds"`` only): CSLS scores, confidence
        = the margin between a source row's best and second-best score; the entropic transport
        plan for the cost :math:`1 - S` (log-domain Sinkhorn), confidence = the share of the
        row's mass on its best target; or :math:`S` with its margin.
    discovery : {"auto", "self_learning", "rounds"}, default="auto"
        The discovery method (see above); ``"auto"``: self-learning with fewer than 25 seed
        pairs (zero included), the rounds otherwise and without pools.
    n_restarts : int, default=3
        Starts of the self-learning at most (each with its own soft-phase settings; with no
        seeds and equal widths the second is the identity map); it stops at the first that
        passes the certificate.
    min_certificate : float, default=0.5
        Warn (:class:`~skalign.exceptions.DiscoveryFailedWarning`) when ``certificate_`` is
        below this; also the bar a self-learning restart must pass.
    csls_n_neighbors : int, default=10
        Neighbourhood size of the CSLS correction (the ``k`` of [3]_).
    center : bool, default=True
        Centre each pool on its mean before normalising (discovery only; the inner estimator is
        fitted on the original rows). Sentence encoders are offset from the origin, so all
        cosines are high otherwise.
    refine : bool, default=False
        Run the anchor optimisation of [1]_ on the final anchors (needs seeds): free target
        anchors on the unit sphere minimise :math:`\| \hat R_X - Y [L_Y; \tilde A_Y]^\top
        \|_F^2` by Adam and snap to their nearest target-pool row.
    refine_max_iter : int, default=250
        Adam steps of the refinement (the paper's 250).
    refine_learning_rate : float, default=0.02
        Adam step size of the refinement (the paper's 0.02).
    sinkhorn_reg : float, default=0.05
        :math:`\varepsilon` relative to the median cost (``correspondence="sinkhorn"``).
    sinkhorn_max_iter : int, default=1000
        Sinkhorn iterations at the final :math:`\varepsilon`.
    sinkhorn_tol : float, default=1e-3
        Stop when the plan's column marginals are this close (relative L1).
    plan : {"auto", "dense", "chunked", "sparse"}, default="auto"
        How the ``n × m`` similarities/plan are held. CSLS and cosine always work on blocks of
        rows; ``"dense"`` makes it one block. For Sinkhorn: ``"dense"`` (exact), ``"chunked"``
        (exact, cost recomputed in blocks), ``"sparse"`` (cost restricted to every row's and
        column's ``n_neighbors`` nearest partners). ``"auto"``: dense up to 2**22 entries,
        chunked (CSLS) or sparse (Sinkhorn) above.
    n_neighbors : int, default=64
        Candidate partners per row and column for ``plan="sparse"``.
    max_candidates : int, default=10000
        Source-pool rows considered for discovery (a random subset of a larger pool, always
        including ``anchor_indices``). Every target-pool row is always considered.
    validation_fraction : float or None, default=0.2
        Share of the seed pairs the start guard holds out (at least 10, or half of them when
        fewer than 20; see the guard above). ``None``, no seed pairs, fewer than 3, or a
        missing pool side: no guard, discovery uses every seed and the last stage is returned.
    random_state : int, RandomState instance or None, default=None
        Draws the candidate subset and the Sinkhorn cost sample, and seeds the inner estimator
        when its own ``random_state`` is ``None``. Fits are bitwise repeatable on the CPU.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the discovery rounds run. The inner estimator is fitted and transforms there too:
        ``estimator_`` gets this ``device`` (in place of its own).
    batch_size : int, default=None
        Source rows per block of :math:`S` in the discovery rounds, and rows per batch of
        ``estimator_``'s ``transform`` when its own ``batch_size`` is ``None``. ``None`` keeps
        blocks within scikit-learn's ``working_memory``.
    verbose : int, default=0
        ``> 0`` prints one line per round.

    Attributes
    ----------
    estimator_ : estimator object
        The fitted clone of ``estimator``.
    anchor_pairs_ : ndarray of shape (n_discovered, 2), int64
        (source-pool row, target-pool row) of every discovered anchor, most confident first
        (in the order of ``anchor_indices`` when given).
    anchor_confidence_ : ndarray of shape (n_discovered,)
        Confidence of each pair in the last round (CSLS or cosine margin, or plan mass share).
    anchor_mutual_ : ndarray of shape (n_discovered,), bool
        Whether each pair was a mutual best match in the last round (always true without
        ``anchor_indices``).
    source_anchors_ : ndarray of shape (n_seed + n_discovered, n_features_in)
        Source anchors the inner estimator was fitted on (seed first; the seeds alone when
        ``kept_start_``, the ``anchor_*`` attributes then still describing the discovery).
    target_anchors_ : ndarray of shape (n_seed + n_discovered, n_features_out)
        Their target counterparts.
    discovery_ : str
        The discovery method used (``"auto"`` resolved).
    map_rounds_ : list of dict
        One entry per round of ``map_rounds`` run: ``round``, ``n_pairs`` (mutual pairs under
        the map, the anchors refitted on), ``changed`` (share of them not among the previous
        anchors), ``seconds``. The ``anchor_*`` and ``*_anchors_`` attributes hold the last
        round's pairs.
    certificate_ : float
        The success certificate, in [0, 1]: a clone of ``estimator`` fitted on the seeds plus a
        random half of the discovered pairs translates the source rows of the other half; the
        share of them whose mutual CSLS nearest neighbour, among the target-pool rows not used
        in that fit, is the partner the discovery gave them (an inner estimator that searches
        its penalty keeps the one ``estimator_`` chose); NaN without pools or when fewer than
        two pairs were discovered (``n_anchors`` at most the number of seeds).
    certificate_margin_ : float
        Mean CSLS margin (best minus second best) of those held-out rows.
    best_stage_ : int
        The stage ``estimator_`` comes from: 0 the start (the seed pairs alone), 1 the seeds
        plus the discovered pairs, ``1 + r`` after map round ``r``.
    kept_start_ : bool
        Whether ``estimator_`` is the start (``best_stage_ == 0``): no stage beat it on the
        held-out seed pairs, or nothing was discovered.
    validation_scores_ : list of float or None
        The geometric mean over the held-out seed pairs of the reciprocal rank of their targets
        (1: each retrieved first) for the start (index 0) and each stage; ``None`` when no
        guard applies (``validation_fraction=None``, fewer than 3 seed pairs, or nothing
        discovered).
    best_validation_score_ : float or None
        ``validation_scores_[best_stage_]``.
    restarts_ : list of dict
        Self-learning only, one entry per start: ``start`` (``"signatures"``,
        ``"signatures+seeds"`` or ``"identity"``), ``n_soft_iter`` (iterations of the soft
        self-learning; 0 for the identity), ``n_components`` and ``soft_temperatures`` (its
        principal components per pool and its first and later temperatures; ``None`` for the
        identity), ``soft_objective`` (the soft phase's last mean best CSLS score; ``None``
        for the identity), ``n_start_pairs`` (the start's mutual pairs),
        ``start_certificate`` (the held-out share of the start pairs under an orthogonal map
        fitted on half of them), ``stopped`` (``None``, or why the start stopped before its
        hard phase: start certificate below 0.5, or below ``min_certificate`` if lower),
        ``objective`` (of the hard phase),
        ``certificate`` (the same held-out share for the learned orthogonal map; NaN when
        stopped), ``n_iter`` (hard iterations; 0 when stopped), ``seconds``. The first start
        whose certificate reaches ``min_certificate`` is the last one run.
    rounds_ : list of dict
        Self-learning: one entry per iteration of the kept start (``objective``,
        ``keep_probability``, ``n_pairs``, ``seconds``; empty when every start stopped, the
        map then being the orthogonal fit on the pairs of the start that certified best).
        Rounds: one entry per round:
        ``n_anchors`` (anchors of the relative representations),
        ``n_mutual`` (mutual pairs found), ``n_accepted``, ``mean_confidence`` (of the accepted
        pairs), ``changed`` (fraction of accepted pairs not accepted in the previous round),
        ``changed_returned`` (fraction of the pairs that would be returned — the
        ``n_anchors − s`` most confident, or those of ``anchor_indices`` — that were not mutual
        pairs in the previous round),
        ``still_mutual`` (fraction of the previous round's accepted pairs that are still mutual
        pairs with the same partner; NaN in round 1), ``seed_agreement`` (fraction of the seed
        pairs whose own target is their best match among the seed targets, by relative
        representations with respect to the accepted pairs only: an independent check of the
        discovered correspondence), ``loss`` and ``seconds``; plus the
        Sinkhorn details for ``correspondence="sinkhorn"``.
    loss_curve_ : list of float
        Per round, :math:`1 -` the mean similarity :math:`S_{ij}` of the accepted pairs
        (self-learning: :math:`1 -` the objective).
    n_iter_ : int
        Rounds run.
    refine_loss_curve_ : list of float or None
        The refinement objective after each Adam step (``refine=True``).
    plan_ : str
        The storage used (``"auto"`` resolved).
    device_ : str
    n_features_in_ : int
    n_features_out_ : int

    Warns
    -----
    DiscoveryFailedWarning
        When ``certificate_ < min_certificate``, or when every self-learning start stopped
        before its hard phase (``restarts_``): the discovered pairs, and so the map, are
        probably wrong.
    AnchorConsistencyWarning
        When, in the last round, fewer than 80 % of the previous round's accepted pairs are still
        mutual pairs with the same partner, or the accepted pairs pair fewer than 80 % of the
        seeds correctly (``seed_agreement``): the correspondence is not consistent (too few or
        wrong seed pairs, or pools with little in common) and the anchors are unreliable.
    ConvergenceWarning
        When ``max_rounds`` is reached with more than ``tol`` of the pairs to return still
        changing.

    See Also
    --------
    ProcrustesAligner : The default inner estimator.
    InverseRelativeProjector : Translation through relative representations.

    Notes
    -----
    Without seed pairs both pools are required, with at least 50 rows each; pools whose rows are
    all equal are rejected. Without ``unpaired`` (or with only one side of it) the missing pool
    is the seed rows of that side: the estimator then runs end to end on the seed alone, which
    only makes sense for API compatibility (the scikit-learn checks); give real pools for
    discovery.

    References
    ----------
    .. [1] I. Cannistraci, L. Moschella, V. Maiorca, M. Fumero, A. Norelli, E. Rodolà,
       "Bootstrapping Parallel Anchors for Relative Representations", ICLR 2023 Tiny Papers.
    .. [2] M. Artetxe, G. Labaka, E. Agirre, "A robust self-learning method for fully
       unsupervised cross-lingual mappings of word embeddings", ACL 2018.
    .. [3] A. Conneau, G. Lample, M. Ranzato, L. Denoyer, H. Jégou, "Word translation without
       parallel data", ICLR 2018 (CSLS).
    .. [4] M. Cuturi, "Sinkhorn distances: lightspeed computation of optimal transport",
       NeurIPS 2013.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign import AnchorBootstrapper, UnpairedPool
    >>> from skalign.datasets import load_docstring_embeddings
    >>> data = load_docstring_embeddings()
    >>> X, Y = data.embeddings["minilm_l6"], data.embeddings["mpnet_base"]
    >>> perm = np.random.default_rng(0).permutation(1000)
    >>> pool = UnpairedPool(X=X[:1000], y=Y[:1000][perm])      # target side shuffled
    >>> boot = AnchorBootstrapper(n_anchors=300, discovery="rounds", random_state=0)
    >>> boot = boot.fit(X[1000:1015], Y[1000:1015], unpaired=pool)
    >>> src, tgt = boot.anchor_pairs_.T
    >>> bool(np.mean(perm[tgt] == src) > 0.95)
    True
    >>> round(boot.score(X[1100:], Y[1100:]), 2)    # held-out cosine, Procrustes inside
    0.61
    >>> bool(boot.certificate_ > 0.9)                  # checked without ground truth
    True
    >>> boot.kept_start_                  # the discovered pairs beat the 15 seeds' own map
    False
    """

    _parameter_constraints = {
        **BaseAligner._parameter_constraints,
        "estimator": "no_validation",  # checked in fit (fit and transform needed)
        "n_anchors": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "anchor_indices": ["array-like", None],
        "n_working_anchors": [Interval(Integral, 1, None, closed="left")],
        "max_rounds": [Interval(Integral, 1, None, closed="left")],
        "map_rounds": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, 1, closed="both")],
        "correspondence": [StrOptions({"csls", "sinkhorn", "cosine"})],
        "discovery": [StrOptions({"auto", "rounds", "self_learning"})],
        "n_restarts": [Interval(Integral, 1, None, closed="left")],
        "min_certificate": [Interval(Real, 0, 1, closed="both")],
        "csls_n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "center": ["boolean"],
        "refine": ["boolean"],
        "refine_max_iter": [Interval(Integral, 1, None, closed="left")],
        "refine_learning_rate": [Interval(Real, 0, None, closed="neither")],
        "sinkhorn_reg": [Interval(Real, 0, None, closed="neither")],
        "sinkhorn_max_iter": [Interval(Integral, 1, None, closed="left")],
        "sinkhorn_tol": [Interval(Real, 0, None, closed="neither")],
        "plan": [StrOptions({"auto", "dense", "chunked", "sparse"})],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "max_candidates": [Interval(Integral, 1, None, closed="left")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither"), None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, estimator=None, *, n_anchors="auto", anchor_indices=None,
                 n_working_anchors=1000, max_rounds=10, map_rounds=0, tol=0.01,
                 correspondence="csls", discovery="auto", n_restarts=3,
                 min_certificate=CERTIFICATE_THRESHOLD, csls_n_neighbors=10, center=True,
                 refine=False, refine_max_iter=250, refine_learning_rate=0.02,
                 sinkhorn_reg=0.05, sinkhorn_max_iter=1000, sinkhorn_tol=1e-3, plan="auto",
                 n_neighbors=64, max_candidates=10000, validation_fraction=0.2,
                 random_state=None, device="cpu", batch_size=None, verbose=0):
        self.estimator = estimator
        self.n_anchors = n_anchors
        self.anchor_indices = anchor_indices
        self.n_working_anchors = n_working_anchors
        self.max_rounds = max_rounds
        self.map_rounds = map_rounds
        self.tol = tol
        self.correspondence = correspondence
        self.discovery = discovery
        self.n_restarts = n_restarts
        self.min_certificate = min_certificate
        self.csls_n_neighbors = csls_n_neighbors
        self.center = center
        self.refine = refine
        self.refine_max_iter = refine_max_iter
        self.refine_learning_rate = refine_learning_rate
        self.sinkhorn_reg = sinkhorn_reg
        self.sinkhorn_max_iter = sinkhorn_max_iter
        self.sinkhorn_tol = sinkhorn_tol
        self.plan = plan
        self.n_neighbors = n_neighbors
        self.max_candidates = max_candidates
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.device = device
        self.batch_size = batch_size
        self.verbose = verbose

    def set_params(self, **params):
        """Set parameters; ``estimator__<name>`` works while ``estimator`` is ``None`` too.

        Nested keys first replace ``estimator=None`` by the default inner estimator, so
        ``GridSearchCV(AnchorBootstrapper(), {"estimator__<name>": [...]})`` works.

        Parameters
        ----------
        **params : dict
            Estimator parameters, ``estimator__<name>`` for the inner estimator's.

        Returns
        -------
        self : AnchorBootstrapper
            This estimator.
        """
        if self.estimator is None and params.get("estimator", None) is None and any(
            k.startswith("estimator__") for k in params
        ):
            params = {"estimator": _default_estimator(), **params}
        return super().set_params(**params)

    # -------------------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y, unpaired=None):
        """Discover anchors from the seed pairs and the pools in rounds, then fit ``estimator_``.

        Parameters
        ----------
        X : array-like of shape (n_seed, n_features_in)
            Source embeddings of the seed pairs.
        y : array-like of shape (n_seed, n_features_out)
            Target embeddings of the same items, row for row.
        unpaired : UnpairedPool, default=None
            ``X``: the source pool (anchors are drawn from it), ``y``: the target pool (their
            counterparts are searched in it), in any order. Sizes may differ. See the Notes for
            ``None``.

        Returns
        -------
        self : AnchorBootstrapper
            The fitted estimator.
        """
        if X is None and y is None:
            X, y, pool = self._validate_seedless(unpaired)
        else:
            X, y = self._validate_pair(X, y, min_pairs=1)
            check_min_pairs(len(X), 2, what="seed pairs",
                            why="relative representations need them; for none, fit(None, None, "
                                "unpaired=...)")
            pool = check_unpaired(unpaired, X.shape[1], y.shape[1])
        est = self.estimator if self.estimator is not None else _default_estimator()
        if not (hasattr(est, "fit") and hasattr(est, "transform")):
            raise ValueError(
                f"estimator must be an aligner with fit and transform, got {type(est).__name__}."
            )
        _check_pool_spread(X if pool is None or pool.X is None else pool.X, "unpaired.X")
        _check_pool_spread(y if pool is None or pool.y is None else pool.y, "unpaired.y")
        gen = make_generator(self.random_state, torch.device(self.device_))
        self._guarded_fit(X, y, pool, est, gen)
        self._warn_if_discovery_failed()
        return self

    def _discover_and_fit(self, X, y, pool, est, gen, n_seed=None):
        """Discover pairs in the pools, fit ``estimator_`` on the seeds plus them, then run
        ``map_rounds``; returns the fitted state after each of these stages (:meth:`_stage`).

        Without a pool side, that side's pool is the seed rows. Sets every fitted attribute
        but the certificate's and the start guard's. ``n_seed`` is the number of seed pairs of
        the whole fit (default ``len(X)``; more when the guard holds some out of discovery): it
        resolves ``discovery="auto"`` and is what an integer ``n_anchors`` counts.
        """
        n_seed = len(X) if n_seed is None else n_seed
        Xp = X if pool is None or pool.X is None else pool.X
        Yp = y if pool is None or pool.y is None else pool.y
        dev = torch.device(self.device_)
        given = self._given_rows(len(Xp))
        cand = self._candidates(len(Xp), given, gen)

        LX, LY = to_tensor(X, dev), to_tensor(y, dev)
        XP, YP = to_tensor(np.asarray(Xp)[to_numpy(cand)], dev), to_tensor(Yp, dev)
        if self.center:
            mx, my = to_tensor(np.asarray(Xp).mean(0), dev), YP.mean(0)
            LX, XP, LY, YP = LX - mx, XP - mx, LY - my, YP - my
        LX, LY, XP, YP = row_normalize(LX), row_normalize(LY), row_normalize(XP), row_normalize(YP)
        n, m = len(XP), len(YP)
        self.plan_ = self._resolve_plan(n, m)

        self.discovery_ = self.discovery
        if self.discovery == "auto":
            few = n_seed < _ROUNDS_MIN_SEEDS and pool is not None
            self.discovery_ = "self_learning" if few else "rounds"
        self.restarts_ = []
        if self.discovery_ == "rounds":
            match, src, tgt = self._rounds(LX, LY, XP, YP, gen, given)
        else:
            match = self._self_learning(LX, LY, XP, YP, gen)
        if given is None:  # the most confident mutual pairs of the last round
            pick = self._confident_mutual(match, n_seed)
            wanted = min(max(self.n_anchors - n_seed, 0), n, m) if self.n_anchors != "auto" \
                else len(pick)
            if len(pick) < wanted:
                warnings.warn(
                    f"AnchorBootstrapper: only {len(pick)} mutual pairs were found, fewer than "
                    f"the {wanted} anchors requested; the inner estimator gets fewer anchors.",
                    UserWarning, stacklevel=3,
                )
        else:  # rows of `given` are the first len(given) candidates
            pick = torch.arange(len(given), device=dev)
        tgt_pick = match.forward[pick]
        self.refine_loss_curve_ = None
        if self.refine and len(pick):
            tgt_pick = self._refine(LX, LY, XP, YP, match, pick, gen)

        self._fit_on_anchors(X, y, Xp, Yp, cand[pick], tgt_pick, match.confidence[pick],
                             match.mutual()[pick], est, gen)
        stages = [self._stage()]
        self.map_rounds_ = []
        if self.map_rounds and given is None and len(pick):
            stages += self._pair_under_map(X, y, Xp, Yp, cand, est, gen, n_seed)
        return stages

    # --------------------------------------------------------------------- delegation
    def transform(self, X):
        """Translate source embeddings with ``estimator_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Source embeddings.

        Returns
        -------
        Y_hat : ndarray of shape (n_samples, n_features_out)
            Their translations into the target space.
        """
        check_is_fitted(self)
        return self.estimator_.transform(X)

    def predict(self, X):
        """Translate source embeddings with ``estimator_``, as :meth:`transform`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Source embeddings.

        Returns
        -------
        Y_hat : ndarray of shape (n_samples, n_features_out)
            Their translations into the target space.
        """
        return self.transform(X)

    @available_if(_estimator_has("inverse_transform"))
    def inverse_transform(self, X):
        """Map target embeddings back with ``estimator_.inverse_transform``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Target-space embeddings.

        Returns
        -------
        X_hat : ndarray of shape (n_samples, n_features_in)
            The embeddings mapped back into the source space.
        """
        check_is_fitted(self)
        return self.estimator_.inverse_transform(X)

    def score(self, X, y, sample_weight=None):
        """``estimator_.score(X, y)`` (mean cosine similarity for skalign aligners).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Source embeddings.
        y : array-like of shape (n_samples, n_features_out)
            Their true target embeddings.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights passed on to ``estimator_.score``.

        Returns
        -------
        score : float
            The inner estimator's score.
        """
        check_is_fitted(self)
        if sample_weight is None:
            return self.estimator_.score(X, y)
        return self.estimator_.score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32", "float64"]
        return tags
