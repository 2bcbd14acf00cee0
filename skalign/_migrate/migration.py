"""Migrate a store with the new encoder in the loop: encode a budgeted sample, translate the rest.

A step is one pass (:func:`open_migration`, then :meth:`Migration.run`): the source is opened
once and the output's stamp read once, after any publish a killed run left is finished; every
refusal (the output is the source, exists without being this migration's, holds a user's own
provenance key, ...) comes there, before an encoder is loaded. The step then chooses ``budget``
rows from their old vectors (the rows nearest the centres of a k-means,
:mod:`skalign._migrate.choice`; ``--continue``'s further rows are drawn uniformly), encodes
their texts with the new encoder (through the encode cache, so a rerun never encodes a text
twice), plans on those pairs and fits the recommended map, and writes the output once: the
translation pipeline (shadow write, verification, resume, lock) translates every row with the
encoded rows' exact vectors (:class:`~skalign._migrate.rows.ExactRowsModel`), writes each
encoded row's mark in its publish (:class:`~skalign._stores.pipeline.translate.RowMarks`:
``encoded:<encoder>:<text field>:<digest of the text>``, :func:`skalign._stores.live.
encoded_mark`) and records the step in the stamp it writes before the publish. A kill at any
instant leaves an output the same command finishes.

With ``continue_=True`` a step finishes the output progressively: ``budget`` more rows that are
not encoded yet (stale rows, whose text changed since they were encoded, included) are encoded
from the output's current texts, the map is refitted on every encoded row, and the remaining
translated rows are translated again when the refitted map's estimate is higher. The output is
opened once: a database is written in place, row by row, and its stamp written at the end; a
file store is written anew through the pipeline from the source (its overlay, which holds every
writer's encoded rows, kept), the step's rows and marks written in that publish. Every write of
a row is a compare-and-set against the provenance read at the start: a row another writer (a
searcher) encoded meanwhile is kept, never reverted to a translation. Once every row is encoded,
the output holds exactly what encoding every current text gives.
"""

from __future__ import annotations

import numpy as np

from ..encoders._grouping import encode_by_length
from ..exceptions import StoreError, StoreExistsError
from ..utils._console import stage
from .calibration import MIXED, writes_exact
from .choice import centre_rows, choose_rows, rows_to_cluster
from .continuing import ContinueStep
from .counts import count_provenance
from .fitting import plan_and_fit
from .result import MigrationResult
from .rows import ExactRowsModel, RowFile
from .rows import pairs_fingerprint as _model_fingerprint
from .scan import BATCH, all_ids, same_ids, scan_rows, texts_or_refuse

__all__ = ["BATCH", "Migration", "MigrationResult", "count_provenance", "migrate_store",
           "open_migration"]


def migrate_store(source, output, encoder, budget, *, text_field=None, column=None,
                  methods=None, min_recall=0.0, anyway=False, random_state=0, cache=None,
                  continue_=False, progress=False, batch_size=None, provenance_key=None,
                  rebuild_index=False):
    """Encode ``budget`` rows with ``encoder``, translate the rest: :func:`open_migration`,
    then :meth:`Migration.run` (see the module docstring).

    Returns
    -------
    MigrationResult
    """
    with open_migration(source, output, continue_=continue_, text_field=text_field,
                        column=column, provenance_key=provenance_key) as step:
        return step.run(encoder, budget, methods=methods, min_recall=min_recall, anyway=anyway,
                        random_state=random_state, cache=cache, progress=progress,
                        batch_size=batch_size, rebuild_index=rebuild_index)


