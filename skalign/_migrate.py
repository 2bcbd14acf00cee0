"""Migrate a store with the new encoder in the loop: encode a budgeted sample, translate the rest.

:func:`migrate_store` is ``skalign migrate``: it chooses ``budget`` rows of the source store
(:func:`~skalign._migrate_choice.centre_rows`: the rows nearest the centres of a k-means of the
old vectors; ``--continue``'s further rows are drawn uniformly), encodes their texts with the
new encoder (through the encode cache, so a rerun never encodes a text twice), plans on those
pairs, fits the recommended map, translates the whole store into the output through the
translation pipeline (shadow write, verification, resume, lock, provenance stamp) with the
encoded rows' exact vectors (:class:`~skalign._migrate_rows.ExactRowsModel`), and marks each
encoded row ``encoded`` (:data:`skalign._stores.live.PROVENANCE_KEY`).

With ``continue_=True`` it finishes an output progressively: ``budget`` more rows that are not
encoded yet are encoded and written in place, the map is refitted on every encoded row, and the
remaining translated rows are translated again when the refitted map's estimate is higher.
Once every row is encoded, the output holds exactly what encoding every text gives.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

import numpy as np

from ._migrate_choice import centre_rows, choose_rows
from ._migrate_rows import ExactRowsModel
from .exceptions import MigrationRefused, StoreError

__all__ = ["MigrationResult", "count_provenance", "migrate_store"]

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
        The plan's estimate for that map: recall@10 and its interval at the store's size.
    translated : int
        Rows (re)translated by this call.
    action : str
        ``"migrated"``, ``"continued"``, ``"continued, retranslated"`` or ``"complete"``.
    """

    output: str
    n_rows: int
    n_encoded: int
    n_encoded_rows: int
    method: str | None
    estimate: dict = field(default_factory=dict)
    translated: int = 0
    action: str = "migrated"

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


def _plan_and_fit(X, Y, n_rows, *, min_recall, anyway, methods, random_state):
    from ._plan_candidates import make_candidate
    from .plan import plan_migration

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
    if rec["action"] == "re-embed" and not anyway:
        raise MigrationRefused(
            f"no method reaches recall@10 {min_recall:g} with {len(X)} encoded rows (best: "
            f"{best.method}, {best.recall:.3f}); encode more rows (a larger --budget), lower "
            "--min-recall, or migrate anyway with --anyway", plan)
    model = make_candidate(best.method, n_pairs=len(X), random_state=random_state).fit(X, Y)
    estimate = {"recall_at_10": round(float(best.recall), 4),
                "interval": [round(float(v), 4) for v in best.recall_ci],
                "store_size": int(n_rows)}
    return plan, best.method, model, estimate


def count_provenance(address):
    """Rows per provenance of the store at ``address``: ``{"rows", "encoded", "encoders"}``,
    ``encoders`` the count per encoder fingerprint; ``None`` for a store that cannot be read
    live."""
    from ._stores import open_live

    try:
        store = open_live(address)
    except StoreError:
        return None
    with store:
        ids, prov = _scan(store)
    encoders = {}
    for p in prov:
        if isinstance(p, str) and p.startswith("encoded:"):
            encoders[p[len("encoded:"):]] = encoders.get(p[len("encoded:"):], 0) + 1
    return {"rows": len(ids), "encoded": sum(encoders.values()), "encoders": encoders}


def _scan(store, text_field=None):
    """(ids, provenance) of every row, read in batches."""
    ids = list(store.ids())
    prov = []
    for lo in range(0, len(ids), BATCH):
        prov.extend(store.fetch(ids[lo:lo + BATCH]).provenance)
    return ids, prov


