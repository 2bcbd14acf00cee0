"""What an encoder is to skalign: texts in, one float32 row per text out, and a fingerprint."""

from __future__ import annotations

import hashlib
import importlib
import inspect

import numpy as np

from ..exceptions import EncoderError
from ..utils._terminal import escape_control

__all__ = ["CallableEncoder", "Encoder", "UnitEncoder", "check_embeddings", "describe_error",
           "unit_rows"]

#: the largest magnitude an embedding value may have: beyond it a row's squared norm can overflow
#: float32 (3.4e38) at widths up to 10**8, and every score computed from it would be inf or nan
MAX_ABS = 1e15
#: an error message quoted in one of ours is cut at this many characters
_QUOTE = 300


class Encoder:
    """Base class of skalign's encoders.

    An encoder turns a list of texts into an ``(n_texts, dim)`` float32 array, row ``i`` the
    embedding of text ``i``. Its :attr:`fingerprint` names the exact function it computes: two
    encoders with the same fingerprint must give the same vector for the same text, since the
    encode cache (:class:`~skalign.encoders.EncodeCache`) and a store's row provenance are keyed
    by it.

    Subclasses implement :meth:`_encode_batch`; :meth:`encode` splits the texts in batches of
    ``batch_size`` and checks every batch's output.

    Attributes
    ----------
    fingerprint : str
        A short, stable identifier of the function the encoder computes (model weights and
        settings), e.g. ``"st:1f0c...:norm=model:prefix="``.
    name : str
        A readable name for messages (a model's folder name, a callable's qualified name).
    batch_size : int
        Texts per call of the model.
    normalize : bool or None
        The normalisation asked for: ``True`` every row scaled to unit norm, ``False`` the
        model's raw output (a sentence-transformers model's final ``Normalize`` module
        dropped), ``None`` the encoder's own output, unchanged.
    unit_vectors : bool or None
        Whether every row it returns has unit norm: ``True``/``False`` where the encoder knows
        (a sentence-transformers model knows from its modules), ``None`` where it cannot (a
        callable's own output).
    """

    fingerprint = None
    name = None
    batch_size = 64
    normalize = None
    unit_vectors = None

    def _encode_batch(self, texts):
        raise NotImplementedError

    def encode(self, texts):
        """Embed texts, one float32 row per text.

        Parameters
        ----------
        texts : list of str
            The texts, in order.

        Returns
        -------
        ndarray of shape (n_texts, dim), float32
            Row ``i`` embeds ``texts[i]``.

        Raises
        ------
        EncoderError
            If the model fails (any exception but :class:`KeyboardInterrupt` and
            :class:`SystemExit`, quoted in one line), or returns anything but one row of a fixed
            width per text with every value finite and of magnitude at most ``1e15``.
        """
        texts = check_texts(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        parts, dim = [], None
        for lo in range(0, len(texts), self.batch_size):
            batch = texts[lo:lo + self.batch_size]
            out = check_embeddings(call_encoder(self._encode_batch, batch, self.name),
                                   len(batch), self.name, dim)
            dim = out.shape[1]
            parts.append(out)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


def check_texts(texts):
    """``texts`` as a list of str; anything else is a :class:`TypeError` naming the first bad
    one."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of str, not one str")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is a {type(t).__name__}, not a str")
    return texts


def describe_error(exc):
    """An exception as one printable line: its type, then its message with runs of whitespace
    made one space, control characters escaped and the whole cut at 300 characters."""
    try:
        message = " ".join(str(exc).split())
    except Exception:  # noqa: BLE001 - a hostile __str__ must not replace the error we report
        message = "(a message that cannot be printed)"
    if len(message) > _QUOTE:
        message = message[:_QUOTE] + "..."
    message = escape_control(message)
    kind = escape_control(type(exc).__name__)
    return f"{kind}: {message}" if message else kind


def call_encoder(func, texts, name):
    """``func(texts)``, with any failure of the model as one :class:`EncoderError` line that
    names the encoder and the batch; :class:`KeyboardInterrupt` and :class:`SystemExit` pass."""
    try:
        return func(texts)
    except EncoderError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's model raises, said in one line
        raise EncoderError(f"the encoder {escape_control(name)} failed on a batch of "
                           f"{len(texts)} texts: {describe_error(exc)}") from exc


def check_embeddings(out, n, name, dim=None):
    """The output of an encoder for ``n`` texts as a float32 ``(n, d)`` array, or an
    :class:`~skalign.exceptions.EncoderError` that says what is wrong with it.

    A value must be finite and of magnitude at most ``1e15`` (:data:`MAX_ABS`): beyond it, norms
    and scores overflow float32.
    """
    name = escape_control(name)
    try:
        if hasattr(out, "detach"):
            out = out.detach().cpu().numpy()
        arr = np.asarray(out, dtype=np.float32)
    except Exception as exc:  # noqa: BLE001 - an object of the user's that will not convert
        raise EncoderError(f"encoder {name} returned something that is not an array: "
                           f"{describe_error(exc)}") from None
    if arr.ndim != 2 or arr.shape[0] != n:
        raise EncoderError(
            f"encoder {name} returned an array of shape {arr.shape} for {n} texts; "
            f"expected ({n}, dim)")
    if arr.shape[1] == 0:
        raise EncoderError(f"encoder {name} returned rows of width 0")
    if dim is not None and arr.shape[1] != dim:
        raise EncoderError(
            f"encoder {name} returned rows of width {arr.shape[1]} after rows of width {dim}")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise EncoderError(
            f"encoder {name} returned non-finite values for {int(bad.sum())} of {n} texts "
            f"(first: text {int(np.flatnonzero(bad)[0])} of the batch)")
    huge = (np.abs(arr) > MAX_ABS).any(axis=1)
    if huge.any():
        raise EncoderError(
            f"encoder {name} returned values of magnitude above {MAX_ABS:g} for "
            f"{int(huge.sum())} of {n} texts (first: text {int(np.flatnonzero(huge)[0])} of the "
            "batch); no embedding is that large, and its scores would overflow")
    return np.ascontiguousarray(arr)


def valid_rows(arr):
    """A boolean per row of a 2-d array: every value finite and of magnitude at most ``1e15``."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(arr).all(axis=1) & (np.abs(arr) <= MAX_ABS).all(axis=1)


def _qualname(func):
    module = getattr(func, "__module__", None) or type(func).__module__
    qual = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}:{qual}"


