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
  On the development data (MiniLM, MPNet, multilingual-e5, every ordered pair; 25-500 known
  pairs, samples of 2,000 texts) 96.9-99.9 % of the 1,403-1,952 pairs discovered were right
  (``5ae3bf6:benchmarks/plan_pseudo_pairs.py``), and every estimate was within 0.05 of the retention
  measured on a separate store of 2,000 other texts (90 of 90, largest error 0.014;
  ``benchmarks/bench_migrate_peers.py``). The store holds the items the pairing found, mutual
  nearest neighbours: if the samples share only part of their items, it is biased towards the
  items that are easiest to match.
* *Cross-fitting over the pairs* otherwise. The pairs are split into ``n_splits`` folds and
  each method is fitted on all folds but one. On the document side every pair's old vector is
  translated by the fit that left its fold out, and the pairs put back together are the
  evaluation store (each item a query against the others; nothing a translation was fitted on
  is translated by it). Bridged queries cannot be scored on that store: a map reproduces the
  inner products of the items it was fitted on (+0.1 recall@10 at 200 development pairs), so
  the query side is measured on each held-out fold alone, next to the document side on the same
  fold, and the ratio of the two above chance scales the document side's estimate
  (:func:`skalign.plan._estimate._bridged`). The fits see ``(n_splits - 1) / n_splits`` of the
  pairs.

**Store size.** Retention is measured on nested random sub-stores of the evaluation store and
carried to ``store_size`` by a power law in the store size (:mod:`skalign.plan._law`, which
also makes the interval); with too few pairs to measure the decay the estimate is marked
unsupported and its interval runs from chance to what the pairs measured.

