"""Finishing a publish of a DuckDB output that a killed run left: the same command run again
finds it (:func:`recover_publish`, which the translation pipeline asks first) and completes it;
and :func:`restore`, the swap of a table and its backup."""

from __future__ import annotations

from contextlib import contextmanager

from ...exceptions import StoreError
from ..databases.common import backup_name, lock_for
from ..journal import PUBLISHING, Interrupted, final_stamp
from .connect import checkpoint, errors, ident, open_database, qualified
from .indexes import create_indexes, move_table
from .store import columns_of, parse_stamp, set_comment, table_comment, table_exists

__all__ = ["recover_publish", "restore"]


@contextmanager
def recover_publish(address, match):
    """Under the output's lock: the table at ``address`` where its stamp is still marked
    :data:`PUBLISHING` (a run killed after its publish committed) and satisfies ``match``, as
    an :class:`~skalign._stores.journal.Interrupted` for the caller to finish; ``None``
    otherwise (another job's mark is removed here: its publish is complete). Nothing can be
    half published: the publish is one transaction."""
    if address.path is None or not address.path.is_file():
        yield None
        return
    try:
        db = open_database(address)
    except StoreError:  # said again by the translation's own checks
        yield None
        return
    try:
        with errors(address, "cannot read the output table's comment"):
            stamp = parse_stamp(table_comment(db.cursor(), address.name))
        if not isinstance(stamp, dict) or not isinstance(stamp.get(PUBLISHING), dict):
            yield None
            return
        with lock_for(address):
            cur = db.cursor()
            with errors(address, "cannot read the output table's comment"):
                stamp = parse_stamp(table_comment(cur, address.name))
            if not isinstance(stamp, dict) or not isinstance(stamp.get(PUBLISHING), dict):
                yield None  # finished by another run meanwhile
                return
            backup = address.with_name(backup_name(address.name)) \
                if stamp[PUBLISHING].get("backup") else None

            def finish(final):
                with errors(address, "cannot stamp the output table"):
                    set_comment(cur, address.name, final)
                    checkpoint(cur)

            if match(stamp):
                yield Interrupted(stamp, backup, finish)
            else:
                finish(final_stamp(stamp))
                yield None
    finally:
        db.close()


def restore(address):
    """Swap the table and its backup (``skalign restore``), with their indexes, in one
    transaction; return the backup's address."""
    table, bname = address.name, backup_name(address.name)
    swap = f"{table}_skalign_swap"
    db = open_database(address)
    try:
        with errors(address, "cannot restore the backup"), lock_for(address):
            cur = db.cursor()
            if not table_exists(cur, bname):
                raise StoreError(f"{address}: no backup table {bname!r} to restore; a backup "
                                 "is kept only by `skalign translate --replace`.")
            cur.execute("BEGIN")
            try:
                present = table_exists(cur, table)
                names = [c[0] for c in columns_of(cur, bname)]
                if present:
                    current = move_table(cur, table, swap, [c[0] for c in columns_of(cur, table)])
                kept = move_table(cur, bname, table, names)
                if present:
                    cur.execute(f"ALTER TABLE {qualified(swap)} "
                                f"RENAME TO {ident(bname)}")
                create_indexes(cur, table, kept)
                if present:
                    create_indexes(cur, bname, current)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            checkpoint(cur)
    finally:
        db.close()
    return address.with_name(bname)
