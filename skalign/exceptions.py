"""Exceptions and warnings raised by skalign.

Catch these instead of matching messages::

    from skalign.exceptions import ConvergenceWarning, LabelsAsTargetWarning, NumericalError

``ConvergenceWarning`` is scikit-learn's own class (warned when ``max_iter`` is hit), re-exported
so that one import covers every exception and warning skalign raises.
"""

from sklearn.exceptions import ConvergenceWarning

__all__ = ["ConvergenceWarning", "LabelsAsTargetWarning", "NumericalError"]


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
