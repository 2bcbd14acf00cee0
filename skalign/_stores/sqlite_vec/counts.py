r"""Provenance counts of a sqlite-vec table computed by SQLite itself (``skalign info``): no
vector is read, and no row's text or mark reaches Python.

:func:`count_marks` runs one statement in one read transaction: the ``vec0`` table scanned for
its ids, each row's mark looked up in skalign's marks table (:data:`.tables.MARKS`, by its
primary key) and the rows grouped by

- their kind: no mark, a mark that is not an ``encoded:…`` text (a translation), an encoded
  mark;
- for an encoded mark ``encoded:<fp>:<field>:<digest>``: the mark less its digest (parsed
  once per group by :func:`~skalign._stores.live.parse_mark`, as a row-by-row count parses
  each row's), the digest's shape (after a ``:``, 16 lowercase hex digits, the mark at most
  4,096 characters) and whether the digest equals

  .. math:: \mathrm{hex}(\mathrm{sha256}(\mathrm{utf8}(t)))_{1..16}

  of the row's current text :math:`t` in the column the field token names: the store's
  default text column for the empty token, else the text column whose
  :func:`~skalign._stores.live.field_token` the token is (read only for these rows; a token
  that names no column reads ``NULL``, so the row is stale). The digest is
  :func:`~skalign._stores.live.text_digest` itself, registered in the store's connection as
  the SQL function :data:`DIGEST_FUNCTION`.

The token between a mark's last two ``:`` is matched as a suffix: a field token holds no ``:``,
so ``:<token>:`` followed by the 16 digest characters ends the mark exactly when its field is
``<token>``. The counts are each row's :func:`~skalign._stores.live.mark_state`, as
:meth:`~skalign._stores.live.LiveStore.count_marks` finds them row by row.

Every name is passed as an identifier and every value as a parameter.
"""

from __future__ import annotations

from urllib.parse import unquote

from ...exceptions import StoreError
from ..live import empty_counts, field_token, parse_mark, text_digest
from .tables import MARKS, ident, table_type, token

__all__ = ["DIGEST_FUNCTION", "count_marks"]

#: the name of :func:`~skalign._stores.live.text_digest` as an SQL function of the connection
DIGEST_FUNCTION = "skalign_text_digest"
#: the longest mark :func:`~skalign._stores.live.parse_mark` reads
MARK_MAX = 4096


def _digest(text):
    """:func:`~skalign._stores.live.text_digest` of a text, ``NULL`` for any other value (a
    row without a text: its encoded mark is stale)."""
    return text_digest(text) if isinstance(text, str) else None


def _text_case(store, params):
    """The SQL of the text an encoded mark's field token names (``m.mark`` joined to the
    table ``t``): a ``CASE`` over the store's default text column (the empty token) and each
    text column by its token, the tokens appended to ``params``; ``NULL`` where the store has
    no text column."""
    whens = []
    default = store._text_column(None)
    if default is not None:
        whens.append(f"WHEN substr(m.mark, -18, 2) = '::' THEN t.{ident(default)}")
    for col in store._reader.table.fields:
        try:
            name = store._text_column(col.name)
        except StoreError:  # a column fetch refuses as a text: no mark's text is read from it
            continue
        tok = field_token(name)
        if tok:
            whens.append(f"WHEN substr(m.mark, {-(len(tok) + 18)}, {len(tok) + 2}) = ? "
                         f"THEN t.{ident(name)}")
            params.append(f":{tok}:")
    return "CASE " + " ".join(whens) + " END" if whens else "NULL"


def count_marks(store, mine=None, empty=False):
    """Rows per provenance of the sqlite-vec live store ``store``, as
    :meth:`~skalign._stores.live.LiveStore.count_marks` counts them:
    ``{"rows", "encoded", "stale", "translated", "encoders"}``.

    Parameters
    ----------
    store : SqliteVecLive
        The open store.
    mine : str, default=None
        The encoder a row must be encoded by to count as encoded (``None``: any).
    empty : bool, default=False
        Count the rows without a mark apart (``"empty"``, not among ``"translated"``).

    Returns
    -------
    dict
    """
    conn, table = store.conn, ident(store.table)
    counts = empty_counts(empty)
    conn.create_scalar_function(DIGEST_FUNCTION, _digest, 1, deterministic=True)
    with conn:  # one read transaction: the rows and marks of one moment
        tid = token(conn, store.table)
        if tid is None or table_type(conn, MARKS) is None:  # no write-back yet
            n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            counts.update(rows=n, translated=0 if empty else n)
            if empty:
                counts["empty"] = n
            return counts
        params = []
        text = _text_case(store, params)
        enc = "typeof(m.mark) = 'text' AND substr(m.mark, 1, 8) = 'encoded:'"
        groups = conn.execute(
            f"SELECT CASE WHEN m.mark IS NULL THEN 0 WHEN {enc} THEN 2 ELSE 1 END, "
            f"CASE WHEN {enc} THEN substr(m.mark, 1, length(m.mark) - 17) END, "
            f"CASE WHEN {enc} THEN length(m.mark) BETWEEN 17 AND ? AND substr(m.mark, -17, 1) "
            f"= ':' AND NOT substr(m.mark, -16) GLOB '*[^0-9a-f]*' END, "
            f"CASE WHEN {enc} THEN substr(m.mark, -16) = {DIGEST_FUNCTION}({text}) END, "
            f"count(*) FROM {table} AS t LEFT JOIN {ident(MARKS)} AS m ON m.tid = ? AND "
            f"m.key = ? AND m.id = t.{ident(store.id_name)} GROUP BY 1, 2, 3, 4",
            (MARK_MAX, *params, tid, store.provenance_key)).fetchall()
    for kind, head, shape, ok, n in groups:
        counts["rows"] += n
        if kind == 0 and empty:
            counts["empty"] += n
            continue
        if kind != 2:
            counts["translated"] += n
            continue
        mark = parse_mark(f"{head}:{'0' * 16}") if shape else None
        if mark is None or mark.kind != "encoded" or not ok \
                or field_token(unquote(mark.field) if mark.field else None) != mark.field:
            counts["stale"] += n
            continue
        fp = mark.fingerprint
        counts["encoders"][fp] = counts["encoders"].get(fp, 0) + n
        counts["encoded" if mine is None or fp == mine else "stale"] += n
    return counts
