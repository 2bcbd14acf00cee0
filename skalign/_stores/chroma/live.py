r"""A Chroma collection as a :class:`~skalign._stores.live.LiveStore`: searched with Chroma's own
``query`` (its HNSW index, every query in one call), read by id with ``get``, written back with
``update``.

The collection's distance space (``hnsw:space``, or its configuration's ``hnsw``/``spann``
``space``) is the store's metric. Chroma returns distances, turned into similarities (higher is
better), the scores of :func:`~skalign._stores.live.similarity`:

.. math::

    s_{\mathrm{cosine}} = 1 - d, \qquad s_{\mathrm{ip}} = 1 - d = \langle q, x \rangle,
    \qquad s_{\mathrm{l2}} = -d = -\lVert q - x \rVert_2^2

(Chroma's ``l2`` distance is the squared one).

A row's text is its document, or the metadata key ``text_field`` names, which must hold a
string (a record whose value there is of another type is refused by its id, the key and the
type; a record without the key has no text); its provenance is the
metadata key :data:`~skalign._stores.live.PROVENANCE_KEY`. A write-back is one ``update`` of the
embeddings and that one metadata key per batch: Chroma merges the metadata given into each
record's, so every other key, and the document, is kept.

Chroma logs a record's new embedding and metadata as one entry, but a ``get`` running beside the
``update`` can return the new embedding with the old metadata: without a lock, the reader
thread of ``tests/test_live_stores.py``'s concurrency test saw a round's embeddings with the
previous round's provenance in 4 of 15 runs (chromadb 1.5, persistent client); with it, in none
of 8. Chroma has no transaction to prevent it, so every live store of the same folder or server
in the process takes one lock around its reads and write-backs
(:func:`~skalign._stores.live_input.database_lock`): readers through skalign's live stores in
the process see a record before or after; a client in another process (or chromadb used
directly) can still, for an instant, see a written record's new embedding with its old
provenance.
"""

from __future__ import annotations

import numpy as np

from ...exceptions import StoreError
from ..live import LiveRows, LiveStore, check_key_name, owned_key_or_refuse, scan_batch
from ..live_input import (
    check_ids,
    check_k,
    check_options,
    check_vectors,
    database_lock,
    missing_id,
)
from .names import _edges
from .store import Reader, record_ids

__all__ = ["ChromaLive"]

#: Records per ``get`` and ``update`` (SQLite limits the variables of one statement)
PAGE = 4096
#: records per ``update`` of a write-back (no page size was faster: the developers' stores
#: study, "Write-back pages on Qdrant and Chroma"; at most the client's
#: ``get_max_batch_size``)
WRITE_PAGE = 4096
#: records whose provenance key is read before the first write-back
KEY_SAMPLE = 2000
#: records of each ``get`` of :meth:`ChromaLive.mark_scan`
SCAN_PAGE = 8192

#: Chroma's distance spaces → the store's metric
_SPACES = {"cosine": "cosine", "ip": "ip", "l2": "l2"}


def _space(collection):
    """The collection's distance space: its configuration's, else its ``hnsw:space`` metadata,
    else Chroma's default ``l2``."""
    config = collection.configuration or {}
    for index in ("hnsw", "spann"):
        space = (config.get(index) or {}).get("space")
        if space:
            return space
    return (collection.metadata or {}).get("hnsw:space", "l2")


