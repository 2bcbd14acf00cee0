"""Chroma collections: ``chroma:DIR/COLLECTION`` (persistent client) and
``chroma+http://HOST:PORT/COLLECTION``.

Rows are records in Chroma's own order (the order of ``get`` with ``offset``): the id, the
document, the metadata and the translated embedding. The output is a shadow collection
``OUTPUT_skalign_<job>`` with the source's metadata and HNSW configuration (so the same
distance space), filled in order with ``add``s of about ``ADD_ROWS`` records
(``PHASE_ADD_ROWS`` in phases), gathered from the translation's batches (of the batch a crashed
run had begun, a resumed run adds the records not there yet), and renamed to ``OUTPUT`` when
verified. Chroma has no atomic swap: with ``--replace`` the existing ``OUTPUT`` is renamed to
``OUTPUT_skalign_backup`` first, then the translation to ``OUTPUT`` (the name resolves to
nothing between the two renames).

Between two persistent folders the translation runs in phases (:data:`PHASE_ROWS`): the
records of a phase are read from the source, then translated and added to the shadow, and
skalign closes its clients of the folders between the two, so that Chroma holds one HNSW index
in memory at a time, not the source's and the output's together.

The provenance stamp (:mod:`.provenance`) is JSON text under the key ``skalign`` of the
collection's metadata (the other keys, ``hnsw:*`` included, kept as they are); it travels with
the collection through the renames of ``--replace`` and ``restore``. The translation's stamp is
written in the shadow's metadata before the renames, marked
:data:`~skalign._stores.journal.PUBLISHING` until the steps after them are done: the output never
appears without its stamp, and the same command run again after a kill between the renames or
after them finishes the publish (:func:`skalign._stores.chroma.recovery.recover_publish`).

Reading never creates anything: a folder without Chroma's ``chroma.sqlite3`` or a collection its
catalogue does not list is refused before a client is opened (a client creates the catalogue).
An output's new folder is created when its translation starts (:meth:`Writer.lock`). Errors of
chromadb (and of its HTTP client) are raised as one-line
:class:`~skalign.exceptions.StoreError` exceptions naming the address with its password hidden.
"""

from __future__ import annotations

import json
import math

import numpy as np

from ...exceptions import AddressError, StoreError, StoreNotFoundError
from ..base import StoreReader, StoreWriter
from ..databases.common import (
    backup_name,
    lock_for,
    release_freed_memory,
    resume_point,
    shadow_name,
    shadow_prefix,
)
from ..journal import (
    CommitClock,
    final_stamp,
    kill_point,
    pending_stamp,
)
from .names import (
    _RULE,
    FOLDER,
    LISTED_NAMES,
    STAMP_KEY,
    _breaks_rule,
    _catalogued_names,
    _check_store,
    _edge,
    _edges,
    _engine_errors,
    _is_store,
    _not_found,
    _one_line,
    check_name,
    drop_collection,
    segment_folders,
    torn_index,
    vector_segments,
)

__all__ = ["STAMP_KEY", "Reader", "Writer", "drop_collection", "read_stamp",
           "restore", "segment_folders", "torn_index", "vector_segments", "write_stamp"]

#: The key of the collection's metadata that holds the provenance stamp (JSON text)
_INCLUDE = ["embeddings", "documents", "metadatas"]

#: Ids per page where only the ids are read
ID_PAGE = 16384

#: Records per ``add`` of the shadow: the translation's batches (1,024 records, small for the
#: memory of the source's reads) are gathered into adds of about this many, or fewer where
#: ``COMMIT_SECONDS`` have passed since the last add (what a crash may lose). Chroma's ``add``
#: costs less per record in larger calls, and the source's reads wait for each one.
ADD_ROWS = 2048

#: Records per ``add`` when translating in phases (:data:`PHASE_ROWS`), where the reads are
#: done before the phase's adds: larger adds cost less per record, and the peak is then one
#: index and one phase, not two indexes (``5ae3bf6:benchmarks/chroma_memory.py``, ``add_*``)
PHASE_ADD_ROWS = 4096

