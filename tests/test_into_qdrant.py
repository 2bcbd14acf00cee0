"""--into FIELD on Qdrant (a named vector added to the same collection), Milvus and Chroma (both
refuse), against the real engines: qdrant-client's local mode, Milvus Lite, Chroma's persistent
client. The engine-independent tests are in tests/test_into.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from skalign import ProcrustesAligner
from skalign.exceptions import StoreError

pytest.importorskip("qdrant_client")

N = 60


def _client(folder):
    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import store as qdrant

    return qdrant._client(parse_address(f"qdrant:{folder}/docs"))


def _release(folder):
    """Close skalign's client of ``folder`` (one client per folder: other processes open it)."""
    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import store as qdrant

    c = qdrant._CLIENTS.pop(qdrant._client_key(parse_address(f"qdrant:{folder}/docs")), None)
    if c is not None:
        c.close()


def _make(folder, X, unnamed=False):
    """A collection ``docs``: cosine vectors ``emb`` (``X``), a dot-product ``title``, a sparse
    ``sp`` and a payload per point; or one unnamed cosine vector."""
    from qdrant_client import models as m

    folder.mkdir()
    c = _client(folder)
    if unnamed:
        c.create_collection("docs", vectors_config=m.VectorParams(size=X.shape[1],
                                                                  distance=m.Distance.COSINE))
        c.upsert("docs", points=m.Batch(ids=list(range(len(X))), vectors=X.tolist(),
                                        payloads=[{"text": f"t{i}"} for i in range(len(X))]))
    else:
        c.create_collection("docs", vectors_config={
            "emb": m.VectorParams(size=X.shape[1], distance=m.Distance.COSINE),
            "title": m.VectorParams(size=2, distance=m.Distance.DOT)},
            sparse_vectors_config={"sp": m.SparseVectorParams()})
        c.upsert("docs", points=[m.PointStruct(
            id=i, vector={"emb": X[i].tolist(), "title": [1.0, float(i)],
                          "sp": m.SparseVector(indices=[i], values=[0.5])},
            payload={"text": f"t{i}", "n": i, "tags": ["a", {"b": i}]}) for i in range(len(X))])
    _release(folder)


def _points_in_a_fresh_process(folder):
    """Every point as another process reads the folder: ``{id: (payload, vectors)}``."""
    code = ("import json, sys\nfrom qdrant_client import QdrantClient\n"
            "c = QdrantClient(path=sys.argv[1])\n"
            "pts, _ = c.scroll('docs', limit=10000, with_payload=True, with_vectors=True)\n"
            "print(json.dumps({p.id: [p.payload, {k: (v if isinstance(v, list) else "
            "[v.indices, v.values]) for k, v in p.vector.items()}] for p in pts}))\n")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return {int(k): v for k, v in json.loads(out).items()}


def test_cosine_field_holds_directions_beside_untouched_vectors(tmp_path):
    """translate --into new on a cosine vector: the new named vector is cosine, as wide as the
    model's output, holds the direction of the model's translation of each point's direction
    (what Qdrant serves of a cosine vector); the old vector, the other named and sparse vectors
    and the payloads are what another process read before, value for value; the field's stamp
    is final."""
    from skalign._stores.address import parse_address
    from skalign._stores.fields import read_field_stamp
    from skalign.io import translate

    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    _make(folder, X)
    before = _points_in_a_fresh_process(folder)
    address = f"qdrant:{folder}/docs?vector=emb"
    assert int(translate(model, address, into="new", batch_size=25)) == N
    config = _client(folder).get_collection("docs").config.params.vectors
    assert (config["new"].size, config["new"].distance.value) == (6, "Cosine")
    _release(folder)
    after = _points_in_a_fresh_process(folder)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    want = model.transform(unit)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    got = np.asarray([after[i][1].pop("new") for i in range(N)], np.float32)
    np.testing.assert_allclose(got, want, atol=1e-5)
    marks = {after[i][0].pop("skalign_vector_new") for i in range(N)}
    assert len(marks) == 1 and marks.pop().startswith("translated:")
    assert after == before  # old, title and sparse vectors and payloads, value for value
    stamp = read_field_stamp(parse_address(address), "new")
    assert stamp["field"] == "new" and stamp["from_field"] == "emb" and stamp["d_out"] == 6
    assert "filling" not in stamp