**Options.** Besides translating and bridging, the plan prices *staying* on the old model (its
own top-k against the new model's, measured on the pairs, carried by the same law), *translate +
rerank* (the translated top-``K`` re-scored by the new encoder; :mod:`skalign.plan._options`)
and *re-embedding* (every stored text encoded), and recommends the cheapest option whose
estimate keeps ``min_recall``. With judged queries every option is also priced in nDCG@k
against the labels and the recommendation is made on that (:mod:`skalign.plan._judged`).

**Budget curve.** A fixed random fifth of the pairs (at least 50) is held out as evaluation
store; each method is fitted on random subsets of 25, 50, 100, 200, 500, 1,000, 2,000, ... of
the remaining pairs (``n_repeats`` subsets up to 200 pairs, one above; the bootstrap, the
slowest, once at 25, 500 and all), scored on the held-out store and carried to ``store_size``.
It says where translating overtakes staying, and what ``budget`` pairs would keep.

**What migrate writes.** ``skalign migrate --budget B`` writes the ``B`` encoded rows' exact
vectors among calibrated translations, or translations only, whichever the held-out check on
the pairs prefers (:mod:`skalign._migrate.calibration`); ``budget`` is priced as that store:
its recall on the evaluation store with a share ``B / store_size`` of the rows exact, carried
to ``B`` pairs by the budget curve (:func:`skalign.plan._options.written_at_budget`).

**Ceiling.** What a map from the old space can carry is estimated by an *oracle* fit: the best
of a ridge map (alpha by leave-one-out CV) and centred Procrustes fitted on **all** pairs and
scored on those same pairs, in sample, carried to ``store_size``. It is an optimistic bound for
affine maps and a rough one for any map.

**Bootstrap left out.** With the default candidates, the bootstrap is not estimated when the
unpaired samples hold fewer rows that are not known pairs than a held-out fold (for example,
samples drawn from the same items as the pairs): it could only find the known pairs again.

Every fallback, ignored input and extrapolation is recorded in ``MigrationPlan.notes`` and
issued as a ``UserWarning``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict

import numpy as np

# MAP_ROUNDS ... STORE_PARTS, the constants the docstring names, and Estimate, the type of
# MigrationPlan.estimates, are defined with the code that uses them and exported from here
from ._candidates import DEFAULT_METHODS, candidate_methods, make_candidate
from ._candidates import MAP_ROUNDS as MAP_ROUNDS
from ._candidates import RIDGE_ALPHAS as RIDGE_ALPHAS
from ._curve import CURVE_COUNTS as CURVE_COUNTS
from ._curve import _ceiling, _learning_curve, scale_curves
from ._estimate import _bridged, _estimate
from ._fits import STORE_PARTS as STORE_PARTS
from ._fits import _cross_fit, _store_fit
from ._options import _budget, _options, rerank_option, stay_estimate, written_at_budget
from ._recommend import _recommend
from ._report import write_report
from ._result import Estimate as Estimate
from ._result import MigrationPlan
from ._store import MIN_CERTIFICATE, _duplicates, _pseudo_store, _unit

__all__ = ["MigrationPlan", "candidate_methods", "make_candidate", "plan_migration",
           "write_report"]


def _doc_store(name, folds):
    """The document side's evaluation store: every held-out fold put back together (each item
    translated by a fit that never saw it). A method that also maps the queries
    (``transform_target``) is scored on its first fold alone, where index and queries come from
    the same fit."""
    if len(folds) == 1 or hasattr(make_candidate(name), "transform_target"):
        return folds[0]
    return tuple(np.concatenate([f[i] for f in folds]) for i in range(3))


def _judge(plan, X, Y, queries, qrels, n_splits, random_state, n_resamples, confidence,
           sides):
    """Price every option in nDCG@k on the judged queries and recommend on that."""
    from sklearn.utils import check_array

    from ._judged import judged_choice, judged_options, judged_reasons

    if queries is None or len(queries) != 2:
        raise ValueError("qrels need the judged queries embedded by both models: "
                         "queries=(old-model queries, new-model queries).")
    QA = check_array(queries[0], dtype=np.float32, input_name="old-model queries")
    QB = check_array(queries[1], dtype=np.float32, input_name="new-model queries")
    if len(QA) != len(QB) or QA.shape[1] != X.shape[1] or QB.shape[1] != Y.shape[1]:
        raise ValueError(f"the judged queries must be row-aligned and as wide as the pairs: got "
                         f"{QA.shape} (old) and {QB.shape} (new) for {X.shape[1]}-d and "
                         f"{Y.shape[1]}-d pairs.")
    methods = {side: getattr(plan.best(side), "method", None) for side in sides}
    rerank_k = plan.rerank["k_candidates"] if plan.rerank else 100
    plan.judged = judged_options(X, Y, QA, QB, qrels, methods, n_splits, plan.k, rerank_k,
                                 random_state, n_resamples, confidence)
    choice = judged_choice(plan.judged)
    rec = plan.recommendation
    lines = judged_reasons(plan.judged, choice, rec["action"])
    action = choice["option"]
    method = choice["method"]
    side = {"translate": "document", "translate + rerank": "document",
            "bridge queries": "query"}.get(action)
    est = next((e for e in plan.estimates if e.method == method and e.side == side), None)
    from ._recommend import _commands

    rec.update(action=action, method=method, side=side,
               reasons=rec["reasons"] + lines,
               commands=_commands(est, plan, rerank=action == "translate + rerank")
               if est is not None else [])


def plan_migration(X, Y, *, unpaired=None, methods=None, sides=("document", "query"), k=10,
                   n_splits=None, store_size=None, curve=True, n_repeats=3, n_resamples=1000,
                   confidence=0.95, min_recall=0.6, normalize=True, max_unpaired=2000,
                   queries=None, qrels=None, budget=None, random_state=0):
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
        have to absorb: on the development data it raised MiniLM → multilingual-e5 retention of
        Procrustes from 0.22 to 0.41. The recommended model then expects normalised rows.
    max_unpaired : int, default=2000
        Rows drawn at random from each unpaired sample.
    queries : (array-like, array-like), default=None
        Judged queries embedded by the old and by the new model, row-aligned; with ``qrels``
        every option is also priced in nDCG@k against the labels, and the recommendation is
        made on that (:mod:`skalign.plan._judged`).
    qrels : dict, default=None
        ``{query row: {pair row: relevance}}`` (:func:`skalign.plan._judged.read_qrels` reads
        TREC qrels or JSON files).
    budget : int, default=None
        Pairs the user can afford to re-embed: the budget curve (which needs ``curve``) is read
        at that count.
    random_state : int, default=0
        Seeds the folds, subsets, resamples and the randomised methods.

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
    from sklearn.utils import check_array, check_consistent_length

    from ..base import UnpairedPool

    t0 = time.perf_counter()
    if (qrels is None) != (queries is None):
        raise ValueError("judged queries need both the queries (embedded by each model) and "
                         "their qrels.")
    judged_queries = queries
    X = check_array(X, dtype=np.float32, input_name="X")
    Y = check_array(Y, dtype=np.float32, input_name="Y")
    check_consistent_length(X, Y)
    if qrels is not None:  # before any fit
        from ._judged import check_judged

        check_judged(queries, qrels, X, Y)
    n = len(X)
    if n_splits is None:
        n_splits = int(np.clip(n // (4 * k), 2, 5))
    if n // n_splits < k + 2:
        raise ValueError(f"plan needs at least {n_splits * (k + 2)} pairs for {n_splits}-fold "
                         f"estimates of recall@{k} (each held-out fold a store of more than "
                         f"{k + 1} items), got {n}.")
    sides = tuple(sides)
    if not sides or set(sides) - {"document", "query"}:
        raise ValueError(f"sides must be 'document' and/or 'query', got {sides!r}.")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    rng = np.random.default_rng(random_state)
    norms = {"source": float(np.linalg.norm(X, axis=1).mean()),
             "target": float(np.linalg.norm(Y, axis=1).mean())}
    if unpaired is not None:
        P = None if unpaired.X is None else check_array(unpaired.X, dtype=np.float32,
                                                        input_name="unpaired source")
        Q = None if unpaired.y is None else check_array(unpaired.y, dtype=np.float32,
                                                        input_name="unpaired target")
        if P is not None and P.shape[1] != X.shape[1]:
            raise ValueError(f"the unpaired source sample has {P.shape[1]}-d rows but the "
                             f"pairs' source side is {X.shape[1]}-d.")
        if Q is not None and Q.shape[1] != Y.shape[1]:
            raise ValueError(f"the unpaired target sample has {Q.shape[1]}-d rows but the "
                             f"pairs' target side is {Y.shape[1]}-d.")
        if P is not None and len(P) > max_unpaired:
            P = P[np.sort(rng.choice(len(P), max_unpaired, replace=False))]
        if Q is not None and len(Q) > max_unpaired:
            Q = Q[np.sort(rng.choice(len(Q), max_unpaired, replace=False))]
        unpaired = UnpairedPool(X=P, y=Q)
    has_pools = unpaired is not None and unpaired.X is not None and unpaired.y is not None
    notes = []
    if unpaired is not None and not has_pools and (unpaired.X is not None or
                                                   unpaired.y is not None):
        given, missing = (("source", "target") if unpaired.X is not None else
                          ("target", "source"))
        notes.append(f"an unpaired {given} sample without an unpaired {missing} sample is "
                     f"ignored: the bootstrap and the store discovered in the samples need both")
    if normalize:
        X, Y = _unit(X), _unit(Y)
        if unpaired is not None:
            unpaired = UnpairedPool(X=None if unpaired.X is None else _unit(unpaired.X),
                                    y=None if unpaired.y is None else _unit(unpaired.y))
    defaults = methods is None
    if defaults:
        methods = [m for m in DEFAULT_METHODS if m != "bootstrap" or has_pools]
    methods = list(dict.fromkeys(methods))
    for name in methods:
        make_candidate(name, n, random_state)  # unknown names fail before any work
        if name == "bootstrap" and not has_pools:
            raise ValueError("the bootstrap candidate needs unpaired samples of both stores "
                             "(--unpaired-source and --unpaired-target).")
    store_size = n if store_size is None else int(store_size)
    if store_size < k + 2:
        raise ValueError(f"store_size must exceed k + 1 = {k + 1}, got {store_size}.")

    plan = MigrationPlan(n_pairs=n, n_unpaired_source=0 if unpaired is None or unpaired.X is
                         None else len(unpaired.X), n_unpaired_target=0 if unpaired is None or
                         unpaired.y is None else len(unpaired.y), k=k, normalized=bool(normalize),
                         row_norms=norms, store_size=store_size, confidence=confidence,
                         min_recall=min_recall)
    store = None
    plan.evaluation = {"store": "cross-validation", "size": int(n // n_splits),
                       "n_splits": int(n_splits)}
    if has_pools:
        # worth it only when larger than a held-out fold (and each half above 2 (k + 1) items)
        min_size = max(n // n_splits + 1, 4 * (k + 1))
        free_p, free_q = ~_duplicates(unpaired.X, X), ~_duplicates(unpaired.y, Y)
        n_new = int(min(free_p.sum(), free_q.sum()))
        plan.evaluation["unpaired_new_rows"] = n_new
        if n_new < min_size and defaults and "bootstrap" in methods:
            # the bootstrap could only find the known pairs again: a map on the pairs alone
            # is the same fit without the duplicates
            methods.remove("bootstrap")
            plan.evaluation["bootstrap_left_out"] = (
                f"the unpaired samples hold only {n_new} rows that are not known pairs (fewer "
                f"than {min_size}); the bootstrap would find little beyond the known pairs")
        if n_new >= min_size:
            store = _pseudo_store(X, Y, unpaired, free_p, free_q, random_state)
            size = len(store["source"])
            cert = store["certificate"]
            plan.evaluation.update(pseudo_pairs=int(size),
                                   certificate=None if np.isnan(cert) else cert)
            if cert >= MIN_CERTIFICATE and size >= min_size:  # NaN: no certificate, no store
                plan.evaluation.update(store="pseudo-pairs", size=int(size))
            else:
                store = None
    if has_pools and store is None:
        notes.append("no evaluation store could be discovered in the unpaired samples ("
                     + (f"bootstrap certificate {plan.evaluation['certificate']:.2f} below "
                        f"{MIN_CERTIFICATE}" if plan.evaluation.get("certificate") is not None
                        else "too few rows that are not known pairs")
                     + f"): estimated by {n_splits}-fold cross-validation over the pairs")
    fit_sides = tuple(dict.fromkeys(("document",) + sides))
    doc_stores = {}
    for name in methods:
        if store is None:
            out, fit_s, how = _cross_fit(name, X, Y, unpaired, fit_sides, n_splits, random_state)
            Y_eval = Y
        else:
            out, fit_s, how = _store_fit(name, X, Y, unpaired, store, fit_sides, random_state)
            Y_eval = unpaired.y[store["target"]]
        test, index, queries = _doc_store(name, out["document"])
        doc_stores[name] = (Y_eval[test], index, queries)
        doc = _estimate(name, "document", Y_eval[test], index, queries, k, store_size,
                        n_resamples, confidence, rng, fit_s, how["document"])
        if "document" in sides:
            plan.estimates.append(doc)
        if "query" in sides and "query" in out:
            folds = out["query"]
            if len(folds) == 1:
                test, index, queries = folds[0]
                plan.estimates.append(_estimate(name, "query", Y_eval[test], index, queries, k,
                                                store_size, n_resamples, confidence, rng, fit_s,
                                                how["query"]))
            else:
                plan.estimates.append(_bridged(doc, name, Y_eval, out["document"], folds, k,
                                               n_resamples, confidence, rng, fit_s,
                                               how["query"]))
    plan.stay = asdict(stay_estimate(X, Y, k, store_size, n_resamples, confidence,
                                     np.random.default_rng([random_state, 3])))
    if curve:
        curves, plan.curve_store_size = _learning_curve(methods, X, Y, unpaired, k, n_repeats,
                                                        random_state)
        plan.learning_curve = scale_curves(curves, plan.estimates)
    plan.ceiling = _ceiling(X, Y, k, store_size, n_resamples, confidence, random_state)
    best_doc = plan.best("document")
    if best_doc is not None:
        plan.rerank = rerank_option(*doc_stores[best_doc.method], k, store_size,
                                    max(min_recall, plan.stay["recall"]), n_resamples,
                                    confidence, np.random.default_rng([random_state, 4]))
    measured = {e.measured_size for e in plan.estimates}
    if any(e.extrapolated for e in plan.estimates):
        notes.append(f"every estimate is carried from an evaluation store of "
                     f"{', '.join(map(str, sorted(measured)))} items to {store_size} by the "
                     "store-size law (skalign.plan._law); the intervals widen with the distance")
    if any(not e.supported for e in plan.estimates):
        notes.append(f"{n} pairs are too few to measure how retention falls with the store size "
                     "(sub-stores of fewer than 4 k items): the estimates are unsupported, their "
                     "intervals run from chance to what the pairs measured")
    if budget is not None and not plan.learning_curve:
        notes.append(f"--budget {budget} is not priced: it is read off the budget curve, which "
                     + ("--no-curve skipped" if not curve else f"{n} pairs are too few for"))
    plan.budget = _budget(plan, budget)
    if best_doc is not None:  # migrate --budget writes exact rows among translations
        written_at_budget(plan, *doc_stores[best_doc.method][:2], random_state)
    plan.options = _options(plan)
    plan.recommendation = _recommend(plan, plan.learning_curve)
    if qrels is not None:
        _judge(plan, X, Y, judged_queries, qrels, n_splits, random_state, n_resamples, confidence,
               sides)
    plan.notes = notes
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    plan.seconds = time.perf_counter() - t0
    return plan
