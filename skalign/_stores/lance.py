"""LanceDB tables: ``DIR/TABLE.lance`` is the table ``TABLE`` of the embedded LanceDB database
in folder ``DIR`` (the path of the table's own folder on disk). No server is involved.

Live (:class:`LanceLive`): ids from an id column (``id`` by default: LanceDB's search names its
rows by their columns, so a table needs one), texts from a text column, candidates from the table's
own search (its vector index where it has one, else an exact scan), encoded rows in the overlay
(:mod:`skalign._stores.files.overlay`, merged as :mod:`skalign._stores.files.live` says)."""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

from ..exceptions import StoreError
from .base import StoreReader
from .databases.edge import one_line
from .files.arrow import (
    _is_vector_type,
    arrow_vectors,
    import_lancedb,
    import_pyarrow,
    output_batch,
    output_schema,
    pick_column,
)
from .files.arrow_live import id_index, text_column
from .files.engine import FileEngine
from .files.fields import (
    OWNED,
    column_state,
    fold,
    open_column_field,
    owned,
    read_sidecar,
    write_sidecar,
)
from .files.live import FileLiveStore, IdIndex, check_metric
from .files.shadow import FileShadow
from .journal import write_journal

__all__ = ["LanceEngine", "LanceLive", "LanceReader", "LanceWriter"]

#: Rows of a LanceDB table read at a time (see ``LanceReader.batches``).
LANCE_WINDOW_ROWS = 8192


class LanceReader(StoreReader):
    has_rows = True
    kind = "lance"

    def __init__(self, address, column=None):
        path = address.path
        pa, _ = self._pa, _ = import_pyarrow(path)
        lancedb = import_lancedb(path)
        self.path = path
        name = path.name[: -len(".lance")]
        if not path.is_dir():
            raise StoreError(
                f"{path}: no LanceDB table {name!r} in {path.parent}; a table is addressed by "
                "its folder, DIR/TABLE.lance."
            )
        try:
            self._table = lancedb.connect(path.parent).open_table(name)
        except Exception as exc:  # lancedb raises ValueError, OSError or its own errors
            raise StoreError(
                f"{path}: not a readable LanceDB table ({str(exc).splitlines()[0]})."
            ) from None
        self.schema = self._table.schema
        self.column = pick_column(pa, self.schema, column, path)
        self.n_rows = self._table.count_rows()
        t = self.schema.field(self.column).type
        self.dtype = np.dtype(t.value_type.to_pandas_dtype())
        if pa.types.is_fixed_size_list(t):
            self.dim = t.list_size
        else:
            head = self._table.search().select([self.column]).limit(1).to_arrow()
            self.dim = len(head.column(0)[0]) if head.num_rows else 0

    def batches(self, batch_size, start=0):
        pa = self._pa
        # each batch read as windows of at most LANCE_WINDOW_ROWS rows (offset and limit):
        # lancedb's scan reads ahead (a peak of 0.9 GB over a million 384-d rows, windows of
        # 8,192 rows 0.33 GB, and in less time), and it cannot be told not to without pylance
        for lo in range(start, self.n_rows, batch_size):
            hi = min(lo + batch_size, self.n_rows)
            parts = [self._table.search().offset(at).limit(min(LANCE_WINDOW_ROWS, hi - at))
                     .to_arrow() for at in range(lo, hi, LANCE_WINDOW_ROWS)]
            table = pa.concat_tables(parts).combine_chunks()
            if table.num_rows != hi - lo:  # the table changed under the translation
                raise StoreError(f"{self.path}: rows {lo}-{hi - 1} could not be read; was the "
                                 "table changed during the translation? Run the command again.")
            rb = table.to_batches()[0]
            idx = rb.schema.get_field_index(self.column)
            yield arrow_vectors(pa, rb.column(idx), self.dim, self.path, self.column), rb, None

    def row(self, rb, k):
        """Row ``k`` of a batch without its vector: the fields the output must keep."""
        out = rb.slice(k, 1).to_pylist()[0]
        out.pop(self.column)
        return out

    def take(self, positions, batch_size):
        """Rows at ``positions``: vectors and fields (one at a time: ``take_offsets`` does not
        promise the order of several)."""
        vectors, rows = [], []
        for pos in positions:
            rb = self._table.take_offsets([int(pos)]).to_arrow().to_batches()[0]
            idx = rb.schema.get_field_index(self.column)
            vectors.append(arrow_vectors(self._pa, rb.column(idx), self.dim, self.path,
                                         self.column)[0])
            rows.append(self.row(rb, 0))
        return vectors, rows

    def read_all(self):
        parts = [v for v, _, _ in self.batches(65536)]
        if not parts:
            return np.empty((0, self.dim), dtype=self.dtype)
        return np.concatenate(parts)


