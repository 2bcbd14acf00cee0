"""A second vector column of a pgvector table (``--into FIELD``, :mod:`skalign._stores.fields`).

The field is a new nullable ``vector(d)`` column, added by ``ALTER TABLE … ADD COLUMN`` (no
row is rewritten: every row holds ``NULL`` there until it is written) with, in the same
transaction, its ``COMMENT``: :data:`FIELD_PREFIX` and the field's provenance stamp as JSON
(``{}`` until the first stamp), which is what says skalign added it; a column of that name
without such a comment is the user's and refused. Each HNSW index of the old column alone
(same operator class, same ``WITH`` options) gets its counterpart on the new column in that
transaction too, under a short hashed name; an IVFFlat one, whose lists are trained on the rows
present when it is built, is built when a step has filled the field
(:func:`finish_field`). Names are identifiers and values parameters or literals, never SQL
text from the catalog (:mod:`.indexes`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ...exceptions import StoreError
from ..live import field_key
from .indexes import _mapped, _resolve, read_specs
from .store import _columns, _connect

__all__ = ["FIELD_PREFIX", "add_field", "drop_field_command", "field_state", "finish_field",
           "read_field_stamp", "vector_fields", "write_field_stamp"]

#: the start of the comment of a column skalign added as a vector field
FIELD_PREFIX = "skalign vector field: "
#: the index methods a field's index is made like (HNSW when added, IVFFlat when filled)
_METHODS = ("hnsw", "ivfflat")


def _open(address):
    conn = _connect(address)
    try:
        with _mapped(address, "cannot read the table"):
            oid, ident = _resolve(conn, address)
    except BaseException:
        conn.close()
        raise
    return conn, oid, ident


def vector_fields(address):
    """``{column: width}`` of the table's vector columns, in its column order (width ``None``
    for a ``vector`` column without a declared width)."""
    conn, oid, _ = _open(address)
    with conn:
        return {name: (typmod if typmod > 0 else None)
                for name, _, shown, typmod, _ in _columns(conn, oid)
                if shown.startswith("vector")}


def _comment(conn, oid, field):
    """``(type, comment)`` of the column ``field``, or ``None`` where there is none."""
    return conn.execute(
        "SELECT format_type(atttypid, atttypmod), col_description(attrelid, attnum) FROM "
        "pg_attribute WHERE attrelid = %s AND attname = %s AND attnum > 0 AND NOT "
        "attisdropped", (oid, field)).fetchone()


def field_state(address, field):
    """The width of the field where skalign added it, ``None`` where the table has no column
    ``field``; the user's own column of that name is refused."""
    conn, oid, _ = _open(address)
    with conn, _mapped(address, "cannot read the table's columns"):
        row = _comment(conn, oid, field)
    if row is None:
        return None
    typ, comment = row
    if not (comment or "").startswith(FIELD_PREFIX) or not typ.startswith("vector("):
        raise StoreError(f"{address}: the table already has a column {field!r} ({typ}) that "
                         "skalign did not add; --into writes a new column: choose another "
                         "name.")
    return int(typ[len("vector("):-1])


def _index_name(oid, field, index):
    key = json.dumps([int(oid), field, index])
    return f"skalign_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _like_specs(conn, oid, like, field, methods):
    """The old column's own vector indexes of ``methods``, made for ``field``, by name."""
    out = {}
    for spec in read_specs(conn, oid):
        if spec.skip or spec.method not in methods or len(spec.keys) != 1 \
                or spec.keys[0].name != like or spec.include or spec.constraint:
            continue
        key = dataclasses.replace(spec.keys[0], name=field)
        out[_index_name(oid, field, spec.name)] = dataclasses.replace(spec, keys=(key,))
    return out


def _build(conn, oid, ident, like, field, methods):
    from .indexes import build_statement

    have = {r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE "
        "i.indrelid = %s", (oid,)).fetchall()}
    for name, spec in _like_specs(conn, oid, like, field, methods).items():
        if name not in have:
            conn.execute(build_statement(spec, name, ident))


def add_field(address, field, dim, like):
    """Add the column ``field vector(dim)`` with its comment and its HNSW indexes like
    ``like``'s, in one transaction."""
    from psycopg import sql

    conn, oid, ident = _open(address)
    with conn, _mapped(address, "cannot add the vector column", "the address's user must own "
                       "the table (ALTER TABLE)"), conn.transaction():
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} vector({})").format(
            ident, sql.Identifier(field), sql.Literal(int(dim))))
        conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
            ident, sql.Identifier(field), sql.Literal(FIELD_PREFIX + "{}")))
        if like is not None:
            _build(conn, oid, ident, like, field, ("hnsw",))


def finish_field(address, field, like):
    """Build the IVFFlat indexes like ``like``'s on the filled field (where not built)."""
    conn, oid, ident = _open(address)
    with conn, _mapped(address, "cannot build the field's index"), conn.transaction():
        if like is not None:
            _build(conn, oid, ident, like, field, ("ivfflat",))


def read_field_stamp(address, field):
    """The field's stamp (its comment's JSON), or ``None``."""
    conn, oid, _ = _open(address)
    with conn, _mapped(address, "cannot read the column's comment"):
        row = _comment(conn, oid, field)
    comment = (row or (None, None))[1] or ""
    if not comment.startswith(FIELD_PREFIX):
        return None
    try:
        stamp = json.loads(comment[len(FIELD_PREFIX):])
    except ValueError:
        return None
    return stamp if isinstance(stamp, dict) and stamp else None


def write_field_stamp(address, field, stamp):
    """Record ``stamp`` in the field's comment (a literal: never SQL)."""
    from psycopg import sql

    conn, oid, ident = _open(address)
    with conn, _mapped(address, "cannot stamp the field"):
        if field_state(address, field) is None:
            raise StoreError(f"{address}: no field {field!r} to stamp.")
        conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
            ident, sql.Identifier(field), sql.Literal(FIELD_PREFIX + json.dumps(
                stamp, sort_keys=True))))


def _quoted(name):
    return '"' + name.replace('"', '""') + '"'


def drop_field_command(address, field):
    """``ALTER TABLE … DROP COLUMN …`` of the field and its provenance column (psql)."""
    table = ".".join(_quoted(p) for p in address.name.split("."))
    return (f"ALTER TABLE {table} DROP COLUMN {_quoted(field)}, DROP COLUMN IF EXISTS "
            f"{_quoted(field_key(field))};")
