"""PostgreSQL's catalog for :mod:`skalign._stores.pgvector.store`: a table's indexes built again on
another table from the catalog's facts alone, the names skalign derives from an output's name
(shadow, backup, indexes), tables looked up by value, and psycopg's errors as skalign's.

No SQL text the catalog holds is ever run (``pg_get_indexdef``, an expression, a predicate: a
table or index named ``i USING btree (id); DROP TABLE victim; --`` must stay a name). An index
is described by its access method, key columns, operator classes (with their options),
collations, orderings, uniqueness, ``INCLUDE`` columns, ``NULLS NOT DISTINCT`` and ``WITH``
options, each passed as an identifier or a literal, and built again from that description
under a short hashed name (:func:`index_name`). An index whose key holds an expression, a
partial one (``WHERE``), an invalid one and an exclusion constraint cannot be described so:
they are skipped, each with a warning naming it. After the build, every other index of the
source must have its counterpart on the output, read back from the catalog; otherwise the
output is not published (:func:`rebuild_indexes`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass

from ...exceptions import (
    AddressError,
    StoreConnectionError,
    StoreError,
    StoreNotFoundError,
    VerificationError,
)

__all__ = ["IndexSpec", "derived_name", "index_name", "read_specs", "rebuild_indexes"]

#: PostgreSQL's longest identifier, in bytes (``NAMEDATALEN - 1``); a longer one is cut
MAX_NAME_BYTES = 63
_OPTION_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")
_OPTION_VALUE = re.compile(
    r"(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[A-Za-z_][A-Za-z0-9_]*)\Z")


def _clip(text, nbytes):
    """The longest prefix of ``text`` of at most ``nbytes`` UTF-8 bytes (whole characters)."""
    return text.encode()[:nbytes].decode(errors="ignore")


def derived_name(table, suffix):
    """``TABLE_skalign_SUFFIX`` (the shadow: ``SUFFIX`` the job's 12 hex; the backup:
    ``backup``), or, where that exceeds PostgreSQL's 63 bytes (which would cut it, and two
    long names could become one), ``TABLE`` cut to fit, ``_``, 8 hex of ``TABLE``'s SHA-256
    and ``_skalign_SUFFIX``."""
    name = f"{table}_skalign_{suffix}"
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    tail = f"_{hashlib.sha256(table.encode()).hexdigest()[:8]}_skalign_{suffix}"
    return _clip(table, MAX_NAME_BYTES - len(tail)) + tail


def index_name(schema, table, shadow_oid, source_index):
    """The name of the output's counterpart of the source's index ``source_index``:
    ``skalign_`` and 16 hex of a SHA-256 of the output (``schema``, ``table``), its shadow's
    oid and the source index's name. Short (an output name of 63 bytes fits), distinct per
    source index, and distinct from the indexes of the table the output replaces (its backup,
    made by an earlier shadow: another oid, while that table exists), yet the same for a
    rerun that resumes the same shadow (which finds what a killed run built)."""
    key = json.dumps([schema, table, int(shadow_oid), source_index])
    return f"skalign_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Column:
    """A key column of an index: its name, operator class and collation (``(schema, name)``;
    the collation only where it is not the column's own), ordering and operator class
    options (``((key, value), ...)``)."""

    name: str
    opclass: tuple | None = None
    collation: tuple | None = None
    desc: bool = False
    nulls_first: bool = False
    options: tuple = ()


@dataclass(frozen=True)
class IndexSpec:
    """An index as the catalog describes it; ``skip`` says why it cannot be built again from
    these facts (``None``: it can). ``constraint``: ``"p"`` or ``"u"`` where the index is a
    primary key's or a unique constraint's (built again as that constraint)."""

    name: str
    method: str
    keys: tuple = ()
    include: tuple = ()
    unique: bool = False
    constraint: str | None = None
    deferrable: bool = False
    deferred: bool = False
    nulls_not_distinct: bool = False
    options: tuple = ()
    skip: str | None = None

    @property
    def signature(self):
        """Everything but the name: equal for an index and its counterpart."""
        return (self.method, self.keys, self.include, self.unique, self.constraint,
                self.deferrable, self.deferred, self.nulls_not_distinct, self.options)


def _options(entries):
    """``((key, value), ...)`` of ``key=value`` texts, or ``None`` where one is not a plain key
    and a number or a word (never passed on as SQL)."""
    pairs = []
    for entry in entries or ():
        key, sep, value = entry.partition("=")
        if not sep or not _OPTION_KEY.match(key) or not _OPTION_VALUE.match(value):
            return None
        pairs.append((key, value))
    return tuple(pairs)


def read_specs(conn, oid):
    """The :class:`IndexSpec` of every index of the table ``oid``, by name."""
    rows = conn.execute(
        "SELECT c.relname, am.amname, i.indisunique, i.indisvalid, i.indnkeyatts, "
        "i.indkey::int2[], i.indclass::oid[], i.indoption::int2[], i.indcollation::oid[], "
        "i.indexprs IS NOT NULL, i.indpred IS NOT NULL, c.reloptions, k.contype, "
        "coalesce(k.condeferrable, false), coalesce(k.condeferred, false), i.indexrelid, "
        # NULLS NOT DISTINCT (PostgreSQL 15 on); false where the column does not exist
        "coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_am am ON am.oid = c.relam LEFT JOIN pg_constraint k ON k.conindid = "
        "i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x') "
        "WHERE i.indrelid = %s ORDER BY c.relname", (oid,)).fetchall()
    if not rows:
        return []
    columns = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT attnum, attname, attcollation FROM pg_attribute WHERE attrelid = %s AND "
        "attnum > 0 AND NOT attisdropped", (oid,)).fetchall()}
    wanted = sorted({o for r in rows for o in r[6]})
    opclasses = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT o.oid, n.nspname, o.opcname FROM pg_opclass o JOIN pg_namespace n ON n.oid = "
        "o.opcnamespace WHERE o.oid = ANY(%s::oid[])", (wanted,)).fetchall()}
    wanted = sorted({o for r in rows for o in r[8]})
    collations = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT o.oid, n.nspname, o.collname FROM pg_collation o JOIN pg_namespace n ON n.oid = "
        "o.collnamespace WHERE o.oid = ANY(%s::oid[])", (wanted,)).fetchall()}
    attoptions = {(r[0], r[1]): r[2] for r in conn.execute(
        "SELECT attrelid, attnum, attoptions FROM pg_attribute WHERE attrelid = ANY(%s::oid[]) "
        "AND attoptions IS NOT NULL", ([r[15] for r in rows],)).fetchall()}
    return [_spec(r, columns, opclasses, collations, attoptions) for r in rows]


def _spec(row, columns, opclasses, collations, attoptions):
    (name, method, unique, valid, nkeys, indkey, indclass, indoption, indcoll, exprs, pred,
     reloptions, contype, deferrable, deferred, indexrelid, nnd) = row
    base = dict(name=name, method=method, unique=unique, nulls_not_distinct=bool(nnd))
    if exprs or 0 in indkey:
        return IndexSpec(**base, skip="its key holds an expression")
    if pred:
        return IndexSpec(**base, skip="it is a partial index (WHERE ...)")
    if not valid:
        return IndexSpec(**base, skip="it is invalid on the source (a failed CREATE INDEX "
                                      "CONCURRENTLY?)")
    if contype == "x":
        return IndexSpec(**base, skip="it belongs to an exclusion constraint")
    options = _options(reloptions)
    keys = []
    for k in range(nkeys):
        col, coll = columns[indkey[k]]
        opt = _options(attoptions.get((indexrelid, k + 1)))
        if opt is None:
            options = None
            break
        collation = collations.get(indcoll[k]) if indcoll[k] not in (0, coll) else None
        keys.append(Column(col, opclasses.get(indclass[k]), collation, bool(indoption[k] & 1),
                           bool(indoption[k] & 2), opt))
    if options is None:
        return IndexSpec(**base, skip="its options are not plain key=value pairs")
    return IndexSpec(**base, keys=tuple(keys),
                     include=tuple(columns[a][0] for a in indkey[nkeys:]),
                     constraint=contype, deferrable=deferrable, deferred=deferred,
                     options=options)


def _with(pairs, prefix):
    from psycopg import sql

    if not pairs:
        return sql.SQL("")
    return sql.SQL(prefix + "({})").format(sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in pairs))


def _column(key):
    from psycopg import sql

    parts = [sql.Identifier(key.name)]
    if key.collation:
        parts += [sql.SQL("COLLATE"), sql.Identifier(*key.collation)]
    if key.opclass:
        parts.append(sql.Identifier(*key.opclass))
        if key.options:
            parts.append(_with(key.options, ""))
    if key.desc:
        parts.append(sql.SQL("DESC"))
    if key.nulls_first != key.desc:
        parts.append(sql.SQL("NULLS FIRST" if key.nulls_first else "NULLS LAST"))
    return sql.SQL(" ").join(parts)


def build_statement(spec, name, table):
    """The statement that builds ``spec`` as ``name`` on ``table`` (an ``sql.Identifier``):
    a constraint's index as that constraint, any other with ``CREATE INDEX`` (never ``IF NOT
    EXISTS``: a name taken fails, it does not skip)."""
    from psycopg import sql

    names = lambda cols: sql.SQL(", ").join(map(sql.Identifier, cols))  # noqa: E731
    include = sql.SQL(" INCLUDE ({})").format(names(spec.include)) if spec.include \
        else sql.SQL("")
    nnd = sql.SQL(" NULLS NOT DISTINCT" if spec.nulls_not_distinct else "")
    if spec.constraint:
        kind = sql.SQL("PRIMARY KEY" if spec.constraint == "p" else "UNIQUE")
        defer = sql.SQL((" DEFERRABLE" if spec.deferrable else "")
                        + (" INITIALLY DEFERRED" if spec.deferred else ""))
        return sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}{} ({}){}{}{}").format(
            table, sql.Identifier(name), kind, nnd, names(k.name for k in spec.keys), include,
            _with(spec.options, " WITH "), defer)
    return sql.SQL("CREATE {}INDEX {} ON {} USING {} ({}){}{}{}").format(
        sql.SQL("UNIQUE " if spec.unique else ""), sql.Identifier(name), table,
        sql.Identifier(spec.method), sql.SQL(", ").join(map(_column, spec.keys)), include, nnd,
        _with(spec.options, " WITH "))


def _drop_statement(spec, table, schema):
    from psycopg import sql

    if spec.constraint:
        return sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
            table, sql.Identifier(spec.name))
    return sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, spec.name))


def rebuild_indexes(conn, source, shadow, table, out, where):
    """Build on the table ``shadow`` (an oid; ``table`` its ``sql.Identifier``) a counterpart
    of every index of the table ``source`` that :func:`read_specs` can describe, named by
    :func:`index_name` from ``out`` (the output's ``(schema, table)``); return the warnings
    of those skipped. Indexes a killed run built on the same shadow are kept where they match
    (and dropped where not); one that a server process of a killed run was still building
    when this run built the same one is taken once committed, if it matches. Raises
    :class:`~skalign.exceptions.VerificationError` unless the shadow then has exactly one
    matching counterpart of every index built."""
    from psycopg import errors

    specs = read_specs(conn, source)
    want = {index_name(*out, shadow, s.name): s for s in specs if not s.skip}
    for name, got in {s.name: s for s in read_specs(conn, shadow)}.items():
        if name in want and got.signature == want[name].signature:
            want[name] = None  # built by a killed run: kept
        else:
            conn.execute(_drop_statement(got, table, out[0]))
    for name, spec in want.items():
        if spec is None:
            continue
        try:
            conn.execute(build_statement(spec, name, table))
        except (errors.DuplicateTable, errors.DuplicateObject, errors.UniqueViolation) as exc:
            if exc.diag.constraint_name == name:  # the translation made duplicate keys
                detail = " ".join((exc.diag.message_detail or "").split())[:120]
                raise VerificationError(
                    f"{where}: cannot build the unique index like the source's {spec.name!r} "
                    f"on the translation: its keys are not unique ({detail}); the output was "
                    "not published.") from None
            built = {s.name: s for s in read_specs(conn, shadow)}.get(name)
            if built is None or built.signature != spec.signature:
                raise StoreError(
                    f"{where}: a killed skalign run's server process is still building an "
                    "index of this output; run the same command again in a minute.") from None
    _check(conn, specs, shadow, out, where)
    return [f"{where}: the source's index {s.name!r} was not built on the output: {s.skip}; "
            "build it there yourself." for s in specs if s.skip]


def _check(conn, specs, shadow, out, where):
    """Every index the source has, but the skipped, has its one counterpart on the shadow."""
    want = {index_name(*out, shadow, s.name): s for s in specs if not s.skip}
    got = {s.name: s for s in read_specs(conn, shadow)}
    missing = [s.name for n, s in want.items()
               if n not in got or got[n].signature != s.signature]
    if missing or len(got) != len(want):
        raise VerificationError(
            f"{where}: the translation has {len(want) - len(missing)} of the {len(want)} "
            f"indexes of the source to build ({len(got)} in all; missing: "
            f"{', '.join(map(repr, missing[:5])) or 'none'}); it was not published.")


def _split(name, where):
    """``(schema or None, table)`` of ``TABLE`` or ``SCHEMA.TABLE``; more dots, or a name
    PostgreSQL would cut (over 63 bytes), are refused."""
    if not name or name.count(".") > 1 or name.startswith(".") or name.endswith("."):
        raise AddressError(f"{where}: table {name!r} is not TABLE or SCHEMA.TABLE; name a "
                           "table of one schema.")
    schema, _, table = name.rpartition(".")
    for part in (schema, table):
        if len(part.encode()) > MAX_NAME_BYTES:
            raise AddressError(f"{where}: {part!r} is longer than the 63 bytes of a PostgreSQL "
                               "name (it would be cut); use a shorter name.")
    return schema or None, table


def _table_oid(conn, schema, name):
    """The oid of the relation ``name`` in ``schema`` (``None``: none), looked up by value."""
    row = conn.execute("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = "
                       "c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                       (schema, name)).fetchone()
    return row[0] if row else None


def _schema_of(conn, schema, where):
    """``(schema, may_create)``: ``schema``, or the current schema for an unqualified name."""
    if schema is None:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        if schema is None:
            raise StoreError(f"{where}: the search_path names no schema that exists; write "
                             "?table=SCHEMA.TABLE.")
    row = conn.execute("SELECT has_schema_privilege(oid, 'CREATE') FROM pg_namespace WHERE "
                       "nspname = %s", (schema,)).fetchone()
    if row is None:
        raise StoreError(f"{where}: no schema {schema!r} in the database; create it (CREATE "
                         "SCHEMA) or fix ?table=.")
    return schema, row[0]


def _resolve(conn, address):
    """``(oid, sql.Identifier(schema, table))`` of the input table: an unqualified name found
    along the ``search_path`` (``to_regclass`` of its quoted form), a qualified one by value."""
    from psycopg import sql

    schema, table = _split(address.name, address)
    if schema is None:
        row = conn.execute("SELECT c.oid, n.nspname, c.relkind FROM pg_class c JOIN pg_namespace "
                           "n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
                           (sql.Identifier(table).as_string(conn),)).fetchone()
    else:
        row = conn.execute("SELECT c.oid, n.nspname, c.relkind FROM pg_namespace n LEFT JOIN "
                           "pg_class c ON c.relnamespace = n.oid AND c.relname = %s WHERE "
                           "n.nspname = %s", (table, schema)).fetchone()
        if row is None:
            raise StoreNotFoundError(f"{address}: no schema {schema!r} in the database; fix "
                                     "?table=.")
    if row is None or row[0] is None:
        schemas = [schema] if schema else conn.execute(
            "SELECT current_schemas(false)").fetchone()[0]
        names = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname = ANY(%s::name[])",
            (schemas,)).fetchall()]
        close = difflib.get_close_matches(table, names, n=3, cutoff=0.6)
        hint = f" (close: {', '.join(map(repr, close))})" if close else ""
        raise StoreNotFoundError(f"{address}: no table {address.name!r}{hint}; fix ?table=.")
    if row[2] not in ("r", "p", "v", "m", "f"):
        raise StoreError(f"{address}: {address.name!r} is not a table or view; fix ?table=.")
    return row[0], sql.Identifier(row[1], table)


@contextmanager
def _mapped(where, doing, denied="grant the privilege to the address's user"):
    """psycopg's errors raised inside as one line naming ``where`` (masked) and the fix."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise _pg_error(exc, where, doing, denied) from None


def _pg_error(exc, where, doing, denied="grant the privilege to the address's user"):
    """A psycopg error as skalign's (other exceptions as they are): a lost connection as a
    :class:`~skalign.exceptions.StoreConnectionError` (resumable: the shadow is kept), any
    other as a :class:`~skalign.exceptions.StoreError` (the shadow is removed)."""
    import psycopg
    from psycopg import errors

    if not isinstance(exc, psycopg.Error):
        return exc
    diag = getattr(exc, "diag", None)
    text = " ".join((getattr(diag, "message_primary", None) or str(exc)
                     or type(exc).__name__).split())[:200]
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) \
            and (not state or state.startswith(("08", "57P"))):
        return StoreConnectionError(f"{where}: {doing}: the connection to the server was lost "
                               f"({text}); run the same command again to resume.")
    if isinstance(exc, (errors.UndefinedTable, errors.InvalidSchemaName)):
        return StoreNotFoundError(f"{where}: {doing}: {text}; check ?table= (did another "
                                  "session drop it?).")
    if isinstance(exc, errors.InsufficientPrivilege):
        fix = denied
    elif isinstance(exc, errors.QueryCanceled):
        fix = "the server cancelled it (statement_timeout or pg_cancel_backend); run it again"
    elif state.startswith("22"):
        fix = "check the table's values"
    else:
        fix = "see the server's log"
    return StoreError(f"{where}: {doing}: {text}; {fix}.")
