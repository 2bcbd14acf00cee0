"""Retention metrics (recall@k / nDCG@k of a migrated index against the re-embedded one)."""

import numpy as np
import pytest
from sklearn.model_selection import cross_val_score

from skalign import ProcrustesAligner
from skalign.metrics import (
    ndcg_at_k_retention,
    ndcg_retention_scorer,
    recall_at_k_retention,
    recall_retention_scorer,
    retrieval_retention,
)


def _angles(deg):
    t = np.deg2rad(np.asarray(deg, dtype=float))
    return np.c_[np.cos(t), np.sin(t)]


def test_hand_computed_document_side():
    # Documents on the unit circle at 0, 10, 20, 30 degrees; one query at 0 degrees.
    index = _angles([0, 10, 20, 30])
    query = _angles([0])
    # The migrated index moves doc 0 to 25 degrees: the top-2 becomes {1, 2} instead of {0, 1}.
    moved = _angles([25, 10, 20, 30])
    r = retrieval_retention(index, moved, query, k=2)
    # retrieved ranked [1, 2]: hit at rank 1 only -> recall 1/2, nDCG (1/log2 2)/(1 + 1/log2 3)
    assert r["recall"] == pytest.approx(0.5)
    assert r["ndcg"] == pytest.approx(1.0 / (1.0 + 1.0 / np.log2(3)))
    # the same hit at rank 2 scores lower: moved doc 1 away, top-2 becomes [0, 2]
    moved2 = _angles([0, 40, 20, 30])
    r2 = retrieval_retention(index, moved2, query, k=2)
    assert r2["recall"] == pytest.approx(0.5)
    assert r2["ndcg"] == pytest.approx(1.0 / (1.0 + 1.0 / np.log2(3)))
    moved3 = _angles([25, 40, 20, 30])  # top-2 [2, 0]: relevant 0 now second
    r3 = retrieval_retention(index, moved3, query, k=2)
    assert r3["recall"] == pytest.approx(0.5)
    assert r3["ndcg"] == pytest.approx((1.0 / np.log2(3)) / (1.0 + 1.0 / np.log2(3)))


def test_leave_one_out_and_query_side():
    index = _angles([0, 10, 20, 30, 90])
    # leave-one-out on an unchanged index keeps everything
    assert recall_at_k_retention(index, index.copy(), k=2) == 1.0
    # query side: the old index is in another (here 3-d) space; queries mapped there
    old = np.c_[index, np.zeros(5)]
    q = _angles([5])
    assert recall_at_k_retention(index, old, q, np.c_[q, [[0.0]]], k=3) == 1.0
    # a query mapped to 90 degrees retrieves doc 4 first, the re-embedded top-1 is doc 0 or 1
    assert recall_at_k_retention(index, old, q, np.c_[_angles([90]), [[0.0]]], k=1) == 0.0
    # leave-one-out at 0, 10, 25, 45, 90 degrees: nearest others are 1, 0, 1, 2, 3. Moving
    # doc 4 to 1 degree makes it the nearest other of docs 0 and 1 (queries stay where they
    # are); doc 4's own query, at 90 degrees, still finds doc 3.
    index = _angles([0, 10, 25, 45, 90])
    moved = _angles([0, 10, 25, 45, 1])
    per = retrieval_retention(index, moved, k=1, per_query=True)["recall"]
    np.testing.assert_array_equal(per, [0, 0, 1, 1, 1])


def test_scaling_keeps_everything_and_random_keeps_little(rng):
    B = rng.standard_normal((300, 16))
    assert retrieval_retention(B, 3 * B) == {"recall": 1.0, "ndcg": 1.0}
    rand = retrieval_retention(B, rng.standard_normal((300, 16)))
    # chance level for top-10 among 299 other documents is 10/299
    assert rand["recall"] < 0.1 and rand["ndcg"] < 0.1
    assert ndcg_at_k_retention(B, B + 0.3 * rng.standard_normal(B.shape)) > 0.5


def test_errors():
    B = np.eye(4)
    with pytest.raises(ValueError, match="k must be in"):
        retrieval_retention(B, k=4)
    with pytest.raises(ValueError, match="translated_queries"):
        retrieval_retention(B, np.ones((4, 3)), B[:2])
    with pytest.raises(ValueError, match="rows"):
        retrieval_retention(B, np.ones((3, 4)))
    with pytest.raises(ValueError, match="exclude_self"):
        retrieval_retention(B, B, B[:2], exclude_self=True)


def test_scorers_rank_a_good_map_above_a_bad_one(rng):
    X = rng.standard_normal((200, 8))
    Q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    Y = X @ Q
    good = cross_val_score(ProcrustesAligner(), X, Y, cv=2, scoring=recall_retention_scorer)
    assert np.all(good > 0.99)
    bad = cross_val_score(ProcrustesAligner(), X, rng.standard_normal((200, 8)), cv=2,
                          scoring=ndcg_retention_scorer)
    assert np.all(bad < 0.3)
