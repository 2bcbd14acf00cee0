r"""A Milvus collection as a :class:`~skalign._stores.live.LiveStore`: searched with its own index
(``search`` on the vector field the address's ``?vector=`` picks, every query in one request),
read by primary key with ``query``, written back with ``upsert``.

The index's metric is the store's: ``COSINE`` → ``"cosine"``, ``IP`` → ``"ip"``, ``L2`` →
``"l2"``; a vector field without an index, or with another metric, is refused. Scores are those
of :func:`~skalign._stores.live.similarity`: Milvus's own for cosine and inner product, and for
``L2``, whose distance is the squared distance :math:`\lVert q - x \rVert_2^2`, its negation.

A row's text is the field or dynamic field ``text_field`` names (default: ``text``, else
``document``), which must hold a string; its provenance is the dynamic field (or a ``VARCHAR``
field of the schema) :data:`~skalign._stores.live.PROVENANCE_KEY`: a collection with neither
dynamic fields nor such a field is refused before anything is written.

Write-back: each entity's provenance and partition are read, then its vector and provenance
written with one partial ``upsert`` (``partial_update=True``, Milvus 2.6 on and Milvus Lite)
into its partition: an entity is one record, changed at once, so a reader sees it before or
after, and its other fields, which an application may be changing meanwhile, are not written.
Milvus offers no compare-and-set: a write-back another client makes between that read and the
``upsert`` is overwritten; live stores of the same database in this process take one lock
around each search, read and write-back.
"""

from __future__ import annotations

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
from .names import _edges, check_field, literal, shown_name
from .store import ID_QUERY, ORDERED, Reader, in_filter, query_page

__all__ = ["MilvusLive"]

#: the index metrics a live store ranks by, as :func:`~skalign._stores.live.similarity` names
METRICS = {"COSINE": "cosine", "IP": "ip", "L2": "l2"}
#: queries per ``search`` request
PAGE = 512
#: entities whose provenance is read before the first write-back
KEY_SAMPLE = 2000
#: entities of each ``query`` of :meth:`MilvusLive.mark_scan` (Milvus returns at most 16,384)
SCAN_PAGE = 16384
#: the same on Milvus Lite, whose every query reads the whole collection (a page of 16,384
#: entities of 10⁵ cost 4 s, all of them at once 12 s): fewer, larger pages
LITE_SCAN_PAGE = 65536
#: fields of a row's text, in order, when no ``text_field`` is given
TEXT_KEYS = ("text", "document")


def _key(ident, address):
    """A primary key as Milvus holds one: an integer or a string."""
    if isinstance(ident, (int, np.integer)) and not isinstance(ident, bool):
        return int(ident)
    if isinstance(ident, str):
        return ident
    raise StoreError(f"{address}: {ident!r:.80} is not a Milvus primary key (an integer or a "
                     "string).")


