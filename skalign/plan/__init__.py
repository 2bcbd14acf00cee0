"""Plan a vector-store migration: what each method keeps of re-embedding, before running it.

:func:`plan_migration` takes a sample of paired items (old-encoder and new-encoder embeddings of
the same texts, row for row) and, optionally, unpaired samples of both stores, and estimates for
each candidate method and each side of the migration

* **document side**: the stored documents are translated into the new space and searched with
  the new encoder's queries;
* **query side** (bridging): the new encoder's queries are mapped into the old space and
  searched in the untouched old index;

the *retention* against re-embedding: recall@k and nDCG@k of the migrated setup's top-k against
the top-k of the index the new encoder would build (:func:`skalign.metrics.retrieval_retention`).

How the numbers are made
------------------------
**Evaluation store.** Retention in a store of ``M`` items can only be measured on ``M`` items
whose old and new vectors are both known, and none of which a map was fitted on. Two sources:

* *Pairs discovered in the unpaired samples* (used whenever samples of both stores are given,
  the bootstrap's certificate is at least ``MIN_CERTIFICATE`` and the store is larger than a
  held-out fold would be). The bootstrap candidate is fitted on all known pairs plus the
  samples; a source row ``p`` and a target row ``q`` of the samples form a pair when each is the
  other's nearest neighbour under that map, ``argmax_j cos(f(p), q_j) = q`` and
  ``argmax_i cos(f(p_i), q) = p``; rows that repeat a known pair are left out. Every candidate
  is then fitted on **all** known pairs, exactly as it would be for the migration, and scored on
  this store. A candidate that learns from the samples itself (the bootstrap) is cross-fitted
  over ``STORE_PARTS`` parts of the store, each fit without that part's rows in its samples.
  How right the discovered pairs and the estimates on them were on the development data is
  told in the developers' studies. The store holds the items the pairing found, mutual
  nearest neighbours: if the samples share only part of their items, it is biased towards the
  items that are easiest to match.
* *Cross-fitting over the pairs* otherwise. The pairs are split into ``n_splits`` folds and
  each method is fitted on all folds but one. On the document side every pair's old vector is
  translated by the fit that left its fold out, and the pairs put back together are the
  evaluation store (each item a query against the others; nothing a translation was fitted on
  is translated by it). Bridged queries cannot be scored on that store: a map reproduces the
  inner products of the items it was fitted on, which inflates them, so the query side is
  measured on each held-out fold alone, next to the document side on the same fold, and the
  ratio of the two above chance scales the document side's estimate. The fits see
  ``(n_splits - 1) / n_splits`` of the pairs.

**Store size.** Retention is measured on nested random sub-stores of the evaluation store and
carried to ``store_size`` by a power law in the store size, which also widens the interval
(the user guide's :ref:`plan` page gives the law); with too few pairs to measure the decay the
estimate is marked unsupported and its interval runs from chance to what the pairs measured.

**Options.** Besides translating and bridging, the plan prices *staying* on the old model (its
own top-k against the new model's, measured on the pairs, carried by the same law), *translate +
rerank* (the translated top-``K`` re-scored by the new encoder) and *re-embedding* (every
stored text encoded), and recommends the cheapest option whose estimate keeps ``min_recall``.
With a ``budget``, when several options keep it, the option that keeps the most within the
budget is named beside it when its gain is larger than the overlap of the two intervals
(``recommendation["most_within_budget"]``). With judged queries every option is also priced in
nDCG@k against the labels and the recommendation is made on that.

**Budget curve.** A fixed random fifth of the pairs (at least 50) is held out as evaluation
store; each method is fitted on random subsets of 25, 50, 100, 200, 500, 1,000, 2,000, ... of
the remaining pairs (``n_repeats`` subsets up to 200 pairs, one above; the bootstrap, the
slowest, once at 25, 500 and all), scored on the held-out store and carried to ``store_size``.
It says where translating overtakes staying, and what ``budget`` pairs would keep.

**What migrate writes.** ``skalign migrate --budget B`` writes the ``B`` encoded rows' exact
vectors among calibrated translations, or translations only, whichever the held-out check on
the pairs prefers; ``budget`` is priced as that store: its recall on the evaluation store with
a share ``B / store_size`` of the rows exact, carried to ``B`` pairs by the budget curve.

**Ceiling.** What a map from the old space can carry is estimated by an *oracle* fit: the best
of a ridge map (alpha by leave-one-out CV) and centred Procrustes fitted on **all** pairs and
scored on those same pairs, in sample, carried to ``store_size``. It is an optimistic bound for
affine maps and a rough one for any map.

**Bootstrap left out.** With the default candidates, the bootstrap is not estimated when the
unpaired samples hold fewer rows that are not known pairs than a held-out fold (for example,
samples drawn from the same items as the pairs): it could only find the known pairs again.

Every fallback, ignored input and extrapolation is recorded in ``MigrationPlan.notes`` and
issued as a ``UserWarning``.

How the plan runs
-----------------
:func:`plan_migration` is a pipeline of stages, each a function of the stages before it: the
inputs checked (the candidates built once, the judged queries checked), the evaluation store and
the held-out fits (every fit made once, the judged queries' included), the estimates (the
store-size law inside), the options and the recommendation (judged queries included), and the
:class:`MigrationPlan`, built once at the end and not changed after. The stages live in four
modules, one per kind of work: checking, fitting, estimating, choosing.
"""

