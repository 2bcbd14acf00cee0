"""Bookkeeping and early stopping shared by every iterative optimisation in skalign.

:class:`LossHistory` records the loss curve, prints progress when ``verbose``, raises a
:class:`~skalign.utils._backend.NumericalError` naming the parameter to change when the loss
stops being finite, stops when the monitored value (the training loss, or a validation score with
``early_stopping``) has stalled, keeps the state of the best iteration, and warns with
:class:`~sklearn.exceptions.ConvergenceWarning` when ``max_iter`` is reached first — the behaviour
of scikit-learn's :class:`~sklearn.neural_network.MLPRegressor` (``loss_curve_``, ``n_iter_``,
``validation_scores_``, ``best_validation_score_``). The stopping rule itself is
:class:`Plateau`.
"""

from __future__ import annotations

import math
import time
import warnings

from sklearn.exceptions import ConvergenceWarning

from ._backend import NumericalError

__all__ = ["LossHistory", "Plateau"]


class Plateau:
    """The stopping rule: stalled after ``n_iter_no_change`` values without an improvement.

    A value improves when it is below the reference by more than ``tol · max(|reference|, 1)``;
    the reference is the last improving value (``inf`` at first, so the first finite value
    improves).

    Parameters
    ----------
    tol : float
    n_iter_no_change : int

    Examples
    --------
    >>> p = Plateau(tol=0.1, n_iter_no_change=2)
    >>> [p.update(v) for v in (5.0, 4.0, 3.95, 3.9)], p.stalled
    ([True, True, False, False], True)
    """

    def __init__(self, tol, n_iter_no_change):
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.reference = math.inf
        self.stall = 0

    def update(self, value) -> bool:
        """Record one value; return whether it improved on the reference."""
        scale = max(abs(self.reference) if math.isfinite(self.reference) else 1.0, 1.0)
        if value < self.reference - self.tol * scale:
            self.reference, self.stall = value, 0
            return True
        self.stall += 1
        return False

    @property
    def stalled(self):
        """Whether the last ``n_iter_no_change`` values brought no improvement."""
        return self.stall >= self.n_iter_no_change


class LossHistory:
    """Track one optimisation run and decide when it stops.

    Parameters
    ----------
    owner : str
        Name printed in messages (usually the estimator's class name).
    max_iter : int
        Iteration cap; reaching it without convergence warns.
    tol : float or None
        Converged when the monitored value has not improved by more than
        ``tol · max(|best|, 1)`` for ``n_iter_no_change`` consecutive iterations
        (:class:`Plateau`). ``None`` disables the test on the training loss (always run
        ``max_iter`` iterations, no warning); with ``early_stopping`` it makes any improvement of
        the validation score count, without a warning at ``max_iter``.
    n_iter_no_change : int
    verbose : int
        ``> 0`` prints the loss every ``max(1, max_iter // 10)`` iterations (every iteration for
        ``verbose > 1``).
    divergence_hint : str
        Appended to the error raised on a non-finite loss, e.g. ``"Lower learning_rate."``.
    early_stopping : bool, default=False
        Monitor the ``validation_score`` passed to :meth:`record` (lower is better) instead of the
        training loss.

    Attributes
    ----------
    curve : list of float
        The training loss per iteration.
    validation_scores : list of float or None
        The validation score per iteration (``None`` without ``early_stopping``).
    best_value : float
        Smallest monitored value so far.
    best_state : object or None
        What the ``snapshot`` passed to :meth:`record` returned at the iteration of
        ``best_value``.
    converged : bool

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
                 divergence_hint="Lower the learning rate.", early_stopping=False):
        self.owner = owner
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.verbose = verbose
        self.divergence_hint = divergence_hint
        self.early_stopping = early_stopping
        self.curve: list[float] = []
        self.validation_scores = [] if early_stopping else None
        self.best_value = math.inf
        self.best_state = None
        self.converged = False
        self._plateau = None
        if tol is not None or early_stopping:
            self._plateau = Plateau(0.0 if tol is None else tol, n_iter_no_change)
        self._start = time.perf_counter()

    @property
    def n_iter(self):
        """Number of iterations recorded so far."""
        return len(self.curve)

    def record(self, loss, *, validation_score=None, snapshot=None) -> bool:
        """Record one iteration; return ``True`` when the run should stop.

        Parameters
        ----------
        loss : float
            The training loss.
        validation_score : float, default=None
            The held-out score (lower is better); required with ``early_stopping``.
        snapshot : callable, default=None
            Called (no arguments) when the monitored value reaches a new minimum; its result is
            kept in ``best_state``.
        """
        loss = float(loss)
        it = len(self.curve) + 1
        self._check_finite(loss, "loss", it)
        self.curve.append(loss)
        self._print(loss, it)
        value = loss
        if self.early_stopping:
            value = float(validation_score)
            self._check_finite(value, "validation loss", it)
            self.validation_scores.append(value)
        if value < self.best_value:
            self.best_value = value
            if snapshot is not None:
                self.best_state = snapshot()
        if self._plateau is None:
            return False
        self._plateau.update(value)
        self.converged = self._plateau.stalled
        return self.converged

    def _check_finite(self, value, what, it):
        if not math.isfinite(value):
            raise NumericalError(
                f"{self.owner}: the {what} became {value} at iteration {it}; the optimisation "
                f"diverged. {self.divergence_hint}"
            )

    def _print(self, loss, it):
        every = 1 if self.verbose > 1 else max(1, self.max_iter // 10)
        if self.verbose and (it % every == 0 or it == 1):
            print(f"[{self.owner}] iteration {it:5d}  loss {loss:.6g}  "
                  f"({time.perf_counter() - self._start:.2f} s)")

    def finish(self):
        """Warn if the run hit ``max_iter`` without converging; return ``self``."""
        if self.tol is not None and not self.converged and self.n_iter >= self.max_iter:
            if self.early_stopping:
                message = (f"the validation loss was still improving after "
                           f"max_iter={self.max_iter} iterations; increase max_iter.")
            else:
                message = (f"the optimisation did not converge in max_iter={self.max_iter} "
                           "iterations; increase max_iter or tol.")
            warnings.warn(f"{self.owner}: {message}", ConvergenceWarning, stacklevel=3)
        if self.verbose:
            print(f"[{self.owner}] done: {self.n_iter} iterations, final loss "
                  f"{self.curve[-1] if self.curve else float('nan'):.6g}")
        return self
