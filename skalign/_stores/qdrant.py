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
"""

from __future__ import annotations

import atexit

import numpy as np

from ..exceptions import StoreError
from . import qdrant_load as _qdrant_load
from .base import StoreReader, StoreWriter
from .dbcommon import (
    backup_name,
    lock_for,
    release_freed_memory,
    resume_point,
    shadow_name,
    shadow_prefix,
)

__all__ = ["Reader", "Writer", "restore"]

_CLIENTS = {}

#: Local mode: give the C heap's free pages back after each batch. The local mode grows the
#: output's vector array by doubling it (a copy) and pickles every point; without the trim the
#: pages those free stay resident and add up to the peak (50,000 points, 384 -> 768:
#: ``benchmarks/qdrant_local_memory.py``).
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
    points: 1,006 -> 425 MiB resident in 0.3 s, ``benchmarks/qdrant_local_memory.py``). The
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


def _client(address):
    """One client per database: local mode allows a single client per folder."""
    from qdrant_client import QdrantClient

    key = address.identity[1]
    if key in _CLIENTS:
        return _CLIENTS[key]
    try:
        if address.path is not None:
            if not address.path.is_dir():
                raise StoreError(f"{address}: no Qdrant folder {address.path}; check the path "
                                 "(qdrant:DIR/COLLECTION).")
            with _qdrant_load.opening(STREAMED_OPEN):
                client = QdrantClient(path=str(address.path))
            _compact_local(client)
            release_freed_memory()  # what loading every collection of the folder freed
        else:
            client = QdrantClient(url=address.url, timeout=10, check_compatibility=False)
            client.get_collections()
    except StoreError:
        raise
    except RuntimeError as exc:  # the local folder is locked by another process
        if "already accessed" in str(exc):
            raise StoreError(f"{address}: another process (e.g. another skalign translate) uses "
                             f"{address.path}; wait for it to finish.") from None
        raise StoreError(f"{address}: cannot open ({str(exc).splitlines()[0]}).") from None
    except Exception as exc:  # connection refused, timeouts, HTTP errors
        msg = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise StoreError(f"{address}: cannot reach the Qdrant server ({msg}); check HOST:PORT "
                         "and that the server runs.") from None
    if not _CLIENTS:
        atexit.register(_close_all)
    _CLIENTS[key] = client
    return client


def _close_all():
    while _CLIENTS:
        _CLIENTS.popitem()[1].close()


def _models():
    from qdrant_client import models

    return models


def unit_rows(X):
    """Rows of ``X`` scaled to unit length (zero rows left as they are), as Qdrant stores a
    cosine vector."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return (X / np.where(norms > 0, norms, 1)).astype(np.float32, copy=False)


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


