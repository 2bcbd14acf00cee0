"""The start guard of :class:`~skalign.AnchorBootstrapper`: discovered pairs must beat the seeds.

The closed-form start of the bootstrapper is its inner estimator fitted on the seed pairs alone.
One split of the seed pairs is held out, and discovery runs once, on the pools and the other
seeds. Each stage of that fit (the fit on the training seeds plus the discovered pairs, then one
per ``map_rounds`` round) is kept only if it beats the start fitted on the same training seeds,
on the held-out seeds, scored as :class:`~skalign.GeRAAligner` scores its epochs
(:mod:`skalign.utils._validation`). The stage kept (or the start) is then refitted on every seed
pair plus its discovered pairs, without a second discovery. A mixin of the estimator: it sets
``validation_scores_``, ``best_validation_score_``, ``best_stage_`` and ``kept_start_``, and
puts the chosen stage's anchors and ``estimator_`` in place.
"""

from __future__ import annotations

import numpy as np
import torch

from ..utils._backend import row_normalize, to_tensor, work_threads
from ..utils._validation import EpochSelection, gallery_rows, log_reciprocal_ranks
from .anchors import _with_chosen_penalty

#: seed pairs held out at least (half of them when fewer): the start and a stage are told
#: apart on these alone
_MIN_HELD_OUT = 10

_STAGE_ATTRIBUTES = ("anchor_pairs_", "anchor_confidence_", "anchor_mutual_", "source_anchors_",
                     "target_anchors_", "estimator_")


class _StartGuardMixin:
    """One held-out split of the seed pairs scores the start against every stage of the fit."""

    def _stage(self):
        """The fitted state of the current stage: its anchors and ``estimator_``."""
        return {name: getattr(self, name) for name in _STAGE_ATTRIBUTES}

    def _guard_split(self, X, pool, gen):
        """``(training rows, held-out rows)`` of the seed pairs, or ``None``: no guard.

        Nothing is held out without ``validation_fraction``, with fewer than three seed pairs
        (none could be spared) or without both pools (each missing pool is the seed rows, so
        discovery would see the held-out seeds).
        """
        pools = pool is not None and pool.X is not None and pool.y is not None
        if self.validation_fraction is None or not pools or len(X) < 3:
            return None
        n = len(X)
        n_val = max(round(self.validation_fraction * n), min(_MIN_HELD_OUT, n // 2), 1)
        perm = torch.randperm(n, generator=gen, device=gen.device).cpu().numpy()
        return np.sort(perm[n_val:]), np.sort(perm[:n_val])

    def _guarded_fit(self, X, y, pool, est, gen):
        """Discovery (once), the certificate and the choice between the start and the stages."""
        split = self._guard_split(X, pool, gen)
        self.validation_scores_ = self.best_validation_score_ = None
        if split is None:
            stages = self._discover_and_fit(X, y, pool, est, gen)
            self._certify(pool, gen, est, len(X))
            nothing = not len(self.anchor_pairs_)  # the fit is the start itself
            self.best_stage_ = 0 if nothing else len(stages)
            self.kept_start_ = nothing and len(X) > 0
            return
        tr, va = split
        stages = self._discover_and_fit(X[tr], y[tr], pool, est, gen, n_seed=len(X))
        self._certify(pool, gen, est, len(tr))
        if not len(self.anchor_pairs_):  # n_anchors left no room: the start, on every seed
            self._keep_start(X, y, est, gen)
            return
        # the inner fits and the scores: products of the anchors' size, no more
        work = len(self.source_anchors_) * X.shape[1] * y.shape[1]
        with work_threads(work, self.device_):
            self._choose_stage(X, y, tr, va, pool, stages, est, gen)

    def _choose_stage(self, X, y, tr, va, pool, stages, est, gen):
        """Score the start and the stages on the held-out seeds ``va``; put the best in place,
        refitted on every seed pair."""
        selection = self._score_stages(X, y, tr, va, pool, stages, est, gen)
        best = selection.best_epoch
        self.validation_scores_ = [float(np.exp(v)) for v in selection.scores]
        self.best_validation_score_ = self.validation_scores_[best]
        if self.verbose:
            print("[AnchorBootstrapper] validation on held-out seed pairs: keeping "
                  + (f"stage {best}" if best else "the start (the seed pairs' own map)"))
        if best == 0:
            self._keep_start(X, y, est, gen)
            return
        self.best_stage_, self.kept_start_ = best, False
        stage = stages[best - 1]
        for name, value in stage.items():
            setattr(self, name, value)
        # the stage's discovered pairs with every seed pair, the held-out ones included
        self.source_anchors_ = np.vstack([X, stage["source_anchors_"][len(tr):]])
        self.target_anchors_ = np.vstack([y, stage["target_anchors_"][len(tr):]])
        inner = self._inner_estimator(_with_chosen_penalty(est, stage["estimator_"]), gen)
        self.estimator_ = inner.fit(self.source_anchors_, self.target_anchors_)

    def _keep_start(self, X, y, est, gen):
        """Return the start: ``est`` fitted on every seed pair (the discovered pairs stay on
        record in ``anchor_pairs_``)."""
        self.best_stage_, self.kept_start_ = 0, True
        self.estimator_ = self._inner_estimator(est, gen).fit(X, y)
        self.source_anchors_, self.target_anchors_ = X, y

    def _score_stages(self, X, y, tr, va, pool, stages, est, gen):
        """:class:`EpochSelection` of the start (0) and the stages (1, 2, ...) on held-out seeds.

        The start is a clone of ``est`` fitted on the training seeds ``tr``; the stages are
        those of the fit from the training seeds, so the held-out seeds ``va`` guided neither.
        Each held-out seed scores the rank of its target among :func:`gallery_rows` of the seed
        targets and the target pool, from its translation.
        """
        dev = torch.device(self.device_)
        Yp = np.asarray(pool.y)
        mu = to_tensor(Yp.mean(0), dev) if self.center else 0.0
        # the gallery's rows of the seed targets followed by the target pool
        rows = gallery_rows(len(y) + len(Yp), torch.as_tensor(va, device=gen.device), gen)
        rows = rows.cpu().numpy()
        seed_rows = rows < len(y)
        picked = np.empty((len(rows), y.shape[1]), dtype=np.result_type(y, Yp))
        picked[seed_rows] = y[rows[seed_rows]]
        picked[~seed_rows] = Yp[rows[~seed_rows] - len(y)]
        gallery = row_normalize(to_tensor(picked, dev) - mu)

        def score(fitted):
            Q = to_tensor(np.asarray(fitted.transform(X[va])), dev, gallery.dtype)
            return log_reciprocal_ranks(row_normalize(Q - mu), gallery)

        selection = EpochSelection()
        selection.add(0, score(self._inner_estimator(est, gen).fit(X[tr], y[tr])))
        for s, stage in enumerate(stages, start=1):
            selection.add(s, score(stage["estimator_"]))
        return selection
