"""Vector stores: one package, one module per engine.

* :mod:`.address` — the one parser of store addresses (:class:`~.address.Address`);
* :mod:`.registry` — kind → backend module and the extra to install;
* :mod:`.base` — the reader/writer protocol; backends: :mod:`.npy`, :mod:`.parquet`,
  :mod:`.lance`, :mod:`.faiss`, :mod:`.pgvector`, :mod:`.chroma`, :mod:`.qdrant`;
* :mod:`.pipeline` — the checked, streamed, verified translation; :mod:`.pipeline.streaming`,
  :mod:`.pipeline.verify`, :mod:`.provenance`, :mod:`.files.shadow`, :mod:`.journal` its parts.

The public face is :mod:`skalign.io`. Nothing is imported here: a backend never imports the
pipeline, and importing one backend imports no other.
"""


def open_live(address_or_text, *, column=None, text_field=None, provenance_key=None,
              **options):
    """Open a published store for live search, reads by id and write-back.

    Parameters
    ----------
    address_or_text : str, path-like or Address
        The store (:func:`~skalign._stores.address.parse_address` forms).
    column : str, default=None
        The vector column (tables) or named vector (Qdrant).
    text_field : str, default=None
        Where each row's text is: a column, metadata or payload key, or (``.npy`` and FAISS
        stores) a text file beside the store, one row's text a line.
    provenance_key : str, default=None
        The metadata/payload key or column of each row's provenance (engines that keep it in
        the rows; default ``skalign_vector``). File stores keep it in their overlay.
    **options
        Options of the backend's live store (``id_field``, ``metric`` for file stores).

    Returns
    -------
    skalign._stores.live.LiveStore
    """
    from .address import parse_address
    from .registry import live_class

    address = parse_address(address_or_text)
    cls = live_class(address.kind)
    if cls.in_row_provenance:
        options["provenance_key"] = provenance_key
    return cls(address, column=column, text_field=text_field, **options)