class LanceWriter(FileShadow):
    """The shadow is a LanceDB table in the same database; each batch is one ``add`` (a Lance
    commit), so the committed row count is the table's own.

    An ``add`` killed before its commit leaves its data (and transaction) file in the table's
    folder, referenced by no version. The journal lists the table's files after each commit,
    with the version; a rerun that finds the table at that version removes every file not in
    the list (at a later version the crash came after the commit, so nothing is stray).
    """

    suffix = ".lance"
    pipelined = True

    def __init__(self, address, job):
        super().__init__(address, job)
        self.name = self.path.name[: -len(".lance")]
        self.partial = self.path.with_name(f"{self.name}-skalign-partial.lance")

    @contextmanager
    def lock(self):
        created = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=self.dir_mode)
        try:
            with super().lock():
                yield self
        finally:
            if created:
                try:
                    self.path.parent.rmdir()  # a database folder this run made and left empty
                except OSError:
                    pass

    def begin(self, fp):
        self.pa, _ = import_pyarrow(self.path)
        lancedb = import_lancedb(self.path)
        job = self.job
        self.schema = output_schema(self.pa, job.reader, job.out_column, job.d_out)
        self.db = lancedb.connect(self.path.parent)
        tmp_name = self.partial.name[: -len(".lance")]
        self.fp = fp
        state = self._resumable(fp)
        if state is not None:
            try:
                self.table = self.db.open_table(tmp_name)
                self.rows = self.table.count_rows()
            except Exception:  # a shadow too broken to open: start afresh
                self.discard()
            else:
                if self.table.version == state.get("version"):
                    keep = set(state.get("files", ()))
                    for name in self._files():
                        if name not in keep:
                            (self.partial / name).unlink()
                self._record()
                return self.rows
        # the table's folder made first, with the source's mode (no link followed: it must not
        # exist); LanceDB fills it (its files are the umask's, inside it; set at the end)
        os.mkdir(self.partial, self.dir_mode)
        self.table = self.db.create_table(tmp_name, schema=self.schema)
        self._record()
        self.rows = 0
        return 0

    def _files(self):
        """The table's data and transaction files (what an uncommitted ``add`` writes)."""
        return [f"{sub}/{name}" for sub in ("data", "_transactions")
                if (self.partial / sub).is_dir() for name in os.listdir(self.partial / sub)]

    def _record(self):
        write_journal(self.journal, fingerprint=self.fp, version=self.table.version,
                      files=sorted(self._files()))

    def write_unit(self, out, rb, shard, start):
        batch = output_batch(self.pa, self.schema, self.job.out_column, out, rb, start)
        self.table.add(self.pa.Table.from_batches([batch]))
        self._record()
        self.rows += len(out)

    def finish(self):
        """The row count; the table's files and folders get the output's modes (LanceDB made
        them with the umask's, inside the folder made with it)."""
        top = os.stat(self.partial).st_mode & 0o777  # dir_mode, less the umask
        for root, dirs, files in os.walk(self.partial):
            for name in dirs + files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, top if name in dirs else top & 0o666)
        return self.table.count_rows()

    def fetch(self, positions, rows=None):
        # one at a time: take_offsets does not promise the order of several
        got = [self.table.take_offsets([int(p)]).to_arrow().to_pylist()[0] for p in positions]
        vecs = [np.asarray(r.pop(self.job.out_column), dtype=np.float32) for r in got]
        return np.stack(vecs) if vecs else np.empty((0, 0), np.float32), got

    def close(self):
        pass


