"""The one place where skalign imports scikit-learn's private helpers.

scikit-learn does not promise stability for ``_param_validation`` and ``_fit_context``; keeping the
imports here means a future rename is fixed in one file.
"""

import sys

from sklearn.base import _fit_context
from sklearn.utils._param_validation import HasMethods, Hidden, Interval, StrOptions
from sklearn.utils.validation import validate_data

__all__ = ["Hidden", "Interval", "StrOptions", "TorchDevice", "_fit_context", "validate_data"]


class TorchDevice(HasMethods):
    """Parameter constraint "an instance of torch.device", checked without importing torch.

    A plain ``torch.device`` entry in ``_parameter_constraints`` would import torch with every
    estimator module. If torch was never imported, no value can be a ``torch.device``.
    (Subclasses ``HasMethods`` only because scikit-learn accepts constraint objects of its own
    types.)
    """

    def __init__(self):
        super().__init__([])

    def is_satisfied_by(self, val):
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(val, torch.device)

    def __str__(self):
        return "an instance of 'torch.device'"