def open_migration(source, output, *, continue_=False, text_field=None, column=None,
                   provenance_key=None, **options):
    """Check a step of ``skalign migrate`` and open its source: everything that needs no
    encoder, before one is loaded. Raises :class:`~skalign.exceptions.StoreError`.

    The output may not be the source (nor, for file stores, one of its files); a publish of it
    a killed run left is finished first; without ``continue_`` an existing output must be this
    same migration's (a run killed after publishing it: the same command finishes it), and
    with it the output must be one, of this source, holding the source's rows. The source is
    opened (``options``: its live store's, e.g. a file store's ``metric``) and its rows' ids and
    text field read; with ``continue_`` the output is opened too and every row's provenance
    and text read.

    Returns
    -------
    Migration
        A context manager: closing it closes the stores.
    """
    from .._stores import open_live
    from .._stores.address import FILE_KINDS, parse_address
    from .._stores.pipeline.translate import finish_interrupted_publish

    src, out = parse_address(source), parse_address(output, output=True)
    same = src.identity == out.identity
    if not same and src.kind in FILE_KINDS and out.kind in FILE_KINDS:
        try:
            same = src.path.resolve() == out.path.resolve() or src.path.samefile(out.path)
        except OSError:
            pass
    if same:
        raise StoreError(f"OUTPUT {out} is the SOURCE: skalign migrate writes a new store and "
                         "never changes its source; name another OUTPUT (then `skalign "
                         "migrate SOURCE OUTPUT --continue` to go on with it)")
    stamp = finish_interrupted_publish(out)  # a run killed while publishing OUTPUT: finished
    record = stamp.get("migration") if stamp is not None else None
    ours = isinstance(record, dict) and stamp.get("source_identity") in (
        (None, repr(src.identity)) if continue_ else (repr(src.identity),))
    if continue_ and not isinstance(record, dict):
        raise StoreError(f"{out} was not written by skalign migrate; run skalign migrate "
                         "SOURCE OUTPUT first")
    if continue_ and not ours:
        raise StoreError(f"{out} was migrated from another source than {src}; continue "
                         "it with the source it was migrated from")
    if not continue_ and not ours and _exists(out):
        raise StoreError(f"OUTPUT {out} already exists; go on with a migration with `skalign "
                         "migrate SOURCE OUTPUT --continue`, or name another OUTPUT")
    step = Migration(src, out, stamp if ours else None, column, provenance_key)
    try:
        step.source = open_live(src, column=column, text_field=text_field,
                                provenance_key=provenance_key, **options)
        step.metric = step.source.metric
        if not continue_:  # a user's own key in the source would be copied into the output
            step.source.check_provenance_key()
        step.ids = all_ids(step.source)
        if not len(step.ids):
            raise StoreError(f"{src} holds no rows")
        step.text_field = _text_field(step.source, step.ids[0], text_field, src)
        if continue_:
            step.scan()
    except BaseException:
        step.close()
        raise
    return step


