r"""Judged queries in :mod:`skalign.plan`: every option priced in nDCG@k against relevance labels.

Agreement with the new model's neighbours cannot tell whether the new model is better on the
user's own queries; judged queries can. Given the judged queries embedded by both models
(row-aligned) and relevance labels of the pairs' items, every option ranks the pairs' items
for every query and is scored by nDCG@k with linear gains, as ``trec_eval``'s ``ndcg_cut``
computes it:

.. math::

    \mathrm{nDCG@}k(q) = \frac{\sum_{r=1}^{k} g_{q, d_r} / \log_2(r + 1)}
    {\sum_{r=1}^{k} g^{*}_{q, r} / \log_2(r + 1)},

``g_{q,d}`` the label of item ``d`` for ``q`` (0 when unjudged), ``g^*_q`` the labels of ``q``
sorted in decreasing order; averaged over the queries with at least one positive label.

* *stay*: old-model queries against the old vectors; *re-embed*: new-model queries against the
  new vectors;
* *translate*: new-model queries against the old vectors translated, and *bridge*: the queries
  mapped into the old space against the old vectors, each item scored by a fit of the
  cross-fitting fold that left it out (an item a map was fitted on would be scored through the
  inner products the fit reproduces);
* *translate + rerank*: the translated top-``K`` re-scored with the new vectors.

The collection is the pairs' items: nDCG@k is for that collection, not carried to another size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._candidates import fit_both_ways, fixed_penalty, make_candidate, unit
from ._law import percentile_ci


def _relevance(value, where):
    """A relevance label: a finite number; below 0 counts as 0, as ``trec_eval`` counts it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: relevance {value!r} is not a number.")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{where}: relevance {value} is not finite.")
    return max(value, 0.0)


def _row(text, where):
    """A query or document row: a non-negative integer, as text or a JSON integer."""
    if isinstance(text, str) and text.strip().isascii() and text.strip().isdigit() \
            and len(text.strip()) <= 18:
        return int(text)
    raise ValueError(f"{where}: row {text!r} is not a non-negative integer.")


def read_qrels(path):
    """Relevance labels from a TREC qrels file (``QUERY-ROW 0 DOC-ROW RELEVANCE`` per line) or
    a JSON object ``{query row: {doc row: relevance}}``.

    Rows are non-negative integers, relevance labels finite numbers; a label below 0 counts
    as 0 (as ``trec_eval`` counts it). JSON is read with bounded nesting
    (:func:`~skalign.utils._input_files.loads_bounded`).

    Returns
    -------
    qrels : dict of int to dict of int to float

    Raises
    ------
    ValueError
        A file that is not qrels; the message is one line naming the file and the line or
        entry.
    """
    from ..utils._input_files import InputFileError, loads_bounded

    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        shape = "a JSON object {query row: {doc row: relevance}}"
        try:
            raw = loads_bounded(text, f"--qrels {path}")
        except InputFileError:
            raise
        except ValueError as exc:
            raise ValueError(f"{path}: not {shape} ({exc}).") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: not {shape}.")
        qrels = {}
        for q, docs in raw.items():
            if not isinstance(docs, dict):
                raise ValueError(f"{path}: query {q!r} maps to a {type(docs).__name__}, not "
                                 f"{{doc row: relevance}} ({shape}).")
            where = f"{path}, query {q!r}"
            qrels[_row(q, path)] = {_row(d, where): _relevance(r, f"{where}, doc {d!r}")
                                    for d, r in docs.items()}
        return qrels
    qrels = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        where = f"{path}, line {i}"
        try:
            q, _, d, r = parts
            q, d = _row(q, where), _row(d, where)
            r = float(r)
        except ValueError:
            raise ValueError(f"{where}: expected 'QUERY-ROW 0 DOC-ROW RELEVANCE' with "
                             f"integer rows, got {line.strip()[:200]!r}.") from None
        qrels.setdefault(q, {})[d] = _relevance(r, where)
    return qrels


