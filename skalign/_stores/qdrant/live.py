r"""A Qdrant collection as a :class:`~skalign._stores.live.LiveStore`: searched with Qdrant's own
index (``query_batch_points``: every query in one request, on the named vector the address's
``?vector=`` picks), read by id with ``retrieve``, written back with ``upsert``.

The collection's distance is the store's metric: ``Cosine`` → ``"cosine"``, ``Dot`` → ``"ip"``,
``Euclid`` → ``"l2"``; a ``Manhattan`` or multi-vector field is refused. Scores are those of
:func:`~skalign._stores.live.similarity`: Qdrant's own for cosine and dot, and for Euclid,
whose score is the distance :math:`\lVert q - x \rVert_2`, :math:`-\lVert q - x \rVert_2^2`. A
cosine field's vectors are read as directions, as Qdrant keeps them.

A row's text is the payload key ``text_field`` names (default: ``text``, else ``document``),
which must hold a string (a point whose value there is of another type, an object or a number,
is refused by its id, the key and the type; a point without the key has no text); its
provenance is the payload key :data:`~skalign._stores.live.PROVENANCE_KEY`.

Write-back: one ``batch_update_points`` request per :data:`WRITE_PAGE` points, the vectors
(``update_vectors``: only the named vector the store reads, the point's other vectors and its
payload kept) and then the provenance key (``set_payload``, one per distinct mark: the point's
other keys kept). A reader between the two
sees the new vector with the old provenance, never an old vector marked encoded. The
compare-and-set re-reads the rows' provenance under :func:`~skalign._stores.live_input.
database_lock` before it writes (Qdrant has no conditional write of both). A store opened on a
named vector that ``--into`` added (:mod:`.fields`) reads a point without a value there as a
zero vector without provenance; Qdrant never returns such a point from a search of it.

Local mode: qdrant-client's local collection replaces a point's payload and vectors in
successive Python statements, with no lock of its own, so another thread of the process reading
the point between them sees it torn (only this process can read the folder: the local mode locks
it). Every live store of the same folder in the process therefore takes one lock around each
search, read and write-back: readers through skalign's live stores never see a torn point; code
that reads the folder through qdrant-client directly, in another thread, still can.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

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
from .store import Reader

__all__ = ["QdrantLive"]

#: Queries per ``query_batch_points`` request, points per ``retrieve`` and ``upsert``
PAGE = 512
#: points per ``batch_update_points`` of a write-back (no page size was faster: the developers'
#: stores study, "Write-back pages on Qdrant and Chroma")
WRITE_PAGE = 512

#: points a ``scroll`` of :meth:`QdrantLive.mark_scan` reads at a time (payloads of two or
#: three keys; the local mode sorts every id of the collection for each page: few pages)
SCAN_PAGE = 65536
#: points whose provenance key is read before the first write-back
KEY_SAMPLE = 2000

#: Payload keys of a row's text, in order, when no ``text_field`` is given
TEXT_KEYS = ("text", "document")

def _point_id(ident, address):
    """The key Qdrant returns for ``ident``: an unsigned integer, or a UUID's canonical text."""
    if isinstance(ident, int) and ident >= 0:
        return ident
    if isinstance(ident, (str, uuid.UUID)):
        try:
            return str(uuid.UUID(str(ident)))
        except ValueError:
            pass
    raise StoreError(f"{address}: {ident!r:.80} is not a Qdrant point id (an unsigned integer "
                     "or a UUID).")


