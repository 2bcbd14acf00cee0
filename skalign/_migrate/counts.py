"""Rows per provenance of a migrated store (``skalign info``): encoded, stale, translated.

A file store (``.npy``, Parquet, LanceDB, FAISS) keeps every row's provenance in its overlay
(:mod:`skalign._stores.files.overlay`): a row outside it is a translation, so the counts come
from the overlay's marks and the texts of the marked rows alone, a chunk of
:data:`TEXT_BATCH` marks at a time, never from the store's vectors. They are kept in
``counts.json`` in the overlay's folder together with what they were computed from
(:func:`counts_key`: the overlay's segments and base, the store's files, the text files read,
the encoder the stamp names); a reader uses them only while all of that is
unchanged and counts again otherwise, so counts of an earlier state are never shown as current.
Another live store counts its rows itself where its engine can read the marks apart from the
vectors (:meth:`~skalign._stores.live.LiveStore.count_marks`: one SQL statement, or a scan of
the marks and texts alone); a store whose engine cannot (``None``) is read row by row, in
batches.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .._stores.files.overlay import OVERLAY_SUFFIX, SEGMENT
from ..exceptions import StoreError
from .scan import all_ids, id_list

__all__ = ["COUNTS_FILE", "count_provenance", "counts_key"]

#: rows per read
BATCH = 2048
#: rows whose texts are read at a time from a file store
TEXT_BATCH = 65536
#: the counts' file in a file store's overlay folder
COUNTS_FILE = "counts.json"
_VERSION = 1


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
    quick = _quick_key(address, mine, text_field)
    if quick is not None:
        kept = _read_counts(address.path.with_name(address.path.name + OVERLAY_SUFFIX), quick,
                            "quick")
        if kept is not None:  # nothing changed since they were counted: the store unopened
            return kept
    try:
        store = open_live(address, text_field=text_field)
    except StoreError:
        return None
    with store:
        if store.overlay is not None:
            return _overlay_counts(store, mine, quick)
        counts = store.count_marks(mine)
        if counts is not None:  # an engine that counts its marks without the vectors
            return counts
        counts = _empty()
        ids = all_ids(store)
        for lo in range(0, len(ids), BATCH):
            _count_batch(store, id_list(ids[lo:lo + BATCH]), mine, counts)
    return counts


def _empty():
    return {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}


def _count_batch(store, ids, mine, counts):
    """Add the provenance of the rows ``ids`` to ``counts`` (texts read per field named)."""
    rows = store.fetch(ids)
    counts["rows"] += len(ids)

    def texts(field, rows_n):
        return store.fetch([ids[n] for n in rows_n], text_field=field).texts

    _count_marks(rows.provenance, texts, mine, counts)


def _count_marks(marks, read_texts, mine, counts):
    """Add the rows of provenance ``marks`` to ``counts``; ``read_texts(field, rows)`` gives
    the current texts of the rows (indexes into ``marks``) in ``field``
    (:func:`~skalign._stores.live.add_marks`)."""
    from .._stores.live import add_marks

    add_marks(marks, read_texts, mine, counts)


# ------------------------------------------------------------------------ file stores
def _stat(path):
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def counts_key(store, mine, names):
    """What the counts of the file ``store`` (its overlay holding the segments ``names``)
    depend on, as JSON values: the overlay's base (the store's rows, width, ids and files),
    each segment's name and file identity, the store's default text field and the encoder
    ``mine`` the counts are of. Raises ``OSError`` when a segment is gone (a compaction)."""
    return {"version": _VERSION, "base": store.overlay.base, "mine": mine,
            "text_field": store.text_source(None),
            "segments": [[n, *_stat(store.overlay.folder / n)] for n in names]}


def _text_file(store, field, seen):
    """Record in ``seen`` (path: identity, ``None`` where missing) the text file beside
    ``store`` (``.npy``, FAISS) whose lines are the texts of ``field`` (``None``: the store's
    default), before its texts are first read: it can change while the store does not."""
    if not store.texts_in_lines:
        return
    path = field if field is not None else store.text_source(None)
    if path is not None and path not in seen:
        try:
            seen[path] = _stat(path)
        except OSError:
            seen[path] = None


def _same_text_files(seen):
    """Whether every text file in ``seen`` still has the identity recorded there."""
    for path, ident in seen.items():
        try:
            if _stat(path) != ident:
                return False
        except OSError:
            if ident is not None:
                return False
    return True


def _quick_key(address, mine, text_field):
    """What the counts of the file store at ``address`` depend on, read without opening it:
    the overlay's recorded base (``base.json``, whose files must be the store's files now:
    device, inode, size and time), its segments, the encoder ``mine`` and the ``text_field``
    asked for; ``None`` for another kind of store, or a file store without an overlay."""
    from .._stores.address import FILE_KINDS
    from .._stores.files.live import files_state

    if address.kind not in FILE_KINDS:
        return None
    folder = address.path.with_name(address.path.name + OVERLAY_SUFFIX)
    try:
        with open(folder / "base.json", "rb") as f:
            base = json.loads(f.read(1 << 16))
        if not isinstance(base, dict) or base.get("files") != files_state(address.path):
            return None
        names = sorted(n for n in os.listdir(folder) if SEGMENT.fullmatch(n))
        segments = [[n, *_stat(folder / n)] for n in names]
    except (OSError, ValueError):
        return None
    return {"version": _VERSION, "base": base, "mine": mine,
            "text_field": None if text_field is None else str(text_field),
            "segments": segments}


def _read_counts(folder, key, which="key"):
    """The counts kept in ``folder`` for ``key`` (under ``which``: ``"key"``, what the store
    opened gives, or ``"quick"``, :func:`_quick_key`), or ``None`` (none kept, of another
    state, or unreadable)."""
    try:
        with open(folder / COUNTS_FILE, "rb") as f:
            kept = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get(which) != key \
            or not isinstance(kept.get("texts"), dict) or not _same_text_files(kept["texts"]):
        return None
    counts = kept.get("counts")
    fields = ("rows", "encoded", "stale", "translated")
    if not isinstance(counts, dict) or any(not isinstance(counts.get(k), int) or counts[k] < 0
                                           for k in fields) \
            or not isinstance(counts.get("encoders"), dict) \
            or any(not isinstance(v, int) for v in counts["encoders"].values()) \
            or counts["rows"] != sum(counts[k] for k in fields[1:]):
        return None
    return counts


def _write_counts(store, key, quick, texts, counts):
    """Keep ``counts`` for ``key`` and ``quick`` (skipped where the overlay's folder cannot be
    written)."""
    from .._stores.journal import write_durably

    try:
        write_durably(store.overlay.folder / COUNTS_FILE, json.dumps(
            {"key": key, "quick": quick, "texts": texts, "counts": counts},
            sort_keys=True).encode())
    except OSError:
        pass


def _overlay_counts(store, mine, quick):
    """The counts of a file store from its overlay (see the module docstring); ``quick``: the
    :func:`_quick_key` read before the store was opened, kept with them where its segments are
    those counted."""
    overlay = store.overlay
    state, names = overlay.refresh(), list(overlay.seen)
    try:
        key = counts_key(store, mine, names)
    except OSError:  # a segment merged away meanwhile: counted, not kept
        key = None
    counts = None if key is None else _read_counts(overlay.folder, key)
    if counts is not None:
        return counts
    marks, positions = state.marks, state.positions
    counts = _empty()
    counts["rows"] = int(store.n_rows)
    counts["translated"] = int(store.n_rows) - len(marks)
    texts = {}
    # TEXT_BATCH marks at a time, as str, with their texts: all of 10^6 encoded rows' marks,
    # row numbers and texts held at once took about 120 MB
    for lo in range(0, len(marks), TEXT_BATCH):
        at = positions[lo:lo + TEXT_BATCH]

        def read_texts(field, rows_n, at=at):
            _text_file(store, field, texts)
            return store.texts_at(at[np.asarray(rows_n, dtype=np.int64)], field)

        _count_marks(marks[lo:lo + TEXT_BATCH].tolist(), read_texts, mine, counts)
    if key is not None and _same_text_files(texts):
        if quick is None or quick["segments"] != key["segments"] \
                or quick["base"] != overlay.base:
            quick = None  # a writer added a segment meanwhile: only the full key is kept
        _write_counts(store, key, quick, texts, counts)
    return counts
