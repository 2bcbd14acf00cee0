"""``skalign info`` of a pgvector table: provenance counted and lengths sampled by PostgreSQL
(:mod:`skalign._stores.pgvector.marks`), equal to the row-by-row count."""

import numpy as np
import pytest

from skalign._stores.address import parse_address
from skalign._stores.live import encoded_mark, text_digest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DIM = 8


def _table(base, rows, name="docs", extra_field=None):
    """A table ``name`` (id, text, title varchar, code char(6), n int, emb) whose rows are
    ``(text, title, code, mark)``; with ``extra_field`` a second vector column whose marks are
    under ``skalign_vector_<field>`` (the same marks)."""
    import psycopg
    from pgvector.psycopg import register_vector

    rng = np.random.default_rng(0)
    V = rng.normal(size=(len(rows), DIM)).astype(np.float32)
    with psycopg.connect(base, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        more = f", {extra_field} vector({DIM}), skalign_vector_{extra_field} text" \
            if extra_field else ""
        conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, text text, title varchar, "
                     f"code char(6), n int, emb vector({DIM}), skalign_vector text{more})")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {name} (id, text, title, code, n, emb, skalign_vector) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            [(i, *r[:3], i, v, r[3]) for i, (r, v) in enumerate(zip(rows, V))])
            if extra_field:
                # every other row of the new field not written yet (no vector, no mark)
                cur.executemany(f"UPDATE {name} SET {extra_field} = %s, "
                                f"skalign_vector_{extra_field} = %s WHERE id = %s",
                                [(v * 2, r[3], i) for i, (r, v) in enumerate(zip(rows, V))
                                 if i % 2])
    return f"{base}&table={name}&column=emb", V


def _rows():
    """Rows of every kind a mark can be, and the counts they make with ``mine="A"``."""
    long_fp = "x" * 4100
    rows = [
        ("café ☃", "t", "ab", encoded_mark("A", None, "café ☃")),           # encoded by A
        ("one", "t", "ab", encoded_mark("A", None, "one")),                  # encoded by A
        ("two", "t", "ab", encoded_mark("B", None, "two")),                  # B: stale for A
        ("three now", "t", "ab", encoded_mark("A", None, "three")),          # text changed
        ("four", "title 4", "ab", encoded_mark("A", "title", "title 4")),    # title field
        ("five", "title 5", "ab", encoded_mark("A", "title", "old title")),  # title changed
        ("six", "t", "ab", encoded_mark("A", "code", "ab")),                 # char(6): 'ab'
        ("seven", "t", "ab", encoded_mark("A", "nope", "seven")),            # no such column
        ("eight", "t", "ab", encoded_mark("A", "n", "7")),                   # not text
        ("nine", "t", "ab", encoded_mark("a:b", None, "nine")),              # ':' in the fp
        ("ten", "t", "ab", encoded_mark("A\x01", None, "ten")),              # control in fp
        ("eleven", "t", "ab", f"encoded:A:te%78t:{text_digest('eleven')}"),  # odd token
        ("twelve", "t", "ab", f"encoded:A:ti tle:{text_digest('t')}"),       # space in token
        (None, "t", "ab", encoded_mark("A", None, "")),                      # no text
        ("fourteen", "t", "ab", "encoded:A"),                                # an old mark
        ("fifteen", "t", "ab", f"encoded:{long_fp}:{'':s}:{text_digest('fifteen')}"),
        ("sixteen", "t", "ab", "translated:M"),
        ("seventeen", "t", "ab", None),
        ("eighteen", "t", "ab", "hello"),
        ("nineteen", "t", "ab", encoded_mark("A", None, "nineteen").upper()),
    ]
    expected = {"rows": 20, "encoded": 4, "stale": 12, "translated": 4,
                "encoders": {"A": 4, "B": 1, "a:b": 1}}
    return rows, expected


def _row_by_row(store, mine, empty=False):
    """The counts read row by row (what a store without ``count_marks`` gets)."""
    from skalign._migrate.counts import _count_batch

    counts = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    ids = store.ids()
    _count_batch(store, ids, mine, counts)
    if empty:
        counts["empty"] = sum(p is None for p in store.fetch(ids).provenance)
        counts["translated"] -= counts["empty"]
    return counts


