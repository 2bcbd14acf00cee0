"""The per-partition work of the encoder pass: a plain function of a table."""

from __future__ import annotations

import contextlib

import numpy as np

from ..encoders._grouping import length_batches
from ._worker import worker_encoder, worker_output

__all__ = ["encode_partition"]

#: what :func:`encode_partition` says of each row
STATUSES = ("encoded", "cached", "written", "held", "changed")


def _table_columns(table):
    """``(kind, ids, texts, expected)`` of a pandas DataFrame or an Arrow table or batch."""
    if hasattr(table, "column_names"):  # pyarrow.Table / RecordBatch
        names, kind = list(table.column_names), "arrow"
        get = lambda name: table.column(name).to_pylist()  # noqa: E731
    elif hasattr(table, "columns") and hasattr(table, "iloc"):
        names, kind = list(table.columns), "pandas"
        get = lambda name: table[name].tolist()  # noqa: E731
    else:
        raise TypeError(f"encode_partition takes a pandas DataFrame or a pyarrow Table, got "
                        f"{type(table).__name__}")
    missing = [c for c in ("id", "text") if c not in names]
    if missing:
        raise ValueError(f"encode_partition: the table has no column {missing[0]!r} (it needs "
                         f"'id' and 'text', optionally 'expected'; it has {names[:8]})")
    return kind, get("id"), get("text"), get("expected") if "expected" in names else None


def _result_table(kind, ids, status, vectors):
    if kind == "arrow":
        import pyarrow as pa

        return pa.table({"id": ids, "status": pa.array(status, pa.string()),
                         "vector": pa.array([None if v is None else v.tolist()
                                             for v in vectors], pa.list_(pa.float32()))})
    import pandas as pd

    return pd.DataFrame({"id": pd.Series(ids, dtype=object), "status": status,
                         "vector": pd.Series(vectors, dtype=object)})


