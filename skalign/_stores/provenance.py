"""The provenance stamp every output carries, and the names of ``--replace``'s backups.

A stamp is a small JSON object: the model's fingerprint, the source's address (password hidden)
and identity, the row count, the widths, skalign's version and the time. File stores keep it in
a sidecar ``PATH.skalign.json`` beside the output (moved with it to the backup by
``--replace`` and back by ``restore``); databases in their own place (a PostgreSQL ``COMMENT
ON TABLE``, Chroma's collection metadata, a sidecar in Qdrant's folder): each engine's
:meth:`~skalign._stores.engine.Engine.read_stamp` and ``write_stamp``. ``skalign info ADDRESS``
prints it; the pipeline reads it to refuse translating a store twice.
"""

from __future__ import annotations

import math
import time

from ..exceptions import StoreError
from .engine import MAX_STAMP_DEPTH
from .files.shadow import sidecar_path
from .registry import engine

__all__ = ["check_stamp", "make_stamp", "move_stamp", "read_stamp", "sidecar_path",
           "write_stamp"]


def make_stamp(model_fp, source, n_rows, d_in, d_out):
    """The stamp of an output translated by the model ``model_fp`` from ``source``."""
    from .._version import __version__

    return {"skalign": __version__, "model": model_fp, "source": str(source),
            "source_identity": repr(source.identity), "rows": int(n_rows), "d_in": int(d_in),
            "d_out": int(d_out), "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}




_NONE = type(None)
_NUMBER = (int, float)
#: the stamp's fields and their types; any may be missing (older stamps lack some) except, in a
#: migration, those ``skalign migrate --continue`` reads (:data:`_MIGRATION_REQUIRED`)
_STAMP_FIELDS = {"skalign": str, "model": str, "source": str, "source_identity": str,
                 "written": str, "rows": int, "d_in": int, "d_out": int, "migration": dict}
_MIGRATION_FIELDS = {"encoder": str, "map": str, "method": (str, _NONE), "encoded_rows": int,
                     "rows": int, "estimate": (dict, _NONE), "random_state": (int, _NONE),
                     "text_field": (str, _NONE)}
_MIGRATION_REQUIRED = ("encoder", "map", "method", "estimate")
_ESTIMATE_FIELDS = {"recall_at_10": _NUMBER, "interval": list, "store_size": int}
_MAX_DEPTH = MAX_STAMP_DEPTH


def _depth(value):
    """The nesting depth of ``value`` (a parsed JSON value), stopping past ``_MAX_DEPTH``."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > _MAX_DEPTH:
                return deepest
            todo += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _numbers_finite(value):
    """Whether every number in ``value`` is finite (the engines' ``json.loads`` takes NaN)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_numbers_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_numbers_finite(v) for v in value)
    return True


def _wrong_field(record, fields, where, required=()):
    """What is wrong with the fields of ``record`` (a dict), or ``None``."""
    for key in required:
        if key not in record:
            return f"its {where}has no {key!r}"
    for key, types in fields.items():
        if key not in record:
            continue
        value = record[key]
        # a bool is an int to isinstance, never a count
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in
                                            (types if isinstance(types, tuple) else (types,))):
            return f"its {where}{key!r} is a {type(value).__name__}"
        if isinstance(value, int) and not isinstance(value, bool) and value < 0 \
                and key != "random_state":
            return f"its {where}{key!r} is negative"
    return None


def check_stamp(stamp, where):
    """Return ``stamp`` if skalign can use it; raise a :class:`StoreError` naming ``where``
    otherwise: not an object, nested deeper than ``_MAX_DEPTH``, a number that is not finite,
    a field of the wrong type, a negative count, a migration without the fields
    ``--continue`` reads."""
    if not isinstance(stamp, dict):
        problem = f"it is a {type(stamp).__name__}, not an object"
    elif _depth(stamp) > _MAX_DEPTH:
        problem = f"it is nested deeper than {_MAX_DEPTH} levels"
    elif not _numbers_finite(stamp):
        problem = "it holds a number that is not finite"
    else:
        problem = _wrong_field(stamp, _STAMP_FIELDS, "")
        migration = stamp.get("migration")
        if problem is None and migration is not None:
            problem = _wrong_field(migration, _MIGRATION_FIELDS, "migration's ",
                                   _MIGRATION_REQUIRED)
            if problem is None and migration.get("estimate") is not None:
                problem = _wrong_field(migration["estimate"], _ESTIMATE_FIELDS,
                                       "migration estimate's ")
    if problem is not None:
        raise StoreError(f"{where}: its provenance stamp is malformed ({problem}): it was not "
                         "written by skalign; remove it, or give another store.")
    return stamp


def read_stamp(address):
    """The stamp of the store at ``address``; ``None`` where it has none (not skalign's output,
    or one written before stamps). A file store's sidecar is read without following a link
    (a link is no stamp) and with bounded nesting.

    Raises
    ------
    StoreError
        A stamp that is malformed (:func:`check_stamp`): one line naming the sidecar or the
        store.
    """
    kept = engine(address)
    try:
        stamp = kept.read_stamp(address)
    except RecursionError:  # the engine's stamp nested past what json.loads can parse
        raise StoreError(f"{address}: its provenance stamp is malformed (nested too deep); "
                         "it was not written by skalign.") from None
    return None if stamp is None else check_stamp(stamp, kept.stamp_place(address))


def write_stamp(address, stamp):
    """Record ``stamp`` as the provenance of the store at ``address``."""
    engine(address).write_stamp(address, stamp)


def move_stamp(output, backup, *, swap=False):
    """After ``--replace`` (the output moved to ``backup``) or a restore (``swap``: the two
    exchanged), move file stores' sidecars the same way; databases' stamps travel with their
    tables and collections."""
    engine(output).move_stamp(output, backup, swap)