def test_sql_counts_equal_the_row_by_row_count(pg_base):
    from skalign._stores import open_live

    rows, expected = _rows()
    address, _ = _table(pg_base, rows)
    with open_live(parse_address(address)) as store:
        got = store.count_marks("A")
        assert got == expected
        assert got == _row_by_row(store, "A")
        anyone = store.count_marks(None)
        assert anyone == _row_by_row(store, None)
        assert anyone["encoded"] == 6 and anyone["encoders"] == expected["encoders"]


def test_the_text_field_asked_for_is_the_default_token(pg_base):
    from skalign._stores import open_live

    rows = [("x", "a title", "ab", encoded_mark("A", None, "a title")),
            ("y", "b title", "ab", encoded_mark("A", None, "y"))]
    address, _ = _table(pg_base, rows, name="titled")
    with open_live(parse_address(address), text_field="title") as store:
        got = store.count_marks("A")
        assert got == _row_by_row(store, "A")
        assert (got["encoded"], got["stale"]) == (1, 1)


def test_a_table_without_marks_is_all_translations(pg_base):
    import psycopg

    from skalign._stores import open_live

    address, _ = _table(pg_base, [("a", "t", "ab", None)] * 3, name="plain")
    with psycopg.connect(pg_base, autocommit=True) as conn:
        conn.execute("ALTER TABLE plain DROP COLUMN skalign_vector")
    with open_live(parse_address(address)) as store:
        assert store.count_marks("A") == {"rows": 3, "encoded": 0, "stale": 0,
                                          "translated": 3, "encoders": {}}
        assert store.count_marks("A", empty=True)["empty"] == 3


def test_a_field_into_added_counts_its_own_marks_and_empty_rows(pg_base):
    from skalign._stores.pgvector.live import PgvectorLive

    rows, _ = _rows()
    address, _ = _table(pg_base, rows, name="fielded", extra_field="emb2")
    store = PgvectorLive(parse_address(address.replace("column=emb", "column=emb2")),
                         provenance_key="skalign_vector_emb2")
    with store:
        got = store.count_marks("A", empty=True)
        assert got == _row_by_row(store, "A", empty=True)
        assert got["empty"] == 11 and got["rows"] == 20  # 10 not written, 1 unmarked


def test_count_provenance_uses_the_sql_count(pg_base, monkeypatch):
    from skalign._migrate import counts as counts_mod
    from skalign._migrate.counts import count_provenance

    rows, expected = _rows()
    address, _ = _table(pg_base, rows, name="counted")

    def no_batches(*a, **k):
        raise AssertionError("rows read in batches")

    monkeypatch.setattr(counts_mod, "_count_batch", no_batches)
    got = count_provenance(address)
    assert got == {**expected, "encoded": 6, "stale": 10}  # no stamp: any encoder


def test_lengths_are_every_rows_of_a_small_table_and_a_seeded_sample_of_a_large_one(pg_base):
    from skalign._stores import open_live

    rows = [(f"t{i}", "t", "ab", encoded_mark("A", None, f"t{i}") if i % 3 else None)
            for i in range(600)]
    address, V = _table(pg_base, rows, name="small")
    with open_live(parse_address(address)) as store:
        norms, marks = store.sample_norms(2048)  # every row
        np.testing.assert_allclose(np.sort(norms), np.sort(np.linalg.norm(V, axis=1)),
                                   rtol=1e-6)
        assert sorted(map(str, marks)) == sorted(str(r[3]) for r in rows)
        part, part_marks = store.sample_norms(100)  # whole pages of the table
        assert 50 <= len(part) <= 100 and len(part_marks) == len(part)
        again, _ = store.sample_norms(100)
        np.testing.assert_array_equal(part, again)  # seeded: the same rows each time
        by_norm = dict(zip(np.round(norms, 5), map(str, marks)))
        assert all(by_norm[round(x, 5)] == str(m) for x, m in zip(part, part_marks))