class LanceEngine(FileEngine):
    """The LanceDB engine: a table ``DIR/TABLE.lance`` of the database in ``DIR``, which
    writing a table creates."""

    suffix = ".lance"
    makes_parent = True
    interchangeable = True
    ids_in_column = True

    # a second vector column (--into FIELD): see _field_rows
    def vector_fields(self, address):
        pa, _ = import_pyarrow(address.path)
        return {f.name: (f.type.list_size if pa.types.is_fixed_size_list(f.type) else None)
                for f in _table(address.path).schema if _is_vector_type(pa, f.type)}

    def field_state(self, address, field):
        return _field_state(address, field)

    def add_field(self, address, field, dim, like):
        """Nothing yet: the column comes with the step's fold (:meth:`finish_field`)."""

    def open_field(self, address, field, *, text_field=None, **options):
        return _open_field(address, field, text_field=text_field, **options)

    def read_field_stamp(self, address, field):
        return read_sidecar(address.path, field)

    def write_field_stamp(self, address, field, stamp):
        write_sidecar(address.path, field, stamp)

    def finish_field(self, address, field):
        """Fold the field's overlay into the table: the column added (``NULL`` everywhere,
        one commit, no row rewritten) where it is not there yet, then every row's value and
        mark in one ``merge_insert`` on the id column (one commit: a reader sees the table
        before or after; the rows keep their order, the table's current version grows by the
        new column; LanceDB keeps the previous versions until ``optimize``)."""
        from .files.overlay import OVERLAY_SUFFIX, rebinding

        live = _open_field(address, field)
        try:
            old = live._base.column
            fold(live, lambda P, V, M: _merge_field(live, field, P, V, M))
        finally:
            live.close()
        if address.path.with_name(address.path.name + OVERLAY_SUFFIX).is_dir():
            with rebinding():  # the old field's own overlay: same rows, ids and column
                LanceLive(address, column=old).close()

    def drop_field_command(self, address, field):
        from .live import field_key

        name = address.path.name[: -len(".lance")]
        return (f"python -c \"import lancedb; t = lancedb.connect({str(address.path.parent)!r})"
                f".open_table({name!r}); t.drop_columns([c for c in [{field!r}, "
                f"{field_key(field)!r}] if c in t.schema.names])\"")


def _field_state(address, field):
    """The field's width where skalign added it (:func:`~skalign._stores.files.fields.
    column_state` on the table's schema)."""
    import_pyarrow(address.path)
    return column_state(address, _table(address.path).schema, field, "table")


def _open_field(address, field, *, text_field=None, **options):
    """The field as a :class:`~skalign._stores.files.fields.FieldLive` over the table opened
    on its old column (the stamp's ``from_field``)."""
    dim = _field_state(address, field)
    return open_column_field(
        address, field, dim,
        lambda old: LanceLive(address, column=old, text_field=text_field, **options),
        lambda base: _field_rows(base, field, dim))


def _table(path):
    lancedb = import_lancedb(path)
    try:
        return lancedb.connect(path.parent).open_table(path.name[: -len(".lance")])
    except Exception as exc:  # lancedb raises ValueError, OSError or its own errors
        raise StoreError(f"{path}: not a readable LanceDB table "
                         f"({str(exc).splitlines()[0]}).") from None


def _field_rows(base, field, dim):
    """The field's values in the table, in the rows' order (:class:`~skalign._stores.files.
    fields.FieldLive`): vectors (zeros where ``NULL``), whether each row has one, marks."""
    from .live import field_key

    n, key = base.n_rows, field_key(field)
    V, filled, marks = np.zeros((n, dim), np.float32), np.zeros(n, bool), [None] * n
    names = base._table.schema.names
    if field not in names:
        return V, filled, marks
    cols = [base.id_field, field] + ([key] if key in names else [])
    got = base._table.search().select(cols).limit(max(n, 1)).to_arrow()
    at = base._ids.positions(got.column(0).to_pylist(), base.path)
    arr = got.column(1).combine_chunks()
    valid = np.asarray(arr.is_valid())
    if valid.any():
        V[at[valid]] = np.asarray(arr.filter(arr.is_valid()).flatten(), np.float32).reshape(
            -1, dim)
    filled[at] = valid
    if len(cols) > 2:
        for p, m in zip(at, got.column(2).to_pylist()):
            marks[p] = m
    return V, filled, marks


def _merge_field(live, field, positions, vectors, marks):
    from .live import field_key

    pa, _ = import_pyarrow(live.path)
    table, key, dim = live._base._table, field_key(field), live.dim
    V, filled, mk = (np.array(a, copy=True) if isinstance(a, np.ndarray) else list(a)
                     for a in live.values())
    V[positions], filled[positions] = vectors, True
    for p, m in zip(positions, marks):
        mk[p] = m
    vtype = pa.list_(pa.float32(), dim)
    if field not in table.schema.names:
        table.add_columns([pa.field(field, vtype, metadata=OWNED), pa.field(key, pa.string())])
    ids = live._ids.ids_of(np.arange(live.n_rows))
    data = pa.table({live.id_field: pa.array(ids, table.schema.field(live.id_field).type),
                     field: pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), dim,
                                                              mask=pa.array(~filled)),
                     key: pa.array(mk, pa.string())})
    try:
        table.merge_insert(live.id_field).when_matched_update_all().execute(data)
    except Exception as exc:  # lancedb raises ValueError, RuntimeError or its own
        raise StoreError(f"{live.path}: cannot write the field {field!r} "
                         f"({one_line(exc, live.address)}).") from None


