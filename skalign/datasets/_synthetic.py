"""Synthetic paired embedding spaces with a known ground-truth relation."""

from __future__ import annotations

import numpy as np
from scipy.stats import ortho_group
from sklearn.utils import Bunch, check_random_state

__all__ = ["make_paired_spaces"]

_RELATIONS = ("orthogonal", "linear", "nonlinear")


def make_paired_spaces(
    n_samples=1000,
    n_features=32,
    *,
    n_features_target=None,
    relation="orthogonal",
    noise=0.0,
    spectrum_decay=0.0,
    scale=1.0,
    shift=0.0,
    return_ground_truth=False,
    random_state=None,
):
    r"""Generate paired source/target embeddings related by a known map.

    Source rows are :math:`x = z\,\operatorname{diag}(\lambda)^{1/2}` with :math:`z \sim
    \mathcal N(0, I)` and the spectrum :math:`\lambda_j = (j+1)^{-\text{spectrum\_decay}}`
    (``0`` = isotropic; ``1`` or more gives the anisotropic spectra of real encoders). Targets are

    * ``"orthogonal"``: :math:`y = x Q` with :math:`Q` a random orthogonal matrix (semi-orthogonal
      ``d_x × d_y`` when the dimensions differ);
    * ``"linear"``: :math:`y = x A` with a random Gaussian :math:`A` (not an isometry);
    * ``"nonlinear"``: :math:`y = x Q + \tfrac12 \tanh(x B)`, mildly non-linear,

    then multiplied by ``scale``, shifted by ``shift`` and perturbed by Gaussian noise whose
    standard deviation is ``noise``
    times the root-mean-square of the clean targets.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of pairs.
    n_features : int, default=32
        Source dimension ``d_x``.
    n_features_target : int, default=None
        Target dimension ``d_y``; ``None`` means ``d_x``.
    relation : {"orthogonal", "linear", "nonlinear"}, default="orthogonal"
    noise : float, default=0.0
        Relative noise level (0.1 = noise with 10 % of the signal's RMS).
    spectrum_decay : float, default=0.0
        Exponent of the source spectrum :math:`\lambda_j = (j+1)^{-\text{spectrum\_decay}}`.
    scale : float, default=1.0
        Factor applied to the targets.
    shift : float or array-like of shape (d_y,), default=0.0
        Offset added to the targets.
    return_ground_truth : bool, default=False
        Also return a :class:`~sklearn.utils.Bunch` with the true ``map`` (``d_x × d_y``),
        ``scale``, ``shift`` and, for ``"nonlinear"``, the matrix ``B``.
    random_state : int, RandomState instance or None, default=None
        Seeds the source rows, the map and the noise.

    Returns
    -------
    X : ndarray of shape (n_samples, d_x)
        Source rows.
    Y : ndarray of shape (n_samples, d_y)
        Target rows, paired with ``X`` row for row.
    ground_truth : Bunch
        Only when ``return_ground_truth=True``.

    Examples
    --------
    >>> from skalign.datasets import make_paired_spaces
    >>> X, Y, gt = make_paired_spaces(100, 8, relation="orthogonal", random_state=0,
    ...                               return_ground_truth=True)
    >>> bool(abs(X @ gt.map - Y).max() < 1e-12)
    True
    """
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {_RELATIONS}, got {relation!r}.")
    if n_samples < 1 or n_features < 1:
        raise ValueError("n_samples and n_features must be positive.")
    rng = check_random_state(random_state)
    d_x = n_features
    d_y = d_x if n_features_target is None else n_features_target
    spectrum = (np.arange(1, d_x + 1, dtype=float)) ** (-float(spectrum_decay))
    X = rng.standard_normal((n_samples, d_x)) * np.sqrt(spectrum)
    d_max = max(d_x, d_y)
    Q = ortho_group.rvs(d_max, random_state=rng) if d_max > 1 else np.ones((1, 1))
    Q = Q[:d_x, :d_y]
    gt = Bunch(scale=float(scale), shift=shift)
    if relation == "orthogonal":
        gt.map = Q
        Y = X @ Q
    elif relation == "linear":
        gt.map = rng.standard_normal((d_x, d_y)) / np.sqrt(d_x)
        Y = X @ gt.map
    else:
        B = rng.standard_normal((d_x, d_y)) / np.sqrt(d_x)
        gt.map, gt.B = Q, B
        Y = X @ Q + 0.5 * np.tanh(X @ B)
    Y = scale * Y + np.asarray(shift, dtype=float)
    if noise:
        rms = np.sqrt(np.mean((Y - Y.mean(0)) ** 2))
        Y = Y + noise * rms * rng.standard_normal(Y.shape)
    return (X, Y, gt) if return_ground_truth else (X, Y)
