"""Qdrant collections: ``qdrant:DIR/COLLECTION`` (local mode) and
``qdrant+http://HOST:PORT/COLLECTION``, ``?vector=NAME`` for a named vector.

Rows are points in id order (``scroll``): the point id, the payload, every other named vector
(copied as it is) and the translated vector. The output is written to a shadow collection
``OUTPUT_skalign_<job>`` with the source's vector parameters at the new size (same distance,
HNSW and quantization settings), in whole batches (``upsert``, idempotent: a resumed run writes
the interrupted batch again), and published as the alias ``OUTPUT`` — one atomic alias update.
With ``--replace`` an ``OUTPUT`` that is already an alias is switched atomically and its old
target kept under the alias ``OUTPUT_skalign_backup``; a real collection ``OUTPUT`` (e.g. the
source itself) is first copied to ``OUTPUT_skalign_backup_<job>``, then dropped, then ``OUTPUT``
made an alias of the translation (the name resolves to nothing for the instant between the
last two steps).

The provenance stamp (:mod:`.provenance`) of a local folder's collection is a sidecar file
``DIR/.skalign-stamps/<sha256(NAME)[:16]>.json`` (mode 0600), keyed by the name the user sees
(an alias) and bound to the collection that name resolved to when it was written: a name that
resolves to another collection since (a collection dropped and made again outside skalign) has
no stamp. ``--replace`` moves the output's stamp to the backup's name and ``restore`` swaps the
two, with the aliases. On a server the stamp is JSON text under the key ``skalign`` of the
collection's metadata (Qdrant 1.16 on; older servers and clients keep none), and travels with
the collection behind the aliases.

The translation's stamp is written before the alias switch that publishes it: a local
folder's sidecar of ``OUTPUT`` bound to the shadow (valid once ``OUTPUT`` resolves to it; the
replaced output's stamp written first for the backup's name, bound to its collection), a
server's in the shadow's metadata; it is marked :data:`~skalign._stores.journal.PUBLISHING`
until the steps after the publish are done, so that the same command run again after a kill
at any instant finishes them (:func:`skalign._stores.qdrant.recovery.recover_publish`). A
backup copy (``OUTPUT_skalign_backup_<job>``) is never dropped as a leftover: it may be the
only copy of a replaced collection.

Reading never creates anything: a folder without Qdrant's ``meta.json`` or a collection it does
not list is refused before a client is opened (a client creates ``meta.json`` and ``.lock``). An
output's new folder is created when its translation starts (:meth:`Writer.lock`). Errors of
qdrant-client are raised as one-line :class:`~skalign.exceptions.StoreError` exceptions naming
the address with its password (used as the API key) hidden.
"""

from __future__ import annotations

import atexit
import inspect
import json

import numpy as np

from ...exceptions import StoreError, StoreLockedError, StoreNotFoundError
from ..base import StoreReader, StoreWriter
from ..databases.common import (
    backup_name,
    lock_for,
    release_freed_memory,
    resume_point,
    shadow_name,
    shadow_prefix,
)
from ..databases.ids import id_array, id_list, ids_at
from ..journal import final_stamp, kill_point, pending_stamp
from . import load as _qdrant_load
from .names import (
    _EDGE,
    FOLDER,
    STAMP_FOLDER,
    STAMP_KEY,
    _catalogue,
    _check_store,
    _edge,
    _edges,
    _is_store,
    _move_sidecar,
    _not_found,
    _one_line,
    _write_sidecar,
    check_name,
    sidecar_stamp,
)
from .vectors import kept_vectors, unit_rows

__all__ = ["STAMP_FOLDER", "STAMP_KEY", "Reader", "Writer", "read_stamp",
           "restore", "write_stamp"]

_CLIENTS = {}

def _client_key(address):
    """The cache key of a database's client: its folder or server (and credentials)."""
    return (address.identity[:-1], address.user, address.password)


def _sidecar_stamp(address, name, target=None):
    """The stamp of ``name``'s sidecar where it was written for the collection ``name``
    resolves to now (``target``: where it is known), else ``None``."""
    return sidecar_stamp(address, name, _target(address, name) if target is None else target)


