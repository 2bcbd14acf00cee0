"""From what a user writes (``--encoder SPEC``, an object, a function) to an encoder."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._terminal import escape_control
from ..exceptions import EncoderError
from ._base import CallableEncoder, Encoder, describe_error, import_callable

__all__ = ["as_encoder", "load_encoder"]

_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def load_encoder(spec, *, device="auto", batch_size=64, normalize=None, prefix=""):
    """The encoder ``spec`` names.

    Parameters
    ----------
    spec : str, path, callable or Encoder
        - an :class:`~skalign.encoders.Encoder`: returned as is;
        - a callable (list of str → array): wrapped in a
          :class:`~skalign.encoders.CallableEncoder`;
        - ``"package.module:callable"``: that callable, imported (an object with an ``encode``
          method is used through it, e.g. a factory returning a model), then wrapped;
        - anything else: a sentence-transformers model folder, or a model name in the local
          Hugging Face cache (:class:`~skalign.encoders.SentenceTransformerEncoder`).
    device : {"auto", "cpu", "cuda"} or str, default="auto"
        Where a sentence-transformers model runs.
    batch_size : int, default=64
        Texts per call of the model or callable.
    normalize : bool or None, default=None
        See :class:`~skalign.encoders.SentenceTransformerEncoder`.
    prefix : str, default=""
        Prepended to every text by a sentence-transformers model.

    Returns
    -------
    Encoder
        The encoder; ``spec`` itself when it is one.

    Raises
    ------
    EncoderError
        One line, if ``spec`` names nothing that can be loaded: a module that cannot be
        imported (missing, raising or not compiling as it is imported), an attribute it lacks,
        a class that fails as it is created, a model that is neither a folder nor in the local
        Hugging Face cache (nothing is ever downloaded).
    MissingDependencyError
        A model name or folder without sentence-transformers installed.

    Examples
    --------
    >>> import numpy as np
    >>> from skalign.encoders import load_encoder
    >>> enc = load_encoder(lambda texts: np.array([[len(t), 1.0] for t in texts]))
    >>> enc.encode(["a", "abc"])
    array([[1., 1.],
           [3., 1.]], dtype=float32)
    """
    if isinstance(spec, Encoder):
        return spec
    if callable(spec) and not isinstance(spec, (str, os.PathLike)):
        return CallableEncoder(_callable_of(spec), batch_size=batch_size)
    if not isinstance(spec, (str, os.PathLike)):
        raise EncoderError(f"an encoder spec must be a str, a path or a callable, "
                           f"got {type(spec).__name__}")
    text = os.fspath(spec)
    if not isinstance(text, str) or "\0" in text or not text.strip():
        raise EncoderError(f"the encoder spec {escape_control(repr(text))} is not a model "
                           "folder, a model name or 'module:callable'")
    if _CALLABLE.match(text) and not _exists(text):
        obj = import_callable(text)
        if isinstance(obj, Encoder):
            return obj
        try:
            if isinstance(obj, type):
                obj = obj()
            fingerprint = getattr(obj, "fingerprint", None)
            func = _callable_of(obj)
        except EncoderError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's class failing as it is set up
            raise EncoderError(f"encoder {escape_control(repr(text))}: setting it up failed "
                               f"({describe_error(exc)})") from None
        return CallableEncoder(func, fingerprint=fingerprint, batch_size=batch_size,
                               name=text)
    from ._sentence_transformers import SentenceTransformerEncoder

    return SentenceTransformerEncoder(text, device=device, batch_size=batch_size,
                                      normalize=normalize, prefix=prefix)


def as_encoder(obj):
    """Accept any encoder spec, with :func:`load_encoder`'s defaults.

    Parameters
    ----------
    obj : str, path, callable or Encoder
        See :func:`load_encoder`.

    Returns
    -------
    Encoder
        The encoder ``obj`` names.
    """
    return load_encoder(obj)


def _exists(text):
    """Whether a file or folder ``text`` exists (a name too long to be a path is none)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _callable_of(obj):
    """An object with an ``encode`` method is used through it, anything else called."""
    encode = getattr(obj, "encode", None)
    if callable(encode) and not isinstance(obj, type):
        return encode
    if callable(obj):
        return obj
    raise EncoderError(f"an encoder must be callable or have an encode method; got a "
                       f"{escape_control(type(obj).__name__)}")
