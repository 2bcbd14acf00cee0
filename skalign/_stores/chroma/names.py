"""Chroma's names, folders and errors: the naming rule checked before a client is opened, the
catalogue of a persistent folder read without one (so that reading never creates engine files),
and chromadb's exceptions turned into one-line :class:`~skalign.exceptions.StoreError`
exceptions at the backend's edge."""

from __future__ import annotations

import ipaddress
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from ...exceptions import AddressError, StoreError, StoreNotFoundError
from ..databases.common import LocalFolder, backup_name
from ..databases.edge import EngineEdge, one_line

STAMP_KEY = "skalign"

#: Chroma's catalogue: the file that makes a folder a Chroma store
CATALOGUE = "chroma.sqlite3"

#: The database a client opens (chromadb's defaults), whose collections the catalogue lists
DEFAULT_TENANT, DEFAULT_DATABASE = "default_tenant", "default_database"

#: Collection names a "no such collection" message lists at most
LISTED_NAMES = 5

#: Characters skalign adds to an output's name for its shadow (``_skalign_`` and 12 hex digits,
#: the longest of the names it derives: the backup adds 15, the restore's swap 13)
SHADOW_SUFFIX = 21

#: Chroma's longest collection name
MAX_NAME = 512

#: Packages whose exceptions are Chroma's (its HTTP client's included)
ENGINE_PACKAGES = ("chromadb", "httpx", "httpcore", "requests", "urllib3")


# ------------------------------------------------------------------------- engine errors
def _classify(address, exc, msg):
    """The :class:`StoreError` that says what Chroma's ``exc`` means for ``address``."""
    kind = type(exc).__name__
    if kind in ("NotFoundError", "InvalidCollectionException", "CollectionNotFoundError") or (
            "does not exist" in msg):
        return StoreNotFoundError(f"{address}: Chroma says: {msg}; check the collection's name.")
    if "Validation error: name" in msg or kind == "InvalidCollectionNameError":
        return AddressError(f"{address}: Chroma refuses the collection name ({msg}).")
    if kind in ("AuthorizationError", "AuthenticationError") or "401" in msg or "403" in msg:
        return StoreError(f"{address}: the Chroma server refused the credentials ({msg}); check "
                          "USER:PASSWORD.")
    return StoreError(f"{address}: Chroma failed ({msg}).")


_EDGE = EngineEdge(ENGINE_PACKAGES, _classify, "Chroma")
_engine_errors, _edge, _edges = _EDGE.errors, _EDGE.edge, _EDGE.edges
_one_line = one_line


# ------------------------------------------------------------------------ names and folders
#: Chroma's rule for a collection name (checked before anything is written: the shadow's longer
#: name passes it, so a short output name failed only at the final rename, after all the work)
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")
#: Chroma's rule for a collection name, as its messages give it
_RULE = ("use 3 to 512 letters, digits, '.', '_' or '-', starting and ending with a letter or "
         "digit, no '..', not an IP address")


def _breaks_rule(name):
    """Whether Chroma refuses ``name`` as a collection name."""
    if not _NAME.fullmatch(name) or ".." in name:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_name(address):
    """Refuse an output name Chroma would refuse, for the name and every name derived from it
    (the shadow's is the longest): an :class:`AddressError` naming Chroma's rule."""
    name = address.name
    if _breaks_rule(name):
        raise AddressError(f"{address}: {name[:80]!r} is not a Chroma collection name; {_RULE}.")
    if len(name) + SHADOW_SUFFIX > MAX_NAME and not name.endswith(backup_name("")):
        # (a backup's name is only probed: no shadow of it is made)
        raise AddressError(f"{address}: the collection name has {len(name)} characters; an "
                           f"output's may have at most {MAX_NAME - SHADOW_SUFFIX} (Chroma allows "
                           f"{MAX_NAME}, skalign adds {SHADOW_SUFFIX} for its shadow).")


FOLDER = LocalFolder("Chroma", "chroma", CATALOGUE)
_is_store, _check_store = FOLDER.is_store, FOLDER.check_store


