"""What an encoder is to skalign: texts in, one float32 row per text out, and a fingerprint."""

from __future__ import annotations

import hashlib
import importlib
import inspect

import numpy as np

from ..exceptions import EncoderError

__all__ = ["CallableEncoder", "Encoder", "check_embeddings"]


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
    """

    fingerprint = None
    name = None
    batch_size = 64

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
            If the model returns anything but one finite row of a fixed width per text.
        """
        texts = check_texts(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        parts, dim = [], None
        for lo in range(0, len(texts), self.batch_size):
            batch = texts[lo:lo + self.batch_size]
            out = check_embeddings(self._encode_batch(batch), len(batch), self.name, dim)
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


def check_embeddings(out, n, name, dim=None):
    """The output of an encoder for ``n`` texts as a float32 ``(n, d)`` array, or an
    :class:`~skalign.exceptions.EncoderError` that says what is wrong with it."""
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    try:
        arr = np.asarray(out, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EncoderError(
            f"encoder {name} returned something that is not an array: {exc}") from None
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
    return np.ascontiguousarray(arr)


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
        self.name = name or _qualname(func)
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


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def import_callable(spec):
    """The object ``"package.module:attr.attr"`` names; :class:`EncoderError` if there is none."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise EncoderError(f"encoder {spec!r} is not of the form 'module:callable'")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise EncoderError(f"encoder {spec!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EncoderError(f"encoder {spec!r}: {module_name!r} has no {attr!r}") from None
    return obj