class Reader(StoreReader):
    has_rows = True
    kind = "qdrant"
    schema = None
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        self.address, self.client = address, _client(address)
        if not _exists(self.client, address.name):
            names = sorted(c.name for c in self.client.get_collections().collections)
            raise StoreError(f"{address}: no collection {address.name!r} (collections: "
                             f"{', '.join(names) or 'none'}); check the name.")
        self.info = self.client.get_collection(address.name)
        self.vector, self.vectors_config = _vector_params(address, self.info)
        params = self.vectors_config[self.vector] if self.vector else self.vectors_config
        self.params = params
        self.column = self.vector
        # Qdrant keeps the direction of a cosine vector only: the server stores it normalised,
        # while the local mode normalises it in memory but writes it to disk as given (so a
        # reopened folder returns raw vectors). Reading directions makes the translation the
        # same whichever way the points were written or are read.
        self.cosine = params.distance == _models().Distance.COSINE
        self.dim = int(params.size)
        self.n_rows = int(self.client.count(address.name, exact=True).count)
        self._all_ids = None

    def _vec(self, point):
        return point.vector[self.vector] if self.vector else point.vector

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
                vectors = np.asarray([self._vec(p) for p in points], dtype=np.float32)
                yield (unit_rows(vectors) if self.cosine else vectors), points, None
            if offset is None:
                return

    def _local_batches(self, batch_size, start):
        """The local mode's ``scroll`` sorts the ids of the whole collection for every page (4.6
        s of a 50,000-point read in pages of 1,024): the ids are scrolled once, without payloads
        or vectors, in pages of ``ID_PAGE``, and each batch's points retrieved by id (the same
        points in the same order)."""
        ids = self._ids()
        for lo in range(start, len(ids), batch_size):
            vectors, points = self._retrieve(ids[lo:lo + batch_size])
            yield vectors, points, None

    def _ids(self):
        """Every point id in scroll (id) order, scrolled once (ids only, pages of
        ``ID_PAGE``)."""
        if self._all_ids is None:
            self._all_ids, offset = [], None
            while True:
                points, offset = self.client.scroll(
                    self.address.name, limit=ID_PAGE, offset=offset, with_payload=False,
                    with_vectors=False)
                self._all_ids += [p.id for p in points]
                if offset is None or not points:
                    break
        return self._all_ids

    def _retrieve(self, ids):
        """The points of ``ids`` in that order, and their vectors (directions where cosine)."""
        got = {p.id: p for p in self.client.retrieve(
            self.address.name, ids=ids, with_payload=True, with_vectors=True)}
        points = [got[i] for i in ids]
        vectors = np.asarray([self._vec(p) for p in points], dtype=np.float32)
        return (unit_rows(vectors) if self.cosine else vectors), points

    def row(self, points, k):
        p = points[k]
        others = {n: v for n, v in p.vector.items() if n != self.vector} if self.vector else {}
        return {"id": p.id, "payload": p.payload, "vectors": others}

    def take(self, positions, batch_size):
        """Points at ``positions`` (sorted) in id order, retrieved by id (the ids scrolled
        once: a resumed run's batches have them already)."""
        ids = self._ids()
        vectors, points = self._retrieve([ids[pos] for pos in positions])
        return list(vectors), [self.row(points, k) for k in range(len(points))]

    def read_all(self):
        parts = [v for v, _, _ in self.batches(4096)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


class Writer(StoreWriter):
    # inline: the local mode's upserts are Python holding the GIL; a write thread was tried and
    # gained nothing (50,000 points, alternated runs: within a second either way)
    pipelined = False

    def __init__(self, address, job):
        from qdrant_client import models

        self.models, self.address, self.job = models, address, job
        self.client = _client(address)
        self.display = address.display
        self.src = job.reader
        self.normalizes = self.src.params.distance == models.Distance.COSINE

    def lock(self):
        return lock_for(self.address, self.address.path)

    def exists(self):
        return _exists(self.client, self.address.name)

    def _drop_leftovers(self, keep=None):
        live = set(_aliases(self.client).values())
        prefix = shadow_prefix(self.address.name)
        for c in self.client.get_collections().collections:
            if c.name.startswith(prefix) and c.name != keep and c.name not in live:
                self.client.delete_collection(c.name)

    def begin(self, fp):
        self.shadow = shadow_name(self.address.name, fp)
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
        models = self.models
        if self.src.vector:
            names = list(points[0].vector)
            vectors = {n: [p.vector[n] for p in points] for n in names}
            vectors[self.src.vector] = self._stored(out).tolist()
        else:
            vectors = self._stored(out).tolist()
        self.client.upsert(self.shadow, points=models.Batch(
            ids=[p.id for p in points], vectors=vectors, payloads=[p.payload for p in points]),
            wait=True)
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
        self.client.create_collection(target, vectors_config=info.params.vectors,
                                      sparse_vectors_config=info.params.sparse_vectors)
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

    def publish(self, replace):
        m, name = self.models, self.address.name
        bname = backup_name(name)
        aliases = _aliases(self.client)
        ops, backup, drop = [], None, []
        if name in aliases or self.client.collection_exists(name):
            if not replace:
                raise StoreError(f"{self.display}: exists; pass --replace.")
            if name in aliases:
                old = aliases[name]
            else:  # a real collection: copied, then dropped so that the name can be an alias
                old = f"{bname}_{self.shadow.rsplit('_', 1)[1]}"
                if self.client.collection_exists(old):
                    self.client.delete_collection(old)
                self._copy(name, old)
                self.client.delete_collection(name)
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

    def discard(self):
        if getattr(self, "shadow", None) and self.client.collection_exists(self.shadow):
            self.client.delete_collection(self.shadow)

    def close(self):
        pass


def restore(address):
    from qdrant_client import models as m

    client = _client(address)
    name, bname = address.name, backup_name(address.name)
    with lock_for(address, address.path):
        aliases = _aliases(client)
        if bname not in aliases or name not in aliases:
            raise StoreError(f"{address}: no backup alias {bname} to restore; a backup is kept "
                             "only by `skalign translate --replace`.")
        a, b = aliases[name], aliases[bname]
        client.update_collection_aliases(change_aliases_operations=[
            m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=name)),
            m.DeleteAliasOperation(delete_alias=m.DeleteAlias(alias_name=bname)),
            m.CreateAliasOperation(create_alias=m.CreateAlias(collection_name=b, alias_name=name)),
            m.CreateAliasOperation(create_alias=m.CreateAlias(collection_name=a,
                                                              alias_name=bname)),
        ])
    return address.with_name(bname)
