"""The relative-representation rounds of :class:`~skalign.AnchorBootstrapper`.

``discovery="rounds"``: each round describes the pool rows by their cosines to the current
anchors, pairs them (CSLS, Sinkhorn or cosine), and takes the most confident mutual pairs as the
next round's anchors, with the diagnostics of ``rounds_`` and the warnings of an unreliable or
unconverged discovery. A mixin of the estimator: its methods read the estimator's parameters.
"""

from __future__ import annotations

import time
import warnings

import torch
from sklearn.exceptions import ConvergenceWarning

from ..exceptions import AnchorConsistencyWarning
from ..utils._backend import row_normalize, to_numpy
from .matching import csls_match, relative_factors, sinkhorn_match
from .sinkhorn import SinkhornError

_DENSE_MAX_ELEMENTS = 2**22  # plan="auto": one block / a dense plan up to about 2000 × 2000
_CONSISTENCY_MIN = 0.8  # warn when fewer of last round's pairs are still mutual


class _RoundsMixin:
    """The rounds of ``discovery="rounds"`` and the pairing of one round (``correspondence``)."""

    def _resolve_plan(self, n, m):
        if self.plan != "auto":
            return self.plan
        if n * m <= _DENSE_MAX_ELEMENTS:
            return "dense"
        return "sparse" if self.correspondence == "sinkhorn" else "chunked"

    def _match(self, U, V, gen):
        if self.correspondence == "sinkhorn":
            return self._sinkhorn_match(U, V, gen)
        rows = max(len(U), 1) if self.plan_ == "dense" else self.batch_size
        k = self.csls_n_neighbors if self.correspondence == "csls" else 0
        return csls_match(U, V, k=k, batch_size=rows)

    def _sinkhorn_match(self, U, V, gen):
        """:func:`sinkhorn_match`, its failures reworded with this estimator's parameters."""
        try:
            return sinkhorn_match(U, V, self.sinkhorn_reg, plan=self.plan_,
                                  n_neighbors=self.n_neighbors, batch_size=self.batch_size,
                                  max_iter=self.sinkhorn_max_iter, tol=self.sinkhorn_tol,
                                  generator=gen)
        except SinkhornError as exc:
            if exc.cause == "non_finite":
                advice = f"Increase sinkhorn_reg (now {self.sinkhorn_reg})."
            else:
                advice = (f"Increase sinkhorn_max_iter (now {self.sinkhorn_max_iter}) or "
                          f"sinkhorn_reg (now {self.sinkhorn_reg})")
                if self.plan_ == "sparse":
                    advice += f", or n_neighbors (now {self.n_neighbors}) for a denser support"
                advice += "."
            raise SinkhornError(f"{type(self).__name__}: {exc.diagnosis} {advice}",
                                diagnosis=exc.diagnosis, cause=exc.cause) from exc

    def _rounds(self, LX, LY, XP, YP, gen, given):
        """Grow the anchor set; return the last round's matching and its accepted pairs."""
        s = len(LX)
        src = torch.zeros(0, dtype=torch.long, device=XP.device)
        tgt = torch.zeros_like(src)
        prev, prev_mutual = set(), set()
        self.rounds_, self.loss_curve_ = [], []
        converged = False
        for r in range(self.max_rounds):
            t0 = time.perf_counter()
            U, V = relative_factors(XP, YP, torch.cat([LX, XP[src]]), torch.cat([LY, YP[tgt]]))
            match = self._match(U, V, gen)
            del U, V
            new_src, pairs, mutual_pairs, info = self._round(match, LX, LY, XP, YP, given,
                                                             prev, prev_mutual)
            info = {"round": r + 1, "n_anchors": s + len(src), **info,
                    "seconds": time.perf_counter() - t0, **match.info}
            self.rounds_.append(info)
            self.loss_curve_.append(info["loss"])
            self._print_round(info)
            src, tgt = new_src, match.forward[new_src]
            if r > 0 and info["changed_returned"] <= self.tol:
                converged = True
                break
            prev, prev_mutual = pairs, mutual_pairs
        self.n_iter_ = len(self.rounds_)
        self._warn_if_unreliable(converged)
        return match, src, tgt

    def _round(self, match, LX, LY, XP, YP, given, prev, prev_mutual):
        """The pairs one round accepts, its mutual pairs, and its diagnostics (see ``rounds_``)."""
        keep = max(self.n_working_anchors - len(LX), 0)
        mutual = torch.nonzero(match.mutual()).flatten()
        order = torch.argsort(match.confidence[mutual], descending=True, stable=True)
        new_src = mutual[order[:keep]]
        new_tgt = match.forward[new_src]

        def as_pairs(rows):
            return set(zip(to_numpy(rows).tolist(), to_numpy(match.forward[rows]).tolist()))

        pairs, mutual_pairs = as_pairs(new_src), as_pairs(mutual)
        if given is None:
            n_return = keep if self.n_anchors == "auto" else max(self.n_anchors - len(LX), 0)
            ret = as_pairs(mutual[order[:n_return]])
        else:
            ret = as_pairs(torch.arange(len(given), device=XP.device))
        sim = match.similarity[new_src]
        info = {
            "n_mutual": len(mutual), "n_accepted": len(new_src),
            "mean_confidence": float(match.confidence[new_src].mean())
            if len(new_src) else float("nan"),
            "changed": len(pairs - prev) / max(len(pairs), 1),
            "changed_returned": len(ret - prev_mutual) / max(len(ret), 1),
            "still_mutual": len(prev & mutual_pairs) / len(prev) if prev else float("nan"),
            "seed_agreement": self._seed_agreement(LX, LY, XP[new_src], YP[new_tgt]),
            "loss": float(1 - sim.mean()) if len(new_src) else float("nan"),
        }
        return new_src, pairs, mutual_pairs, info

    def _print_round(self, info):
        if self.verbose:
            print(f"[AnchorBootstrapper] round {info['round']:2d}: {info['n_anchors']:5d} "
                  f"anchors, {info['n_mutual']:6d} mutual, {info['n_accepted']:5d} accepted "
                  f"(mean confidence {info['mean_confidence']:.4f}), changed "
                  f"{info['changed']:.3f} (returned {info['changed_returned']:.3f}), "
                  f"still mutual {info['still_mutual']:.3f}, seed agreement "
                  f"{info['seed_agreement']:.3f} ({info['seconds']:.2f} s)")

    def _warn_if_unreliable(self, converged):
        last = self.rounds_[-1]
        if last["seed_agreement"] < _CONSISTENCY_MIN or (
                self.n_iter_ > 1 and last["still_mutual"] < _CONSISTENCY_MIN):
            warnings.warn(
                f"AnchorBootstrapper: the discovered anchors are not consistent (round "
                f"{last['round']}: {last['still_mutual']:.0%} of the previous round's pairs are "
                f"still mutual best matches, and they pair {last['seed_agreement']:.0%} of the "
                "seed pairs correctly); they are probably wrong. Check that the seed pairs "
                "really are parallel, give more of them, or try correspondence='sinkhorn'; "
                "see rounds_.",
                AnchorConsistencyWarning, stacklevel=5,
            )
        elif not converged and self.n_iter_ > 1:
            warnings.warn(
                f"AnchorBootstrapper: {last['changed_returned']:.1%} of the pairs to return were "
                f"not mutual pairs in the previous round "
                f"in the last of max_rounds={self.max_rounds} rounds; increase max_rounds or tol.",
                ConvergenceWarning, stacklevel=5,
            )

    @staticmethod
    def _seed_agreement(LX, LY, AX, AY):
        """Fraction of seeds whose own target is their best match among the seed targets.

        Relative representations with respect to the accepted pairs only (not the seeds), so the
        seeds are an independent check of the discovered correspondence; NaN without pairs.
        """
        if len(AX) == 0 or len(LX) < 2:
            return float("nan")
        S = row_normalize(LX @ AX.T) @ row_normalize(LY @ AY.T).T
        hits = S.argmax(1) == torch.arange(len(LX), device=S.device)
        return float(hits.float().mean())