def test_names_qdrant_holds_or_refuses_are_refused_before_anything_is_written(tmp_path):
    """A vector skalign did not add (dense or sparse), the vector read, a collection of one
    unnamed vector, hostile names: each refused with one line; the collection is unchanged
    and no field stamp is written."""
    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import fields
    from skalign.io import translate

    rng = np.random.default_rng(1)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    _make(folder, X)
    address = f"qdrant:{folder}/docs?vector=emb"
    config = _client(folder).get_collection("docs").config.model_dump()
    for bad, said in [("title", "did not add"), ("sp", "did not add"),
                      ("emb", "own vector field"), ('a"b', "letters, digits"),
                      ("a\x1b[2Jb", "letters, digits"), ("x/y", "letters, digits")]:
        with pytest.raises(StoreError, match=said) as info:
            translate(model, address, into=bad)
        assert "\x1b" not in str(info.value) and "\n" not in str(info.value)
    assert _client(folder).get_collection("docs").config.model_dump() == config
    for name in ("title", "sp", "emb", "new"):
        assert fields.read_field_stamp(parse_address(address), name) is None
    _release(folder)
    other = tmp_path / "u"
    _make(other, X, unnamed=True)
    with pytest.raises(StoreError, match="unnamed.*second collection"):
        translate(model, f"qdrant:{other}/docs", into="new")
    c = _client(other)
    assert not isinstance(c.get_collection("docs").config.params.vectors, dict)
    assert fields.read_field_stamp(parse_address(f"qdrant:{other}/docs"), "new") is None


def test_a_kill_between_the_mark_and_the_vector_is_finished_by_the_rerun(tmp_path):
    """add_field writes the field's mark, then creates the vector: a run killed between the
    two left the mark alone, and the rerun adds the vector and fills it; one killed after the
    vector was made, before the field's first stamp, left an empty vector of skalign's, which
    the rerun fills."""
    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import fields
    from skalign.io import translate

    rng = np.random.default_rng(2)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    _make(folder, X)
    address = f"qdrant:{folder}/docs?vector=emb"
    fields.write_field_stamp(parse_address(address), "new", {})  # what the kill left
    assert fields.field_state(parse_address(address), "new") is None
    assert int(translate(model, address, into="new")) == N
    assert fields.field_state(parse_address(address), "new") == 6
    # killed after the vector was made, before the first stamp: an empty field of skalign's
    fields.add_field(parse_address(address), "late", 6, "emb")
    assert fields.field_state(parse_address(address), "late") == 6
    assert fields.read_field_stamp(parse_address(address), "late") is None
    assert int(translate(model, address, into="late")) == N


def test_drop_command_drops_the_old_vector_only(tmp_path):
    """The command skalign info gives for the old vector, run as given, removes that vector
    and nothing else."""
    from skalign._stores.address import parse_address
    from skalign._stores.qdrant import fields
    from skalign.io import translate

    rng = np.random.default_rng(3)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q'folder"  # a quote in the path
    _make(folder, X)
    address = parse_address(f"qdrant:{folder}/docs?vector=emb")
    translate(model, address, into="new")
    _release(folder)
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    subprocess.run(fields.drop_field_command(address, "emb"), shell=True, check=True,
                   timeout=120, executable="/bin/bash", env={**os.environ, "PATH": path})
    assert set(_client(folder).get_collection("docs").config.params.vectors) == {"title", "new"}
    assert fields.vector_fields(parse_address(f"qdrant:{folder}/docs?vector=new")) == {
        "title": 2, "new": 6}


def test_milvus_and_chroma_refuse_into_and_write_nothing(tmp_path):
    """Milvus Lite cannot add a field to a collection and a Chroma collection holds one
    embedding per record: --into says so, naming the second collection as the route, before
    anything is written."""
    pytest.importorskip("pymilvus")
    chromadb = pytest.importorskip("chromadb")
    from pymilvus import MilvusClient

    from skalign.io import translate

    rng = np.random.default_rng(4)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    m = MilvusClient(str(tmp_path / "m.db"))
    m.create_collection("docs", dimension=8)
    m.insert("docs", [{"id": i, "vector": X[i].tolist(), "text": f"t{i}"} for i in range(N)])
    schema = m.describe_collection("docs")
    m.close()
    c = chromadb.PersistentClient(path=str(tmp_path / "ch"))
    c.create_collection("docs", embedding_function=None).add(
        ids=[str(i) for i in range(N)], embeddings=X.tolist())
    for address, said in [(f"milvus:{tmp_path}/m.db/docs", "Milvus Lite cannot add a field"),
                          (f"chroma:{tmp_path}/ch/docs", "one embedding per record")]:
        with pytest.raises(StoreError, match=said) as info:
            translate(model, address, into="new")
        assert "without --into" in str(info.value)
    m = MilvusClient(str(tmp_path / "m.db"))
    assert m.describe_collection("docs")["fields"] == schema["fields"]
    m.close()
    assert c.get_collection("docs").count() == N