from __future__ import annotations

import time
import warnings

# MAP_ROUNDS ... STORE_PARTS, the constants the docstring names, live with the stage that uses them
from ._estimate import Estimate, estimates
from ._fits import CURVE_COUNTS as CURVE_COUNTS
from ._fits import MIN_CERTIFICATE as MIN_CERTIFICATE
from ._fits import STORE_PARTS as STORE_PARTS
from ._fits import evaluation_store, held_out_fits
from ._inputs import MAP_ROUNDS as MAP_ROUNDS
from ._inputs import RIDGE_ALPHAS as RIDGE_ALPHAS
from ._inputs import candidate_methods, check_inputs, make_candidate
from ._recommend import price_options, recommend
from ._report import write_report
from ._result import MigrationPlan

__all__ = ["Estimate", "MigrationPlan", "candidate_methods", "make_candidate", "plan_migration",
           "write_report"]


def __dir__():
    # the public names and the constants the docstring names; the stage modules, which Python
    # sets as attributes of the package, are its own business
    return sorted(__all__ + ["CURVE_COUNTS", "MAP_ROUNDS", "MIN_CERTIFICATE", "RIDGE_ALPHAS",
                             "STORE_PARTS"])


def plan_migration(X, Y, *, unpaired=None, methods=None, sides=("document", "query"), k=10,
                   n_splits=None, store_size=None, curve=True, n_repeats=3, n_resamples=1000,
                   confidence=0.95, min_recall=0.6, normalize=True, max_unpaired=2000,
                   queries=None, qrels=None, budget=None, random_state=0, lean=False):
    """Estimate what each migration method keeps of re-embedding, and recommend one.

    See the module docstring for how every number is made.

    Parameters
    ----------
    X : array-like of shape (n_pairs, n_features_old)
        Old-encoder embeddings of the paired items.
    Y : array-like of shape (n_pairs, n_features_new)
        New-encoder embeddings of the same items, row for row.
    unpaired : UnpairedPool, default=None
        Unpaired samples of the old (``X``) and new (``y``) stores; they enable the
        ``"bootstrap"`` candidate. Each side is subsampled to ``max_unpaired`` rows.
    methods : list of str, default=None
        Candidates from :func:`candidate_methods`; ``None`` means procrustes, linear and, with
        both unpaired samples holding enough rows that are not known pairs (more than a
        held-out fold), bootstrap.
    sides : tuple of {"document", "query"}, default=("document", "query")
        Which sides of the migration to estimate.
    k : int, default=10
        Neighbourhood size of the retention metrics.
    n_splits : int, default=None
        Folds of the cross-validated estimate; ``None``: ``n_pairs // (4 k)`` clipped to
        [2, 5], so that every held-out fold is a store of at least ``4 k`` items where possible.
    store_size : int, default=None
        Store size the estimates are for; any other size than a held-out fold's is
        extrapolated (see above). ``None``: ``n_pairs``.
    curve : bool, default=True
        Compute the learning curve.
    n_repeats : int, default=3
        Random subsets per learning-curve point.
    n_resamples : int, default=1000
        Bootstrap resamples of the queries for the confidence intervals.
    confidence : float, default=0.95
        Coverage of the intervals.
    min_recall : float, default=0.6
        The recall@k to keep: the recommendation is the cheapest option predicted to keep it.
    normalize : bool, default=True
        L2-normalise every row before fitting. Search is by cosine, so this changes no
        neighbourhood of the inputs, but it removes scale differences the maps would otherwise
        have to absorb (between encoders of different row norms it matters most). The
        recommended model then expects normalised rows.
    max_unpaired : int, default=2000
        Rows drawn at random from each unpaired sample.
    queries : (array-like, array-like), default=None
        Judged queries embedded by the old and by the new model, row-aligned; with ``qrels``
        every option is also priced in nDCG@k against the labels, and the recommendation is
        made on that.
    qrels : dict, default=None
        ``{query row: {pair row: relevance}}`` (``skalign plan --qrels`` reads them from TREC
        qrels or JSON files).
    budget : int, default=None
        Pairs the user can afford to re-embed: the budget curve (which needs ``curve``) is read
        at that count, and the option that keeps the most within it is named beside the
        recommendation when several keep ``min_recall``.
    random_state : int, default=0
        Seeds the folds, subsets, resamples and the randomised methods.
    lean : bool, default=False
        Skip what only a report reads: the ceiling's oracle fits (``ceiling`` is empty and
        the budget curve's extrapolation is capped at 1 instead) and the translate + rerank
        option (``rerank`` is empty and never recommended). The estimates, staying and the
        choice among stay, translate and bridge are those of the full plan; ``skalign
        migrate``, which writes a translation and reports none of these, plans lean.

    Returns
    -------
    plan : MigrationPlan
        The estimates, options, budget curve, ceiling and recommendation.

    Examples
    --------
    >>> from skalign.datasets import load_docstring_embeddings
    >>> from skalign.plan import plan_migration
    >>> E = load_docstring_embeddings().embeddings
    >>> plan = plan_migration(E["minilm_l6"][:300], E["mpnet_base"][:300],
    ...                       methods=["procrustes"], curve=False, n_resamples=100)
    >>> plan.recommendation["action"] in ("stay", "translate", "bridge queries",
    ...                                   "translate + rerank", "re-embed")
    True
    """
    t0 = time.perf_counter()
    inputs = check_inputs(X, Y, unpaired=unpaired, methods=methods, sides=sides, k=k,
                          n_splits=n_splits, store_size=store_size, curve=curve,
                          n_repeats=n_repeats, n_resamples=n_resamples, confidence=confidence,
                          min_recall=min_recall, normalize=normalize, max_unpaired=max_unpaired,
                          queries=queries, qrels=qrels, budget=budget,
                          random_state=random_state, lean=lean)
    store = evaluation_store(inputs)
    fits = held_out_fits(inputs, store)
    est = estimates(inputs, fits)
    opts = price_options(inputs, est)
    rec = recommend(inputs, est, opts, fits)
    notes = list(inputs.notes + store.notes + est.notes + opts.notes)
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    return MigrationPlan(
        n_pairs=inputs.n_pairs, n_unpaired_source=inputs.n_unpaired_source,
        n_unpaired_target=inputs.n_unpaired_target, k=k,
        normalized=inputs.normalize, row_norms=inputs.row_norms, store_size=inputs.store_size,
        confidence=confidence, min_recall=min_recall, estimates=est.estimates,
        learning_curve=est.learning_curve, curve_store_size=est.curve_store_size,
        evaluation=store.evaluation, ceiling=est.ceiling, recommendation=rec.recommendation,
        seconds=time.perf_counter() - t0, stay=est.stay, rerank=est.rerank,
        budget=opts.budget, options=opts.options, notes=notes, judged=rec.judged)