@_edges
class ChromaLive(LiveStore):
    """A Chroma collection (``chroma:DIR/COLLECTION`` or ``chroma+http://HOST:PORT/COLLECTION``)
    searched, read by id and written back in place.

    Parameters
    ----------
    address : Address
        The collection (it must exist; nothing is created).
    column : None
        Chroma keeps one embedding per record: only ``None`` is accepted.
    text_field : str, default=None
        The metadata key of each record's text; ``None``: the record's document.

    Attributes
    ----------
    kind : str
        ``"chroma"``.
    dim : int
        The embeddings' width (0 for a collection without records).
    n_rows : int
        The records when the store was opened.
    metric : {"cosine", "ip", "l2"}
        The collection's distance space.
    """

    kind = "chroma"
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, provenance_key=None, **options):
        check_options(address, options)
        self.provenance_key = check_key_name(provenance_key, address)
        self._key_checked = False
        if column is not None:
            raise StoreError(f"{address}: a Chroma collection holds one embedding per record; "
                             "leave the column out.")
        self.address, self.text_field = address, text_field
        self._reader = Reader(address)
        space = _space(self._reader.collection)
        if space not in _SPACES:
            raise StoreError(f"{address}: Chroma's distance space {space!r} is not one of "
                             "cosine, ip or l2.")
        self.metric = _SPACES[space]
        self.dim, self.n_rows = self._reader.dim, self._reader.n_rows
        self._lock = database_lock(address)

    @property
    def _collection(self):
        return self._reader.collection

    def _width(self):
        """The embeddings' width, read again while the collection had none."""
        if not self.dim:
            head = self._collection.get(limit=1, include=["embeddings"])["embeddings"]
            self.dim = int(len(head[0])) if head is not None and len(head) else 0
        return self.dim

    def _ids(self, ids):
        ids = check_ids(ids, self.address)
        for i in ids:
            if not isinstance(i, str):
                raise StoreError(f"{self.address}: Chroma ids are text; got {type(i).__name__} "
                                 f"{i!r:.80}.")
        return ids

    def top_k(self, queries, k):
        k = check_k(k)
        Q = check_vectors(queries, self._width(), self.address)
        n = int(self._collection.count())
        if not len(Q) or n == 0:
            return [[] for _ in Q], [np.empty(0) for _ in Q]
        got = self._collection.query(query_embeddings=Q, n_results=min(k, n),
                                     include=["distances"])
        ids = [list(r) for r in got["ids"]]
        return ids, [self._scores(np.asarray(d, dtype=np.float64)) for d in got["distances"]]

    def _scores(self, distances):
        return -distances if self.metric == "l2" else 1.0 - distances

    def ids(self):
        """Every record's id in Chroma's order (its catalogue's), read afresh in pages of ids
        only (:func:`~skalign._stores.chroma.store.record_ids`)."""
        return record_ids(self._collection)

    def _get(self, ids, include):
        """The records of ``ids`` (pages of :data:`PAGE`) as ``{id: (embedding, document,
        metadata)}``; an id Chroma does not hold raises."""
        found = {}
        for lo in range(0, len(ids), PAGE):
            got = self._collection.get(ids=ids[lo:lo + PAGE], include=include)
            emb, docs, metas = (got.get(key) for key in ("embeddings", "documents", "metadatas"))
            for j, i in enumerate(got["ids"]):
                found[i] = (None if emb is None else emb[j], None if docs is None else docs[j],
                            None if metas is None else metas[j])
        for i in ids:
            if i not in found:
                raise missing_id(self.address, i)
        return found

    def fetch(self, ids, text_field=None):
        ids = self._ids(ids)
        field = self.text_field if text_field is None else text_field
        if not ids:
            return LiveRows([], np.empty((0, self._width()), np.float32), [], [])
        with self._lock:
            found = self._get(ids, ["embeddings", "documents", "metadatas"])
        rows = [found[i] for i in ids]
        vectors = np.asarray([r[0] for r in rows], dtype=np.float32)
        metas = [r[2] or {} for r in rows]
        if field is None:
            texts = [r[1] for r in rows]
        else:
            texts = [self._text(i, m, field) for i, m in zip(ids, metas)]
        marks = [m.get(self.provenance_key) for m in metas]
        return LiveRows(ids, vectors, texts,
                        [p if isinstance(p, str) else None for p in marks])

    def _text(self, ident, meta, field):
        """The text of the record ``ident`` under the metadata key ``field``: ``None`` where
        it has none, refused where it holds another type (a number is not a text to encode)."""
        value = meta.get(field)
        if value is None or isinstance(value, str):
            return value
        raise StoreError(f"{self.address}: record {ident!r:.80} holds {type(value).__name__} "
                         f"{value!r:.40} under the metadata key {field!r}, not text; a record's "
                         "text must be a string: name the key that holds it with --text-field.")

    def mark_scan(self):
        """The records' provenance without their embeddings (:meth:`LiveStore.mark_scan
        <skalign._stores.live.LiveStore.mark_scan>`): ``get`` in pages of :data:`SCAN_PAGE`
        records of their metadata (and documents, where they are the texts) alone."""
        include = ["metadatas"] + (["documents"] if self.text_field is None else [])
        done = 0
        while True:
            with self._lock:
                got = self._collection.get(limit=SCAN_PAGE, offset=done, include=include)
            page = got["ids"]
            done += len(page)
            metas, docs = got.get("metadatas") or [None] * len(page), got.get("documents")
            yield scan_batch(
                page, [(meta or {}).get(self.provenance_key) for meta in metas],
                lambda j: docs[j] if self.text_field is None
                else self._text(page[j], metas[j] or {}, self.text_field))
            if len(page) < SCAN_PAGE:
                return

    def mark_texts(self, ids, text_field):
        """The texts of ``ids`` in ``text_field``, read without the embeddings."""
        field = self.text_field if text_field is None else text_field
        with self._lock:
            found = self._get(ids, ["documents"] if field is None else ["metadatas"])
        if field is None:
            return [found[i][1] for i in ids]
        return [self._text(i, found[i][2] or {}, field) for i in ids]

    def check_provenance_key(self):
        """Refuse a collection whose records hold the provenance key with values skalign did
        not write (read on the first :data:`KEY_SAMPLE` records; every write-back checks the
        records it writes again)."""
        if self._key_checked:
            return
        with self._lock:
            got = self._collection.get(limit=KEY_SAMPLE, include=["metadatas"])
        owned_key_or_refuse(self.address, self.provenance_key,
                            [(m or {}).get(self.provenance_key) for m in got["metadatas"] or []])
        self._key_checked = True

    def _check_write_ids(self, ids):
        return self._ids(ids)

    def _write_dim(self):
        return self._width()

    def _write_back(self, ids, V, marks, expected):
        step = min(WRITE_PAGE, int(self._reader.client.get_max_batch_size()))
        written = np.zeros(len(ids), dtype=bool)
        with self._lock:
            # Chroma's update skips an unknown id with a log line only: every id is read first,
            # with its provenance now (compare-and-set, and a user's own key refused)
            found = self._get(ids, ["metadatas"])
            now = [(found[i][2] or {}).get(self.provenance_key) for i in ids]
            owned_key_or_refuse(self.address, self.provenance_key, now)
            if expected is not None:
                written[:] = [a == b for a, b in zip(now, expected)]
            else:
                written[:] = True
            take = np.flatnonzero(written)
            for lo in range(0, len(take), step):
                part = take[lo:lo + step]
                self._collection.update(
                    ids=[ids[j] for j in part], embeddings=V[part],
                    metadatas=[{self.provenance_key: marks[j]} for j in part])
        return written

    def close(self):
        self._reader.release()