def ndcg_per_query(ranked, qrels, queries, k):
    """nDCG@k (linear gains) of each query in ``queries`` given its ranked item rows."""
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        rel = qrels[q]
        gains = np.array([rel.get(int(d), 0.0) for d in ranked[i][:k]])
        ideal = np.sort(np.array(list(rel.values()), dtype=float))[::-1][:k]
        out[i] = (gains * disc[:len(gains)]).sum() / (ideal * disc[:len(ideal)]).sum()
    return out


def judged_rows(qrels, n_queries, n_pairs):
    """The judged query rows (those with a positive label), sorted; a :class:`ValueError` when
    a query row is not one of the ``n_queries`` judged queries, a document row not one of the
    ``n_pairs`` pairs, or no query has a positive label."""
    queries = sorted(q for q, rel in qrels.items() if any(r > 0 for r in rel.values()))
    for q in queries:
        if not 0 <= q < n_queries:
            raise ValueError(f"qrels: query row {q} is out of range: there are {n_queries} "
                             f"judged queries (rows 0 to {n_queries - 1}).")
        bad = next((d for d in qrels[q] if not 0 <= d < n_pairs), None)
        if bad is not None:
            raise ValueError(f"qrels: document row {bad} (query {q}) is out of range: doc rows "
                             f"index the {n_pairs} pairs (rows 0 to {n_pairs - 1}).")
    if not queries:
        raise ValueError("qrels: no query has a positive relevance label.")
    return queries


def check_judged(queries, qrels, X, Y):
    """The judged queries ``(QA, QB)`` checked against the pairs ``X``, ``Y`` and the qrels
    before any work: row-aligned, as wide as the pairs, every labelled row in range
    (:func:`judged_rows`). Raises :class:`ValueError` naming what is wrong."""
    from sklearn.utils import check_array

    if queries is None or len(queries) != 2:
        raise ValueError("qrels need the judged queries embedded by both models: "
                         "queries=(old-model queries, new-model queries).")
    QA = check_array(queries[0], dtype=np.float32, input_name="old-model queries")
    QB = check_array(queries[1], dtype=np.float32, input_name="new-model queries")
    if len(QA) != len(QB) or QA.shape[1] != X.shape[1] or QB.shape[1] != Y.shape[1]:
        raise ValueError(f"the judged queries must be row-aligned and as wide as the pairs: got "
                         f"{QA.shape} (old) and {QB.shape} (new) for {X.shape[1]}-d and "
                         f"{Y.shape[1]}-d pairs.")
    judged_rows(qrels, len(QA), len(X))
    return QA, QB


def _top(scores, k):
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def judged_options(X, Y, QA, QB, qrels, methods, n_splits, k, rerank_k, random_state,
                   n_resamples, confidence):
    """nDCG@k of stay, re-embed, translate, bridge and translate + rerank on the judged queries.

    ``methods`` maps ``"document"``/``"query"`` to the method to price on that side (or
    ``None``). Returns ``{"n_queries", "options": [{"option", "method", "ndcg", "ndcg_ci"}]}``.
    """
    from sklearn.base import clone
    from sklearn.model_selection import KFold

    n = len(X)
    queries = judged_rows(qrels, len(QA), n)
    X, Y, QA, QB = unit(X), unit(Y), unit(QA[queries]), unit(QB[queries])
    depth = min(max(k, rerank_k or 0), n)
    rng = np.random.default_rng([random_state, 5])
    ranked = {("stay", None): _top(QA @ X.T, min(k, n)),
              ("re-embed", None): _top(QB @ Y.T, min(k, n))}
    for option, side in (("translate", "document"), ("bridge queries", "query")):
        name = methods.get(side)
        if name is None:
            continue
        proto = make_candidate(name, n, random_state)
        reverse_proto = fixed_penalty(proto, Y, X, None) if side == "query" else None
        proto = fixed_penalty(proto, X, Y, None)
        scores = np.empty((len(queries), n), dtype=np.float32)
        folds = KFold(n_splits=n_splits, shuffle=True, random_state=random_state).split(X)
        for train, test in folds:
            est, reverse, _, _ = fit_both_ways(clone(proto), X[train], Y[train], None,
                                                (side,), reverse_proto)
            if side == "document":
                scores[:, test] = QB @ unit(est.transform(X[test])).T
            else:
                mapped = reverse.transform(QB) if reverse is not None else \
                    est.inverse_transform(QB)
                scores[:, test] = unit(mapped) @ X[test].T
        ranked[(option, name)] = _top(scores, depth)[:, :k]
        if side == "document" and rerank_k:
            cand = _top(scores, depth)
            exact = np.einsum("qd,qkd->qk", QB, Y[cand])
            order = np.argsort(-exact, axis=1, kind="stable")
            ranked[("translate + rerank", name)] = np.take_along_axis(cand, order,
                                                                      axis=1)[:, :k]
    options = []
    for (option, name), top in ranked.items():
        per = ndcg_per_query(top, qrels, queries, k)
        options.append({"option": option, "method": name, "ndcg": float(per.mean()),
                        "ndcg_ci": percentile_ci(per, n_resamples, confidence, rng)})
    return {"n_queries": len(queries), "collection": n, "k": k, "options": options}


