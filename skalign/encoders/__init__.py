"""Encoders: the new model in the loop, with every text encoded at most once.

skalign never needs an encoder to fit or apply a map; migrating a store with the new model in
the loop (re-embedding a budgeted sample, re-scoring search candidates) does. An encoder is any
function from a list of texts to an ``(n, dim)`` array, with a *fingerprint* that names the exact
function (model weights and settings):

- :func:`load_encoder` turns a spec into one: a sentence-transformers model folder or cached name
  (``pip install 'skalign[encoders]'``), ``"module:callable"`` for anything else (an API client,
  a C engine), or a Python callable;
- :class:`CachedEncoder` runs the model only on texts that no earlier call or run encoded, with
  the vectors kept in an :class:`EncodeCache` (a SQLite file keyed by the fingerprint and the
  sha256 of each text; every batch committed as soon as it is encoded).

Examples
--------
>>> import numpy as np
>>> from skalign.encoders import CachedEncoder
>>> calls = []
>>> def embed(texts):
...     calls.append(len(texts))
...     return np.array([[len(t), t.count("a")] for t in texts], dtype=float)
>>> enc = CachedEncoder(embed)
>>> enc.encode(["banana", "apple", "banana"]).tolist()
[[6.0, 3.0], [5.0, 1.0], [6.0, 3.0]]
>>> enc.encode(["apple", "cherry"])[1].tolist()
[6.0, 0.0]
>>> enc.n_encoded, calls
(3, [2, 1])
"""

from ._base import CallableEncoder, Encoder, UnitEncoder
from ._cache import CachedEncoder, EncodeCache, default_cache_path, text_digest
from ._sentence_transformers import SentenceTransformerEncoder
from ._spec import as_encoder, load_encoder, resolve_normalize

__all__ = [
    "CachedEncoder",
    "CallableEncoder",
    "EncodeCache",
    "Encoder",
    "SentenceTransformerEncoder",
    "UnitEncoder",
    "as_encoder",
    "default_cache_path",
    "load_encoder",
    "resolve_normalize",
    "text_digest",
]
