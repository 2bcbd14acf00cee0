"""Qdrant's names, folders, stamps' files and errors: the naming rule checked before a client is
opened, a local folder's catalogue (``meta.json``) read without one (so that reading never
creates engine files), the provenance stamps kept in a local folder, and qdrant-client's
exceptions turned into one-line :class:`~skalign.exceptions.StoreError` exceptions at the
backend's edge."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ...exceptions import AddressError, StoreError, StoreNotFoundError
from ..databases.common import LocalFolder, backup_name
from ..databases.edge import EngineEdge, one_line
from ..journal import write_durably

STAMP_FOLDER = ".skalign-stamps"
#: Servers: the key of the collection's metadata that holds the stamp (JSON text)
STAMP_KEY = "skalign"
#: Local mode: the file that makes a folder a Qdrant store
META_FILE = "meta.json"
#: Collection names a "no such collection" message lists at most
LISTED_NAMES = 5
#: Characters skalign adds to an output's name for its shadow (``_skalign_`` and 12 hex digits,
#: the longest of the names it derives)
SHADOW_SUFFIX = 21
#: Qdrant's longest collection name, in bytes (the server keeps a collection in a folder of
#: that name); characters it refuses in one (qdrant-client's local mode checks the same)
MAX_NAME_BYTES = 255
INVALID_NAME_CHARS = ("<", ">", ":", '"', "/", "\\", "|", "?", "*", "\0", "\x1f")
#: Packages whose exceptions are qdrant-client's (its HTTP and gRPC clients' included)
ENGINE_PACKAGES = ("qdrant_client", "httpx", "httpcore", "grpc", "portalocker", "pydantic",
                   "pydantic_core")


# ------------------------------------------------------------------------- engine errors
def _classify(address, exc, msg):
    """The :class:`StoreError` that says what qdrant-client's ``exc`` means for ``address``."""
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return StoreError(f"{address}: the Qdrant server refused the API key ({msg}); check "
                          "the password of the address (the API key).")
    if status == 404 or "not found" in msg.lower():
        return StoreNotFoundError(f"{address}: Qdrant says: {msg}; check the collection's name.")
    if "Collection name" in msg or "collection name" in msg:
        return AddressError(f"{address}: Qdrant refuses the collection name ({msg}).")
    return StoreError(f"{address}: Qdrant failed ({msg}).")


_EDGE = EngineEdge(ENGINE_PACKAGES, _classify, "Qdrant")
_engine_errors, _edge, _edges = _EDGE.errors, _EDGE.edge, _EDGE.edges
_one_line = one_line


# ------------------------------------------------------------------------ names and folders
def check_name(address):
    """Refuse, before any work, an output name Qdrant would refuse, for the name and the
    shadow's longer one: an :class:`AddressError` naming Qdrant's rule."""
    name = address.name
    bad = [c for c in INVALID_NAME_CHARS if c in name]
    if bad or name in (".", ".."):
        raise AddressError(f"{address}: {name[:80]!r} is not a Qdrant collection name; it may "
                           "not be '.' or '..' nor hold any of " + " ".join(
                               repr(c) for c in INVALID_NAME_CHARS) + ".")
    size = len(name.encode("utf-8", "surrogatepass"))
    if size + SHADOW_SUFFIX > MAX_NAME_BYTES and not name.endswith(backup_name("")):
        # (a backup's name is only probed: no shadow of it is made)
        raise AddressError(f"{address}: the collection name has {size} bytes; an output's may "
                           f"have at most {MAX_NAME_BYTES - SHADOW_SUFFIX} (Qdrant allows "
                           f"{MAX_NAME_BYTES}, skalign adds {SHADOW_SUFFIX} for its shadow).")


FOLDER = LocalFolder("Qdrant", "qdrant", META_FILE)
_is_store, _check_store = FOLDER.is_store, FOLDER.check_store


def _catalogue(folder):
    """``(collections, aliases)`` of a local folder's ``meta.json`` (read only), or ``None``
    where it cannot be read."""
    try:
        with open(Path(folder) / META_FILE, "rb") as f:
            meta = json.load(f)
        collections, aliases = meta.get("collections") or {}, meta.get("aliases") or {}
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(collections, dict) or not isinstance(aliases, dict):
        return None
    return list(collections), dict(aliases)


def _listed(names):
    names = sorted(names)
    shown = ", ".join(repr(n[:60]) for n in names[:LISTED_NAMES]) or "none"
    return shown + (f", … ({len(names)} in all)" if len(names) > LISTED_NAMES else "")


def _not_found(address, names):
    return StoreNotFoundError(f"{address}: no collection {address.name[:80]!r} (collections: "
                              f"{_listed(names)}); check the name.")




def _sidecar(address, name):
    """The local mode's stamp file of collection ``name`` (a hash of the name: any name makes
    a plain file name)."""
    key = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return address.path / STAMP_FOLDER / f"{key}.json"


def sidecar_stamp(address, name, target):
    """The stamp of ``name``'s sidecar where it was written for the collection ``target``
    (the one ``name`` resolves to now), else ``None``."""
    try:
        with open(_sidecar(address, name), "rb") as f:
            doc = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("name") != name \
            or not isinstance(doc.get("stamp"), dict):
        return None
    return doc["stamp"] if target is not None and doc.get("collection") == target else None


def _write_sidecar(address, name, target, stamp):
    folder = address.path / STAMP_FOLDER
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:  # a file there
        raise StoreError(f"{address}: {folder} is not a folder; remove it.") from None
    write_durably(_sidecar(address, name), json.dumps(
        {"name": name, "collection": target, "stamp": stamp}, sort_keys=True).encode())


def _drop_sidecar(address, name):
    try:
        os.unlink(_sidecar(address, name))
    except FileNotFoundError:
        pass


def _move_sidecar(address, name, target, stamp):
    """``name`` now resolves to ``target``, whose stamp is ``stamp`` (``None``: none)."""
    if stamp is None:
        _drop_sidecar(address, name)
    else:
        _write_sidecar(address, name, target, stamp)