#: Give the C heap's free pages back after each ``add`` (persistent folders): an add of 2,048
#: 768-d records leaves about 45 MB free but resident in Chroma's heap (its Rust core allocates
#: with glibc's malloc); the translation's peak at 200,000 records fell by 23 to 41 MiB (the
#: medians of two runs of ``5ae3bf6:benchmarks/chroma_memory.py``), at no measured CPU cost
TRIM_EACH_ADD = True

#: Between two persistent folders, records read per phase (see the module's docstring); 0 reads
#: and writes as one stream, with the source's and the output's index in memory together. A
#: Chroma client loads a collection's whole HNSW index when it first reads or writes its
#: vectors and keeps it until the folder's last client is closed: at 200,000 records that is
#: about 400 MiB for the 384-d source and 750 MiB for the 768-d output. A phase holds its
#: records in memory (about 120 MB at 65,536 384-d records) and costs one load of each index.
PHASE_ROWS = 65536

class _Phases:
    """A reader and a writer of persistent folders that take turns with their indexes."""

    def __init__(self, *members):
        self.members, self.last = members, None

    def use(self, owner):
        """Before ``owner`` reads or writes vectors: where the other member's index was used
        last, close both members' clients, so that Chroma stops the folders' systems and frees
        their indexes (each client is opened again when next needed). A client that is not
        skalign's on the same folder keeps its system, and the indexes, alive: nothing is freed
        then, and nothing else changes."""
        if self.last is not None and self.last is not owner:
            self.release()
            release_freed_memory()
        self.last = owner

    def release(self):
        """Close both members' clients (each opens again when next needed)."""
        for member in self.members:
            member.release()


def _use(owner):
    if owner.phases is not None:
        owner.phases.use(owner)


@_edges
class _Handles:
    """A client and one collection, opened when first needed and closed by :meth:`release`."""

    phases = None
    #: whether the client may create the catalogue (the writer's, in a folder it created)
    _creates = False

    def _open(self, address, name):
        self.address, self._name, self._client, self._collection = address, name, None, None

    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.address, create=self._creates)
        return self._client

    @property
    def collection(self):
        if self._collection is None:
            self._collection = self.client.get_collection(self._name, embedding_function=None)
        return self._collection

    @collection.setter
    def collection(self, value):
        self._collection, self._name = value, value.name

    def release(self):
        client, self._client, self._collection = self._client, None, None
        if client is not None and hasattr(client, "close"):
            client.close()


def _client(address, create=False):
    """A client of the folder or server; a folder must be a Chroma store unless ``create``
    (then it must exist: :meth:`Writer.lock` creates an output's)."""
    import chromadb

    if address.path is not None:
        if not create:
            _check_store(address)
        elif not address.path.is_dir():
            raise StoreNotFoundError(f"{address}: no folder {address.path}; check the path "
                                     "(chroma:DIR/COLLECTION).")
        with _engine_errors(address):
            return chromadb.PersistentClient(path=str(address.path))
    try:
        host, _, port = address.url.split("://", 1)[1].rpartition(":") if address.port \
            else (address.url.split("://", 1)[1], None, None)
        headers = None
        if address.user is not None or address.password is not None:
            import base64

            token = f"{address.user or ''}:{address.password or ''}".encode()
            headers = {"Authorization": "Basic " + base64.b64encode(token).decode()}
        client = chromadb.HttpClient(host=host, port=int(port or 8000),
                                     ssl=address.scheme == "https", headers=headers)
        client.heartbeat()
        return client
    except Exception as exc:
        raise StoreError(f"{address}: cannot reach the Chroma server ({_one_line(exc, address)});"
                         " check HOST:PORT and that the server runs.") from None


def _close(client):
    if client is not None and hasattr(client, "close"):
        client.close()


def _has(client, name):
    """Whether the client's database holds collection ``name``."""
    from chromadb.errors import NotFoundError

    try:
        client.get_collection(name, embedding_function=None)
    except NotFoundError:
        return False
    except Exception as exc:  # a name Chroma refuses is a name no collection has
        if "Validation error" in str(exc) or "does not exist" in str(exc):
            return False
        raise
    return True


