"""Row-norm profiles of paired embeddings and the ``normalize`` choice of the affine aligners.

Some encoders return unit vectors (multilingual-e5, any sentence-transformers model with its
Normalize module), others raw mean-pooled vectors whose norms vary by a factor of 3-4
(all-MiniLM-L6-v2 without Normalize: 2.2-8.1). An affine map fitted between such spaces carries
the source norms into the translated vectors, where they mean nothing: the target encoder would
never produce them. :func:`choose_normalization` decides from the anchors which sides to
L2-normalise, :class:`NormalizeMixin` applies the decision in ``fit`` and records it.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..exceptions import ScaleMismatchWarning
from ..utils._backend import row_normalize_numpy
from ..utils._compat import StrOptions

__all__ = ["NORMALIZE_CONSTRAINT", "NormalizeMixin", "choose_normalization", "norm_profile"]

#: the ``normalize`` parameter's allowed values
NORMALIZE_CONSTRAINT = [StrOptions({"auto", "source", "target", "both"}), "boolean"]

#: row norms with a coefficient of variation at most this are "constant" (carry no information)
CONSTANT_CV = 0.01
#: two constant-norm spaces whose typical norms differ by more than this factor are rescaled
SCALE_RATIO = 2.0

_SIDES = {False: "none", True: "both", "source": "source", "target": "target", "both": "both"}


#: float64 values a block of rows converts at once to take its norms (16 MiB)
NORM_BLOCK = 2 ** 21


def norm_profile(A):
    """Row norms of ``A`` with their mean and coefficient of variation (std / mean), in
    float64, a block of rows at a time (no float64 copy of the whole of ``A``: each row's norm
    is its own reduction, so the blocks give the same values)."""
    A = np.asarray(A)
    rows = max(1, NORM_BLOCK // max(1, A.shape[1]))
    norms = np.concatenate([np.zeros(0)] + [
        np.linalg.norm(np.asarray(A[lo:lo + rows], dtype=np.float64), axis=1)
        for lo in range(0, len(A), rows)])
    mean = float(norms.mean()) if norms.size else 0.0
    cv = float(norms.std() / mean) if mean > 0 else 0.0
    return norms, mean, cv


def _is_unit(mean, cv):
    return cv <= CONSTANT_CV and abs(mean - 1.0) <= CONSTANT_CV


def choose_normalization(X, y):
    """Which sides ``normalize="auto"`` L2-normalises, and why.

    The row norms of a side carry no meaning for the map when the other side cannot reproduce
    them:

    * one side has constant norms (coefficient of variation ≤ 1 %) and the other does not — a
      raw encoder against a normalising one: the varying side is normalised;
    * both are constant, but their sizes differ by more than a factor 2: the side that is not
      unit-norm is normalised (losslessly: its norms are one constant).

    When both sides' norms vary, nothing is normalised: the norms may mean something on both
    sides, and normalising would break an exactly affine relation between them (``y = x A + b``
    with a shift). On two raw text encoders (MiniLM-L6 → MPNet-base of the development set)
    ``normalize=True`` keeps top-1 and the cosine neighbourhoods and improves the Euclidean ones;
    it is an explicit choice there.
    A unit-norm side is never normalised: that would change nothing.

    Parameters
    ----------
    X : ndarray of shape (n_pairs, d_x)
    y : ndarray of shape (n_pairs, d_y)

    Returns
    -------
    sides : {"none", "source", "target", "both"}
    reason : str
        One sentence with the measured norm statistics.
    """
    _, mx, cx = norm_profile(X)
    _, my, cy = norm_profile(y)
    stats = (f"source row norms mean {mx:.3g}, CV {cx:.3f}; target row norms mean {my:.3g}, "
             f"CV {cy:.3f}")
    const_x, const_y = cx <= CONSTANT_CV, cy <= CONSTANT_CV
    if const_x and const_y:
        ratio = max(mx, my) / max(min(mx, my), np.finfo(np.float64).tiny)
        if ratio <= SCALE_RATIO:
            return "none", f"both sides have constant norms of similar size ({stats})"
        why = f"both sides have constant norms but of sizes {ratio:.3g}x apart ({stats})"
    elif const_x != const_y:
        varying = "source" if const_y else "target"
        why = (f"the {varying} norms vary but the other side's are constant, so they carry "
               f"nothing the map can carry over ({stats})")
    else:
        return "none", f"both sides' norms vary and may carry meaning ({stats})"
    flagged = [side for side, (m, c) in (("source", (mx, cx)), ("target", (my, cy)))
               if not _is_unit(m, c)]
    sides = "both" if len(flagged) == 2 else flagged[0] if flagged else "none"
    return sides, why


class NormalizeMixin:
    """``fit`` side of the ``normalize`` parameter for :class:`ProcrustesAligner` and
    :class:`LinearAligner`.

    :meth:`_fit_normalization` resolves ``normalize`` (``"auto"`` through
    :func:`choose_normalization`), warns with :class:`~skalign.exceptions.ScaleMismatchWarning`
    when an explicit choice leaves a side unnormalised that ``"auto"`` would normalise, sets
    ``normalize_``, ``normalize_reason_``, ``source_norm_`` and ``target_norm_``, and returns the
    pair as the map is fitted on. :meth:`_affine_io` gives the row-wise pre- and post-processing
    of ``transform`` and ``inverse_transform``.
    """

    #: radius of the sphere a normalised side is put on while fitting: ``"unit"``, or ``"mean"``
    #: (the side's mean anchor norm, which keeps the data's overall scale and so the meaning of a
    #: scale-dependent parameter such as a ridge penalty)
    _norm_radius = "unit"

    def _radii(self):
        if self._norm_radius == "mean":
            return self.source_norm_, self.target_norm_
        return 1.0, 1.0

    def _fit_normalization(self, X, y):
        _, self.source_norm_, _ = norm_profile(X)
        _, self.target_norm_, _ = norm_profile(y)
        if self.normalize == "auto":
            sides, reason = choose_normalization(X, y)
        else:
            sides = _SIDES[self.normalize]
            reason = f"normalize={self.normalize!r}"
            auto, why = choose_normalization(X, y)
            missing = sorted(set(_split(auto)) - set(_split(sides)))
            if missing:
                warnings.warn(
                    f"{type(self).__name__}(normalize={self.normalize!r}) keeps the raw norms of "
                    f"the {' and '.join(missing)} embeddings although {why}. The translated "
                    "vectors then carry norms the target encoder never produces, which hurts "
                    "nearest-neighbour search in the translated store; use normalize='auto'.",
                    ScaleMismatchWarning,
                    stacklevel=3,
                )
                reason += f", kept although {why}"
        self.normalize_, self.normalize_reason_ = sides, reason
        rx, ry = self._radii()
        if "source" in _split(sides):
            X = row_normalize_numpy(X) * rx
        if "target" in _split(sides):
            y = row_normalize_numpy(y) * ry
        return X, y

    def _affine_io(self, inverse=False):
        """``(normalize_in, scale_out)`` of the map in one direction (see ``affine_fn``).

        A normalised side is seen on a sphere (see ``_norm_radius``): its rows are put on it on
        the way in (``normalize_in`` is the radius, ``None`` for no normalisation), and rows
        produced in it are scaled to its mean anchor norm on the way out (``scale_out``).
        """
        sides = _split(getattr(self, "normalize_", "none"))  # models saved before the parameter
        src, tgt = "source" in sides, "target" in sides
        if not (src or tgt):
            return None, None
        rx, ry = self._radii()
        if inverse:
            return (ry if tgt else None), (self.source_norm_ / rx if src else None)
        return (rx if src else None), (self.target_norm_ / ry if tgt else None)


def _split(sides):
    return ("source", "target") if sides == "both" else () if sides == "none" else (sides,)