def migrate_store(source, output, encoder, budget, *, text_field=None, column=None,
                  methods=None, min_recall=0.0, anyway=False, random_state=0, cache=None,
                  continue_=False, progress=False, batch_size=None):
    """Encode ``budget`` rows with ``encoder``, translate the rest: see the module docstring.

    Returns
    -------
    MigrationResult
    """
    from ._stores import open_live
    from ._stores.address import parse_address
    from ._stores.live import encoded_mark
    from .encoders import CachedEncoder

    if int(budget) < 0:
        raise ValueError(f"budget must be >= 0, got {budget!r}")
    enc = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(
        encoder, cache=cache, progress=progress)
    job = _Job(parse_address(source), parse_address(output, output=True), enc,
               encoded_mark(enc.fingerprint), text_field, column, methods, min_recall,
               random_state, batch_size, progress, enc.n_encoded)
    with open_live(job.src, column=column, text_field=text_field) as src:
        ids = list(src.ids())
        if not ids:
            raise StoreError(f"{job.src} holds no rows")
        job.text_field = _text_field(src, ids[0], text_field, job.src)
        if continue_:
            return _continue(job, src, ids, int(budget))
        pos = centre_rows(lambda rows: _read_old(src, [ids[i] for i in rows]), len(ids),
                          int(budget), random_state=random_state)
        if len(pos) < 2:
            raise ValueError(f"budget={budget}: at least 2 rows must be encoded to fit a map")
        if len(pos) == len(ids):
            raise ValueError(f"budget={budget} covers all {len(ids)} rows: re-embed the store "
                             "instead (nothing would be translated)")
        X, Y = _encode_rows(job, src, [ids[i] for i in pos])
    _, method, model, estimate = _plan_and_fit(
        X, Y, len(ids), min_recall=min_recall, anyway=anyway, methods=methods,
        random_state=random_state)
    fp = _model_fingerprint(method, X, Y)
    stamp = _stamp_or_none(job.out)
    translated = 0
    if not (stamp and stamp.get("migration", {}).get("map") == fp):
        translated = int(_translate(job, ExactRowsModel(model, X, Y), replace=False))
    _mark(job, [ids[i] for i in pos], Y)
    _record(job, fp, method, len(pos), len(ids), estimate)
    return MigrationResult(str(job.out), len(ids), job.n_encoded, int(len(pos)), method,
                           estimate, translated, "migrated")


@dataclass
class _Job:
    src: object
    out: object
    enc: object
    mark: str
    text_field: str | None
    column: str | None
    methods: list | None
    min_recall: float
    random_state: int
    batch_size: int | None
    progress: bool
    n_before: int = 0

    @property
    def n_encoded(self):
        """Texts the encoder ran on during this call."""
        return self.enc.n_encoded - self.n_before


def _text_field(store, first_id, text_field, where):
    """``text_field``, or the first of the store's default, ``text`` and ``document`` that gives
    the first row a text."""
    from ._stores.live import first_text_field

    if text_field is not None:
        return text_field
    found = first_text_field(store, [first_id])
    if found is not None:
        return found[0]
    raise StoreError(f"{where}: no text found for its rows (the default text field, 'text' and "
                     "'document' tried); name the field that holds the texts with --text-field")


def _encode_rows(job, src, ids):
    """Old vectors and new (encoded) vectors of the rows ``ids`` of the source."""
    X, texts = [], []
    for lo in range(0, len(ids), BATCH):
        rows = src.fetch(ids[lo:lo + BATCH], text_field=job.text_field)
        texts += _texts_or_refuse(rows, job.src, job.text_field)
        X.append(rows.vectors)
    return np.concatenate(X).astype(np.float32, copy=False), job.enc.encode(texts)


def _translate(job, model, replace):
    from ._stores.pipeline import translate_store

    return translate_store(model, job.src, job.out, column=job.column,
                           batch_size=job.batch_size, progress=job.progress, replace=replace)


def _write_back(out, ids, Y, mark):
    for lo in range(0, len(ids), BATCH):
        out.write_back(ids[lo:lo + BATCH], Y[lo:lo + BATCH], mark)


def _mark(job, ids, Y):
    """Mark the rows ``ids`` of the output as encoded, with their vectors ``Y``."""
    from ._stores import open_live

    with open_live(job.out, column=job.column, text_field=job.text_field) as out:
        _write_back(out, ids, Y, job.mark)


def _stamp_or_none(address):
    from ._stores.provenance import read_stamp

    try:
        return read_stamp(address)
    except StoreError:
        return None


def _record(job, fp, method, n_encoded, n_rows, estimate):
    from ._stores.provenance import read_stamp, write_stamp

    stamp = read_stamp(job.out) or {}
    stamp["migration"] = {"encoder": job.enc.fingerprint, "map": fp, "method": method,
                          "encoded_rows": int(n_encoded), "rows": int(n_rows),
                          "estimate": estimate, "random_state": job.random_state}
    write_stamp(job.out, stamp)


