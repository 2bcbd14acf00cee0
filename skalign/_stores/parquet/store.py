"""Parquet stores: one ``*.parquet`` file, or a folder of ``*.parquet`` shards (searched
recursively). An output path without a suffix is written as a folder of shards: one output shard
per input shard (same relative names), or one ``part-NNNNN.parquet`` per batch for unsharded
input, each a complete Parquet file listed in the journal as it is committed; a single output
file is written unit by unit with the footer of all of them at the end
(:mod:`skalign._stores.parquet.footer`)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ...exceptions import StoreError
from ..base import StoreReader
from ..files.arrow import arrow_vectors, import_pyarrow, output_batch, output_schema, pick_column
from ..files.direct_io import SequentialWriter
from ..files.shadow import (
    FileShadow,
    _fsync,
    create_file,
    fsync_dir,
    open_file,
    remove_path,
)
from ..journal import read_journal, write_journal
from .footer import footer_of

__all__ = ["ParquetFileWriter", "ParquetFolderWriter", "ParquetReader"]

#: rows per output shard when an unsharded input is written as a folder of Parquet shards
ROWS_PER_SHARD = 1 << 20

class ParquetReader(StoreReader):
    has_rows = True
    kind = "parquet"

    def __init__(self, address, column=None):
        path = address.path
        pa, pq = self._pa, self._pq = import_pyarrow(path)
        self.path = path
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
            if not files:
                raise StoreError(
                    f"{path}: folder holds no .parquet files; pass a Parquet file, a folder of "
                    "Parquet shards, a .npy file or a DIR/TABLE.lance table."
                )
            self.shards = [(p, p.relative_to(path).as_posix()) for p in files]
        elif path.is_file():
            self.shards = [(path, None)]
        else:
            raise StoreError(f"{path}: no such file or folder; check the path.")
        self._files = []
        for p, _ in self.shards:
            try:
                self._files.append(pq.ParquetFile(p))
            except (pa.ArrowException, OSError) as exc:
                raise StoreError(
                    f"{p}: not a readable Parquet file ({str(exc).splitlines()[0]})."
                ) from None
        self.schema = self._files[0].schema_arrow
        self.column = pick_column(pa, self.schema, column, path)
        for (p, _), f in zip(self.shards, self._files):
            if self.column not in f.schema_arrow.names:
                raise StoreError(
                    f"{p}: shard has no column {self.column!r}; all shards must share one schema."
                )
        self.n_rows = sum(f.metadata.num_rows for f in self._files)
        t = self.schema.field(self.column).type
        self.dim = t.list_size if pa.types.is_fixed_size_list(t) else self._peek_dim()
        self.dtype = np.dtype(t.value_type.to_pandas_dtype())

    def _peek_dim(self):
        for (p, _), f in zip(self.shards, self._files):
            if f.metadata.num_rows:
                batch = next(f.iter_batches(batch_size=1, columns=[self.column]))
                first = batch.column(0)
                if first.null_count:
                    raise StoreError(
                        f"{p}: column {self.column!r} has missing (null) vectors; drop or "
                        "re-embed those rows first."
                    )
                return len(first[0])
        return 0

    def batches(self, batch_size, start=0):
        pa = self._pa
        seen = 0
        for (p, shard), f in zip(self.shards, self._files):
            if seen + f.metadata.num_rows <= start:  # a whole shard already translated
                seen += f.metadata.num_rows
                continue
            idx = f.schema_arrow.get_field_index(self.column)
            for group in range(f.num_row_groups):
                group_rows = f.metadata.row_group(group).num_rows
                if seen + group_rows <= start:  # resuming: skip it unread
                    seen += group_rows
                    continue
                # one row group at a time: over a whole file, pyarrow reads ahead and held
                # 1.5 GB of a million 384-d rows before the first batch was done with
                for rb in f.iter_batches(batch_size=batch_size, row_groups=[group]):
                    seen += rb.num_rows
                    if seen <= start:  # batches restart with each row group: resume on one
                        continue
                    yield arrow_vectors(pa, rb.column(idx), self.dim, p, self.column), rb, shard

    def row(self, rb, k):
        """Row ``k`` of a batch without its vector: the fields the output must keep."""
        out = rb.slice(k, 1).to_pylist()[0]
        out.pop(self.column)
        return out

    def take(self, positions, batch_size):
        """Rows at ``positions``: vectors and fields, read as :func:`_batches_holding` reads, in
        batches of ``TAKE_BATCH_ROWS`` rows whatever ``batch_size``: a row group is decoded
        from its start up to the last row wanted, not on to the end of a translation batch
        (a resumed run's verification reads back the sampled rows the crashed run committed)."""
        vectors, rows = {}, {}
        for i, rb, here in _batches_holding(self._files, positions, TAKE_BATCH_ROWS):
            vecs = arrow_vectors(self._pa, rb.column(rb.schema.get_field_index(self.column)),
                                 self.dim, self.shards[i][0], self.column)
            for pos, k in here.items():
                vectors[pos], rows[pos] = vecs[k], self.row(rb, k)
        return [vectors[pos] for pos in positions], [rows[pos] for pos in positions]

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        if not parts:
            return np.empty((0, self.dim), dtype=self.dtype)
        return np.concatenate(parts)




def _parquet_writer(pq, schema, column, target):
    """A Parquet writer of the output's schema into ``target`` (a path or a file object)."""
    # float vectors gain nothing from dictionary encoding or compression (measured: the same
    # size), which only cost time, on writing and on reading back
    others = [n for n in schema.names if n != column]
    return pq.ParquetWriter(
        target, schema, use_dictionary=others,
        compression={n: ("none" if n == column else "snappy") for n in schema.names})


def _encode_unit(writer, out, rb, start):
    """``(bytes, rows)``: a batch of a Parquet writer's output as a complete Parquet file."""
    batch = output_batch(writer.pa, writer.schema, writer.job.out_column, out, rb, start)
    sink = writer.pa.BufferOutputStream()
    pw = _parquet_writer(writer.pq, writer.schema, writer.job.out_column, sink)
    try:
        pw.write_batch(batch)
    finally:
        pw.close()  # the unit's footer
    return sink.getvalue(), len(out)


class ParquetFolderWriter(FileShadow):
    """A folder of Parquet shards. The shadow is a hidden folder; every committed unit is a
    complete Parquet file listed in the journal: one file per input shard (sharded input) or per
    batch (``part-NNNNN.parquet``, unsharded input), renamed as a whole at the end."""

    suffix = ""
    pipelined = True
    encodes = True
    #: unsharded parts written past the page cache where the system allows
    direct = True

    def begin(self, fp):
        self.pa, self.pq = import_pyarrow(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.work = self.partial
        state = read_journal(self.journal)
        if state is not None and state.get("fingerprint") == fp and self.work.is_dir() \
                and not self.work.is_symlink() and not self.journal.is_symlink():
            self.parts = [tuple(p) for p in state["parts"]]
            keep = {name for name, _ in self.parts}
            for p in self.work.rglob("*.parquet"):  # a unit written but not yet committed
                if p.relative_to(self.work).as_posix() not in keep:
                    p.unlink()
        else:
            self.discard()
            self.work.mkdir(mode=self.dir_mode)  # the source's mode; refuses any link there
            self.parts = []
            write_journal(self.journal, fingerprint=fp, parts=[])
        self.fp = fp
        self.rows = sum(n for _, n in self.parts)
        self._writer = self._current = None
        self._unit_rows = 0
        self._unsynced = []  # parts closed since the last commit
        return self.rows

    def _parquet_writer(self, target):
        return _parquet_writer(self.pq, self.schema, self.job.out_column, target)

    def _close_unit(self):
        if self._writer is None:
            return
        self._writer.close()
        self._unsynced.append((self._current, self._unit_rows))
        self._writer, self._unit_rows = None, 0
        if self.clock.due():
            self._commit()

    def _commit(self):
        """Make the parts closed since the last commit durable, then list them in the
        journal; a part not listed there is removed and written again by a rerun."""
        folders = set()
        for name, _ in self._unsynced:
            with open(self.work / name, "rb") as f:
                os.fsync(f.fileno())
            folders.add(self.work / Path(name).parent)
        for folder in folders:
            fsync_dir(folder)
        self.parts += self._unsynced
        self._unsynced = []
        write_journal(self.journal, fingerprint=self.fp, parts=self.parts)
        self.clock.reset()

    def encode_unit(self, out, rb, shard, start):
        """Without shards, the batch as its own part, a complete Parquet file in memory (see
        ``ParquetFileWriter.encode_unit``); the rows of a shard go to :meth:`write_unit` as
        they are (a shard's batches share one file, written in order)."""
        if shard:
            return out
        return _encode_unit(self, out, rb, start)

    def write_unit(self, out, rb, shard, start):
        """Append a batch; a unit ends at a shard change or, without shards, after each batch
        (given encoded by :meth:`encode_unit`: written as it is)."""
        n_parts = len(self.parts) + len(self._unsynced)
        name = shard if shard else f"part-{n_parts:05d}.parquet"
        if isinstance(out, tuple):  # an unsharded part, already a Parquet file's bytes
            unit, n_rows = out
            remove_path(self.work / name)  # an uncommitted part of a crashed run
            with self.create(self.work / name) as f:  # made durable by the commit
                seq = SequentialWriter(f, 0, direct=self.direct)
                seq.write(unit)
                seq.flush()
                seq.close()
            self._unsynced.append((name, n_rows))
            self.rows += n_rows
            if self.clock.due():
                self._commit()
            return
        batch = output_batch(self.pa, self.schema, self.job.out_column, out, rb, start)
        if self._writer is not None and name != self._current:
            self._close_unit()
        if self._writer is None:
            target = self.work / name
            for folder in reversed(target.relative_to(self.work).parents[:-1]):
                (self.work / folder).mkdir(mode=self.dir_mode, exist_ok=True)
            remove_path(target)
            os.close(create_file(target, self.file_mode))  # pyarrow writes it, mode kept
            self._writer = self._parquet_writer(target)
            self._current = name
        self._writer.write_batch(batch)
        self._unit_rows += len(out)
        self.rows += len(out)
        if not shard:
            self._close_unit()

    def finish(self):
        self._close_unit()
        self._commit()
        return self.rows

    def fetch(self, positions, rows=None):
        files = [self.work / name for name, _ in self.parts]
        return _parquet_take(self.pa, self.pq, files, positions, self.job.out_column)

    def close(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class ParquetFileWriter(FileShadow):
    """One Parquet file. The shadow ``.NAME.skalign-partial.parquet`` is a run of complete
    Parquet files, one per batch (a row group each), appended one after the other; the journal
    lists the committed ones (where each starts and ends, its rows). A rerun cuts the shadow back
    to the end of the last committed one and appends after it; the end of the run appends one
    footer listing the row groups of all (:mod:`skalign._stores.parquet.footer`), so no row is
    read or written twice, in a resumed run or an uninterrupted one."""

    suffix = ".parquet"
    pipelined = True
    encodes = True
    #: write past the page cache where the system allows (:class:`SequentialWriter`)
    direct = True

    def leftovers(self):
        # the folder of parts an earlier version joined at the end
        parts = self.partial.with_name(self.partial.name + ".parts")
        return super().leftovers() + ([parts] if parts.exists() else [])

    def begin(self, fp):
        self.pa, self.pq = import_pyarrow(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.fp = fp
        state = self._resumable(fp)
        if state is None or "units" not in state or (
                state["units"] and self.partial.stat().st_size < state["units"][-1][1]):
            self.discard()  # not this job's, another version's layout, or cut short
            os.close(create_file(self.partial, self.file_mode))  # no link followed
            write_journal(self.journal, fingerprint=fp, units=[])
            state = {"units": []}
        self.units = [tuple(u) for u in state["units"]]  # (start, end, rows), committed
        self._file = open_file(self.partial, "r+b")
        end = self.units[-1][1] if self.units else 0
        self._file.truncate(end)  # a unit written but not committed
        self._file.seek(end)
        self._seq = SequentialWriter(self._file, end, direct=self.direct)
        self._footers = [self._footer(e) for _, e, _ in self.units]
        self._unsynced = []
        self.rows = sum(n for _, _, n in self.units)
        return self.rows

    def _footer(self, end):
        """The footer of the unit ending at byte ``end`` of the shadow."""
        fd = self._file.fileno()
        (n,) = struct.unpack("<i", os.pread(fd, 4, end - 8))
        return footer_of(os.pread(fd, n + 8, end - 8 - n))

    def encode_unit(self, out, rb, shard, start):
        """The batch as a complete Parquet file in memory (pyarrow's encoder, without the GIL;
        several batches at once, see ``WriteBehind``)."""
        return _encode_unit(self, out, rb, start)

    def write_unit(self, encoded, rb, shard, start):
        """Append a batch encoded by :meth:`encode_unit` (``WriteBehind`` encodes every
        batch before its write)."""
        unit, n_rows = encoded
        at = self._seq.tell()
        self._seq.write(unit)
        end = self._seq.tell()
        self._footers.append(footer_of(memoryview(unit)))
        self._unsynced.append((at, end, n_rows))
        self.rows += n_rows
        if self.clock.due():
            self._commit()

    def _commit(self):
        """Make the units written since the last commit durable, then list them in the
        journal; the bytes after the last unit listed there are cut off by a rerun."""
        self._seq.sync()
        self.units += self._unsynced
        self._unsynced = []
        write_journal(self.journal, fingerprint=self.fp, units=self.units)
        self.clock.reset()

    def finish(self):
        from .footer import join_footers

        self._commit()
        if not self.units:  # no rows: a file with the schema only
            self._seq.close()
            _parquet_writer(self.pq, self.schema, self.job.out_column, self._file).close()
            _fsync(self._file)
        else:
            footer = join_footers(self._footers, [s for s, _, _ in self.units])
            self._seq.write(footer + struct.pack("<i", len(footer)) + b"PAR1")
            self._seq.sync()
        self.close()
        return self.rows

    def fetch(self, positions, rows=None):
        return _parquet_take(self.pa, self.pq, [self.partial], positions, self.job.out_column)


def _batches_holding(files, positions, batch_size):
    """The batches of the Parquet ``files`` (``pq.ParquetFile``, rows numbered across them in
    order) that hold rows at ``positions``: ``(index of the file, batch, {position: row in the
    batch})``.

    A row group holding some is read a batch at a time from its start up to its last row
    wanted: Parquet cannot seek inside a row group, and decoding a whole group of 768-d lists
    as one table took about 0.5 s for a few of its rows.
    """
    wanted, seen = sorted(set(positions)), 0
    for i, f in enumerate(files):
        for g in range(f.num_row_groups):
            lo, seen = seen, seen + f.metadata.row_group(g).num_rows
            inside = [pos for pos in wanted if lo <= pos < seen]
            if not inside:
                continue
            at = lo
            for rb in f.iter_batches(batch_size=batch_size, row_groups=[g]):
                here = {pos: pos - at for pos in inside if at <= pos < at + rb.num_rows}
                if here:
                    yield i, rb, here
                at += rb.num_rows
                if at > inside[-1]:
                    break


#: rows decoded at a time while the verification looks for the sampled rows of a row group, in
#: the output (:func:`_parquet_take`) and in a Parquet input (``ParquetReader.take``)
TAKE_BATCH_ROWS = 1024


def _parquet_take(pa, pq, files, positions, column):
    """Rows at ``positions`` of the concatenation of ``files``: vectors, other columns."""
    got = {}
    for _, rb, here in _batches_holding([pq.ParquetFile(p) for p in files], positions,
                                        TAKE_BATCH_ROWS):
        got.update(zip(here, rb.take(pa.array(list(here.values()))).to_pylist()))
    vecs, rows = [], []
    for pos in positions:
        row = dict(got[pos])
        vecs.append(np.asarray(row.pop(column), dtype=np.float32))
        rows.append(row)
    return np.stack(vecs) if vecs else np.empty((0, 0), np.float32), rows
