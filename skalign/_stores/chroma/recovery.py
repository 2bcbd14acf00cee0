"""Finishing a publish of a chroma output that a killed run left: the same command run again
finds it (:func:`recover_publish`, which the translation pipeline asks first) and completes it."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

from ..databases.common import (
    backup_name,
    shadow_prefix,
)
from ..journal import (
    PUBLISHING,
    Interrupted,
    final_stamp,
)
from .names import (
    DEFAULT_DATABASE,
    DEFAULT_TENANT,
    FOLDER,
    STAMP_KEY,
    _catalogue,
    _edge,
    _is_store,
)
from .store import (
    _client,
    _close,
    _has,
    _names,
    _stamp_collection,
)

__all__ = ["recover_publish"]


def _pending(text):
    """The stamp in the metadata value ``text`` where it is marked :data:`PUBLISHING`."""
    try:
        stamp = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get(PUBLISHING), dict) \
        else None


def _is_shadow(address, name):
    prefix = shadow_prefix(address.name)
    return name.startswith(prefix) and re.fullmatch("[0-9a-f]{12}", name[len(prefix):])


def _pending_stamps(client, address):
    """``{name: stamp}`` of the output's collection and its shadows whose stamps are marked
    :data:`PUBLISHING`: a local folder's read from its catalogue (no client opened), a server's
    through ``client``."""
    if client is None:
        rows = _catalogue(address.path, "SELECT c.name, m.str_value FROM collections c JOIN "
                          "collection_metadata m ON m.collection_id = c.id JOIN databases d ON "
                          "c.database_id = d.id WHERE d.name = ? AND d.tenant_id = ? AND "
                          "m.key = ?", (DEFAULT_DATABASE, DEFAULT_TENANT, STAMP_KEY)) or []
    else:
        rows = [(n, (client.get_collection(n, embedding_function=None).metadata or {})
                 .get(STAMP_KEY)) for n in _names(client)
                if n == address.name or _is_shadow(address, n)]
    found = {}
    for name, text in rows:
        stamp = _pending(text) if name == address.name or _is_shadow(address, name) else None
        if stamp is not None:
            found[str(name)] = stamp
    return found


@contextmanager
@_edge
def recover_publish(address, match):
    """Under the output's lock, finish a publish a killed run left (its stamp, in the shadow's
    or the output's metadata, marked :data:`PUBLISHING`): a shadow so stamped where no
    collection has the output's name is renamed to it (the backup was kept before). Yield an
    :class:`~skalign._stores.journal.Interrupted` where that stamp satisfies ``match`` (the
    caller finishes), else ``None`` (another job's publish is finished here)."""
    if address.path is not None and not _is_store(address.path):
        yield None
        return
    if address.path is not None and not _pending_stamps(None, address):
        yield None  # the common case: nothing read but the catalogue, no lock, no client
        return
    with FOLDER.writer_lock(address):
        client = _client(address)
        try:
            found = _pending_stamps(client, address)
            name = address.name
            if name not in found and found and not _has(client, name):
                shadow = next((n for n, st in found.items() if match(st)), next(iter(found)))
                client.get_collection(shadow, embedding_function=None).modify(name=name)
                found = {name: found[shadow]}
            stamp = found.get(name)
            if stamp is None:
                yield None
                return
            backup = address.with_name(backup_name(name)) if stamp[PUBLISHING].get("backup") \
                else None

            def finish(final):
                _stamp_collection(client, name, final)

            if match(stamp):
                yield Interrupted(stamp, backup, finish)
            else:
                finish(final_stamp(stamp))
                yield None
        finally:
            _close(client)
