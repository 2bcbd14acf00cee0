r"""A large write-back step into a pgvector table (:meth:`PgvectorLive.write_many`): the HNSW
index built once again instead of updated row by row.

An ``UPDATE`` of a row's vector writes a new row version, and pgvector inserts it into each
HNSW index of the column: 5 to 10 ms a row at 384-d on a busy machine
(``benchmarks/bench_pg_writeback.py``: 11.29 s for 2,000 rows and 40.69 s for 4,000 of a
20,000-row table), while building the index anew costs about as much as updating a tenth of
the table's rows under it (17.86 to 20.87 s at any share). So where the caller allows it
(``rebuild=True``: ``skalign migrate --continue --rebuild-index``; readers wait for the
build), a step of at least :data:`REBUILD_SHARE` of the table's rows, where the connection's
user owns the table and may create temporary tables, is written in two parts:

1. **Staging**: each batch ``(ids, vectors, marks, expected)``, checked as
   :meth:`~skalign._stores.live.LiveStore.write_back` checks it, is inserted into a temporary
   table of the session (:data:`STAGING`, in ``pg_temp``: no other session sees it, and it
   goes with the session), batch by batch as the caller makes them (bounded memory). Nothing
   of the user's table is read, written or locked.
2. **One transaction**: ``LOCK TABLE … IN ACCESS EXCLUSIVE MODE``; the provenance column
   added where it is missing; ``DROP INDEX`` of each HNSW index of the vector column (read
   again under the lock); each batch's ``UPDATE … FROM`` the staged rows, in the batches'
   order, compare-and-set against each row's provenance *now*, as the batches would have been
   written one by one; each index built again, from the catalog's facts
   (:func:`~skalign._stores.pgvector.indexes.build_statement`: its name, method, operator
   class and ``WITH`` options; never SQL text the catalog holds); ``COMMIT``.

A reader (a search, a fetch, another writer) waits for that transaction and then sees every
row of the step new, with its mark, and the index in place; before it, the rows as they were.
The index is never missing from what a reader can see: ``DROP INDEX`` is undone with the
rest where the transaction does not commit (an error, a lost connection, a killed process: the
server rolls it back; with PostgreSQL 14 or later the backend checks its client's connection
every second, :data:`CHECK_INTERVAL_MS`, and stops a build whose client is gone). Nothing is
left to recover: the same command run again writes the step again.

HNSW indexes are rebuilt where the catalog describes them fully (no expression, no predicate,
plain options, not a constraint's), in the database's default tablespace and without a
comment (either would be lost); any other index, HNSW or not, stays and takes the rows as an
``UPDATE`` gives them. The build uses the session's ``maintenance_work_mem`` and
``max_parallel_maintenance_workers`` (``PGOPTIONS='-c maintenance_work_mem=2GB'``: the HNSW
graph built in memory is several times faster).

Every name is passed as an identifier and every value as a parameter.
"""

from __future__ import annotations

import numpy as np

from ..journal import kill_point
from ..live_input import check_write, missing_id
from .indexes import _mapped, build_statement, read_specs

__all__ = ["REBUILD_SHARE", "plan_rebuild", "write_rebuilding"]

#: The share of the table's rows from which a step rebuilds the HNSW index rather than update
#: it row by row (``benchmarks/bench_pg_writeback.py`` at 20,000 rows: the cut-over between
#: 10 % and 20 % in one run, at 9 % in another)
REBUILD_SHARE = 0.1
#: The staging table, in the session's temporary schema
STAGING = "skalign_write_step"
#: How often (ms) a backend building the index checks its client is still there (PG 14 on)
CHECK_INTERVAL_MS = 1000


def _rebuilt_specs(store):
    """The :class:`~skalign._stores.pgvector.indexes.IndexSpec` of each HNSW index on the
    store's vector column that a step drops and builds again (see the module docstring), and
    the schema of the table (and of its indexes)."""
    conn, oid = store._conn, store._reader.oid
    plain = {r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE "
        "i.indrelid = %s AND c.reltablespace = 0 AND obj_description(c.oid, 'pg_class') IS "
        "NULL", (oid,)).fetchall()}
    schema = conn.execute("SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = "
                          "c.relnamespace WHERE c.oid = %s", (oid,)).fetchone()[0]
    return [s for s in read_specs(conn, oid)
            if s.method == "hnsw" and s.skip is None and not s.constraint and s.name in plain
            and [k.name for k in s.keys] == [store.column]], schema


def plan_rebuild(store, rows):
    """Whether a step of ``rows`` rows into the pgvector live ``store`` rebuilds its HNSW
    index: at least :data:`REBUILD_SHARE` of the table's rows, an index to rebuild, a plain
    table the user owns, and the right to create temporary tables."""
    if rows < max(1, REBUILD_SHARE * store.n_rows):
        return False
    with _mapped(store.address, "cannot read the table's indexes"):
        row = store._conn.execute(
            "SELECT c.relkind = 'r' AND pg_has_role(c.relowner, 'USAGE') AND "
            "has_database_privilege(current_database(), 'TEMP') FROM pg_class c WHERE c.oid = "
            "%s", (store._reader.oid,)).fetchone()
        return bool(row and row[0]) and bool(_rebuilt_specs(store)[0])