def _some_names(client):
    """``(names, total)``: up to ``LISTED_NAMES`` collection names (not every one: a server may
    hold many) and how many collections there are."""
    try:
        cols = client.list_collections(limit=LISTED_NAMES)
        total = int(client.count_collections())
    except TypeError:  # a client without ``limit``
        cols = client.list_collections()
        total = None
    return [c if isinstance(c, str) else c.name for c in cols], total


def _names(client):
    return [c if isinstance(c, str) else c.name for c in client.list_collections()]


def _get(client, address, name):
    if not _has(client, name):
        _refuse_missing(address, *_some_names(client))
    return client.get_collection(name, embedding_function=None)


def _refuse_missing(address, names, total=None):
    """Raise what a missing collection is: a name Chroma would refuse, or a name of no
    collection (a few of ``names`` listed, of ``total``)."""
    if _breaks_rule(address.name):
        raise AddressError(f"{address}: {address.name[:80]!r} is not a Chroma collection name; "
                           f"{_RULE}.")
    raise _not_found(address, names, total)


def _check_listed(address):
    """A local folder's catalogue, read before a client is opened: a collection it does not
    list is refused without opening one."""
    if address.path is None:
        return
    _check_store(address)
    names = _catalogued_names(address.path)
    if names is not None and address.name not in names:
        _refuse_missing(address, names)


@_edges
class Reader(_Handles, StoreReader):
    has_rows = True
    kind = "chroma"
    ids_origin = "chroma ids"
    dtype = np.dtype(np.float32)

    def __init__(self, address, column=None):
        _check_listed(address)
        self._open(address, address.name)
        self.collection = _get(self.client, address, address.name)
        self.n_rows = int(self.collection.count())
        self._all_ids = None
        head = self.collection.get(limit=1, include=["embeddings"])
        emb = head["embeddings"]
        self.dim = int(len(emb[0])) if emb is not None and len(emb) else 0

    def _ids(self):
        """Every record's id in Chroma's order, read once (:func:`record_ids`)."""
        if self._all_ids is None:
            self._all_ids = record_ids(self.collection, self.n_rows)
        return self._all_ids

    def _get(self, ids):
        """The records of ``ids``, in that order."""
        from ..live import without_marks

        _use(self)
        got = self.collection.get(ids=ids, include=_INCLUDE)
        if got.get("metadatas") is not None:  # the source's marks are not the output's
            got["metadatas"] = [without_marks(m) or None for m in got["metadatas"]]
        if got["ids"] != ids:
            if len(got["ids"]) != len(ids):
                raise StoreError(f"{self.address}: records were deleted from the collection "
                                 "while it was read; translate it again.")
            at = {i: k for k, i in enumerate(got["ids"])}
            order = [at[i] for i in ids]
            got = {"ids": list(ids),
                   "embeddings": np.asarray(got["embeddings"])[order],
                   **{key: None if got.get(key) is None else [got[key][k] for k in order]
                      for key in ("documents", "metadatas")}}
        return got

    def batches(self, batch_size, start=0):
        """Batches of records fetched by id: ``get`` with an ``offset`` skips the records before
        it one by one (a 200,000-record collection read in pages of 1,024: 17.6 s of CPU by
        offset, 11.0 s by id; ``5ae3bf6:benchmarks/chroma_batch_cost.py``, ``2e5 --reads-only``)."""
        ids = self._ids()
        lo = start - start % batch_size
        if self.phases is None:
            for lo in range(lo, len(ids), batch_size):
                got = self._get(ids[lo:lo + batch_size])
                yield np.asarray(got["embeddings"], dtype=np.float32), got, None
            return
        # phases of equal size, whole batches each
        phases = max(1, math.ceil((len(ids) - lo) / PHASE_ROWS))
        size = math.ceil((len(ids) - lo) / phases / batch_size) * batch_size
        while lo < len(ids):
            hi = min(len(ids), lo + size)
            phase = [self._get(ids[a:min(hi, a + batch_size)]) for a in range(lo, hi, batch_size)]
            phase.reverse()
            while phase:
                got = phase.pop()
                yield np.asarray(got["embeddings"], dtype=np.float32), got, None
            lo = hi

    def row(self, got, k):
        return {"id": got["ids"][k], "document": got["documents"][k],
                "metadata": got["metadatas"][k]}

    def batch_ids(self, got, n):
        return got["ids"]

    def take(self, positions, batch_size):
        """Records at ``positions`` (sorted)."""
        ids = self._ids()
        got = self._get([ids[p] for p in positions])
        return (list(np.asarray(got["embeddings"], dtype=np.float32)),
                [self.row(got, i) for i in range(len(got["ids"]))])

    def read_all(self):
        parts = [v for v, _, _ in self.batches(4096)]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)


