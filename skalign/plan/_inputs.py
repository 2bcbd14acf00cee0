"""Stage 1 of :mod:`skalign.plan`: the inputs checked, subsampled and normalised, before any fit.

:func:`check_inputs` fails on every wrong input with a one-line ``ValueError`` and returns
:class:`Inputs`, what every later stage reads: the rows, the candidate methods built once
(:class:`Candidate`: each estimator and what it needs), and the judged queries with their
relevance labels checked against the pairs (:func:`read_qrels` reads the labels from a file).
:func:`candidate_methods` and :func:`make_candidate` are public through :mod:`skalign.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Candidate", "Inputs", "candidate_methods", "check_inputs", "make_candidate",
           "read_qrels"]

#: penalties of the ridge candidate: on unit rows, from next to no shrinkage to strong
#: shrinkage, where neighbourhood retention changes (the choice is by retention, not by MSE)
RIDGE_ALPHAS = tuple(float(a) for a in np.logspace(-3, 1, 9))
#: rounds of pairing the unpaired samples again under the bootstrap's fitted map
#: (:doc:`/developers/studies`, ``bootstrap_map_rounds.py``)
MAP_ROUNDS = 2
#: the plan's default candidates (``"bootstrap"`` only with unpaired samples)
DEFAULT_METHODS = ("procrustes", "linear", "bootstrap")


def candidate_methods():
    """Short names ``plan_migration`` accepts, each with what it builds.

    Returns
    -------
    methods : dict of str to str
        Name → description.
    """
    return {
        "procrustes": "ProcrustesAligner() - centred orthogonal map",
        "linear": "LinearAligner(alphas=10^-3..10^1, two per decade, scoring="
                  "'recall_retention') - ridge map, alpha by 5-fold recall@10 retention",
        "bootstrap": "AnchorBootstrapper(LinearAligner(...as 'linear'), map_rounds=2) - pairs "
                     "discovered in the unpaired samples (all mutual pairs, paired again under "
                     "the fitted map twice), then the 'linear' ridge on them (needs unpaired "
                     "samples of both stores)",
        "irp": "InverseRelativeProjector() - relative representations inverted (slow)",
        "gera": "GeRAAligner() - generalised relative alignment (slow)",
    }


def make_candidate(name, n_pairs=0, random_state=None):
    """A fresh estimator for one of :func:`candidate_methods`, as the plan fits it.

    Parameters
    ----------
    name : str
        A key of :func:`candidate_methods`.
    n_pairs : int, default=0
        Known pairs it will be fitted on (the bootstrap keeps them all among its anchors).
    random_state : int, default=None
        Seed of the randomised methods.

    Returns
    -------
    estimator : skalign estimator
        Unfitted.
    """
    from .._affine.linear import LinearAligner
    from .._affine.procrustes import ProcrustesAligner
    from .._bootstrap.bootstrapper import AnchorBootstrapper
    from .._gera.gera import GeRAAligner
    from .._relative.irp import InverseRelativeProjector

    if name == "procrustes":
        return ProcrustesAligner()
    if name == "linear":
        return LinearAligner(alphas=RIDGE_ALPHAS, scoring="recall_retention")
    if name == "bootstrap":
        # the plan cross-fits every candidate already: the start guard's own split is not needed
        return AnchorBootstrapper(make_candidate("linear"), map_rounds=MAP_ROUNDS,
                                  validation_fraction=None, random_state=random_state)
    if name == "irp":
        return InverseRelativeProjector(random_state=random_state)
    if name == "gera":
        return GeRAAligner(random_state=random_state)
    raise ValueError(f"unknown plan method {name!r}; choose from "
                     f"{', '.join(candidate_methods())}.")


@dataclass(frozen=True)
class Candidate:
    """One candidate method as the plan fits it, built once by :func:`check_inputs`.

    ``proto`` is the unfitted estimator (:func:`make_candidate`; every fit clones it),
    ``learns`` whether it also learns from the unpaired samples, ``inverse`` whether it maps
    new -> old exactly (``inverse_transform``, no query map), ``maps_queries`` whether it maps
    the queries too (``transform_target``), and ``sides`` the sides it is fitted for
    (:func:`candidate_sides`).
    """

    name: str
    proto: object
    learns: bool
    inverse: bool
    maps_queries: bool
    sides: tuple


@dataclass(frozen=True)
class Inputs:
    """The plan's inputs as the stages use them (rows unit-normalised with ``normalize``).

    ``unpaired`` is an :class:`~skalign.UnpairedPool` subsampled to ``max_unpaired`` rows a
    side (or ``None``), ``has_pools`` whether it holds both sides; ``methods`` the candidates
    asked for (``defaults``: none were named) and ``candidates`` each of them built
    (:class:`Candidate`; with both samples the bootstrap too, which discovers the evaluation
    store); ``queries`` the judged queries ``(QA, QB)`` checked against the pairs, with their
    ``qrels`` and ``judged_rows``, the query rows with a positive label; ``rng`` the
    generator of the estimates' resamples, drawn from after the subsampling; ``notes`` what
    was ignored; ``fit_sides`` the sides fitted (the document side always: the query side is
    scaled from it);
    ``n_unpaired_source`` and ``n_unpaired_target`` the rows of the samples used; ``lean``
    whether the ceiling's oracles and the rerank option are skipped.
    """

    X: np.ndarray
    Y: np.ndarray
    unpaired: object
    has_pools: bool
    methods: tuple
    defaults: bool
    candidates: dict
    sides: tuple
    k: int
    n_splits: int
    store_size: int
    normalize: bool
    row_norms: dict
    confidence: float
    min_recall: float
    n_resamples: int
    n_repeats: int
    curve: bool
    budget: object
    queries: object
    qrels: object
    judged_rows: object
    random_state: object
    rng: object
    notes: tuple
    n_pairs: int
    fit_sides: tuple
    n_unpaired_source: int
    n_unpaired_target: int
    lean: bool = False


def check_inputs(X, Y, *, unpaired, methods, sides, k, n_splits, store_size, curve, n_repeats,
                 n_resamples, confidence, min_recall, normalize, max_unpaired, queries, qrels,
                 budget, random_state, lean=False):
    """The arguments of :func:`skalign.plan.plan_migration` checked, as :class:`Inputs`."""
    from sklearn.utils import check_array, check_consistent_length

    from ..base import UnpairedPool

    if (qrels is None) != (queries is None):
        raise ValueError("judged queries need both the queries (embedded by each model) and "
                         "their qrels.")
    X = check_array(X, dtype=np.float32, input_name="X")
    Y = check_array(Y, dtype=np.float32, input_name="Y")
    check_consistent_length(X, Y)
    rows = None
    if qrels is not None:  # before any fit
        queries, rows = check_judged(queries, qrels, X, Y)
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
        unpaired = _pool(unpaired, X, Y, max_unpaired, rng)
    has_pools = unpaired is not None and unpaired.X is not None and unpaired.y is not None
    notes = []
    if unpaired is not None and not has_pools and (unpaired.X is not None or
                                                   unpaired.y is not None):
        given, missing = (("source", "target") if unpaired.X is not None else
                          ("target", "source"))
        notes.append(f"an unpaired {given} sample without an unpaired {missing} sample is "
                     f"ignored: the bootstrap and the store discovered in the samples need both")
    if normalize:
        X, Y = unit(X), unit(Y)
        if unpaired is not None:
            unpaired = UnpairedPool(X=None if unpaired.X is None else unit(unpaired.X),
                                    y=None if unpaired.y is None else unit(unpaired.y))
    defaults = methods is None
    if defaults:
        methods = [m for m in DEFAULT_METHODS if m != "bootstrap" or has_pools]
    methods = tuple(dict.fromkeys(methods))
    fit_sides = tuple(dict.fromkeys(("document",) + sides))
    candidates = {}
    # with both samples the bootstrap is built even when not asked for: it discovers the store
    for name in dict.fromkeys(methods + (("bootstrap",) if has_pools else ())):
        proto = make_candidate(name, n, random_state)  # unknown names fail before any work
        if name == "bootstrap" and not has_pools:
            raise ValueError("the bootstrap candidate needs unpaired samples of both stores "
                             "(--unpaired-source and --unpaired-target).")
        candidates[name] = Candidate(name=name, proto=proto, learns=learns_from_samples(proto),
                                     inverse=has_inverse(proto),
                                     maps_queries=hasattr(proto, "transform_target"),
                                     sides=candidate_sides(proto, fit_sides))
    store_size = n if store_size is None else int(store_size)
    if store_size < k + 2:
        raise ValueError(f"store_size must exceed k + 1 = {k + 1}, got {store_size}.")
    return Inputs(X=X, Y=Y, unpaired=unpaired, has_pools=has_pools, methods=methods,
                  defaults=defaults, candidates=candidates, sides=sides, k=k, n_splits=n_splits,
                  store_size=store_size, normalize=bool(normalize), row_norms=norms,
                  confidence=confidence, min_recall=min_recall, n_resamples=n_resamples,
                  n_repeats=n_repeats, curve=curve, budget=budget, queries=queries,
                  qrels=qrels, judged_rows=rows, random_state=random_state, rng=rng,
                  notes=tuple(notes), n_pairs=n, fit_sides=fit_sides,
                  n_unpaired_source=0 if unpaired is None or unpaired.X is None
                  else len(unpaired.X),
                  n_unpaired_target=0 if unpaired is None or unpaired.y is None
                  else len(unpaired.y), lean=bool(lean))


def _pool(unpaired, X, Y, max_unpaired, rng):
    """The unpaired samples checked against the pairs' widths and subsampled."""
    from sklearn.utils import check_array

    from ..base import UnpairedPool

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
    return UnpairedPool(X=P, y=Q)


