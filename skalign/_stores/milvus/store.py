"""Milvus collections: ``milvus:PATH.db/COLLECTION`` (Milvus Lite) and
``milvus://HOST:PORT/COLLECTION`` (a server; ``milvus+https://`` over TLS), ``?vector=FIELD``
for one of several vector fields.

Rows are entities, partition by partition (the order of ``list_partitions``), in primary-key
order inside each: the primary key, the partition, every scalar field, every other vector field
and every dynamic field (copied as they are) and the translated vector. The output is written
to a shadow collection ``OUTPUT_skalign_<job>`` made from the source's schema with the vector
field at its new width (the same fields, nullability, defaults, partition key, dynamic fields,
description), the source's properties, its partitions, and every index the source has rebuilt
with the same type, metric and build parameters (Milvus Lite reports none: its indexes are
rebuilt with the same type and metric). Batches are inserted in order, each partition's rows
into their partition; the batch a crashed run had begun is upserted (idempotent). It is
published as the alias ``OUTPUT``. With ``--replace`` an ``OUTPUT`` that is already an alias is
switched (``alter_alias``, atomic) and its old target kept under the alias
``OUTPUT_skalign_backup``; a real collection ``OUTPUT`` (e.g. the source itself) is first renamed
to ``OUTPUT_skalign_backup_<job>`` (no copy), then the alias ``OUTPUT`` made (the name resolves
to nothing for the instant between the two).

The provenance stamp is JSON text under the key ``skalign`` of the collection's properties; it
travels with the collection behind the aliases. The translation's stamp is written in the
shadow's properties before the alias switch that publishes it, marked
:data:`~skalign._stores.journal.PUBLISHING` until the steps after it are done, so that the same
command run again after a kill at any instant finishes them
(:func:`skalign._stores.milvus.recovery.recover_publish`). A backup
(``OUTPUT_skalign_backup_<job>``) is never dropped as a leftover.

Reading never creates anything: a path that is not a Milvus Lite database (a ``.db`` folder
with its ``LOCK`` and ``collections``) is refused before a client is opened (a client creates
one anywhere). Errors of pymilvus and Milvus Lite are raised as one-line
:class:`~skalign.exceptions.StoreError` exceptions naming the address with its password hidden.
"""

from __future__ import annotations

import numpy as np

from ...exceptions import StoreError, StoreNotFoundError
from ..base import StoreReader, StoreWriter
from ..databases.common import (
    backup_name,
    lock_for,
    resume_point,
    shadow_name,
    shadow_prefix,
)
from ..journal import final_stamp, kill_point, pending_stamp
from .names import (
    FOLDER,
    STAMP_KEY,
    _edge,
    _edges,
    aliases,
    check_field,
    check_name,
    client,
    listed,
    literal,
    load,
    parse_stamp,
    properties,
    set_stamp,
    shown_name,
)

__all__ = ["Reader", "Writer", "read_stamp", "restore", "write_stamp"]

#: the vector type skalign translates, and every type of vector field
FLOAT_VECTOR = "FLOAT_VECTOR"
#: keys of ``describe_index`` that describe the index's state, not its build parameters
INDEX_STATE = ("field_name", "index_name", "total_rows", "indexed_rows", "pending_index_rows",
               "state", "index_type", "metric_type")
#: primary keys per ``query`` by id
ID_QUERY = 1024
#: entities per page where only the primary keys are read (a Milvus server returns at most
#: 16,384 entities a query)
ID_PAGE = 16384
#: the same on Milvus Lite, whose every query reads the whole collection: fewer, larger pages
LITE_ID_PAGE = 262144
#: the query parameter that makes a page hold the least primary keys the filter admits, in key
#: order (the one pymilvus's ``query_iterator`` sends); without it Milvus Lite returns the
#: first entities in its storage order, where a row written since sits after the others
ORDERED = {"iterator": "True"}


def _type_name(field):
    t = field.get("type")
    return getattr(t, "name", str(t))


def count(conn, name, partition=None):
    """The entities of collection ``name`` (of one partition)."""
    got = conn.query(name, filter="", output_fields=["count(*)"],
                     **({"partition_names": [partition]} if partition else {}))
    return int(got[0]["count(*)"])


def in_filter(pk, ids):
    """The filter expression of the entities whose primary key ``pk`` is one of ``ids``."""
    return f"{pk} in [{', '.join(literal(i) for i in ids)}]"


def query_page(address, server, lite):
    """Entities per ``query`` page of the database of ``address``: ``lite`` on Milvus Lite (a
    folder), ``server`` on a Milvus server."""
    return lite if address.path is not None else server


