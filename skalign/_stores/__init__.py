"""Vector stores: one package, one module per engine.

* :mod:`.address` — the one parser of store addresses (:class:`~.address.Address`);
* :mod:`.registry` — kind → backend module and the extra to install;
* :mod:`.base` — the reader/writer protocol; backends: :mod:`.npy`, :mod:`.parquet`,
  :mod:`.lance`, :mod:`.faiss`, :mod:`.pgvector`, :mod:`.chroma`, :mod:`.qdrant`;
* :mod:`.pipeline` — the checked, streamed, verified translation; :mod:`.streaming`,
  :mod:`.verify`, :mod:`.provenance`, :mod:`.shadow`, :mod:`.journal` its parts.

The public face is :mod:`skalign.io`. Nothing is imported here: a backend never imports the
pipeline, and importing one backend imports no other.
"""