def test_a_half_filled_field_is_kept_by_a_translation_into_another_collection(tmp_path):
    """A collection whose added vector some points hold and others do not yet (a migration
    into it under way) translates into a second collection with each point's own vectors:
    a batch of points holding different vectors is written point by point."""
    from skalign._stores.address import parse_address
    from skalign._stores.fields import open_field
    from skalign.io import translate

    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    _make(folder, X)
    address = f"qdrant:{folder}/docs?vector=emb"
    translate(model, address, into="new")
    with open_field(parse_address(address), "new") as field:
        written = field.fetch(list(range(N))).vectors
    _client(folder).delete_vectors("docs", vectors=["new"], points=list(range(0, N, 3)))
    assert int(translate(model, address, f"qdrant:{folder}/out?vector=emb")) == N
    got = {p.id: p.vector for p in _client(folder).scroll(
        "out", limit=10 * N, with_vectors=True)[0]}
    for i in range(N):
        assert ("new" in got[i]) == (i % 3 != 0)
        if i % 3:
            np.testing.assert_allclose(got[i]["new"], written[i], atol=1e-6)
        assert got[i]["title"] == [1.0, float(i)]


def test_a_second_cosine_vector_is_kept_by_a_translation(tmp_path):
    """A collection with two cosine vectors, opened from its folder (where the local mode
    stored them raw), translates one: the output holds the other's direction, as Qdrant keeps
    it, and the verification takes it for the same vector (it refused it before)."""
    from qdrant_client import models as m

    from skalign.io import translate

    rng = np.random.default_rng(6)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    img = 3 * rng.standard_normal((N, 3)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    folder.mkdir()
    c = _client(folder)
    c.create_collection("docs", vectors_config={
        "emb": m.VectorParams(size=8, distance=m.Distance.COSINE),
        "img": m.VectorParams(size=3, distance=m.Distance.COSINE)})
    c.upsert("docs", points=m.Batch(ids=list(range(N)), vectors={
        "emb": X.tolist(), "img": img.tolist()}))
    _release(folder)
    assert int(translate(model, f"qdrant:{folder}/docs?vector=emb",
                         f"qdrant:{folder}/out?vector=emb")) == N
    got = {p.id: p.vector["img"] for p in _client(folder).scroll(
        "out", limit=10 * N, with_vectors=True)[0]}
    want = img / np.linalg.norm(img, axis=1, keepdims=True)
    np.testing.assert_allclose([got[i] for i in range(N)], want, atol=1e-6)


def test_a_rerun_never_reverts_rows_another_writer_encoded(tmp_path):
    """Rows of the field a searcher wrote back encoded (compare-and-set on the field's own
    key) stay encoded when translate --into runs again, and a write-back that expected a mark
    the row no longer holds writes nothing."""
    from skalign._stores.address import parse_address
    from skalign._stores.fields import field_key, open_field
    from skalign._stores.live import encoded_mark
    from skalign.io import translate

    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.standard_normal((N, 6)))
    folder = tmp_path / "q"
    _make(folder, X)
    address = f"qdrant:{folder}/docs?vector=emb"
    translate(model, address, into="new")
    V = rng.standard_normal((3, 6)).astype(np.float32)
    with open_field(parse_address(address), "new") as field:
        assert field.provenance_key == field_key("new") == "skalign_vector_new"
        before = field.fetch([1, 2, 3], text_field="text")
        marks = [encoded_mark("enc", "text", t) for t in before.texts]
        assert field.write_back([1, 2, 3], V, marks, before.provenance).all()
        stale = field.write_back([2], V[1:2] + 1, marks[1:2], before.provenance[1:2])
        assert not stale.any()  # row 2 no longer holds what that writer read
    assert int(translate(model, address, into="new")) == 0
    with open_field(parse_address(address), "new") as field:
        after = field.fetch([1, 2, 3], text_field="text")
    assert after.provenance == marks
    want = V / np.linalg.norm(V, axis=1, keepdims=True)  # a cosine field keeps directions
    np.testing.assert_allclose(after.vectors, want, atol=1e-6)
    points = _client(folder).retrieve("docs", [1, 2, 3], with_payload=True)
    assert [p.payload.get("skalign_vector") for p in points] == [None] * 3  # the old field's
