"""The binary ``COPY`` stream of PostgreSQL, parsed and taken apart without decoding a value:
the rows of a batch as the server sent them (:class:`RawRows`), their vectors (pgvector's binary
form) as one array. Used by :mod:`skalign._stores.pgvector.store`; no connection is opened here."""

from __future__ import annotations

import struct

import numpy as np

from ...exceptions import StoreError

__all__ = ["RawRows", "_SIGNATURE", "_TRAILER", "_copy_rows", "_parse_copy", "_raw_vectors"]

#: the start of a binary COPY stream (signature, flags, no header extension), and its end
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_TRAILER = b"\xff\xff"
_UNPACK_I = struct.Struct(">i").unpack_from


class RawRows:
    """A batch of rows as a binary COPY stream holds them: ``buf`` and, per row, the offsets of
    the row, of its vector field (its length word) and of the end of both."""

    def __init__(self, buf, spans):
        self.buf, self.spans = buf, spans

    def __len__(self):
        return len(self.spans)


def _parse_copy(chunks, vindex, batch_size, where, column):
    """Batches of :class:`RawRows` from the chunks of a binary ``COPY ... TO STDOUT``.

    libpq hands over one row per chunk: then a batch's rows are found with array arithmetic
    over all its rows at once (:func:`_rows_of`). Chunks cut otherwise (nothing promises one
    row each) go through :func:`_parse_stream`, which follows the stream field by field.
    """
    from itertools import chain, islice

    chunks = iter(chunks)
    head = bytearray()
    for chunk in chunks:
        head += chunk
        if len(head) >= 19 and len(head) >= 19 + _UNPACK_I(head, 15)[0]:
            break
    else:
        return
    if bytes(head[:11]) != _SIGNATURE[:11]:
        raise StoreError(f"{where}: unexpected COPY data from the server.")
    rest = bytes(head[19 + _UNPACK_I(head, 15)[0]:])  # the first row, sent with the header
    first = [rest] if rest else []
    while True:
        batch = first + list(islice(chunks, batch_size - len(first)))
        first = []
        done = bool(batch) and bytes(batch[-1]) == _TRAILER
        rows = batch[:-1] if done else batch
        raw = _rows_of(rows, vindex, where, column) if rows else None
        if rows and raw is None:  # not one row per chunk
            yield from _parse_stream(chain(batch, chunks), vindex, batch_size, where, column)
            return
        if raw is not None:
            yield raw
        if done or len(batch) < batch_size:
            return


def _be_ints(a, pos, width):
    """The big-endian signed integers of ``width`` bytes at the offsets ``pos`` of ``a``."""
    return a[pos[:, None] + np.arange(width)].view(f">i{width}")[:, 0].astype(np.int64)


def _rows_of(rows, vindex, where, column):
    """The :class:`RawRows` of chunks that each hold one whole row, or ``None`` where they do
    not: every row's fields walked at once, a field at a time."""
    lens = np.fromiter(map(len, rows), np.int64, len(rows))
    buf = b"".join(rows)
    a = np.frombuffer(buf, np.uint8)
    ends = np.cumsum(lens)
    starts = ends - lens
    if (lens < 2).any():
        return None
    nf = _be_ints(a, starts, 2)
    if (nf != nf[0]).any() or not vindex < nf[0]:
        return None
    p, null = starts + 2, False
    for i in range(int(nf[0])):
        if (p + 4 > ends).any():
            return None
        ln = _be_ints(a, p, 4)
        if i == vindex:
            vs, null = p, bool((ln < 0).any())
        p = p + 4 + np.maximum(ln, 0)
        if i == vindex:
            ve = p
    if (p != ends).any():
        return None
    if null:
        raise StoreError(f"{where}: column {column!r} has NULL vectors; drop or re-embed those "
                         "rows first.")
    return RawRows(buf, list(zip(starts.tolist(), vs.tolist(), ve.tolist(), ends.tolist())))


def _parse_stream(chunks, vindex, batch_size, where, column):
    """:func:`_parse_copy` on chunks cut anywhere (after the header), field by field."""
    unpack_h, unpack_i = struct.Struct(">h").unpack_from, _UNPACK_I
    acc = bytearray()  # the rows of the batch being gathered, then what has come of the next
    pos, spans = 0, []
    for chunk in chunks:
        acc += chunk
        end = len(acc)
        while pos + 2 <= end:
            (nf,) = unpack_h(acc, pos)
            if nf == -1:  # the trailer
                if spans:
                    yield RawRows(bytes(acc[:pos]), spans)
                return
            p, vs, ve = pos + 2, 0, 0
            for i in range(nf):
                if p + 4 > end:
                    p = end + 1
                    break
                (ln,) = unpack_i(acc, p)
                if i == vindex:
                    if ln < 0:
                        raise StoreError(f"{where}: column {column!r} has NULL vectors; drop or "
                                         "re-embed those rows first.")
                    vs = p
                p += 4 + max(ln, 0)
                if i == vindex:
                    ve = p
            if p > end:  # the row continues in the next chunk
                break
            spans.append((pos, vs, ve, p))
            pos = p
            if len(spans) == batch_size:
                yield RawRows(bytes(acc[:pos]), spans)
                del acc[:pos]
                pos, spans, end = 0, [], len(acc)
    if spans:
        yield RawRows(bytes(acc[:pos]), spans)


def _copy_rows(pgconn):
    """The data of a ``COPY ... TO STDOUT`` psycopg has started, straight from libpq (iterating
    psycopg's ``Copy`` costs a generator and a wait a row, most of the read's time). The rows
    libpq holds are taken without blocking; when it holds none, the wait for the socket is a
    ``select`` that releases the GIL (a blocking ``PQgetCopyData`` holds it, keeping the writing
    threads from running while the server sends). The parser stops at the stream's trailer,
    which comes before libpq's end of copy, so psycopg still finishes the ``COPY`` when its
    block exits."""
    import select

    get, fd = pgconn.get_copy_data, pgconn.socket
    while True:
        nbytes, data = get(1)
        if nbytes > 0:
            yield data
        elif nbytes == 0:  # nothing buffered: wait for the server
            select.select([fd], [], [])
            pgconn.consume_input()
        else:  # the end (or an error, which psycopg raises when the block exits)
            return


def _raw_vectors(raw, dim, where):
    """The vectors of a :class:`RawRows` batch (pgvector's binary form: int16 dimensions,
    int16 unused, big-endian float32 values)."""
    buf = raw.buf
    parts = [buf[vs + 4: ve] for _, vs, ve, _ in raw.spans]
    sizes = {ve - vs - 4 for _, vs, ve, _ in raw.spans}
    if sizes != {4 + 4 * dim}:
        raise StoreError(f"{where}: vectors of another length than {dim} in the table; all "
                         "vectors must have the same length.")
    return np.frombuffer(b"".join(parts), dtype=">f4").reshape(len(parts), dim + 1)[:, 1:] \
        .astype(np.float32)