class CallableEncoder(Encoder):
    """Any function from a list of texts to an array, as an encoder.

    Parameters
    ----------
    func : callable
        ``func(list_of_str) -> array-like of shape (n, dim)`` (numpy, a torch tensor, nested
        lists): an API client, a C engine, a model of another library.
    fingerprint : str, optional
        What identifies the function's output. Defaults to the callable's own ``fingerprint``
        attribute when it has one, else its qualified name and its module's ``__version__``:
        pass one explicitly when the function's output can change under the same name (a
        served model that is updated), or the encode cache would hand out stale vectors.
    batch_size : int, default=64
        Texts per call.
    name : str, optional
        For messages; defaults to the qualified name.
    """

    def __init__(self, func, fingerprint=None, batch_size=64, name=None):
        if not callable(func):
            raise TypeError(f"an encoder must be callable, got {type(func).__name__}")
        self.func = func
        self.batch_size = _positive(batch_size, "batch_size")
        self.name = escape_control(name or _qualname(func))
        if fingerprint is None:
            fingerprint = getattr(func, "fingerprint", None)
        if fingerprint is None:
            module = inspect.getmodule(func)
            version = getattr(module, "__version__", "") if module is not None else ""
            fingerprint = "callable:" + hashlib.sha256(
                f"{_qualname(func)}@{version}".encode()).hexdigest()[:16]
        self.fingerprint = str(fingerprint)

    def _encode_batch(self, texts):
        return self.func(list(texts))


def unit_rows(arr):
    """Every row of a float32 array scaled to unit L2 norm (computed in float64); a zero row
    stays zero."""
    norms = np.linalg.norm(np.asarray(arr, dtype=np.float64), axis=1, keepdims=True)
    return (arr / np.where(norms > 0, norms, 1.0)).astype(np.float32)


class UnitEncoder(Encoder):
    """Another encoder's rows scaled to unit L2 norm.

    What ``normalize=True`` gives for an encoder that has no normalisation of its own to switch
    on: a callable, an :class:`Encoder` object.

    Parameters
    ----------
    encoder : Encoder
        The encoder whose output is scaled.

    Attributes
    ----------
    fingerprint : str
        The inner encoder's, with ``":unit"`` appended: the encode cache keeps the two apart.
    """

    normalize = True
    unit_vectors = True

    def __init__(self, encoder):
        self.encoder = encoder
        self.name = encoder.name
        self.batch_size = encoder.batch_size
        self.fingerprint = f"{encoder.fingerprint}:unit"

    def _encode_batch(self, texts):
        return unit_rows(self.encoder.encode(texts))


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def import_callable(spec):
    """The object ``"package.module:attr.attr"`` names.

    Parameters
    ----------
    spec : str
        ``"package.module:attr.attr"``.

    Returns
    -------
    object
        The attribute.

    Raises
    ------
    EncoderError
        One line, if the spec is malformed, the module cannot be imported (missing, or failing
        as it runs: any exception, a :class:`SyntaxError` included) or lacks the attribute.
    """
    shown = escape_control(repr(spec))
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise EncoderError(f"encoder {shown} is not of the form 'module:callable'")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module failing as it is imported
        raise EncoderError(f"encoder {shown}: cannot import {escape_control(repr(module_name))} "
                           f"({describe_error(exc)})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EncoderError(f"encoder {shown}: {escape_control(repr(module_name))} has no "
                               f"{escape_control(repr(attr))}") from None
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ or property failing
            raise EncoderError(f"encoder {shown}: reading {escape_control(repr(attr))} failed "
                               f"({describe_error(exc)})") from None
    return obj