#: cost order of the options (cheapest first)
COST_ORDER = ("stay", "translate", "bridge queries", "translate + rerank", "re-embed")


def judged_choice(judged, tolerance=0.01):
    """The option to recommend on nDCG: ``"stay"`` when nothing beats staying, else the
    cheapest within ``tolerance`` of the best."""
    opts = sorted(judged["options"], key=lambda o: COST_ORDER.index(o["option"]))
    stay = opts[0]
    best = max(o["ndcg"] for o in opts)
    if stay["ndcg"] >= best:
        return stay
    return next(o for o in opts if o["ndcg"] >= best - tolerance)


def _name(o):
    return o["option"] + (f" ({o['method']})" if o["method"] else "")


def judged_reasons(judged, choice, retention_action, tolerance=0.01):
    """The lines that say what decided a verdict made on the judged queries: which option
    scored best, whether the tie rule (the cheapest option within ``tolerance`` nDCG of the
    best) or staying's lead chose ``choice``, and that it overrides ``retention_action``, the
    verdict on recall alone, when the two differ."""
    k = judged["k"]
    opts = sorted(judged["options"], key=lambda o: COST_ORDER.index(o["option"]))
    stay = opts[0]
    best = max(opts, key=lambda o: o["ndcg"])
    lines = [f"judged queries ({judged['n_queries']}, over the {judged['collection']} pairs' "
             "items): " + ", ".join(f"{_name(o)} nDCG@{k} {o['ndcg']:.3f}"
                                    for o in judged["options"])]
    if stay["ndcg"] >= best["ndcg"]:
        others = max((o["ndcg"] for o in opts[1:]), default=float("nan"))
        lines.append(f"neither re-embedding nor any translation beats staying on the judged "
                     f"queries (stay nDCG@{k} {stay['ndcg']:.3f}, the best of the others "
                     f"{others:.3f}): stay")
    elif choice is best or choice["option"] == best["option"]:
        lines.append(f"{_name(best)} scores best on the judged queries (nDCG@{k} "
                     f"{best['ndcg']:.3f}) and no cheaper option is within {tolerance:g} of "
                     f"it: {choice['option']}")
    else:
        lines.append(f"{_name(best)} scores best on the judged queries (nDCG@{k} "
                     f"{best['ndcg']:.3f}), but {_name(choice)} ({choice['ndcg']:.3f}) is "
                     f"within {tolerance:g} of it and cheaper, and the tie rule takes the "
                     f"cheapest option within {tolerance:g} nDCG@{k} of the best: "
                     f"{choice['option']}")
    if retention_action != choice["option"]:
        lines.append(f"the verdict is the judged queries' ({choice['option']}), not recall@{k}'s "
                     f"({retention_action}): recall@{k} measures agreement with re-embedding, "
                     "the judged queries measure relevance")
    return lines