@_edges
class QdrantLive(LiveStore):
    """A Qdrant collection (``qdrant:DIR/COLLECTION`` or ``qdrant+http://HOST:PORT/COLLECTION``)
    searched, read by id and written back in place.

    Parameters
    ----------
    address : Address
        The collection or alias; ``?vector=NAME`` picks a named vector.
    column : str, default=None
        The named vector, where the address names none.
    text_field : str, default=None
        The payload key of each point's text; ``None``: ``text``, else ``document``.

    Attributes
    ----------
    kind : str
        ``"qdrant"``.
    dim : int
        The vector's width.
    n_rows : int
        The points when the store was opened.
    metric : {"cosine", "ip", "l2"}
        The vector's distance.
    """

    kind = "qdrant"
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, provenance_key=None, **options):
        from qdrant_client import models

        check_options(address, options)
        self.provenance_key = check_key_name(provenance_key, address)
        self._key_checked = False
        if column is not None and address.column is None:
            address = replace(address, column=column)
        elif column is not None and column != address.column:
            raise StoreError(f"{address}: column {column!r} disagrees with the address's "
                             f"?vector={address.column}; give one.")
        self.address, self.text_field, self._models = address, text_field, models
        self._reader = Reader(address)
        params = self._reader.params
        if getattr(params, "multivector_config", None) is not None:
            raise StoreError(f"{address}: the vector is a multi-vector; live search needs one "
                             "vector per point.")
        metric = {models.Distance.COSINE: "cosine", models.Distance.DOT: "ip",
                  models.Distance.EUCLID: "l2"}.get(params.distance)
        if metric is None:
            raise StoreError(f"{address}: the vector's distance is {params.distance}; live "
                             "search needs Cosine, Dot or Euclid.")
        self.metric, self.vector = metric, self._reader.vector
        self.column = self.vector
        self.dim, self.n_rows = self._reader.dim, self._reader.n_rows
        self._lock = database_lock(address)

    @property
    def _client(self):
        return self._reader.client

    def top_k(self, queries, k):
        k = check_k(k)
        Q = check_vectors(queries, self.dim, self.address)
        m, ids, scores = self._models, [], []
        with self._lock:
            for lo in range(0, len(Q), PAGE):
                got = self._client.query_batch_points(self.address.name, requests=[
                    m.QueryRequest(query=q.tolist(), using=self.vector, limit=k,
                                   with_payload=False, with_vector=False)
                    for q in Q[lo:lo + PAGE]])
                for res in got:
                    ids.append([p.id for p in res.points])
                    s = np.asarray([p.score for p in res.points], dtype=np.float64)
                    scores.append(-s * s if self.metric == "l2" else s)
        return ids, scores

    def ids(self):
        """Every point's id in id order (Qdrant's ``scroll`` order), scrolled afresh."""
        with self._lock:
            self._reader._all_ids = None
            return [i for page in self._reader.id_pages() for i in page]

    def id_array(self):
        """Every point's id in :meth:`ids`' order, scrolled afresh a page of
        :data:`~skalign._stores.qdrant.store.ID_PAGE` ids at a time (as the reader scrolls
        them, without keeping its list), as one ``int64`` array where each is an integer that
        fits it; the list :meth:`ids` gives where one is a UUID or beyond ``int64``
        (:func:`~skalign._stores.databases.ids.id_array`)."""
        from ..databases.ids import id_array

        with self._lock:
            self._reader._all_ids = None
            return id_array(self._reader.id_pages(), self.n_rows)

    def _retrieve(self, keys, vectors):
        """``{id: point}`` of ``keys``; an id Qdrant does not hold raises."""
        found = {}
        for lo in range(0, len(keys), PAGE):
            for p in self._client.retrieve(self.address.name, ids=keys[lo:lo + PAGE],
                                           with_payload=True, with_vectors=vectors):
                found[p.id] = p
        return found

    def _points(self, ids, vectors):
        """The points of ``ids`` in that order (their keys checked, each present)."""
        keys = [_point_id(i, self.address) for i in ids]
        found = self._retrieve(keys, vectors)
        for i, key in zip(ids, keys):
            if key not in found:
                raise missing_id(self.address, i)
        return [found[key] for key in keys]

    def _text(self, ident, payload, field):
        """The text of the point ``ident``: the payload key ``field`` (``None``: the first of
        :data:`TEXT_KEYS` it holds); ``None`` where it has none, refused where the value is of
        another type (an object or a number is not a text to encode)."""
        if field is None:
            field = next((key for key in TEXT_KEYS if payload.get(key) is not None), None)
        value = None if field is None else payload.get(field)
        if value is None or isinstance(value, str):
            return value
        raise StoreError(f"{self.address}: point {ident!r:.80} holds {type(value).__name__} "
                         f"{value!r:.40} under the payload key {field!r}, not text; a point's "
                         "text must be a string: name the key that holds it with --text-field.")

    def fetch(self, ids, text_field=None):
        ids = check_ids(ids, self.address)
        field = self.text_field if text_field is None else text_field
        if not ids:
            return LiveRows([], np.empty((0, self.dim), np.float32), [], [])
        with self._lock:
            points = self._points(ids, [self.vector] if self.vector else True)
        vectors = self._vectors(points)
        payloads = [p.payload or {} for p in points]
        marks = [pl.get(self.provenance_key) for pl in payloads]
        return LiveRows(ids, vectors, [self._text(i, pl, field) for i, pl in zip(ids, payloads)],
                        [p if isinstance(p, str) else None for p in marks])

    def mark_scan(self):
        """The points' provenance without their vectors (:meth:`LiveStore.mark_scan
        <skalign._stores.live.LiveStore.mark_scan>`): a ``scroll`` of :data:`SCAN_PAGE`
        points a request, ``with_vectors=False`` and the payload kept to the provenance key and
        the text keys."""
        keys = [self.provenance_key, *([self.text_field] if self.text_field is not None
                                       else TEXT_KEYS)]
        offset = None
        while True:
            with self._lock:
                points, offset = self._client.scroll(
                    self.address.name, limit=SCAN_PAGE, offset=offset, with_payload=keys,
                    with_vectors=False)
            payloads = [p.payload or {} for p in points]
            yield scan_batch([p.id for p in points],
                             [pl.get(self.provenance_key) for pl in payloads],
                             lambda j: self._text(points[j].id, payloads[j], self.text_field))
            if offset is None:
                return

    def mark_texts(self, ids, text_field):
        """The texts of ``ids`` in ``text_field``, read with their payloads alone."""
        field = self.text_field if text_field is None else text_field
        with self._lock:
            points = self._points(ids, False)
        return [self._text(i, p.payload or {}, field) for i, p in zip(ids, points)]

    def _vectors(self, points):
        """The vectors of ``points`` (directions where cosine); a zero row for a point that
        holds no value under the named vector (one ``--into`` added and has not written yet:
        its provenance is ``None`` too)."""
        if not self.vector:
            return self._reader.vectors_of(points)
        held = [k for k, p in enumerate(points)
                if isinstance(p.vector, dict) and p.vector.get(self.vector) is not None]
        if len(held) == len(points):
            return self._reader.vectors_of(points)
        out = np.zeros((len(points), self.dim), dtype=np.float32)
        if held:
            out[held] = self._reader.vectors_of([points[k] for k in held])
        return out

    def check_provenance_key(self):
        """Refuse a collection whose points hold the provenance key with values skalign did not
        write (read on up to :data:`KEY_SAMPLE` points that hold the key; every write-back
        checks the points it writes again)."""
        if self._key_checked:
            return
        m = self._models
        holds = m.Filter(must_not=[m.IsEmptyCondition(is_empty=m.PayloadField(
            key=self.provenance_key))])
        with self._lock:
            points, _ = self._client.scroll(self.address.name, scroll_filter=holds,
                                            limit=KEY_SAMPLE, with_payload=True,
                                            with_vectors=False)
        owned_key_or_refuse(self.address, self.provenance_key,
                            [(p.payload or {}).get(self.provenance_key) for p in points])
        self._key_checked = True

    def _write_back(self, ids, V, marks, expected):
        m = self._models
        written = np.zeros(len(ids), dtype=bool)
        with self._lock:
            for lo in range(0, len(ids), WRITE_PAGE):
                points = self._points(ids[lo:lo + WRITE_PAGE], False)
                now = [(p.payload or {}).get(self.provenance_key) for p in points]
                owned_key_or_refuse(self.address, self.provenance_key, now)
                ok = [True] * len(points) if expected is None else \
                    [a == b for a, b in zip(now, expected[lo:lo + WRITE_PAGE])]
                written[lo:lo + len(points)] = ok
                take = [j for j, keep in enumerate(ok) if keep]
                if not take:
                    continue
                # the vector first, then the mark: a reader in between sees the new vector
                # marked as before (never an old vector marked encoded), and every other
                # payload key, which an application may be changing meanwhile, is not touched
                ops = [m.UpdateVectorsOperation(update_vectors=m.UpdateVectors(points=[
                    m.PointVectors(id=points[j].id, vector=self._reader.as_written(
                        V[lo + j].tolist())) for j in take]))]
                # one operation per mark (a retranslation's rows share theirs)
                by_mark = {}
                for j in take:
                    by_mark.setdefault(marks[lo + j], []).append(points[j].id)
                ops += [m.SetPayloadOperation(set_payload=m.SetPayload(
                    payload={self.provenance_key: mark}, points=held))
                    for mark, held in by_mark.items()]
                self._client.batch_update_points(self.address.name, update_operations=ops,
                                                 wait=True)
        return written

    def close(self):
        """Nothing to release: the folder's or server's client is shared by the process (a
        local folder admits one client), and closed when it exits."""
