"""Pairs from any two stores (``skalign fit``/``evaluate``/``plan`` ``--source``/``--target``),
against the real engines and the real development embeddings (MiniLM → MPNet).

Each store holds the items in an order of its own, with items the other lacks: a wrong join
pairs embeddings of different texts, and the map fitted on them is not the one fitted on the
true pairs, which every test compares with.
"""

import json
import re
import tempfile

import numpy as np
import pytest
from store_backends import serve_postgres

from skalign import ProcrustesAligner
from skalign.cli import main
from skalign.cli._pairs_io import UnmatchedIdsWarning, read_pairs
from skalign.exceptions import StoreError

HOSTILE = "d'o\"c; DROP TABLE victim; --\n"


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The servers' lock folder (``$TMPDIR/skalign-UID``) under the test's own folder."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def items(docstring_pair):
    """150 items: MiniLM (old) and MPNet (new) embeddings, row ``i`` the same text."""
    A, B, perm = docstring_pair
    return A[perm[:150]].astype(np.float32), B[perm[:150]].astype(np.float32)


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _parquet(path, ids, V, id_name="doc_id"):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    vec = pa.FixedSizeListArray.from_arrays(pa.array(V.reshape(-1)), V.shape[1])
    pq.write_table(pa.table({id_name: pa.array(ids), "vector": vec}), path)
    return path


def _chroma(folder, ids, V, name="old"):
    chromadb = pytest.importorskip("chromadb")
    col = chromadb.PersistentClient(path=str(folder)).create_collection(
        name, metadata={"hnsw:space": "cosine"}, embedding_function=None)
    col.add(ids=list(ids), embeddings=V, documents=[f"text {i}" for i in range(len(ids))])
    return f"chroma:{folder}/{name}"


def _qdrant(folder, ids, V, name="old"):
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    from skalign._stores.address import parse_address
    from skalign._stores.qdrant.store import _client

    folder.mkdir(exist_ok=True)
    c = _client(parse_address(f"qdrant:{folder}/{name}"))
    c.create_collection(name, vectors_config=models.VectorParams(
        size=V.shape[1], distance=models.Distance.DOT))
    c.upsert(name, points=models.Batch(ids=list(ids), vectors=V.tolist()))
    return f"qdrant:{folder}/{name}"


def _assert_true_pairs(X, Y, A, B, rows):
    """``(X, Y)`` are the true pairs of ``rows``, in that order (Chroma gives its embeddings
    back within a float32 rounding)."""
    np.testing.assert_allclose(X, A[rows], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(Y, B[rows], rtol=1e-6, atol=1e-6)


def test_chroma_old_vectors_and_parquet_new_vectors_keyed_by_id(tmp_path, items, capsys):
    A, B = items
    ids = [f"doc{i}" for i in range(150)]
    old_rows = np.random.default_rng(1).permutation(140)  # items 140-149: new side only
    new_rows = np.random.default_rng(2).permutation(np.arange(5, 150))  # 0-4: old side only
    source = _chroma(tmp_path / "chroma", [ids[i] for i in old_rows], A[old_rows])
    target = _parquet(tmp_path / "new.parquet", [ids[i] for i in new_rows], B[new_rows])
    with pytest.warns(UnmatchedIdsWarning, match="10 ids of --target .* are not in --source and "
                      "5 ids of --source .* are not in --target; using the 135 pairs"):
        X, Y = read_pairs(source, target, id_column="doc_id")
    common = new_rows[new_rows < 140]  # the target's order
    _assert_true_pairs(X, Y, A, B, common)

    model = tmp_path / "m.skops"
    status, out, err = run(capsys, "fit", "procrustes", "--source", source, "--target", target,
                           "--id-column", "doc_id", "-o", model)
    assert status == 0, err
    assert "fitted ProcrustesAligner() on 135 pairs" in out
    assert err.count("skalign fit: warning: 10 ids of --target (e.g. 'doc14") == 1
    status, out, err = run(capsys, "evaluate", model, "--source", source, "--target", target,
                           "--id-column", "doc_id", "--json")
    assert status == 0, err
    got = json.loads(out)
    truth = ProcrustesAligner().fit(A[common], B[common])
    pred = truth.transform(A[common])
    cos = np.mean(np.sum(pred * B[common], 1) / np.linalg.norm(pred, axis=1)
                  / np.linalg.norm(B[common], axis=1))
    assert got["n_pairs"] == 135 and got["cosine"] == pytest.approx(cos, abs=1e-4)
    status, out, err = run(capsys, "plan", "--source", source, "--target", target,
                           "--id-column", "doc_id", "--methods", "procrustes", "--no-curve",
                           "--json")
    assert status == 0, err
    assert "skalign plan: warning: 10 ids of --target" in err


def test_qdrant_and_npy_pair_by_row_order_only_where_ids_are_row_numbers(tmp_path, items,
                                                                          capsys):
    A, B = items
    np.save(tmp_path / "new.npy", B)
    # point ids 0..149 hold rows 0..149 (Qdrant returns them in id order; inserted shuffled)
    order = np.random.default_rng(3).permutation(150)
    aligned = _qdrant(tmp_path / "q", order.tolist(), A[order], name="aligned")
    X, Y = read_pairs(aligned, tmp_path / "new.npy")
    _assert_true_pairs(X, Y, A, B, np.arange(150))
    # ids 1..150: one off, a guess would pair every row with its neighbour's text
    shifted = _qdrant(tmp_path / "q", list(range(1, 151)), A, name="shifted")
    with pytest.raises(StoreError, match="is in row order but --source .* is matched by its "
                       "qdrant ids, and they do not align \\(id 150 is not one of the row "
                       "numbers 0 to 149\\)"):
        read_pairs(shifted, tmp_path / "new.npy")
    fewer = _qdrant(tmp_path / "q", list(range(100)), A[:100], name="fewer")
    with pytest.raises(StoreError, match="it has 100 ids for 150 rows"):
        read_pairs(fewer, tmp_path / "new.npy")
    uuids = _qdrant(tmp_path / "q", [f"00000000-0000-0000-0000-{i:012d}" for i in range(150)],
                    A, name="uuids")
    status, out, err = run(capsys, "fit", "procrustes", "--source", uuids, "--target",
                           tmp_path / "new.npy", "-o", tmp_path / "m.skops")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "do not align (id '00000000-0000-0000-0000-000000000000' is not one of" in err
    assert not (tmp_path / "m.skops").exists()


def test_pgvector_and_lancedb_by_id(tmp_path_factory, tmp_path, items):
    pytest.importorskip("pgserver")
    pytest.importorskip("lancedb")
    import lancedb
    import psycopg
    import pyarrow as pa
    from pgvector.psycopg import register_vector

    A, B = items
    server = serve_postgres(tmp_path_factory)
    base = next(server)
    try:
        old_rows = np.random.default_rng(4).permutation(150)[:120]
        with psycopg.connect(base, autocommit=True) as conn:
            register_vector(conn)
            conn.execute(f"CREATE TABLE old (id bigint PRIMARY KEY, text text, emb "
                         f"vector({A.shape[1]}))")
            for i in old_rows:
                conn.execute("INSERT INTO old VALUES (%s, %s, %s)", (int(i) * 7, f"t{i}", A[i]))
        new_rows = np.random.default_rng(5).permutation(150)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(B[new_rows].reshape(-1)), B.shape[1])
        lancedb.connect(tmp_path).create_table("new", pa.table({
            # ids as text: compared as text with the table's bigint key
            "doc_id": pa.array([str(int(i) * 7) for i in new_rows]), "vector": vec}))
        with pytest.warns(UnmatchedIdsWarning, match="30 ids of --target"):
            X, Y = read_pairs(f"{base}&table=old", tmp_path / "new.lance", id_column="doc_id")
        _assert_true_pairs(X, Y, A, B, [i for i in new_rows if i in set(old_rows)])
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE nokey (id bigint, emb vector({A.shape[1]}))")
            conn.execute("INSERT INTO nokey VALUES (1, %s)", (str(A[0].tolist()),))
        with pytest.raises(StoreError, match="has no primary key; pairs are matched by a "
                           "one-column primary key"):
            read_pairs(f"{base}&table=nokey", tmp_path / "new.lance", id_column="doc_id")
    finally:
        server.close()


