r"""Provenance counts and a vector-length sample of a pgvector table computed by PostgreSQL
itself (``skalign info``): no vector and no row's text crosses the wire.

:func:`count_marks` reads each row's provenance in one statement. An encoded mark
``encoded:<fp>:<field>:<digest>`` is split as :func:`~skalign._stores.live.parse_mark` splits
it: the digest after the last ``:`` (16 lowercase hex digits, checked), the field token
between the last two (``split_part`` counting from the end: PostgreSQL 14 or later; an older
server returns ``None`` and the caller counts row by row). The field token selects the text
column it names (the store's default text column for the empty token, else the text column
whose :func:`~skalign._stores.live.field_token` it is; a token that names none reads
``NULL``), and the digest is compared with

.. math:: \mathrm{left}(\mathrm{hex}(\mathrm{sha256}(\mathrm{convert\_to}(t, \mathrm{UTF8}))),
   16)

of that column's current text :math:`t` (its ``::text`` form, as ``fetch`` reads it). Rows are
grouped by the mark less its digest, the digest's shape and that comparison; each group's mark
is then parsed by :func:`~skalign._stores.live.parse_mark` (a fingerprint or token it refuses
makes the group stale), so the counts are each row's
:func:`~skalign._stores.live.mark_state`, as a row-by-row count finds them.

:func:`sample_norms` reads the lengths (``vector_norm``) and marks of every row of a small
table, and of a ``TABLESAMPLE SYSTEM … REPEATABLE`` block sample of a larger one.

Every name is passed as an identifier and every value as a parameter.
"""

from __future__ import annotations

import numpy as np

from ..live import field_token, parse_mark
from .indexes import _mapped

__all__ = ["count_marks", "sample_norms"]

#: An encoded mark's digest (after its last ``:``; the field token is before it)
DIGEST_PATTERN = r"^[0-9a-f]{16}$"
#: The longest provenance value :func:`~skalign._stores.live.parse_mark` reads
MARK_MAX = 4096
#: The oldest server whose ``split_part`` counts from the end (PostgreSQL 14)
MIN_SERVER = 140000
#: The seed of the block sample (the same rows every time while the table is unchanged)
SAMPLE_SEED = 0


def _text_expr(store, token_params):
    """The SQL of the text a mark's field token (between its last two ``:``) names: a ``CASE``
    over the store's default text column (token ``""``) and each column of a text type (by its
    token, appended to ``token_params``)."""
    from psycopg import sql

    default = store._text_column(None)
    whens = [sql.SQL("WHEN '' THEN skalign_t.{}::text").format(sql.Identifier(default))] \
        if default is not None else []
    for name, typ in store._types.items():
        if typ.is_text:
            whens.append(sql.SQL("WHEN %s THEN skalign_t.{}::text").format(sql.Identifier(name)))
            token_params.append(field_token(name))
    if not whens:
        return sql.SQL("NULL::text")
    return sql.SQL("CASE split_part(skalign_t.{}::text, ':', -2) {} END").format(
        sql.Identifier(store.provenance_key), sql.SQL(" ").join(whens))


