"""What each store engine can do, and the tests that show it: the one source of the table at
the top of doc/user_guide/stores.rst (tests/test_stores_table.py checks that the table says
exactly this) and of the engine lists the tests named here are parametrised with, so that a
"yes" in the guide is what the suite runs.

:data:`TESTS` maps a column of the table to the tests that exercise it, each test (``FILE::NAME``
under tests/) to the engine kinds it runs: a test parametrised over several kinds takes its list
from here (:func:`kinds`), a test of one engine alone is listed with that one kind. A kind no
test of a column runs has its cell in :data:`OTHERWISE`; a cell neither tested nor explained
there fails tests/test_stores_table.py.
"""

from __future__ import annotations

#: the engine kinds of skalign._stores.registry.BACKENDS, in the table's order
ENGINES = ("npy", "parquet", "parquet-dir", "lance", "faiss", "pgvector", "chroma", "qdrant",
           "milvus", "sqlite-vec", "duckdb")

#: the kinds whose stores are plain files or folders (no database, no collection)
FILE_KINDS = ("npy", "parquet", "parquet-dir", "lance", "faiss")

_DATABASES = tuple(k for k in ENGINES if k not in FILE_KINDS)
_MIGRATE = {
    "test_migrate_files.py::test_file_store_migration_continued_to_the_end": FILE_KINDS,
    "test_migrate.py::test_chroma_migration_keeps_metadata_and_continues_in_place": ("chroma",),
    "test_migrate.py::test_engine_migration_to_the_end": ("qdrant", "pgvector", "sqlite-vec",
                                                          "milvus", "duckdb"),
}

#: the kinds whose ``--into FIELD`` tests/test_into.py runs (its makers)
_INTO = ("parquet", "lance", "pgvector", "qdrant")

#: column -> {test: the kinds it runs}
TESTS = {
    "translate": {
        "test_resume.py::test_sigkill_then_same_command_resumes_to_an_identical_result": ENGINES,
        "test_connectors.py::test_round_trip_keeps_ids_fields_and_source": ("faiss", *_DATABASES),
    },
    "migrate": _MIGRATE,
    "--continue": _MIGRATE,
    "search write-back": {
        "test_search.py::test_written_back_vectors_equal_the_encoder_output": ENGINES,
    },
    "--into FIELD": {
        "test_into.py::test_migrate_into_a_field_to_the_end": _INTO,
        "test_into.py::test_translate_into_resumes_after_a_kill": _INTO,
        "test_into.py::test_search_field_and_info_show_both_fields": _INTO,
        "test_into.py::test_migrate_into_killed_then_the_same_command_finishes": _INTO,
    },
    "pairs by id": {
        "test_pairs_io.py::test_chroma_old_vectors_and_parquet_new_vectors_keyed_by_id":
            ("chroma", "parquet"),
        "test_pairs_io.py::test_qdrant_and_npy_pair_by_row_order_only_where_ids_are_row_numbers":
            ("qdrant",),
        "test_pairs_io.py::test_pgvector_and_lancedb_by_id": ("pgvector", "lance"),
        "test_migrate_files.py::test_file_store_pairs_by_id": ("parquet-dir", "faiss"),
        "test_milvus_store.py::test_pairs_by_id_for_fit_and_plan": ("milvus",),
        "test_sqlite_vec.py::test_pairs_by_id_with_a_parquet_side": ("sqlite-vec",),
        "test_duckdb_store.py::test_pairs_by_id_with_a_parquet_side": ("duckdb",),
    },
}

#: (column, kind) -> its cell where no test of the column runs the kind
OTHERWISE = {
    ("pairs by id", "npy"): "row order (no ids)",
    **{("--into FIELD", k): "not yet" for k in ENGINES
       if k not in (*_INTO, "chroma", "milvus")},
    ("--into FIELD", "chroma"): "no: one embedding per collection",
    ("--into FIELD", "parquet-dir"): "no: one Parquet file only",
    ("--into FIELD", "milvus"): "no: Milvus Lite cannot add a field",
}

#: (column, kind) -> what a "yes" holds for only
NOTES = {
    ("pairs by id", "parquet"): "with ``--id-column``",
    ("pairs by id", "parquet-dir"): "with ``--id-column``",
    ("pairs by id", "lance"): "with ``--id-column``",
    ("pairs by id", "faiss"): "an ``IndexIDMap``'s ids",
    ("pairs by id", "sqlite-vec"): "the primary key, else ``rowid``",
    ("--into FIELD", "qdrant"): "a named vector",
}

#: kind -> its row's name in the table
NAMES = {"npy": "``.npy``", "parquet": "Parquet file", "parquet-dir": "Parquet folder",
         "lance": "LanceDB", "faiss": "FAISS", "pgvector": "pgvector", "chroma": "Chroma",
         "qdrant": "Qdrant", "milvus": "Milvus", "sqlite-vec": "sqlite-vec", "duckdb": "DuckDB"}

#: column -> its header where that differs from the column's name
HEADERS = {"--continue": "``migrate --continue``", "--into FIELD": "``--into FIELD``",
           "search write-back": "``search`` write-back"}

#: kind -> its address forms: (form, an example of it, how the tests use it)
FORMS = {
    "npy": [("PATH.npy", "s.npy", "run")],
    "parquet": [("PATH.parquet", "s.parquet", "run")],
    "parquet-dir": [("DIR", "shards", "run")],
    "lance": [("DIR/TABLE.lance", "db/docs.lance", "embedded, run")],
    "faiss": [("PATH.faiss", "docs.faiss", "run")],
    "pgvector": [("postgresql://USER@HOST:PORT/DB?table=T",
                  "postgresql://me@db:5432/app?table=docs", "server, run on a local one")],
    "chroma": [("chroma:DIR/C", "chroma:chroma/docs", "embedded, run"),
               ("chroma+http://HOST:PORT/C", "chroma+http://db:8000/docs",
                "server, parsed only")],
    "qdrant": [("qdrant:DIR/C", "qdrant:qdrant/docs", "local mode, run"),
               ("qdrant+http://HOST:PORT/C", "qdrant+http://db:6333/docs",
                "server, parsed only")],
    "milvus": [("milvus:PATH.db/C", "milvus:milvus.db/docs", "Milvus Lite, run"),
               ("milvus://HOST:PORT/C", "milvus://db:19530/docs", "server, parsed only")],
    "sqlite-vec": [("sqlite:PATH?table=T", "sqlite:app.db?table=docs", "embedded, run")],
    "duckdb": [("duckdb:PATH?table=T", "duckdb:app.duckdb?table=docs", "embedded, run")],
}

#: the table's columns, in order, after the engine
COLUMNS = (*TESTS, "address forms")


def rows():
    """The table: its header row, then a row of cells for each engine."""
    return [["engine", *(HEADERS.get(c, c) for c in COLUMNS)],
            *([NAMES[k], *(cell(c, k) for c in COLUMNS)] for k in ENGINES)]


def kinds(column, test):
    """The kinds ``test`` (``FILE::NAME``) runs for ``column``: its parametrisation."""
    return list(TESTS[column][test])


def cell(column, kind):
    """The table's cell of ``kind`` in ``column``: ``yes`` where a test runs it."""
    if column == "address forms":
        return "; ".join(f"``{form}`` ({how})" for form, _, how in FORMS[kind])
    if any(kind in ran for ran in TESTS[column].values()):
        note = NOTES.get((column, kind))
        return f"yes: {note}" if note else "yes"
    return OTHERWISE[(column, kind)]
