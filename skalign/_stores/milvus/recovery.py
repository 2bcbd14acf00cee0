"""Finishing a publish of a Milvus output that a killed run left: the same command run again
finds it (:func:`recover_publish`, which the translation pipeline asks first) and completes it."""

from __future__ import annotations

import re
from contextlib import contextmanager

from ..databases.common import backup_name, shadow_prefix
from ..journal import PUBLISHING, Interrupted, final_stamp
from .names import FOLDER, STAMP_KEY, _edge, aliases, client, parse_stamp, properties, set_stamp

__all__ = ["recover_publish"]


def _is_shadow(address, name):
    prefix = shadow_prefix(address.name)
    return name.startswith(prefix) and re.fullmatch("[0-9a-f]{12}", name[len(prefix):]) is not None


def _pending(conn, address):
    """``{shadow: stamp}`` of the output's shadows whose stamps are marked
    :data:`PUBLISHING`."""
    found = {}
    for c in conn.list_collections():
        if _is_shadow(address, c):
            stamp = parse_stamp(properties(conn, c).get(STAMP_KEY))
            if stamp is not None and isinstance(stamp.get(PUBLISHING), dict):
                found[c] = stamp
    return found


@contextmanager
@_edge
def recover_publish(address, match):
    """Under the output's lock, finish a publish a killed run left (the stamp of a shadow
    marked :data:`PUBLISHING`): where the output's name resolves to nothing (a real collection
    replaced was renamed to its backup), the aliases are made (the backup's to that collection,
    the name's to the shadow). Yield an :class:`~skalign._stores.journal.Interrupted` where the
    output's name resolves to that shadow and the stamp satisfies ``match`` (the caller
    finishes), else ``None`` (another job's publish is finished here)."""
    if address.path is not None and not FOLDER.is_store(address.path):
        yield None  # no database: nothing to finish, nothing created
        return
    conn = client(address)
    if not _pending(conn, address):
        yield None  # the common case: no lock taken
        return
    name, bname = address.name, backup_name(address.name)
    with FOLDER.writer_lock(address):
        found = _pending(conn, address)
        al = aliases(conn)
        target = al.get(name) or (name if conn.has_collection(name) else None)
        if target is None and found:
            shadow = next((c for c, st in found.items() if match(st)), next(iter(found)))
            old = f"{bname}_{shadow.rsplit('_', 1)[1]}"
            if conn.has_collection(old) and old not in al.values():
                if bname in al:
                    conn.alter_alias(old, bname)
                else:
                    conn.create_alias(old, bname)
            conn.create_alias(shadow, name)
            target = shadow
        stamp = found.get(target)
        if stamp is None:
            yield None
            return
        backup = address.with_name(bname) if stamp[PUBLISHING].get("backup") else None

        def finish(final):
            set_stamp(conn, target, final)

        if match(stamp):
            yield Interrupted(stamp, backup, finish)
        else:
            finish(final_stamp(stamp))
            yield None