# ---------------------------------------------------------------------------- live
#: LanceDB's name of each metric, and its distance turned into a score (higher is better)
_LANCE_METRIC = {"cosine": ("cosine", lambda d: 1 - d), "l2": ("l2", lambda d: -d),
                 "ip": ("dot", lambda d: 1 - d)}


class LanceLive(FileLiveStore):
    """A LanceDB table searched live.

    Parameters
    ----------
    address : Address
    column : str, default=None
        The vector column (default: the only list-of-floats column, or vector/embedding).
    text_field : str, default=None
        The column holding each row's text.
    id_field : str, default=None
        The id column (default ``"id"``).
    metric : {"cosine", "ip", "l2"}, default="cosine"
        The similarity the search ranks by (that of the table's vector index, where it has
        one).
    """

    kind = "lance"
    exact = False

    def __new__(cls, address, *, column=None, **options):
        # a vector column skalign added (--into FIELD) is read with its own overlay
        if column is not None and cls is LanceLive:
            schema = _table(address.path).schema
            if (owned(schema.field(column)) if column in schema.names
                    else read_sidecar(address.path, column) is not None):
                return _open_field(address, column, **options)
        return super().__new__(cls)

    def __init__(self, address, *, column=None, text_field=None, id_field=None,
                 metric="cosine"):
        self.address, self.path = address, address.path
        self._pa, _ = import_pyarrow(self.path)
        self._reader = r = LanceReader(address, column)
        self._table, self.column = r._table, r.column
        self.n_rows, self.dim = int(r.n_rows), int(r.dim)
        self.metric = check_metric(metric, self.path)
        self._ids, self.id_field = id_index(r.schema, id_field, self.n_rows, self._id_column,
                                            self.path)
        if not isinstance(self._ids, IdIndex):
            raise StoreError(f"{self.path}: no id column; LanceDB's search names rows by a "
                             "column of unique ids: pass it with --id-field.")
        self.text_field = text_field
        if text_field is not None:
            text_column(self._pa, r.schema, text_field, self.path)
        st = self.path.stat()
        self._open_overlay({"rows": self.n_rows, "dim": self.dim,
                            "version": int(self._table.version),
                            "folder": [st.st_dev, st.st_ino]})

    def _id_column(self, name):
        table = self._table.search().select([name]).limit(max(self.n_rows, 1)).to_arrow()
        if table.num_rows != self.n_rows:
            raise StoreError(f"{self.path}: read {table.num_rows} ids of {self.n_rows} rows; "
                             "was the table changed meanwhile? Open it again.")
        return table.column(0).combine_chunks()

    def _index_top_k(self, queries, k):
        name, to_score = _LANCE_METRIC[self.metric]
        positions, scores = [], []
        for q in queries:
            try:
                hits = (self._table.search(q, vector_column_name=self.column).metric(name)
                        .select([self.id_field, "_distance"]).limit(k).to_arrow())
            except Exception as exc:  # lancedb raises ValueError, RuntimeError or its own
                raise StoreError(f"{self.address}: search failed "
                                 f"({one_line(exc, self.address)}).") from None
            ids = hits.column(self.id_field).to_pylist()
            positions.append(self._ids.positions(ids, self.path))
            scores.append(to_score(hits.column("_distance").to_numpy()).astype(np.float32))
        return positions, scores

    def _rows(self, positions, text_field):
        # take_offsets returns rows in its own order: each is placed by its id
        wanted = np.unique(positions)
        got = self._table.take_offsets([int(p) for p in wanted]).to_arrow()
        at = self._ids.positions(got.column(self.id_field).to_pylist(), self.path)
        if not np.array_equal(np.sort(at), wanted):
            raise StoreError(f"{self.path}: rows read back do not match the rows asked for; "
                             "was the table changed meanwhile? Open it again.")
        slot = np.searchsorted(wanted, at)  # got's row j is wanted[slot[j]]
        where = np.empty(len(wanted), np.int64)
        where[slot] = np.arange(len(at))
        pick = where[np.searchsorted(wanted, positions)]
        V = arrow_vectors(self._pa, got.column(self.column), self.dim, self.path, self.column)
        vectors = np.asarray(V, dtype=np.float32)[pick]
        if text_field is None:
            return vectors, None
        if text_field != self.text_field:
            text_column(self._pa, self._reader.schema, text_field, self.path)
        texts = got.column(text_field).to_pylist()
        return vectors, [texts[j] for j in pick]
