"""The one place where skalign imports scikit-learn's private helpers.

scikit-learn does not promise stability for ``_param_validation`` and ``_fit_context``; keeping the
imports here means a future rename is fixed in one file.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import Hidden, Interval, StrOptions
from sklearn.utils.validation import validate_data

__all__ = ["Hidden", "Interval", "StrOptions", "_fit_context", "validate_data"]
