"""Vector stores: contracts at the root, then layers, then one module or folder per engine.

* :mod:`.address` — the one parser of store addresses (:class:`~.address.Address`) and the
  scheme table;
* :mod:`.registry` — kind → engine, reader, writer, live store and the extra to install;
* :mod:`.engine` — :class:`~.engine.Engine`, what the shared code asks of a kind (backups,
  stamps, restore, recovery, ids, batch shape, whether it writes in place);
* :mod:`.base`, :mod:`.live` — the reader/writer protocol and the live store's;
  :mod:`.journal`, :mod:`.backups`, :mod:`.provenance` — commits, backups' names, stamps;
* :mod:`.pipeline` — the checked, streamed, verified translation; :mod:`.files` — file
  mechanics (shadows, direct I/O, Arrow, the overlay); :mod:`.databases` — what the database
  engines share;
* engines: :mod:`.npy`, :mod:`.faiss`, :mod:`.lance` (one module each: reader, writer, live
  store and engine), :mod:`.parquet`, :mod:`.pgvector`, :mod:`.chroma`, :mod:`.qdrant` (a folder
  each, the engine in its ``__init__``).

The public face is :mod:`skalign.io`. Nothing is imported here: an engine never imports the
pipeline, and importing one engine imports no other.
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
