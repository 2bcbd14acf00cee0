"""CSLS mutual nearest neighbours in blocks: agreement with a dense reference."""

import torch

from skalign._bootstrap.matching import csls_match, relative_factors


def _dense_csls(U, V, k):
    S = U @ V.T
    rx, ry = S.topk(k, dim=1).values.mean(1), S.topk(k, dim=0).values.mean(0)
    return 2 * S - rx[:, None] - ry[None, :]


def test_blocks_equal_the_dense_reference():
    g = torch.Generator().manual_seed(0)
    U, V = torch.randn(83, 6, generator=g), torch.randn(57, 6, generator=g)
    M = _dense_csls(U, V, 5)
    for chunk in (1, 10, 83):
        m = csls_match(U, V, k=5, batch_size=chunk)
        assert torch.equal(m.forward, M.argmax(1)) and torch.equal(m.backward, M.argmax(0))
        top = M.topk(2, dim=1).values
        torch.testing.assert_close(m.confidence, top[:, 0] - top[:, 1])
        torch.testing.assert_close(m.similarity, (U @ V.T).gather(1, m.forward[:, None])[:, 0])
    plain = csls_match(U, V, k=0, batch_size=9)
    assert torch.equal(plain.forward, (U @ V.T).argmax(1))


def test_mutual_pairs_of_a_permutation_and_low_rank_factors():
    g = torch.Generator().manual_seed(1)
    X = torch.nn.functional.normalize(torch.randn(200, 12, generator=g), dim=1)
    perm = torch.randperm(200, generator=g)
    Y = X[perm]
    A = torch.arange(30)
    inv = torch.argsort(perm)
    for n_anchors in (5, 30):  # narrower and wider than the 12 features
        U, V = relative_factors(X, Y, X[A[:n_anchors]], Y[inv[A[:n_anchors]]])
        RX = torch.nn.functional.normalize(X @ X[A[:n_anchors]].T, dim=1)
        RY = torch.nn.functional.normalize(Y @ Y[inv[A[:n_anchors]]].T, dim=1)
        torch.testing.assert_close(U @ V.T, RX @ RY.T, atol=1e-5, rtol=1e-5)
    m = csls_match(U, V, k=10, batch_size=17)  # 30 anchors: a noiseless copy is paired exactly
    assert m.mutual().all() and torch.equal(m.forward, inv)
