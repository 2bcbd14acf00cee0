"""Finishing a publish of a sqlite-vec output that a killed run left: the same command run
again finds it (:func:`recover_publish`, which the translation pipeline asks first) and
completes it. Nothing can be half published: the publish is one transaction; what may be left
is the stamp's :data:`~skalign._stores.journal.PUBLISHING` mark."""

from __future__ import annotations

from contextlib import contextmanager

from ...exceptions import StoreError
from ..databases.common import backup_name, lock_for
from ..journal import PUBLISHING, Interrupted, final_stamp
from .store import _get_stamp, _parse, _set_stamp
from .tables import EDGE, connect, writing

__all__ = ["recover_publish"]


def _marked(address):
    try:
        stamp = _parse(_get_stamp(connect(address), address.name))
    except StoreError:  # said again by the translation's own checks
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get(PUBLISHING), dict) \
        else None


@contextmanager
def recover_publish(address, match):
    """Under the output's lock: the table at ``address`` where its stamp is still marked
    :data:`PUBLISHING` (a run killed after its publish committed) and satisfies ``match``, as
    an :class:`~skalign._stores.journal.Interrupted` for the caller to finish; ``None``
    otherwise (another job's mark is removed here: its publish is complete)."""
    if not address.path.is_file() or _marked(address) is None:
        yield None
        return
    with lock_for(address):
        stamp = _marked(address)  # again, under the lock: another run may have finished it
        if stamp is None:
            yield None
            return
        backup = address.with_name(backup_name(address.name)) \
            if stamp[PUBLISHING].get("backup") else None

        def finish(final):
            with EDGE.errors(address), writing(connect(address)) as conn:
                _set_stamp(conn, address.name, final)

        if match(stamp):
            yield Interrupted(stamp, backup, finish)
        else:
            finish(final_stamp(stamp))
            yield None
