"""Finishing a publish of a pgvector output that a killed run left: the same command run again
finds it (:func:`recover_publish`, which the translation pipeline asks first) and completes it;
and :func:`restore`, the swap of a table and its backup."""

from __future__ import annotations

from contextlib import contextmanager

from ...exceptions import StoreError
from ..journal import PUBLISHING, Interrupted, final_stamp
from .indexes import (
    _mapped,
    _schema_of,
    _split,
    _table_oid,
    derived_name,
)
from .store import (
    STAMP_PREFIX,
    _advisory_lock,
    _comment,
    _connect,
)

__all__ = ["recover_publish", "restore"]


@contextmanager
def recover_publish(address, match):
    """Under the output's advisory lock: the table at ``address`` where its stamp is still
    marked :data:`PUBLISHING` (a run killed after its publish committed) and satisfies
    ``match``, as an :class:`~skalign._stores.journal.Interrupted` for the caller to finish;
    ``None`` otherwise (another job's mark is removed here: its publish is complete). Nothing
    can be half published: the publish is one transaction."""
    import json

    from psycopg import sql

    try:
        conn = _connect(address)
    except StoreError:  # said again by the translation's own checks
        yield None
        return
    try:
        try:
            with _mapped(address, "cannot read the output table's comment"):
                given, table = _split(address.name, address)
                schema, _ = _schema_of(conn, given, address)
                oid = _table_oid(conn, schema, table)
                text = None if oid is None else conn.execute(
                    "SELECT obj_description(%s, 'pg_class')", (oid,)).fetchone()[0]
        except StoreError:
            text = None
        try:
            stamp = json.loads(text[len(STAMP_PREFIX):]) \
                if text and text.startswith(STAMP_PREFIX) else None
        except (ValueError, RecursionError):
            stamp = None
        if isinstance(stamp, dict) and isinstance(stamp.get(PUBLISHING), dict):
            with _mapped(address, "cannot finish the output's publish"):
                _advisory_lock(conn, address, schema, table)
                fresh = conn.execute("SELECT obj_description(%s, 'pg_class')",
                                     (oid,)).fetchone()[0]
            if fresh != text:  # finished by another run meanwhile
                stamp = None
        if not isinstance(stamp, dict) or not isinstance(stamp.get(PUBLISHING), dict):
            yield None
            return
        ident = sql.Identifier(schema, table)
        backup = None
        if stamp[PUBLISHING].get("backup"):
            bname = derived_name(table, "backup")
            backup = address.with_name(f"{given}.{bname}" if given else bname)

        def finish(final):
            with _mapped(address, "cannot stamp the output table"):
                _comment(conn, ident, final)

        if match(stamp):
            yield Interrupted(stamp, backup, finish)
        else:
            finish(final_stamp(stamp))
            yield None
    finally:
        conn.close()


def restore(address):
    """Swap the table and its backup (``skalign restore``), in one transaction; return the
    backup's address."""
    from psycopg import sql

    schema, table = _split(address.name, address)
    bname, swap = derived_name(table, "backup"), derived_name(table, "swap")
    qual = (lambda n: f"{schema}.{n}" if schema else n)
    conn = _connect(address)
    try:
        with _mapped(address, "cannot restore the backup", "the address's user must own the "
                     "table and its backup"):
            where, _ = _schema_of(conn, schema, address)
            named = (lambda n: sql.Identifier(where, n))
            if _table_oid(conn, where, bname) is None:
                raise StoreError(f"{address}: no backup table {bname!r} to restore; a backup is "
                                 "kept only by `skalign translate --replace`.")
            with conn.transaction():  # one transaction: readers see the old or the new, never none
                present = _table_oid(conn, where, table) is not None
                if present:
                    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                        named(table), sql.Identifier(swap)))
                conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    named(bname), sql.Identifier(table)))
                if present:
                    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                        named(swap), sql.Identifier(bname)))
    finally:
        conn.close()
    return address.with_name(qual(bname))
