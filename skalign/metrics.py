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
* **retention** metrics judge a migrated index against the index re-embedding would build:
  :func:`retrieval_retention` (recall@k and nDCG@k of each query's top-k),
  :func:`recall_at_k_retention` and :func:`ndcg_at_k_retention`;
* **label** metrics (Musgrave et al., 2020) judge one embedding space by class labels:
  :func:`recall_at_1` and :func:`map_at_r`.

Each has a ready scorer (``cosine_scorer``, ``top1_scorer``, ``mrr_scorer``,
``recall_at_1_scorer``, ``map_at_r_scorer``, ``recall_retention_scorer``,
``ndcg_retention_scorer``) usable as ``scoring=`` in ``GridSearchCV``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import make_scorer
from sklearn.utils import check_array, check_consistent_length

from .utils._backend import (
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
    "ndcg_at_k_retention",
    "ndcg_retention_scorer",
    "neighborhood_jaccard",
    "recall_at_1",
    "recall_at_1_scorer",
    "recall_at_k_retention",
    "recall_retention_scorer",
    "retrieval_ranks",
    "retrieval_retention",
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


def _top_k_indices(Q, T, k, batch_size, *, exclude_self=False):
    """Indices of the ``k`` rows of unit-norm ``T`` nearest to each row of unit-norm ``Q``.

    With ``exclude_self`` query ``i`` never retrieves row ``i`` of ``T`` (same items).
    """
    out = torch.empty((len(Q), k), dtype=torch.long, device=Q.device)
    for rows in _block_rows(len(Q), len(T), batch_size):
        S = Q[rows] @ T.T
        if exclude_self:
            ar = torch.arange(S.shape[0], device=Q.device)
            S[ar, ar + rows.start] = -torch.inf
        out[rows] = torch.topk(S, k, dim=1).indices
    return out


def _knn_indices(U, k, batch_size):
    """Indices of the ``k`` nearest other rows of unit-norm ``U`` (self excluded)."""
    return _top_k_indices(U, U, k, batch_size, exclude_self=True)


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


def _check_space(A, name, n_rows=None, like=None, like_name=None):
    A = check_array(as_numpy(A), input_name=name)
    if n_rows is not None and len(A) != n_rows[0]:
        raise ValueError(f"{name} has {len(A)} rows but {n_rows[1]} has {n_rows[0]}; row i of "
                         "both must be the same item.")
    if like is not None and A.shape[1] != like.shape[1]:
        raise ValueError(f"{name} has {A.shape[1]} columns but {like_name} has "
                         f"{like.shape[1]}; both must live in the same space.")
    return A


def retrieval_retention(index, translated_index=None, queries=None, translated_queries=None, *,
                        k=10, exclude_self=None, per_query=False, batch_size=None, device="cpu"):
    r"""How much of each query's top-``k`` in the re-embedded index a migrated index keeps.

    A migration either rewrites the stored documents (document side: ``translated_index`` holds
    the old vectors mapped into the new space, queried with the new encoder's ``queries``) or
    maps the new encoder's queries into the old index (query side: ``translated_queries``
    searched in the untouched old ``translated_index``). Either way the reference is what
    re-embedding every document would give: the top-``k`` ``R_q`` of each query among the rows
    of ``index`` (cosine). With ``S_q`` the top-``k`` the migrated setup returns, ranked,

    .. math::

        \mathrm{recall@}k = \frac{1}{m}\sum_q \frac{|S_q \cap R_q|}{k}, \qquad
        \mathrm{nDCG@}k = \frac{1}{m}\sum_q
        \frac{\sum_{r=1}^{k} \mathbb 1[S_{q,r} \in R_q] / \log_2(r+1)}
        {\sum_{r=1}^{k} 1 / \log_2(r+1)},

    binary relevance: a document is relevant to ``q`` when the re-embedded index ranks it in the
    top ``k``. Both are 1 for a migration that returns the re-embedded top-``k`` (nDCG@k also
    rewards returning it high in the list).

    Parameters
    ----------
    index : array-like of shape (n_documents, n_features)
        The re-embedded index: the new encoder's embeddings of the documents.
    translated_index : array-like of shape (n_documents, n_features_index), default=None
        The index the service searches, row ``i`` the same document as ``index[i]``: translated
        old vectors (document side) or the old vectors themselves (query side). ``None`` means
        ``index`` itself (useful with ``translated_queries`` only).
    queries : array-like of shape (n_queries, n_features), default=None
        The new encoder's query embeddings. ``None`` uses every document of ``index`` as a query
        against the *other* documents (leave-one-out).
    translated_queries : array-like of shape (n_queries, n_features_index), default=None
        The queries as the service sends them to ``translated_index`` (query side: the new
        encoder's queries mapped into the old space). ``None`` sends ``queries`` unchanged
        (document side).
    k : int, default=10
        Size of the neighbourhood compared; ``1 <= k <= n_documents`` (``- 1`` when leave-one-
        out).
    exclude_self : bool, default=None
        Query ``i`` is document ``i`` and never retrieves itself, in either index. ``None``
        means ``True`` exactly when ``queries`` is ``None``.
    per_query : bool, default=False
        Return the per-query values instead of their means (for resampling).
    batch_size : int, default=None
        Query rows per block; ``None`` keeps each similarity block near 256 MiB.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"

    Returns
    -------
    scores : dict
        ``{"recall": ..., "ndcg": ...}``, floats in [0, 1], or arrays of shape (n_queries,)
        when ``per_query=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign.metrics import retrieval_retention
    >>> B = np.random.default_rng(0).standard_normal((50, 8))
    >>> retrieval_retention(B, 2 * B, k=5)  # scaling keeps every cosine neighbourhood
    {'recall': 1.0, 'ndcg': 1.0}
    """
    index = _check_space(index, "index")
    translated_index = index if translated_index is None else _check_space(
        translated_index, "translated_index", n_rows=(len(index), "index"))
    if exclude_self is None:
        exclude_self = queries is None
    queries = index if queries is None else _check_space(queries, "queries", like=index,
                                                         like_name="index")
    if exclude_self and len(queries) != len(index):
        raise ValueError(f"exclude_self=True needs the documents themselves as queries, but "
                         f"queries has {len(queries)} rows and index {len(index)}.")
    if translated_queries is None:
        if translated_index.shape[1] != queries.shape[1]:
            raise ValueError(
                f"translated_index has {translated_index.shape[1]} columns but the queries have "
                f"{queries.shape[1]}; pass translated_queries (the queries mapped into the "
                "translated index's space) for the query side.")
        translated_queries = queries
    translated_queries = _check_space(translated_queries, "translated_queries",
                                      n_rows=(len(queries), "queries"), like=translated_index,
                                      like_name="translated_index")
    loo = exclude_self
    n_max = len(index) - 1 if loo else len(index)
    if not 1 <= k <= n_max:
        raise ValueError(f"k must be in [1, {n_max}] for an index of {len(index)} documents"
                         f"{' (leave-one-out queries)' if loo else ''}, got {k}.")
    dev = resolve_device(device)
    R = _top_k_indices(_unit_rows(queries, dev), _unit_rows(index, dev), k, batch_size,
                       exclude_self=loo)
    S = _top_k_indices(_unit_rows(translated_queries, dev), _unit_rows(translated_index, dev),
                       k, batch_size, exclude_self=loo)
    discount = 1.0 / torch.log2(torch.arange(2, k + 2, device=dev, dtype=torch.float64))
    recall = np.empty(len(queries))
    ndcg = np.empty(len(queries))
    # per row: k×k comparisons and k float64 hits; each row's scores are independent of the block
    block = batch_size or default_batch_size(k * k, 2 * k)
    for rows in iter_batches(len(queries), block):
        hit = (S[rows].unsqueeze(2) == R[rows].unsqueeze(1)).any(dim=2).double()
        recall[rows] = as_numpy(hit.sum(dim=1) / k)
        ndcg[rows] = as_numpy((hit * discount).sum(dim=1) / discount.sum())
    if per_query:
        return {"recall": recall, "ndcg": ndcg}
    return {"recall": float(recall.mean()), "ndcg": float(ndcg.mean())}


def recall_at_k_retention(index, translated_index=None, queries=None, translated_queries=None,
                          *, k=10, batch_size=None, device="cpu"):
    """Mean share of each query's re-embedded top-``k`` that the migrated index returns.

    See :func:`retrieval_retention` for the formula.

    Parameters
    ----------
    index : array-like of shape (n_documents, n_features)
        The re-embedded index.
    translated_index : array-like of shape (n_documents, n_features_index), default=None
        The index the service searches (``None``: ``index``).
    queries : array-like of shape (n_queries, n_features), default=None
        The new encoder's queries (``None``: leave-one-out over ``index``).
    translated_queries : array-like of shape (n_queries, n_features_index), default=None
        The queries as sent to ``translated_index`` (``None``: ``queries``).
    k : int, default=10
        Size of the neighbourhood compared.
    batch_size : int, default=None
        Query rows per block.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    recall : float in [0, 1]
        Mean recall@k of the re-embedded top-``k``.
    """
    return retrieval_retention(index, translated_index, queries, translated_queries, k=k,
                               batch_size=batch_size, device=device)["recall"]


def ndcg_at_k_retention(index, translated_index=None, queries=None, translated_queries=None,
                        *, k=10, batch_size=None, device="cpu"):
    """Mean normalised DCG@k of the migrated ranking, the re-embedded top-``k`` being relevant.

    See :func:`retrieval_retention` for the formula.

    Parameters
    ----------
    index : array-like of shape (n_documents, n_features)
        The re-embedded index.
    translated_index : array-like of shape (n_documents, n_features_index), default=None
        The index the service searches (``None``: ``index``).
    queries : array-like of shape (n_queries, n_features), default=None
        The new encoder's queries (``None``: leave-one-out over ``index``).
    translated_queries : array-like of shape (n_queries, n_features_index), default=None
        The queries as sent to ``translated_index`` (``None``: ``queries``).
    k : int, default=10
        Size of the neighbourhood compared.
    batch_size : int, default=None
        Query rows per block.
    device : {"cpu", "cuda", "auto"} or torch.device, default="cpu"
        Where the similarities are computed.

    Returns
    -------
    ndcg : float in [0, 1]
        Mean nDCG@k with binary relevance.
    """
    return retrieval_retention(index, translated_index, queries, translated_queries, k=k,
                               batch_size=batch_size, device=device)["ndcg"]


def _retention_scorer(key):
    def scorer(estimator, X, y):
        target = estimator.transform_target(y) if hasattr(estimator, "transform_target") else y
        return retrieval_retention(target, estimator.transform(X), k=10)[key]

    scorer.__name__ = f"{key}_retention_scorer"
    what = "Recall" if key == "recall" else "Normalised DCG"
    scorer.__doc__ = f"""{what}@10 retention of the index ``estimator.transform(X)`` against ``y``.

    Every row of ``y`` is a leave-one-out query (see :func:`retrieval_retention`).

    Parameters
    ----------
    estimator : fitted aligner
        Maps source embeddings into the target space.
    X : array-like of shape (n_samples, n_features_in)
        Held-out source embeddings (the old index).
    y : array-like of shape (n_samples, n_features_out)
        Their target embeddings (the re-embedded index).

    Returns
    -------
    score : float in [0, 1]
        Greater is better.
    """
    return scorer


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
#: ``scoring=recall_retention_scorer``: recall@10 retention of ``transform(X)`` against ``y``.
recall_retention_scorer = _retention_scorer("recall")
#: ``scoring=ndcg_retention_scorer``: nDCG@10 retention of ``transform(X)`` against ``y``.
ndcg_retention_scorer = _retention_scorer("ndcg")