def encode_partition(table, encoder, *, output=None, text_field=None, column=None,
                     provenance_key=None, fingerprint=None, device="auto", batch_size=64,
                     normalize=None, cache=None, session=None, precision="full"):
    """Encode one partition of rows: the per-partition work of a cluster's encoder pass.

    A plain function of a table, so that any engine that maps a function over partitions runs
    it: dask (:class:`ClusterEncoder`), Spark (``DataFrame.mapInPandas``), Ray
    (``Dataset.map_batches``). Texts are encoded in batches of ``batch_size`` distinct texts,
    longest first (texts of similar length share a batch: less padding), cut as one process
    cuts the same texts: a table whose rows are whole batches of a pass in that order (as
    :class:`ClusterEncoder` cuts them) gives the single-process run's vectors bit for bit,
    even from a model whose output depends in its last bits on a text's batch. With
    ``output`` each batch is
    written into that store as soon as it is encoded, each row marked encoded (the encoder's
    fingerprint, the text field and a digest of the text: the mark of ``skalign migrate``),
    by compare-and-set against its ``expected`` provenance: a row another writer changed
    meanwhile is left as it is. A row the output already holds marked encoded by this encoder
    for this text is skipped, so the partition run again after its worker died encodes only
    what the killed run had not written.

    Parameters
    ----------
    table : pandas.DataFrame or pyarrow.Table
        One row per row to encode: ``id`` (the store's id), ``text``, and optionally
        ``expected``, the provenance value read before (``None``: none); without it the
        provenance the output holds when the partition starts is the expected one.
    encoder : str, path or Encoder
        An encoder spec (:func:`skalign.encoders.load_encoder`: a model folder, a cached model
        name, ``module:callable``), loaded once per process and kept, or an encoder object.
    output : str or Address, default=None
        The store to write the vectors into (any ``skalign`` address); ``None`` returns them.
    text_field, column, provenance_key : str, default=None
        As ``skalign migrate`` takes them: where the output's texts are (the text field the
        marks name), its vector column, its provenance key.
    fingerprint : str, default=None
        The encoder fingerprint the caller expects (the one its marks name); a worker that
        loads another model (another file under the same path) raises
        :class:`~skalign.exceptions.EncoderError` before encoding.
    device : str, default="auto"
        Where a model spec runs (``"cuda"`` for GPU workers), as
        :func:`skalign.encoders.load_encoder` takes it.
    batch_size : int, default=64
        Texts per encoder call (and per write into ``output``).
    normalize : {"auto", "yes", "no"}, bool or None, default=None
        As :func:`skalign.encoders.load_encoder` takes it, for a spec.
    cache : str, path or bool, default=None
        An encode cache file (:class:`~skalign.encoders.EncodeCache`) on the worker, ``True``
        for the worker's default one (:func:`~skalign.encoders.default_cache_path`): a text it
        holds is not encoded again, and a partition run again after its worker died encodes
        only what the killed run had not cached.
    session : hashable, default=None
        A key under which the process keeps ``output`` open between partitions of one pass
        (a new key each pass; the stores of other keys are closed); ``None`` opens and closes
        it in this call.
    precision : {"full", "half"}, default="full"
        As :func:`skalign.encoders.load_encoder` takes it, for a spec: ``"half"`` runs a
        sentence-transformers model in 16 bits (another fingerprint).

    Returns
    -------
    pandas.DataFrame or pyarrow.Table
        The input's kind, one row per input row, in its order: ``id``, ``status`` and
        ``vector`` (float32; null where the row was written or held). ``status`` is
        ``"encoded"`` (the vector returned), ``"cached"`` (returned from ``cache``),
        ``"written"`` (encoded and written into ``output``), ``"held"`` (``output`` holds it
        encoded already: not encoded) or ``"changed"`` (encoded, not written: its provenance
        was no longer ``expected``; the vector returned).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from skalign.parallel import encode_partition
    >>> rows = pd.DataFrame({"id": [7, 8], "text": ["a", "abc"]})
    >>> out = encode_partition(rows, lambda t: np.array([[len(s), 1.0] for s in t]))
    >>> out.status.tolist(), out.vector[1].tolist()
    (['encoded', 'encoded'], [3.0, 1.0])
    """
    from .._stores.live import encoded_mark, mark_state
    from ..encoders import CachedEncoder
    from ..encoders import text_digest as cache_digest
    from ..exceptions import EncoderError
    from ..utils._terminal import escape_control

    kind, ids, texts, expected = _table_columns(table)
    ids = [i.item() if isinstance(i, np.generic) else i for i in ids]  # numpy scalars: Python
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise ValueError(f"encode_partition: row {escape_control(repr(ids[bad]))[:80]} has no "
                         "text")
    enc = worker_encoder(encoder, device, batch_size, normalize, cache, precision)
    if fingerprint is not None and enc.fingerprint != fingerprint:
        raise EncoderError(
            f"this worker's encoder has the fingerprint {escape_control(enc.fingerprint)}, "
            f"the run's is {escape_control(str(fingerprint))}: every worker must load the same "
            "model (the same files at the path given)")
    n = len(ids)
    status, vectors = ["encoded"] * n, [None] * n
    store_cm = (worker_output(output, column, text_field, provenance_key, session)
                if output is not None else None)
    with store_cm if store_cm is not None else contextlib.nullcontext() as store:
        if store is not None:
            now = store.fetch(ids).provenance if n else []
            field = store.text_source(text_field)
            if expected is None:
                expected = list(now)
            held = [mark_state(p, enc.fingerprint, field, t) == "encoded"
                    for p, t in zip(now, texts)]
            for i in np.flatnonzero(held):
                status[i] = "held"
        # texts grouped by length, in the batches one process forms of the same texts
        step = max(1, int(getattr(enc, "batch_size", batch_size) or batch_size))
        skip = set(np.flatnonzero(np.asarray(status) == "held").tolist())
        for batch in length_batches(texts, step):
            rows = [i for i in batch if i not in skip]
            if not rows:
                continue
            part = list(dict.fromkeys(texts[i] for i in rows))  # each text once
            digests = [cache_digest(t) for t in part] if isinstance(enc, CachedEncoder) \
                else None
            hits = {} if digests is None else enc.cache.get(enc.fingerprint, set(digests))
            cached = {t for t, d in zip(part, digests or ()) if d in hits}
            out = enc.encode(part)
            where = {t: j for j, t in enumerate(part)}
            V = out[[where[texts[i]] for i in rows]]
            if store is None:
                for j, i in enumerate(rows):
                    vectors[i] = V[j]
                    status[i] = "cached" if texts[i] in cached else "encoded"
                continue
            marks = [encoded_mark(enc.fingerprint, field, texts[i]) for i in rows]
            written = store.write_back([ids[i] for i in rows], V, marks,
                                       [expected[i] for i in rows])
            for j, i in enumerate(rows):
                if written[j]:
                    status[i] = "written"
                else:
                    status[i], vectors[i] = "changed", V[j]
    return _result_table(kind, ids, status, vectors)

