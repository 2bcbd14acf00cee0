"""The self-learning discovery of :class:`~skalign.AnchorBootstrapper`, from zero or few seeds.

``discovery="self_learning"``: similarity-signature (+ seed profile) starts, a soft then a hard
self-learning of an orthogonal map, restarts kept by their held-out certificate (the functions
of :mod:`skalign._bootstrap.self_learning` do the iterations).
A mixin of the estimator: its methods read
the estimator's parameters and set ``restarts_``, ``rounds_``, ``loss_curve_`` and ``n_iter_``.
"""

from __future__ import annotations

import time

import torch

from ..utils._backend import row_normalize
from .certificate import alignment_certificate, split_halves
from .matching import csls_match
from .self_learning import (
    SOFT_SCHEDULE,
    csls_scores,
    orthogonal_map,
    self_learn,
    soft_self_learn,
)
from .signatures import pool_svd, principal_basis, seed_profiles, similarity_signatures

_SIGNATURE_ROWS = 4000  # rows per side for the signature start (a random subset of a larger pool)
_SOFT_MAX_ITER = 150
#: A self-learning restart whose start pairs score below this held-out certificate (or below
#: ``min_certificate`` if lower) stops before its hard phase. Start certificates seen with zero
#: pairs: 0.025-0.116 against target pools of random vectors (vendored MiniLM pools of 300, 500
#: and 1,000 rows, every restart); 0.331-0.437 for the 13 soft phases that stalled on the
#: development data (3,000-row pools, ten states of three encoder pairs; soft objective
#: 0.11-0.14; the same numbers as with the full patience after a take-off, which changes no
#: start's course before it), 0.023 for the identity start of
#: MiniLM -> e5, and 0.98-0.998 for the 26 starts that went on to pass (five seeds: 0.979-0.998,
#: 30 starts; every start is in ``5ae3bf6:benchmarks/results/bench_seedless_runs.csv``, column
#: ``restarts``). Failed fits end at certificates up to 0.46 (user guide), so the bar is the
#: certificate's own, 0.5.
_START_CERTIFICATE_MIN = 0.5
#: Keep probability the hard phase starts from. From the soft phase's pairs (mostly right) the
#: random dropping has nothing to escape: from the same soft pairs, 1 took 4 iterations and
#: 1.6-2.2 s where 0.5 took 7-9 and 3.8-5.3 s, to the same top-1 within 0.001 (3,000-row pools
#: of the three encoder pairs, 0 and 5 seeds, five fits:
#: ``5ae3bf6:benchmarks/seedless_hard_keep.py``).
_HARD_KEEP_PROBABILITY = 1.0