def key_pages(conn, name, pk, partition=None, page_size=ID_PAGE):
    """The primary keys of collection ``name`` (of one partition), in order, a page at a time:
    pages of ``page_size`` keys after the last one read, each the least keys left
    (:data:`ORDERED`; as pymilvus's ``query_iterator`` pages, without the timestamp it asks of
    the server first, which Milvus Lite does not implement)."""
    expr = ""
    while True:
        page = sorted(e[pk] for e in conn.query(
            name, filter=expr, output_fields=[pk], limit=page_size, **ORDERED,
            **({"partition_names": [partition]} if partition else {})))
        yield page
        if len(page) < page_size:
            return
        expr = f"{pk} > {literal(page[-1])}"


def primary_keys(conn, name, pk, partition=None, page_size=ID_PAGE):
    """Every primary key of collection ``name`` (of one partition), in order: the pages of
    :func:`key_pages` as one list."""
    keys = []
    for page in key_pages(conn, name, pk, partition, page_size):
        keys += page
    return keys


def index_of(conn, name, field):
    """``{"index_type", "metric_type", "params"}`` of the index on ``field`` (``None``: none)."""
    for index in conn.list_indexes(name, field_name=field) or []:
        got = conn.describe_index(name, index_name=index) or {}
        if got.get("field_name", field) == field:
            return {"index_name": index, "index_type": got.get("index_type"),
                    "metric_type": got.get("metric_type"),
                    "params": {k: v for k, v in got.items() if k not in INDEX_STATE}}
    return None


def _not_found(address, conn):
    names = list(conn.list_collections()) + list(aliases(conn))
    return StoreNotFoundError(f"{address}: no collection {shown_name(address.name)} "
                              f"(collections: {listed(names)}); check the name.")


