"""Anchor bootstrapping: grow a set of parallel anchors from a few seed pairs, in rounds."""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_array, check_is_fitted

from ._backend import default_batch_size, make_generator, row_normalize, to_numpy, to_tensor
from ._certificate import CERTIFICATE_THRESHOLD, alignment_certificate, split_halves
from ._compat import Interval, StrOptions, _fit_context
from ._matching import csls_match, relative_factors, sinkhorn_match
from ._optim import LossHistory
from ._self_learning import (
    SOFT_SCHEDULE,
    csls_scores,
    orthogonal_map,
    self_learn,
    soft_self_learn,
)
from ._signatures import pool_svd, principal_basis, seed_profiles, similarity_signatures
from ._sinkhorn import SinkhornError
from .base import BaseAligner, UnpairedPool, check_min_pairs, check_unpaired
from .exceptions import AnchorConsistencyWarning, DiscoveryFailedWarning

__all__ = ["AnchorBootstrapper"]

_DENSE_MAX_ELEMENTS = 2**22  # plan="auto": one block / a dense plan up to about 2000 × 2000
_CONSISTENCY_MIN = 0.8  # warn when fewer of last round's pairs are still mutual
_ROUNDS_MIN_SEEDS = 25  # discovery="auto": fewer seeds start from signatures + self-learning
_SIGNATURE_ROWS = 4000  # rows per side for the signature start (a random subset of a larger pool)
_CERTIFICATE_ROWS = 5000  # source rows the certificate is computed on
_MIN_POOL_ROWS = 50  # zero-pair mode: rows per pool at least
_SOFT_MAX_ITER = 150
#: A self-learning restart whose start pairs score below this held-out certificate (or below
#: ``min_certificate`` if lower) stops before its hard phase. Start certificates seen with zero
#: pairs: 0.025-0.116 against target pools of random vectors (vendored MiniLM pools of 300, 500
#: and 1,000 rows, every restart); 0.331-0.437 for the 13 soft phases that stalled on the
#: development data (3,000-row pools, ten states of three encoder pairs; soft objective
#: 0.11-0.14; the same numbers as with the full patience after a take-off, which changes no
#: start's course before it), 0.023 for the identity start of
#: MiniLM -> e5, and 0.98-0.998 for the 26 starts that went on to pass (five seeds: 0.979-0.998,
#: 30 starts; every start is in ``benchmarks/results/bench_seedless_runs.csv``, column
#: ``restarts``). Failed fits end at certificates up to 0.46 (user guide), so the bar is the
#: certificate's own, 0.5.
_START_CERTIFICATE_MIN = 0.5
#: Keep probability the hard phase starts from. From the soft phase's pairs (mostly right) the
#: random dropping has nothing to escape: from the same soft pairs, 1 took 4 iterations and
#: 1.6-2.2 s where 0.5 took 7-9 and 3.8-5.3 s, to the same top-1 within 0.001 (3,000-row pools
#: of the three encoder pairs, 0 and 5 seeds, five fits: ``benchmarks/seedless_hard_keep.py``).
_HARD_KEEP_PROBABILITY = 1.0


def _default_estimator():
    from ._procrustes import ProcrustesAligner

    return ProcrustesAligner()


def _with_chosen_penalty(est, fitted):
    """``est`` with the penalty ``fitted`` chose, when ``est`` searches one (``alpha="auto"``,
    as :class:`~skalign.LinearAligner`); otherwise ``est`` itself."""
    if est.get_params(deep=False).get("alpha") == "auto" and hasattr(fitted, "alpha_"):
        return clone(est).set_params(alpha=fitted.alpha_)
    return est


def _check_pool_spread(A, name):
    """Discovery compares rows with each other: a pool whose rows are all equal has no structure."""
    A = np.asarray(A)
    if len(A) > 1 and not np.any(np.ptp(A, axis=0) > 0):
        raise ValueError(
            f"{name}: all rows are identical (a constant pool); discovery needs distinct rows."
        )


def _estimator_has(attr):
    def check(self):
        est = getattr(self, "estimator_", None)
        if est is None:
            est = self.estimator if self.estimator is not None else _default_estimator()
        return hasattr(est, attr)

    return check


