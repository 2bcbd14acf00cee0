"""One Parquet file made of Parquet files written one after the other: the footer that joins them.

The single-file Parquet output is written as a run of complete Parquet files ("units", one per
batch) appended to one file, each with its own footer; a last footer lists the row groups of
every unit. pyarrow writes a unit's offsets from the unit's own start (it cannot append to a
file), so the last footer is the first unit's footer with every unit's row groups, their byte
offsets moved by where the unit starts. Readers find data by those offsets only: the units'
own magic bytes and footers between the row groups are never read. Joining costs a few
kilobytes of footer instead of reading and writing every row again, and a unit, once fsynced,
is never written again (a resumed run appends after the last committed one).

The footer is Thrift's compact protocol; it is decoded and encoded generically (every field
kept, in order), with the same field-header choices as the Thrift library pyarrow uses, so a
footer decoded and encoded again is the same bytes.
"""

from __future__ import annotations

import struct

__all__ = ["decode", "encode", "footer_of", "join_footers"]

_MAGIC = b"PAR1"
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


def _read_varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _write_varint(out, n):
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _unzigzag(n):
    return (n >> 1) ^ -(n & 1)


def _zigzag(n):
    return (n << 1) ^ (n >> 63)


def _read(buf, pos, t):
    if t in (_TRUE, _FALSE):  # an element of a list (a field's bool is in its header)
        return buf[pos] == _TRUE, pos + 1
    if t == _BYTE:
        return buf[pos], pos + 1
    if t in (_I16, _I32, _I64):
        n, pos = _read_varint(buf, pos)
        return _unzigzag(n), pos
    if t == _DOUBLE:
        return buf[pos:pos + 8], pos + 8  # kept as its bytes
    if t == _BINARY:
        n, pos = _read_varint(buf, pos)
        return bytes(buf[pos:pos + n]), pos + n
    if t in (_LIST, _SET):
        head = buf[pos]
        pos += 1
        size, et = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _read_varint(buf, pos)
        items = []
        for _ in range(size):
            item, pos = _read(buf, pos, et)
            items.append(item)
        return (et, items), pos
    if t == _MAP:
        size, pos = _read_varint(buf, pos)
        if not size:
            return (0, 0, []), pos
        kt, vt = buf[pos] >> 4, buf[pos] & 0x0F
        pos += 1
        pairs = []
        for _ in range(size):
            k, pos = _read(buf, pos, kt)
            v, pos = _read(buf, pos, vt)
            pairs.append((k, v))
        return (kt, vt, pairs), pos
    if t == _STRUCT:
        return _read_struct(buf, pos)
    raise ValueError(f"not a Parquet footer: Thrift type {t}")


def _read_struct(buf, pos):
    fields, last = [], 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return fields, pos
        t, delta = head & 0x0F, head >> 4
        if delta:
            fid = last + delta
        else:
            n, pos = _read_varint(buf, pos)
            fid = _unzigzag(n)
        if t in (_TRUE, _FALSE):
            value = t == _TRUE
        else:
            value, pos = _read(buf, pos, t)
        fields.append([fid, t, value])
        last = fid


def _write(out, t, value):
    if t in (_TRUE, _FALSE):
        out.append(_TRUE if value else _FALSE)
    elif t == _BYTE:
        out.append(value)
    elif t in (_I16, _I32, _I64):
        _write_varint(out, _zigzag(value))
    elif t == _DOUBLE:
        out += value
    elif t == _BINARY:
        _write_varint(out, len(value))
        out += value
    elif t in (_LIST, _SET):
        et, items = value
        if len(items) < 15:
            out.append((len(items) << 4) | et)
        else:
            out.append(0xF0 | et)
            _write_varint(out, len(items))
        for item in items:
            _write(out, et, item)
    elif t == _MAP:
        kt, vt, pairs = value
        _write_varint(out, len(pairs))
        if pairs:
            out.append((kt << 4) | vt)
        for k, v in pairs:
            _write(out, kt, k)
            _write(out, vt, v)
    elif t == _STRUCT:
        _write_struct(out, value)
    else:  # pragma: no cover - decode never yields another type
        raise ValueError(f"Thrift type {t}")


def _write_struct(out, fields):
    last = 0
    for fid, t, value in fields:
        head_type = (_TRUE if value else _FALSE) if t in (_TRUE, _FALSE) else t
        if 0 < fid - last <= 15:
            out.append(((fid - last) << 4) | head_type)
        else:
            out.append(head_type)
            _write_varint(out, _zigzag(fid))
        if t not in (_TRUE, _FALSE):
            _write(out, t, value)
        last = fid
    out.append(0)


def decode(footer):
    """A Thrift compact struct (the footer's bytes) as nested ``[field id, type, value]``."""
    fields, end = _read_struct(memoryview(footer), 0)
    if end != len(footer):
        raise ValueError("not a Parquet footer: bytes after its end")
    return fields


def encode(fields):
    out = bytearray()
    _write_struct(out, fields)
    return bytes(out)


def footer_of(data):
    """The footer's bytes at the end of a Parquet file's bytes (``...footer, length, PAR1``)."""
    if len(data) < 12 or data[-4:] != _MAGIC:
        raise ValueError("not a Parquet file: no PAR1 at its end")
    (n,) = struct.unpack("<i", data[-8:-4])
    return bytes(data[-8 - n:-8])


def _field(fields, fid):
    return next((f for f in fields if f[0] == fid), None)


# byte offsets inside the file: RowGroup.file_offset (5); ColumnChunk.file_offset (2),
# offset_index_offset (4), column_index_offset (6); ColumnMetaData data_page_offset (9),
# index_page_offset (10), dictionary_page_offset (11), bloom_filter_offset (14)
_ROW_GROUP_OFFSETS, _CHUNK_OFFSETS, _META_OFFSETS = (5,), (2, 4, 6), (9, 10, 11, 14)


def _moved_row_group(row_group, shift, ordinal):
    out = []
    for fid, t, value in row_group:
        if fid in _ROW_GROUP_OFFSETS:
            value += shift
        elif fid == 7:  # ordinal: the row group's place in the joined file
            value = ordinal
        elif fid == 1:  # columns
            value = (value[0], [_moved_chunk(c, shift) for c in value[1]])
        out.append([fid, t, value])
    return out


def _moved_chunk(chunk, shift):
    out = []
    for fid, t, value in chunk:
        if fid in _CHUNK_OFFSETS:
            value += shift
        elif fid == 3:  # ColumnMetaData
            value = [[f, ft, v + shift if f in _META_OFFSETS else v] for f, ft, v in value]
        out.append([fid, t, value])
    return out


def join_footers(footers, starts):
    """The footer of the units whose footers are ``footers`` (bytes), written at byte offsets
    ``starts`` of one file: the first unit's footer (schema, key-value metadata, writer) with
    the row groups of all, in order, and their row count."""
    units = [decode(f) for f in footers]
    first = units[0]
    schema = _field(first, 2)
    row_groups, rows = [], 0
    for unit, start in zip(units, starts):
        if _field(unit, 2) != schema:
            raise ValueError("units of one Parquet file have different schemas")
        rows += _field(unit, 3)[2]
        for rg in _field(unit, 4)[2][1]:
            row_groups.append(_moved_row_group(rg, start, len(row_groups)))
    joined = []
    for fid, t, value in first:
        if fid == 3:
            value = rows
        elif fid == 4:
            value = (_STRUCT, row_groups)
        joined.append([fid, t, value])
    return encode(joined)
