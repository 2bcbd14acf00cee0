"""The start guard of :class:`~skalign.AnchorBootstrapper`: discovered pairs must beat the seeds.

The closed-form start of the bootstrapper is its inner estimator fitted on the seed pairs alone.
Each later stage (the fit on the seeds plus the discovered pairs, then one per ``map_rounds``
round) is kept only if it beats that start on seed pairs held out from the whole fit — the
discovery included — scored as :class:`~skalign.GeRAAligner` scores its epochs
(:mod:`skalign.utils._validation`). A mixin of the estimator: it sets ``validation_scores_``,
``best_validation_score_``, ``best_stage_`` and ``kept_start_``, and puts the chosen stage's
anchors and ``estimator_`` in place.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.base import clone

from ..utils._backend import row_normalize, to_tensor
from ..utils._validation import EpochSelection, gallery_rows, log_reciprocal_ranks, validation_folds

_STAGE_ATTRIBUTES = ("anchor_pairs_", "anchor_confidence_", "anchor_mutual_", "source_anchors_",
                     "target_anchors_", "estimator_")


class _StartGuardMixin:
    """Validation folds of the seed pairs score the start against every stage of the fit."""

    def _stage(self):
        """The fitted state of the current stage: its anchors and ``estimator_``."""
        return {name: getattr(self, name) for name in _STAGE_ATTRIBUTES}

    def _choose_stage(self, X, y, pool, stages, est, gen):
        """Score the start and each of ``stages`` on held-out seed pairs; keep the best.

        ``stages[s - 1]`` is stage ``s`` (1: the discovered pairs, ``1 + r``: after map round
        ``r``); the last is the current state. Sets the validation attributes and, when an
        earlier stage or the start wins, puts it in place.
        """
        self.validation_scores_ = self.best_validation_score_ = None
        n_last = len(stages)
        if not len(self.anchor_pairs_):  # nothing discovered: the fit is the start itself
            self.best_stage_, self.kept_start_ = 0, len(X) > 0
            return
        # anchor_indices into a missing source pool index the seed rows: no fold has them all
        seed_rows_given = self.anchor_indices is not None and (pool is None or pool.X is None)
        folds = []
        if self.validation_fraction is not None and len(X) and not seed_rows_given:
            folds = validation_folds(len(X), self.validation_fraction, gen)
        if not folds:  # no seeds, or too few to hold any out: no start to compare against
            self.best_stage_, self.kept_start_ = n_last, False
            return
        selection = self._score_stages(X, y, pool, n_last, est, folds, gen)
        best = selection.best_epoch
        self.validation_scores_ = [float(np.exp(v)) for v in selection.scores]
        self.best_validation_score_ = self.validation_scores_[best]
        self.best_stage_, self.kept_start_ = best, best == 0
        if self.verbose:
            print("[AnchorBootstrapper] validation on held-out seed pairs: keeping "
                  + (f"stage {best}" if best else "the start (the seed pairs' own map)"))
        if best == 0:
            self.estimator_ = self._inner_estimator(est, gen).fit(X, y)
            self.source_anchors_, self.target_anchors_ = X, y
        elif best < n_last:
            for name, value in stages[best - 1].items():
                setattr(self, name, value)

    def _score_stages(self, X, y, pool, n_stages, est, folds, gen):
        """:class:`EpochSelection` of the start (0) and the stages (1, 2, ...) over ``folds``.

        In each fold the start is a clone of ``est`` fitted on the training seeds, and the
        stages are those of a whole fit (discovery, ``map_rounds``) from the training seeds
        alone, so the held-out seeds guide neither. Each held-out seed scores the rank of its
        target among :func:`gallery_rows` of the seed targets and the target pool, from its
        translation. A fold whose fit stops early repeats its last stage.
        """
        dev = torch.device(self.device_)
        Yp = y if pool is None or pool.y is None else np.asarray(pool.y)
        targets = y if Yp is y else np.vstack([y, Yp])
        mu = to_tensor(Yp.mean(0), dev) if self.center else 0.0
        targets = row_normalize(to_tensor(targets, dev) - mu)
        fold_fit = clone(self).set_params(discovery=self.discovery_, validation_fraction=None,
                                          verbose=0)
        fold_fit.device_ = self.device_
        selection = EpochSelection()
        for train, val in folds:
            tr, va = train.cpu().numpy(), val.cpu().numpy()
            gallery = targets[gallery_rows(len(targets), val, gen)]

            def score(fitted):
                Q = to_tensor(np.asarray(fitted.transform(X[va])), dev, gallery.dtype)
                return log_reciprocal_ranks(row_normalize(Q - mu), gallery)

            selection.add(0, score(self._inner_estimator(est, gen).fit(X[tr], y[tr])))
            with warnings.catch_warnings():
                # the fit from all the seeds reports on discovery; a fold's would repeat it
                warnings.simplefilter("ignore")
                stages = fold_fit._discover_and_fit(X[tr], y[tr], pool, est, gen)
            for s in range(1, n_stages + 1):
                selection.add(s, score(stages[min(s, len(stages)) - 1]["estimator_"]))
        return selection
