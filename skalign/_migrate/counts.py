"""Rows per provenance of a migrated store (``skalign info``): encoded, stale, translated."""

from __future__ import annotations

from ..exceptions import StoreError

__all__ = ["count_provenance"]

#: rows per read
BATCH = 2048


def count_provenance(address, text_field=None):
    """Rows per provenance of the store at ``address``, each encoded mark checked against the
    row's current text: ``{"rows", "encoded", "stale", "translated", "encoders"}``.

    ``encoded`` rows hold the vector of their current text by the store's encoder (the one its
    migration stamp names; any encoder for a store without one), ``stale`` rows are marked
    encoded but their text, text field or encoder no longer matches, the others are
    translated; ``encoders`` counts the rows each encoder fingerprint holds exactly. ``None``
    for a store that cannot be read live.
    """
    from .._stores import open_live
    from .._stores.address import parse_address
    from .._stores.provenance import read_stamp

    address = parse_address(address)
    try:
        stamp = read_stamp(address)
    except StoreError:
        stamp = None
    migration = stamp.get("migration") if isinstance(stamp, dict) else None
    migration = migration if isinstance(migration, dict) else {}
    mine = migration.get("encoder") if isinstance(migration.get("encoder"), str) else None
    if text_field is None and isinstance(migration.get("text_field"), str):
        text_field = migration["text_field"]
    try:
        store = open_live(address, text_field=text_field)
    except StoreError:
        return None
    counts = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    with store:
        ids = store.ids()
        for lo in range(0, len(ids), BATCH):
            _count_batch(store, ids[lo:lo + BATCH], mine, counts)
    return counts


def _count_batch(store, ids, mine, counts):
    """Add the provenance of the rows ``ids`` to ``counts`` (texts read per field named)."""
    from urllib.parse import unquote

    from .._stores.live import mark_state, parse_mark

    rows = store.fetch(ids)
    counts["rows"] += len(ids)
    fields = {}
    for n, p in enumerate(rows.provenance):
        mark = parse_mark(p)
        if mark is not None and mark.kind == "encoded":
            fields.setdefault(mark.field, []).append(n)
        elif isinstance(p, str) and p.startswith("encoded:"):
            counts["stale"] += 1  # an earlier version's mark: nothing to check it against
        else:
            counts["translated"] += 1
    for token, rows_n in fields.items():
        field = unquote(token) if token else None
        try:
            texts = store.fetch([ids[n] for n in rows_n], text_field=field).texts
        except StoreError:
            texts = [None] * len(rows_n)  # the field is gone: nothing is encoded from it
        for n, text in zip(rows_n, texts):
            p = rows.provenance[n]
            ok = mark_state(p, None, field, text) == "encoded"
            fp = parse_mark(p).fingerprint
            if ok:
                counts["encoders"][fp] = counts["encoders"].get(fp, 0) + 1
            counts["encoded" if ok and (mine is None or fp == mine) else "stale"] += 1