def _target(address, name):
    """The collection ``name`` resolves to in a local folder (an alias's target, a
    collection's own name), or ``None``: from the open client, else ``meta.json``."""
    client = _CLIENTS.get(_client_key(address))
    if client is not None:
        aliases = _aliases(client)
        if name in aliases:
            return aliases[name]
        return name if client.collection_exists(name) else None
    catalogue = _catalogue(address.path) if _is_store(address.path) else None
    if catalogue is None:
        return None
    collections, aliases = catalogue
    return aliases.get(name) or (name if name in collections else None)

#: Local mode: give the C heap's free pages back after each batch. The local mode grows the
#: output's vector array by doubling it (a copy) and pickles every point; without the trim the
#: pages those free stay resident and add up to the peak (50,000 points, 384 -> 768:
#: ``5ae3bf6:benchmarks/qdrant_local_memory.py``).
TRIM_EACH_BATCH = True

#: Local mode: the attributes of qdrant-client's in-memory collection that hold Python objects
#: per point (``qdrant_client.local.local_collection.LocalCollection``), rebuilt after the open
#: by :func:`_compact_local`
PER_POINT_ATTRIBUTES = ("payload", "ids", "ids_inv", "sparse_vectors", "sparse_vectors_idf",
                        "multivectors")
COMPACT_ON_OPEN = True
#: Local mode: hold the dense vectors (and multivectors) a reloaded collection gathered as float64
#: in float32 again, as qdrant-client holds those of a collection it created (see
#: :func:`_compact_local`)
FLOAT32_ON_OPEN = True
#: Local mode: open folders with skalign's float32 loader (:mod:`._qdrant_load`) where the
#: installed qdrant-client's loader is the one it reproduces
STREAMED_OPEN = True


def _compact_local(client):
    """Rebuild the per-point Python objects of every collection the local client loaded, so
    that they no longer pin the memory its load freed; return the collections rebuilt.

    Opening a folder unpickles every point and keeps lists of Python floats until each
    collection's vectors are gathered into an array; the payloads, ids and positions it keeps
    are small objects spread over the same allocator arenas as those floats, and an arena with
    one live object stays resident (50,000 points: 665 arenas of 1 MiB held 57 MB of live
    objects). Copying them while the originals live puts the copies in the same arenas;
    pickling them, dropping them (which empties, and so releases, those arenas) and
    unpickling them into fresh arenas leaves the same values in far less memory (50,000
    points: 1,006 -> 425 MiB resident in 0.3 s, ``5ae3bf6:benchmarks/qdrant_local_memory.py``). The
    values are equal and nothing else refers to these containers; a client whose internals
    differ (another version of qdrant-client) is left as it is.

    A reloaded collection's dense vectors are ``np.array(list of lists of floats)``, float64,
    where a collection created in the process holds float32 (its arrays are made with
    ``dtype=np.float32`` and every upsert converts to it). Each point added later grows that
    array by a doubling copy, so a resumed shadow grows at twice a new one's size. With
    :data:`FLOAT32_ON_OPEN` they are cast back to float32: the stored values came through
    float32 (skalign writes float32; qdrant-client converts what it is given), so the cast loses
    nothing and the reopened collection holds what the one that wrote it held."""
    import gc
    import pickle

    collections = getattr(getattr(client, "_client", None), "collections", None)
    if not COMPACT_ON_OPEN or not isinstance(collections, dict):
        return 0
    done = 0
    for collection in collections.values():
        names = [a for a in PER_POINT_ATTRIBUTES if hasattr(collection, a)]
        if "payload" not in names or "ids" not in names:
            continue
        blob = pickle.dumps([getattr(collection, a) for a in names],
                            protocol=pickle.HIGHEST_PROTOCOL)
        for a in names:
            setattr(collection, a, None)
        gc.collect()
        for a, value in zip(names, pickle.loads(blob)):
            setattr(collection, a, value)
        del blob
        if FLOAT32_ON_OPEN:
            _float32_vectors(collection)
        done += 1
    return done


