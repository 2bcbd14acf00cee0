"""The inputs of :class:`~skalign.AnchorBootstrapper`: pools, given rows and candidate rows.

The zero-pair mode's validation, the check that a pool has distinct rows, ``anchor_indices``
and the source-pool rows that take part in the discovery. A mixin of the estimator.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import check_array

from ..base import UnpairedPool
from ..utils._backend import to_numpy

_MIN_POOL_ROWS = 50  # zero-pair mode: rows per pool at least


def _check_pool_spread(A, name):
    """Discovery compares rows with each other: a pool whose rows are all equal has no structure."""
    A = np.asarray(A)
    if len(A) > 1 and not np.any(np.ptp(A, axis=0) > 0):
        raise ValueError(
            f"{name}: all rows are identical (a constant pool); discovery needs distinct rows."
        )


class _InputsMixin:
    """Validation of the zero-pair mode, ``anchor_indices`` and the candidate source rows."""

    def _validate_seedless(self, unpaired):
        """Zero-pair mode: both pools are required; the seed arrays become empty."""
        if not isinstance(unpaired, UnpairedPool) or unpaired.X is None or unpaired.y is None:
            raise ValueError(
                "Without seed pairs (fit(None, None, unpaired=...)), unpaired must be a "
                "skalign.UnpairedPool with both a source pool X and a target pool y."
            )
        for side, A in (("X", unpaired.X), ("y", unpaired.y)):
            if len(A) < _MIN_POOL_ROWS:
                raise ValueError(
                    f"unpaired.{side} has {len(A)} rows; discovery without seed pairs needs at "
                    f"least {_MIN_POOL_ROWS} per pool (a few thousand work best)."
                )
        # validates dtype and finiteness of both pools and sets n_features_in_/out_ and device_
        X, y = self._validate_pair(unpaired.X[:2], unpaired.y[:2])
        check_array(unpaired.X, input_name="unpaired.X")
        check_array(unpaired.y, input_name="unpaired.y")
        return X[:0], y[:0], unpaired

    def _given_rows(self, n_pool):
        if self.anchor_indices is None:
            return None
        idx = np.asarray(self.anchor_indices)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise ValueError("anchor_indices must be a 1-D array of integer row indices.")
        if idx.size and (idx.min() < 0 or idx.max() >= n_pool):
            raise ValueError(
                f"anchor_indices must index the source pool's {n_pool} rows, got values in "
                f"[{idx.min()}, {idx.max()}]."
            )
        return idx.astype(np.int64)

    def _candidates(self, n_pool, given, gen):
        """Source-pool rows taking part in the discovery: ``given`` first, then others."""
        dev = gen.device
        if given is None:
            given = np.zeros(0, dtype=np.int64)
        rest = np.setdiff1d(np.arange(n_pool), given)
        k = max(self.max_candidates - len(given), 0)
        if len(rest) > k:
            draw = to_numpy(torch.randperm(len(rest), generator=gen, device=dev)[:k])
            rest = np.sort(rest[draw])
        return torch.as_tensor(np.concatenate([given, rest]), dtype=torch.long, device=dev)