@_edges
class MilvusLive(LiveStore):
    """A Milvus collection (``milvus:PATH.db/COLLECTION`` or ``milvus://HOST:PORT/COLLECTION``)
    searched, read by primary key and written back in place.

    Parameters
    ----------
    address : Address
        The collection or alias; ``?vector=FIELD`` picks a vector field.
    column : str, default=None
        The vector field, where the address names none.
    text_field : str, default=None
        The field (or dynamic field) of each entity's text; ``None``: ``text``, else
        ``document``.
    provenance_key : str, default=None
        The dynamic field (or ``VARCHAR`` field) of each entity's provenance.

    Attributes
    ----------
    kind : str
        ``"milvus"``.
    dim : int
        The vector field's width.
    n_rows : int
        The entities when the store was opened.
    metric : {"cosine", "ip", "l2"}
        The index's metric.
    """

    kind = "milvus"
    in_row_provenance = True

    def __init__(self, address, column=None, text_field=None, provenance_key=None, **options):
        check_options(address, options)
        self.provenance_key = check_field(address, check_key_name(provenance_key, address),
                                          "provenance key")
        self._key_checked = False
        if column is not None and address.column is None:
            address = replace(address, column=column)
        elif column is not None and column != address.column:
            raise StoreError(f"{address}: column {column!r} disagrees with the address's "
                             f"?vector={address.column}; give one.")
        self.address, self.text_field = address, text_field
        self._reader = Reader(address)
        metric = METRICS.get(str(self._reader.metric or "").upper())
        if metric is None:
            raise StoreError(f"{address}: the vector field {self._reader.column!r} has "
                             + (f"a {self._reader.metric} index" if self._reader.metric
                                else "no index")
                             + "; live search needs an index with the metric COSINE, IP or L2.")
        self.metric, self.column = metric, self._reader.column
        self.dim, self.n_rows = self._reader.dim, self._reader.n_rows
        self._lock = database_lock(address)

    @property
    def _client(self):
        return self._reader.client

    def top_k(self, queries, k):
        k = check_k(k)
        Q = check_vectors(queries, self.dim, self.address)
        ids, scores = [], []
        with self._lock:
            for lo in range(0, len(Q), PAGE):
                got = self._client.search(
                    self.address.name, data=Q[lo:lo + PAGE].tolist(), limit=k,
                    anns_field=self.column, output_fields=[],
                    search_params={"metric_type": self._reader.metric})
                for hits in got:
                    ids.append([h["id"] for h in hits])
                    s = np.asarray([h["distance"] for h in hits], dtype=np.float64)
                    scores.append(-s if self.metric == "l2" else s)
        return ids, scores

    def ids(self):
        """Every entity's primary key, partition by partition in key order (the translation's
        order), read afresh."""
        with self._lock:
            self._reader._rows = None
            return [key for _, key in self._reader._ids()]

    def id_array(self):
        """Every entity's primary key in :meth:`ids`' order, read afresh a page at a time (the
        pages of :func:`~skalign._stores.milvus.store.primary_keys`, without keeping the
        reader's list), as one ``int64`` array for an ``INT64`` key; the list :meth:`ids`
        gives for a ``VARCHAR`` key (:func:`~skalign._stores.databases.ids.id_array`)."""
        from ..databases.ids import id_array
        from .store import ID_PAGE, LITE_ID_PAGE, key_pages

        reader = self._reader
        size = query_page(self.address, ID_PAGE, LITE_ID_PAGE)
        pages = (page for part in reader.partitions
                 for page in key_pages(self._client, self.address.name, reader.pk, part, size))
        with self._lock:
            reader._rows = None
            return id_array(pages, self.n_rows)

    def _entities(self, ids):
        """``[(partition, entity)]`` of ``ids`` in that order; an id Milvus does not hold
        raises."""
        keys = [_key(i, self.address) for i in ids]
        found = {}
        for part in self._reader.partitions:
            for lo in range(0, len(keys), ID_QUERY):
                for e in self._client.query(
                        self.address.name, filter=in_filter(self._reader.pk,
                                                            keys[lo:lo + ID_QUERY]),
                        output_fields=["*"], **({"partition_names": [part]} if part else {})):
                    found[e[self._reader.pk]] = (part, e)
        for i, key in zip(ids, keys):
            if key not in found:
                raise missing_id(self.address, i)
        return [found[key] for key in keys]

    def _text(self, ident, entity, field):
        if field is None:
            field = next((key for key in TEXT_KEYS if entity.get(key) is not None), None)
        value = None if field is None else entity.get(field)
        if value is None or isinstance(value, str):
            return value
        raise StoreError(f"{self.address}: entity {ident!r:.80} holds {type(value).__name__} "
                         f"{value!r:.40} in the field {shown_name(field)}, not text; an "
                         "entity's text must be a string: name the field that holds it with "
                         "--text-field.")

    def fetch(self, ids, text_field=None):
        ids = check_ids(ids, self.address)
        field = self.text_field if text_field is None else text_field
        if not ids:
            return LiveRows([], np.empty((0, self.dim), np.float32), [], [])
        with self._lock:
            got = self._entities(ids)
        vectors = np.asarray([e[self.column] for _, e in got], dtype=np.float32)
        marks = [e.get(self.provenance_key) for _, e in got]
        return LiveRows(ids, vectors, [self._text(i, e, field) for i, (_, e) in zip(ids, got)],
                        [m if isinstance(m, str) else None for m in marks])

    def mark_scan(self):
        """The entities' provenance without their vectors (:meth:`LiveStore.mark_scan
        <skalign._stores.live.LiveStore.mark_scan>`): per partition, ``query`` pages of
        :data:`SCAN_PAGE` (Milvus Lite: :data:`LITE_SCAN_PAGE`) entities, each the least
        primary keys after the last one read (:data:`~skalign._stores.milvus.store.ORDERED`),
        ``output_fields`` kept to the primary key, the provenance field and the text fields."""
        pk = self._reader.pk
        held = {f["name"] for f in self._reader.info["fields"]}
        wanted = [self.provenance_key, *([self.text_field] if self.text_field is not None
                                         else TEXT_KEYS)]
        fields = [pk] + [f for f in dict.fromkeys(wanted)
                         if f != pk and (f in held or self._reader.dynamic)]
        size = query_page(self.address, SCAN_PAGE, LITE_SCAN_PAGE)
        for part in self._reader.partitions:
            expr = ""
            while True:
                with self._lock:
                    page = sorted(self._client.query(
                        self.address.name, filter=expr, output_fields=fields, limit=size,
                        **ORDERED, **({"partition_names": [part]} if part else {})),
                        key=lambda e: e[pk])
                yield scan_batch([e[pk] for e in page],
                                 [e.get(self.provenance_key) for e in page],
                                 lambda j: self._text(page[j][pk], page[j], self.text_field))
                if len(page) < size:
                    break
                expr = f"{pk} > {literal(page[-1][pk])}"

    def _check_holder(self):
        """Refuse a collection that has nowhere to keep the provenance: no dynamic fields, and
        no ``VARCHAR`` field of that name."""
        fields = {f["name"]: f for f in self._reader.info["fields"]}
        field = fields.get(self.provenance_key)
        if field is None and self._reader.dynamic:
            return
        if field is not None and getattr(field["type"], "name", "") == "VARCHAR":
            return
        raise StoreError(
            f"{self.address}: the collection has "
            + ("a field " + shown_name(self.provenance_key) + " that is not VARCHAR"
               if field is not None else "no dynamic fields")
            + "; skalign keeps each entity's provenance in a dynamic field or a VARCHAR field "
            "of that name: enable dynamic fields, or choose a VARCHAR field with "
            "--provenance-key NAME.")

    def check_provenance_key(self):
        """Refuse a collection whose entities hold the provenance key with values skalign did
        not write (read on up to :data:`KEY_SAMPLE` entities that hold it; every write-back
        checks the entities it writes again)."""
        if self._key_checked:
            return
        self._check_holder()
        with self._lock:
            got = self._client.query(self.address.name,
                                     filter=f"{self.provenance_key} is not null",
                                     output_fields=[self.provenance_key], limit=KEY_SAMPLE)
        owned_key_or_refuse(self.address, self.provenance_key,
                            [e.get(self.provenance_key) for e in got])
        self._key_checked = True

    def _write_back(self, ids, V, marks, expected):
        written = np.zeros(len(ids), dtype=bool)
        key = self.provenance_key
        with self._lock:
            for lo in range(0, len(ids), ID_QUERY):
                got = self._entities(ids[lo:lo + ID_QUERY])
                now = [e.get(key) for _, e in got]
                owned_key_or_refuse(self.address, key, now)
                ok = [True] * len(got) if expected is None else \
                    [a == b for a, b in zip(now, expected[lo:lo + ID_QUERY])]
                written[lo:lo + len(got)] = ok
                by_part = {}
                for j, keep in enumerate(ok):
                    if keep:
                        part, e = got[j]
                        by_part.setdefault(part, []).append(
                            {self._reader.pk: e[self._reader.pk],
                             self.column: V[lo + j].tolist(), key: marks[lo + j]})
                for part, data in by_part.items():
                    self._client.upsert(self.address.name, data, partial_update=True,
                                        **({"partition_name": part} if part else {}))
        return written

    def close(self):
        """Nothing to release: the database's client is shared by the process (a Milvus Lite
        database admits one process), and closed when it exits."""