def _float32_vectors(collection):
    """Cast a loaded collection's float64 dense vectors and multivectors to float32 in place."""
    vectors = getattr(collection, "vectors", None)
    if isinstance(vectors, dict):
        for name, array in list(vectors.items()):
            if isinstance(array, np.ndarray) and array.dtype == np.float64:
                vectors[name] = None  # the float64 array freed before the next is cast
                vectors[name] = array.astype(np.float32)
                del array
    multivectors = getattr(collection, "multivectors", None)
    if isinstance(multivectors, dict):
        for name, arrays in multivectors.items():
            if isinstance(arrays, list):
                multivectors[name] = [a.astype(np.float32) if isinstance(a, np.ndarray)
                                      and a.dtype == np.float64 else a for a in arrays]


def _client(address, create=True):
    """One client per database: local mode allows a single client per folder. A local folder
    must exist, and be a Qdrant store unless ``create``; a server's address gives its password
    as the API key."""
    from qdrant_client import QdrantClient

    key = _client_key(address)
    if key in _CLIENTS:
        return _CLIENTS[key]
    try:
        if address.path is not None:
            if not create:
                _check_store(address)
            elif not address.path.is_dir():
                raise StoreNotFoundError(f"{address}: no folder {address.path}; check the "
                                         "path (qdrant:DIR/COLLECTION).")
            with _qdrant_load.opening(STREAMED_OPEN):
                client = QdrantClient(path=str(address.path))
            _compact_local(client)
            release_freed_memory()  # what loading every collection of the folder freed
        else:
            client = QdrantClient(url=address.url, timeout=10, check_compatibility=False,
                                  api_key=address.password or None)
            client.get_collections()
    except StoreError:
        raise
    except RuntimeError as exc:  # the local folder is locked by another process
        if "already accessed" in str(exc):
            raise StoreLockedError(f"{address}: another process (e.g. another skalign "
                                   f"translate) uses {address.path}; wait for it to "
                                   "finish.") from None
        raise StoreError(f"{address}: cannot open ({_one_line(exc, address)}).") from None
    except Exception as exc:  # connection refused, timeouts, HTTP errors
        if address.path is not None:
            raise StoreError(f"{address}: cannot open ({_one_line(exc, address)}).") from None
        if getattr(exc, "status_code", None) in (401, 403):
            raise _EDGE.store_error(address, exc) from None
        raise StoreError(f"{address}: cannot reach the Qdrant server ({_one_line(exc, address)})"
                         "; check HOST:PORT and that the server runs.") from None
    if not _CLIENTS:
        atexit.register(_close_all)
    _CLIENTS[key] = client
    return client


def _close_all():
    while _CLIENTS:
        _CLIENTS.popitem()[1].close()


def _aliases(client):
    return {a.alias_name: a.collection_name for a in client.get_aliases().aliases}


def _exists(client, name):
    return client.collection_exists(name) or name in _aliases(client)


def _vector_params(address, info):
    vectors = info.config.params.vectors
    if isinstance(vectors, dict):
        if address.column is None:
            if len(vectors) != 1:
                raise StoreError(f"{address}: the collection has named vectors "
                                 f"{', '.join(sorted(vectors))}; choose one with ?vector=NAME.")
            return next(iter(vectors)), vectors
        if address.column not in vectors:
            raise StoreError(f"{address}: no vector named {address.column!r} (named vectors: "
                             f"{', '.join(sorted(vectors)) or 'none'}); fix ?vector=NAME.")
        return address.column, vectors
    if address.column is not None:
        raise StoreError(f"{address}: the collection has one unnamed vector; drop "
                         "?vector=NAME.")
    return None, vectors


#: Ids per page where only the ids are scrolled (the local mode sorts every id for each page)
ID_PAGE = 16384


def _check_listed(address):
    """A local folder's ``meta.json``, read before a client is opened (a client loads every
    collection of the folder, and creates files where there are none): a collection it does
    not list is refused without opening one."""
    if address.path is None or _client_key(address) in _CLIENTS:
        return
    _check_store(address)
    catalogue = _catalogue(address.path)
    if catalogue is not None and address.name not in catalogue[0] \
            and address.name not in catalogue[1]:
        raise _not_found(address, catalogue[0] + list(catalogue[1]))