class AnchorBootstrapper(BaseAligner):
    r"""Discover parallel anchors from a few seed pairs, or none, then fit an aligner on them.

    In plain words: starting from a handful of known pairs (or none), pair the rows of two
    unpaired pools that describe the same items, keep the pairs that are each other's best
    match, and fit an aligner on them. Every fit is checked without ground truth: a map fitted
    on half of the discovered pairs must find the other half (``certificate_``); below
    ``min_certificate`` the fit warns (:class:`~skalign.exceptions.DiscoveryFailedWarning`)
    instead of returning a wrong map in silence.

    A meta-estimator in the manner of :class:`~sklearn.semi_supervised.SelfTrainingClassifier`:
    ``fit(X_seed, y_seed, unpaired=UnpairedPool(X=source_pool, y=target_pool))`` takes the seed
    pairs and two unpaired pools (of possibly different sizes, the target pool in any order);
    ``fit(None, None, unpaired=...)`` is the zero-pair mode. It discovers pairs (source-pool
    row, target-pool row) and fits ``estimator_ = clone(estimator)`` on the seed plus the
    discovered pairs. ``transform``/``predict``/``score`` delegate to ``estimator_``.

    **Two discovery methods** (``discovery``; ``"auto"`` takes self-learning below 25 seed
    pairs, the rounds from 25 on):

    * ``"self_learning"`` (zero to a few seeds): each pool row gets an isometry-invariant
      *similarity signature* (the sorted row of :math:`\sqrt{Z Z^\top}`, vecmap's unsupervised
      start [2]_), concatenated with its cosines to the seed rows when there are seeds; the
      CSLS scores of these profiles start a *soft* self-learning on the top 128 principal
      components of each pool: the orthogonal map is fitted on the candidate pairs (each
      row's 32 most similar rows of the other pool, and each column's) weighted by the
      softmax (temperature 0.02 on the start scores, 0.05 after) of their CSLS scores, the
      scores are recomputed under the map, until the objective stalls (8 iterations without
      growth, 3 once it has taken off to four times its first value; a weak start, 1–2 % of
      rows paired right, takes off where hard pairs stay stuck); its steps are over-relaxed
      (taken three times as far while they keep their direction), which shortens the slow
      climb before the take-off. Its mutual CSLS pairs are the first pseudo-pairs of the hard
      self-learning [2]_ in the full dimension: fit the orthogonal map on the pseudo-pairs
      (seeds weighted 5×), re-pair every source row and every target row with its best CSLS
      partner, until the pairs repeat or the objective stalls for 3 iterations (the stochastic
      dictionary induction of [2]_, dropping scores at random, has nothing to escape from these
      mostly right pairs: it starts at keep probability 1). Up to ``n_restarts`` starts (the
      first three each with its own temperatures and number of principal components, later
      ones from a random 80 % of the rows; when the widths match and there are no seeds, the
      second start is the identity map) are run until one passes the certificate; the best is
      kept. A start whose own pairs fail a cheap held-out test (an orthogonal map fitted on
      half of them must find the other half: the share that ``certificate_`` measures, below
      0.5 or ``min_certificate`` if lower) stops there, before the hard phase and the
      certificate, which would only polish a wrong pairing. The final pairs are the mutual CSLS
      nearest neighbours under the learned map. Memory: dense :math:`n \times m` scores over at most
      ``max_candidates`` rows per side.
    * ``"rounds"`` (the relative-representation rounds described next).

    **Rounds.** Each pool is centred on its mean and its rows (and the seed rows of that side,
    with the same mean) are L2-normalised. With the current anchors
    :math:`A_X, A_Y` (the ``s`` seeds, then the seeds plus the pairs accepted so far), the
    relative representations are the normalised cosine profiles
    :math:`r_X(x) = A_X x / \|A_X x\|`, :math:`r_Y(y) = A_Y y / \|A_Y y\|`, and the similarity
    of source row ``i`` and target row ``j`` is :math:`S_{ij} = r_X(x_i)^\top r_Y(y_j)`. Each
    round builds a correspondence from :math:`S` (``correspondence``):

    * ``"csls"``: hubness-corrected scores
      :math:`\operatorname{CSLS}_{ij} = 2S_{ij} - r^X_i - r^Y_j` (:math:`r^X_i`: mean of row
      ``i``'s ``csls_n_neighbors`` largest similarities, :math:`r^Y_j` likewise per column),
      confidence = the CSLS margin between a source row's best and second-best target;
    * ``"sinkhorn"``: the entropic OT plan for the cost :math:`1 - S` (log-domain Sinkhorn,
      :math:`\varepsilon` = ``sinkhorn_reg`` × median cost), confidence = the share of the row's
      mass on its best target;
    * ``"cosine"``: :math:`S` itself, confidence = its margin.

    The pairs that are mutual best matches are ranked by confidence and the first
    ``n_working_anchors − s`` become the anchors of the next round (as the anchors sharpen, more
    pairs become mutual, so the accepted set grows from round to round). The rounds stop when
    at most a fraction ``tol`` of the pairs to return were not already mutual pairs in the
    previous round, or after ``max_rounds``. The
    discovered anchors are the ``n_anchors − s`` most confident mutual pairs of the last round
    (or, with ``anchor_indices``, the best targets of the given source rows).

    Working with more anchors (``n_working_anchors=1000``) than are finally returned is what makes
    the loop reliable on real encoders: with 285 working anchors MiniLM → multilingual-e5 pairs
    42–80 % of the anchors exactly, with 1,000 98.9–100 % (see the user guide).

    ``refine=True`` adds the anchor optimisation of Cannistraci et al. [1]_ after the rounds:
    free target anchors :math:`\tilde a_k` on the unit sphere minimise
    :math:`\| \hat R_X - Y [L_Y; \tilde A_Y]^\top \|_F^2` (:math:`\hat R_X`: the source relative
    representations carried to the target rows by the last round's mutual pairs) by Adam, and
    are snapped to their nearest target-pool row. On the development data it changed at most one
    pair in 285 (MiniLM → multilingual-e5) for 2–3× the fit time, so it is opt-in.

    Cost and memory: a round is two passes over blocks of :math:`S` (``batch_size`` source rows
    at a time), i.e. :math:`O(n\,m\,\min(a, d_y))` time with ``a`` anchors and
    :math:`O(\text{batch\_size} \cdot m + (n + m)\,d)` memory; the source candidates are a random
    subset of ``max_candidates`` pool rows when the pool is larger.

    Read more in the :ref:`User Guide <bootstrap>`.

    Parameters
    ----------
    estimator : estimator object, default=None
        Aligner fitted on the seed + discovered pairs; ``None`` means
        :class:`~skalign.ProcrustesAligner` with its defaults. Its parameters are searchable as
        ``estimator__<name>`` (also when left at ``None``).
    n_anchors : int or "auto", default="auto"
        Anchors returned in all (seed + discovered); ``"auto"`` returns every mutual pair of
        the final matching (the reliable pairs), so the inner aligner sees as many pairs as
        the pools offer (on 3,000-row pools, 2,900–3,000 pairs instead of 300).
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
        of them with ``n_anchors="auto"``). A map fitted on thousands of discovered pairs pairs
        the pools better than the relative representations did: with a retention-tuned ridge
        inner estimator and 25 seeds, two rounds raised recall@10 retention by 0.011-0.026
        towards or from multilingual-e5 on the development data (:mod:`skalign.plan` uses
        ``map_rounds=2``). Ignored with ``anchor_indices``; stops early when at most ``tol`` of
        the pairs are new. An inner estimator that searches its penalty (``alpha="auto"``)
        searches it for the first fit and the last round's; the rounds between keep the
        penalty chosen before them.
    tol : float, default=0.01
        Stop when at most this fraction of the pairs to return (the ``n_anchors − s`` most
        confident mutual pairs, or those of ``anchor_indices``) were not already mutual pairs in
        the previous round.
    correspondence : {"csls", "sinkhorn", "cosine"}, default="csls"
        How each round pairs the pools (see above; ``discovery="rounds"`` only).
    discovery : {"auto", "self_learning", "rounds"}, default="auto"
        The discovery method (see above); ``"auto"``: self-learning with fewer than 25 seed
        pairs (zero included), the rounds otherwise and without pools.
    n_restarts : int, default=3
        Starts of the self-learning at most; it stops at the first that passes the
        certificate.
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
        Run the anchor optimisation of [1]_ on the final anchors (see above; needs seeds).
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
        Source anchors the inner estimator was fitted on (seed first).
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
        its penalty keeps the one ``estimator_`` chose). On the development data right
        discoveries score 0.85–1.0 and failed ones 0.0–0.44 (user guide); NaN without pools or
        when fewer than two pairs were discovered (``n_anchors`` at most the number of seeds).
    certificate_margin_ : float
        Mean CSLS margin (best minus second best) of those held-out rows.
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
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, estimator=None, *, n_anchors="auto", anchor_indices=None,
                 n_working_anchors=1000, max_rounds=10, map_rounds=0, tol=0.01,
                 correspondence="csls", discovery="auto", n_restarts=3,
                 min_certificate=CERTIFICATE_THRESHOLD, csls_n_neighbors=10, center=True,
                 refine=False, refine_max_iter=250, refine_learning_rate=0.02,
                 sinkhorn_reg=0.05, sinkhorn_max_iter=1000, sinkhorn_tol=1e-3, plan="auto",
                 n_neighbors=64, max_candidates=10000, random_state=None, device="cpu",
                 batch_size=None, verbose=0):
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
        Xp = X if pool is None or pool.X is None else pool.X
        Yp = y if pool is None or pool.y is None else pool.y
        _check_pool_spread(Xp, "unpaired.X")
        _check_pool_spread(Yp, "unpaired.y")
        dev = torch.device(self.device_)
        gen = make_generator(self.random_state, dev)
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
            few = len(X) < _ROUNDS_MIN_SEEDS and pool is not None
            self.discovery_ = "self_learning" if few else "rounds"
        self.restarts_ = []
        if self.discovery_ == "rounds":
            match, src, tgt = self._rounds(LX, LY, XP, YP, gen, given)
        else:
            match = self._self_learning(LX, LY, XP, YP, gen)
        if given is None:  # the most confident mutual pairs of the last round
            pick = self._confident_mutual(match, len(X))
            wanted = min(max(self.n_anchors - len(X), 0), n, m) if self.n_anchors != "auto" \
                else len(pick)
            if len(pick) < wanted:
                warnings.warn(
                    f"AnchorBootstrapper: only {len(pick)} mutual pairs were found, fewer than "
                    f"the {wanted} anchors requested; the inner estimator gets fewer anchors.",
                    UserWarning, stacklevel=2,
                )
        else:  # rows of `given` are the first len(given) candidates
            pick = torch.arange(len(given), device=dev)
        tgt_pick = match.forward[pick]
        self.refine_loss_curve_ = None
        if self.refine and len(pick):
            tgt_pick = self._refine(LX, LY, XP, YP, match, pick, gen)

        self._fit_on_anchors(X, y, Xp, Yp, cand[pick], tgt_pick, match.confidence[pick],
                             match.mutual()[pick], est, gen)
        self.map_rounds_ = []
        if self.map_rounds and given is None and len(pick):
            self._pair_under_map(X, y, Xp, Yp, cand, est, gen)
        self._certify(Xp, Yp, pool, gen, est)
        return self

    def _confident_mutual(self, match, n_seed):
        """Rows of the mutual pairs of ``match``, most confident first; with an integer
        ``n_anchors`` only the ``n_anchors - n_seed`` most confident."""
        mutual = torch.nonzero(match.mutual()).flatten()
        order = torch.argsort(match.confidence[mutual], descending=True, stable=True)
        if self.n_anchors != "auto":
            order = order[:max(self.n_anchors - n_seed, 0)]
        return mutual[order]

    def _fit_on_anchors(self, X, y, Xp, Yp, src, tgt, confidence, mutual, est, gen):
        """Record the discovered pairs (pool rows ``src``, ``tgt``) and fit ``estimator_`` on
        the seeds ``X, y`` plus those pairs."""
        src_np = to_numpy(src).astype(np.int64)
        tgt_np = to_numpy(tgt).astype(np.int64)
        self.anchor_pairs_ = np.column_stack([src_np, tgt_np]).reshape(-1, 2)
        self.anchor_confidence_ = to_numpy(confidence).astype(np.float64)
        self.anchor_mutual_ = to_numpy(mutual).astype(bool)
        self.source_anchors_ = np.vstack([X, np.asarray(Xp)[src_np]])
        self.target_anchors_ = np.vstack([y, np.asarray(Yp)[tgt_np]])
        self.estimator_ = self._inner_estimator(est, gen).fit(self.source_anchors_,
                                                              self.target_anchors_)

    def _pair_under_map(self, X, y, Xp, Yp, cand, est, gen):
        """``map_rounds``: pair the pools again as the fitted map sees them, then refit.

        The candidate rows are translated by ``estimator_`` and paired with the target pool by
        mutual CSLS nearest neighbours (each side centred, as in discovery); ``estimator_`` is
        refitted on the seeds plus those pairs. Stops early when at most ``tol`` of the pairs
        are new.
        """
        dev = torch.device(self.device_)
        Xc = np.asarray(Xp)[to_numpy(cand)]
        V = to_tensor(Yp, dev)
        V = row_normalize(V - V.mean(0) if self.center else V)
        prev = set(map(tuple, self.anchor_pairs_.tolist()))
        for r in range(self.map_rounds):
            t0 = time.perf_counter()
            U = to_tensor(np.asarray(self.estimator_.transform(Xc)), dev)
            U = row_normalize(U - U.mean(0) if self.center else U)
            match = csls_match(U, V, k=self.csls_n_neighbors, batch_size=self.batch_size)
            pick = self._confident_mutual(match, len(X))
            if len(pick) < 2:
                break
            # a penalty searched by cross-validation is searched again only for the last
            # round's fit: the rounds between change a few per cent of the pairs
            inner = est if r == self.map_rounds - 1 else _with_chosen_penalty(est,
                                                                               self.estimator_)
            self._fit_on_anchors(X, y, Xp, Yp, cand[pick], match.forward[pick],
                                 match.confidence[pick], match.mutual()[pick], inner, gen)
            pairs = set(map(tuple, self.anchor_pairs_.tolist()))
            changed = len(pairs - prev) / len(pairs)
            info = {"round": r + 1, "n_pairs": len(pick), "changed": changed,
                    "seconds": time.perf_counter() - t0}
            self.map_rounds_.append(info)
            if self.verbose:
                print(f"[AnchorBootstrapper] map round {r + 1}: {len(pick)} mutual pairs under "
                      f"the fitted map, {changed:.3f} new ({info['seconds']:.2f} s)")
            if changed <= self.tol:
                break
            prev = pairs

    def _inner_estimator(self, est, gen):
        """Clone of ``est`` with this estimator's ``device``, and its ``random_state`` and
        ``batch_size`` where the clone leaves them to the caller (``None``)."""
        est = clone(est)
        own = est.get_params(deep=False)
        if "random_state" in own and own["random_state"] is None:
            # keeps the whole fit repeatable under this estimator's random_state
            seed = int(torch.randint(2**31 - 1, (1,), generator=gen, device=gen.device))
            est.set_params(random_state=seed)
        if "device" in own:
            est.set_params(device=self.device)
        if "batch_size" in own and own["batch_size"] is None:
            est.set_params(batch_size=self.batch_size)
        return est

    def _validate_seedless(self, unpaired):
        """Zero-pair mode: both pools are required; the seed arrays become empty."""
        if not isinstance(unpaired, UnpairedPool) or unpaired.X is None or unpaired.y is None:
            raise ValueError(
                "Without seed pairs (fit(None, None, unpaired=...)), unpaired must be a "
                "skalign.UnpairedPool with both a source pool X and a target pool y."
            )
        for side, A in (("X", unpaired.X), ("y", unpaired.y)):
            if len(A) < _MIN_POOL_ROWS:
                raise ValueError(
                    f"unpaired.{side} has {len(A)} rows; discovery without seed pairs needs at "
                    f"least {_MIN_POOL_ROWS} per pool (a few thousand work best)."
                )
        # validates dtype and finiteness of both pools and sets n_features_in_/out_ and device_
        X, y = self._validate_pair(unpaired.X[:2], unpaired.y[:2])
        check_array(unpaired.X, input_name="unpaired.X")
        check_array(unpaired.y, input_name="unpaired.y")
        return X[:0], y[:0], unpaired

    def _self_learning(self, LX, LY, XP, YP, gen):
        """Signature (+ seed profile) starts, self-learning, restarts kept by the certificate.

        A restart whose start pairs (the soft phase's, or the identity's) fail their own
        held-out certificate (below ``_START_CERTIFICATE_MIN``) stops there: its hard phase and
        certificate are skipped (``restarts_[i]["stopped"]``). The first restart that passes
        the certificate ends the loop.
        """
        sx = self._subset(len(XP), self.max_candidates, gen)
        sy = self._subset(len(YP), self.max_candidates, gen)
        XS, YS = XP[sx], YP[sy]
        identity = len(LX) == 0 and XP.shape[1] == YP.shape[1]
        best, stalled, shared = None, None, {}
        for r in range(self.n_restarts):
            t0 = time.perf_counter()
            n_soft, n_components, temperatures, soft_objective = 0, None, None, None
            if identity and r == 1:  # same width and nothing to go on: the identity is a start
                kind, a, b = "identity", *self._mutual_pairs(XS, YS)
            else:
                kind = "signatures" + ("+seeds" if len(LX) else "")
                # the starts of SOFT_SCHEDULE differ in their settings and keep all rows (fewer
                # rows weaken the signatures); past it a start draws 80 % of the rows, or it
                # would repeat an earlier one
                rows = _SIGNATURE_ROWS if r < len(SOFT_SCHEDULE) else int(
                    0.8 * min(len(XS), len(YS), _SIGNATURE_ROWS))
                ix = self._subset(len(XS), rows, gen)
                iy = self._subset(len(YS), rows, gen)
                # starts on all rows share their start scores and SVDs (the same numbers)
                every_row = len(ix) == len(XS) and len(iy) == len(YS)
                start = shared.get("start") if every_row else None
                if start is None:
                    start = self._signature_start(XS[ix], YS[iy], LX, LY)
                    if every_row:
                        shared["start"] = start
                C, svd_x, svd_y = start
                # each start its own sharpness and subspace (SOFT_SCHEDULE): a start that one
                # setting leaves stuck may take off under another
                n_components, *temperatures = SOFT_SCHEDULE[r % len(SOFT_SCHEDULE)]
                temperatures = tuple(temperatures)
                # fewer, stronger directions: the soft votes of a weak start are mostly noise
                XR = self._principal(XS[ix], LX, n_components, svd_x)
                YR = self._principal(YS[iy], LY, n_components, svd_y)
                W, soft = soft_self_learn(XR[0], YR[0], C, XR[1], YR[1],
                                          start_temperature=temperatures[0],
                                          temperature=temperatures[1],
                                          csls_n_neighbors=self.csls_n_neighbors,
                                          max_iter=_SOFT_MAX_ITER)
                del C, start
                n_soft, soft_objective = len(soft), soft[-1]["objective"]
                a, b = self._mutual_pairs(XR[0] @ W, YR[0])
                a, b = ix[a], iy[b]
            # the certificate of the start pairs, on a split of its own (``gen`` is left as
            # it was, so that a fit is the same whether or not an earlier restart stopped)
            split = torch.Generator(gen.device).manual_seed(gen.initial_seed() + 7919 * r + 1)
            start_cert = self._held_out_pairs(XS, YS, a, b, LX, LY, split)["score"]
            info = {"restart": r + 1, "start": kind, "n_soft_iter": n_soft,
                    "n_components": n_components, "soft_temperatures": temperatures,
                    "soft_objective": soft_objective, "n_start_pairs": len(a),
                    "start_certificate": start_cert}
            stop_below = min(self.min_certificate, _START_CERTIFICATE_MIN)
            if start_cert < stop_below:
                # a start that failed: the hard phase has not rescued one on the development
                # data (see _START_CERTIFICATE_MIN), so neither it nor the certificate is run
                info.update(objective=float("nan"), certificate=float("nan"), n_iter=0,
                            seconds=time.perf_counter() - t0,
                            stopped=f"start certificate {start_cert:.3f} < {stop_below}: "
                                    "hard phase and certificate skipped")
                self.restarts_.append(info)
                if self.verbose:
                    print(f"[AnchorBootstrapper] restart {r + 1}: {kind} start, {n_soft} soft "
                          f"iterations, stopped: {info['stopped']} ({info['seconds']:.1f} s)")
                if stalled is None or start_cert > stalled[0]:
                    stalled = (start_cert, a, b)
                continue
            W, history, objective = self_learn(XS, YS, a, b, LX, LY,
                                               csls_n_neighbors=self.csls_n_neighbors,
                                               p0=_HARD_KEEP_PROBABILITY, generator=gen)
            cert, match = self._held_out_orthogonal(XS, YS, W, LX, LY, gen)
            info.update(objective=objective, certificate=cert["score"], n_iter=len(history),
                        seconds=time.perf_counter() - t0, stopped=None)
            self.restarts_.append(info)
            if self.verbose:
                print(f"[AnchorBootstrapper] restart {r + 1}: {kind} start, {n_soft} soft "
                      f"iterations, {len(a)} pairs, "
                      f"{len(history)} iterations, objective {objective:.4f}, certificate "
                      f"{cert['score']:.3f} ({info['seconds']:.1f} s)")
            if best is None or cert["score"] > best[0]:
                best = (cert["score"], W, history, match)
            if cert["score"] >= self.min_certificate:
                break
        if best is None:  # every start failed: the map of the best one's pairs
            _, a, b = stalled
            best = (float("nan"), orthogonal_map(XS[a].T @ YS[b], LX, LY), [], None)
        _, W, history, match = best
        self.rounds_ = [{"round": i + 1, **h} for i, h in enumerate(history)]
        self.loss_curve_ = [1 - h["objective"] for h in history]
        self.n_iter_ = len(history)
        if match is not None and len(sx) == len(XP) and len(sy) == len(YP):
            return match  # the certificate's matching of the kept map: all rows, same scores
        chunk = max(len(XP), 1) if self.plan_ == "dense" else self.batch_size
        return csls_match(XP @ W, YP, k=self.csls_n_neighbors, batch_size=chunk)

    def _signature_start(self, XS, YS, LX, LY):
        """CSLS scores of the similarity signatures (+ seed profiles) of two pools, and the
        pools' SVDs (their principal bases come from them)."""
        svd_x, svd_y = pool_svd(XS), pool_svd(YS)
        width = min(len(XS), len(YS))
        U = similarity_signatures(XS, width, svd_x)
        V = similarity_signatures(YS, width, svd_y)
        if len(LX):
            U = torch.cat([U, seed_profiles(XS, LX)], 1)
            V = torch.cat([V, seed_profiles(YS, LY)], 1)
        return csls_scores(U @ V.T, self.csls_n_neighbors, overwrite=True), svd_x, svd_y

    def _held_out_orthogonal(self, XS, YS, W, LX, LY, gen):
        """Certificate of a self-learned map: refit on half of its mutual pairs, test the rest.

        Returns the certificate and the map's matching of the pools.
        """
        match = csls_match(XS @ W, YS, k=self.csls_n_neighbors, batch_size=self.batch_size)
        a = torch.nonzero(match.mutual()).flatten()
        return self._held_out_pairs(XS, YS, a, match.forward[a], LX, LY, gen), match

    def _held_out_pairs(self, XS, YS, a, b, LX, LY, gen):
        """The held-out certificate of pairs ``(a, b)`` of pool rows under an orthogonal map:
        fitted on a random half of them (plus the seeds), tested on the other half."""
        fit, test = split_halves(len(a), gen)
        W_half = orthogonal_map(XS[a[fit]].T @ YS[b[fit]], LX, LY, seed_weight=1.0)
        rest = torch.ones(len(YS), dtype=torch.bool, device=YS.device)
        rest[b[fit]] = False
        new_index = torch.cumsum(rest.long(), 0) - 1
        return alignment_certificate(XS[a[test]] @ W_half, YS[rest], new_index[b[test]],
                                     k=self.csls_n_neighbors, batch_size=self.batch_size)

    @staticmethod
    def _principal(Z, L, n_components, svd=None):
        """``Z`` and the seed rows ``L`` on ``Z``'s top principal components, unit rows."""
        B = principal_basis(Z, n_components, svd)
        return row_normalize(Z @ B.T), row_normalize(L @ B.T)

    def _mutual_pairs(self, U, V):
        """Mutual CSLS nearest neighbours of ``U`` and ``V`` (rows compared by inner product)."""
        match = csls_match(U, V, k=self.csls_n_neighbors, batch_size=self.batch_size)
        a = torch.nonzero(match.mutual()).flatten()
        return a, match.forward[a]

    @staticmethod
    def _subset(n, k, gen):
        """All of ``range(n)`` or a sorted random subset of ``k`` of them."""
        if n <= k:
            return torch.arange(n, device=gen.device)
        return torch.sort(torch.randperm(n, generator=gen, device=gen.device)[:k]).values

    def _certify(self, Xp, Yp, pool, gen, est):
        """The held-out success certificate of the discovered pairs; warn below the threshold.

        ``est`` (unfitted) is refitted on the seeds plus a random half of the discovered pairs
        and must find the other half's partners among the target rows it was not fitted on.
        """
        if pool is None or pool.X is None or pool.y is None or len(self.anchor_pairs_) < 2:
            # nothing to certify: no pools, or n_anchors left no room for discovered pairs
            self.certificate_ = float("nan")
            self.certificate_margin_ = float("nan")
            return
        n_seed = len(self.source_anchors_) - len(self.anchor_pairs_)
        src, tgt = self.anchor_pairs_[:, 0], self.anchor_pairs_[:, 1]
        fit, test = (to_numpy(t) for t in split_halves(len(src), gen))
        test = test[:_CERTIFICATE_ROWS]
        half = self._inner_estimator(_with_chosen_penalty(est, self.estimator_), gen).fit(
            np.vstack([self.source_anchors_[:n_seed], np.asarray(Xp)[src[fit]]]),
            np.vstack([self.target_anchors_[:n_seed], np.asarray(Yp)[tgt[fit]]]))
        rest = np.ones(len(Yp), dtype=bool)
        rest[tgt[fit]] = False
        new_index = np.cumsum(rest) - 1
        dev = torch.device(self.device_)
        Y_hat = to_tensor(np.asarray(half.transform(np.asarray(Xp)[src[test]])), dev)
        partner = torch.as_tensor(new_index[tgt[test]], device=dev)
        cert = alignment_certificate(Y_hat, to_tensor(np.asarray(Yp)[rest], dev), partner,
                                     k=self.csls_n_neighbors, batch_size=self.batch_size)
        self.certificate_ = cert["score"]
        self.certificate_margin_ = cert["mean_csls_margin"]
        # every self-learning start failed its own held-out test: failed, whatever the
        # certificate of the map fitted on the least bad start's pairs says
        all_stopped = bool(self.restarts_) and all(r["stopped"] for r in self.restarts_)
        if self.certificate_ < self.min_certificate or all_stopped:
            warnings.warn(
                f"AnchorBootstrapper: discovery probably failed: a map fitted on half of the "
                f"discovered pairs recovers only {self.certificate_:.0%} of the other half "
                f"(min_certificate={self.min_certificate})"
                + (", and every self-learning start failed its own held-out test"
                   if all_stopped else "")
                + ". The fitted map is probably wrong. Give more seed pairs (or check them), "
                "larger pools of the same texts, or more n_restarts; see certificate_ and "
                "restarts_.",
                DiscoveryFailedWarning, stacklevel=3,
            )

    def _given_rows(self, n_pool):
        if self.anchor_indices is None:
            return None
        idx = np.asarray(self.anchor_indices)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise ValueError("anchor_indices must be a 1-D array of integer row indices.")
        if idx.size and (idx.min() < 0 or idx.max() >= n_pool):
            raise ValueError(
                f"anchor_indices must index the source pool's {n_pool} rows, got values in "
                f"[{idx.min()}, {idx.max()}]."
            )
        return idx.astype(np.int64)

    def _candidates(self, n_pool, given, gen):
        """Source-pool rows taking part in the discovery: ``given`` first, then others."""
        dev = gen.device
        if given is None:
            given = np.zeros(0, dtype=np.int64)
        rest = np.setdiff1d(np.arange(n_pool), given)
        k = max(self.max_candidates - len(given), 0)
        if len(rest) > k:
            draw = to_numpy(torch.randperm(len(rest), generator=gen, device=dev)[:k])
            rest = np.sort(rest[draw])
        return torch.as_tensor(np.concatenate([given, rest]), dtype=torch.long, device=dev)

    def _resolve_plan(self, n, m):
        if self.plan != "auto":
            return self.plan
        if n * m <= _DENSE_MAX_ELEMENTS:
            return "dense"
        return "sparse" if self.correspondence == "sinkhorn" else "chunked"

    def _match(self, U, V, gen):
        if self.correspondence == "sinkhorn":
            return self._sinkhorn_match(U, V, gen)
        rows = max(len(U), 1) if self.plan_ == "dense" else self.batch_size
        k = self.csls_n_neighbors if self.correspondence == "csls" else 0
        return csls_match(U, V, k=k, batch_size=rows)

    def _sinkhorn_match(self, U, V, gen):
        """:func:`sinkhorn_match`, its failures reworded with this estimator's parameters."""
        try:
            return sinkhorn_match(U, V, self.sinkhorn_reg, plan=self.plan_,
                                  n_neighbors=self.n_neighbors, batch_size=self.batch_size,
                                  max_iter=self.sinkhorn_max_iter, tol=self.sinkhorn_tol,
                                  generator=gen)
        except SinkhornError as exc:
            if exc.cause == "non_finite":
                advice = f"Increase sinkhorn_reg (now {self.sinkhorn_reg})."
            else:
                advice = (f"Increase sinkhorn_max_iter (now {self.sinkhorn_max_iter}) or "
                          f"sinkhorn_reg (now {self.sinkhorn_reg})")
                if self.plan_ == "sparse":
                    advice += f", or n_neighbors (now {self.n_neighbors}) for a denser support"
                advice += "."
            raise SinkhornError(f"{type(self).__name__}: {exc.diagnosis} {advice}",
                                diagnosis=exc.diagnosis, cause=exc.cause) from exc

    def _rounds(self, LX, LY, XP, YP, gen, given):
        """Grow the anchor set; return the last round's matching and its accepted pairs."""
        s = len(LX)
        src = torch.zeros(0, dtype=torch.long, device=XP.device)
        tgt = torch.zeros_like(src)
        prev, prev_mutual = set(), set()
        self.rounds_, self.loss_curve_ = [], []
        converged = False
        for r in range(self.max_rounds):
            t0 = time.perf_counter()
            U, V = relative_factors(XP, YP, torch.cat([LX, XP[src]]), torch.cat([LY, YP[tgt]]))
            match = self._match(U, V, gen)
            del U, V
            new_src, pairs, mutual_pairs, info = self._round(match, LX, LY, XP, YP, given,
                                                             prev, prev_mutual)
            info = {"round": r + 1, "n_anchors": s + len(src), **info,
                    "seconds": time.perf_counter() - t0, **match.info}
            self.rounds_.append(info)
            self.loss_curve_.append(info["loss"])
            self._print_round(info)
            src, tgt = new_src, match.forward[new_src]
            if r > 0 and info["changed_returned"] <= self.tol:
                converged = True
                break
            prev, prev_mutual = pairs, mutual_pairs
        self.n_iter_ = len(self.rounds_)
        self._warn_if_unreliable(converged)
        return match, src, tgt

    def _round(self, match, LX, LY, XP, YP, given, prev, prev_mutual):
        """The pairs one round accepts, its mutual pairs, and its diagnostics (see ``rounds_``)."""
        keep = max(self.n_working_anchors - len(LX), 0)
        mutual = torch.nonzero(match.mutual()).flatten()
        order = torch.argsort(match.confidence[mutual], descending=True, stable=True)
        new_src = mutual[order[:keep]]
        new_tgt = match.forward[new_src]

        def as_pairs(rows):
            return set(zip(to_numpy(rows).tolist(), to_numpy(match.forward[rows]).tolist()))

        pairs, mutual_pairs = as_pairs(new_src), as_pairs(mutual)
        if given is None:
            n_return = keep if self.n_anchors == "auto" else max(self.n_anchors - len(LX), 0)
            ret = as_pairs(mutual[order[:n_return]])
        else:
            ret = as_pairs(torch.arange(len(given), device=XP.device))
        sim = match.similarity[new_src]
        info = {
            "n_mutual": len(mutual), "n_accepted": len(new_src),
            "mean_confidence": float(match.confidence[new_src].mean())
            if len(new_src) else float("nan"),
            "changed": len(pairs - prev) / max(len(pairs), 1),
            "changed_returned": len(ret - prev_mutual) / max(len(ret), 1),
            "still_mutual": len(prev & mutual_pairs) / len(prev) if prev else float("nan"),
            "seed_agreement": self._seed_agreement(LX, LY, XP[new_src], YP[new_tgt]),
            "loss": float(1 - sim.mean()) if len(new_src) else float("nan"),
        }
        return new_src, pairs, mutual_pairs, info

    def _print_round(self, info):
        if self.verbose:
            print(f"[AnchorBootstrapper] round {info['round']:2d}: {info['n_anchors']:5d} "
                  f"anchors, {info['n_mutual']:6d} mutual, {info['n_accepted']:5d} accepted "
                  f"(mean confidence {info['mean_confidence']:.4f}), changed "
                  f"{info['changed']:.3f} (returned {info['changed_returned']:.3f}), "
                  f"still mutual {info['still_mutual']:.3f}, seed agreement "
                  f"{info['seed_agreement']:.3f} ({info['seconds']:.2f} s)")

    def _warn_if_unreliable(self, converged):
        last = self.rounds_[-1]
        if last["seed_agreement"] < _CONSISTENCY_MIN or (
                self.n_iter_ > 1 and last["still_mutual"] < _CONSISTENCY_MIN):
            warnings.warn(
                f"AnchorBootstrapper: the discovered anchors are not consistent (round "
                f"{last['round']}: {last['still_mutual']:.0%} of the previous round's pairs are "
                f"still mutual best matches, and they pair {last['seed_agreement']:.0%} of the "
                "seed pairs correctly); they are probably wrong. Check that the seed pairs "
                "really are parallel, give more of them, or try correspondence='sinkhorn'; "
                "see rounds_.",
                AnchorConsistencyWarning, stacklevel=4,
            )
        elif not converged and self.n_iter_ > 1:
            warnings.warn(
                f"AnchorBootstrapper: {last['changed_returned']:.1%} of the pairs to return were "
                f"not mutual pairs in the previous round "
                f"in the last of max_rounds={self.max_rounds} rounds; increase max_rounds or tol.",
                ConvergenceWarning, stacklevel=4,
            )

    @staticmethod
    def _seed_agreement(LX, LY, AX, AY):
        """Fraction of seeds whose own target is their best match among the seed targets.

        Relative representations with respect to the accepted pairs only (not the seeds), so the
        seeds are an independent check of the discovered correspondence; NaN without pairs.
        """
        if len(AX) == 0 or len(LX) < 2:
            return float("nan")
        S = row_normalize(LX @ AX.T) @ row_normalize(LY @ AY.T).T
        hits = S.argmax(1) == torch.arange(len(LX), device=S.device)
        return float(hits.float().mean())

    def _refine(self, LX, LY, XP, YP, match, pick, gen):
        """Anchor optimisation [1]: free target anchors on the sphere, Adam, snap to nearest."""
        mutual = torch.nonzero(match.mutual()).flatten()
        RX = XP[mutual] @ torch.cat([LX, XP[pick]]).T  # source relative reps of matched rows
        A, history = self._optimise_anchors(YP[match.forward[mutual]], LY, RX, gen)
        self.refine_loss_curve_ = history.curve
        idx, _ = self._snap(A, YP)
        return idx

    def _optimise_anchors(self, YP, LY, T, gen):
        """Adam on the sphere for the free target anchors; closed-form loss via Gram matrices."""
        s = len(LY)
        m, k = len(YP), T.shape[1] - s
        history = LossHistory(type(self).__name__, max_iter=self.refine_max_iter, tol=1e-6,
                              verbose=self.verbose,
                              divergence_hint="Lower refine_learning_rate.")
        seed_loss = float(((T[:, :s] - YP @ LY.T) ** 2).sum())
        denom = m * (s + k)
        if k == 0:
            history.record(seed_loss / denom)
            return YP[:0], history.finish()
        T64, Y64 = T[:, s:].double(), YP.double()
        G = Y64.T @ Y64
        B = Y64.T @ T64  # (d_y, k)
        t_sq = float((T64 * T64).sum())
        ridge = 1e-6 * float(torch.diagonal(G).mean()) + 1e-12  # normalised least-squares start
        W0 = torch.linalg.solve(G + ridge * torch.eye(len(G), dtype=G.dtype, device=G.device), B).T
        bad = torch.linalg.vector_norm(W0, dim=1) == 0
        if bool(bad.any()):
            W0[bad] = B.T[bad]
        W0 = W0 + (torch.linalg.vector_norm(W0, dim=1, keepdim=True) == 0).double()
        W = torch.nn.Parameter(row_normalize(W0).float())
        G32, B32 = G.float(), B.float()
        opt = torch.optim.Adam([W], lr=self.refine_learning_rate)

        def loss_of(W):
            A = row_normalize(W)
            return (t_sq - 2 * (A * B32.T).sum() + ((A @ G32) * A).sum() + seed_loss) / denom

        for _ in range(self.refine_max_iter):
            opt.zero_grad()
            loss = loss_of(W)
            loss.backward()
            opt.step()
            with torch.no_grad():
                W.data = row_normalize(W.data)
                current = float(loss_of(W))
            if history.record(current):
                break
        return row_normalize(W.detach()), history.finish()

    def _snap(self, A, YP):
        """Nearest target-pool row (cosine) of each anchor, with the top-1 minus top-2 margin."""
        k = len(A)
        idx = torch.empty(k, dtype=torch.long, device=YP.device)
        margin = torch.zeros(k, dtype=YP.dtype, device=YP.device)
        if k == 0:
            return idx, margin
        best = torch.full((k, min(2, len(YP))), -torch.inf, dtype=YP.dtype, device=YP.device)
        best_idx = torch.zeros_like(best, dtype=torch.long)
        step = default_batch_size(k, itemsize=YP.element_size())
        for start in range(0, len(YP), step):
            S = A @ YP[start:start + step].T
            top = torch.topk(S, min(best.shape[1], S.shape[1]), dim=1)
            vals = torch.cat([best, top.values], 1)
            ids = torch.cat([best_idx, top.indices + start], 1)
            order = torch.topk(vals, best.shape[1], dim=1)
            best, best_idx = order.values, torch.gather(ids, 1, order.indices)
        idx = best_idx[:, 0]
        if best.shape[1] > 1:
            margin = best[:, 0] - best[:, 1]
        return idx, margin

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