class Migration(ContinueStep):
    """One step of a migration, checked, its source open: :func:`open_migration` makes it,
    :meth:`run` does it.

    Attributes
    ----------
    src, out : Address
        The source and the output.
    stamp : dict or None
        The output's stamp, read once, where it is this migration's (``--continue``, or a run
        of the same command killed after its publish); ``None`` otherwise.
    source : LiveStore
        The source, opened once.
    ids : list
        The source's rows' ids, in its order.
    text_field : str or None
        Where the texts are (the one given, or the first field that gives the first row one).
    record : dict or None
        The stamp's ``migration`` record (``None``: a step that starts a migration).
    metric : str
        What the source ranks by (the encoded vectors' normalisation follows it).
    cluster : skalign.parallel.ClusterEncoder or None
        Set before :meth:`run`: the step's texts are encoded on a dask cluster (and, after the
        first step, written into the output by its workers); closed with the step.
    """

    #: written in place through the output's live store whatever its kind (a field of the
    #: source, :mod:`skalign._migrate.into`)
    in_place = False

    def __init__(self, src, out, stamp, column, provenance_key):
        self.src, self.out, self.stamp = src, out, stamp
        self.record = None if stamp is None else stamp["migration"]
        self.column, self.provenance_key = column, provenance_key
        self.source = self.output = self.rows = self.metric = None
        self.ids, self.text_field = [], None
        self.cluster, self.cluster_written = None, set()

    def close(self):
        if self.cluster is not None:
            self.cluster.close()
        for store in (self.output, self.source):
            if store is not None:
                store.close()
        self.output = self.source = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------- reads
    def scan(self):
        """Open the output (its provenance key checked) and read every row's id, provenance
        and state (``rows``: a :class:`~skalign._migrate.scan.ScanRows`). A file
        store's overlay is bound to the store now at its path when that store has its rows (a
        step killed after publishing it anew from the source)."""
        from .._stores import open_live
        from .._stores.files.overlay import rebinding

        if self.output is None:  # a step into a field of the source opened it already
            with rebinding():
                self.output = open_live(self.out, column=self.column,
                                        text_field=self.text_field,
                                        provenance_key=self.provenance_key)
        self.output.check_provenance_key()
        ids = all_ids(self.output)
        if not same_ids(ids, self.ids):
            raise StoreError(f"{self.out} does not hold the same rows as {self.src} "
                             f"({len(ids)} and {len(self.ids)} rows); was one of them changed "
                             "since the migration?")
        self.rows = scan_rows(self.output, ids, self.text_field,
                              self.output.text_source(self.text_field))

    def _read(self, ids, texts=True, to_file=False):
        """The old vectors of the rows ``ids`` (float32) and, with ``texts``, their texts,
        from the source, in one read per batch; ``to_file``: the vectors in a
        :class:`~skalign._migrate.rows.RowFile`, never held whole."""
        X, got = [], []
        for lo in range(0, len(ids), BATCH):
            rows = self.source.fetch(ids[lo:lo + BATCH],
                                     text_field=self.text_field if texts else None)
            if to_file:
                X = X or [RowFile(rows.vectors.shape[1])]
                X[0].append(rows.vectors)
            else:
                X.append(rows.vectors)
            got.extend(rows.texts)
        X = X[0] if to_file else np.concatenate(X).astype(np.float32, copy=False)
        return (X, texts_or_refuse(ids, got, self.src, self.text_field)) if texts else X

    def _choose(self, budget, random_state):
        """Positions of the ``budget`` rows to encode: nearest the k-means centres of the old
        vectors (read here), or drawn uniformly (:mod:`skalign._migrate.choice`)."""
        pool = rows_to_cluster(len(self.ids), budget, random_state=random_state)
        if not len(pool):
            return choose_rows(len(self.ids), budget, random_state=random_state)
        V = self._read([self.ids[i] for i in pool], texts=False)
        return pool[centre_rows(V, budget, random_state=random_state)]

    # ------------------------------------------------------------------------- the step
    def run(self, encoder, budget, *, methods=None, min_recall=0.0, anyway=False,
            random_state=0, cache=None, progress=False, batch_size=None, rebuild_index=False):
        """Do the step with ``encoder`` (anything :func:`skalign.encoders.load_encoder`
        takes, or a :class:`~skalign.encoders.CachedEncoder`); ``budget`` rows encoded.
        ``rebuild_index``: a ``--continue`` step written in place may write a large step the
        store's faster way, readers waiting for it
        (:meth:`~skalign._stores.live.LiveStore.write_many`'s ``rebuild``).

        Returns
        -------
        MigrationResult
        """
        from ..encoders import CachedEncoder

        if isinstance(budget, bool) or int(budget) < 0:
            raise ValueError(f"budget must be >= 0, got {budget!r}")
        enc = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(
            encoder, cache=cache, progress=progress)
        self.enc, self.n_before = enc, enc.n_encoded
        self.cluster_before, self.cluster_written = getattr(self.cluster, "n_encoded", 0), set()
        self.methods, self.min_recall, self.random_state = methods, min_recall, random_state
        self.progress, self.batch_size = progress, batch_size
        self.rebuild_index = bool(rebuild_index)
        if self.rows is not None:
            return self._continue(int(budget))
        return self._first(int(budget), anyway)

    @property
    def n_encoded(self):
        """Texts the encoder ran on during :meth:`run`."""
        return self.enc.n_encoded - self.n_before + (
            0 if self.cluster is None else self.cluster.n_encoded - self.cluster_before)

    def _first_map(self, budget, anyway):
        """The first step's rows (positions ``pos``, ids), their old vectors ``X``, texts and
        new vectors ``Y`` (encoded here or on the cluster), and the map fitted on them with
        its fingerprint ``fp``."""
        n = len(self.ids)
        with stage(f"choosing {budget} of {n} rows", self.progress):
            pos = self._choose(budget, self.random_state)
        if len(pos) < 2:
            raise ValueError(f"budget={budget}: at least 2 rows must be encoded to fit a map")
        if len(pos) == n:
            raise ValueError(f"budget={budget} covers all {n} rows: re-embed the store "
                             "instead (nothing would be translated)")
        ids = [self.ids[i] for i in pos]
        X, texts = self._read(ids)
        Y = encode_by_length(self.enc, texts) if self.cluster is None else \
            self.cluster.encode_step(self, ids, texts, write=False)[1]
        method, model, estimate = self._fit(X, Y, anyway=anyway)
        return pos, ids, X, texts, Y, method, model, estimate, _model_fingerprint(method, X, Y)

    def _first(self, budget, anyway):
        n = len(self.ids)
        pos, ids, X, texts, Y, method, model, estimate, fp = self._first_map(budget, anyway)
        if self.record is not None and self.record.get("map") != fp:
            raise StoreExistsError(
                f"OUTPUT {self.out} already holds a migration of {self.src} with another map "
                "(another --budget, --seed or encoder); go on with it with `skalign migrate "
                "SOURCE OUTPUT --continue`, or name another OUTPUT")
        # a store of translations only writes no exact row and no mark (calibration.py); the
        # same command after a kill finds the output published: the marks alone are written
        marks = self._marks(ids, Y, texts, [None] * len(ids)) if writes_exact(model) else None
        self._drop_source()  # read: the translation pass reads the source itself
        translated = self._translate(ExactRowsModel(model, X, Y),
                                     self._record(fp, method, len(pos), estimate), marks)
        return MigrationResult(str(self.out), n, self.n_encoded,
                               0 if marks is None else len(ids), method, estimate,
                               int(translated), "migrated")

    def _fit(self, X, Y, *, anyway, modes=(MIXED, "translate all")):
        with stage(f"planning and fitting a map on {len(X)} encoded rows", self.progress):
            return plan_and_fit(X, Y, len(self.ids), min_recall=self.min_recall,
                                 anyway=anyway, methods=self.methods,
                                 random_state=self.random_state, modes=modes)

    def _marks(self, ids, Y, texts, expected):
        """The encoded rows ``ids`` (new vectors ``Y`` of ``texts``), marked encoded when
        written (compare-and-set with ``expected``)."""
        from .._stores.address import FILE_KINDS
        from .._stores.pipeline.translate import RowMarks

        # rows the cluster's workers wrote are not written again (a file store's republish is
        # still given them: their write binds its overlay to the new file, and the
        # compare-and-set writes none of them)
        if self.cluster_written and self.out.kind not in FILE_KINDS:
            keep = [j for j, key in enumerate(ids) if key not in self.cluster_written]
            ids, Y = [ids[j] for j in keep], Y[keep]
            texts, expected = [texts[j] for j in keep], [expected[j] for j in keep]
        return RowMarks(list(ids), Y, None, list(expected), self.provenance_key,
                        self.enc.fingerprint, list(texts), self.text_field)

    def _translate(self, model, record, marks, replace=False):
        from .._stores.pipeline.translate import translate_store

        return translate_store(model, self.src, self.out, column=self.column,
                               batch_size=self.batch_size, progress=self.progress,
                               replace=replace, stamp_extra={"migration": record},
                               marks=marks)

    def _record(self, fp, method, n_encoded, estimate):
        """The stamp's ``migration`` entry: what this step of the migration wrote."""
        from ..encoders._spec import normalize_label

        return {"encoder": self.enc.fingerprint, "map": fp, "method": method,
                "encoded_rows": int(n_encoded), "rows": len(self.ids),
                "estimate": estimate, "random_state": self.random_state,
                "text_field": self.text_field, "normalize": normalize_label(self.enc),
                "store": (estimate or {}).get("store",
                                              "encoded" if method is None else MIXED)}

def _exists(address):
    """Whether a store is at ``address`` (an unreadable one counts)."""
    from .._stores import open_live
    from .._stores.address import FILE_KINDS
    from ..exceptions import StoreNotFoundError

    if address.kind in FILE_KINDS:
        return address.path.exists() or address.path.is_symlink()
    try:
        open_live(address).close()
    except StoreNotFoundError:
        return False
    except StoreError:
        return True
    return True


def _text_field(store, first_id, text_field, where):
    """``text_field``, or the first of the store's default, ``text`` and ``document`` that gives
    the first row a text."""
    from .._stores.live import first_text_field

    if text_field is not None:
        return text_field
    found = first_text_field(store, [first_id])
    if found is not None:
        return found[0]
    raise StoreError(f"{where}: no text found for its rows (the default text field, 'text' and "
                     "'document' tried); name the field that holds the texts with --text-field")


