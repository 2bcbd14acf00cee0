"""``skalign migrate STORE --into FIELD``: the migration of :mod:`skalign._migrate.migration`
written into a new vector field of the store itself (:mod:`skalign._stores.fields`) instead of
a second store.

The first step chooses and encodes its rows and fits its map as a migration into a new store
does; it then creates the field (:meth:`~skalign._stores.engine.Engine.add_field`: the store's
old field, rows, payloads and metadata untouched), records the step in the field's stamp
marked ``"filling"``, and writes every row into the field through the field's live store: the
encoded rows with their exact vectors, marked ``encoded:<encoder>:<text field>:<digest>``,
every other row translated, marked ``translated:<map>``, each write a compare-and-set. A kill
at any instant leaves a field the same command finishes: the encoder's rows come back from
the encode cache, the map is fitted again to the same fingerprint, and the rows already
written with its marks are skipped. The stamp is then written without ``"filling"``.

``--continue`` steps are :class:`~skalign._migrate.migration.Migration`'s own, in place
(every kind writes a field through its live store), the old field read for the old vectors.
Two writers of one field exclude each other (:func:`~skalign._stores.fields.field_lock`).
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from ..exceptions import StoreError, StoreExistsError
from .calibration import writes_exact
from .migration import BATCH, Migration, MigrationResult, _text_field
from .scan import all_ids, id_list

__all__ = ["FieldMigration", "field_counts", "migrate_into", "open_field_migration"]


def open_field_migration(source, field, *, continue_=False, text_field=None, column=None,
                         **options):
    """Check a step of ``skalign migrate SOURCE --into FIELD`` and open the store's old field
    (``column``) and, with ``continue_``, its new one: everything that needs no encoder.

    Returns
    -------
    FieldMigration
        A context manager: closing it closes the fields and releases the field's lock.
    """
    from .._stores.address import parse_address
    from .._stores.fields import (
        FILLING,
        field_key,
        open_target,
        read_field_stamp,
        source_of,
        unwritten,
    )

    src = parse_address(source)
    stack = contextlib.ExitStack()
    try:
        eng, live, state = stack.enter_context(open_target(src, field, column=column,
                                                           text_field=text_field, **options))
        old = live.vector_field
        stamp = read_field_stamp(src, field) if state is not None else None
        record = stamp.get("migration") if stamp is not None else None
        ours = isinstance(record, dict) and stamp.get("source_identity") == repr(
            source_of(src, old).identity)
        where = f"{src} (field {field})"
        if continue_ and not ours:
            raise StoreError(f"{where} was not written by skalign migrate --into; run skalign "
                             f"migrate STORE --into {field} first")
        if continue_ and stamp.get(FILLING):
            raise StoreError(f"{where}: the first step of its migration was interrupted; run "
                             f"the same skalign migrate STORE --into {field} again to finish "
                             "it, then --continue")
        if not continue_ and state is not None and stamp is None and unwritten(src, field):
            ours = True  # added by a run killed before its first stamp: nothing written yet
        if not continue_ and state is not None and not ours:
            raise StoreExistsError(
                f"{where} already holds vectors skalign migrate did not write there (another "
                "translation, or a field whose stamp is missing); migrate into another field, "
                f"or drop that one first: {eng.drop_field_command(src, field)}")
        step = FieldMigration(src, field, eng, state, stamp if ours else None, stack,
                              options)
    except BaseException:
        stack.close()
        raise
    try:
        step.source, step.old = live, old
        step.metric = live.metric
        step.ids = all_ids(live)
        if not len(step.ids):
            raise StoreError(f"{src} holds no rows")
        step.text_field = _text_field(live, step.ids[0], text_field, src)
        step.provenance_key = field_key(field)
        if continue_:
            step.output = step.open_output()
            step.scan()
    except BaseException:
        step.close()
        raise
    return step


def migrate_into(source, field, encoder, budget, *, text_field=None, column=None,
                 methods=None, min_recall=0.0, anyway=False, random_state=0, cache=None,
                 continue_=False, progress=False, batch_size=None, rebuild_index=False,
                 **options):
    """:func:`open_field_migration`, then :meth:`FieldMigration.run`.

    Returns
    -------
    MigrationResult
    """
    with open_field_migration(source, field, continue_=continue_, text_field=text_field,
                              column=column, **options) as step:
        return step.run(encoder, budget, methods=methods, min_recall=min_recall,
                        anyway=anyway, random_state=random_state, cache=cache,
                        progress=progress, batch_size=batch_size,
                        rebuild_index=rebuild_index)


class FieldMigration(Migration):
    """A step of a migration into the field ``field`` of the store ``src`` (see the module
    docstring); ``out`` names the store and the field, ``old`` is the field read."""

    in_place = True

    def __init__(self, src, field, eng, state, stamp, stack, options):
        out = dataclasses.replace(src, column=field) if src.column is not None else src
        super().__init__(src, out, stamp, None, None)
        self.field, self.eng, self.state, self.old = field, eng, state, None
        self._stack, self._options = stack, options

    def close(self):
        super().close()
        self._stack.close()

    def open_output(self):
        """The field as a live store (its rows' provenance under the field's key)."""
        from .._stores.fields import open_field

        return open_field(self.src, self.field, text_field=self.text_field, **self._options)

    def _stamp(self, record):
        """Make the step's rows the store's own (file stores) and stamp the field."""
        from .._stores.fields import FILLING

        if self.output is not None:
            self.output.close()
            self.output = None
        self.eng.finish_field(self.src, self.field)
        stamp = {k: v for k, v in self.stamp.items() if k != FILLING}
        self.eng.write_field_stamp(self.src, self.field, {**stamp, "migration": record})

    def _first(self, budget, anyway):
        from .._stores.fields import FILLING, field_stamp, source_of
        from .._stores.journal import kill_point
        from .._stores.live import LiveRows, parse_mark, translated_mark

        n = len(self.ids)
        pos, ids, X, texts, Y, method, model, estimate, fp = self._first_map(budget, anyway)
        if self.record is not None and self.record.get("map") != fp:
            raise StoreExistsError(
                f"{self.src} (field {self.field}) already holds a migration with another map "
                "(another --budget, --seed or encoder); go on with it with `skalign migrate "
                f"STORE --into {self.field} --continue`, or migrate into another field")
        d = int(Y.shape[1])
        if self.state is None:
            self.eng.add_field(self.src, self.field, d, self.old)
        elif self.state != d:
            raise StoreError(f"{self.src}: the field {self.field!r} is {self.state}-d, the "
                             f"encoder writes {d}-d vectors; migrate into another field")
        record = self._record(fp, method, len(pos), estimate)
        self.stamp = field_stamp(fp, source_of(self.src, self.old), self.old, self.field, n,
                                 int(X.shape[1]), d, migration=record)
        self.eng.write_field_stamp(self.src, self.field, {**self.stamp, FILLING: True})
        self.output = self.open_output()
        self.output.check_provenance_key()
        prov = []
        for lo in range(0, n, BATCH):
            prov.extend(self.output.fetch(id_list(self.ids[lo:lo + BATCH])).provenance)
        self.rows = LiveRows(self.ids, np.zeros((n, 0), np.float32), [None] * n, prov)
        exact = writes_exact(model)
        if exact:  # the same values again after a kill: compare-and-set, harmless
            self._marks(ids, Y, texts, [prov[i] for i in pos]).write(self.output)
        mark = translated_mark(fp)
        rest = np.setdiff1d(np.arange(n), pos) if exact else np.arange(n)
        todo = np.array([i for i in rest if prov[i] != mark
                         and getattr(parse_mark(prov[i]), "kind", None) != "encoded"], np.int64)
        written = 0
        for k, lo in enumerate(range(0, len(todo), BATCH)):
            written += self._translated(model, fp, todo[lo:lo + BATCH]).write(self.output)
            kill_point(f"into-batch-{k}")
        self._stamp(record)
        return MigrationResult(str(self.out), n, self.n_encoded, len(ids) if exact else 0,
                               method, estimate, int(written), "migrated")


def field_counts(address, field, text_field=None):
    """Rows per provenance of the field ``field`` (as
    :func:`~skalign._migrate.counts.count_provenance` counts a store's), or ``None`` where it
    cannot be read."""
    from .._stores.address import parse_address
    from .._stores.fields import open_field, read_field_stamp
    from .counts import _count_batch

    address = parse_address(address)
    try:
        stamp = read_field_stamp(address, field)
    except StoreError:
        stamp = None
    migration = (stamp or {}).get("migration")
    migration = migration if isinstance(migration, dict) else {}
    mine = migration.get("encoder") if isinstance(migration.get("encoder"), str) else None
    if text_field is None and isinstance(migration.get("text_field"), str):
        text_field = migration["text_field"]
    try:
        store = open_field(address, field, text_field=text_field)
    except StoreError:
        return None
    counts = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {},
              "empty": 0}
    with store:
        fast = store.count_marks(mine, empty=True)
        if fast is not None:  # a database that counts its marks itself
            return fast
        ids = all_ids(store)
        for lo in range(0, len(ids), BATCH):
            part = id_list(ids[lo:lo + BATCH])
            counts["empty"] += sum(p is None for p in store.fetch(part).provenance)
            _count_batch(store, part, mine, counts)
    counts["translated"] -= counts["empty"]
    return counts
