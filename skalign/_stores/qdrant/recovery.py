"""Finishing a publish of a qdrant output that a killed run left: the same command run again
finds it (:func:`recover_publish`, which the translation pipeline asks first) and completes it."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

from ..databases.common import (
    backup_name,
    shadow_prefix,
)
from ..journal import PUBLISHING, Interrupted, final_stamp
from .names import (
    FOLDER,
    STAMP_KEY,
    _edge,
    _is_store,
    _sidecar,
)
from .store import (
    _aliases,
    _client,
    _finish_stamp,
)

__all__ = ["recover_publish"]


def _marked(stamp):
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get(PUBLISHING), dict) \
        else None


def _local_pending(address):
    """``(shadow, stamp)`` of a local folder's sidecar of the output where its stamp is marked
    :data:`PUBLISHING` and bound to one of the output's shadows, else ``None`` (read without
    a client)."""
    try:
        with open(_sidecar(address, address.name), "rb") as f:
            doc = json.loads(f.read(1 << 16))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("name") != address.name:
        return None
    shadow, stamp = doc.get("collection"), _marked(doc.get("stamp"))
    if stamp is None or not isinstance(shadow, str) or not _is_shadow(address, shadow):
        return None
    return shadow, stamp


def _is_shadow(address, name):
    prefix = shadow_prefix(address.name)
    return name.startswith(prefix) and re.fullmatch("[0-9a-f]{12}", name[len(prefix):]) is not None


def _server_pending(client, address):
    """``{shadow: stamp}`` of the output's shadows on a server whose stamps are marked
    :data:`PUBLISHING`."""
    found = {}
    for c in client.get_collections().collections:
        if _is_shadow(address, c.name):
            metadata = getattr(client.get_collection(c.name).config, "metadata", None) or {}
            try:
                stamp = _marked(json.loads(metadata.get(STAMP_KEY) or "null"))
            except (TypeError, ValueError, AttributeError, RecursionError):
                stamp = None
            if stamp is not None:
                found[c.name] = stamp
    return found


@contextmanager
@_edge
def recover_publish(address, match):
    """Under the output's lock, finish a publish a killed run left (the stamp bound to a shadow
    and marked :data:`PUBLISHING`): where the output's name resolves to nothing (a real
    collection replaced was dropped after its copy), the alias switch is done (the backup's
    alias to the copy, the name's to the shadow). Yield an
    :class:`~skalign._stores.journal.Interrupted` where the output's name resolves to that
    shadow and the stamp satisfies ``match`` (the caller finishes), else ``None`` (another
    job's publish is finished here)."""
    local = address.path is not None
    if local and (not _is_store(address.path) or _local_pending(address) is None):
        yield None  # the common case: one file read, no lock, no client
        return
    from qdrant_client import models as m

    name, bname = address.name, backup_name(address.name)
    with FOLDER.writer_lock(address):
        client = _client(address)
        if local:
            got = _local_pending(address)
            found = {got[0]: got[1]} if got and client.collection_exists(got[0]) else {}
        else:
            found = _server_pending(client, address)
        aliases = _aliases(client)
        target = aliases.get(name) or (name if client.collection_exists(name) else None)
        if target is None and found:
            shadow = next((c for c, st in found.items() if match(st)), next(iter(found)))
            old = f"{bname}_{shadow.rsplit('_', 1)[1]}"
            ops = []
            if client.collection_exists(old) and old not in aliases.values():
                if bname in aliases:
                    ops.append(m.DeleteAliasOperation(delete_alias=m.DeleteAlias(
                        alias_name=bname)))
                ops.append(m.CreateAliasOperation(create_alias=m.CreateAlias(
                    collection_name=old, alias_name=bname)))
            ops.append(m.CreateAliasOperation(create_alias=m.CreateAlias(
                collection_name=shadow, alias_name=name)))
            client.update_collection_aliases(change_aliases_operations=ops)
            target = shadow
        stamp = found.get(target)
        if stamp is None:
            yield None
            return
        backup = address.with_name(bname) if stamp[PUBLISHING].get("backup") else None

        def finish(final):
            _finish_stamp(client, address, target, final)

        if match(stamp):
            yield Interrupted(stamp, backup, finish)
        else:
            finish(final_stamp(stamp))
            yield None
