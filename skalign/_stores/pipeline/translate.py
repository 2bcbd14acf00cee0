"""The translation of a store: checks before anything is written, the streamed translation
into the shadow, the verification, the publish with the provenance stamp; and the restore of a
backup.

Recoverable at every instant: a kill while the shadow is written leaves committed batches the
same command resumes from; the stamp is recorded before the publish (with the shadow where the
engine allows: a PostgreSQL ``COMMENT`` in the publish's transaction, Chroma's shadow metadata,
Qdrant's sidecar or metadata bound to the shadow; a file store's journal, the sidecar written
before the rename) and marked as a publish under way until every step after it is done, so
that the same command run again after a kill between the publish and those steps finishes them
(:func:`translate_store`, the backends' ``recover_publish``) and exits with the normal summary.

Backends (:mod:`skalign._stores.registry`) provide readers and writers with the protocol of
:mod:`skalign._stores.base`; this module only calls that protocol. Every store is an
:class:`~skalign._stores.address.Address`, parsed once by the caller.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from functools import partial

from ...exceptions import (
    StoreConnectionError,
    StoreError,
    StoreExistsError,
    UnsafeOperationError,
)
from ...utils._backend import default_batch_size as _default_batch_size
from ..address import Address, parse_address
from ..backups import backup_address, is_backup
from ..journal import PUBLISHING, final_stamp, fingerprint, kill_point, model_fingerprint
from ..provenance import make_stamp, move_stamp, read_stamp
from ..registry import backend_module, engine, reader_class, recovery_function, writer_class
from .streaming import BatchTranslator, WriteBehind, blas_threads_beside
from .verify import keep_sample, verification_positions, verify

__all__ = ["RowMarks", "Translation", "TranslationResult", "finish_interrupted_publish",
           "open_reader", "open_writer", "output_dim", "prepare_translation", "restore_store",
           "translate_store"]


def open_reader(address, *, column=None):
    """A reader (:class:`~skalign._stores.base.StoreReader`) of the store at ``address``."""
    address = parse_address(address)
    return reader_class(address)(address, column)


def open_writer(job):
    """The shadow writer for ``job.dst`` (no side effect until its ``begin``)."""
    return writer_class(job.dst)(job.dst, job)


#: Rows per streamed batch, ``default_batch_size(d_in, d_out)``: float32 input and output near
#: 128 MiB, the budget ``skalign translate --batch-size`` documents.
default_batch_size = partial(_default_batch_size, working_memory=128)


def _progress(total, enabled, desc):
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="rows", unit_scale=True, desc=desc, file=sys.stderr)


def output_dim(estimator):
    """Width of ``estimator.transform``'s output (the target or shared space).

    Parameters
    ----------
    estimator : fitted skalign estimator
        Any fitted aligner or transformer of skalign.

    Returns
    -------
    int
        The number of columns ``estimator.transform`` returns.
    """
    try:
        return len(estimator.get_feature_names_out())
    except (AttributeError, TypeError, ValueError):
        return int(estimator.n_features_out_)


@dataclass(frozen=True)
class Translation:
    """A checked translation job: what :func:`prepare_translation` returns."""

    src: Address
    dst: Address
    reader: object
    out_kind: str
    d_in: int
    d_out: int
    batch_size: int
    out_column: str
    #: why nothing is to be done (``None``: translate)
    noop: str | None = None
    #: :func:`~skalign._stores.journal.model_fingerprint` of the model
    model_fp: str | None = None






def _output_exists(job):
    """Whether the job's output exists, asked of a writer opened for that alone; a writer that
    holds a client (Chroma's) closes it, so that it does not keep the folder's indexes loaded
    for the rest of the run."""
    probe = open_writer(job)
    try:
        return probe.exists()
    finally:
        probe.release()


def _check_kinds(src, dst):
    a, b = src.kind, dst.kind
    ai, bi = engine(src).interchangeable, engine(dst).interchangeable
    if ai != bi or (not ai and a != b):
        raise StoreError(
            f"{dst}: a {a} store translates into a {a} store"
            + ("" if not ai else " or another file store")
            + f"; give an OUTPUT of the same kind as INPUT ({src}).")


def _check_safety(model_fp, src, dst, reader, same, replace, force):
    """Refuse what would lose data; return a reason to do nothing (``--replace`` twice)."""
    if src.identity == backup_address(dst).identity:
        raise UnsafeOperationError(
            f"{src}: INPUT is OUTPUT's backup, which --replace would overwrite with OUTPUT: "
            "the only copy of it would be lost; `skalign restore` it first, or copy it.")
    stamp = read_stamp(src)
    if stamp is not None and stamp.get("model") == model_fp and not force:
        if same:
            return (f"{dst} already holds this model's translation (of "
                    f"{stamp.get('source', '?')}); nothing to do (--force translates it again).")
        raise UnsafeOperationError(
            f"{src}: INPUT is already this model's output (translated from "
            f"{stamp.get('source', '?')}): translating it again would translate twice; give the "
            "original store, or pass --force.")
    if is_backup(src) and not force:
        raise UnsafeOperationError(
            f"{src}: INPUT is a backup kept by --replace; translate the original store, "
            "`skalign restore` the backup first, or pass --force.")
    if not replace or same:
        return None
    out = read_stamp(dst)
    if out is not None and not force and out.get("model") == model_fp \
            and out.get("source_identity") == repr(src.identity) \
            and out.get("rows") == reader.n_rows:
        return (f"{dst} already holds this model's translation of {src}; nothing to do "
                "(--force translates it again).")
    return None


def _check_backup_free(job):
    """``--replace`` keeps the current output as the backup: an older backup would be
    overwritten, and it may hold the only copy of earlier data."""
    backup = backup_address(job.dst)
    probe = open_writer(Translation(job.src, backup, job.reader, backup.kind, job.d_in,
                                    job.d_out, job.batch_size, job.out_column))
    try:
        exists = probe.exists()
    finally:
        probe.release()
    if exists:
        raise StoreExistsError(
            f"{job.dst}: its backup {backup} from an earlier --replace still exists and may "
            "hold the only copy of earlier data; check it and remove it yourself (or `skalign "
            "restore` it), then run again.")


def prepare_translation(model, src, dst, *, column=None, batch_size=None, replace=False,
                        force=False, model_fp=None):
    """Open ``src`` and check a translation into ``dst`` before anything is written.

    The one place where input format, vector column, output format, "output is the input",
    an existing output and its backup, the data-loss guards (a backup or this model's own
    output as input), the output's folder and the vectors' width against
    ``model.n_features_in_`` are checked; :func:`translate_store` and
    :func:`skalign.parallel.translate_parquet` both start here.

    ``model_fp``: :func:`~skalign._stores.journal.model_fingerprint` of ``model`` where the
    caller has it already.

    Returns
    -------
    Translation
        With ``noop``: why nothing is to be done (``None``: translate).
    """
    src, dst = parse_address(src), parse_address(dst, output=True)
    _check_kinds(src, dst)
    same = src.identity == dst.identity
    if same and not replace:
        raise StoreExistsError(
            f"{dst}: OUTPUT is the same as INPUT; write to a new name, or pass --replace to "
            "swap the translation in (the input kept as a backup).")
    engine(dst).check_output(dst)
    reader = open_reader(src, column=column)
    d_in, d_out = int(model.n_features_in_), int(output_dim(model))
    if reader.n_rows and reader.dim != d_in:
        raise StoreError(
            f"{src}: vectors have {reader.dim} dimensions but the model translates "
            f"{d_in}-d embeddings; pass embeddings made by the encoder the model was fitted on.")
    if batch_size is None:
        batch_size = _default_batch(dst.kind, d_in, d_out)
    job = Translation(src, dst, reader, dst.kind, d_in, d_out, batch_size,
                      column or reader.column or "vector")
    model_fp = model_fingerprint(model) if model_fp is None else model_fp
    noop = _check_safety(model_fp, src, dst, reader, same, replace, force)
    exists = same or _output_exists(job)
    if exists and not replace:
        raise StoreExistsError(
            f"{dst}: OUTPUT already exists; choose a new name, or pass --replace to swap "
            "the translation in (the current one kept as a backup, `skalign restore` undoes it).")
    if exists and noop is None:
        _check_backup_free(job)
    return dataclasses.replace(job, noop=noop, model_fp=model_fp)


def _default_batch(kind, d_in, d_out):
    return engine(kind).batch_rows(default_batch_size(d_in, d_out), d_out)


#: the fields of a stamp that describe the translation (:func:`make_stamp`); ``stamp_extra``
#: adds others
STAMP_FIELDS = ("skalign", "model", "source", "source_identity", "rows", "d_in", "d_out",
                "written")


def _check_extra(stamp_extra):
    """``stamp_extra`` as a dict of JSON fields other than the stamp's own; ``ValueError``
    otherwise (a programming error of the caller)."""
    import json

    if stamp_extra is None:
        return {}
    if not isinstance(stamp_extra, dict) or not all(isinstance(k, str) for k in stamp_extra):
        raise ValueError("stamp_extra must be a dict with str keys")
    clash = sorted(set(stamp_extra) & {*STAMP_FIELDS, PUBLISHING})
    if clash:
        raise ValueError(f"stamp_extra may not set the stamp's own fields {clash}")
    try:
        json.dumps(stamp_extra, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"stamp_extra must be JSON ({exc})") from None
    return dict(stamp_extra)


def finish_interrupted_publish(dst):
    """Finish a publish of the output ``dst`` that a killed run left (whatever job it was), up
    to the output in place with its stamp; return the output's stamp then (``None``: none, or
    one that cannot be read). ``skalign migrate`` starts here (``--continue``'s next step
    redoes what came after the publish)."""
    dst = parse_address(dst, output=True)
    with recovery_function(dst)(dst, lambda stamp: False):
        pass
    try:
        stamp = read_stamp(dst)
    except StoreError:
        return None
    return stamp if isinstance(stamp, dict) else None


@dataclass(frozen=True)
class RowMarks:
    """Rows whose vector and provenance mark a translation writes into its output as it
    publishes it (:func:`translate_store`'s ``marks``): through the output's live store
    (:meth:`~skalign._stores.live.LiveStore.write_back`), after the output is in place and
    before the publish's record is removed, so that a kill in between is finished by the same
    call run again. :meth:`write` writes them into a store open live (in place).

    Attributes
    ----------
    ids : list
        The rows, by id.
    vectors : ndarray of shape (len(ids), d_out)
        Their vectors (those the translation wrote, or others: the live store's write wins).
    marks : list of str, default=None
        Each row's provenance value (e.g. :func:`~skalign._stores.live.translated_mark`);
        ``None``: each row is marked encoded by ``encoder`` from its text in ``texts``
        (:func:`~skalign._stores.live.encoded_mark`, the text field ``text_field`` as the
        output names it).
    expected : list of (str or None), default=None
        Compare-and-set: a row is written only where its provenance is still this (``None``:
        none); ``None`` writes every row.
    key : str, default=None
        The column, metadata or payload key of the provenance (``None``: the default).
    encoder, texts, text_field
        The encoder's fingerprint, each row's text and where it was read (``marks=None``).
    """

    ids: list
    vectors: object
    marks: list | None = None
    expected: list | None = None
    key: str | None = None
    encoder: str | None = None
    texts: list | None = None
    text_field: str | None = None

    def __len__(self):
        return len(self.ids)

    def values(self, store):
        """Each row's provenance value in the live ``store``."""
        if self.marks is not None:
            return list(self.marks)
        from ..live import encoded_mark

        field = store.text_source(self.text_field)
        return [encoded_mark(self.encoder, field, text) for text in self.texts]

    def write(self, store, rebuild=False):
        """Write the rows into the live ``store`` in batches; return how many were written
        (the others' provenance had changed: compare-and-set). ``rebuild``: as
        :meth:`~skalign._stores.live.LiveStore.write_many`'s."""
        return RowMarks.write_parts(store, [self], len(self), rebuild)[0]

    @staticmethod
    def write_parts(store, parts, rows, rebuild=False):
        """Write ``parts`` (:class:`RowMarks`, an iterable read once, one part at a time) into
        the live ``store`` as one step of ``rows`` rows, in batches of :data:`MARK_BATCH`
        through :meth:`~skalign._stores.live.LiveStore.write_many` (which may write a large
        step its own faster way where ``rebuild`` allows it); return how many rows of each
        part were written."""
        counts, owner = [], []

        def batches():
            for part in parts:
                values = part.values(store)
                counts.append(0)
                for lo in range(0, len(part.ids), MARK_BATCH):
                    at = slice(lo, lo + MARK_BATCH)
                    owner.append(len(counts) - 1)
                    yield (part.ids[at], part.vectors[at], values[at],
                           None if part.expected is None else part.expected[at])

        for k, done in enumerate(store.write_many(batches(), rows, rebuild)):
            counts[owner[k]] += int(done.sum())
        return counts


#: rows per write-back of :class:`RowMarks`
MARK_BATCH = 2048


def _write_marks(dst, column, marks):
    """Write ``marks`` (a :class:`RowMarks`, or several) into the published output ``dst``;
    return how many rows were written. A file store's overlay left by the store this
    translation replaced is bound to the new one when its rows are the same
    (:func:`~skalign._stores.files.overlay.rebinding`)."""
    from .. import open_live
    from ..files.overlay import has_overlay, rebinding

    if marks is None:
        return 0
    given = [marks] if isinstance(marks, RowMarks) else list(marks)
    parts = [part for part in given if len(part)]
    if not parts and not has_overlay(dst):
        return 0
    # marks given, none to write: the overlay (other writers' encoded rows, which stay
    # exact) is bound to the new file all the same, not left refusing every reader
    with rebinding():
        store = open_live(dst, column=column,
                          provenance_key=given[0].key if given else None)
    with store:
        return sum(part.write(store) for part in parts)



def _holds(model_fp, src, dst):
    """Whether the output ``dst`` holds this model's translation of ``src`` (its stamp)."""
    try:
        stamp = read_stamp(dst)
    except StoreError:
        return False
    return isinstance(stamp, dict) and stamp.get("model") == model_fp \
        and stamp.get("source_identity") == repr(src.identity)


def _finish_interrupted(model_fp, src, dst, extra, after_publish, column, marks):
    """Finish the publish of ``dst`` that a killed run left, if any: up to the output in place
    with its stamp (whatever job it was), then, where it was this job (the same model and
    source), the steps after the publish; return the result then (``None`` otherwise: the
    translation goes on, another job's publish finished)."""
    source_identity = repr(src.identity)

    def same_job(stamp):
        return stamp.get("model") == model_fp and stamp.get("source_identity") == source_identity

    with recovery_function(dst)(dst, same_job) as found:
        if found is None:
            return None
        kill_point("published")
        _write_marks(dst, column, marks)
        if after_publish is not None:
            after_publish(dst)
        found.finish(final_stamp({**found.stamp, **extra}))
    rows = int(found.stamp.get("rows") or 0)
    return TranslationResult(rows, str(found.backup) if found.backup is not None else None,
                             rows)


def translate_store(model, src, dst, *, column=None, batch_size=None, progress=False,
                    replace=False, force=False, stamp_extra=None, after_publish=None,
                    marks=None):
    """Stream the store ``src`` through ``model.transform`` into ``dst``; return the row count.

    The output is written in the shadow (a temporary file, table or collection), committed batch
    by batch, verified (row count; the rows of :func:`verification_positions`, rows a crashed
    run committed included, translated again from the input and compared together with their
    ids and other fields), published under its name with its provenance stamp recorded before
    (see the module's docstring). The same call after a crash resumes from the last committed
    batch, or, after a crash during or after the publish, finishes the publish and the steps
    after it (the result then says ``resumed_from`` = every row); a second concurrent call on
    the same output fails at once. See :func:`skalign.io.translate` for the formats and
    guarantees.

    Parameters
    ----------
    stamp_extra : dict, default=None
        More fields of the output's stamp (JSON; not the stamp's own fields, ``STAMP_FIELDS``),
        recorded with the rest before the publish: e.g. ``skalign migrate``'s ``migration``
        record. A rerun that finishes an interrupted publish merges its own ``stamp_extra``
        over the recorded one. Unused when nothing is to be done (``noop``).
    after_publish : callable, default=None
        ``after_publish(dst)`` (the output's :class:`Address`): steps of the caller's after the
        output is in place, e.g. per-row marks, done before the publish's record is removed. A
        kill or an error in it leaves the record: the same call run again finishes the publish
        and calls it again, so it must be harmless to repeat.
    marks : RowMarks or sequence of RowMarks, default=None
        Rows whose vector and provenance mark are written with the output, in its publish
        (after the output is in place, before the record is removed; compare-and-set, so
        harmless to repeat). Where the output already holds this translation (the same call
        run again, or a publish another call finished), the marks alone are written and the
        result says ``noop``.
    """
    src, dst = parse_address(src), parse_address(dst, output=True)
    extra = _check_extra(stamp_extra)
    model_fp = model_fingerprint(model)
    done = _finish_interrupted(model_fp, src, dst, extra, after_publish, column, marks)
    if done is not None:
        return done
    try:
        job = prepare_translation(model, src, dst, column=column, batch_size=batch_size,
                                  replace=replace, force=force, model_fp=model_fp)
    except StoreExistsError:
        if marks is None or not _holds(model_fp, src, dst):
            raise
        job = None
    if job is None or job.noop is not None:
        # published whole already: the marks are written again (compare-and-set: a row
        # marked since keeps its mark)
        _write_marks(dst, column, marks)
        return TranslationResult(0, noop=f"{dst} already holds this translation of {src}"
                                 if job is None else job.noop)
    reader, batch_size = job.reader, job.batch_size
    writer = open_writer(job)
    with writer.lock():
        fp = fingerprint(model, repr(job.src.identity), repr(job.dst.identity), batch_size,
                         job.out_column)
        start = resumed_from = writer.begin(fp)
        bar = _progress(reader.n_rows, progress, f"{_short(job.src)} -> {_short(job.dst)}")
        if bar is not None and start:
            bar.update(start)
        sample, kept = verification_positions(reader, batch_size), {}
        behind = WriteBehind(writer.write_unit, writer.pipelined,
                             writer.encode_unit if writer.encodes else None, writer.encode_depth)
        translate = BatchTranslator(model, str(job.src), n_buffers=behind.depth + 1)
        batches = reader.batches(batch_size, start)
        try:
            with blas_threads_beside(behind.busy_threads(writer)):
                for vectors, rb, shard in batches:
                    out = translate(vectors, start)
                    keep_sample(reader, rb, vectors, start, sample, kept)
                    behind.submit(out, rb, shard, start)
                    start += len(vectors)
                    if bar is not None:
                        bar.update(len(vectors))
            behind.wait()
            n = writer.finish()
            verify(job, writer, model, n, sample, kept)
            stamp = {**extra, **make_stamp(job.model_fp, job.src, reader.n_rows, job.d_in,
                                           job.d_out)}
            backup = _as_address(job.dst, writer.publish(replace, stamp))
            kill_point("published")
            _write_marks(job.dst, column, marks)
            if after_publish is not None:
                after_publish(job.dst)
            writer.end_publish(stamp)
        except StoreError as exc:
            batches.close()  # a reader may hold a file, a server-side read, a read-ahead thread
            behind.close()
            writer.close()
            # a lost server: resumable; a publish under way: finished by the rerun; otherwise
            # bad data or a failed verification: nothing is resumable
            if not isinstance(exc, StoreConnectionError) and not writer.publishing:
                writer.discard()
            raise
        finally:
            batches.close()
            behind.close()
            writer.close()
            if bar is not None:
                bar.close()
    return TranslationResult(reader.n_rows, str(backup) if backup is not None else None,
                             resumed_from, writer.restarted)


def _as_address(store, backup):
    """A backend's backup (a path for file stores) as an :class:`Address`."""
    if backup is None or isinstance(backup, Address):
        return backup
    return store.with_path(backup)


def _short(address):
    return engine(address).short_name(address)


class TranslationResult(int):
    """The number of rows translated (an ``int``), with ``backup``: where ``--replace`` kept the
    previous output (``None`` if there was none), ``resumed_from``: the rows a crashed run
    had committed, which this one did not translate again (0 for a fresh start),
    ``restarted``: why a crashed run's shadow of this same job could not be resumed and was
    translated afresh (``None`` where that did not happen), and ``noop``: why nothing was
    done (the output already holds this model's translation; ``None`` otherwise)."""

    def __new__(cls, n, backup=None, resumed_from=0, restarted=None, noop=None):
        self = super().__new__(cls, n)
        self.backup = backup
        self.resumed_from = int(resumed_from)
        self.restarted = restarted
        self.noop = noop
        return self


def restore_store(output):
    """Swap ``output`` and the backup ``--replace`` kept of it; return the backup's address."""
    address = parse_address(output, output=True)
    backup = _as_address(address, backend_module(address).restore(address))
    move_stamp(address, backup, swap=True)
    return backup
