"""Qdrant: a second named vector of the same collection, for ``--into FIELD``.

The new vector is added to the collection the address names (its alias resolved) with Qdrant's
own ``create_vector_name`` (a server's ``PUT /collections/NAME/vectors/FIELD``, Qdrant 1.18 on;
qdrant-client's local mode, tested with 1.20): no point is copied, every point holds no value
under the new name until one is written, and Qdrant's queries on the other vectors, payloads and
ids are unchanged. It is made with the old vector's distance and element type (what
``create_vector_name`` takes) and then, on a server, the old vector's HNSW, quantization and
on-disk settings (``update_collection`` with a ``VectorParamsDiff``); qdrant-client's local mode
keeps no index and records none of these.

A collection whose vector is *unnamed* is refused: Qdrant can add a named vector beside it
(the unnamed one becomes the vector named ``""``), but from then on returns the vectors of
every point that holds both as ``{"": old, "FIELD": new}`` where an application read one list,
and reports the collection's vectors as named ones: the old field's readers would change. The
route there is a second collection (``skalign migrate`` without ``--into``).

The field's provenance stamp: in a local folder a sidecar beside the collection's own
(:mod:`.names`), keyed by the collection's name and the field; on a server the key
``skalign:FIELD`` of the collection's metadata (the collection's own stamp is ``skalign``).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import unicodedata
from urllib.parse import quote

from ...exceptions import AddressError, StoreError, StoreNotFoundError
from .names import (
    INVALID_NAME_CHARS,
    STAMP_KEY,
    _edge,
    _not_found,
    _write_sidecar,
    sidecar_stamp,
)
from .store import Reader, _aliases, _check_listed, _client, _exists, _server_stamp, _target

__all__ = ["INDEX_SETTINGS", "MAX_VECTOR_NAME_BYTES", "add_field", "add_vector",
           "check_vector_name", "drop_field_command", "field_stamp_key", "field_state",
           "read_field_stamp", "vector_fields", "write_field_stamp"]

#: the old vector's settings the new one gets on a server (``VectorParamsDiff``'s fields)
INDEX_SETTINGS = ("hnsw_config", "quantization_config", "on_disk", "memory")
#: Qdrant's longest vector name, in bytes (a server keeps each vector in a folder of that name)
MAX_VECTOR_NAME_BYTES = 200


def field_stamp_key(field):
    """The key of the collection's metadata (a server) holding the stamp of vector ``field``;
    also the sidecar's key beside the collection's name (a local folder)."""
    return f"{STAMP_KEY}:{field}"


def _shown(name):
    return ascii(name[:80])


def check_vector_name(address, field):
    """Refuse, before anything is created, a vector name Qdrant refuses or skalign does not
    write: Qdrant's rules (1 to 200 bytes, none of ``< > : " / \\ | ? *``, not ``.`` or ``..``)
    and no control or format character (which a terminal or a log would act on)."""
    if not isinstance(field, str) or not field:
        raise AddressError(f"{address}: --into needs a vector name (1 to "
                           f"{MAX_VECTOR_NAME_BYTES} bytes), got {_shown(str(field))}.")
    bad = [c for c in field if unicodedata.category(c) in ("Cc", "Cf", "Cs")]
    if bad:
        raise AddressError(f"{address}: the vector name {_shown(field)} holds the control "
                           f"character {ascii(bad[0])}; name the new vector without one.")
    chars = [c for c in INVALID_NAME_CHARS if c in field]
    if chars or field in (".", ".."):
        raise AddressError(f"{address}: {_shown(field)} is not a Qdrant vector name; it may "
                           "not be '.' or '..' nor hold any of " + " ".join(
                               repr(c) for c in INVALID_NAME_CHARS[:9]) + ".")
    if len(field.encode("utf-8", "surrogatepass")) > MAX_VECTOR_NAME_BYTES:
        raise AddressError(f"{address}: the vector name {_shown(field)} has more than "
                           f"{MAX_VECTOR_NAME_BYTES} bytes, Qdrant's limit.")


def _config_vectors(client, collection):
    """The collection's dense vectors' parameters ``{name: VectorParams}``; ``None`` where its
    one vector is unnamed."""
    vectors = client.get_collection(collection).config.params.vectors
    return dict(vectors) if isinstance(vectors, dict) else None


def _distance(params):
    return str(getattr(params.distance, "value", params.distance))


@_edge
def vector_fields(address):
    """``{name: width}`` of every dense vector of the collection at ``address``, in Qdrant's
    order (``{None: width}`` where its one vector is unnamed); ``skalign info`` lists them."""
    client, collection = _open(address)
    params = client.get_collection(collection).config.params.vectors
    if not isinstance(params, dict):
        return {None: int(params.size)}
    return {n: int(p.size) for n, p in params.items()}


def _open(address):
    """The client of the collection at ``address`` and the collection its name resolves to
    (checked to exist; nothing created)."""
    _check_listed(address)
    client = _client(address, create=False)
    if not _exists(client, address.name):
        names = [c.name for c in client.get_collections().collections]
        raise _not_found(address, names + list(_aliases(client)))
    return client, _aliases(client).get(address.name, address.name)


@_edge
def field_state(address, field):
    """The width of the vector ``field`` where skalign added it (its stamp is there: written
    before the vector is made), ``None`` where the collection has no vector or
    sparse vector named ``field``; a vector skalign did not add is refused."""
    client, collection = _open(address)
    params = client.get_collection(collection).config.params
    sparse = params.sparse_vectors or {}
    dense = params.vectors if isinstance(params.vectors, dict) else {}
    if field in sparse:
        raise StoreError(f"{address}: the collection has a sparse vector {_shown(field)} that "
                         "skalign did not add; --into adds a new vector: choose another name.")
    have = dense.get(field)
    if have is None:
        return None
    if _stored_field_stamp(address, field) is None:
        raise StoreError(f"{address}: the collection already has a vector {_shown(field)} "
                         f"({have.size}-d) that skalign did not add; --into adds a new vector: "
                         "choose another name.")
    return int(have.size)


def add_field(address, field, dim, like):
    """Add the empty named vector ``field``, ``dim`` wide, beside ``like`` (see the module's
    docstring): its stamp slot written first (``{}``, what :func:`field_state` reads as
    skalign's mark), then the vector; a rerun after a kill between the two adds it then."""
    address = dataclasses.replace(address, column=like) if like is not None else address
    write_field_stamp(address, field, {})
    add_vector(address, field, dim)


def drop_field_command(address, field):
    """The user's own command that drops the named vector ``field`` (qdrant-client's
    ``delete_vector_name``; a server's ``DELETE /collections/NAME/vectors/FIELD``)."""
    name = address.name
    if address.path is not None:  # (JSON strings are Python literals: no quote of the shell's)
        code = (f"from qdrant_client import QdrantClient; QdrantClient(path="
                f"{json.dumps(str(address.path))}).delete_vector_name({json.dumps(name)}, "
                f"{json.dumps(field)})")
        return f"python -c {shlex.quote(code)}"
    url = f"{address.url}/collections/{quote(name, safe='')}/vectors/{quote(field, safe='')}"
    return f"curl -X DELETE -H 'api-key: YOUR_KEY' {shlex.quote(url)}"


@_edge
def add_vector(address, field, dim):
    """Add the named vector ``field``, ``dim`` wide, to the collection at ``address`` beside
    the vector the address reads (see the module's docstring); return ``False`` where a vector
    of that name, width and distance is there already (a rerun after a kill), ``True`` where it
    was added now.

    Raises
    ------
    StoreError
        The old vector is unnamed, a multi-vector, or ``field`` itself; ``field`` names a
        sparse vector, or a dense one of another width or distance.
    """
    from qdrant_client import models as m

    check_vector_name(address, field)
    reader = Reader(address)
    client = reader.client
    old = reader.params
    if reader.vector is None:
        raise StoreError(
            f"{address}: the collection's vector is unnamed; Qdrant can add a named vector "
            "beside it, but then returns each point's vectors as a dict {'': old, "
            f"{_shown(field)}: new}} where your application reads one list: skalign does not "
            "change that for you. Migrate into a second collection instead (skalign migrate "
            "without --into).")
    if field == reader.vector:
        raise StoreError(f"{address}: --into {_shown(field)} is the vector the address reads; "
                         "name a new vector (the old one is never written).")
    if getattr(old, "multivector_config", None) is not None:
        raise StoreError(f"{address}: the vector {_shown(reader.vector)} is a multi-vector; "
                         "--into needs one vector per point.")
    collection = _aliases(client).get(address.name, address.name)
    info = client.get_collection(collection).config.params
    if field in (info.sparse_vectors or {}):
        raise StoreError(f"{address}: the collection has a sparse vector {_shown(field)}; "
                         "name another vector with --into.")
    have = _config_vectors(client, collection).get(field)
    if have is not None:
        if int(have.size) != int(dim) or have.distance != old.distance \
                or have.multivector_config is not None:
            raise StoreError(
                f"{address}: the collection has a vector {_shown(field)} already "
                f"({have.size} wide, {getattr(have.distance, 'value', have.distance)}), not "
                f"the {dim}-wide {getattr(old.distance, 'value', old.distance)} one --into "
                "makes; name another vector.")
        return False
    if not hasattr(client, "create_vector_name"):
        raise StoreError(f"{address}: this qdrant-client cannot add a vector to a collection "
                         "(create_vector_name, qdrant-client 1.18 on); upgrade it.")
    datatype = getattr(old, "datatype", None)
    try:
        client.create_vector_name(collection, field, m.DenseVectorNameConfig(
            dense=m.DenseVectorConfig(size=int(dim), distance=old.distance, datatype=None
                                      if datatype is None else m.VectorStorageDatatype(
                                          getattr(datatype, "value", datatype)))), wait=True)
    except Exception as exc:
        if getattr(exc, "status_code", None) not in (404, 405):
            raise
        # the collection exists (read above): the server has no such endpoint
        raise StoreError(f"{address}: this Qdrant server cannot add a vector to a collection "
                         "(Qdrant 1.18 on); upgrade it, or migrate into a second collection "
                         "(skalign migrate without --into).") from None
    diff = {k: getattr(old, k, None) for k in INDEX_SETTINGS}
    diff = {k: v for k, v in diff.items() if v is not None}
    if diff and address.path is None:  # (the local mode keeps no index: nothing to set)
        client.update_collection(collection, vectors_config={field: m.VectorParamsDiff(**diff)})
    return True


def read_field_stamp(address, field):
    """The stamp of the vector ``field`` of the collection at ``address`` (``None``: none, or
    only the mark that skalign added it)."""
    return _stored_field_stamp(address, field) or None


def _stored_field_stamp(address, field):
    """What the field's stamp slot holds: ``{}`` once skalign began adding the field, the
    stamp once a step wrote it, ``None`` where skalign never added it."""
    key = field_stamp_key(field)
    if address.path is not None:
        return sidecar_stamp(address, f"{address.name}\0{key}", _target(address, address.name))
    return _read_server_field_stamp(address, key)


@_edge
def _read_server_field_stamp(address, key):
    client = _client(address)
    target = _aliases(client).get(address.name, address.name)
    if not client.collection_exists(target):
        return None
    metadata = getattr(client.get_collection(target).config, "metadata", None) or {}
    try:
        stamp = json.loads(metadata.get(key) or "null")
    except (TypeError, ValueError, AttributeError):
        return None
    return stamp if isinstance(stamp, dict) else None


@_edge
def write_field_stamp(address, field, stamp):
    """Record ``stamp`` as the provenance of the vector ``field`` of the collection at
    ``address``."""
    key = field_stamp_key(field)
    if address.path is not None:
        target = _target(address, address.name)
        if target is None:
            raise StoreNotFoundError(f"{address}: no collection {_shown(address.name)} to "
                                     "stamp.")
        _write_sidecar(address, f"{address.name}\0{key}", target, stamp)
        return
    client = _client(address)
    _server_stamp(client, _aliases(client).get(address.name, address.name), stamp, key=key)
