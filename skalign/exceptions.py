"""Exceptions and warnings raised by skalign.

Catch these instead of matching messages::

    from skalign.exceptions import ConvergenceWarning, IllConditionedDecodeWarning, NumericalError
    from skalign.exceptions import DeviceWarning, ModelFileError, ScaleMismatchWarning, StoreError
    from skalign.exceptions import AddressError, StoreNotFoundError, VerificationError

``ConvergenceWarning`` is scikit-learn's own class (warned when ``max_iter`` is hit), re-exported
so that one import covers every exception and warning skalign raises.
"""

from scipy.linalg import LinAlgWarning
from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "AnchorConsistencyWarning",
    "ConvergenceWarning",
    "DeviceWarning",
    "DiscoveryFailedWarning",
    "EncoderError",
    "IllConditionedDecodeWarning",
    "LabelsAsTargetWarning",
    "MigrationRefused",
    "ModelFileError",
    "NumericalError",
    "ScaleMismatchWarning",
    "AddressError",
    "MissingDependencyError",
    "StoreConnectionError",
    "StoreError",
    "StoreExistsError",
    "StoreLockedError",
    "StoreNotFoundError",
    "UnsafeOperationError",
    "VerificationError",
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
    """An aligner's ``fit`` got class labels where it expects target embeddings.

    A 1-D integer or boolean ``y`` looks like labels. ``fit(X, y)`` pairs row ``i`` of ``X`` with
    the target embedding ``y[i]``; to use labels, fit the aligner on embedding pairs and chain a
    classifier after it. Turn the warning into an error with ``warnings.simplefilter("error",
    LabelsAsTargetWarning)``.
    """


class IllConditionedDecodeWarning(LinAlgWarning, UserWarning):
    """An :class:`~skalign.InverseRelativeProjector` decode amplifies noise.

    The decode's conditioning is far worse than with the ridge that generalised cross-validation
    would choose. Raised with ``alpha=0`` (the paper's plain pseudo-inverse) or a tiny ``alpha``
    when many anchors are nearly collinear; the translation is then dominated by noise. The
    message names the parameters to change (``alpha='gcv'``, ``rtol``, ``pruning_threshold``).
    """


class AnchorConsistencyWarning(UserWarning):
    """:class:`~skalign.AnchorBootstrapper` found anchor pairs that are not consistent.

    The accepted anchor pairs stopped being mutually consistent from one round to the next, or
    disagree with the seed pairs. Usually a sign of wrong seed pairs or of two encoders too
    different for the self-learning loop; check ``rounds_`` (``still_mutual``,
    ``seed_agreement``).
    """


class StoreError(ValueError):
    """A problem with an input or output vector store that the user can fix.

    Raised by :func:`skalign.io.translate`, :func:`skalign.io.read_vectors`,
    :func:`skalign.parallel.translate_parquet` and the ``skalign`` command line: a missing file,
    an unsupported format, a missing or ragged vector column, vectors of another width than the
    model's input, an output that is the input. The message is one line naming the store and the
    fix; nothing is written when it is raised.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> from skalign.exceptions import StoreError
    >>> from skalign.io import read_vectors
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     try:
    ...         read_vectors(os.path.join(folder, "missing.npy"))
    ...     except StoreError as exc:
    ...         print(str(exc).split(": ", 1)[1])
    no such file; check the path.
    """


class AddressError(StoreError):
    """A store address that cannot be parsed, or a format skalign does not know.

    The message shows the address with any password masked.
    """


class StoreNotFoundError(StoreError, FileNotFoundError):
    """The input store (file, folder, table or collection) does not exist.

    Also a :class:`FileNotFoundError`, so ``except FileNotFoundError`` catches it.
    """


class StoreExistsError(StoreError, FileExistsError):
    """The output (or the backup ``replace`` would overwrite) already exists.

    Also a :class:`FileExistsError`. Without ``replace`` an existing output is refused; with it,
    an older backup is never overwritten, since it may hold the only copy of earlier data.
    """


