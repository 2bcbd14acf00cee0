"""Migrate a store with the new encoder in the loop: encode a budgeted sample, translate the rest.

:func:`migrate_store` is ``skalign migrate``: it chooses ``budget`` rows of the source store
(:func:`~skalign._migrate.choice.centre_rows`: the rows nearest the centres of a k-means of the
old vectors; ``--continue``'s further rows are drawn uniformly), encodes their texts with the
new encoder (through the encode cache, so a rerun never encodes a text twice), plans on those
pairs, fits the recommended map, translates the whole store into the output through the
translation pipeline (shadow write, verification, resume, lock, provenance stamp) with the
encoded rows' exact vectors (:class:`~skalign._migrate.rows.ExactRowsModel`), and marks each
encoded row with what its vector was computed from (:func:`skalign._stores.live.encoded_mark`:
the encoder, the text field and a digest of the text). Every refusal (the output is the source,
exists without being this migration's, ...) comes before any text is encoded.

With ``continue_=True`` it finishes an output progressively: ``budget`` more rows that are not
encoded yet (stale rows, whose text changed since they were encoded, included) are encoded from
the output's current texts and written in place, the map is refitted on every encoded row, and
the remaining translated rows are translated again when the refitted map's estimate is higher.
Every write is a compare-and-set against the provenance read at the start: a row another writer
(a searcher) encoded meanwhile is kept, never reverted to a translation. Once every row is
encoded, the output holds exactly what encoding every current text gives.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..exceptions import MigrationRefused, StoreError, StoreExistsError
from ..utils._console import stage
from .calibration import (
    MIXED,
    cached_rows,
    choose_store,
    recorded_map,
    step_notes,
    writes_exact,
)
from .choice import centre_rows, choose_rows
from .rows import ExactRowsModel

__all__ = ["MigrationResult", "check_migration", "count_provenance", "migrate_store"]

#: rows per read and write-back batch
BATCH = 2048


@dataclass
class MigrationResult:
    """What :func:`migrate_store` did.

    Attributes
    ----------
    output : str
        The output store, password masked.
    n_rows : int
        Rows in the store.
    n_encoded : int
        Texts the encoder ran on in this call (cached texts excluded).
    n_encoded_rows : int
        Rows of the output whose vector is the encoder's own, after this call.
    method : str or None
        The map fitted on the encoded rows (``None`` when every row is encoded).
    estimate : dict
        The estimate of the store written: recall@10 and its interval at the store's size,
        ``store`` (``"mixed"``: the encoded rows' exact vectors among the translations, or
        ``"translate all"``) and the translations' ``calibration``
        (:mod:`skalign._migrate.calibration`).
    translated : int
        Rows (re)translated by this call.
    action : str
        ``"migrated"``, ``"continued"``, ``"continued, retranslated"`` or ``"complete"``.
    notes : list of str
        What the held-out check found that the user should know (a ``--continue`` step whose
        store is estimated below the previous step's), also issued as warnings before writing.
    """

    output: str
    n_rows: int
    n_encoded: int
    n_encoded_rows: int
    method: str | None
    estimate: dict = field(default_factory=dict)
    translated: int = 0
    action: str = "migrated"
    notes: list = field(default_factory=list)

    def to_dict(self):
        return asdict(self)


def _read_old(src, ids):
    return np.concatenate([src.fetch(ids[lo:lo + BATCH]).vectors
                           for lo in range(0, len(ids), BATCH)])


def _texts_or_refuse(rows, store, text_field):
    missing = [i for i, t in enumerate(rows.texts) if not isinstance(t, str)]
    if missing:
        where = f"field {text_field!r}" if text_field else "the default text field"
        raise StoreError(
            f"{len(missing)} of the {len(rows.ids)} rows chosen in {store} have no text in "
            f"{where} (first: id {rows.ids[missing[0]]!r}); name the field that holds the "
            "texts with --text-field")
    return list(rows.texts)


def _model_fingerprint(method, X, Y):
    h = hashlib.sha256(method.encode())
    for a in (X, Y):
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def _plan_and_fit(X, Y, n_rows, *, min_recall, anyway, methods, random_state,
                  modes=(MIXED, "translate all")):
    from ..plan import plan_migration
    from ..plan._candidates import make_candidate

    try:
        plan = plan_migration(X, Y, store_size=n_rows, sides=("document",), methods=methods,
                              curve=False, min_recall=min_recall, random_state=random_state)
    except ValueError as exc:
        if "pairs" not in str(exc):
            raise
        raise ValueError(f"{len(X)} encoded rows are too few to plan a map: {exc} Give a "
                         "larger --budget.") from None
    rec = plan.recommendation
    best = plan.best("document")
    model = make_candidate(best.method, n_pairs=len(X), random_state=random_state).fit(X, Y)
    # the store written (the exact rows among calibrated translations, or translations only)
    # and its estimate: skalign._migrate.calibration
    model, choice = choose_store(best.method, model, X, Y, n_rows, modes=modes,
                                 random_state=random_state)
    estimate = choice.estimate
    if rec["action"] == "re-embed" and estimate["recall_at_10"] < min_recall and not anyway:
        raise MigrationRefused(
            f"no method reaches recall@10 {min_recall:g} with {len(X)} encoded rows (best: "
            f"{best.method}, {estimate['recall_at_10']:.3f}); encode more rows (a larger "
            "--budget), lower --min-recall, or migrate anyway with --anyway", plan)
    return plan, best.method, model, estimate


def count_provenance(address, text_field=None):
    """Rows per provenance of the store at ``address``, each encoded mark checked against the
    row's current text: ``{"rows", "encoded", "stale", "translated", "encoders"}``.

    ``encoded`` rows hold the vector of their current text by the store's encoder (the one its
    migration stamp names; any encoder for a store without one), ``stale`` rows are marked
    encoded but their text, text field or encoder no longer matches, the others are
    translated; ``encoders`` counts the rows each encoder fingerprint holds exactly. ``None``
    for a store that cannot be read live.
    """
    from .._stores import open_live
    from .._stores.address import parse_address

    address = parse_address(address)
    stamp = _stamp_or_none(address)
    migration = stamp.get("migration") if isinstance(stamp, dict) else None
    migration = migration if isinstance(migration, dict) else {}
    mine = migration.get("encoder") if isinstance(migration.get("encoder"), str) else None
    if text_field is None and isinstance(migration.get("text_field"), str):
        text_field = migration["text_field"]
    try:
        store = open_live(address, text_field=text_field)
    except StoreError:
        return None
    counts = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    with store:
        ids = store.ids()
        for lo in range(0, len(ids), BATCH):
            _count_batch(store, ids[lo:lo + BATCH], mine, counts)
    return counts


def _count_batch(store, ids, mine, counts):
    """Add the provenance of the rows ``ids`` to ``counts`` (texts read per field named)."""
    from urllib.parse import unquote

    from .._stores.live import mark_state, parse_mark

    rows = store.fetch(ids)
    counts["rows"] += len(ids)
    fields = {}
    for n, p in enumerate(rows.provenance):
        mark = parse_mark(p)
        if mark is not None and mark.kind == "encoded":
            fields.setdefault(mark.field, []).append(n)
        elif isinstance(p, str) and p.startswith("encoded:"):
            counts["stale"] += 1  # an earlier version's mark: nothing to check it against
        else:
            counts["translated"] += 1
    for token, rows_n in fields.items():
        field = unquote(token) if token else None
        try:
            texts = store.fetch([ids[n] for n in rows_n], text_field=field).texts
        except StoreError:
            texts = [None] * len(rows_n)  # the field is gone: nothing is encoded from it
        for n, text in zip(rows_n, texts):
            p = rows.provenance[n]
            ok = mark_state(p, None, field, text) == "encoded"
            fp = parse_mark(p).fingerprint
            if ok:
                counts["encoders"][fp] = counts["encoders"].get(fp, 0) + 1
            counts["encoded" if ok and (mine is None or fp == mine) else "stale"] += 1


def _scan(store, field_name):
    """(ids, provenance, texts) of every row, read in batches, texts from ``field_name``."""
    ids = list(store.ids())
    prov, texts = [], []
    for lo in range(0, len(ids), BATCH):
        rows = store.fetch(ids[lo:lo + BATCH], text_field=field_name)
        prov.extend(rows.provenance)
        texts.extend(rows.texts)
    return ids, prov, texts


def check_migration(source, output, continue_=False):
    """The refusals of ``skalign migrate`` that need no encoder: run before anything is loaded,
    read or encoded. Raises :class:`~skalign.exceptions.StoreError`.

    The output may not be the source (nor, for file stores, one of its files); without
    ``continue_`` an existing output must be this same migration's (a run killed after
    publishing it: the same command finishes it), and with it the output must exist.
    """
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
    finish_interrupted_publish(out)  # a run killed while publishing OUTPUT: finished first
    stamp = _stamp_or_none(out)
    if continue_:
        if not isinstance(stamp, dict) or not isinstance(stamp.get("migration"), dict):
            raise StoreError(f"{out} was not written by skalign migrate; run skalign migrate "
                             "SOURCE OUTPUT first")
        if stamp.get("source_identity") not in (None, repr(src.identity)):
            raise StoreError(f"{out} was migrated from another source than {src}; continue "
                             "it with the source it was migrated from")
        return src, out, stamp
    ours = stamp is not None and isinstance(stamp.get("migration"), dict) \
        and stamp.get("source_identity") == repr(src.identity)
    if not ours and _exists(out):
        raise StoreError(f"OUTPUT {out} already exists; go on with a migration with `skalign "
                         "migrate SOURCE OUTPUT --continue`, or name another OUTPUT")
    return src, out, stamp


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


def migrate_store(source, output, encoder, budget, *, text_field=None, column=None,
                  methods=None, min_recall=0.0, anyway=False, random_state=0, cache=None,
                  continue_=False, progress=False, batch_size=None, provenance_key=None):
    """Encode ``budget`` rows with ``encoder``, translate the rest: see the module docstring.

    Returns
    -------
    MigrationResult
    """
    from .._stores import open_live
    from ..encoders import CachedEncoder

    if isinstance(budget, bool) or int(budget) < 0:
        raise ValueError(f"budget must be >= 0, got {budget!r}")
    src_address, out_address, _ = check_migration(source, output, continue_)
    enc = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(
        encoder, cache=cache, progress=progress)
    job = _Job(src_address, out_address, enc, text_field, column, methods, min_recall,
               random_state, batch_size, progress, provenance_key, enc.n_encoded)
    with open_live(job.src, column=column, text_field=text_field,
                   provenance_key=provenance_key) as src:
        if not continue_:  # a user's own key in the source would be copied into the output
            src.check_provenance_key()
        ids = list(src.ids())
        if not ids:
            raise StoreError(f"{job.src} holds no rows")
        job.text_field = _text_field(src, ids[0], text_field, job.src)
        if continue_:
            return _continue(job, src, ids, int(budget))
        with stage(f"choosing {budget} of {len(ids)} rows", progress):
            pos = centre_rows(lambda rows: _read_old(src, [ids[i] for i in rows]), len(ids),
                              int(budget), random_state=random_state)
        if len(pos) < 2:
            raise ValueError(f"budget={budget}: at least 2 rows must be encoded to fit a map")
        if len(pos) == len(ids):
            raise ValueError(f"budget={budget} covers all {len(ids)} rows: re-embed the store "
                             "instead (nothing would be translated)")
        X, Y, texts = _encode_rows(job, src, [ids[i] for i in pos])
    with stage(f"planning and fitting a map on {len(X)} encoded rows", progress):
        _, method, model, estimate = _plan_and_fit(
            X, Y, len(ids), min_recall=min_recall, anyway=anyway, methods=methods,
            random_state=random_state)
    fp = _model_fingerprint(method, X, Y)
    stamp = _stamp_or_none(job.out)
    # a store of translations only writes no exact row and no mark (_migrate_calibration)
    enc_ids = [ids[i] for i in pos] if writes_exact(model) else []

    def mark(_address):
        # rows of the fresh output have no mark; run again after a kill (the publish's record
        # stays until this is done), the rows already marked keep theirs (compare-and-set)
        with _open_out(job) as out:
            _write_back(out, enc_ids, Y, _marks(job, out.text_source(job.text_field), texts),
                        [None] * len(enc_ids))

    # the migration's record is in the stamp written before the publish: a kill at any point
    # leaves an output that is this migration's, and the same command finishes it
    record = _migration_record(job, fp, method, len(pos), len(ids), estimate)
    try:
        translated = int(_translate(job, ExactRowsModel(model, X, Y), replace=False,
                                    stamp_extra={"migration": record}, after_publish=mark))
    except StoreExistsError:
        if not (stamp and stamp.get("migration", {}).get("map") == fp):
            raise
        translated = 0  # published whole by an earlier run of this same command
        mark(job.out)
        _record(job, fp, method, len(pos), len(ids), estimate)
    return MigrationResult(str(job.out), len(ids), job.n_encoded, len(enc_ids), method,
                           estimate, translated, "migrated")


@dataclass
class _Job:
    src: object
    out: object
    enc: object
    text_field: str | None
    column: str | None
    methods: list | None
    min_recall: float
    random_state: int
    batch_size: int | None
    progress: bool
    provenance_key: str | None
    n_before: int = 0

    @property
    def n_encoded(self):
        """Texts the encoder ran on during this call."""
        return self.enc.n_encoded - self.n_before


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


def _encode_rows(job, src, ids, texts_from=None):
    """Old vectors (from the source), new vectors and the texts encoded of the rows ``ids``;
    texts from ``texts_from`` (the output, whose texts are the current ones) or the source."""
    X, texts = [], []
    for lo in range(0, len(ids), BATCH):
        part = ids[lo:lo + BATCH]
        rows = src.fetch(part, text_field=None if texts_from is not None else job.text_field)
        if texts_from is not None:
            rows = replace(rows, texts=texts_from.fetch(part, text_field=job.text_field).texts)
        texts += _texts_or_refuse(rows, job.src, job.text_field)
        X.append(rows.vectors)
    return np.concatenate(X).astype(np.float32, copy=False), job.enc.encode(texts), texts


def _marks(job, field, texts):
    from .._stores.live import encoded_mark

    return [encoded_mark(job.enc.fingerprint, field, t) for t in texts]


def _open_out(job):
    """The output opened live: its overlay (file stores) bound to the store now at its path
    when that store has the same rows (this migration wrote it anew from the source)."""
    from .._stores import open_live
    from .._stores.files.overlay import rebinding

    with rebinding():
        out = open_live(job.out, column=job.column, text_field=job.text_field,
                        provenance_key=job.provenance_key)
    try:
        out.check_provenance_key()
    except BaseException:
        out.close()
        raise
    return out


def _translate(job, model, replace, **publish):
    from .._stores.pipeline.translate import translate_store

    return translate_store(model, job.src, job.out, column=job.column,
                           batch_size=job.batch_size, progress=job.progress, replace=replace,
                           **publish)


def _write_back(out, ids, Y, marks, expected=None):
    """Write in batches; return how many rows were written (compare-and-set with
    ``expected``)."""
    written = 0
    for lo in range(0, len(ids), BATCH):
        done = out.write_back(ids[lo:lo + BATCH], Y[lo:lo + BATCH], marks[lo:lo + BATCH],
                              None if expected is None else expected[lo:lo + BATCH])
        written += int(np.sum(done))
    return written


def _stamp_or_none(address):
    from .._stores.provenance import read_stamp

    try:
        stamp = read_stamp(address)
    except StoreError:
        return None
    return stamp if isinstance(stamp, dict) else None


def _migration_record(job, fp, method, n_encoded, n_rows, estimate):
    """The stamp's ``migration`` entry: what this step of the migration wrote."""
    from ..encoders._spec import normalize_label

    return {"encoder": job.enc.fingerprint, "map": fp, "method": method,
            "encoded_rows": int(n_encoded), "rows": int(n_rows),
            "estimate": estimate, "random_state": job.random_state,
            "text_field": job.text_field,
            "normalize": normalize_label(job.enc),
            "store": (estimate or {}).get("store", "encoded" if method is None else MIXED)}


