"""A ``--continue`` step of ``skalign migrate`` (:class:`ContinueStep`, the part of
:class:`~skalign._migrate.migration.Migration` that goes on with an output): ``budget`` more
rows encoded (stale rows first, then rows drawn uniformly), the map refitted on every encoded
row, the remaining rows translated again when its estimate is higher; a database written in
place, a file store written anew from the source with its overlay kept.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from ..encoders._grouping import encode_in_pieces
from ..exceptions import StoreError
from .calibration import MIXED, recorded_map, step_notes
from .choice import choose_rows
from .fitting import fit_rows
from .result import MigrationResult
from .rows import ExactRowsModel, RowFile, RowSubset
from .rows import pairs_fingerprint as _model_fingerprint
from .scan import BATCH, ENCODED, STALE, cached_positions, texts_of, texts_or_refuse

__all__ = ["ENCODE_ROWS", "ContinueStep", "next_rows"]

#: rows a ``--continue`` step encodes (or reads back) at a time
ENCODE_ROWS = 8192


class ContinueStep:
    """The ``--continue`` step of a :class:`~skalign._migrate.migration.Migration` (a mixin:
    it uses the migration's source, output, scan and encoder)."""

    def _new_vectors(self, ids, texts, held):
        """The new encoder's vectors of the rows ``ids``, in a
        :class:`~skalign._migrate.rows.RowFile`: read back from the output where it holds them
        already (``held``: marked encoded by this encoder, for the text it holds now), encoded
        only for the others — an earlier step's rows are never encoded again, with or without
        an encode cache.

        The rows to encode are encoded in the length-grouped batches of them all
        (:func:`~skalign.encoders._grouping.encode_in_pieces`, :data:`ENCODE_ROWS` rows at a
        time), the batches a cluster's partitions hold: one machine's vectors are the
        cluster's bit for bit, whatever the step's size. They go to a row file in the order
        they are encoded, and into the step's row file in the rows' order a piece at a time."""
        new, kept = np.flatnonzero(~held), np.flatnonzero(held)
        at = np.full(len(ids), -1, np.int64)  # each row's place in `done`, the encoded rows
        done = []

        def put(rows, V):
            if not done:
                done.append(RowFile(V.shape[1]))
            at[new[rows]] = len(done[0]) + np.arange(len(rows))
            done[0].append(V)

        if self.cluster is not None and len(new):
            # the workers write the rows (marked) when the step keeps encoded rows for sure
            # (an earlier step encoded some): a partition redone after a dead worker skips them
            written, _ = self.cluster.encode_step(
                self, [ids[j] for j in new], [texts[j] for j in new], write=len(kept) > 0,
                into=put)
            self.cluster_written.update(ids[j] for j in new[written])
        elif len(new):
            for rows, V in encode_in_pieces(self.enc, [texts[j] for j in new], ENCODE_ROWS):
                put(rows, V)
        Y = None
        for lo in range(0, len(ids), ENCODE_ROWS):
            part = np.arange(lo, min(len(ids), lo + ENCODE_ROWS))
            mine, back = part[at[part] >= 0], part[at[part] < 0]
            pieces = [(mine, done[0][at[mine]])] if len(mine) else []
            pieces += [(back[b:b + BATCH], self.output.fetch(
                [ids[j] for j in back[b:b + BATCH]]).vectors) for b in range(0, len(back), BATCH)]
            V = np.empty((len(part), pieces[0][1].shape[1]), dtype=np.float32)
            for rows, got in pieces:
                V[rows - lo] = got
            Y = RowFile(V.shape[1]) if Y is None else Y
            Y.append(V)
        return Y

    def _continue(self, budget):
        """A ``--continue`` step: see the module docstring."""
        from .._stores.address import FILE_KINDS

        rec, enc = self.record, self.enc
        if rec.get("encoder") != enc.fingerprint:
            raise StoreError(
                f"{self.out} was migrated with another encoder (fingerprint "
                f"{rec.get('encoder')!r:.80}, this one {enc.fingerprint}); continue with the "
                "same encoder")
        in_place = self.out.kind not in FILE_KINDS or self.in_place
        all_ids, prov = self.rows.ids, self.rows.provenance
        n = len(all_ids)
        states = self.rows.states(enc.fingerprint)
        done = np.flatnonzero(states == ENCODED)
        if len(done) == n:  # nothing left to encode: the output is final already
            return MigrationResult(str(self.out), n, 0, len(done), None, {}, 0, "complete")
        # the rows a "translate all" step encoded are in the encode cache, unmarked: pairs again
        held = cached_positions(enc, self.output, all_ids, self.text_field, done) \
            if rec.get("store") == "translate all" else done[:0]
        pos = np.union1d(next_rows(states, budget, np.union1d(done, held),
                                    self.random_state), held)
        encoded = np.union1d(done, pos)
        enc_ids = [all_ids[i] for i in encoded]
        was = np.isin(encoded, done)  # rows of X and Y encoded by the earlier steps
        # the texts of the rows encoded now as the output holds them; the old vectors from the
        # source
        enc_texts = [None] * len(encoded)
        fresh = [enc_ids[j] for j in np.flatnonzero(~was)]
        for j, t in zip(np.flatnonzero(~was), texts_or_refuse(
                fresh, texts_of(self.output, fresh, self.text_field), self.out,
                self.text_field)):
            enc_texts[j] = t
        # on disk: a step's pairs grow with the store (10 % of 10^6 rows: 0.46 GB a copy)
        X, Y = self._read(enc_ids, False, True), self._new_vectors(enc_ids, enc_texts, was)
        old = np.flatnonzero(np.isin(encoded, np.union1d(done, held)))  # the previous pairs
        new = np.flatnonzero(~was)  # rows of X and Y encoded now: marked by this step
        rest = np.setdiff1d(np.arange(n), encoded)
        if not len(rest):
            record = self._record("", None, len(encoded), {})
            marks = self._marks([all_ids[i] for i in pos], RowSubset(Y, new),
                                [enc_texts[j] for j in new], [prov[i] for i in pos])
            if in_place:
                marks.write(self.output)
                self._stamp(record)
            else:
                self._republish(ExactRowsModel(self._refit_old(X, Y, old), X, Y,
                                               exact=True), record, marks)
            return MigrationResult(str(self.out), n, self.n_encoded, len(encoded), None, {},
                                   0, "complete")
        method, model, estimate = self._fit(
            X, Y, anyway=True,  # rows marked encoded are never reverted to translations
            modes=(MIXED,) if len(done) else (MIXED, "translate all"))
        fp = _model_fingerprint(method, X, Y)
        better = estimate["recall_at_10"] > rec.get("estimate", {}).get("recall_at_10", -1.0)
        if not better and not rec.get("method"):
            better = True  # the previous step left no translated row: nothing to keep
        notes = step_notes(estimate, rec.get("estimate"), better, len(done))
        if not better:
            method, estimate, fp = rec["method"], rec["estimate"], rec["map"]
            if not in_place or (states[rest] == STALE).any():
                model = self._refit_old(X, Y, old)
        if estimate.get("store") == "translate all":
            # a store of translations only: the rows encoded now are translated too, unmarked
            rest, new, pos = np.setdiff1d(np.arange(n), done), new[:0], pos[:0]
        stale = rest[states[rest] == STALE]
        marks = self._marks([all_ids[i] for i in pos], RowSubset(Y, new),
                            [enc_texts[j] for j in new], [prov[i] for i in pos])
        record = self._record(fp, method, len(encoded), estimate)
        if in_place:
            # every remaining row when the map is better, else the stale ones only (their
            # vector is an old text's: they are finished as translated)
            # written as one step (a store may write a large one faster whole), read a part
            # of BATCH rows at a time
            from .._stores.pipeline.translate import RowMarks

            redo = rest if better else stale
            parts = chain([marks], (self._translated(model, fp, redo[lo:lo + BATCH])
                                    for lo in range(0, len(redo), BATCH)))
            retranslated = sum(RowMarks.write_parts(self.output, parts, len(marks) + len(redo),
                                                    self.rebuild_index)[1:])
            self._stamp(record)
        else:
            # a file cannot change rows in place under its readers: the output is written
            # again (shadow, verification, publish) from the source, with the same rows in the
            # same order, so its overlay (every writer's encoded rows) stays; the overlay,
            # which wins, still holds the stale rows' old vectors: written with the marks
            self._republish(ExactRowsModel(model, X, Y), record,
                            (marks, self._translated(model, fp, stale)))
            retranslated = len(rest) if better else 0
        return MigrationResult(str(self.out), n, self.n_encoded, len(done) + len(pos), method,
                               estimate, retranslated,
                               "continued, retranslated" if better else "continued", notes)

    def _translated(self, model, fp, positions):
        """The rows at ``positions`` translated by ``model`` (the map ``fp``) from the source,
        marked so, compare-and-set against the scan's provenance."""
        from .._stores.live import translated_mark
        from .._stores.pipeline.translate import RowMarks

        ids = [self.rows.ids[i] for i in positions]
        V = np.asarray(model.transform(self._read(ids, texts=False)), dtype=np.float32) \
            if ids else np.zeros((0, 0), np.float32)
        return RowMarks(ids, V, [translated_mark(fp)] * len(ids),
                        [self.rows.provenance[i] for i in positions], self.provenance_key)

    def _stamp(self, record):
        """Record this step in the output's stamp (read once, at the start)."""
        from .._stores.provenance import write_stamp

        write_stamp(self.out, {**self.stamp, "migration": record})

    def _republish(self, model, record, marks):
        """Write the file output anew through the pipeline (``--replace``), the step's
        ``record`` in the stamp written before the publish and ``marks`` written in it, then
        remove the previous file it kept as the backup (and first a backup a killed step
        left), when its stamp says this migration wrote it from this source (the source and
        the encode cache make it again). The overlay is kept."""
        from .._stores.address import parse_address
        from .._stores.backups import backup_address

        self.output.close()  # the scan is done: the output is replaced under its readers
        self.output = None
        self._drop_source()
        self._drop_backup(backup_address(self.out))
        result = self._translate(model, record, marks, replace=True)
        if getattr(result, "backup", None) is not None:
            self._drop_backup(parse_address(result.backup))

    def _drop_source(self):
        """Close the source and let go of it once the step has read what it needs from it: the
        translation pass reads the source itself, and a file source's live store may keep
        every vector of a store in memory (up to ``CACHE_BYTES``, 256 MB) under the pass."""
        if self.source is not None:
            self.source.close()
            self.source = None

    def _refit_old(self, X, Y, rows):
        """The map of the previous step, fitted again on its own rows ``rows`` of ``X``, ``Y``
        (deterministic); after a step that left no translated row (rows have gone stale since:
        their texts changed), the linear map."""
        from ..plan._inputs import make_candidate

        keep = rows[fit_rows(len(rows), self.random_state)]
        X, Y = X[keep], Y[keep]
        model = make_candidate(self.record.get("method") or "linear", n_pairs=len(X),
                               random_state=self.random_state).fit(X, Y)
        return recorded_map(self.record, model, X, Y, self.random_state)

    def _drop_backup(self, backup):
        """Remove the previous migrated file at ``backup``; only when its stamp says skalign
        migrate wrote it from this same source. The output's overlay stays: it holds every
        writer's encoded rows."""
        import shutil

        from .._stores.files.overlay import OVERLAY_SUFFIX
        from .._stores.provenance import read_stamp, sidecar_path

        if not (backup.path.exists() or backup.path.is_symlink()):
            return
        try:
            stamp = read_stamp(backup)
        except StoreError:
            return
        if not isinstance(stamp, dict) or not isinstance(stamp.get("migration"), dict) \
                or stamp.get("source_identity") != repr(self.src.identity):
            return
        for path in (backup.path, sidecar_path(backup),
                     backup.path.with_name(backup.path.name + OVERLAY_SUFFIX)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()


def next_rows(states, budget, done, random_state):
    """The rows ``--continue`` encodes next: the stale ones first (they hold an old text's
    vector), then rows drawn uniformly (seeded) from those not encoded."""
    stale = np.flatnonzero(states == STALE)
    if len(stale) >= budget:
        return stale[:budget]
    more = choose_rows(len(states), budget - len(stale), exclude=np.union1d(done, stale),
                       random_state=random_state + len(done))
    return np.union1d(stale, more)
