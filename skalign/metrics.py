"""Evaluation metrics for aligned embedding spaces, and scorers for scikit-learn's search tools.

All metrics use cosine similarity, are computed in row blocks (never materialising more than
``batch_size × n`` similarities at once; ``batch_size=None`` sizes the blocks from scikit-learn's
``working_memory``) and are exact (no top-k caps).

Two families:

* **paired** metrics compare translated source embeddings ``y_pred`` with the true target
  embeddings ``y_true`` row by row: :func:`mean_cosine_similarity`, :func:`top_k_accuracy`
  (recall@k of retrieving the true counterpart among all targets) and
  :func:`mean_reciprocal_rank`; :func:`neighborhood_jaccard` compares the neighbourhoods of the
  same items in two spaces;
* **label** metrics (Musgrave et al., 2020) judge one embedding space by class labels:
  :func:`recall_at_1` and :func:`map_at_r`.

Each has a ready scorer (``cosine_scorer``, ``top1_scorer``, ``mrr_scorer``,
``recall_at_1_scorer``, ``map_at_r_scorer``) usable as ``scoring=`` in ``GridSearchCV``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import make_scorer
from sklearn.utils import check_array, check_consistent_length

from ._backend import (
    as_numpy,
    default_batch_size,
    iter_batches,
    resolve_device,
    row_normalize,
    to_tensor,
)

__all__ = [
    "cosine_scorer",
    "map_at_r",
    "map_at_r_scorer",
    "mean_cosine_similarity",
    "mean_reciprocal_rank",
    "mrr_scorer",
    "neighborhood_jaccard",
    "recall_at_1",
    "recall_at_1_scorer",
    "retrieval_ranks",
    "top1_scorer",
    "top_k_accuracy",
]


def _check_pair(y_true, y_pred):
    y_true = check_array(as_numpy(y_true), ensure_2d=False, input_name="y_true")
    y_pred = check_array(as_numpy(y_pred), ensure_2d=False, input_name="y_pred")
    y_true = y_true.reshape(len(y_true), -1)
    y_pred = y_pred.reshape(len(y_pred), -1)
    check_consistent_length(y_true, y_pred)
    if y_true.shape[1] != y_pred.shape[1]:
        raise ValueError(
            f"y_true has {y_true.shape[1]} columns but y_pred has {y_pred.shape[1]}; both must "
            "live in the same (target) space."
        )
    return y_true, y_pred


def _unit_rows(A, device):
    return row_normalize(to_tensor(A, device))


def _block_rows(n_rows, n_cols, batch_size):
    if batch_size is None:  # a block of float32 similarities within working_memory
        batch_size = default_batch_size(n_cols)
    return iter_batches(n_rows, batch_size)


def mean_cosine_similarity(y_true, y_pred, *, sample_weight=None):
    """Mean cosine similarity between paired rows (greater is better).

    .. math::

        \\frac{1}{n} \\sum_i \\frac{\\langle y_i, \\hat y_i \\rangle}{\\|y_i\\| \\|\\hat y_i\\|}

    A zero row has cosine 0 with everything.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples, n_features)
        Target embeddings and their predictions, paired row for row.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the weighted mean.

    Returns
    -------
    score : float in [-1, 1]
        The (weighted) mean cosine similarity.
    """
    y_true, y_pred = _check_pair(y_true, y_pred)
    num = np.einsum("ij,ij->i", y_true, y_pred, dtype=np.float64)
    den = np.linalg.norm(y_true, axis=1) * np.linalg.norm(y_pred, axis=1)
    cos = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(np.average(cos, weights=sample_weight))


def retrieval_ranks(y_true, y_pred, *, batch_size=None, device="cpu"):
    """Rank of each true counterpart when ``y_pred[i]`` queries all rows of ``y_true``.

    ``rank_i = 1 + #{j : cos(ŷ_i, y_j) > cos(ŷ_i, y_i)}`` (ties counted in the query's favour).

    Parameters
    ----------
    y_true : array-like of shape (n_samples, n_features)
        True target embeddings; the retrieval gallery.
    y_pred : array-like of shape (n_samples, n_features)
        Translated source embeddings; the queries.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    ranks : ndarray of shape (n_samples,), int64
        Rank of each query's true counterpart; 1 means retrieved first.
    """
    y_true, y_pred = _check_pair(y_true, y_pred)
    dev = resolve_device(device)
    T, Q = _unit_rows(y_true, dev), _unit_rows(y_pred, dev)
    ranks = np.empty(len(Q), dtype=np.int64)
    for rows in _block_rows(len(Q), len(T), batch_size):
        S = Q[rows] @ T.T
        idx = torch.arange(rows.start, rows.stop, device=dev)
        own = S[torch.arange(len(idx), device=dev), idx].unsqueeze(1)
        ranks[rows] = as_numpy((S > own).sum(dim=1) + 1)
    return ranks


def top_k_accuracy(y_true, y_pred, *, k=1, batch_size=None, device="cpu"):
    """Fraction of rows whose true counterpart is among the ``k`` nearest targets (recall@k).

    Parameters
    ----------
    y_true : array-like of shape (n_samples, n_features)
        True target embeddings; the retrieval gallery.
    y_pred : array-like of shape (n_samples, n_features)
        Translated source embeddings; the queries.
    k : int, default=1
        A hit is the true counterpart ranked ``k``-th or better.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    score : float in [0, 1]
        Fraction of queries whose counterpart ranks within the first ``k``.
    """
    ranks = retrieval_ranks(y_true, y_pred, batch_size=batch_size, device=device)
    return float(np.mean(ranks <= k))


def mean_reciprocal_rank(y_true, y_pred, *, k=None, batch_size=None, device="cpu"):
    """Mean of ``1 / rank`` of the true counterpart (0 beyond ``k`` when ``k`` is given).

    Parameters
    ----------
    y_true : array-like of shape (n_samples, n_features)
        True target embeddings; the retrieval gallery.
    y_pred : array-like of shape (n_samples, n_features)
        Translated source embeddings; the queries.
    k : int, default=None
        Ranks beyond ``k`` count as 0; ``None``: no cut-off.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    float in [0, 1]
        Greater is better; 1 when every true counterpart is retrieved first.
    """
    ranks = retrieval_ranks(y_true, y_pred, batch_size=batch_size, device=device)
    rr = 1.0 / ranks
    if k is not None:
        rr[ranks > k] = 0.0
    return float(rr.mean())


def _knn_indices(U, k, batch_size):
    """Indices of the ``k`` nearest other rows of unit-norm ``U`` (self excluded)."""
    n = len(U)
    out = torch.empty((n, k), dtype=torch.long, device=U.device)
    for rows in _block_rows(n, n, batch_size):
        S = U[rows] @ U.T
        ar = torch.arange(S.shape[0], device=U.device)
        S[ar, ar + rows.start] = -torch.inf
        out[rows] = torch.topk(S, k, dim=1).indices
    return out


def neighborhood_jaccard(X, Y, *, k=10, batch_size=None, device="cpu"):
    """Mean Jaccard index between each item's ``k`` nearest neighbours in two spaces.

    Row ``i`` of ``X`` and of ``Y`` are the same item; neighbours are found by cosine similarity,
    excluding the item itself.

    .. math:: J@k = \\frac{1}{n}\\sum_i \\frac{|N^X_k(i) \\cap N^Y_k(i)|}{|N^X_k(i) \\cup N^Y_k(i)|}

    Parameters
    ----------
    X, Y : array-like of shape (n_samples, n_features_X) and (n_samples, n_features_Y)
        The same items in two spaces, row for row.
    k : int, default=10
        Neighbours per item, ``1 <= k < n_samples``.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    score : float in [0, 1]
        The mean Jaccard index.
    """
    X = check_array(as_numpy(X), input_name="X")
    Y = check_array(as_numpy(Y), input_name="Y")
    check_consistent_length(X, Y)
    if not 1 <= k < len(X):
        raise ValueError(f"k must be in [1, n_samples - 1] = [1, {len(X) - 1}], got {k}.")
    dev = resolve_device(device)
    NX = _knn_indices(_unit_rows(X, dev), k, batch_size)
    NY = _knn_indices(_unit_rows(Y, dev), k, batch_size)
    total = 0.0
    for rows in iter_batches(len(X), 4096):
        inter = (NX[rows].unsqueeze(2) == NY[rows].unsqueeze(1)).any(dim=2).sum(dim=1).double()
        total += float((inter / (2 * k - inter)).sum())
    return total / len(X)


def _check_labelled(embeddings, labels):
    E = check_array(as_numpy(embeddings), input_name="embeddings")
    labels = np.asarray(as_numpy(labels)).ravel()
    check_consistent_length(E, labels)
    _, codes = np.unique(labels, return_inverse=True)
    return E, codes


def recall_at_1(embeddings, labels, *, batch_size=None, device="cpu"):
    """Fraction of items whose nearest other item (cosine) has the same label.

    Parameters
    ----------
    embeddings : array-like of shape (n_samples, n_features)
        The embedding space to judge.
    labels : array-like of shape (n_samples,)
        Class label of each item.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    score : float in [0, 1]
        Fraction of items whose nearest neighbour shares their label.
    """
    E, codes = _check_labelled(embeddings, labels)
    dev = resolve_device(device)
    nn = as_numpy(_knn_indices(_unit_rows(E, dev), 1, batch_size))[:, 0]
    return float(np.mean(codes[nn] == codes))


def map_at_r(embeddings, labels, *, batch_size=None, device="cpu"):
    """Mean average precision at R (Musgrave et al., 2020), computed exactly.

    For a query with label ``c``, ``R`` is the number of *other* items labelled ``c``; with
    ``P(i)`` the precision among the ``i`` nearest neighbours,

    .. math::

        \\mathrm{MAP@R} = \\frac{1}{R} \\sum_{i=1}^{R} P(i)\\, \\mathbb 1[\\text{label}_i = c].

    Queries with no other item of their class are excluded. No cap on ``R``.

    Parameters
    ----------
    embeddings : array-like of shape (n_samples, n_features)
        The embedding space to judge.
    labels : array-like of shape (n_samples,)
        Class label of each item.
    batch_size : int, default=None
        Query rows per block of similarities; ``None`` keeps a block within scikit-learn's
        ``working_memory``. The result does not depend on it.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    score : float in [0, 1]
        MAP@R over the queries that have at least one other item of their class.
    """
    E, codes = _check_labelled(embeddings, labels)
    dev = resolve_device(device)
    U = _unit_rows(E, dev)
    codes_t = torch.as_tensor(codes, device=dev)
    R_all = torch.bincount(codes_t)[codes_t] - 1
    total, counted = 0.0, 0
    for rows in _block_rows(len(U), len(U), batch_size):
        R = R_all[rows]
        r_max = int(R.max())
        if r_max == 0:
            continue
        S = U[rows] @ U.T
        ar = torch.arange(S.shape[0], device=dev)
        S[ar, ar + rows.start] = -torch.inf
        nn = torch.topk(S, r_max, dim=1).indices
        hits = (codes_t[nn] == codes_t[rows].unsqueeze(1)).double()
        pos = torch.arange(1, r_max + 1, device=dev, dtype=torch.float64)
        within = pos.unsqueeze(0) <= R.unsqueeze(1)
        precision = hits.cumsum(dim=1) / pos
        ap = (precision * hits * within).sum(dim=1) / R.clamp_min(1)
        valid = R > 0
        total += float(ap[valid].sum())
        counted += int(valid.sum())
    if counted == 0:
        raise ValueError("MAP@R is undefined: no label occurs more than once.")
    return total / counted


def _label_scorer(metric):
    def scorer(estimator, X, y):
        return metric(estimator.transform(X), y)

    scorer.__name__ = f"{metric.__name__}_scorer"
    scorer.__doc__ = f"""Score the translations ``estimator.transform(X)`` against labels ``y``.

    Parameters
    ----------
    estimator : fitted estimator
        The aligner, or a pipeline ending in one.
    X : array-like of shape (n_samples, n_features_in)
        Source embeddings.
    y : array-like of shape (n_samples,)
        Class labels of the rows of ``X``.

    Returns
    -------
    score : float in [0, 1]
        ``{metric.__name__}(estimator.transform(X), y)``.
    """
    return scorer


#: ``scoring=cosine_scorer``: mean cosine between ``estimator.predict(X)`` and ``y``.
cosine_scorer = make_scorer(mean_cosine_similarity)
#: ``scoring=top1_scorer``: top-1 retrieval accuracy of ``y`` from ``estimator.predict(X)``.
top1_scorer = make_scorer(top_k_accuracy)
#: ``scoring=mrr_scorer``: mean reciprocal rank of ``y`` from ``estimator.predict(X)``.
mrr_scorer = make_scorer(mean_reciprocal_rank)
#: ``scoring=recall_at_1_scorer``: R@1 of ``estimator.transform(X)`` with ``y`` as class labels.
recall_at_1_scorer = _label_scorer(recall_at_1)
#: ``scoring=map_at_r_scorer``: MAP@R of ``estimator.transform(X)`` with ``y`` as class labels.
map_at_r_scorer = _label_scorer(map_at_r)