class _SelfLearningMixin:
    """Signature starts, soft and hard self-learning, restarts kept by the certificate."""

    def _self_learning(self, LX, LY, XP, YP, gen):
        """Signature (+ seed profile) starts, self-learning, restarts kept by the certificate.

        A restart whose start pairs (the soft phase's, or the identity's) fail their own
        held-out certificate (below ``_START_CERTIFICATE_MIN``) stops there: its hard phase and
        certificate are skipped (``restarts_[i]["stopped"]``). The first restart that passes
        the certificate ends the loop.
        """
        sx = self._subset(len(XP), self.max_candidates, gen)
        sy = self._subset(len(YP), self.max_candidates, gen)
        XS, YS = XP[sx], YP[sy]
        identity = len(LX) == 0 and XP.shape[1] == YP.shape[1]
        best, stalled, shared = None, None, {}
        for r in range(self.n_restarts):
            t0 = time.perf_counter()
            n_soft, n_components, temperatures, soft_objective = 0, None, None, None
            if identity and r == 1:  # same width and nothing to go on: the identity is a start
                kind, a, b = "identity", *self._mutual_pairs(XS, YS)
            else:
                kind = "signatures" + ("+seeds" if len(LX) else "")
                # the starts of SOFT_SCHEDULE differ in their settings and keep all rows (fewer
                # rows weaken the signatures); past it a start draws 80 % of the rows, or it
                # would repeat an earlier one
                rows = _SIGNATURE_ROWS if r < len(SOFT_SCHEDULE) else int(
                    0.8 * min(len(XS), len(YS), _SIGNATURE_ROWS))
                ix = self._subset(len(XS), rows, gen)
                iy = self._subset(len(YS), rows, gen)
                # starts on all rows share their start scores and SVDs (the same numbers)
                every_row = len(ix) == len(XS) and len(iy) == len(YS)
                start = shared.get("start") if every_row else None
                if start is None:
                    start = self._signature_start(XS[ix], YS[iy], LX, LY)
                    if every_row:
                        shared["start"] = start
                C, svd_x, svd_y = start
                # each start its own sharpness and subspace (SOFT_SCHEDULE): a start that one
                # setting leaves stuck may take off under another
                n_components, *temperatures = SOFT_SCHEDULE[r % len(SOFT_SCHEDULE)]
                temperatures = tuple(temperatures)
                # fewer, stronger directions: the soft votes of a weak start are mostly noise
                XR = self._principal(XS[ix], LX, n_components, svd_x)
                YR = self._principal(YS[iy], LY, n_components, svd_y)
                W, soft = soft_self_learn(XR[0], YR[0], C, XR[1], YR[1],
                                          start_temperature=temperatures[0],
                                          temperature=temperatures[1],
                                          csls_n_neighbors=self.csls_n_neighbors,
                                          max_iter=_SOFT_MAX_ITER)
                del C, start
                n_soft, soft_objective = len(soft), soft[-1]["objective"]
                a, b = self._mutual_pairs(XR[0] @ W, YR[0])
                a, b = ix[a], iy[b]
            # the certificate of the start pairs, on a split of its own (``gen`` is left as
            # it was, so that a fit is the same whether or not an earlier restart stopped)
            split = torch.Generator(gen.device).manual_seed(gen.initial_seed() + 7919 * r + 1)
            start_cert = self._held_out_pairs(XS, YS, a, b, LX, LY, split)["score"]
            info = {"restart": r + 1, "start": kind, "n_soft_iter": n_soft,
                    "n_components": n_components, "soft_temperatures": temperatures,
                    "soft_objective": soft_objective, "n_start_pairs": len(a),
                    "start_certificate": start_cert}
            stop_below = min(self.min_certificate, _START_CERTIFICATE_MIN)
            if start_cert < stop_below:
                # a start that failed: the hard phase has not rescued one on the development
                # data (see _START_CERTIFICATE_MIN), so neither it nor the certificate is run
                info.update(objective=float("nan"), certificate=float("nan"), n_iter=0,
                            seconds=time.perf_counter() - t0,
                            stopped=f"start certificate {start_cert:.3f} < {stop_below}: "
                                    "hard phase and certificate skipped")
                self.restarts_.append(info)
                if self.verbose:
                    print(f"[AnchorBootstrapper] restart {r + 1}: {kind} start, {n_soft} soft "
                          f"iterations, stopped: {info['stopped']} ({info['seconds']:.1f} s)")
                if stalled is None or start_cert > stalled[0]:
                    stalled = (start_cert, a, b)
                continue
            W, history, objective = self_learn(XS, YS, a, b, LX, LY,
                                               csls_n_neighbors=self.csls_n_neighbors,
                                               p0=_HARD_KEEP_PROBABILITY, generator=gen)
            cert, match = self._held_out_orthogonal(XS, YS, W, LX, LY, gen)
            info.update(objective=objective, certificate=cert["score"], n_iter=len(history),
                        seconds=time.perf_counter() - t0, stopped=None)
            self.restarts_.append(info)
            if self.verbose:
                print(f"[AnchorBootstrapper] restart {r + 1}: {kind} start, {n_soft} soft "
                      f"iterations, {len(a)} pairs, "
                      f"{len(history)} iterations, objective {objective:.4f}, certificate "
                      f"{cert['score']:.3f} ({info['seconds']:.1f} s)")
            if best is None or cert["score"] > best[0]:
                best = (cert["score"], W, history, match)
            if cert["score"] >= self.min_certificate:
                break
        if best is None:  # every start failed: the map of the best one's pairs
            _, a, b = stalled
            best = (float("nan"), orthogonal_map(XS[a].T @ YS[b], LX, LY), [], None)
        _, W, history, match = best
        self.rounds_ = [{"round": i + 1, **h} for i, h in enumerate(history)]
        self.loss_curve_ = [1 - h["objective"] for h in history]
        self.n_iter_ = len(history)
        if match is not None and len(sx) == len(XP) and len(sy) == len(YP):
            return match  # the certificate's matching of the kept map: all rows, same scores
        chunk = max(len(XP), 1) if self.plan_ == "dense" else self.batch_size
        return csls_match(XP @ W, YP, k=self.csls_n_neighbors, batch_size=chunk)

    def _signature_start(self, XS, YS, LX, LY):
        """CSLS scores of the similarity signatures (+ seed profiles) of two pools, and the
        pools' SVDs (their principal bases come from them)."""
        svd_x, svd_y = pool_svd(XS), pool_svd(YS)
        width = min(len(XS), len(YS))
        U = similarity_signatures(XS, width, svd_x)
        V = similarity_signatures(YS, width, svd_y)
        if len(LX):
            U = torch.cat([U, seed_profiles(XS, LX)], 1)
            V = torch.cat([V, seed_profiles(YS, LY)], 1)
        return csls_scores(U @ V.T, self.csls_n_neighbors, overwrite=True), svd_x, svd_y

    def _held_out_orthogonal(self, XS, YS, W, LX, LY, gen):
        """Certificate of a self-learned map: refit on half of its mutual pairs, test the rest.

        Returns the certificate and the map's matching of the pools.
        """
        match = csls_match(XS @ W, YS, k=self.csls_n_neighbors, batch_size=self.batch_size)
        a = torch.nonzero(match.mutual()).flatten()
        return self._held_out_pairs(XS, YS, a, match.forward[a], LX, LY, gen), match

    def _held_out_pairs(self, XS, YS, a, b, LX, LY, gen):
        """The held-out certificate of pairs ``(a, b)`` of pool rows under an orthogonal map:
        fitted on a random half of them (plus the seeds), tested on the other half."""
        fit, test = split_halves(len(a), gen)
        W_half = orthogonal_map(XS[a[fit]].T @ YS[b[fit]], LX, LY, seed_weight=1.0)
        rest = torch.ones(len(YS), dtype=torch.bool, device=YS.device)
        rest[b[fit]] = False
        new_index = torch.cumsum(rest.long(), 0) - 1
        return alignment_certificate(XS[a[test]] @ W_half, YS[rest], new_index[b[test]],
                                     k=self.csls_n_neighbors, batch_size=self.batch_size)

    @staticmethod
    def _principal(Z, L, n_components, svd=None):
        """``Z`` and the seed rows ``L`` on ``Z``'s top principal components, unit rows."""
        B = principal_basis(Z, n_components, svd)
        return row_normalize(Z @ B.T), row_normalize(L @ B.T)

    def _mutual_pairs(self, U, V):
        """Mutual CSLS nearest neighbours of ``U`` and ``V`` (rows compared by inner product)."""
        match = csls_match(U, V, k=self.csls_n_neighbors, batch_size=self.batch_size)
        a = torch.nonzero(match.mutual()).flatten()
        return a, match.forward[a]

    @staticmethod
    def _subset(n, k, gen):
        """All of ``range(n)`` or a sorted random subset of ``k`` of them."""
        if n <= k:
            return torch.arange(n, device=gen.device)
        return torch.sort(torch.randperm(n, generator=gen, device=gen.device)[:k]).values