@_edges
class Reader(StoreReader):
    has_rows = True
    kind = "qdrant"
    ids_origin = "qdrant ids"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        from qdrant_client import models

        _check_listed(address)
        self.address, self.client = address, _client(address, create=False)
        if not _exists(self.client, address.name):
            names = [c.name for c in self.client.get_collections().collections]
            raise _not_found(address, names + list(_aliases(self.client)))
        self.info = self.client.get_collection(address.name)
        self.vector, self.vectors_config = _vector_params(address, self.info)
        self.params = params = self.vectors_config[self.vector] if self.vector \
            else self.vectors_config
        self.column = self.vector
        # Qdrant keeps the direction of a cosine vector only: the server stores it normalised,
        # while the local mode normalises it in memory but writes it to disk as given (so a
        # reopened folder returns raw vectors). Reading directions makes the translation the
        # same whichever way the points were written or are read.
        self.cosine = params.distance == models.Distance.COSINE
        self.dim = int(params.size)
        self.n_rows = int(self.client.count(address.name, exact=True).count)
        self._all_ids = None

    def _vec(self, point):
        return point.vector[self.vector] if self.vector else point.vector

    def vectors_of(self, points):
        """The vectors of ``points`` (the address's named vector), directions where cosine."""
        vectors = np.asarray([self._vec(p) for p in points], dtype=np.float32)
        return unit_rows(vectors) if self.cosine else vectors

    def as_written(self, values, points=()):
        """``values`` under the address's named vector, beside ``points``' other named vectors
        (an upsert replaces a point's every vector); bare for one unnamed vector."""
        if not self.vector:
            return values
        out = {n: [p.vector[n] for p in points] for n in (points[0].vector if points else ())}
        out[self.vector] = values
        return out

    def batches(self, batch_size, start=0):
        if self.address.path is not None:
            yield from self._local_batches(batch_size, start)
            return
        offset, seen = None, 0
        while True:
            points, offset = self.client.scroll(
                self.address.name, limit=batch_size, offset=offset, with_payload=True,
                with_vectors=True if seen + batch_size > start else False)
            if not points:
                return
            seen += len(points)
            if seen > start:
                _strip_marks(points)
                yield self.vectors_of(points), points, None
            if offset is None:
                return

    def _local_batches(self, batch_size, start):
        """The local mode's ``scroll`` sorts the ids of the whole collection for every page (4.6
        s of a 50,000-point read in pages of 1,024): the ids are scrolled once, without payloads
        or vectors, in pages of ``ID_PAGE``, and each batch's points retrieved by id (the same
        points in the same order)."""
        ids = self._ids()
        for lo in range(start, len(ids), batch_size):
            vectors, points = self._retrieve(id_list(ids[lo:lo + batch_size]))
            yield vectors, points, None

    def id_pages(self):
        """Every point id in scroll (id) order, a page of ``ID_PAGE`` ids at a time (ids only,
        scrolled afresh)."""
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.address.name, limit=ID_PAGE, offset=offset, with_payload=False,
                with_vectors=False)
            yield [p.id for p in points]
            if offset is None or not points:
                return

    def _ids(self):
        """Every point id in scroll (id) order, scrolled once (:meth:`id_pages`): one
        ``int64`` array where each is an integer that fits it, else the list
        (:func:`~skalign._stores.databases.ids.id_array`)."""
        if self._all_ids is None:
            self._all_ids = id_array(self.id_pages(), self.n_rows)
        return self._all_ids

    def _retrieve(self, ids):
        """The points of ``ids`` in that order, and their vectors (directions where cosine)."""
        got = {p.id: p for p in self.client.retrieve(
            self.address.name, ids=ids, with_payload=True, with_vectors=True)}
        points = [got[i] for i in ids]
        _strip_marks(points)
        return self.vectors_of(points), points

    def row(self, points, k):
        p = points[k]
        others = kept_vectors(p.vector, self.vector, self.vectors_config) if self.vector else {}
        return {"id": p.id, "payload": p.payload, "vectors": others}

    def batch_ids(self, points, n):
        return [p.id for p in points]

    def take(self, positions, batch_size):
        """Points at ``positions`` (sorted) in id order, retrieved by id (the ids scrolled
        once: a resumed run's batches have them already)."""
        ids = self._ids()
        vectors, points = self._retrieve(ids_at(ids, positions))
        return list(vectors), [self.row(points, k) for k in range(len(points))]

    def read_all(self):
        parts = [v for v, _, _ in self.batches(4096)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


_check_output_folder, _creating = FOLDER.check_output, FOLDER.creating


@_edges
class Writer(StoreWriter):
    # inline: the local mode's upserts are Python holding the GIL; a write thread was tried and
    # gained nothing (50,000 points, alternated runs: within a second either way)
    pipelined = False

    def __init__(self, address, job):
        from qdrant_client import models

        check_name(address)
        if address.path is not None:
            _check_output_folder(address)
        self.models, self.address, self.job = models, address, job
        self.display = address.display
        self.src = job.reader
        self.normalizes = self.src.params.distance == models.Distance.COSINE

    @property
    def client(self):
        """The database's client, opened when first needed (a local folder's when the
        translation starts: :meth:`lock` made the folder)."""
        return _client(self.address)

    def lock(self):
        return FOLDER.writer_lock(self.address)

    def exists(self):
        if self.address.path is not None and _client_key(self.address) not in _CLIENTS:
            return _target(self.address, self.address.name) is not None  # meta.json: no client
        return _exists(self.client, self.address.name)

    def _drop_leftovers(self, keep=None):
        """Drop the shadows of other jobs; never a backup copy (``OUTPUT_skalign_backup_<job>``,
        which a run killed between dropping the replaced collection and the alias switch left
        with no alias: the only copy of that collection)."""
        live = set(_aliases(self.client).values())
        prefix = shadow_prefix(self.address.name)
        copies = backup_name(self.address.name) + "_"
        for c in self.client.get_collections().collections:
            if c.name.startswith(prefix) and c.name != keep and c.name not in live \
                    and not c.name.startswith(copies):
                self.client.delete_collection(c.name)

    def begin(self, fp):
        # the job's shadow, unless an alias names that collection: the output the same job
        # published before (``--replace --force``), or its backup, is not a leftover to resume
        live = set(_aliases(self.client).values())
        self.shadow = next(s for s in (shadow_name(self.address.name, fp[at:])
                                       for at in (0, 12, 20)) if s not in live)
        self._drop_leftovers(keep=self.shadow)
        if self.client.collection_exists(self.shadow):
            count = self.client.count(self.shadow, exact=True).count
            return resume_point(count, self.src.n_rows, self.job.batch_size)
        params = self.src.params.model_copy(update={"size": self.job.d_out})
        if self.src.vector:
            config = dict(self.src.vectors_config)
            config[self.src.vector] = params
        else:
            config = params
        info = self.src.info.config
        self.client.create_collection(
            self.shadow, vectors_config=config,
            sparse_vectors_config=info.params.sparse_vectors,
            on_disk_payload=info.params.on_disk_payload)
        return 0

    def write_unit(self, out, points, shard, start):
        m, values, name = self.models, self._stored(out).tolist(), self.src.vector
        if name and len({frozenset(p.vector) for p in points}) > 1:  # a named vector some
            # points lack (one that --into fills): each point with the vectors it holds
            batch = [m.PointStruct(id=p.id, payload=p.payload, vector={**p.vector, name: v})
                     for p, v in zip(points, values)]
        else:
            batch = m.Batch(ids=[p.id for p in points], payloads=[p.payload for p in points],
                            vectors=self.src.as_written(values, points))
        self.client.upsert(self.shadow, points=batch, wait=True)
        if self.address.path is not None and TRIM_EACH_BATCH:
            release_freed_memory()

    def _stored(self, out):
        """What is written: directions in a cosine collection (what a server keeps), so the
        local mode's folder holds the same vectors as its memory."""
        return unit_rows(out) if self.normalizes else out

    def finish(self):
        return int(self.client.count(self.shadow, exact=True).count)

    def fetch(self, positions, rows):
        got = self.client.retrieve(self.shadow, ids=[r["id"] for r in rows], with_payload=True,
                                   with_vectors=True)
        by_id = {p.id: p for p in got}
        missing = [r["id"] for r in rows if r["id"] not in by_id]
        if missing:
            raise StoreError(f"{self.display}: verification failed: point {missing[0]} is "
                             "missing from the translation; it was not published.")
        pts = [by_id[r["id"]] for r in rows]
        vecs = np.asarray([self.src._vec(p) for p in pts], dtype=np.float32)
        return vecs, [self.src.row([p], 0) for p in pts]

    def _copy(self, name, target):
        """Copy collection ``name`` into a new collection ``target`` (for the backup)."""
        info = self.client.get_collection(name).config
        metadata = getattr(info, "metadata", None)  # a server's (Qdrant 1.16 on): the stamp too
        self.client.create_collection(target, vectors_config=info.params.vectors,
                                      sparse_vectors_config=info.params.sparse_vectors,
                                      **({"metadata": metadata} if metadata else {}))
        offset = None
        while True:
            points, offset = self.client.scroll(name, limit=1024, offset=offset,
                                                with_payload=True, with_vectors=True)
            if points:
                self.client.upsert(target, points=[self.models.PointStruct(
                    id=p.id, vector=p.vector, payload=p.payload) for p in points], wait=True)
            if offset is None:
                break
        if self.client.count(target, exact=True).count != self.client.count(name,
                                                                             exact=True).count:
            raise StoreError(f"{self.display}: copying {name} for the backup lost points; "
                             "nothing was replaced.")

    def publish(self, replace, stamp=None):
        """The stamps first (the replaced output's for the backup's name; this one's, marked
        :data:`PUBLISHING`, bound to the shadow), then the backup (an alias, or a copy of a
        real collection, which is then dropped), then one alias switch."""
        m, name = self.models, self.address.name
        bname = backup_name(name)
        aliases = _aliases(self.client)
        ops, backup, drop = [], None, []
        local = self.address.path is not None
        exists = name in aliases or self.client.collection_exists(name)
        if exists and not replace:
            raise StoreError(f"{self.display}: exists; pass --replace.")
        # the replaced collection: an alias's target, or the copy a real collection gets
        old = (aliases[name] if name in aliases else f"{bname}_{self.shadow.rsplit('_', 1)[1]}") \
            if exists else None
        if local and exists:  # its stamp, for the backup's name (valid once that resolves to
            # it; read back from there where an interrupted run wrote it already)
            _move_sidecar(self.address, bname, old, sidecar_stamp(
                self.address, name, old if name in aliases else name)
                or sidecar_stamp(self.address, bname, old))
        if stamp is not None:
            mark = pending_stamp(stamp, exists)
            if local:  # valid once the name resolves to the shadow
                _write_sidecar(self.address, name, self.shadow, mark)
            else:
                _server_stamp(self.client, self.shadow, mark)
        self.publishing = True
        kill_point("publishing")
        if exists:
            if name not in aliases:  # a real collection: copied, then dropped so that the name
                # can be an alias
                if self.client.collection_exists(old):
                    self.client.delete_collection(old)
                self._copy(name, old)
                self.client.delete_collection(name)
                kill_point("backed-up")
            if bname in aliases:
                ops.append(m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=bname)))
                if aliases[bname] not in (old, self.shadow):
                    drop.append(aliases[bname])
            ops.append(m.CreateAliasOperation(create_alias=m.CreateAlias(
                collection_name=old, alias_name=bname)))
            if name in aliases:
                ops.append(m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=name)))
            backup = self.address.with_name(bname)
        ops.append(m.CreateAliasOperation(create_alias=m.CreateAlias(
            collection_name=self.shadow, alias_name=name)))
        self.client.update_collection_aliases(change_aliases_operations=ops)
        for c in drop:  # the backup of an earlier --replace: one backup is kept
            self.client.delete_collection(c)
        return backup

    def end_publish(self, stamp):
        """The output's stamp without its :data:`PUBLISHING` mark."""
        _finish_stamp(self.client, self.address, self.shadow, final_stamp(stamp))

    def discard(self):
        if getattr(self, "shadow", None) and self.client.collection_exists(self.shadow):
            self.client.delete_collection(self.shadow)

    def close(self):
        pass


