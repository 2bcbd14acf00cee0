r"""A second vector field of the same store (``--into FIELD``): the new encoder's vectors beside
the old ones, in the same rows, so that no payload, document or metadata is copied and the old
field keeps serving queries until the user drops it with their own command.

The old field is never written. The new one is created empty by the engine
(:meth:`~skalign._stores.engine.Engine.add_field`: a pgvector column with an index like the
old one's, a Qdrant named vector, a LanceDB or Parquet column, ...) and filled row by row
through the field's :class:`~skalign._stores.live.LiveStore`
(:meth:`~skalign._stores.engine.Engine.open_field`), every write a compare-and-set: each row is
marked with what its vector was computed from (``translated:<map>`` or
``encoded:<encoder>:<text field>:<digest>``, :mod:`skalign._stores.live`) under the field's own
provenance key, :func:`field_key`, so a rerun after a kill skips the rows already written by
the same map or encoder, and no writer reverts another's encoded row. A row not written yet
has no value in the field (SQL ``NULL``, an absent named vector): it is never a search result
of the field, and old queries on the old field see nothing change.

The field's provenance stamp (:meth:`~skalign._stores.engine.Engine.write_field_stamp`) is
written when a step starts, marked ``"filling": true``, and again without it when the step
ends. Two writers of one field exclude each other (:func:`field_lock`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re

import numpy as np

from ..exceptions import StoreError, StoreExistsError
from .journal import FileLock, kill_point
from .live import FIELD_KEY_PREFIX, field_key, parse_mark, translated_mark
from .live_input import shown
from .registry import engine

__all__ = ["FIELD_KEY_PREFIX", "FILLING", "check_field_name", "field_key", "field_lock",
           "field_stamp", "open_field", "open_target", "read_field_stamp", "translate_into",
           "unwritten"]

#: the mark of a field's stamp while a step writes it
FILLING = "filling"
#: what a field's name may be: an identifier every engine takes as a column, vector or field
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}\Z")
#: rows per read and write of :func:`translate_into`
BATCH = 2048


def check_field_name(field, address):
    """``field`` if it can name a new vector field: 1 to 48 letters, digits and underscores,
    not starting with a digit, and not ``skalign_…`` (skalign's own columns and keys)."""
    if not isinstance(field, str) or not _NAME.match(field):
        raise StoreError(f"{address}: --into {shown(field)}: a field's name is 1 to 48 ASCII "
                         "letters, digits or underscores, not starting with a digit (no "
                         "quotes, spaces or control characters); choose another name.")
    if field.lower().startswith("skalign_"):
        raise StoreError(f"{address}: --into {field!r}: names starting with skalign_ are "
                         "skalign's own columns and keys (each row's provenance); choose "
                         "another name.")
    return field


def field_lock(address, field):
    """The lock a writer of the field ``field`` of ``address`` holds: an exclusive ``flock``
    taken at once or refused (beside a file store; for a database, in this user's private
    lock folder, named by a digest of the store's identity and the field)."""
    from .databases.common import private_lock_dir

    what = f"{address} (field {field})"
    if engine(address).files:
        path = address.path
        return FileLock(path.with_name(f".{path.name}.{field}.skalign-field-lock"), what)
    key = hashlib.sha256(repr((address.identity, field)).encode()).hexdigest()[:24]
    return FileLock(private_lock_dir() / f"{key}.field.lock", what)


def open_field(address, field, *, text_field=None, **options):
    """The field ``field`` of the store at ``address`` as a :class:`~skalign._stores.live.
    LiveStore`: its engine's :meth:`~skalign._stores.engine.Engine.open_field`, else the
    store's live store on the column ``field`` (the old field the address may name set
    aside), each row's provenance under :func:`field_key`. A row not written yet reads as a
    zero vector without provenance and is never a search result."""
    from . import open_live

    store = engine(address).open_field(address, field, text_field=text_field, **options)
    if store is not None:
        return store
    return open_live(dataclasses.replace(address, column=None), column=field,
                     text_field=text_field, provenance_key=field_key(field), **options)


def unwritten(address, field):
    """Whether no row of the field ``field`` holds a value skalign wrote (a field added by a
    run killed before it stamped it: taken as new)."""
    from .databases.ids import id_list

    with open_field(address, field) as store:
        ids = store.id_array()
        return all(p is None for lo in range(0, len(ids), BATCH)
                   for p in store.fetch(id_list(ids[lo:lo + BATCH])).provenance)


def read_field_stamp(address, field):
    """The field's stamp, checked (:func:`~skalign._stores.provenance.check_stamp`), or
    ``None``."""
    from .provenance import check_stamp

    stamp = engine(address).read_field_stamp(address, field)
    return None if stamp is None else check_stamp(stamp, f"{address} (field {field})")


def field_stamp(model_fp, source, old, field, n_rows, d_in, d_out, **extra):
    """A field's stamp: :func:`~skalign._stores.provenance.make_stamp`'s of the old field
    ``old`` of ``source`` translated into ``field``, with ``field`` and ``from_field``."""
    from .provenance import make_stamp

    return {**extra, **make_stamp(model_fp, source, n_rows, d_in, d_out), "field": field,
            "from_field": old}


def source_of(address, old):
    """The identity a field's stamp records as its source: the store and its old field."""
    return dataclasses.replace(address, column=old) if old is not None else address


@contextlib.contextmanager
def open_target(address, field, *, column=None, text_field=None, **options):
    """Check ``--into field`` on the store at ``address``, open its old field (``column``, as
    the address or ``column`` names it) and yield ``(eng, source, state)``: the engine, the
    old field as a :class:`~skalign._stores.live.LiveStore` and :meth:`~skalign._stores.
    engine.Engine.field_state` of ``field``; the field's lock held throughout.

    Refused before anything is written: a kind without a second field, a hostile name, the
    old field itself, a name the store holds that skalign did not add, another writer."""
    from . import open_live

    eng = engine(address)
    eng.check_into(address)
    field = check_field_name(field, address)
    with field_lock(address, field):
        try:
            state, taken = eng.field_state(address, field), None
        except StoreError as exc:  # said after the old field's own check
            state, taken = None, exc
        if column is None and address.column is None and state is not None:
            # the store has two vector fields now: the old one is the one the field was
            # made from
            from_field = (read_field_stamp(address, field) or {}).get("from_field")
            column = from_field if isinstance(from_field, str) else None
        try:
            source = open_live(address, column=column, text_field=text_field, **options)
        except StoreError:
            if taken is not None:  # e.g. several vector fields now: the name's own refusal
                raise taken from None
            raise
        with source:
            old = source.vector_field
            if old is not None and old == field:
                raise StoreError(f"{address}: --into {field!r} is the store's own vector field "
                                 "(the one read); the new vectors go into a new field: choose "
                                 "another name.")
            if taken is not None:
                raise taken
            yield eng, source, state


def translate_into(model, address, field, *, column=None, batch_size=None, progress=False):
    """Translate the vector field of the store at ``address`` (``column``) by ``model`` into
    its new field ``field`` (created), row by row, marked ``translated:<model>``; return the
    rows written (a :class:`~skalign._stores.pipeline.translate.TranslationResult`: its
    ``resumed_from`` counts the rows a killed run had written, skipped now).

    Rows already marked by this model, and rows encoded by a new encoder (a searcher's
    write-back), are skipped; every write is a compare-and-set. A field written by another
    model or by a migration is refused."""
    from .databases.ids import id_list
    from .journal import model_fingerprint
    from .pipeline.translate import TranslationResult, _progress, output_dim

    model_fp, d_out = model_fingerprint(model), output_dim(model)
    batch = int(batch_size or BATCH)
    with open_target(address, field, column=column) as (eng, source, state):
        old, n = source.vector_field, source.n_rows
        stamp = read_field_stamp(address, field) if state is not None else None
        if state is not None and stamp is None and unwritten(address, field):
            stamp = {"model": model_fp}  # added by a run killed before its first stamp
        if state is not None and (stamp is None or stamp.get("model") != model_fp
                                  or "migration" in stamp):
            what = "a migration" if stamp is not None and "migration" in stamp else \
                "another model" if stamp is not None else "a run whose stamp is missing"
            raise StoreExistsError(
                f"{address}: the field {field!r} already holds vectors of {what}; translate "
                "into another field (or drop that one first: "
                f"{eng.drop_field_command(address, field)})")
        if state is not None and state != d_out:
            raise StoreError(f"{address}: the field {field!r} is {state}-d, the model writes "
                             f"{d_out}-d vectors; translate into another field.")
        final = field_stamp(model_fp, source_of(address, old), old, field, n, source.dim,
                            d_out)
        if state is None:
            eng.add_field(address, field, d_out, old)
        eng.write_field_stamp(address, field, {**final, FILLING: True})
        mark, written, skipped = translated_mark(model_fp), 0, 0
        bar = _progress(n, progress, f"{address} -> field {field}")
        with open_field(address, field) as target:
            ids = source.id_array()
            for k, lo in enumerate(range(0, len(ids), batch)):
                part = id_list(ids[lo:lo + batch])
                have = target.fetch(part).provenance
                todo = [j for j, p in enumerate(have) if p != mark
                        and getattr(parse_mark(p), "kind", None) != "encoded"]
                skipped += len(part) - len(todo)
                if todo:
                    X = source.fetch([part[j] for j in todo]).vectors
                    Y = np.asarray(model.transform(X), dtype=np.float32)
                    written += int(target.write_back([part[j] for j in todo], Y, mark,
                                                     [have[j] for j in todo]).sum())
                if bar is not None:
                    bar.update(len(part))
                kill_point(f"into-batch-{k}")
        if bar is not None:
            bar.close()
        eng.finish_field(address, field)
        eng.write_field_stamp(address, field, final)
    return TranslationResult(written, resumed_from=skipped)