def _part(values, lo, step):
    return None if values is None else values[lo:lo + step]


def record_ids(collection, n_rows=None):
    """Every record's id in Chroma's order (its catalogue's), read in pages of ``ID_PAGE`` ids
    only: up to ``n_rows`` (the count when it was opened; the page holding it read whole), or
    ``None``: to the end."""
    out = []
    while n_rows is None or len(out) < n_rows:
        page = collection.get(limit=ID_PAGE, offset=len(out), include=[])["ids"]
        out += page
        if len(page) < ID_PAGE:
            break
    return out


_check_output_folder, _creating = FOLDER.check_output, FOLDER.creating


@_edges
class Writer(_Handles, StoreWriter):
    normalizes = False  # Chroma keeps the embeddings as given, whatever the space
    restarted = None  # why a crashed run's shadow was dropped instead of resumed
    pipelined = True  # Chroma's Rust core writes without the GIL
    _creates = True  # in the folder :meth:`lock` made where there was none

    def __init__(self, address, job):
        self.address, self.job, self.display = address, job, address.display
        check_name(address)
        if address.path is not None:
            _check_output_folder(address)
        self._open(address, None)
        self.src = job.reader
        self.add_rows = ADD_ROWS
        if (address.path is not None and isinstance(self.src, Reader)
                and self.src.address.path is not None and PHASE_ROWS > 0):
            # a phase's adds wait for its reads: written in the loop, not behind it
            self.phases = self.src.phases = _Phases(self.src, self)
            self.phases.last = self.src  # the reader has read the source's vectors already
            self.pipelined = False
            # Chroma's add works in threads of its own: one BLAS thread for the products, whose
            # idle OpenBLAS threads would spin beside it (200,000 records in phases: 178 s of
            # CPU with two, ``5ae3bf6:benchmarks/chroma_memory.py``)
            self.busy_threads = 1
            self.add_rows = PHASE_ADD_ROWS

    def lock(self):
        return FOLDER.writer_lock(self.address)

    def exists(self):
        if self.address.path is not None and not _is_store(self.address.path):
            return False  # not a Chroma folder (yet): no client, which would make it one
        if self.address.path is not None and self._client is None:  # no client opened for it
            names = _catalogued_names(self.address.path)
            if names is not None:
                return self.address.name in names
        return _has(self.client, self.address.name)

    def begin(self, fp):
        self._pending, self._clock = [], CommitClock()
        self.shadow = shadow_name(self.address.name, fp)
        names = _names(self.client)
        for n in names:
            if n.startswith(shadow_prefix(self.address.name)) and n not in (
                    self.shadow, backup_name(self.address.name)):
                drop_collection(self.client, self.address, n)
        self._max_batch = int(self.client.get_max_batch_size())
        if self.shadow in names:
            start = self._resume()
            if start is not None:
                return start
        self._resumed_batch = False
        src = self.src.collection
        config = src.configuration or {}
        kwargs = {"configuration": {"hnsw": config["hnsw"]}} if config.get("hnsw") else {}
        # the source's metadata but its stamp: the output gets its own when published
        metadata = {k: v for k, v in (src.metadata or {}).items() if k != STAMP_KEY}
        self.collection = self.client.create_collection(
            self.shadow, metadata=metadata or None, embedding_function=None, **kwargs)
        return 0

    def _resume(self):
        """The row to resume at in the shadow a crashed run left, or ``None`` where it cannot be
        resumed: the shadow is then dropped, files and all, and ``restarted`` says why."""
        # a kill while Chroma writes the shadow's HNSW files can leave them disagreeing, and
        # Chroma loads them unchecked: it then refuses the collection or dies of a segmentation
        # fault at the first search (once in the kill studies at 200,000 records), which no
        # ``except`` here could catch; so they are checked first
        torn = self.address.path is not None and torn_index(self.address.path, self.shadow)
        if torn:
            why = f"the HNSW files of the shadow a crashed run left disagree ({torn})"
        else:
            from chromadb.errors import ChromaError

            _use(self)  # whatever reading the shadow loads, not beside the source's index
            self.collection = self.client.get_collection(self.shadow, embedding_function=None)
            try:
                count = self.collection.count()
            except ChromaError as exc:
                # a kill in the middle of an add can also leave the shadow's files behind its
                # log, and Chroma then refuses the collection ("Failed to apply logs to the
                # hnsw segment writer", "Error deserializing pickle"): what it holds cannot be
                # read back
                msg = " ".join(str(exc).split())
                why = ("Chroma could not open the shadow a crashed run left ("
                       f"{msg[-120:] or type(exc).__name__})")
            else:
                start = resume_point(count, self.src.n_rows, self.job.batch_size)
                self._resumed_batch = count > start  # the interrupted batch is partly there
                return start
        drop_collection(self.client, self.address, self.shadow)
        self.restarted = f"{why}; it was dropped"
        return None

    def write_unit(self, out, got, shard, start):
        """Gather the batch (a copy: ``out`` is reused once this returns) and ``add`` what is
        gathered once it holds ``add_rows`` records or the commit clock is due. Of a batch a
        crashed run had begun (records are added in order, so only the first one resumed), only
        the records it had not added yet: ``upsert`` over the records already there cost five
        times an ``add`` of them (8,192 768-d records, 3,000 present: 53 s of CPU against
        11 s)."""
        if self._resumed_batch:
            self._resumed_batch = False
            _use(self)
            present = set(self.collection.get(ids=list(got["ids"]), include=[])["ids"])
            keep = [k for k, i in enumerate(got["ids"]) if i not in present]
            if len(keep) < len(got["ids"]):
                out, got = out[keep], {
                    key: (None if got.get(key) is None else [got[key][k] for k in keep])
                    for key in ("ids", "documents", "metadatas")}
        self._pending.append((np.array(out, dtype=np.float32), got))
        if sum(len(o) for o, _ in self._pending) >= self.add_rows or self._clock.due():
            self._add_pending()

    def _add_pending(self):
        """``add`` the gathered records, in pieces of Chroma's largest batch."""
        if not self._pending:
            return
        out = np.concatenate([o for o, _ in self._pending])
        got = {key: (None if any(g.get(key) is None for _, g in self._pending)
                     else [x for _, g in self._pending for x in g[key]])
               for key in ("ids", "documents", "metadatas")}
        self._pending = []
        step = self._max_batch
        _use(self)
        for lo in range(0, len(out), step):
            self.collection.add(ids=got["ids"][lo:lo + step], embeddings=out[lo:lo + step],
                                documents=_part(got["documents"], lo, step),
                                metadatas=_part(got["metadatas"], lo, step))
        self._clock.reset()
        if self.address.path is not None and TRIM_EACH_ADD:
            release_freed_memory()

    def finish(self):
        self._add_pending()
        return int(self.collection.count())

    def fetch(self, positions, rows):
        ids = [r["id"] for r in rows]
        _use(self)
        got = self.collection.get(ids=ids, include=_INCLUDE)
        where = {i: k for k, i in enumerate(got["ids"])}
        if len(where) != len(ids):
            raise StoreError(f"{self.display}: verification failed: records are missing from "
                             "the translation; it was not published.")
        order = [where[i] for i in ids]
        vecs = np.asarray(got["embeddings"], dtype=np.float32)[order]
        return vecs, [self.src.row(got, k) for k in order]

    def publish(self, replace, stamp=None):
        """The shadow stamped (its metadata, marked :data:`PUBLISHING`), then an existing output
        renamed to the backup, then the shadow to the output."""
        name, bname = self.address.name, backup_name(self.address.name)
        backup = None
        exists = self.exists()
        if exists and not replace:
            raise StoreError(f"{self.display}: exists; pass --replace.")
        if stamp is not None:
            _stamp_collection(self.client, self.shadow, pending_stamp(stamp, exists))
        self.publishing = True
        kill_point("publishing")
        if exists:
            if bname in _names(self.client):
                drop_collection(self.client, self.address, bname)
            self.client.get_collection(name, embedding_function=None).modify(name=bname)
            backup = self.address.with_name(bname)
            kill_point("backed-up")
        self.client.get_collection(self.shadow, embedding_function=None).modify(name=name)
        self._collection = None  # opened again by its new name where needed
        self._name = name
        return backup

    def end_publish(self, stamp):
        """The output's stamp without its :data:`PUBLISHING` mark."""
        _stamp_collection(self.client, self.address.name, final_stamp(stamp))

    def discard(self):
        shadow = getattr(self, "shadow", None)
        if shadow and shadow in _names(self.client):
            drop_collection(self.client, self.address, shadow)

    def close(self):
        if self.phases is not None:  # both clients: their indexes are not needed any more
            self.phases.release()


