"""The discovered pairs of :class:`~skalign.AnchorBootstrapper` as anchors of its inner estimator.

Picking the most confident mutual pairs, fitting ``estimator_`` (a configured clone of
``estimator``) on the seeds plus those pairs, and ``map_rounds``: pairing the pools again under
the fitted map. A mixin of the estimator: its methods read the estimator's parameters and set
the ``anchor_*``, ``*_anchors_``, ``estimator_`` and ``map_rounds_`` attributes.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from sklearn.base import clone

from ..utils._backend import row_normalize, to_numpy, to_tensor
from .matching import csls_match


def _with_chosen_penalty(est, fitted):
    """``est`` with the penalty ``fitted`` chose, when ``est`` searches one (``alpha="auto"``,
    as :class:`~skalign.LinearAligner`); otherwise ``est`` itself."""
    if est.get_params(deep=False).get("alpha") == "auto" and hasattr(fitted, "alpha_"):
        return clone(est).set_params(alpha=fitted.alpha_)
    return est


class _AnchorsMixin:
    """The inner estimator fitted on the seeds plus the discovered pairs, and ``map_rounds``."""

    def _confident_mutual(self, match, n_seed):
        """Rows of the mutual pairs of ``match``, most confident first; with an integer
        ``n_anchors`` only the ``n_anchors - n_seed`` most confident."""
        mutual = torch.nonzero(match.mutual()).flatten()
        order = torch.argsort(match.confidence[mutual], descending=True, stable=True)
        if self.n_anchors != "auto":
            order = order[:max(self.n_anchors - n_seed, 0)]
        return mutual[order]

    def _fit_on_anchors(self, X, y, Xp, Yp, src, tgt, confidence, mutual, est, gen):
        """Record the discovered pairs (pool rows ``src``, ``tgt``) and fit ``estimator_`` on
        the seeds ``X, y`` plus those pairs."""
        src_np = to_numpy(src).astype(np.int64)
        tgt_np = to_numpy(tgt).astype(np.int64)
        self.anchor_pairs_ = np.column_stack([src_np, tgt_np]).reshape(-1, 2)
        self.anchor_confidence_ = to_numpy(confidence).astype(np.float64)
        self.anchor_mutual_ = to_numpy(mutual).astype(bool)
        self.source_anchors_ = np.vstack([X, np.asarray(Xp)[src_np]])
        self.target_anchors_ = np.vstack([y, np.asarray(Yp)[tgt_np]])
        self.estimator_ = self._inner_estimator(est, gen).fit(self.source_anchors_,
                                                              self.target_anchors_)

    def _pair_under_map(self, X, y, Xp, Yp, cand, est, gen, n_seed=None):
        """``map_rounds``: pair the pools again as the fitted map sees them, then refit.

        The candidate rows are translated by ``estimator_`` and paired with the target pool by
        mutual CSLS nearest neighbours (each side centred, as in discovery); ``estimator_`` is
        refitted on the seeds plus those pairs. Stops early when at most ``tol`` of the pairs
        are new. Returns the fitted state after each round (:meth:`_stage`). ``n_seed``: the
        seeds an integer ``n_anchors`` counts (default ``len(X)``).
        """
        n_seed = len(X) if n_seed is None else n_seed
        dev = torch.device(self.device_)
        Xc = np.asarray(Xp)[to_numpy(cand)]
        V = to_tensor(Yp, dev)
        V = row_normalize(V - V.mean(0) if self.center else V)
        prev = set(map(tuple, self.anchor_pairs_.tolist()))
        stages = []
        for r in range(self.map_rounds):
            t0 = time.perf_counter()
            U = to_tensor(np.asarray(self.estimator_.transform(Xc)), dev)
            U = row_normalize(U - U.mean(0) if self.center else U)
            match = csls_match(U, V, k=self.csls_n_neighbors, batch_size=self.batch_size)
            pick = self._confident_mutual(match, n_seed)
            if len(pick) < 2:
                break
            # a penalty searched by cross-validation is searched again only for the last
            # round's fit: the rounds between change a few per cent of the pairs
            inner = est if r == self.map_rounds - 1 else _with_chosen_penalty(est,
                                                                               self.estimator_)
            self._fit_on_anchors(X, y, Xp, Yp, cand[pick], match.forward[pick],
                                 match.confidence[pick], match.mutual()[pick], inner, gen)
            stages.append(self._stage())
            pairs = set(map(tuple, self.anchor_pairs_.tolist()))
            changed = len(pairs - prev) / len(pairs)
            info = {"round": r + 1, "n_pairs": len(pick), "changed": changed,
                    "seconds": time.perf_counter() - t0}
            self.map_rounds_.append(info)
            if self.verbose:
                print(f"[AnchorBootstrapper] map round {r + 1}: {len(pick)} mutual pairs under "
                      f"the fitted map, {changed:.3f} new ({info['seconds']:.2f} s)")
            if changed <= self.tol:
                break
            prev = pairs
        return stages

    def _inner_estimator(self, est, gen):
        """Clone of ``est`` with this estimator's ``device``, and its ``random_state`` and
        ``batch_size`` where the clone leaves them to the caller (``None``)."""
        est = clone(est)
        own = est.get_params(deep=False)
        if "random_state" in own and own["random_state"] is None:
            # keeps the whole fit repeatable under this estimator's random_state
            seed = int(torch.randint(2**31 - 1, (1,), generator=gen, device=gen.device))
            est.set_params(random_state=seed)
        if "device" in own:
            est.set_params(device=self.device)
        if "batch_size" in own and own["batch_size"] is None:
            est.set_params(batch_size=self.batch_size)
        return est