@_edge
def restore(address):
    from qdrant_client import models as m

    client = _client(address, create=False)
    name, bname = address.name, backup_name(address.name)
    with lock_for(address, address.path):
        aliases = _aliases(client)
        if bname not in aliases or name not in aliases:
            raise StoreNotFoundError(
                f"{address}: no backup alias {bname[:80]} to restore; a backup is kept only by "
                "`skalign translate --replace`.")
        a, b = aliases[name], aliases[bname]
        if address.path is not None:
            stamps = _sidecar_stamp(address, name), _sidecar_stamp(address, bname)
        client.update_collection_aliases(change_aliases_operations=[
            m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=name)),
            m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=bname)),
            m.CreateAliasOperation(create_alias=m.CreateAlias(collection_name=b, alias_name=name)),
            m.CreateAliasOperation(create_alias=m.CreateAlias(collection_name=a,
                                                              alias_name=bname)),
        ])
        if address.path is not None:  # the stamps swap with the names
            _move_sidecar(address, name, b, stamps[1])
            _move_sidecar(address, bname, a, stamps[0])
    return address.with_name(bname)


# ------------------------------------------------------------------------- provenance stamp
def _supports_metadata(client):
    try:
        return "metadata" in inspect.signature(client.update_collection).parameters
    except (TypeError, ValueError):
        return False