@_edge
def restore(address):
    if _breaks_rule(address.name):
        raise AddressError(f"{address}: {address.name[:80]!r} is not a Chroma collection name; "
                           f"{_RULE}.")
    client = _client(address)
    name, bname = address.name, backup_name(address.name)
    try:
        with lock_for(address, address.path):
            names = _names(client)
            if bname not in names:
                raise StoreNotFoundError(
                    f"{address}: no backup collection {bname[:80]} to restore; a backup is kept "
                    "only by `skalign translate --replace`.")
            swap = f"{name}_skalign_swap"
            if name in names:
                client.get_collection(name, embedding_function=None).modify(name=swap)
            client.get_collection(bname, embedding_function=None).modify(name=name)
            if swap in _names(client):
                client.get_collection(swap, embedding_function=None).modify(name=bname)
    finally:
        _close(client)
    return address.with_name(bname)


# ------------------------------------------------------------------------- provenance stamp
def _stamp_client(address):
    """A client of the collection's database, or ``None`` where no collection ``address``
    names can be there (nothing is opened, so nothing is created)."""
    if address.path is not None:
        if not _is_store(address.path):
            return None
        names = _catalogued_names(address.path)
        if names is not None and address.name not in names:
            return None
    return _client(address)


@_edge
def read_stamp(address):
    """The provenance stamp in the metadata of the collection at ``address``, or ``None``
    (no such collection, no stamp, or not one skalign can read)."""
    from chromadb.errors import NotFoundError

    if _breaks_rule(address.name):
        return None
    client = _stamp_client(address)
    if client is None:
        return None
    try:
        try:
            metadata = client.get_collection(address.name, embedding_function=None).metadata
        except NotFoundError:
            return None
    finally:
        _close(client)
    try:
        stamp = json.loads((metadata or {}).get(STAMP_KEY) or "null")
    except (TypeError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


@_edge
def write_stamp(address, stamp):
    """Record ``stamp`` (JSON text under :data:`STAMP_KEY`) in the metadata of the collection at
    ``address``, its other keys kept (:func:`_stamp_collection`)."""
    client = _client(address)
    try:
        _stamp_collection(client, address.name, stamp)
    finally:
        _close(client)


def _stamp_collection(client, name, stamp):
    """Record ``stamp`` in the metadata of the collection ``name``, its other keys kept.

    Chroma's ``modify`` replaces the whole metadata and its Python client refuses any metadata
    holding ``hnsw:space``, even unchanged (``CollectionCommon._validate_modify_request``), while
    the key is part of the collection's metadata from its creation: dropping it would change
    what ``collection.metadata`` says. Where the metadata holds it, it is kept unchanged and
    written with the call ``modify`` makes after that check (the client's ``_modify``, the same
    request to the Rust core or the server); a client without one records no stamp."""
    collection = client.get_collection(name, embedding_function=None)
    metadata = dict(collection.metadata or {})
    metadata[STAMP_KEY] = json.dumps(stamp, sort_keys=True)
    if "hnsw:space" not in metadata:
        collection.modify(metadata=metadata)
        return
    modify = getattr(client, "_modify", None)
    if modify is None:
        return
    try:
        from chromadb.api.types import validate_metadata
    except ImportError:
        pass
    else:
        validate_metadata(metadata)
    modify(id=collection.id, new_metadata=metadata)