def _record(job, fp, method, n_encoded, n_rows, estimate):
    from .._stores.provenance import read_stamp, write_stamp

    stamp = read_stamp(job.out) or {}
    stamp["migration"] = _migration_record(job, fp, method, n_encoded, n_rows, estimate)
    write_stamp(job.out, stamp)


def _continue(job, src, ids, budget):
    from .._stores.address import FILE_KINDS
    from .._stores.live import translated_mark

    stamp = _stamp_or_none(job.out)
    if stamp["migration"].get("encoder") != job.enc.fingerprint:
        raise StoreError(
            f"{job.out} was migrated with another encoder (fingerprint "
            f"{stamp['migration'].get('encoder')!r:.80}, this one {job.enc.fingerprint}); "
            "continue with the same encoder")
    with _open_out(job) as out:
        field = out.text_source(job.text_field)
        out_ids, prov, texts = _scan(out, job.text_field)
        if len(out_ids) != len(ids) or set(out_ids) != set(ids):
            raise StoreError(f"{job.out} does not hold the same rows as {job.src} "
                             f"({len(out_ids)} and {len(ids)} rows); was one of them changed "
                             "since the migration?")
        from .._stores.live import mark_state

        states = [mark_state(p, job.enc.fingerprint, field, t) for p, t in zip(prov, texts)]
        done = np.flatnonzero([st == "encoded" for st in states])
        if len(done) == len(out_ids):  # nothing left to encode: the output is final already
            return MigrationResult(str(job.out), len(ids), 0, len(done), None, {}, 0,
                                   "complete")
        # the rows a "translate all" step encoded are in the encode cache, unmarked: pairs again
        held = cached_rows(job.enc, texts, done) \
            if stamp["migration"].get("store") == "translate all" else done[:0]
        pos = np.union1d(_next_rows(states, budget, np.union1d(done, held), job.random_state),
                         held)
        encoded = np.union1d(done, pos)
        enc_ids = [out_ids[i] for i in encoded]
        # the earlier rows' texts come from the cache; every text is the output's current one
        X, Y, enc_texts = _encode_rows(job, src, enc_ids, texts_from=out)
        was = np.isin(encoded, done)  # rows of X and Y encoded by the earlier steps
        old = np.isin(encoded, np.union1d(done, held))  # the previous step's pairs
        new_ids = [out_ids[i] for i in pos]
        new_marks = _marks(job, field, [enc_texts[j] for j in np.flatnonzero(~was)])
        new_expected = [prov[i] for i in pos]
        rest = np.setdiff1d(np.arange(len(out_ids)), encoded)
        if not len(rest) and job.out.kind not in FILE_KINDS:
            _write_back(out, new_ids, Y[~was], new_marks, new_expected)
    if not len(rest):
        if job.out.kind in FILE_KINDS:
            _republish(job, ExactRowsModel(_refit_old(job, stamp, X[old], Y[old]), X, Y,
                                           exact=True),
                       _migration_record(job, "", None, len(encoded), len(ids), {}))
            with _open_out(job) as out:
                _write_back(out, new_ids, Y[~was], new_marks, new_expected)
        _record(job, "", None, len(encoded), len(ids), {})
        return MigrationResult(str(job.out), len(ids), job.n_encoded, int(len(encoded)),
                               None, {}, 0, "complete")
    with stage(f"planning and fitting a map on {len(X)} encoded rows", job.progress):
        _, method, model, estimate = _plan_and_fit(
            X, Y, len(ids), min_recall=job.min_recall, anyway=True, methods=job.methods,
            random_state=job.random_state,
            # rows marked encoded are never reverted to translations
            modes=(MIXED,) if len(done) else (MIXED, "translate all"))
    fp = _model_fingerprint(method, X, Y)
    before = stamp["migration"].get("estimate", {}).get("recall_at_10", -1.0)
    better = estimate["recall_at_10"] > before
    retranslated, action = 0, "continued"
    if not better and not stamp["migration"].get("method"):
        better = True  # the previous step left no translated row: nothing to keep
    notes = step_notes(estimate, stamp["migration"].get("estimate"), better, len(done))
    stale = rest[[states[i] == "stale" for i in rest]]
    if not better:
        method, estimate, fp = (stamp["migration"]["method"], stamp["migration"]["estimate"],
                                stamp["migration"]["map"])
        if job.out.kind in FILE_KINDS or len(stale):
            model = _refit_old(job, stamp, X[old], Y[old])
    if estimate.get("store") == "translate all":
        # a store of translations only: the rows encoded now are translated too, unmarked
        rest, new_ids = np.setdiff1d(np.arange(len(out_ids)), done), []
        stale = rest[[states[i] == "stale" for i in rest]]
    # rows written in place with the map: every remaining row when the map is better, else the
    # stale ones only (their vector is an old text's: they are finished as translated). A file
    # store is written anew, but its overlay, which wins, still holds the stale rows' vectors.
    redo = rest if better and job.out.kind not in FILE_KINDS else stale
    if job.out.kind in FILE_KINDS:
        # a file cannot change rows in place under its readers: the output is written again
        # (shadow, verification, publish) from the source, with the same rows in the same
        # order, so its overlay (the rows every writer encoded, searchers' included) stays
        _republish(job, ExactRowsModel(model, X, Y),
                   _migration_record(job, fp, method, len(encoded), len(ids), estimate))
        retranslated = len(rest) if better else 0
    with _open_out(job) as out:
        _write_back(out, new_ids, Y[~was], new_marks, new_expected)
        tmark = translated_mark(fp)
        for lo in range(0, len(redo), BATCH):
            part = [out_ids[i] for i in redo[lo:lo + BATCH]]
            V = np.asarray(model.transform(src.fetch(part).vectors), dtype=np.float32)
            # a row a searcher encoded since the scan keeps its encoded vector
            n = _write_back(out, part, V, [tmark] * len(part),
                            [prov[i] for i in redo[lo:lo + BATCH]])
            retranslated += n if job.out.kind not in FILE_KINDS else 0
    if better:
        action = "continued, retranslated"
    _record(job, fp, method, len(encoded), len(ids), estimate)
    return MigrationResult(str(job.out), len(ids), job.n_encoded, len(done) + len(new_ids),
                           method, estimate, retranslated, action, notes)