@_edge
def _strip_marks(points):
    """The source's provenance marks taken out of its points' payloads (not the output's)."""
    from ..live import without_marks

    for p in points:
        p.payload = without_marks(p.payload)


def read_stamp(address):
    """The provenance stamp of the collection (or alias) at ``address``, or ``None`` (no such
    collection, no stamp, a server without collection metadata)."""
    if address.path is not None:
        if not _is_store(address.path):
            return None  # no folder, or not Qdrant's: nothing opened, nothing created
        return _sidecar_stamp(address, address.name)
    client = _client(address)
    aliases = _aliases(client)
    target = aliases.get(address.name, address.name)
    if not client.collection_exists(target):
        return None
    metadata = getattr(client.get_collection(target).config, "metadata", None) or {}
    try:
        stamp = json.loads(metadata.get(STAMP_KEY) or "null")
    except (TypeError, ValueError, AttributeError):
        return None
    return stamp if isinstance(stamp, dict) else None


@_edge
def write_stamp(address, stamp):
    """Record ``stamp`` as the provenance of the collection (or alias) at ``address``: the
    local mode's sidecar, a server's collection metadata (merged with its other keys; nothing
    where the client or the server has no collection metadata)."""
    if address.path is not None:
        target = _target(address, address.name)
        if target is None:
            raise StoreNotFoundError(f"{address}: no collection {address.name[:80]!r} to stamp.")
        _write_sidecar(address, address.name, target, stamp)
        return
    client = _client(address)
    _server_stamp(client, _aliases(client).get(address.name, address.name), stamp)


def _server_stamp(client, collection, stamp, key=STAMP_KEY):
    """A server's ``stamp`` in the metadata of ``collection``, under ``key`` (nothing where the
    client or the server has no collection metadata)."""
    if not _supports_metadata(client):
        return
    try:
        client.update_collection(collection,
                                 metadata={key: json.dumps(stamp, sort_keys=True)})
    except Exception as exc:
        if getattr(exc, "status_code", None) in (400, 422):  # a server without metadata
            return
        raise


def _finish_stamp(client, address, collection, stamp):
    """``stamp`` as the output's, ``collection`` the one its name resolves to."""
    if address.path is not None:
        _write_sidecar(address, address.name, collection, stamp)
    else:
        _server_stamp(client, collection, stamp)
