"""The held-out success certificate of :class:`~skalign.AnchorBootstrapper` (``certificate_``).

A clone of the inner estimator fitted on the seeds plus a random half of the discovered pairs
must find the other half's partners among the target rows it was not fitted on (the share that
:func:`skalign._bootstrap.certificate.alignment_certificate` computes); below
``min_certificate`` the fit warns. A mixin of the estimator.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..exceptions import DiscoveryFailedWarning
from ..utils._backend import to_numpy, to_tensor
from .anchors import _with_chosen_penalty
from .certificate import alignment_certificate, split_halves

_CERTIFICATE_ROWS = 5000  # source rows the certificate is computed on


class _CertifyMixin:
    """``certificate_`` and ``certificate_margin_`` of the discovered pairs, and the warning."""

    def _certify(self, pool, gen, est, n_seed):
        """The held-out success certificate of the discovered pairs (the warning comes after
        the start guard, :meth:`_warn_if_discovery_failed`).

        ``est`` (unfitted) is refitted on the ``n_seed`` seeds (the first rows of
        ``source_anchors_`` and ``target_anchors_``) plus a random half of the discovered pairs
        and must find the other half's partners among the target rows it was not fitted on.
        """
        if pool is None or pool.X is None or pool.y is None or len(self.anchor_pairs_) < 2:
            # nothing to certify: no pools, or n_anchors left no room for discovered pairs
            self.certificate_ = float("nan")
            self.certificate_margin_ = float("nan")
            return
        Xp, Yp = pool.X, pool.y
        src, tgt = self.anchor_pairs_[:, 0], self.anchor_pairs_[:, 1]
        fit, test = (to_numpy(t) for t in split_halves(len(src), gen))
        test = test[:_CERTIFICATE_ROWS]
        half = self._inner_estimator(_with_chosen_penalty(est, self.estimator_), gen).fit(
            np.vstack([self.source_anchors_[:n_seed], np.asarray(Xp)[src[fit]]]),
            np.vstack([self.target_anchors_[:n_seed], np.asarray(Yp)[tgt[fit]]]))
        rest = np.ones(len(Yp), dtype=bool)
        rest[tgt[fit]] = False
        new_index = np.cumsum(rest) - 1
        dev = torch.device(self.device_)
        Y_hat = to_tensor(np.asarray(half.transform(np.asarray(Xp)[src[test]])), dev)
        partner = torch.as_tensor(new_index[tgt[test]], device=dev)
        cert = alignment_certificate(Y_hat, to_tensor(np.asarray(Yp)[rest], dev), partner,
                                     k=self.csls_n_neighbors, batch_size=self.batch_size)
        self.certificate_ = cert["score"]
        self.certificate_margin_ = cert["mean_csls_margin"]

    def _warn_if_discovery_failed(self):
        """:class:`DiscoveryFailedWarning` below ``min_certificate`` or when every self-learning
        start failed; says whether the seeds' own map was kept instead (``kept_start_``)."""
        # every self-learning start failed its own held-out test: failed, whatever the
        # certificate of the map fitted on the least bad start's pairs says
        all_stopped = bool(self.restarts_) and all(r["stopped"] for r in self.restarts_)
        if self.certificate_ < self.min_certificate or all_stopped:
            outcome = ("The map fitted on them did not beat the seed pairs' own map on "
                       "held-out seed pairs, which is returned instead (kept_start_)"
                       if self.kept_start_ else "The fitted map is probably wrong")
            warnings.warn(
                f"AnchorBootstrapper: discovery probably failed: a map fitted on half of the "
                f"discovered pairs recovers only {self.certificate_:.0%} of the other half "
                f"(min_certificate={self.min_certificate})"
                + (", and every self-learning start failed its own held-out test"
                   if all_stopped else "")
                + f". {outcome}. Give more seed pairs (or check them), larger pools of the "
                "same texts, or more n_restarts; see certificate_ and restarts_.",
                DiscoveryFailedWarning, stacklevel=3,
            )