def test_hostile_and_duplicate_ids(tmp_path, items, capsys):
    A, B = items
    ids = [f"{HOSTILE}{i}" for i in range(150)]
    order = np.random.default_rng(6).permutation(150)
    source = _chroma(tmp_path / "chroma", ids, A)
    target = _parquet(tmp_path / "new.parquet", [ids[i] for i in order], B[order])
    X, Y = read_pairs(source, target, id_column="doc_id")
    _assert_true_pairs(X, Y, A, B, order)
    dup = _parquet(tmp_path / "dup.parquet", ids[:20] + [ids[3]], B[list(range(20)) + [3]])
    status, out, err = run(capsys, "fit", "procrustes", "--source", source, "--target", dup,
                           "--id-column", "doc_id", "-o", tmp_path / "m.skops")
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"id {ids[3]!r} (column 'doc_id') occurs more than once among its 21 rows" in err


@pytest.mark.parametrize("case, match", [
    ("disjoint", "share 0 ids \\(150 in --source by its column 'doc_id', 150 in --target by its "
                 "column 'doc_id'\\) \\(e.g. --source id 'a0' and --target id 'b0'; check "
                 "--id-column\\); fitting needs at least 2 pairs"),
    ("one", "share 1 id .*fitting needs at least 2 pairs"),
    ("no column", "has no column 'doc_id'; its columns are key, vector"),
    ("npy", "--id-column 'doc_id' needs a Parquet or LanceDB --source or --target"),
    ("rows", "has 150 rows but --target .* has 100; row i of both must embed the same item"),
])
def test_errors_name_counts(tmp_path, items, capsys, case, match):
    A, B = items
    source = _parquet(tmp_path / "a.parquet", [f"a{i}" for i in range(150)], A)
    target = {
        "disjoint": lambda: _parquet(tmp_path / "b.parquet", [f"b{i}" for i in range(150)], B),
        "one": lambda: _parquet(tmp_path / "b.parquet", ["a7"] + [f"b{i}" for i in range(149)],
                                B),
        "no column": lambda: _parquet(tmp_path / "b.parquet", list(range(150)), B, "key"),
        "npy": lambda: np.save(tmp_path / "b.npy", B) or tmp_path / "b.npy",
        "rows": lambda: np.save(tmp_path / "b.npy", B[:100]) or tmp_path / "b.npy",
    }[case]()
    if case in ("npy", "rows"):
        np.save(tmp_path / "a.npy", A)
        source = tmp_path / "a.npy"
    argv = ["fit", "procrustes", "--source", source, "--target", target, "-o",
            tmp_path / "m.skops"] + ([] if case == "rows" else ["--id-column", "doc_id"])
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert re.search(match, err), err
    assert not (tmp_path / "m.skops").exists()