@_edges
class Reader(StoreReader):
    """The entities of a Milvus collection (see the module's docstring)."""

    has_rows = True
    kind = "milvus"
    ids_origin = "milvus ids"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        column = address.column or column
        if column is not None:
            check_field(address, column)
        self.address, self.client = address, client(address)
        if not self.client.has_collection(address.name):
            raise _not_found(address, self.client)
        load(self.client, address.name)
        self.info = self.client.describe_collection(address.name)
        if self.info.get("functions"):
            raise StoreError(f"{address}: the collection has functions (e.g. BM25) whose "
                             "output fields Milvus computes; skalign cannot copy it.")
        fields = self.info["fields"]
        self.pk = next(f["name"] for f in fields if f.get("is_primary"))
        vectors = [f for f in fields if _type_name(f) == FLOAT_VECTOR]
        if column is None:
            if len(vectors) != 1:
                raise StoreError(f"{address}: the collection has "
                                 f"{len(vectors) or 'no'} float vector fields "
                                 f"({', '.join(f['name'] for f in vectors) or 'none'}); "
                                 "choose one with ?vector=FIELD.")
            field = vectors[0]
        else:
            field = next((f for f in vectors if f["name"] == column), None)
            if field is None:
                raise StoreError(f"{address}: no float vector field {shown_name(column)} "
                                 f"(float vector fields: "
                                 f"{', '.join(f['name'] for f in vectors) or 'none'}); fix "
                                 "?vector=FIELD.")
        self.column = field["name"]
        self.dim = int(field["params"]["dim"])
        self.index = index_of(self.client, address.name, self.column)
        self.metric = (self.index or {}).get("metric_type")
        self.dynamic = bool(self.info.get("enable_dynamic_field"))
        self.schema_fields = {f["name"] for f in fields}
        self.partition_key = any(f.get("is_partition_key") for f in fields)
        self.partitions = [None] if self.partition_key else \
            list(self.client.list_partitions(address.name))
        self.n_rows = count(self.client, address.name)
        self._rows = None

    def _ids(self):
        """``[(partition, primary key)]`` of every entity, in the reader's order (read once)."""
        if self._rows is None:
            rows = []
            for part in self.partitions:
                rows += [(part, k) for k in primary_keys(
                    self.client, self.address.name, self.pk, part,
                    query_page(self.address, ID_PAGE, LITE_ID_PAGE))]
            self._rows = rows
        return self._rows

    def _get(self, name, pairs, dim=None, conn=None):
        """The entities of ``pairs`` (``(partition, key)``) of collection ``name`` (its vectors
        ``dim`` wide: the source's by default; of the database of ``conn``: the source's by
        default), in that order, as ``(vectors, rows)``; ``None`` in ``rows`` where one is
        missing."""
        conn = self.client if conn is None else conn
        found = {}
        by_part = {}
        for part, key in pairs:
            by_part.setdefault(part, []).append(key)
        for part, keys in by_part.items():
            for lo in range(0, len(keys), ID_QUERY):
                got = conn.query(name, filter=in_filter(self.pk, keys[lo:lo + ID_QUERY]),
                                 output_fields=["*"],
                                 **({"partition_names": [part]} if part else {}))
                for e in got:
                    found[(part, e[self.pk])] = e
        vectors = np.zeros((len(pairs), dim or self.dim), np.float32)
        rows = []
        for k, pair in enumerate(pairs):
            e = found.get(pair)
            if e is None:
                rows.append(None)
                continue
            vectors[k] = np.asarray(e[self.column], dtype=np.float32)
            rows.append(self._row(pair[0], e))
        return vectors, rows

    def _row(self, part, entity):
        from ..live import without_marks

        fields = {k: v for k, v in entity.items() if k not in (self.column, self.pk)}
        dynamic = {k: v for k, v in fields.items() if k not in self.schema_fields}
        kept = without_marks(dynamic)  # the source's marks are not the output's
        fields = {k: v for k, v in fields.items() if k in self.schema_fields or k in kept}
        return {"id": entity[self.pk], "partition": part, "fields": fields}

    def batches(self, batch_size, start=0):
        rows = self._ids()
        for lo in range(start, len(rows), batch_size):
            pairs = rows[lo:lo + batch_size]
            vectors, got = self._get(self.address.name, pairs)
            if any(r is None for r in got):
                raise StoreError(f"{self.address}: entities were deleted from the collection "
                                 "while it was read; translate it again.")
            yield vectors, got, None

    def row(self, rows, k):
        return rows[k]

    def batch_ids(self, rows, n):
        return [r["id"] for r in rows]

    def take(self, positions, batch_size):
        rows = self._ids()
        vectors, got = self._get(self.address.name, [rows[p] for p in positions])
        return list(vectors), got

    def read_all(self):
        parts = [v for v, _, _ in self.batches(4096)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


@_edges
class Writer(StoreWriter):
    """The shadow collection of a translation into Milvus (see the module's docstring)."""

    pipelined = False

    def __init__(self, address, job):
        check_name(address)
        if address.path is not None:
            FOLDER.check_output(address)
        self.address, self.job, self.display = address, job, address.display
        self.src = job.reader
        self._resumed_batch = False

    @property
    def client(self):
        """The database's client, opened when first needed (a Lite folder's when the
        translation starts: :meth:`lock` made the folder)."""
        return client(self.address, create=True)

    def lock(self):
        return FOLDER.writer_lock(self.address)

    def exists(self):
        if self.address.path is not None and not FOLDER.is_store(self.address.path):
            return False  # no database yet: no client, which would make one
        return bool(self.client.has_collection(self.address.name))

    def _drop_leftovers(self, keep):
        """Drop the shadows of other jobs; never an aliased collection nor a backup copy
        (``OUTPUT_skalign_backup_<job>``: it may be the only copy of a replaced one)."""
        live = set(aliases(self.client).values())
        prefix, copies = shadow_prefix(self.address.name), backup_name(self.address.name)
        for c in self.client.list_collections():
            if c.startswith(prefix) and c != keep and c not in live \
                    and not c.startswith(copies):
                self.client.drop_collection(c)

    def begin(self, fp):
        # the job's shadow, unless an alias names that collection: the output the same job
        # published before (``--replace --force``), or its backup, is not a leftover to resume
        live = set(aliases(self.client).values())
        self.shadow = next(s for s in (shadow_name(self.address.name, fp[at:])
                                       for at in (0, 12, 20)) if s not in live)
        self._drop_leftovers(self.shadow)
        if self.client.has_collection(self.shadow):
            load(self.client, self.shadow)
            done = count(self.client, self.shadow)
            start = resume_point(done, self.src.n_rows, self.job.batch_size)
            self._resumed_batch = done > start
            return start
        self._create()
        return 0

    def _create(self):
        from pymilvus import CollectionSchema

        src, conn = self.src, self.client
        info = dict(src.info)
        info["fields"] = [dict(f, params={**f.get("params", {}), "dim": self.job.d_out})
                          if f["name"] == src.column else f for f in info["fields"]]
        schema = CollectionSchema.construct_from_dict(info)
        index_params = conn.prepare_index_params()
        for name in src.client.list_indexes(src.address.name) or []:  # the source's database
            got = src.client.describe_index(src.address.name, index_name=name) or {}
            index_params.add_index(
                got["field_name"], index_type=got.get("index_type") or "", index_name=name,
                **({"metric_type": got["metric_type"]} if got.get("metric_type") else {}),
                **{k: v for k, v in got.items() if k not in INDEX_STATE})
        props = {k: v for k, v in (info.get("properties") or {}).items() if k != STAMP_KEY}
        conn.create_collection(self.shadow, schema=schema,
                               index_params=index_params if len(index_params) else None,
                               properties=props or None,
                               consistency_level=info.get("consistency_level_name", "Strong"))
        for part in src.partitions:
            if part is not None and not conn.has_partition(self.shadow, part):
                conn.create_partition(self.shadow, part)
        conn.load_collection(self.shadow)

    def write_unit(self, out, rows, shard, start):
        src = self.src
        by_part = {}
        for k, r in enumerate(rows):
            by_part.setdefault(r["partition"], []).append(
                {**r["fields"], src.pk: r["id"], src.column: out[k].tolist()})
        write = self.client.upsert if self._resumed_batch else self.client.insert
        self._resumed_batch = False
        for part, data in by_part.items():
            write(self.shadow, data, **({"partition_name": part} if part else {}))

    def finish(self):
        return count(self.client, self.shadow)

    def fetch(self, positions, rows):
        pairs = [(r["partition"], r["id"]) for r in rows]
        vectors, got = self.src._get(self.shadow, pairs, self.job.d_out, self.client)
        missing = [p[1] for p, g in zip(pairs, got) if g is None]
        if missing:
            raise StoreError(f"{self.display}: verification failed: entity {missing[0]!r:.80} "
                             "is missing from the translation (or from its partition); it was "
                             "not published.")
        return vectors, got

    def publish(self, replace, stamp=None):
        """The stamp first (the shadow's, marked :data:`PUBLISHING`), then the backup (an
        alias switched, or a real collection renamed), then the output's alias."""
        conn, name = self.client, self.address.name
        bname = backup_name(name)
        al = aliases(conn)
        exists = name in al or conn.has_collection(name)
        if exists and not replace:
            raise StoreError(f"{self.display}: exists; pass --replace.")
        old = (al[name] if name in al else f"{bname}_{self.shadow.rsplit('_', 1)[1]}") \
            if exists else None
        if stamp is not None:
            set_stamp(conn, self.shadow, pending_stamp(stamp, exists))
        self.publishing = True
        kill_point("publishing")
        backup, drop = None, []
        if exists:
            if name not in al:  # a real collection: renamed, so that the name can be an alias
                conn.rename_collection(name, old)
                kill_point("backed-up")
            if bname in al:
                if al[bname] not in (old, self.shadow):
                    drop.append(al[bname])
                conn.alter_alias(old, bname)
            else:
                conn.create_alias(old, bname)
            backup = self.address.with_name(bname)
        if name in al:
            conn.alter_alias(self.shadow, name)
        else:
            conn.create_alias(self.shadow, name)
        for c in drop:  # the backup of an earlier --replace: one backup is kept
            conn.drop_collection(c)
        return backup

    def end_publish(self, stamp):
        """The output's stamp without its :data:`PUBLISHING` mark."""
        set_stamp(self.client, self.shadow, final_stamp(stamp))

    def discard(self):
        if getattr(self, "shadow", None) and self.client.has_collection(self.shadow) \
                and self.shadow not in aliases(self.client).values():
            self.client.drop_collection(self.shadow)


@_edge
def restore(address):
    """Swap the aliases ``OUTPUT`` and ``OUTPUT_skalign_backup``."""
    conn = client(address)
    name, bname = address.name, backup_name(address.name)
    with lock_for(address, address.path):
        al = aliases(conn)
        if bname not in al or name not in al:
            raise StoreNotFoundError(
                f"{address}: no backup alias {bname[:80]} to restore; a backup is kept only by "
                "`skalign translate --replace`.")
        a, b = al[name], al[bname]
        conn.alter_alias(b, name)
        conn.alter_alias(a, bname)
    return address.with_name(bname)


@_edge
def read_stamp(address):
    """The provenance stamp of the collection (or alias) at ``address``, or ``None`` (no such
    collection, no stamp)."""
    if address.path is not None and not FOLDER.is_store(address.path):
        return None  # no database: nothing opened, nothing created
    conn = client(address)
    if not conn.has_collection(address.name):
        return None
    return parse_stamp(properties(conn, address.name).get(STAMP_KEY))


@_edge
def write_stamp(address, stamp):
    """Record ``stamp`` in the properties of the collection (or alias) at ``address``."""
    conn = client(address)
    if not conn.has_collection(address.name):
        raise StoreNotFoundError(f"{address}: no collection {shown_name(address.name)} to "
                                 "stamp.")
    set_stamp(conn, address.name, stamp)
