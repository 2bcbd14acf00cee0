"""The ridge penalty search by cross-validated retention (``ridge_cv_retention``) against the
straightforward computation: per fold and per penalty, the ridge map solved on the training
part and the held-out part scored by ``retrieval_retention``."""

import numpy as np
import pytest
import torch
from sklearn.model_selection import KFold

from skalign import LinearAligner
from skalign._affine.linear import ridge_cv_retention
from skalign.metrics import retrieval_retention


def straightforward(X, Y, alphas, n_splits, center, k=10):
    scores = np.zeros(len(alphas))
    for train, test in KFold(n_splits, shuffle=True, random_state=0).split(X):
        mx = X[train].mean(0) if center else np.zeros(X.shape[1])
        my = Y[train].mean(0) if center else np.zeros(Y.shape[1])
        Xc, Yc = X[train] - mx, Y[train] - my
        for i, a in enumerate(alphas):
            W = np.linalg.solve(Xc.T @ Xc + a * np.eye(X.shape[1]), Xc.T @ Yc)
            pred = (X[test] - mx) @ W + my
            scores[i] += retrieval_retention(Y[test], pred, k=k)["recall"] / n_splits
    return scores


def data(n, d_x, d_y, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d_x)) + 0.5  # an offset: the centring matters
    W = rng.standard_normal((d_x, d_y)) / np.sqrt(d_x)
    return X, X @ W + 0.8 * rng.standard_normal((n, d_y)) + 0.3


@pytest.mark.parametrize("n, d_x, d_y, center", [
    (300, 24, 32, True),    # training parts taller than wide: the shared Gram matrix
    (300, 24, 32, False),
    (250, 200, 48, True),   # 200 anchors a training part for 200 features: still tall
    (120, 150, 40, True),   # wide training parts: the other Gram matrix, per fold
])
def test_equals_the_per_penalty_solve(n, d_x, d_y, center):
    X, Y = data(n, d_x, d_y, seed=n + d_x)
    alphas = np.logspace(-2, 3, 6)
    fast = ridge_cv_retention(torch.from_numpy(X), torch.from_numpy(Y), alphas, 5,
                              center=center)
    ref = straightforward(X, Y, alphas, 5, center)
    np.testing.assert_allclose(fast, ref, atol=1e-6, rtol=0)
    assert ref.max() - ref.min() > 0.02  # the penalties score differently here


def test_gram_returned_is_the_centred_gram_and_fits_the_same_map():
    X, Y = data(300, 24, 32, seed=1)
    _, (G, C) = ridge_cv_retention(torch.from_numpy(X), torch.from_numpy(Y),
                                   np.logspace(-2, 3, 6), 5, return_gram=True)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    np.testing.assert_allclose(G.numpy(), Xc.T @ Xc, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(C.numpy(), Xc.T @ Yc, rtol=1e-12, atol=1e-9)
    wide = ridge_cv_retention(torch.from_numpy(X[:100]), torch.from_numpy(np.tile(Y[:100], 2)),
                              [1.0], 2, return_gram=True)[1]
    assert wide is not None
    assert ridge_cv_retention(torch.from_numpy(np.tile(X[:60], 2)), torch.from_numpy(Y[:60]),
                              [1.0], 2, return_gram=True)[1] is None  # 30 rows, 48 features
    est = LinearAligner(alphas=np.logspace(-2, 3, 6), scoring="recall_retention",
                        normalize=False).fit(X, Y)
    fixed = LinearAligner(alpha=est.alpha_, normalize=False).fit(X, Y)
    np.testing.assert_allclose(est.coef_, fixed.coef_, atol=1e-10)
    np.testing.assert_allclose(est.intercept_, fixed.intercept_, atol=1e-10)


@pytest.mark.parametrize("implicit", [True, False])
def test_the_scores_do_not_depend_on_the_query_blocks(monkeypatch, implicit):
    """A fold's held-out queries are scored a block of rows at a time: blocks of a few rows
    (several per fold, the last one short) give exactly the scores of one block per fold."""
    import skalign._affine.linear as linear

    # r < d_y: the similarities from r-sized products; r > d_y: from the predictions
    X, Y = data(400, 24, 48, seed=7) if implicit else data(400, 48, 24, seed=8)
    alphas = np.logspace(-2, 3, 6)
    whole = ridge_cv_retention(torch.from_numpy(X), torch.from_numpy(Y), alphas, 4)
    monkeypatch.setattr(linear, "QUERY_BLOCK", 7 * 100 * 6)  # 7 queries of 100 per block
    blocks = ridge_cv_retention(torch.from_numpy(X), torch.from_numpy(Y), alphas, 4)
    np.testing.assert_array_equal(blocks, whole)
    assert whole.max() - whole.min() > 0.02