def write_rebuilding(store, batches):
    """Write ``batches`` (each ``(ids, vectors, marks, expected)`` as
    :meth:`~skalign._stores.live.LiveStore.write_back` takes them) into the pgvector live
    ``store`` as one step: staged, then written and the index rebuilt in one transaction (the
    module docstring). Returns each batch's ``written`` mask: the rows whose provenance was
    still the batch's ``expected`` when the step was written (every row without it).

    Raises :class:`~skalign.exceptions.StoreNotFoundError` for an id the table does not hold,
    :class:`~skalign.exceptions.StoreError` for any other failure; the table is then as it
    was."""
    from psycopg import sql

    conn = store._conn
    staging = sql.Identifier("pg_temp", STAGING)
    with _mapped(store.address, "cannot stage the rows to write", "the address's user needs "
                 "TEMP on the database"):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging))
        conn.execute(sql.SQL("CREATE TEMP TABLE {} (b int, n int, id {}, v vector, m text, "
                             "e text, cas boolean)").format(staging, store._key_type))
    try:
        sizes = _stage(store, staging, batches)
        if not sum(sizes):
            return [np.zeros(n, dtype=bool) for n in sizes]
        kill_point("write-many-staged")
        with _mapped(store.address, "cannot stage the rows to write"):
            conn.execute(sql.SQL("CREATE INDEX ON {} (b)").format(staging))
            conn.execute(sql.SQL("ANALYZE {}").format(staging))
        return _apply(store, staging, sizes)
    finally:
        if not conn.closed and not conn.broken:
            with _mapped(store.address, "cannot drop the staged rows"):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging))


def _stage(store, staging, batches):
    """Insert each batch into the staging table (checked as ``write_back`` checks it); return
    the batches' sizes."""
    import psycopg
    from psycopg import sql

    insert = sql.SQL(
        "INSERT INTO {} SELECT %s, u.n, u.id, u.v, u.m, u.e, %s FROM unnest(%s::{ids}[], "
        "%b::vector[], %s::text[], %s::text[]) WITH ORDINALITY AS u(id, v, m, e, n)").format(
            staging, ids=store._key_type)
    sizes = []
    for b, (ids, vectors, marks, expected) in enumerate(batches):
        ids, V, marks, expected = check_write(store.address, store._check_write_ids(ids),
                                              vectors, marks, expected, store._write_dim())
        keys = [str(i) for i in ids] if store._key_text else ids
        with _mapped(store.address, "cannot stage the rows to write"):
            try:
                store._conn.execute(insert, (b, expected is not None, keys, list(V), marks,
                                             expected or [None] * len(ids)))
            except (psycopg.DataError, psycopg.errors.CheckViolation) as exc:
                raise store._not_a_key(exc) from None
        sizes.append(len(ids))
    return sizes


def _apply(store, staging, sizes):
    """The transaction of the step (module docstring); each batch's written mask."""
    from psycopg import sql

    conn, table = store._conn, store._reader.ident
    mark = sql.Identifier(store.provenance_key)
    key = sql.Identifier(store.key)
    update = sql.SQL(
        "UPDATE {table} AS skalign_t SET {col} = skalign_u.v, {mark} = skalign_u.m FROM "
        "(SELECT * FROM {staging} WHERE b = %s) AS skalign_u WHERE skalign_t.{key} = "
        "skalign_u.id AND (NOT skalign_u.cas OR skalign_t.{mark} IS NOT DISTINCT FROM "
        "skalign_u.e) RETURNING skalign_u.n").format(
            table=table, col=sql.Identifier(store.column), mark=mark, staging=staging, key=key)
    lost = sql.SQL("SELECT u.id FROM {} AS u WHERE NOT EXISTS (SELECT FROM {} AS skalign_t "
                   "WHERE skalign_t.{} = u.id) LIMIT 1").format(staging, table, key)
    written = [np.zeros(n, dtype=bool) for n in sizes]
    with _mapped(store.address, "cannot write the vectors back", "the address's user needs "
                 "to own the table (the step drops and builds its HNSW index again)"), \
            conn.transaction():
        if conn.info.server_version >= 140000:
            conn.execute("SELECT set_config('client_connection_check_interval', %s, true)",
                         (str(CHECK_INTERVAL_MS),))
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
        gone = conn.execute(lost).fetchone()
        if gone is not None:
            raise missing_id(store.address, gone[0])
        store._add_mark_column()
        specs, schema = _rebuilt_specs(store)
        for spec in specs:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, spec.name)))
        kill_point("write-many-dropped")
        for b, n in enumerate(sizes):
            done = [r[0] - 1 for r in conn.execute(update, (b,)).fetchall()]
            written[b][done] = True
        kill_point("write-many-updated")
        for spec in specs:
            conn.execute(build_statement(spec, spec.name, table))
        kill_point("write-many-built")
    store._has_mark = True
    return written
