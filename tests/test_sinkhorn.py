"""Log-domain Sinkhorn: agreement with POT, the three cost storages, numerics and failures."""

import ot
import pytest
import torch

from skalign._bootstrap.sinkhorn import (
    DenseCost,
    FeatureCost,
    InnerProductCost,
    SparseCost,
    knn_support,
    sinkhorn_log,
)
from skalign.utils._backend import NumericalError


def _points(n, m, p=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, p, generator=g, dtype=dtype), torch.randn(m, p, generator=g, dtype=dtype)


def _matched(n=300, p=12, noise=0.05, seed=0):
    """Source features and a permuted, noisy copy: the OT solution is the permutation."""
    g = torch.Generator().manual_seed(seed)
    U = torch.randn(n, p, generator=g)
    perm = torch.randperm(n, generator=g)
    V = U[perm] + noise * torch.randn(n, p, generator=g)
    return U, V, perm


@pytest.mark.parametrize("rel", [0.5, 0.05])
def test_dense_matches_pot_sinkhorn_log(rel):
    U, V = _points(60, 40)
    C = torch.cdist(U, V) ** 2
    reg = rel * float(C.median())
    a = torch.rand(60, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.5
    a /= a.sum()
    b = torch.full((40,), 1 / 40, dtype=torch.float64)
    ours = sinkhorn_log(C, reg, a=a, b=b, tol=1e-11, max_iter=50000).plan()
    ref = ot.sinkhorn(a, b, C, reg, method="sinkhorn_log", numItermax=100000, stopThr=1e-13)
    assert float((ours - ref).abs().sum()) < 1e-7
    assert torch.allclose(ours.sum(1), a, atol=1e-12)  # rows are exact after the last update
    assert float((ours.sum(0) - b).abs().sum()) < 1e-9


def test_scaling_off_gives_the_same_plan():
    U, V = _points(50, 50)
    C = torch.cdist(U, V) ** 2
    reg = 0.1 * float(C.median())
    P1 = sinkhorn_log(C, reg, tol=1e-11, max_iter=20000).plan()
    P2 = sinkhorn_log(C, reg, tol=1e-11, max_iter=20000, scaling=0).plan()
    assert float((P1 - P2).abs().sum()) < 1e-8


def test_feature_cost_in_chunks_equals_dense():
    U, V = _points(70, 45)
    C = torch.cdist(U, V) ** 2
    reg = 0.05 * float(C.median())
    dense = sinkhorn_log(DenseCost(C), reg, tol=1e-10, max_iter=20000)
    chunked = sinkhorn_log(FeatureCost(U, V, batch_size=7), reg, tol=1e-10, max_iter=20000)
    assert float((dense.plan() - chunked.plan()).abs().sum()) < 1e-7
    W = torch.randn(70, 3, dtype=torch.float64)
    torch.testing.assert_close(dense.col_barycenter(W), chunked.col_barycenter(W))
    assert torch.equal(dense.col_argmax(), chunked.col_argmax())
    assert torch.equal(dense.row_argmax(), chunked.row_argmax())
    P = dense.plan()
    torch.testing.assert_close(dense.col_barycenter(W), (P / P.sum(0)).T @ W)


def test_sparse_on_full_support_equals_dense_and_knn_is_close():
    U, V = _points(40, 30)
    C = torch.cdist(U, V) ** 2
    reg = 0.05 * float(C.median())
    ref = sinkhorn_log(C, reg, tol=1e-10, max_iter=20000).plan()
    full = knn_support(U, V, n_neighbors=100)
    assert len(full.rows) == 40 * 30
    P = sinkhorn_log(full, reg, tol=1e-10, max_iter=20000).plan()
    assert float((P - ref).abs().sum()) < 1e-7
    small = knn_support(U, V, n_neighbors=10, batch_size=9)
    Ps = sinkhorn_log(small, reg, tol=1e-8, max_iter=20000).plan()
    assert float((Ps - ref).abs().sum()) < 0.05  # the neglected mass is small at small reg
    assert float((Ps - ref).abs().sum()) > 0  # and it is a different (restricted) problem


def test_knn_support_covers_every_row_and_column():
    U, V = _points(200, 50)
    S = knn_support(U, V, n_neighbors=3, batch_size=16)
    assert torch.bincount(S.rows, minlength=200).min() >= 3
    assert torch.bincount(S.cols, minlength=50).min() >= 3
    torch.testing.assert_close(S.cost, ((U[S.rows] - V[S.cols]) ** 2).sum(1))
    with pytest.raises(ValueError, match="empty"):
        SparseCost(S.rows[S.rows != 0], S.cols[S.rows != 0], S.cost[S.rows != 0], (200, 50))


@pytest.mark.parametrize("make", ["dense", "chunked", "sparse"])
def test_stable_at_paper_reg_in_float32(make):
    """ε = 1e-4 of the median cost, float32: finite, marginals met, the permutation recovered."""
    U, V, perm = _matched()
    cost = {"dense": lambda: DenseCost(torch.cdist(U, V) ** 2),
            "chunked": lambda: FeatureCost(U, V, batch_size=64),
            "sparse": lambda: knn_support(U, V, 16)}[make]()
    med = float((torch.cdist(U, V) ** 2).median())
    res = sinkhorn_log(cost, 1e-4 * med, tol=1e-4, max_iter=2000)
    assert torch.isfinite(res.f).all() and torch.isfinite(res.g).all()
    assert res.marginal_error < 1e-4
    # the plan carries V's row j to U's row perm[j]
    assert torch.equal(res.col_argmax(), perm)
    assert torch.equal(res.row_argmax()[perm], torch.arange(len(perm)))


def test_unbalanced_sizes_and_weights_at_small_reg():
    U, V = _points(120, 80, dtype=torch.float32)
    C = torch.cdist(U, V) ** 2
    a = torch.linspace(1, 2, 120)
    a /= a.sum()
    res = sinkhorn_log(FeatureCost(U, V, batch_size=40), 1e-2 * float(C.median()), a=a,
                       tol=1e-4, max_iter=5000)
    P = res.plan()
    assert torch.isfinite(P).all()
    torch.testing.assert_close(P.sum(1), a, atol=1e-6, rtol=1e-4)
    assert float((P.sum(0) - 1 / 80).abs().sum()) < 1e-4 * 1.01


def test_clear_errors():
    U, V = _points(30, 30)
    C = torch.cdist(U, V) ** 2
    with pytest.raises(NumericalError, match="did not converge.*max_iter or reg"):
        sinkhorn_log(C, 1e-4 * float(C.median()), max_iter=1, scaling=0, tol=1e-9)
    res = sinkhorn_log(C, 1e-4 * float(C.median()), max_iter=1, scaling=0, raise_on_failure=False)
    assert res.marginal_error > 1e-3
    with pytest.raises(ValueError, match="positive"):
        sinkhorn_log(C, 0.0)
    with pytest.raises(ValueError, match="masses"):
        sinkhorn_log(C, 1.0, a=torch.full((30,), 1.0, dtype=torch.float64))


def test_inner_product_cost_in_chunks_and_sparse_equal_dense():
    """C = 1 − U Vᵀ (cosine cost): chunked is exact, the full k-NN support too."""
    U, V = _points(50, 35)
    U, V = U / U.norm(dim=1, keepdim=True), V / V.norm(dim=1, keepdim=True)
    C = 1 - U @ V.T
    reg = 0.05 * float(C.median())
    dense = sinkhorn_log(C, reg, tol=1e-10, max_iter=20000)
    chunked = sinkhorn_log(InnerProductCost(U, V, batch_size=6), reg, tol=1e-10, max_iter=20000)
    assert float((dense.plan() - chunked.plan()).abs().sum()) < 1e-7
    assert torch.equal(dense.row_argmax(), chunked.row_argmax())
    assert torch.equal(dense.col_argmax(), chunked.col_argmax())
    assert chunked.cost.max_cost() >= float(C.max())
    full = knn_support(U, V, n_neighbors=100, inner_product=True)
    torch.testing.assert_close(full.cost, C[full.rows, full.cols])
    P = sinkhorn_log(full, reg, tol=1e-10, max_iter=20000).plan()
    assert float((P - dense.plan()).abs().sum()) < 1e-7


class _HalfCost(FeatureCost):
    """A cost class the solver has never heard of: half the squared Euclidean cost."""

    def _row_blocks(self):
        for rows, C in super()._row_blocks():
            yield rows, 0.5 * C

    def _col_blocks(self):
        for cols, C in super()._col_blocks():
            yield cols, 0.5 * C

    def max_cost(self):
        return 0.5 * super().max_cost()

    def plan(self, f, g, eps):
        return torch.exp((f[:, None] + g[None, :] - 0.5 * torch.cdist(self.U, self.V) ** 2) / eps)


def test_the_solver_asks_the_cost_object_not_a_type_table():
    """dtype, device and every reduction come from the cost's own methods, so a new cost class
    needs no change in the solver; failures are SinkhornErrors in the solver's own words."""
    from skalign._bootstrap.sinkhorn import SinkhornError

    U, V = _points(40, 30)
    C = 0.5 * torch.cdist(U, V) ** 2
    reg = 0.05 * float(C.median())
    custom = sinkhorn_log(_HalfCost(U, V, batch_size=7), reg, tol=1e-9, max_iter=5000)
    dense = sinkhorn_log(DenseCost(C), reg, tol=1e-9, max_iter=5000)
    assert custom.f.dtype == torch.float64
    torch.testing.assert_close(custom.plan(), dense.plan(), atol=1e-9, rtol=1e-6)
    with pytest.raises(SinkhornError, match="Increase max_iter or reg") as info:
        sinkhorn_log(C, 1e-4 * float(C.median()), max_iter=1, scaling=0, tol=1e-9)
    assert info.value.cause == "not_converged" and "sinkhorn_" not in str(info.value)
