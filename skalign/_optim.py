"""Bookkeeping shared by every iterative optimisation in skalign.

:class:`LossHistory` records the loss curve, prints progress when ``verbose``, raises a
:class:`~skalign._backend.NumericalError` naming the parameter to change when the loss stops being
finite, detects convergence by relative improvement, and warns with
:class:`~sklearn.exceptions.ConvergenceWarning` when ``max_iter`` is reached first — the behaviour
of scikit-learn's :class:`~sklearn.neural_network.MLPRegressor` (``loss_curve_``, ``n_iter_``).
"""

from __future__ import annotations

import math
import time
import warnings

from sklearn.exceptions import ConvergenceWarning

from ._backend import NumericalError

__all__ = ["LossHistory"]


class LossHistory:
    """Track one optimisation run.

    Parameters
    ----------
    owner : str
        Name printed in messages (usually the estimator's class name).
    max_iter : int
        Iteration cap; reaching it without convergence warns.
    tol : float or None
        Converged when the best loss has not improved by more than ``tol · max(|best|, 1)`` for
        ``n_iter_no_change`` consecutive iterations. ``None`` disables the test (always run
        ``max_iter`` iterations, no warning).
    n_iter_no_change : int
    verbose : int
        ``> 0`` prints the loss every ``max(1, max_iter // 10)`` iterations (every iteration for
        ``verbose > 1``).
    divergence_hint : str
        Appended to the error raised on a non-finite loss, e.g. ``"Lower learning_rate."``.

    Examples
    --------
    >>> h = LossHistory("Demo", max_iter=3, tol=None)
    >>> for loss in [3.0, 2.0, 1.0]:
    ...     if h.record(loss):
    ...         break
    >>> h.finish().curve, h.n_iter
    ([3.0, 2.0, 1.0], 3)
    """

    def __init__(self, owner, *, max_iter, tol=1e-4, n_iter_no_change=10, verbose=0,
                 divergence_hint="Lower the learning rate."):
        self.owner = owner
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.verbose = verbose
        self.divergence_hint = divergence_hint
        self.curve: list[float] = []
        self.converged = False
        self._best = math.inf
        self._stall = 0
        self._start = time.perf_counter()

    @property
    def n_iter(self):
        """Number of iterations recorded so far."""
        return len(self.curve)

    def record(self, loss) -> bool:
        """Record one iteration's loss; return ``True`` when the run has converged."""
        loss = float(loss)
        it = len(self.curve) + 1
        if not math.isfinite(loss):
            raise NumericalError(
                f"{self.owner}: the loss became {loss} at iteration {it}; the optimisation "
                f"diverged. {self.divergence_hint}"
            )
        self.curve.append(loss)
        every = 1 if self.verbose > 1 else max(1, self.max_iter // 10)
        if self.verbose and (it % every == 0 or it == 1):
            print(f"[{self.owner}] iteration {it:5d}  loss {loss:.6g}  "
                  f"({time.perf_counter() - self._start:.2f} s)")
        if self.tol is None:
            return False
        scale = max(abs(self._best) if math.isfinite(self._best) else 1.0, 1.0)
        if loss < self._best - self.tol * scale:
            self._best, self._stall = loss, 0
        else:
            self._stall += 1
        self.converged = self._stall >= self.n_iter_no_change
        return self.converged

    def finish(self):
        """Warn if the run hit ``max_iter`` without converging; return ``self``."""
        if self.tol is not None and not self.converged and self.n_iter >= self.max_iter:
            warnings.warn(
                f"{self.owner}: the optimisation did not converge in max_iter={self.max_iter} "
                "iterations; increase max_iter or tol.",
                ConvergenceWarning,
                stacklevel=3,
            )
        if self.verbose:
            print(f"[{self.owner}] done: {self.n_iter} iterations, final loss "
                  f"{self.curve[-1] if self.curve else float('nan'):.6g}")
        return self
