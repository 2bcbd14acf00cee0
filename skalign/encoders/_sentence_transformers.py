"""A sentence-transformers model, loaded offline from a folder or the local Hugging Face cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..exceptions import EncoderError, MissingDependencyError
from ._base import Encoder, _positive

__all__ = ["SentenceTransformerEncoder"]

_CHUNK = 1 << 20
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


class SentenceTransformerEncoder(Encoder):
    """A `sentence-transformers <https://www.sbert.net>`_ model as an encoder.

    Loaded without network access: ``model`` is a model folder, or a name found in the local
    Hugging Face cache (``HF_HUB_OFFLINE`` is set while loading, so a missing model is an error,
    never a download).

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
        ``None`` keeps the model's own pipeline (with its ``Normalize`` module if it has one);
        ``True`` scales every row to unit norm; ``False`` drops a final ``Normalize`` module (raw
        pooled output).
    prefix : str, default=""
        Prepended to every text (e.g. ``"passage: "`` for E5 models).

    Attributes
    ----------
    fingerprint : str
        ``st:`` and a digest of the model folder's files and of ``normalize`` and ``prefix``.
    """

    def __init__(self, model, device="auto", batch_size=64, normalize=None, prefix=""):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise MissingDependencyError(
                "a sentence-transformers encoder needs the sentence-transformers package: "
                "pip install 'skalign[encoders]'") from None
        from .._backend import resolve_device

        self.batch_size = _positive(batch_size, "batch_size")
        if normalize not in (None, True, False):
            raise ValueError(f"normalize must be None, True or False, got {normalize!r}")
        self.normalize, self.prefix = normalize, str(prefix)
        self.device = str(resolve_device(device))
        folder = Path(os.fspath(model)).expanduser()
        saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        try:
            st = SentenceTransformer(str(folder) if folder.is_dir() else str(model),
                                     device=self.device)
        except Exception as exc:  # noqa: BLE001 - any loader failure is the user's model spec
            raise EncoderError(
                f"cannot load the sentence-transformers model {str(model)!r} offline "
                f"(a model folder, or a name in the local Hugging Face cache): "
                f"{type(exc).__name__}: {exc}") from None
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if normalize is False:
            mods = [m for m in st if type(m).__name__ != "Normalize"]
            st = SentenceTransformer(modules=mods, device=self.device)
        self.model_ = st
        self.name = ("/".join(folder.resolve().parts[-2:]) if folder.is_dir() else str(model))
        path = Path(_model_path(st, folder))
        settings = json.dumps({"normalize": normalize, "prefix": self.prefix}, sort_keys=True)
        self.fingerprint = "st:" + hashlib.sha256(
            (_folder_digest(path) + settings).encode()).hexdigest()[:24]

    def _encode_batch(self, texts):
        if self.prefix:
            texts = [self.prefix + t for t in texts]
        return self.model_.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                  normalize_embeddings=bool(self.normalize),
                                  show_progress_bar=False)


def _model_path(st, folder):
    if folder.is_dir():
        return folder.resolve()
    # A hub name: the snapshot folder the first module was loaded from.
    config = getattr(getattr(st[0], "auto_model", None), "config", None)
    path = getattr(config, "_name_or_path", None)
    if path and Path(path).is_dir():
        return Path(path).resolve()
    raise EncoderError(f"cannot find the files of model {st!r} to fingerprint them; "
                       "pass the model's folder instead of its name")