def learns_from_samples(est):
    """Whether ``est`` also learns from the unpaired samples (its ``fit`` takes ``unpaired``)."""
    import inspect

    return "unpaired" in inspect.signature(est.fit).parameters


def has_inverse(est):
    """Whether ``est`` maps new -> old exactly (``inverse_transform``, no query map)."""
    try:
        return hasattr(est, "inverse_transform") and not hasattr(est, "transform_target")
    except Exception:  # available_if may raise while probing an unfitted meta-estimator
        return False


def candidate_sides(proto, sides):
    """The sides estimated for a candidate: a candidate that learns from the unpaired samples
    and has no exact inverse (the bootstrap around a ridge map) is not estimated on the query
    side, where it would need a second discovery fitted the other way for a side that keeps
    less (a ridge map fitted new -> old keeps less on the query side than the one fitted
    old -> new on the document side: :doc:`/developers/studies`)."""
    if "query" in sides and learns_from_samples(proto) and not has_inverse(proto):
        return tuple(s for s in sides if s != "query")
    return tuple(sides)


def unit(A):
    """Rows of ``A`` (as float32) scaled to unit length; zero rows left as they are."""
    A = np.asarray(A, dtype=np.float32)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


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
    before any work: row-aligned, as wide as the pairs, every labelled row in range. Returns
    ``((QA, QB), judged rows)`` (:func:`judged_rows`); raises :class:`ValueError` naming what
    is wrong."""
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
    return (QA, QB), judged_rows(qrels, len(QA), len(X))


