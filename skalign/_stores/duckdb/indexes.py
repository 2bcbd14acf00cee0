"""A DuckDB table's indexes, read from the catalog's facts and built again on another table.

DuckDB cannot rename a table that has indexes, so skalign builds the translation's indexes after
its rename, in the publish's transaction, and moves a table with indexes (``--replace``'s
backup, ``skalign restore``) by dropping them, renaming, and building them again.

An HNSW index (the vss extension) is described by ``pragma_hnsw_index_info()``: its metric,
and its graph's connectivity, ``M`` and ``M0``, read from the edges each level of the graph
may hold (``max_edges / nodes``: ``M`` at the base level, ``M0`` at the first level above it;
a graph of one level keeps vss's default, ``2 M``). DuckDB 1.5's catalog keeps neither
``ef_construction`` nor ``ef_search`` (``duckdb_indexes().sql`` renders the statement without
its ``WITH`` options): the rebuilt index takes vss's defaults for those two. Other indexes are
built again on the same columns (``UNIQUE`` kept); an index on an expression is not, with a
warning. Every statement is made of quoted identifiers and checked numbers, never the
catalog's SQL text.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from ...exceptions import StoreError
from .connect import HERE, ident, qualified

__all__ = ["IndexDef", "create_indexes", "drop_indexes", "index_names", "indexes_of"]

#: the metrics of vss's HNSW index
METRICS = ("l2sq", "cosine", "ip")


class IndexDef(NamedTuple):
    """An index as skalign builds it again: its name, its columns, whether it is unique, and
    for an HNSW index its ``metric``, ``M`` and ``M0`` (``None``: another index); ``skip``:
    why it cannot be built again (``None``: it can)."""

    name: str
    columns: tuple
    unique: bool
    hnsw: dict | None
    skip: str | None = None


def _renderings(column):
    """How ``duckdb_indexes().expressions`` may write ``column``: bare, as an identifier, or
    either as a Python-style string literal (its rendering of a list of texts)."""
    quoted = ident(column)
    return {column, quoted, repr(quoted), repr(column)}


def _columns_of(expressions, columns):
    """The columns ``duckdb_indexes().expressions`` lists (``[a, '"b c"']``), in order;
    ``None`` where an element is not a plain column (an expression)."""
    text = expressions or ""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    text, out = text[1:-1], []
    table = sorted(((r, c) for c in columns for r in _renderings(c)), key=lambda x: -len(x[0]))

    def parse(at, acc):
        if at == len(text):
            return acc
        for r, c in table:
            end = at + len(r)
            if text.startswith(r, at) and (end == len(text) or text.startswith(", ", end)):
                got = parse(end + 2 if end < len(text) else end, acc + [c])
                if got is not None:
                    return got
        return None

    out = parse(0, []) if text else None
    return tuple(out) if out else None


def _connectivity(levels):
    """``(M, M0)`` from ``levels_stats`` (``M0``: ``None`` where the graph has one level)."""
    ratios = [s["max_edges"] // s["nodes"] for s in levels or () if s.get("nodes")]
    if not ratios or ratios[0] < 2:
        return None, None
    return int(ratios[0]), (int(ratios[1]) if len(ratios) > 1 else None)


def indexes_of(cur, table, columns):
    """The indexes of ``table`` (of the attached file's main schema) as :class:`IndexDef`\\ s,
    in the catalog's order; ``columns``: the table's column names."""
    hnsw = {name: (metric, levels) for name, metric, levels in cur.execute(
        "SELECT index_name, metric, levels_stats FROM pragma_hnsw_index_info() WHERE "
        "catalog_name = current_database() AND schema_name = 'main' AND table_name = ?",
        [table]).fetchall()}
    out = []
    for name, unique, expressions in cur.execute(
            "SELECT index_name, is_unique, expressions FROM duckdb_indexes() WHERE "
            f"{HERE} AND table_name = ? ORDER BY index_oid",
            [table]).fetchall():
        cols = _columns_of(expressions, columns)
        if cols is None:
            out.append(IndexDef(name, (), bool(unique), None,
                                f"index {name!r} of {table!r} is on an expression, which "
                                "skalign does not build again"))
            continue
        params = None
        if name in hnsw:
            metric, levels = hnsw[name]
            m, m0 = _connectivity(levels)
            params = {"metric": metric}
            if m is not None:
                params["M"] = m
            if m0 is not None:
                params["M0"] = m0
        out.append(IndexDef(name, cols, bool(unique), params))
    return out


def index_names(cur):
    """Every index name of the attached file's main schema (names are the schema's)."""
    return {r[0] for r in cur.execute(
        f"SELECT index_name FROM duckdb_indexes() WHERE {HERE}").fetchall()}


def drop_indexes(cur, defs):
    for d in defs:
        cur.execute(f"DROP INDEX main.{ident(d.name)}")


def _free_name(name, table, taken):
    """``name`` where no index has it, else ``NAME_TABLE`` (with a short hash where that is
    taken too)."""
    for candidate in (name, f"{name}_{table}"):
        if candidate not in taken:
            return candidate
    return f"{name}_{table}_{hashlib.sha256(f'{name}/{table}'.encode()).hexdigest()[:8]}"


def create_indexes(cur, table, defs, rename=None):
    """Build ``defs`` on ``table`` (those that can be built again); an index whose name is
    taken gets ``NAME_TABLE``; ``rename``: a column's name on ``table`` where it differs.
    Returns the names built."""
    rename = rename or {}
    taken, built = index_names(cur), []
    for d in defs:
        if d.skip is not None:
            continue
        name = _free_name(d.name, table, taken)
        cols = ", ".join(ident(rename.get(c, c)) for c in d.columns)
        if d.hnsw is not None:
            metric = d.hnsw.get("metric")
            if metric not in METRICS or len(d.columns) != 1:
                raise StoreError(f"index {d.name!r}: an HNSW index of metric {metric!r} on "
                                 f"{len(d.columns)} columns, which vss does not build.")
            opts = [f"metric = '{metric}'"] + [f"{k} = {int(d.hnsw[k])}" for k in ("M", "M0")
                                               if k in d.hnsw]
            cur.execute(f"CREATE INDEX {ident(name)} ON {qualified(table)} USING HNSW ({cols}) "
                        f"WITH ({', '.join(opts)})")
        else:
            unique = "UNIQUE " if d.unique else ""
            cur.execute(f"CREATE {unique}INDEX {ident(name)} ON {qualified(table)} ({cols})")
        taken.add(name)
        built.append(name)
    return built


def move_table(cur, old, new, columns):
    """Rename ``old`` to ``new`` inside the caller's transaction: its indexes dropped, the
    table renamed; returns their definitions (a ``_OLD`` that :func:`create_indexes` added
    to a name removed) for the caller to build on ``new``. An index that cannot be built again
    refuses the move."""
    defs = indexes_of(cur, old, columns)
    for d in defs:
        if d.skip is not None:
            raise StoreError(f"{d.skip}; DuckDB cannot rename a table with indexes, and "
                             f"skalign would lose it: drop it (DROP INDEX), or move {old!r} "
                             "yourself.")
    drop_indexes(cur, defs)
    cur.execute(f"ALTER TABLE {qualified(old)} RENAME TO {ident(new)}")
    suffix = f"_{old}"  # what :func:`create_indexes` added to a taken name
    return [d._replace(name=d.name[:-len(suffix)]) if d.name.endswith(suffix)
            and len(d.name) > len(suffix) else d for d in defs]