def count_marks(store, mine=None, empty=False):
    """Rows per provenance of the pgvector live store ``store`` (its vector column, its
    provenance column ``store.provenance_key``), as
    :func:`~skalign._migrate.counts.count_provenance` counts them row by row:
    ``{"rows", "encoded", "stale", "translated", "encoders"}``.

    Parameters
    ----------
    store : PgvectorLive
        The open store.
    mine : str, default=None
        The encoder a row must be encoded by to count as encoded (``None``: any).
    empty : bool, default=False
        Count the rows without a mark apart (``"empty"``, not among ``"translated"``: rows of
        a field ``--into`` has not written yet), as
        :func:`~skalign._migrate.into.field_counts` does.

    Returns
    -------
    dict or None
        The counts; ``None`` on a server older than PostgreSQL 14 (:data:`MIN_SERVER`): the
        caller counts row by row.
    """
    from psycopg import sql

    if store._conn.info.server_version < MIN_SERVER:
        return None
    counts = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    table = store._reader.ident
    with _mapped(store.address, "cannot count the table's provenance"):
        if not store._mark_column():  # no write-back yet: every row a translation
            n = store._conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)
                                    ).fetchone()[0]
            counts.update(rows=n, translated=n - n * empty)
            if empty:
                counts["empty"] = n
            return counts
        params = []
        text = _text_expr(store, params)
        mark = sql.SQL("skalign_t.{}::text").format(sql.Identifier(store.provenance_key))
        null = sql.SQL(", count(*) FILTER (WHERE {} IS NULL)").format(mark) if empty \
            else sql.SQL(", 0")
        # each expression written once (no regular expression over the whole mark: its (.+)
        # backtracks, 30x slower); grouped by the mark less its digest, its shape and its check
        query = sql.SQL(
            "SELECT CASE WHEN left({p}, 8) = 'encoded:' THEN left({p}, length({p}) - 17) END, "
            "CASE WHEN left({p}, 8) = 'encoded:' THEN length({p}) <= %s AND substr({p}, "
            "length({p}) - 16, 1) = ':' AND right({p}, 16) ~ %s END, CASE WHEN left({p}, 8) = "
            "'encoded:' THEN right({p}, 16) = left(encode(sha256(convert_to({text}, 'UTF8')), "
            "'hex'), 16) END, count(*){null} FROM {table} AS skalign_t GROUP BY 1, 2, 3"
        ).format(p=mark, text=text, null=null, table=table)
        groups = store._conn.execute(query, (MARK_MAX, DIGEST_PATTERN, *params)).fetchall()
    if empty:
        counts["empty"] = 0
    for head, shape, ok, n, n_null in groups:
        counts["rows"] += n
        if empty:
            counts["empty"] += n_null
        if head is None:
            counts["translated"] += n - n_null
            continue
        # the mark as parse_mark reads it: its digest's shape checked above
        mark = parse_mark(f"{head}:{'0' * 16}") if shape else None
        if mark is None or mark.kind != "encoded" or not ok:
            counts["stale"] += n
            continue
        fp = mark.fingerprint
        counts["encoders"][fp] = counts["encoders"].get(fp, 0) + n
        counts["encoded" if mine is None or fp == mine else "stale"] += n
    return counts


def sample_norms(store, rows):
    """The vector lengths and provenance marks of every row of ``store`` where it holds at most
    ``rows`` rows, else of at most ``rows`` rows of a block sample (``TABLESAMPLE SYSTEM``,
    whole pages, seeded by :data:`SAMPLE_SEED`) of about ``rows`` rows (drawn again with twice
    the share while it holds fewer than half of them). A row of a
    ``NULL`` vector counts as length 0 (``fetch`` reads it as zeros). ``(norms, marks)``;
    ``None`` for a column of another type than ``vector``."""

    typ = store._types.get(store.column)
    if typ is None or typ.base[1] != "vector":
        return None
    got = store._read_marked(lambda has_mark: _sample(store, rows, has_mark))
    return np.array([r[0] for r in got], dtype=np.float64), [r[1] for r in got]


def _sample(store, rows, has_mark):
    """The rows of :func:`sample_norms`: ``(length, mark)`` each, the marks ``NULL`` unless
    ``has_mark``."""
    from psycopg import sql

    mark = sql.SQL("skalign_t.{}::text").format(sql.Identifier(store.provenance_key)) \
        if has_mark else sql.SQL("NULL::text")
    head = sql.SQL("SELECT coalesce(vector_norm(skalign_t.{}), 0), {} FROM {} AS skalign_t")\
        .format(sql.Identifier(store.column), mark, store._reader.ident)
    with _mapped(store.address, "cannot sample the table"):
        n = store._conn.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT %s) "
                                        "AS skalign_c").format(store._reader.ident),
                                (rows + 1,)).fetchone()[0]
        if n <= rows:
            got = store._conn.execute(head).fetchall()
        else:
            share = min(100.0, 100.0 * 1.5 * rows / max(store.n_rows, n))
            sample = sql.SQL("{} TABLESAMPLE SYSTEM (%s) REPEATABLE (%s) LIMIT %s").format(head)
            while True:  # a table of few pages can draw too few of them: a larger share
                got = store._conn.execute(sample, (share, SAMPLE_SEED, rows)).fetchall()
                if 2 * len(got) >= rows or share >= 100.0:
                    break
                share = min(100.0, 2 * share)
    return got

