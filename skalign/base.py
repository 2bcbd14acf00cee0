"""The data contract and the base class shared by every skalign estimator.

Data contract
-------------
``fit(X, y)``: row ``i`` of ``X`` (source embeddings, ``n × d_x``) and row ``i`` of ``y`` (target
embeddings, ``n × d_y``) are the same item seen by two encoders, as in scikit-learn's
:class:`~sklearn.cross_decomposition.PLSRegression`. Cross-validation therefore splits anchor pairs
with no wrapper. Unpaired collections enter whole through ``unpaired=UnpairedPool(...)``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted

from ._registry import register, registered
from .exceptions import LabelsAsTargetWarning
from .utils._backend import (
    apply_in_batches,
    apply_in_batches_numpy,
    as_numpy,
    is_tensor,
    resolve_device,
    to_tensor,
    transform_device,
)
from .utils._compat import Interval, TorchDevice, validate_data

__all__ = [
    "BaseAligner", "BaseTransformer", "SharedSpaceMixin", "UnpairedPool", "check_min_pairs",
    "check_nonzero_rows", "check_sample_weight", "warn_if_labels",
]


# ------------------------------------------------------------------------------ input checks
def check_nonzero_rows(A, *, name="X", tol=0.0):
    """Raise a :class:`ValueError` if any row of ``A`` has (near) zero norm.

    Estimators that L2-normalise embeddings call this: the direction of a zero vector is undefined
    and dividing by its norm would silently produce NaN.

    Parameters
    ----------
    A : ndarray or torch.Tensor of shape (n_samples, n_features)
        The rows to check.
    name : str, default="X"
        Name of ``A`` in the error message.
    tol : float, default=0.0
        Rows whose norm is at most ``tol`` are rejected.
    """
    if is_tensor(A):
        norms = A.norm(dim=1)
    else:
        norms = np.linalg.norm(A, axis=1)
    bad = np.flatnonzero(as_numpy(norms <= tol))
    if bad.size:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if bad.size > 5 else "")
        raise ValueError(
            f"{name} has {bad.size} all-zero row(s) (rows {shown}); these embeddings cannot be "
            "L2-normalised. Remove them before fitting or transforming."
        )


def check_min_pairs(n_pairs, minimum, *, what="anchor pairs", why=""):
    """Raise a :class:`ValueError` when fewer than ``minimum`` pairs are given.

    The message contains ``"n_samples = <n>"`` so scikit-learn's common checks recognise it.

    Parameters
    ----------
    n_pairs : int
        Number of pairs given.
    minimum : int
        Number of pairs needed.
    what : str, default="anchor pairs"
        What the pairs are, in the message.
    why : str, default=""
        Why that many are needed, appended to the message in parentheses.
    """
    if n_pairs < minimum:
        raise ValueError(
            f"Too few {what}: got n_samples = {n_pairs}, need at least {minimum}"
            + (f" ({why})." if why else ".")
        )


def check_sample_weight(sample_weight, n_samples):
    """Validate ``score``'s ``sample_weight``.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,) or None
        ``None``, or ``n_samples`` finite, non-negative weights with a positive sum.
    n_samples : int
        Number of samples scored.

    Returns
    -------
    sample_weight : ndarray of shape (n_samples,) or None
        The weights as float64, or ``None`` when none were given.
    """
    if sample_weight is None:
        return None
    w = np.asarray(as_numpy(sample_weight), dtype=np.float64)
    if w.shape != (n_samples,):
        raise ValueError(
            f"sample_weight has shape {w.shape}, expected ({n_samples},): one weight per sample."
        )
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError("sample_weight must be finite and non-negative, with a positive sum.")
    return w


def warn_if_labels(y, estimator):
    """Warn when ``y`` looks like class labels rather than target embeddings.

    The warning is a :class:`~skalign.exceptions.LabelsAsTargetWarning`. A 1-D integer or boolean
    ``y`` is a label vector: embeddings are floats. It is a warning, not an error, because
    scikit-learn's own estimator checks fit transformers with such a ``y``; a 1-D float ``y`` (a
    one-dimensional target space) is accepted silently.

    Parameters
    ----------
    y : array-like or torch.Tensor
        The ``y`` given to ``fit``.
    estimator : estimator instance
        The estimator being fitted, named in the message.
    """
    if is_tensor(y):
        labels = y.ndim == 1 and not y.dtype.is_floating_point
        dtype = y.dtype
    else:
        y = np.asarray(y)
        labels = y.ndim == 1 and y.dtype.kind in "iub"
        dtype = y.dtype
    if labels:
        warnings.warn(
            f"{type(estimator).__name__}.fit got a 1-D {dtype} y, which looks like class labels. "
            "y must be the target embeddings paired row by row with X, of shape "
            "(n_samples, n_features_out); labels are fitted as a meaningless 1-D target space. "
            "To feed translations to a classifier, fit the aligner on embedding pairs and chain "
            "it before the classifier: make_pipeline(FrozenEstimator(aligner), classifier).",
            LabelsAsTargetWarning,
            stacklevel=3,
        )


def _check_2d_float(A, name):
    return check_array(as_numpy(A), dtype=FLOAT_DTYPES, input_name=name, ensure_min_samples=1)


# --------------------------------------------------------------------------- the unpaired pool
class UnpairedPool:
    """Unpaired source-only and/or target-only embeddings, passed whole to every fold.

    Semi-supervised aligners take ``fit(X, y, unpaired=UnpairedPool(X=..., y=...))``. The
    container deliberately has no ``__len__``, ``shape`` or ``__array__``: scikit-learn's
    cross-validation slices any fit parameter that looks like an array with as many rows as ``X``,
    which would silently cut the pool per fold whenever the sizes happened to match. An opaque
    container is passed unchanged to every fold and every candidate of a grid search.

    Parameters
    ----------
    X : array-like of shape (n_source, d_x), default=None
        Source-space embeddings with no known counterpart.
    y : array-like of shape (n_target, d_y), default=None
        Target-space embeddings with no known counterpart. ``n_target`` may differ from
        ``n_source``.

    Attributes
    ----------
    X : ndarray of shape (n_source, d_x) or None
    y : ndarray of shape (n_target, d_y) or None

    Examples
    --------
    >>> import numpy as np
    >>> from skalign import UnpairedPool
    >>> pool = UnpairedPool(X=np.ones((100, 8)), y=np.ones((250, 4)))
    >>> pool
    UnpairedPool(X: 100×8, y: 250×4)
    """

    def __init__(self, X=None, y=None):
        if X is None and y is None:
            raise ValueError(
                "UnpairedPool needs at least one of X (source rows) or y (target rows)."
            )
        self.X = None if X is None else _check_2d_float(X, "unpaired X")
        self.y = None if y is None else _check_2d_float(y, "unpaired y")

    @property
    def n_source(self):
        """Number of unpaired source rows (0 when there are none)."""
        return 0 if self.X is None else self.X.shape[0]

    @property
    def n_target(self):
        """Number of unpaired target rows (0 when there are none)."""
        return 0 if self.y is None else self.y.shape[0]

    def check_dimensions(self, n_features_source, n_features_target):
        """Raise a :class:`ValueError` if the pool's widths differ from the paired data's.

        Parameters
        ----------
        n_features_source : int
            Width of the paired ``X``.
        n_features_target : int
            Width of the paired ``y``.

        Returns
        -------
        self : UnpairedPool
            The pool, unchanged.
        """
        sides = (("X", self.X, n_features_source), ("y", self.y, n_features_target))
        for side, arr, expected in sides:
            if arr is not None and arr.shape[1] != expected:
                raise ValueError(
                    f"unpaired.{side} has {arr.shape[1]} features but the paired {side} has "
                    f"{expected}; both must come from the same encoder."
                )
        return self

    def __repr__(self):
        def shape(a):
            return "none" if a is None else f"{a.shape[0]}×{a.shape[1]}"

        return f"UnpairedPool(X: {shape(self.X)}, y: {shape(self.y)})"


def check_unpaired(unpaired, n_features_source, n_features_target):
    """Validate the ``unpaired`` fit parameter; ``None`` is allowed and returned as is."""
    if unpaired is None:
        return None
    if not isinstance(unpaired, UnpairedPool):
        raise ValueError(
            "unpaired must be a skalign.UnpairedPool(X=..., y=...), got "
            f"{type(unpaired).__name__}. A raw array would be sliced per fold by cross-validation."
        )
    return unpaired.check_dimensions(n_features_source, n_features_target)


# ------------------------------------------------------------------------------ the base class
def _output_dtype(X):
    """float64 output for float64 input (array or tensor), float32 otherwise."""
    if is_tensor(X):
        import torch  # already imported: X is a tensor

        return np.float64 if X.dtype == torch.float64 else np.float32
    return np.float64 if X.dtype == np.float64 else np.float32


def _as_2d(y):
    """A 1-D target becomes one column; tensors are left to validation."""
    if is_tensor(y):
        return y
    y = np.asarray(y)
    return y.reshape(-1, 1) if y.ndim == 1 else y


def _reject_unpaired(fit):
    """Wrap a ``fit`` that takes no unpaired pool so that ``unpaired=`` gets an actionable error.

    A grid search or pipeline forwards ``unpaired=`` to every step's ``fit``; without this the user
    sees only "fit() got an unexpected keyword argument 'unpaired'" deep in a traceback. The
    wrapper keeps ``fit``'s signature (``functools.wraps``) for metadata routing.
    """
    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        if "unpaired" in kwargs:
            # the estimators defined so far (the package imports them on first use)
            takers = ", ".join(name for name, cls in registered()
                               if "unpaired" in inspect.signature(cls.fit).parameters)
            raise TypeError(
                f"{type(self).__name__}.fit takes no unpaired pool: it learns from the paired "
                "(X, y) rows only. Estimators that use unpaired embeddings take "
                f"fit(X, y, unpaired=UnpairedPool(...)): {takers}. In a Pipeline, route the "
                "pool to that step only (step__unpaired=pool)."
            )
        return fit(self, *args, **kwargs)

    return wrapper


class BaseTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class of every skalign estimator: torch computation behind a batched ``transform``.

    Supplies the ``device``/``batch_size`` parameters' validation, input validation of fitted
    methods (:meth:`_validate_X`; torch tensors stay on their device) and :meth:`_apply`, which
    runs a fitted row-wise map batch by batch on the fitted device (or the CPU when that device is
    gone, e.g. after unpickling a GPU-fitted model on a machine without one). Subclasses implement
    ``fit`` and ``_transform_fn(device)``. :class:`BaseAligner` adds the paired ``(X, y)``
    contract; unsupervised transformers such as
    :class:`~skalign.OrthogonalEnsembleAligner` derive from this class directly.
    """

    _parameter_constraints: dict = {
        "device": [str, TorchDevice()],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register(cls)
        fit = cls.__dict__.get("fit")
        if fit is not None and "unpaired" not in inspect.signature(fit).parameters:
            cls.fit = _reject_unpaired(fit)

    def _validate_X(self, X, *, n_features=None, name="X", nonzero=False):
        """Validate inputs of fitted methods. Torch tensors stay tensors (on their device)."""
        expected = self.n_features_in_ if n_features is None else n_features
        if is_tensor(X):
            if X.ndim != 2:
                raise ValueError(f"Expected a 2D tensor for {name}, got {X.ndim}D.")
            if not X.isfinite().all():
                raise ValueError(f"Input {name} contains NaN or infinity.")
        elif n_features is None:
            X = validate_data(self, X, reset=False, dtype=FLOAT_DTYPES)
        else:
            X = check_array(X, dtype=FLOAT_DTYPES, input_name=name)
        if X.shape[1] != expected:
            raise ValueError(
                f"{name} has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{expected} features as input."
            )
        if nonzero:
            check_nonzero_rows(X, name=name)
        return X

    def _transform_fn(self, device):
        """Return ``fn(batch: Tensor) -> Tensor`` applying the fitted map on ``device``.

        A factory that also takes a ``dtype`` keyword receives the input's dtype (float64 for
        float64 input, float32 otherwise) and must compute in it; one that does not is fed float32.
        """
        raise NotImplementedError

    def _apply(self, fn_factory, X, n_outputs, numpy_factory=None):
        # float64 in, float64 computed: a factory that takes ``dtype`` builds its operands in the
        # input's dtype (float64 for float64 input, float32 otherwise); others compute in float32
        out_dtype = _output_dtype(X)
        fitted = str(getattr(self, "device_", "cpu"))
        # numpy rows computed on the CPU (a CPU model, or a GPU model where there is no GPU): the
        # numpy twin of the map, which a CPU model applies without importing torch at all
        if numpy_factory is not None and not is_tensor(X) and (
                fitted.startswith("cpu") or transform_device(fitted, X, owner=self).type == "cpu"):
            return apply_in_batches_numpy(
                numpy_factory(dtype=out_dtype), X, batch_size=self.batch_size,
                n_outputs=n_outputs, out_dtype=out_dtype,
            )
        import torch

        device = transform_device(getattr(self, "device_", None), X, owner=self)
        if "dtype" in inspect.signature(fn_factory).parameters:
            dtype = torch.float64 if out_dtype == np.float64 else torch.float32
            fn = fn_factory(device, dtype=dtype)
        else:
            dtype, fn = torch.float32, fn_factory(device)
        return apply_in_batches(
            fn, X, device=device, batch_size=self.batch_size, n_outputs=n_outputs,
            out_dtype=out_dtype, dtype=dtype,
        )

    def _needs_nonzero_rows(self):
        return False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


class BaseAligner(BaseTransformer):
    """Base class for estimators that map source embeddings into a target space.

    Subclasses implement ``fit`` (calling :meth:`_validate_pair` first and setting their fitted
    attributes as numpy arrays) and :meth:`_transform_fn`, which returns a function applying the
    fitted map to one batch of rows as a torch tensor. The base class supplies batched
    ``transform``/``predict``, ``score`` (mean cosine similarity), ``get_feature_names_out``,
    ``set_output`` and the scikit-learn tags of a two-view transformer.

    Every aligner takes two parameters besides its own, and documents them: ``device``
    (``"cpu"``, ``"cuda"``, ``"auto"``, a device string or a :class:`torch.device`; where the
    computation runs, resolved at fit time into ``device_``) and ``batch_size`` (rows per batch
    in ``transform``; ``None`` sizes batches from scikit-learn's ``working_memory`` setting).
    """

    # ------------------------------------------------------------------------- validation
    def _validate_pair(self, X, y, *, reset=True, nonzero=False, min_pairs=2):
        """Validate paired ``(X, y)`` and resolve the device.

        Returns float arrays ``X`` (n, d_x) and ``y`` (n, d_y); a 1-D ``y`` becomes one column.
        Sets ``device_``, ``n_features_in_`` and ``n_features_out_`` when ``reset``.
        """
        X, y = as_numpy(X), as_numpy(y)
        if y is not None:
            warn_if_labels(y, self)
        X, y = validate_data(
            self,
            X,
            y,
            reset=reset,
            dtype=FLOAT_DTYPES,
            multi_output=True,
            y_numeric=True,
            ensure_min_samples=min_pairs,
        )
        y = np.asarray(y, dtype=X.dtype if y.dtype not in (np.float32, np.float64) else y.dtype)
        if y.ndim == 1:
            y = y.reshape(-1, 1)
        if nonzero:
            check_nonzero_rows(X, name="X")
            check_nonzero_rows(y, name="y")
        if reset:
            self.device_ = str(resolve_device(self.device))
            self.n_features_out_ = y.shape[1]
        else:
            self._check_target_width(y)
        return X, y

    def _centered_pair_tensors(self, X, y, *, center=True, dtype=None):
        """Move a validated pair to ``device_`` and optionally centre both sides.

        Returns ``(X - μ_X, y - μ_Y, μ_X, μ_Y)`` as tensors (float64 unless ``dtype`` says
        otherwise); the means are zero vectors when ``center`` is false.
        """
        import torch

        dtype = torch.float64 if dtype is None else dtype
        dev = torch.device(self.device_)
        Xt, Yt = to_tensor(X, dev, dtype), to_tensor(y, dev, dtype)
        if center:
            mx, my = Xt.mean(0), Yt.mean(0)
        else:
            mx = torch.zeros(Xt.shape[1], dtype=dtype, device=dev)
            my = torch.zeros(Yt.shape[1], dtype=dtype, device=dev)
        return Xt - mx, Yt - my, mx, my

    def _check_target_width(self, y):
        if y.shape[1] != self.n_features_out_:
            raise ValueError(
                f"y has {y.shape[1]} features, but {type(self).__name__} was fitted with "
                f"{self.n_features_out_} target features."
            )

    # --------------------------------------------------------------------------- transform
    def transform(self, X):
        """Map source embeddings into the target space.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in)
            Source embeddings. Tensors are processed on their own device.

        Returns
        -------
        Y_hat : ndarray of shape (n_samples, n_features_out)
            Translated embeddings; float64 for float64 input, float32 otherwise.
        """
        check_is_fitted(self)
        X = self._validate_X(X, nonzero=self._needs_nonzero_rows())
        return self._apply(self._transform_fn, X, self.n_features_out_,
                           getattr(self, "_transform_numpy_fn", None))

    def predict(self, X):
        """Map source embeddings into the target space, as :meth:`transform`.

        Lets scikit-learn's scorers evaluate translations.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in)
            Source embeddings.

        Returns
        -------
        Y_hat : ndarray of shape (n_samples, n_features_out)
            Translated embeddings; float64 for float64 input, float32 otherwise.
        """
        return self.transform(X)

    def _has_inverse(self):
        return hasattr(self, "_inverse_transform_fn")

    @available_if(_has_inverse)
    def inverse_transform(self, X):
        """Map target-space embeddings back into the source space.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_out)
            Target-space embeddings.

        Returns
        -------
        X_hat : ndarray of shape (n_samples, n_features_in)
            The embeddings mapped back into the source space.
        """
        check_is_fitted(self)
        X = self._validate_X(
            X, n_features=self.n_features_out_, name="X (target space)",
            nonzero=self._needs_nonzero_rows(),
        )
        return self._apply(self._inverse_transform_fn, X, self.n_features_in_,
                           getattr(self, "_inverse_transform_numpy_fn", None))

    def score(self, X, y, sample_weight=None):
        """Mean cosine similarity between ``transform(X)`` and ``y`` (greater is better).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Source embeddings.
        y : array-like of shape (n_samples, n_features_out)
            Their true target embeddings.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the weighted mean.

        Returns
        -------
        score : float in [-1, 1]
            Mean cosine similarity of the translations with their targets.
        """
        from .metrics import mean_cosine_similarity

        check_is_fitted(self)
        y = _as_2d(as_numpy(y))
        self._check_target_width(y)
        sample_weight = check_sample_weight(sample_weight, len(y))
        return mean_cosine_similarity(y, self.transform(X), sample_weight=sample_weight)

    @property
    def _n_features_out(self):
        return self.n_features_out_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        return tags


class SharedSpaceMixin:
    """Two-tower aligners: both sides are mapped into one shared space of ``n_components_``.

    Mixed in before :class:`BaseAligner`. Subclasses implement ``_transform_fn(device)`` (source
    side) and ``_target_transform_fn(device)`` (target side). ``score`` is the top-1 retrieval
    accuracy of the pairs in the shared space: a paired cosine alone would reward a map that
    collapses everything onto one point.
    """

    def transform(self, X):
        """Map source embeddings into the shared space.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in)
            Source embeddings.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components)
            Float64 for float64 input, float32 otherwise.
        """
        check_is_fitted(self)
        return self._apply(self._transform_fn, self._validate_X(X), self.n_components_)

    def transform_target(self, y):
        """Map target embeddings into the shared space.

        Parameters
        ----------
        y : array-like or torch.Tensor of shape (n_samples, n_features_out)
            Target embeddings.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components)
            Float64 for float64 input, float32 otherwise.
        """
        check_is_fitted(self)
        y = self._validate_X(_as_2d(y), n_features=self.n_features_out_, name="y")
        return self._apply(self._target_transform_fn, y, self.n_components_)

    def score(self, X, y, sample_weight=None):
        """Top-1 retrieval accuracy of the pairs in the shared space (greater is better).

        Each ``transform(X)[i]`` queries all rows of ``transform_target(y)``; a hit is the true
        counterpart ranked first.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
            Source embeddings (the queries).
        y : array-like of shape (n_samples, n_features_out)
            Their true target embeddings (the candidates).
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each query's hit in the mean.

        Returns
        -------
        score : float in [0, 1]
            Fraction of queries whose counterpart ranks first.
        """
        from .metrics import retrieval_ranks

        ranks = retrieval_ranks(self.transform_target(y), self.transform(X))
        return float(np.average(ranks <= 1, weights=check_sample_weight(sample_weight, len(ranks))))

    @property
    def _n_features_out(self):
        return self.n_components_