class MissingDependencyError(StoreError, ImportError):
    """A store needs a package that is not installed.

    The message names the ``pip install`` that adds it. Also an :class:`ImportError`.
    """


class StoreConnectionError(StoreError, ConnectionError):
    """The connection to a store's server was lost (or never made) during a translation.

    Also a :class:`ConnectionError`. The shadow of a translation is kept: the same command, run
    again once the server is back, resumes from its last committed batch.
    """


class StoreLockedError(StoreError):
    """Another skalign run is writing the same output (the same store under any address)."""


class VerificationError(StoreError):
    """The output failed its verification and was not published.

    The verification compares the row count, and sampled rows translated again from the input
    with their ids and fields.
    """


class UnsafeOperationError(StoreError):
    """A translation that would lose or corrupt data.

    Translating a ``--replace`` backup or a store that is already this model's output (its
    provenance stamp says so) is refused unless ``force=True`` (``--force``); translating a
    backup into the output it was kept for is always refused.
    """


class MigrationRefused(StoreError):
    """``skalign migrate`` stopped: no map reaches ``min_recall`` with the rows encoded.

    Nothing was written. ``plan`` holds the estimates
    (:class:`~skalign.plan.MigrationPlan`); a larger budget, a lower ``min_recall`` or
    ``anyway=True`` go on. The command line prints the plan and exits with status 1.

    Parameters
    ----------
    message : str
        What was refused and what to change.
    plan : skalign.plan.MigrationPlan
        The plan the refusal rests on.
    """

    def __init__(self, message, plan):
        super().__init__(message)
        self.plan = plan


class EncoderError(ValueError):
    """An encoder could not be loaded, or returned something that is not one finite row per text.

    Raised by :mod:`skalign.encoders`; the message names the encoder and what was wrong (the
    shape it returned, the first non-finite row, the module it could not import).
    """


class ModelFileError(ValueError):
    """A model file is missing, not a skalign model, or names types that are not trusted.

    Raised by :func:`skalign.io.load` and :func:`skalign.io.model_info`; nothing from the file is
    instantiated when it is raised.
    """


class DeviceWarning(UserWarning):
    """A fitted model runs on the CPU because the device it was fitted on is not available.

    Warned once per model when an estimator fitted with ``device="cuda"`` (or ``"auto"`` on a GPU
    machine) transforms where torch sees no CUDA device, e.g. after unpickling it on a laptop. The
    result is the same map computed on the CPU. Silence it by refitting with ``device="cpu"`` or
    by setting ``estimator.device_ = "cpu"``; turn it into an error with
    ``warnings.simplefilter("error", DeviceWarning)``.
    """


class ScaleMismatchWarning(UserWarning):
    """An aligner was told to keep row norms that do not match between the two spaces.

    Warned by :class:`~skalign.ProcrustesAligner` and :class:`~skalign.LinearAligner` when an
    explicit ``normalize`` leaves a side un-normalised that ``normalize="auto"`` would normalise,
    e.g. ``normalize=False`` for raw all-MiniLM-L6-v2 vectors (norms 2.2-8.1) mapped to unit-norm
    multilingual-e5 vectors. The translated vectors then carry the source norms, which the target
    encoder never produces: on the development set the neighbourhoods of the translated store
    agree with the re-embedded store's far less than after normalisation (the estimators'
    docstrings give the figures). Silence it with ``normalize="auto"``, or with
    ``warnings.simplefilter("ignore", ScaleMismatchWarning)`` if the norms are wanted.
    """


class DiscoveryFailedWarning(UserWarning):
    """:class:`~skalign.AnchorBootstrapper`: the fitted translation fails its success certificate.

    The certificate (``certificate_``) is the share of source-pool rows whose translation and
    target-pool row are mutual nearest neighbours under CSLS; below ``min_certificate`` the
    discovered pairs, and so the map, are probably wrong (too few or wrong seed pairs, pools
    with too little in common, or encoders too different). Turn it into an error with
    ``warnings.simplefilter("error", DiscoveryFailedWarning)``.
    """
