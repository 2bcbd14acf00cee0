"""From what a user writes (``--encoder SPEC``, an object, a function) to an encoder."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..exceptions import EncoderError
from ..utils._terminal import escape_control
from ._base import CallableEncoder, Encoder, UnitEncoder, describe_error, import_callable

__all__ = ["as_encoder", "load_encoder", "normalize_label", "resolve_normalize",
           "split_spec"]

_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_OPTION = re.compile(r"^(?P<spec>.+)\?normalize=(?P<value>[^?=&]*)$", re.DOTALL)
#: what ``normalize`` may be, as the command line and the spec write it
NORMALIZE_CHOICES = ("auto", "yes", "no")
#: what ``precision`` may be: float32, or 16 bits (float16 on a GPU, bfloat16 on a CPU)
PRECISIONS = ("full", "half")
#: metrics under which a vector's length changes the ranking
LENGTH_METRICS = ("ip", "l2")


def resolve_normalize(normalize, metric=None):
    """What ``normalize`` comes to for a store ranked by ``metric``.

    ``"auto"`` gives unit vectors where a vector's length changes the ranking (``metric``
    ``"ip"`` or ``"l2"``) and the encoder's own output where it does not (``"cosine"``, or no
    metric known), so that an encode cache filled before stays valid there.

    Parameters
    ----------
    normalize : {"auto", "yes", "no"}, bool or None
        ``"yes"``/``True``: unit vectors; ``"no"``/``False``: the raw output;
        ``None``: the encoder's own output.
    metric : {"cosine", "ip", "l2"} or None, default=None
        What the store ranks by.

    Returns
    -------
    bool or None
        ``True``, ``False`` or ``None``, as :func:`load_encoder` takes it.
    """
    if normalize is None or isinstance(normalize, bool):
        return normalize
    if normalize == "auto":
        return True if metric in LENGTH_METRICS else None
    if normalize in ("yes", "no"):
        return normalize == "yes"
    raise ValueError(f"normalize must be auto, yes or no, got {escape_control(repr(normalize))}")


def normalize_label(encoder):
    """``"yes"``, ``"no"`` or ``"own"`` (the encoder's output unchanged): how ``encoder``'s
    rows are normalised, as ``skalign migrate`` records it and ``skalign info`` shows it."""
    return {True: "yes", False: "no"}.get(getattr(encoder, "normalize", None), "own")


def split_spec(spec):
    """``(spec, normalize)``: an encoder spec without its ``?normalize=VALUE`` suffix, and
    VALUE (``None`` without one). A spec that names an existing file or folder is never split.

    Raises
    ------
    EncoderError
        A VALUE other than auto, yes or no.
    """
    if not isinstance(spec, (str, os.PathLike)):
        return spec, None
    text = os.fspath(spec)
    found = _OPTION.match(text) if isinstance(text, str) else None
    if found is None or _exists(text):
        return spec, None
    value = found["value"].strip().lower()
    if value not in NORMALIZE_CHOICES:
        raise EncoderError(f"the encoder spec {escape_control(repr(text))}: normalize must be "
                           f"auto, yes or no, got {escape_control(repr(found['value']))}")
    return found["spec"], value


def load_encoder(spec, *, device="auto", batch_size=64, normalize=None, prefix="",
                 metric=None, precision="full"):
    """The encoder ``spec`` names.

    Parameters
    ----------
    spec : str, path, callable or Encoder
        - an :class:`~skalign.encoders.Encoder`: returned as is (in a
          :class:`~skalign.encoders.UnitEncoder` when ``normalize`` asks for unit vectors);
        - a callable (list of str → array): wrapped in a
          :class:`~skalign.encoders.CallableEncoder`;
        - ``"package.module:callable"``: that callable, imported (an object with an ``encode``
          method is used through it, e.g. a factory returning a model), then wrapped;
        - anything else: a sentence-transformers model folder, or a model name in the local
          Hugging Face cache (:class:`~skalign.encoders.SentenceTransformerEncoder`).

        A text spec may end in ``?normalize=auto|yes|no`` (``./models/minilm?normalize=yes``),
        the same as the ``normalize`` argument.
    device : {"auto", "cpu", "cuda"} or str, default="auto"
        Where a sentence-transformers model runs.
    batch_size : int, default=64
        Texts per call of the model or callable.
    normalize : {"auto", "yes", "no"}, bool or None, default=None
        ``True``/``"yes"``: every row scaled to unit norm; ``False``/``"no"``: the raw output
        (a sentence-transformers model's final ``Normalize`` module dropped; a callable's output
        as it returns it); ``None``: the encoder's own output, unchanged (the spec's
        ``?normalize=`` when it has one); ``"auto"``: unit vectors when ``metric`` is ``"ip"``
        or ``"l2"``, the encoder's own output otherwise (:func:`resolve_normalize`).
    prefix : str, default=""
        Prepended to every text by a sentence-transformers model.
    metric : {"cosine", "ip", "l2"} or None, default=None
        What the store the vectors go to ranks by; only ``normalize="auto"`` reads it.
    precision : {"full", "half"}, default="full"
        ``"half"`` runs a sentence-transformers model in 16 bits: float16 on a GPU, bfloat16 on
        a CPU (:class:`~skalign.encoders.SentenceTransformerEncoder`); its fingerprint then
        names the type, since its vectors differ from the float32 model's. Another encoder
        runs at its own precision: ``"half"`` is refused for it.

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
        Hugging Face cache (nothing is ever downloaded); or if the spec's ``?normalize=`` and
        ``normalize`` disagree; or ``precision="half"`` for an encoder that is not a
        sentence-transformers model.
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
    spec, given = split_spec(spec)
    if isinstance(normalize, bool):
        normalize = "yes" if normalize else "no"
    if normalize is not None and given is not None and normalize != given:
        raise EncoderError(f"the encoder spec says normalize={given} but normalize={normalize} "
                           "was given; give one")
    unit = resolve_normalize(normalize if normalize is not None else given, metric)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be full or half, got {escape_control(repr(precision))}")
    encoder = _load(spec, device, batch_size, unit, prefix, precision)
    if precision == "half" and getattr(encoder, "precision", "full") != "half":
        raise EncoderError(f"precision half applies to a sentence-transformers model; the "
                           f"encoder {escape_control(str(encoder.name))} runs at its own "
                           "precision: drop the half precision")
    if unit is True and encoder.normalize is not True:
        encoder = UnitEncoder(encoder)
    elif unit is False and isinstance(encoder, CallableEncoder) and encoder is not spec:
        encoder.normalize = False  # a callable's output is its raw output: nothing to drop
    return encoder


def _load(spec, device, batch_size, normalize, prefix, precision="full"):
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
                                      normalize=normalize, prefix=prefix, precision=precision)


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
