"""Stage 2 of :mod:`skalign.plan`: the evaluation store.

Cross-validation over the pairs, or pairs discovered in the unpaired samples: rows of the
samples that repeat a known pair are left out, the rest are paired by mutual nearest neighbours
under the bootstrap candidate's map (:func:`pseudo_store`), and serve as evaluation store when
its certificate reaches :data:`MIN_CERTIFICATE` (see the module docstring of
:mod:`skalign.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._candidates import duplicates, fit, make_candidate, unit

__all__ = ["EvaluationStore", "MIN_CERTIFICATE", "evaluation_store"]

#: bootstrap certificate above which the pairs it discovers serve as evaluation store (the
#: user guide's range for right discoveries is 0.9-1.0)
MIN_CERTIFICATE = 0.9


@dataclass(frozen=True)
class EvaluationStore:
    """Where the estimates are measured.

    ``source`` and ``target`` are the rows of the unpaired samples paired into the store, or
    ``None`` for cross-validation over the pairs (``pseudo_pairs`` says which); ``methods`` the
    candidates to estimate (the default bootstrap left out where it could only find the known
    pairs again); ``evaluation`` is :attr:`MigrationPlan.evaluation`.
    """

    source: object
    target: object
    methods: tuple
    evaluation: dict
    notes: tuple
    pseudo_pairs: bool


def evaluation_store(inputs):
    """The evaluation store of :class:`~skalign.plan._inputs.Inputs`."""
    X, Y, unpaired, k = inputs.X, inputs.Y, inputs.unpaired, inputs.k
    n, n_splits = inputs.n_pairs, inputs.n_splits
    methods = list(inputs.methods)
    store = None
    evaluation = {"store": "cross-validation", "size": int(n // n_splits),
                  "n_splits": int(n_splits)}
    if inputs.has_pools:
        # worth it only when larger than a held-out fold (and each half above 2 (k + 1) items)
        min_size = max(n // n_splits + 1, 4 * (k + 1))
        free_p, free_q = ~duplicates(unpaired.X, X), ~duplicates(unpaired.y, Y)
        n_new = int(min(free_p.sum(), free_q.sum()))
        evaluation["unpaired_new_rows"] = n_new
        if n_new < min_size and inputs.defaults and "bootstrap" in methods:
            # the bootstrap could only find the known pairs again: a map on the pairs alone
            # is the same fit without the duplicates
            methods.remove("bootstrap")
            evaluation["bootstrap_left_out"] = (
                f"the unpaired samples hold only {n_new} rows that are not known pairs (fewer "
                f"than {min_size}); the bootstrap would find little beyond the known pairs")
        if n_new >= min_size:
            store = pseudo_store(X, Y, unpaired, free_p, free_q, inputs.random_state)
            size = len(store["source"])
            cert = store["certificate"]
            evaluation.update(pseudo_pairs=int(size),
                              certificate=None if np.isnan(cert) else cert)
            if cert >= MIN_CERTIFICATE and size >= min_size:  # NaN: no certificate, no store
                evaluation.update(store="pseudo-pairs", size=int(size))
            else:
                store = None
    notes = ()
    if inputs.has_pools and store is None:
        notes = ("no evaluation store could be discovered in the unpaired samples ("
                 + (f"bootstrap certificate {evaluation['certificate']:.2f} below "
                    f"{MIN_CERTIFICATE}" if evaluation.get("certificate") is not None
                    else "too few rows that are not known pairs")
                 + f"): estimated by {n_splits}-fold cross-validation over the pairs",)
    return EvaluationStore(source=None if store is None else store["source"],
                           target=None if store is None else store["target"],
                           methods=tuple(methods), evaluation=evaluation, notes=notes,
                           pseudo_pairs=store is not None)


def pseudo_store(X, Y, unpaired, free_p, free_q, random_state, block=1024):
    """Pairs discovered in the unpaired samples, to serve as a large evaluation store.

    The reference map is the bootstrap candidate fitted on all known pairs plus the unpaired
    samples; a source row ``p`` and a target row ``q`` form a pseudo-pair when each is the
    other's nearest neighbour (cosine) under it. Rows duplicating a known pair (cosine > 0.9999
    to one of its rows) are left out, so nothing a candidate is fitted on is evaluated.

    ``free_p`` and ``free_q`` mark the sample rows that are not known pairs.

    Returns
    -------
    store : dict
        ``{"source": rows of unpaired.X, "target": rows of unpaired.y, "certificate": float,
        "fit_seconds": float}``.
    """
    P, Q = unpaired.X, unpaired.y
    ref, secs = fit(make_candidate("bootstrap", len(X), random_state), X, Y, unpaired)
    TP = unit(np.asarray(ref.transform(P), dtype=np.float32))
    Qn = unit(Q)
    best_q = np.full(len(P), -1)
    best_p = np.full(len(Q), -1)
    col_max = np.full(len(Q), -np.inf)
    q_idx = np.flatnonzero(free_q)
    for i in range(0, len(P), block):
        S = TP[i:i + block] @ Qn[q_idx].T
        best_q[i:i + block] = q_idx[S.argmax(axis=1)]
        rows = S.argmax(axis=0)
        better = S[rows, np.arange(len(q_idx))] > col_max[q_idx]
        col_max[q_idx[better]] = S[rows[better], np.flatnonzero(better)]
        best_p[q_idx[better]] = i + rows[better]
    src = np.flatnonzero(free_p & (best_p[best_q] == np.arange(len(P))))
    return {"source": src, "target": best_q[src],
            "certificate": float(getattr(ref, "certificate_", float("nan"))),
            "fit_seconds": secs}
