"""skalign.metrics against brute-force reference implementations."""

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skalign import LinearAligner
from skalign.datasets import make_paired_spaces
from skalign.metrics import (
    cosine_scorer,
    map_at_r,
    map_at_r_scorer,
    mean_cosine_similarity,
    mean_reciprocal_rank,
    mrr_scorer,
    neighborhood_jaccard,
    recall_at_1,
    recall_at_1_scorer,
    retrieval_ranks,
    top1_scorer,
    top_k_accuracy,
)


def _unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _naive_ranks(T, Q):
    S = _unit(Q) @ _unit(T).T
    return np.array([1 + np.sum(S[i] > S[i, i]) for i in range(len(Q))])


def _naive_map_at_r(E, labels):
    S = _unit(E) @ _unit(E).T
    aps = []
    for i in range(len(E)):
        R = np.sum(labels == labels[i]) - 1
        if R == 0:
            continue
        order = [j for j in np.argsort(-S[i], kind="stable") if j != i][:R]
        hits = labels[order] == labels[i]
        aps.append(sum(hits[:k + 1].mean() for k in range(R) if hits[k]) / R)
    return np.mean(aps)


@pytest.fixture
def noisy_pairs():
    """Targets and noisy translations of them, in the same space."""
    gen = np.random.default_rng(0)
    T = gen.standard_normal((150, 8))
    return T, T + 0.8 * gen.standard_normal((150, 8))


def test_mean_cosine_similarity(rng):
    A = rng.standard_normal((20, 4))
    assert mean_cosine_similarity(A, 3 * A) == pytest.approx(1.0)
    assert mean_cosine_similarity(A, -A) == pytest.approx(-1.0)
    expected = np.mean(np.sum(_unit(A) * _unit(A[::-1]), axis=1))
    assert mean_cosine_similarity(A, A[::-1]) == pytest.approx(expected)
    w = rng.random(20)
    cos = np.sum(_unit(A) * _unit(A[::-1]), axis=1)
    expected = np.average(cos, weights=w)
    assert mean_cosine_similarity(A, A[::-1], sample_weight=w) == pytest.approx(expected)
    with pytest.raises(ValueError, match="same \\(target\\) space"):
        mean_cosine_similarity(A, A[:, :3])


def test_retrieval_metrics_match_brute_force(noisy_pairs, device):
    T, Q = noisy_pairs
    ranks = _naive_ranks(T, Q)
    np.testing.assert_array_equal(retrieval_ranks(T, Q, batch_size=7, device=device), ranks)
    assert 0.1 < top_k_accuracy(T, Q) < 0.9  # the data are hard enough to be informative
    for k in (1, 5):
        assert top_k_accuracy(T, Q, k=k, device=device) == pytest.approx(np.mean(ranks <= k))
    assert mean_reciprocal_rank(T, Q) == pytest.approx(np.mean(1 / ranks))
    expected = np.mean(np.where(ranks <= 3, 1 / ranks, 0))
    assert mean_reciprocal_rank(T, Q, k=3) == pytest.approx(expected)
    assert top_k_accuracy(T, T) == 1.0


def test_label_metrics_match_brute_force(rng, device):
    labels = rng.integers(0, 5, 120)
    E = rng.standard_normal((120, 6)) + 2.5 * np.eye(6)[labels % 6]
    nn = NearestNeighbors(n_neighbors=2, metric="cosine").fit(E)
    nn = nn.kneighbors(E, return_distance=False)
    expected = np.mean(labels[nn[:, 1]] == labels)
    assert recall_at_1(E, labels, device=device) == pytest.approx(expected)
    naive = _naive_map_at_r(E, labels)
    assert 0.2 < naive < 0.9
    assert map_at_r(E, labels, batch_size=13, device=device) == pytest.approx(naive, abs=1e-12)
    perfect = np.eye(6)[labels % 6] + 1e-3 * rng.standard_normal((120, 6))
    assert map_at_r(perfect, labels) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no label occurs more than once"):
        map_at_r(E[:5], np.arange(5))


def test_neighborhood_jaccard(noisy_pairs):
    X, Y = noisy_pairs
    k = 5
    def knn(A):
        nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine").fit(A)
        return nn.kneighbors(A, return_distance=False)[:, 1:]

    nx, ny = knn(X), knn(Y)
    naive = np.mean([len(set(a) & set(b)) / len(set(a) | set(b)) for a, b in zip(nx, ny)])
    assert neighborhood_jaccard(X, Y, k=k, batch_size=11) == pytest.approx(naive)
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((8, 8)))[0]
    assert neighborhood_jaccard(X, X @ Q, k=k) == pytest.approx(1.0)  # isometry keeps neighbours
    with pytest.raises(ValueError, match="k must be in"):
        neighborhood_jaccard(X, Y, k=len(X))


def test_scorers_in_grid_search():
    X, Y = make_paired_spaces(200, 10, relation="linear", noise=0.3, random_state=0)
    for scoring in (cosine_scorer, top1_scorer, mrr_scorer):
        search = GridSearchCV(LinearAligner(), {"alpha": [0.0, 1e5]}, cv=3, scoring=scoring)
        search.fit(X, Y)
        assert search.best_params_["alpha"] == 0.0


def test_label_scorers_call_transform(rng):
    labels = rng.integers(0, 3, 60)
    E = rng.standard_normal((60, 4)) + 3 * np.eye(4)[labels]
    pipe = make_pipeline(FunctionTransformer()).fit(E)
    assert recall_at_1_scorer(pipe, E, labels) == pytest.approx(recall_at_1(E, labels))
    assert map_at_r_scorer(pipe, E, labels) == pytest.approx(map_at_r(E, labels))