def _next_rows(states, budget, done, random_state):
    """The rows ``--continue`` encodes next: the stale ones first (they hold an old text's
    vector), then rows drawn uniformly (seeded) from those not encoded."""
    stale = np.flatnonzero([st == "stale" for st in states])
    if len(stale) >= budget:
        return stale[:budget]
    more = choose_rows(len(states), budget - len(stale), exclude=np.union1d(done, stale),
                       random_state=random_state + len(done))
    return np.union1d(stale, more)


def _republish(job, model, record):
    """Write the file output anew through the pipeline (``--replace``), the step's migration
    ``record`` in the stamp written before the publish, then remove the previous file it kept
    as the backup (and first a backup a killed step left), when its stamp says this migration
    wrote it from this source (the source and the encode cache make it again). The overlay is
    kept."""
    from .._stores.address import parse_address
    from .._stores.backups import backup_address

    _drop_backup(job, backup_address(job.out))
    result = _translate(job, model, replace=True, stamp_extra={"migration": record})
    if getattr(result, "backup", None) is not None:
        _drop_backup(job, parse_address(result.backup))


def _refit_old(job, stamp, X, Y):
    """The map of the previous step, fitted again on its own rows ``X``, ``Y`` (deterministic);
    after a step that left no translated row (rows have gone stale since: their texts
    changed), the linear map."""
    from ..plan._candidates import make_candidate

    model = make_candidate(stamp["migration"].get("method") or "linear", n_pairs=len(X),
                           random_state=job.random_state).fit(X, Y)
    return recorded_map(stamp["migration"], model, X, Y, job.random_state)


def _drop_backup(job, backup):
    """Remove the previous migrated file at ``backup``; only when its stamp says skalign
    migrate wrote it from this same source. The output's overlay stays: it holds every
    writer's encoded rows."""
    import shutil

    from .._stores.files.overlay import OVERLAY_SUFFIX
    from .._stores.provenance import sidecar_path

    if not (backup.path.exists() or backup.path.is_symlink()):
        return
    stamp = _stamp_or_none(backup) or {}
    if not isinstance(stamp.get("migration"), dict) \
            or stamp.get("source_identity") != repr(job.src.identity):
        return
    for path in (backup.path, sidecar_path(backup),
                 backup.path.with_name(backup.path.name + OVERLAY_SUFFIX)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