def _continue(job, src, ids, budget):
    from ._stores import open_live
    from ._stores.address import FILE_KINDS
    from ._stores.live import translated_mark

    stamp = _stamp_or_none(job.out)
    if not stamp or "migration" not in stamp:
        raise StoreError(f"{job.out} was not written by skalign migrate; run "
                         "skalign migrate SOURCE OUTPUT first")
    if stamp["migration"]["encoder"] != job.enc.fingerprint:
        raise StoreError(
            f"{job.out} was migrated with another encoder (fingerprint "
            f"{stamp['migration']['encoder']}, this one {job.enc.fingerprint}); continue with "
            "the same encoder")
    with open_live(job.out, column=job.column, text_field=job.text_field) as out:
        out_ids, prov = _scan(out)
    if len(out_ids) != len(ids) or set(out_ids) != set(ids):
        raise StoreError(f"{job.out} does not hold the same rows as {job.src} ({len(out_ids)} "
                         f"and {len(ids)} rows); was one of them changed since the migration?")
    done = np.flatnonzero([p == job.mark for p in prov])
    pos = choose_rows(len(out_ids), budget, exclude=done,
                      random_state=job.random_state + len(done))
    if len(done) == len(out_ids):  # nothing left to encode: the output is final already
        return MigrationResult(str(job.out), len(ids), 0, len(done), None, {}, 0, "complete")
    encoded = np.union1d(done, pos)
    enc_ids = [out_ids[i] for i in encoded]
    X, Y = _encode_rows(job, src, enc_ids)  # the earlier rows' texts come from the cache
    was = np.isin(encoded, done)  # rows of X and Y encoded by the earlier steps
    rest = np.setdiff1d(np.arange(len(out_ids)), encoded)
    if not len(rest):
        if job.out.kind in FILE_KINDS:
            model = ExactRowsModel(_refit_old(job, stamp, X[was], Y[was]), X, Y)
            _drop_previous(job, _translate(job, model, replace=True))
            _mark(job, enc_ids, Y)
        else:
            _mark(job, [out_ids[i] for i in pos], Y[~was])
        _record(job, "", None, len(encoded), len(ids), {})
        return MigrationResult(str(job.out), len(ids), job.n_encoded, int(len(encoded)),
                               None, {}, 0, "complete")
    _, method, model, estimate = _plan_and_fit(
        X, Y, len(ids), min_recall=job.min_recall, anyway=True, methods=job.methods,
        random_state=job.random_state)
    fp = _model_fingerprint(method, X, Y)
    before = stamp["migration"].get("estimate", {}).get("recall_at_10", -1.0)
    better = estimate["recall_at_10"] > before
    retranslated, action = 0, "continued"
    if job.out.kind in FILE_KINDS:
        # a file cannot change rows in place under its readers: the output is written again
        # (shadow, verification, publish), the previous migration kept as the backup only
        # until the new one is published, since the source and the encode cache make it again
        if not better:
            method, estimate, fp = (stamp["migration"]["method"],
                                    stamp["migration"]["estimate"], stamp["migration"]["map"])
            model = _refit_old(job, stamp, X[was], Y[was])
        result = _translate(job, ExactRowsModel(model, X, Y), replace=True)
        _drop_previous(job, result)
        retranslated = len(rest) if better else 0
        _mark(job, enc_ids, Y)
    else:
        with open_live(job.out, column=job.column, text_field=job.text_field) as out:
            _write_back(out, [out_ids[i] for i in pos], Y[~was], job.mark)
            if better:
                tmark = translated_mark(fp)
                for lo in range(0, len(rest), BATCH):
                    part = [out_ids[i] for i in rest[lo:lo + BATCH]]
                    V = np.asarray(model.transform(src.fetch(part).vectors), dtype=np.float32)
                    _write_back(out, part, V, tmark)
                    retranslated += len(part)
        if not better:
            method, estimate, fp = (stamp["migration"]["method"],
                                    stamp["migration"]["estimate"], stamp["migration"]["map"])
    if better:
        action = "continued, retranslated"
    _record(job, fp, method, len(encoded), len(ids), estimate)
    return MigrationResult(str(job.out), len(ids), job.n_encoded, int(len(encoded)), method,
                           estimate, retranslated, action)


def _refit_old(job, stamp, X, Y):
    """The map of the previous step, fitted again on its own rows ``X``, ``Y`` (deterministic)."""
    from ._plan_candidates import make_candidate

    return make_candidate(stamp["migration"]["method"], n_pairs=len(X),
                          random_state=job.random_state).fit(X, Y)


def _drop_previous(job, result):
    """Remove the previous migrated file ``replace`` kept as the backup, and the encoded-rows
    overlay that described it; only when the backup's stamp says skalign migrate wrote it from
    this same source (the source and the encode cache make it again)."""
    import shutil

    from ._stores.address import parse_address
    from ._stores.live_overlay import OVERLAY_SUFFIX
    from ._stores.provenance import read_stamp, sidecar_path

    backup = getattr(result, "backup", None)
    if backup is None:
        return
    backup = parse_address(backup)
    stamp = read_stamp(backup) or {}
    if "migration" not in stamp or stamp.get("source_identity") != repr(job.src.identity):
        return
    for path in (backup.path, sidecar_path(backup),
                 backup.path.with_name(backup.path.name + OVERLAY_SUFFIX),
                 job.out.path.with_name(job.out.path.name + OVERLAY_SUFFIX)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