def _listed(names, total=None):
    """A few of ``names`` for a message (``total``: how many there are, where ``names`` are
    only some of them)."""
    names = sorted(names)
    total = len(names) if total is None else total
    shown = ", ".join(repr(n[:60]) for n in names[:LISTED_NAMES]) or "none"
    return shown + (f", … ({total} in all)" if total > LISTED_NAMES else "")


def _not_found(address, names, total=None):
    return StoreNotFoundError(f"{address}: no collection {address.name[:80]!r} (collections: "
                              f"{_listed(names, total)}); check the name.")


def _catalogued_names(folder):
    """The collection names of a persistent folder's catalogue (read only), or ``None`` where it
    cannot be read."""
    rows = _catalogue(folder, "SELECT c.name FROM collections c JOIN databases d ON "
                      "c.database_id = d.id WHERE d.name = ? AND d.tenant_id = ?",
                      (DEFAULT_DATABASE, DEFAULT_TENANT))
    return None if rows is None else [str(r[0]) for r in rows]



_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _catalogue(folder, sql, params=()):
    """The rows of ``sql`` on a persistent Chroma folder's catalogue (``chroma.sqlite3``, read
    only), or ``None`` where it cannot be read."""
    db = Path(folder) / "chroma.sqlite3"
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as con:
            return con.execute(sql, params).fetchall()
    except (sqlite3.Error, OSError, ValueError):
        return None


def segment_folders(folder):
    """``{segment id: collection id}`` of the vector segments a persistent Chroma folder's
    catalogue lists, or ``None`` where it cannot be read."""
    rows = _catalogue(folder, "SELECT id, collection FROM segments WHERE scope = 'VECTOR'")
    return None if rows is None else {str(seg): str(col) for seg, col in rows}


def vector_segments(folder, name):
    """The ids of the vector segments of collection ``name`` in a persistent folder's catalogue
    (empty where it cannot be read)."""
    rows = _catalogue(folder, "SELECT s.id FROM segments s JOIN collections c ON "
                      "s.collection = c.id WHERE c.name = ? AND s.scope = 'VECTOR'", (name,))
    return [str(r[0]) for r in rows or []]


def torn_index(folder, name):
    """What is inconsistent in the HNSW files of collection ``name`` in a persistent folder
    (:func:`~skalign._stores.chroma.hnsw_files.hnsw_fault`), or ``None`` where they agree, where
    Chroma has not written them yet, or where the catalogue cannot be read (Chroma says what is
    wrong then)."""
    from .hnsw_files import hnsw_fault

    for seg in vector_segments(folder, name):
        path = Path(folder) / seg
        if _UUID.fullmatch(seg) and path.is_dir() and any(path.iterdir()):
            fault = hnsw_fault(path)
            if fault:
                return fault
    return None


def drop_collection(client, address, name):
    """``delete_collection``, and in a persistent folder its vector segment's files too.

    Chroma 1.x's local mode deletes a collection from its catalogue but leaves the folder of
    its vector segment (the HNSW index with every embedding: about 620 MB at 200,000 768-d
    records) on the disk, for a garbage collector that only its distributed deployment runs
    (chroma-core/chroma#5259). The shadow of a crashed run, an old backup and a failed
    translation would each leave one. The folders removed are those the catalogue listed for
    this collection before the delete and no longer lists after it; a server's folder
    (``chroma+http://``) is the server's to clean."""
    folder = address.path
    before = segment_folders(folder) if folder is not None else None
    collection_id = None
    if before is not None:
        try:
            collection_id = str(client.get_collection(name, embedding_function=None).id)
        except Exception:  # gone already: delete_collection below says so
            collection_id = None
    client.delete_collection(name)
    if before is None or collection_id is None:
        return
    after = segment_folders(folder)
    if after is None:  # the catalogue unreadable now: nothing is known to be unowned
        return
    for seg, col in before.items():
        path = Path(folder) / seg
        if col == collection_id and seg not in after and _UUID.fullmatch(seg) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


