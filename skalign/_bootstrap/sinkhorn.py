r"""Log-domain entropic optimal transport (Sinkhorn) in torch, dense or in bounded memory.

The solver works on the dual potentials :math:`f \in \mathbb R^n`, :math:`g \in \mathbb R^m` of

.. math::

    \Pi^\star = \operatorname*{arg\,min}_{\Pi \mathbf 1 = a,\ \Pi^\top \mathbf 1 = b}
        \langle \Pi, C \rangle - \varepsilon H(\Pi),
    \qquad \Pi_{ij} = \exp\!\big((f_i + g_j - C_{ij}) / \varepsilon\big),

with the alternating updates :math:`g_j = \varepsilon \log b_j - \varepsilon \operatorname{LSE}_i
((f_i - C_{ij})/\varepsilon)` and :math:`f_i = \varepsilon \log a_i - \varepsilon
\operatorname{LSE}_j((g_j - C_{ij})/\varepsilon)`, which never exponentiate a large number and so
stay finite at the tiny :math:`\varepsilon` (``1e-4`` of the median cost) where the classic
scaling form underflows to an all-zero plan. :math:`\varepsilon`-scaling (start from the largest
cost, shrink geometrically, warm-start each stage) makes small :math:`\varepsilon` reachable in
a few hundred iterations.

The cost is accessed only through row/column log-sum-exp reductions, so three storage modes share
one solver:

* :class:`DenseCost` — an explicit ``n × m`` matrix (small problems, exact);
* :class:`FeatureCost` — squared Euclidean cost between feature rows, recomputed block by block
  (exact, memory ``O(batch_size · max(n, m))``, no ``n × m`` array ever exists; blocks sized from
  scikit-learn's ``working_memory`` by default);
* :class:`InnerProductCost` — :math:`C_{ij} = 1 - u_i^\top v_j` (cosine cost for unit rows, or
  for any factorisation of a similarity), in blocks like :class:`FeatureCost`;
* :class:`SparseCost` — the cost restricted to a candidate support (each row's and each column's
  ``k`` nearest partners), for pools far too large for ``n · m`` work per iteration. At small
  :math:`\varepsilon` the plan is concentrated on near pairs, so the restricted problem has almost
  the same solution; its marginals are still checked.

References
----------
.. [1] M. Cuturi, "Sinkhorn distances: lightspeed computation of optimal transport", NeurIPS 2013.
.. [2] B. Schmitzer, "Stabilized sparse scaling algorithms for entropy regularized transport
   problems", SIAM J. Sci. Comput. 41(3), 2019.
.. [3] J. Feydy et al., "Interpolating between optimal transport and MMD using Sinkhorn
   divergences", AISTATS 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..utils._backend import NumericalError, default_batch_size, iter_batches

__all__ = [
    "DenseCost",
    "FeatureCost",
    "InnerProductCost",
    "SinkhornError",
    "SinkhornResult",
    "SparseCost",
    "knn_support",
    "sinkhorn_log",
]


class SinkhornError(NumericalError):
    """The solver failed: non-finite potentials (``cause="non_finite"``) or marginals still off
    after ``max_iter`` iterations (``cause="not_converged"``).

    The message is ``diagnosis`` followed by advice in the solver's own arguments (``reg``,
    ``max_iter``); an estimator that calls the solver catches this and gives the advice in its
    own parameters instead.
    """

    def __init__(self, message, *, diagnosis, cause):
        super().__init__(message)
        self.diagnosis = diagnosis
        self.cause = cause


def _block_rows(n_cols, batch_size, itemsize):
    return batch_size or default_batch_size(n_cols, itemsize=itemsize)


def _sq_dists(U, V, U_sq, V_sq):
    return (U_sq[:, None] + V_sq[None, :] - 2.0 * (U @ V.T)).clamp_min_(0.0)


# ----------------------------------------------------------------------------- cost providers
class DenseCost:
    """An explicit cost matrix ``C`` of shape (n, m)."""

    def __init__(self, C):
        self.C = C
        self.shape = tuple(C.shape)

    @property
    def dtype(self):
        """dtype of the costs, and of the potentials solved for them."""
        return self.C.dtype

    @property
    def device(self):
        """Device the costs live on."""
        return self.C.device

    def row_lse(self, g, eps):
        return torch.logsumexp((g[None, :] - self.C) / eps, dim=1)

    def col_lse(self, f, eps):
        return torch.logsumexp((f[:, None] - self.C) / eps, dim=0)

    def max_cost(self):
        return float(self.C.max())

    def col_softmax_matmul(self, f, eps, W):
        return torch.softmax((f[:, None] - self.C) / eps, dim=0).T @ W

    def col_argmax(self, f):
        return torch.argmax(f[:, None] - self.C, dim=0)

    def row_argmax(self, g):
        return torch.argmax(g[None, :] - self.C, dim=1)

    def plan(self, f, g, eps):
        return torch.exp((f[:, None] + g[None, :] - self.C) / eps)


class FeatureCost:
    r"""Squared Euclidean cost :math:`C_{ij} = \|u_i - v_j\|^2`, computed in row blocks.

    Parameters
    ----------
    U : tensor of shape (n, p)
    V : tensor of shape (m, p)
    batch_size : int, default=None
        Rows per block; ``None`` keeps each block within scikit-learn's ``working_memory``.
    """

    def __init__(self, U, V, batch_size=None):
        self.U, self.V = U, V
        self.U_sq, self.V_sq = (U * U).sum(1), (V * V).sum(1)
        self.shape = (U.shape[0], V.shape[0])
        self.batch_size = batch_size

    @property
    def dtype(self):
        """dtype of the features, and of the costs and potentials computed from them."""
        return self.U.dtype

    @property
    def device(self):
        """Device the features live on."""
        return self.U.device

    def _rows_per_block(self, n_cols):
        return _block_rows(n_cols, self.batch_size, self.U.element_size())

    def _row_blocks(self):  # blocks of source rows, each (b, m)
        for rows in iter_batches(self.shape[0], self._rows_per_block(self.shape[1])):
            yield rows, _sq_dists(self.U[rows], self.V, self.U_sq[rows], self.V_sq)

    def _col_blocks(self):  # blocks of target rows, each (b, n) = C[:, cols].T
        for cols in iter_batches(self.shape[1], self._rows_per_block(self.shape[0])):
            yield cols, _sq_dists(self.V[cols], self.U, self.V_sq[cols], self.U_sq)

    def row_lse(self, g, eps):
        out = torch.empty(self.shape[0], dtype=g.dtype, device=g.device)
        for rows, C in self._row_blocks():
            out[rows] = torch.logsumexp((g[None, :] - C) / eps, dim=1)
        return out

    def col_lse(self, f, eps):
        out = torch.empty(self.shape[1], dtype=f.dtype, device=f.device)
        for cols, Ct in self._col_blocks():
            out[cols] = torch.logsumexp((f[None, :] - Ct) / eps, dim=1)
        return out

    def max_cost(self):
        # ‖u − v‖² ≤ (‖u‖ + ‖v‖)²: a cheap upper bound is all ε-scaling needs.
        return float((self.U_sq.max().sqrt() + self.V_sq.max().sqrt()) ** 2)

    def col_softmax_matmul(self, f, eps, W):
        out = torch.empty((self.shape[1], W.shape[1]), dtype=W.dtype, device=W.device)
        for cols, Ct in self._col_blocks():
            out[cols] = torch.softmax((f[None, :] - Ct) / eps, dim=1) @ W
        return out

    def col_argmax(self, f):
        out = torch.empty(self.shape[1], dtype=torch.long, device=f.device)
        for cols, Ct in self._col_blocks():
            out[cols] = torch.argmax(f[None, :] - Ct, dim=1)
        return out

    def row_argmax(self, g):
        out = torch.empty(self.shape[0], dtype=torch.long, device=g.device)
        for rows, C in self._row_blocks():
            out[rows] = torch.argmax(g[None, :] - C, dim=1)
        return out

    def plan(self, f, g, eps):
        C = _sq_dists(self.U, self.V, self.U_sq, self.V_sq)
        return torch.exp((f[:, None] + g[None, :] - C) / eps)


class InnerProductCost(FeatureCost):
    r"""Cost :math:`C_{ij} = 1 - u_i^\top v_j`, computed in row blocks.

    For unit rows this is the cosine distance (half the squared Euclidean one). Any factorisation
    :math:`S = U V^\top` of a similarity bounded by 1 in absolute value gives costs in ``[0, 2]``.

    Parameters
    ----------
    U : tensor of shape (n, p)
    V : tensor of shape (m, p)
    batch_size : int, default=None
        Rows per block; ``None`` keeps each block within scikit-learn's ``working_memory``.
    """

    def _row_blocks(self):
        for rows in iter_batches(self.shape[0], self._rows_per_block(self.shape[1])):
            yield rows, 1.0 - self.U[rows] @ self.V.T

    def _col_blocks(self):
        for cols in iter_batches(self.shape[1], self._rows_per_block(self.shape[0])):
            yield cols, 1.0 - self.V[cols] @ self.U.T

    def max_cost(self):
        return float(1.0 + self.U_sq.max().sqrt() * self.V_sq.max().sqrt())

    def plan(self, f, g, eps):
        return torch.exp((f[:, None] + g[None, :] - (1.0 - self.U @ self.V.T)) / eps)


def _segment_lse(values, seg, n_seg):
    """Log-sum-exp of ``values`` grouped by ``seg`` (empty groups give ``-inf``)."""
    mx = torch.full((n_seg,), -torch.inf, dtype=values.dtype, device=values.device)
    mx = mx.scatter_reduce(0, seg, values, reduce="amax", include_self=True)
    safe = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    s = torch.zeros(n_seg, dtype=values.dtype, device=values.device)
    s.index_add_(0, seg, torch.exp(values - safe[seg]))
    return safe + torch.log(s)


def _segment_argmax(values, seg, other, n_seg):
    mx = torch.full((n_seg,), -torch.inf, dtype=values.dtype, device=values.device)
    mx = mx.scatter_reduce(0, seg, values, reduce="amax", include_self=True)
    hit = values == mx[seg]
    out = torch.zeros(n_seg, dtype=torch.long, device=values.device)
    out[seg[hit]] = other[hit]  # ties: one of the maximisers
    return out


class SparseCost:
    """The cost known only on a support: entries ``(rows[k], cols[k], cost[k])``.

    Every row and every column must have at least one entry, otherwise the marginals cannot be
    met; :func:`knn_support` builds such a support.
    """

    def __init__(self, rows, cols, cost, shape):
        self.rows, self.cols, self.cost, self.shape = rows, cols, cost, tuple(shape)
        n_row = torch.bincount(rows, minlength=shape[0])
        n_col = torch.bincount(cols, minlength=shape[1])
        if bool((n_row == 0).any()) or bool((n_col == 0).any()):
            raise ValueError("The sparse support leaves a row or a column of the plan empty.")

    @property
    def dtype(self):
        """dtype of the costs on the support, and of the potentials solved for them."""
        return self.cost.dtype

    @property
    def device(self):
        """Device the support lives on."""
        return self.cost.device

    def row_lse(self, g, eps):
        return _segment_lse((g[self.cols] - self.cost) / eps, self.rows, self.shape[0])

    def col_lse(self, f, eps):
        return _segment_lse((f[self.rows] - self.cost) / eps, self.cols, self.shape[1])

    def max_cost(self):
        return float(self.cost.max())

    def col_softmax_matmul(self, f, eps, W):
        z = (f[self.rows] - self.cost) / eps
        lse = _segment_lse(z, self.cols, self.shape[1])
        w = torch.exp(z - lse[self.cols])
        out = torch.zeros((self.shape[1], W.shape[1]), dtype=W.dtype, device=W.device)
        step = default_batch_size(W.shape[1], itemsize=W.element_size())  # bounded temporaries
        for sl in iter_batches(len(w), step):
            out.index_add_(0, self.cols[sl], w[sl, None].to(W.dtype) * W[self.rows[sl]])
        return out

    def col_argmax(self, f):
        return _segment_argmax(f[self.rows] - self.cost, self.cols, self.rows, self.shape[1])

    def row_argmax(self, g):
        return _segment_argmax(g[self.cols] - self.cost, self.rows, self.cols, self.shape[0])

    def plan(self, f, g, eps):
        vals = torch.exp((f[self.rows] + g[self.cols] - self.cost) / eps)
        P = torch.zeros(self.shape, dtype=vals.dtype, device=vals.device)
        P[self.rows, self.cols] = vals
        return P


def knn_support(U, V, n_neighbors, batch_size=None, inner_product=False):
    """Sparse cost on the union of row-wise and column-wise k-NN pairs.

    The cost is squared Euclidean, or :math:`1 - u_i^\top v_j` with ``inner_product=True``.

    Every source row keeps its ``n_neighbors`` nearest target rows and every target row its
    ``n_neighbors`` nearest source rows; duplicates are merged. Computed in blocks of
    ``batch_size`` rows (``None``: within scikit-learn's ``working_memory``), so memory is
    ``O(batch_size · max(n, m) + (n + m) · n_neighbors)``.

    Returns
    -------
    SparseCost
    """
    full = (InnerProductCost if inner_product else FeatureCost)(U, V, batch_size)
    n, m = full.shape
    kr, kc = min(n_neighbors, m), min(n_neighbors, n)
    rows, cols = [], []
    for r, C in full._row_blocks():
        idx = torch.topk(C, kr, dim=1, largest=False).indices
        rows.append(torch.arange(r.start, r.stop, device=U.device).repeat_interleave(kr))
        cols.append(idx.reshape(-1))
    for c, Ct in full._col_blocks():
        idx = torch.topk(Ct, kc, dim=1, largest=False).indices
        cols.append(torch.arange(c.start, c.stop, device=U.device).repeat_interleave(kc))
        rows.append(idx.reshape(-1))
    rows, cols = torch.cat(rows), torch.cat(cols)
    key = torch.unique(rows * m + cols)
    rows, cols = key // m, key % m
    if inner_product:
        cost = 1.0 - (U[rows] * V[cols]).sum(1)
    else:
        cost = ((U[rows] - V[cols]) ** 2).sum(1)
    return SparseCost(rows, cols, cost, (n, m))


# ------------------------------------------------------------------------------------ solver
@dataclass
class SinkhornResult:
    """Dual potentials of a solved entropic OT problem and their diagnostics.

    Attributes
    ----------
    f, g : tensors of shape (n,) and (m,)
        Potentials in cost units; :math:`\\Pi_{ij} = \\exp((f_i + g_j - C_{ij})/\\varepsilon)`.
    reg : float
        The (absolute) :math:`\\varepsilon` solved for.
    n_iter : int
        Sinkhorn iterations, the :math:`\\varepsilon`-scaling stages included.
    marginal_error : float
        :math:`\\|\\Pi^\\top \\mathbf 1 - b\\|_1` (rows are exact after the last update).
    cost : DenseCost, FeatureCost or SparseCost
    """

    f: torch.Tensor
    g: torch.Tensor
    reg: float
    n_iter: int
    marginal_error: float
    cost: object

    def plan(self):
        """The plan as a dense ``n × m`` tensor (small problems and tests only)."""
        return self.cost.plan(self.f, self.g, self.reg)

    def col_barycenter(self, W):
        r"""For each target column ``j``: :math:`\sum_i \Pi_{ij} W_i / \sum_i \Pi_{ij}`."""
        return self.cost.col_softmax_matmul(self.f, self.reg, W)

    def col_argmax(self):
        """For each target column, the source row carrying most of its mass."""
        return self.cost.col_argmax(self.f)

    def row_argmax(self):
        """For each source row, the target column carrying most of its mass."""
        return self.cost.row_argmax(self.g)


def sinkhorn_log(cost, reg, *, a=None, b=None, max_iter=1000, tol=1e-5, scaling=0.7,
                 check_every=10, raise_on_failure=True):
    r"""Solve entropic OT in the log domain with :math:`\varepsilon`-scaling.

    Parameters
    ----------
    cost : DenseCost, FeatureCost or SparseCost, or a tensor (wrapped in :class:`DenseCost`)
    reg : float
        Entropic regularisation :math:`\varepsilon` in the cost's units (> 0).
    a, b : tensors of shape (n,) and (m,), default=None
        Marginals (non-negative, equal total mass); uniform when ``None``.
    max_iter : int, default=1000
        Iterations at the final :math:`\varepsilon`, after the scaling stages.
    tol : float, default=1e-5
        Stop when the column-marginal error :math:`\|\Pi^\top\mathbf 1 - b\|_1`, relative to the
        total mass, falls below ``tol``.
    scaling : float in (0, 1), default=0.7
        Ratio between successive :math:`\varepsilon` of the annealing schedule, which starts at
        the largest cost; ``0`` disables it (start directly at ``reg``).
    check_every : int, default=10
        Evaluate the stopping criterion every this many iterations.
    raise_on_failure : bool, default=True
        Raise :class:`SinkhornError` (a :class:`~skalign.exceptions.NumericalError`) when the
        potentials stop being finite or the marginal error is still above ``100 · tol`` after
        ``max_iter`` iterations.

    Returns
    -------
    SinkhornResult
    """
    if isinstance(cost, torch.Tensor):
        cost = DenseCost(cost)
    if not reg > 0:
        raise ValueError(f"reg must be positive, got {reg}.")
    n, m = cost.shape
    dtype, device = cost.dtype, cost.device
    a = torch.full((n,), 1.0 / n, dtype=dtype, device=device) if a is None else a.to(device, dtype)
    b = torch.full((m,), 1.0 / m, dtype=dtype, device=device) if b is None else b.to(device, dtype)
    mass = float(a.sum())
    if not math.isclose(mass, float(b.sum()), rel_tol=1e-4):
        raise ValueError(f"The marginals have different masses ({mass} vs {float(b.sum())}).")
    log_a, log_b = torch.log(a), torch.log(b)
    f = torch.zeros(n, dtype=dtype, device=device)
    g = torch.zeros(m, dtype=dtype, device=device)

    schedule = []
    if scaling and scaling > 0:
        eps = max(cost.max_cost(), reg)
        while eps > reg:
            schedule.append(eps)
            eps *= scaling
    n_iter, err = 0, math.inf

    def step(eps):
        nonlocal f, g
        g = eps * (log_b - cost.col_lse(f, eps))
        f = eps * (log_a - cost.row_lse(g, eps))

    for eps in schedule:
        step(eps)
        n_iter += 1
    for it in range(max_iter):
        lse = cost.col_lse(f, reg) if it % check_every == 0 else None
        if lse is not None:
            col = torch.exp(g / reg + lse)
            err = float((col - b).abs().sum()) / mass
            if not math.isfinite(err) or not bool(torch.isfinite(f).all()):
                break
            if err < tol:
                break
            g = reg * (log_b - lse)
        else:
            g = reg * (log_b - cost.col_lse(f, reg))
        f = reg * (log_a - cost.row_lse(g, reg))
        n_iter += 1
    else:
        err = float((torch.exp(g / reg + cost.col_lse(f, reg)) - b).abs().sum()) / mass

    finite = math.isfinite(err) and bool(torch.isfinite(f).all()) and bool(torch.isfinite(g).all())
    if raise_on_failure and not finite:
        diagnosis = f"Sinkhorn produced non-finite potentials at reg={reg:.3g}."
        raise SinkhornError(f"{diagnosis} Increase reg.", diagnosis=diagnosis, cause="non_finite")
    if raise_on_failure and err > 100 * tol:
        diagnosis = (f"Sinkhorn did not converge: the plan's column marginals are off by "
                     f"{err:.3g} (relative L1) after {n_iter} iterations at reg={reg:.3g}.")
        raise SinkhornError(
            f"{diagnosis} Increase max_iter or reg, or use a denser support.",
            diagnosis=diagnosis, cause="not_converged",
        )
    return SinkhornResult(f=f, g=g, reg=float(reg), n_iter=n_iter, marginal_error=err, cost=cost)
