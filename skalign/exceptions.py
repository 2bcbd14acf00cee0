"""Exceptions and warnings raised by skalign.

Catch these instead of matching messages::

    from skalign.exceptions import ConvergenceWarning, IllConditionedDecodeWarning, NumericalError

``ConvergenceWarning`` is scikit-learn's own class (warned when ``max_iter`` is hit), re-exported
so that one import covers every exception and warning skalign raises.
"""

from scipy.linalg import LinAlgWarning
from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "AnchorConsistencyWarning",
    "ConvergenceWarning",
    "DiscoveryFailedWarning",
    "IllConditionedDecodeWarning",
    "LabelsAsTargetWarning",
    "NumericalError",
]


class NumericalError(ValueError):
    """A solve or an optimisation produced non-finite numbers.

    Subclasses :class:`ValueError` so callers that guard against bad input also catch it; the
    message always names the parameter to change (a learning rate, a regularisation strength,
    an entropic ε).

    Examples
    --------
    >>> from skalign.exceptions import NumericalError
    >>> issubclass(NumericalError, ValueError)
    True
    """


class LabelsAsTargetWarning(UserWarning):
    """An aligner's ``fit`` got class labels (a 1-D integer ``y``) where it expects target
    embeddings.

    ``fit(X, y)`` pairs row ``i`` of ``X`` with the target embedding ``y[i]``; to use labels, fit
    the aligner on embedding pairs and chain a classifier after it. Turn the warning into an
    error with ``warnings.simplefilter("error", LabelsAsTargetWarning)``.
    """


class IllConditionedDecodeWarning(LinAlgWarning, UserWarning):
    """An :class:`~skalign.InverseRelativeProjector` decode amplifies noise far beyond the ridge
    that generalised cross-validation would choose.

    Raised with ``alpha=0`` (the paper's plain pseudo-inverse) or a tiny ``alpha`` when many
    anchors are nearly collinear; the translation is then dominated by noise. The message names
    the parameters to change (``alpha='gcv'``, ``rtol``, ``pruning_threshold``).
    """


class AnchorConsistencyWarning(UserWarning):
    """:class:`~skalign.AnchorBootstrapper`: the accepted anchor pairs stopped being mutually
    consistent from one round to the next, or disagree with the seed pairs.

    Usually a sign of wrong seed pairs or of two encoders too different for the self-learning
    loop; check ``rounds_`` (``still_mutual``, ``seed_agreement``).
    """


class DiscoveryFailedWarning(UserWarning):
    """:class:`~skalign.AnchorBootstrapper`: the fitted translation fails its success certificate.

    The certificate (``certificate_``) is the share of source-pool rows whose translation and
    target-pool row are mutual nearest neighbours under CSLS; below ``min_certificate`` the
    discovered pairs, and so the map, are probably wrong (too few or wrong seed pairs, pools
    with too little in common, or encoders too different). Turn it into an error with
    ``warnings.simplefilter("error", DiscoveryFailedWarning)``.
    """
