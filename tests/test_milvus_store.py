"""Milvus (Milvus Lite, the real engine, in a temporary folder): address forms and passwords,
hostile collection, field and primary-key values, the live store's search, reads by id and
compare-and-set write-back, and its refusals. The parametrised store tests (round trip,
--replace, kill/resume, the publish window) run Milvus with the other engines
(tests/store_backends.py)."""

import os

import numpy as np
import pytest

pytest.importorskip("milvus_lite")

from store_backends import Milvus  # noqa: E402

from skalign import ProcrustesAligner  # noqa: E402
from skalign._stores.address import parse_address  # noqa: E402
from skalign._stores.live import similarity  # noqa: E402
from skalign._stores.provenance import read_stamp as _read_stamp  # noqa: E402
from skalign._stores.registry import live_class  # noqa: E402
from skalign.cli import main  # noqa: E402
from skalign.exceptions import StoreError  # noqa: E402
from skalign.io import save, translate  # noqa: E402

#: string primary keys that break naive filter expressions, and names Milvus refuses
HOSTILE_KEYS = ['a"b', "c'd", "e\\f", "x]) or true or ([", "n\nl", "ctl\x01", "é€😀", "tab\t",
                '"; drop', ""]
BAD_NAMES = ["a b", "a-b", "1abc", "a'b", "ü", "x;y", "x" * 235]


@pytest.fixture(autouse=True)
def _release_databases():
    """After each test, this process's clients closed and Milvus Lite servers stopped (each
    database's server keeps its threads until then)."""
    yield
    from milvus_lite.server_manager import server_manager_instance

    from skalign._stores.milvus.names import close_all

    close_all()
    server_manager_instance.release_all()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 16)).astype(np.float32)
    model = ProcrustesAligner().fit(X, rng.normal(size=(40, 24)))
    return X, model


def read_stamp(address):
    return _read_stamp(parse_address(address))


def _cli(capsys, *argv):
    status = main(list(argv))
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("text, name, column, url, path", [
    ("milvus:data/m.db/docs", "docs", None, None, "data/m.db"),
    ("milvus:/abs/m.db/docs?vector=emb", "docs", "emb", None, "/abs/m.db"),
    ("milvus://db.example:19530/docs", "docs", None, "http://db.example:19530", None),
    ("milvus+https://u:pw@db.example:443/docs?vector=v", "docs", "v", "https://db.example:443",
     None),
])
def test_address_forms(text, name, column, url, path):
    a = parse_address(text)
    assert (a.kind, a.name, a.column, a.url) == ("milvus", name, column, url)
    assert (str(a.path) if a.path else None) == path
    assert "pw" not in a.display and "pw" not in repr(a)
    assert parse_address(a.display).identity == a.identity


def test_unreachable_server_one_line_password_masked(tmp_path, capsys, data):
    path = save(data[1], tmp_path / "m.skops")
    status, err = _cli(capsys, "translate", str(path), "milvus://alice:s3cret@127.0.0.1:9/docs",
                       "milvus://alice:s3cret@127.0.0.1:9/out", "--quiet")
    assert status == 2 and len(err) == 1 and "cannot reach the Milvus server" in err[0], err
    assert "s3cret" not in err[0] and "alice:***@127.0.0.1:9" in err[0]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_milvus_refuses_one_line_nothing_created(tmp_path, capsys, data, name):
    X, model = data
    b = Milvus()
    src = b.make(tmp_path, X)
    path = save(model, tmp_path / "m.skops")
    before = b.inventory(tmp_path)
    out = f"milvus:{tmp_path / 'milvus.db'}/{name}?vector=emb"
    status, err = _cli(capsys, "translate", str(path), src, out, "--quiet")
    assert status == 2 and len(err) == 1, err
    assert "not a Milvus collection name" in err[0] or "an output's may have at most" in err[0]
    assert "\n" not in err[0] and b.inventory(tmp_path) == before
    if len(name) > 255 - 21:
        return  # a field name of its length is one Milvus takes
    # a field name that breaks the rule is refused before it reaches a filter expression
    status, err = _cli(capsys, "translate", str(path), src.replace("vector=emb", "vector=" +
                       name.replace(" ", "%20").replace(";", "%3B")),
                       b.output(tmp_path), "--quiet")
    assert status == 2 and len(err) == 1 and "is not a Milvus field name" in err[0], err


def test_longest_output_name_works(tmp_path, data):
    X, model = data
    b = Milvus()
    src = b.make(tmp_path, X)
    out = b.output(tmp_path, "x" * 234)
    assert translate(model, src, out, batch_size=16) == len(X)
    ids, V, _ = b.read(out)
    np.testing.assert_allclose(V, model.transform(X), atol=1e-5)


def _string_keyed(root, X, keys):
    from pymilvus import DataType, MilvusClient

    c = MilvusClient(str(root / "milvus.db"))
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
    s.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=X.shape[1])
    index = c.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    c.create_collection("keys", schema=s, index_params=index)
    c.insert("keys", [{"pk": k, "vec": x.tolist(), "text": f"text of {k}"}
                      for k, x in zip(keys, X)])
    return c, f"milvus:{root / 'milvus.db'}/keys"


def test_hostile_primary_keys_translate_and_live_end_to_end(tmp_path, data):
    X, model = data
    keys = HOSTILE_KEYS + [f"k{i}" for i in range(len(X) - len(HOSTILE_KEYS))]
    c, src = _string_keyed(tmp_path, X, keys)
    out = src.replace("/keys", "/keys_out")
    assert translate(model, src, out, batch_size=8) == len(X)
    got = {e["pk"]: e for e in c.query("keys_out", filter="", output_fields=["*"],
                                       limit=100)}
    assert sorted(got) == sorted(keys)
    T = model.transform(X)
    for k, t in zip(keys, T):
        np.testing.assert_allclose(got[k]["vec"], t, atol=1e-5)
        assert got[k]["text"] == f"text of {k}"
    live = live_class("milvus")(parse_address(out))
    assert live.metric == "l2" and sorted(live.ids()) == sorted(keys)
    rows = live.fetch(HOSTILE_KEYS)
    assert rows.texts == [f"text of {k}" for k in HOSTILE_KEYS]
    np.testing.assert_allclose(rows.vectors, T[:len(HOSTILE_KEYS)], atol=1e-5)
    written = live.write_back(HOSTILE_KEYS[:3], rows.vectors[:3] + 1, "translated:m",
                              expected=[None, "translated:m", None])
    assert written.tolist() == [True, False, True]
    again = live.fetch(HOSTILE_KEYS[:3])
    assert again.provenance == ["translated:m", None, "translated:m"]
    np.testing.assert_allclose(again.vectors[0], rows.vectors[0] + 1)
    np.testing.assert_allclose(again.vectors[1], rows.vectors[1])
    with pytest.raises(StoreError, match="no row with id 'no such key'"):
        live.fetch(["no such key"])


def test_live_search_scores_partitions_and_write_back(tmp_path, data):
    """Top-k from Milvus's own index scores as :func:`similarity` does (cosine); a write-back
    keeps every other field, the dynamic ones and the entity's partition."""
    X, _ = data
    b = Milvus()
    src = b.make(tmp_path, X)
    live = live_class("milvus")(parse_address(src), text_field="doc")
    assert (live.metric, live.dim, live.n_rows) == ("cosine", 16, len(X))
    ids = live.ids()
    assert ids == [3 * i + 1 for i in range(0, len(X), 2)] + [3 * i + 1
                                                             for i in range(1, len(X), 2)]
    Q = X[:5] + 0.01
    got, scores = live.top_k(Q, 4)
    S = similarity(Q, X, "cosine")
    for q in range(5):
        best = np.argsort(-S[q])[:4]
        assert got[q] == [3 * int(i) + 1 for i in best]
        np.testing.assert_allclose(scores[q], S[q, best], atol=1e-5)
    before = b.read(src)
    live.write_back([4, 7], X[[1, 2]] * 2, ["translated:a", "translated:b"])
    after = b.read(src)
    assert after[2] == before[2]  # partitions, docs, dynamic k, the other vector field
    np.testing.assert_allclose(after[1][[1, 2]], X[[1, 2]] * 2)
    np.testing.assert_array_equal(after[1][3:], before[1][3:])
    assert live.fetch([4]).provenance == ["translated:a"]
    assert sum(after[0] == 4) == 1  # upserted in its partition, not copied to another


def test_live_refuses_a_users_key_and_nowhere_to_keep_provenance(tmp_path, data):
    from pymilvus import MilvusClient

    X, _ = data
    b = Milvus()
    src = b.make(tmp_path, X)
    c = MilvusClient(str(tmp_path / "milvus.db"))
    e = c.query("src", filter="id in [1]", output_fields=["*"])[0]
    c.upsert("src", [{**e, "skalign_vector": "the user's own"}])
    live = live_class("milvus")(parse_address(src))
    with pytest.raises(StoreError, match="skalign did not write.*--provenance-key"):
        live.write_back([1], X[:1], "translated:x")
    from pymilvus import DataType

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=16)
    index = c.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="IP")
    c.create_collection("plain", schema=schema, index_params=index)
    c.insert("plain", [{"id": 5, "vector": X[0].tolist()}])
    plain = live_class("milvus")(parse_address(f"milvus:{tmp_path / 'milvus.db'}/plain"))
    assert plain.metric == "ip"
    with pytest.raises(StoreError, match="no dynamic fields"):
        plain.write_back([5], X[:1], "translated:x")
    with pytest.raises(StoreError, match="is not a Milvus provenance key name"):
        live_class("milvus")(parse_address(src), provenance_key="a b")


def test_stamp_in_properties_and_source_untouched(tmp_path, data):
    from pymilvus import MilvusClient

    X, model = data
    b = Milvus()
    src = b.make(tmp_path, X)
    before = b.read(src)
    out = b.output(tmp_path)
    translate(model, src, out, batch_size=16)
    stamp = read_stamp(out)
    assert stamp["rows"] == len(X) and "publishing" not in stamp
    assert read_stamp(src) is None
    c = MilvusClient(str(tmp_path / "milvus.db"))
    target = c.describe_alias("out")["collection_name"]
    props = c.describe_collection(target)["properties"]
    assert props["owner"] == "tests" and "skalign" in props  # the source's properties kept
    assert sorted(c.list_partitions(target)) == ["_default", "odd"]
    assert c.describe_index(target, "emb")["index_type"] == "HNSW"
    assert c.describe_index(target, "title")["metric_type"] == "L2"
    after = b.read(src)
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]


def test_pairs_by_id_for_fit_and_plan(tmp_path, capsys):
    """Old vectors in a Milvus collection (string keys holding quotes), new ones in a Parquet
    file keyed by the same ids in another order: the pairs are the ids both hold,
    in the target's order; fit and plan read them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skalign.cli._pairs_io import UnmatchedIdsWarning, read_pairs

    rng = np.random.default_rng(8)
    A = rng.normal(size=(150, 12)).astype(np.float32)
    B = (A @ rng.normal(size=(12, 20)) + 0.01 * rng.normal(size=(150, 20))).astype(np.float32)
    keys = [f"doc '{i}\"" for i in range(150)]
    c, src = _string_keyed(tmp_path, A[:140], keys[:140])  # 140-149: the target's only
    order = rng.permutation(150)
    pq.write_table(pa.table({"doc_id": [keys[i] for i in order],
                             "vector": pa.array(list(B[order]), pa.list_(pa.float32()))}),
                   tmp_path / "new.parquet")
    target = str(tmp_path / "new.parquet")
    with pytest.warns(UnmatchedIdsWarning, match="10 ids of --target .* are not in --source; "
                      "using the 140 pairs"):
        X, Y = read_pairs(src, target, id_column="doc_id")
    rows = order[order < 140]
    np.testing.assert_array_equal(X, A[rows])
    np.testing.assert_array_equal(Y, B[rows])
    status, err = _cli(capsys, "fit", "procrustes", "--source", src, "--target", target,
                       "--id-column", "doc_id", "-o", str(tmp_path / "m.skops"))
    assert status == 0, err
    status = main(["plan", "--source", src, "--target", target, "--id-column", "doc_id",
                   "--methods", "procrustes", "--no-curve", "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "using the 140 pairs" in out.err


def test_database_another_process_holds_is_refused_in_one_line(tmp_path, capsys, data):
    """Milvus Lite admits one process per database: another one's command ends with one line
    (Milvus Lite's own traceback of the failed open is not printed)."""
    import subprocess
    import sys

    X, _ = data
    b = Milvus()
    src = b.make(tmp_path, X)
    Milvus.release(tmp_path)  # this process lets go of it
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pymilvus import MilvusClient; "
         f"c = MilvusClient({str(tmp_path / 'milvus.db')!r}); print('ready', flush=True); "
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        status, err = _cli(capsys, "info", src)
    finally:
        holder.communicate("")
    assert status == 2 and len(err) == 1, err
    assert "another process uses the Milvus Lite database" in err[0]


def test_replace_twice_is_a_noop_and_stamps_follow_replace_and_restore(tmp_path, data):
    import time

    from skalign.exceptions import UnsafeOperationError
    from skalign.io import restore

    X, _ = data
    model = ProcrustesAligner().fit(X, X[::-1])  # 16 -> 16: the backup is a possible input
    b = Milvus()
    src, out = b.make(tmp_path, X), b.output(tmp_path)
    backup = b.output(tmp_path, "out_skalign_backup")
    translate(model, src, out)
    first = read_stamp(out)
    before = b.inventory(tmp_path)
    got = translate(model, src, out, replace=True)
    assert got == 0 and got.backup is None and "already holds" in got.noop
    assert b.inventory(tmp_path) == before and read_stamp(out) == first
    time.sleep(1.1)  # a second stamp's time differs
    got = translate(model, src, out, replace=True, force=True)
    assert got.backup is not None
    second = read_stamp(out)
    assert second["written"] != first["written"] and read_stamp(backup) == first
    before = b.inventory(tmp_path)
    with pytest.raises(UnsafeOperationError, match="INPUT is OUTPUT's backup"):
        translate(model, backup, out, replace=True)
    assert b.inventory(tmp_path) == before
    restore(out)  # the aliases swap, and the stamps with their collections
    assert read_stamp(out) == first and read_stamp(backup) == second
    restore(out)
    assert read_stamp(out) == second
    np.testing.assert_allclose(b.read(out)[1], model.transform(X), atol=1e-5)


def test_database_created_only_when_the_translation_starts(tmp_path, data):
    import stat

    from skalign._stores.pipeline.translate import prepare_translation
    from skalign.exceptions import StoreNotFoundError

    X, model = data
    b = Milvus()
    src = b.make(tmp_path, X)
    new = tmp_path / "new.db"
    out = f"milvus:{new}/out?vector=emb"
    job = prepare_translation(model, src, out)  # the checks and the existence probe
    assert job.noop is None and not new.exists()
    assert read_stamp(out) is None and not new.exists()
    assert translate(model, src, out) == len(X)
    assert stat.S_IMODE(new.stat().st_mode) == 0o700 and read_stamp(out)["rows"] == len(X)
    # reading creates nothing: a missing database, a folder that is not one
    (tmp_path / "plain.db").mkdir()
    for path, match in ((tmp_path / "none.db", "no Milvus Lite database"),
                        (tmp_path / "plain.db", "is not a Milvus Lite database")):
        with pytest.raises(StoreNotFoundError, match=match):
            translate(model, f"milvus:{path}/src?vector=emb", out.replace("/out?", "/o2?"))
    assert not (tmp_path / "none.db").exists() and list((tmp_path / "plain.db").iterdir()) == []
    # refused before any work: an output folder holding other things, a missing parent
    (tmp_path / "busy.db").mkdir()
    (tmp_path / "busy.db" / "notes.txt").write_text("mine")
    for path, match in ((tmp_path / "busy.db", "neither a"),
                        (tmp_path / "no" / "such.db", "no folder")):
        with pytest.raises(StoreError, match=match):
            translate(model, src, f"milvus:{path}/out?vector=emb")
    assert os.listdir(tmp_path / "busy.db") == ["notes.txt"] and not (tmp_path / "no").exists()


def test_schema_kept_partition_key_nullable_json_array_auto_id(tmp_path, data):
    """A collection with an auto-id key, a partition key, nullable and defaulted fields, JSON
    and ARRAY fields: the output has the same schema (the vector at its new width), every
    entity keeps its key and fields, its partition key (which routes it) included."""
    from pymilvus import DataType, MilvusClient

    X, model = data
    c = MilvusClient(str(tmp_path / "milvus.db"))
    s = MilvusClient.create_schema(auto_id=True, enable_dynamic_field=False)
    s.add_field("pk", DataType.INT64, is_primary=True)
    s.add_field("cat", DataType.VARCHAR, max_length=16, is_partition_key=True)
    s.add_field("note", DataType.VARCHAR, max_length=64, nullable=True)
    s.add_field("n", DataType.INT32, default_value=7)
    s.add_field("meta", DataType.JSON, nullable=True)
    s.add_field("tags", DataType.ARRAY, element_type=DataType.INT64, max_capacity=4)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=X.shape[1])
    index = c.prepare_index_params()
    index.add_index("vec", index_type="IVF_FLAT", metric_type="IP", params={"nlist": 4})
    c.create_collection("typed", schema=s, index_params=index)
    rows = [{"cat": f"c{i % 3}", "note": None if i % 4 == 0 else f"note {i}",
             "meta": None if i % 5 == 0 else {"i": i, "s": [1, "x"]}, "tags": list(range(i % 4)),
             "vec": x.tolist(), **({} if i % 2 else {"n": i})} for i, x in enumerate(X)]
    keys = c.insert("typed", rows)["ids"]
    src = f"milvus:{tmp_path / 'milvus.db'}/typed"
    out = src.replace("/typed", "/typed_out")
    assert translate(model, src, out, batch_size=16) == len(X)
    target = c.describe_alias("typed_out")["collection_name"]

    def fields(name):
        return {f["name"]: {k: v for k, v in f.items() if k != "params" or f["name"] != "vec"}
                for f in c.describe_collection(name)["fields"]}

    assert fields(target) == fields("typed")
    assert c.describe_collection(target)["auto_id"] is True
    assert c.describe_collection(target)["fields"][-1]["params"]["dim"] == 24
    assert c.describe_index(target, "vec")["index_type"] == "IVF_FLAT"
    got = {e["pk"]: e for e in c.query("typed_out", filter="", output_fields=["*"], limit=100)}
    was = {e["pk"]: e for e in c.query("typed", filter="", output_fields=["*"], limit=100)}
    assert sorted(got) == sorted(keys)
    T = model.transform(X)
    for k, x in zip(keys, T):
        np.testing.assert_allclose(got[k].pop("vec"), x, atol=1e-5)
        was[k].pop("vec")
        assert got[k] == was[k]
    for cat in ("c0", "c1", "c2"):  # found by its partition key
        assert sorted(e["pk"] for e in c.query("typed_out", filter=f'cat == "{cat}"',
                                               output_fields=["pk"], limit=100)) == sorted(
            k for k, r in zip(keys, rows) if r["cat"] == cat)


def test_engine_exceptions_are_one_line_store_errors(tmp_path, capsys, data, monkeypatch):
    """An engine's exception while writing (injected into the real client's insert): one
    StoreError line naming the output, nothing printed by the engine's loggers, the shadow
    dropped; an engine message quoting the password is masked."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    from skalign._stores.milvus import names

    X, model = data
    b = Milvus()
    src = b.make(tmp_path, X)

    def fail(self, *a, **k):
        raise MilvusException(code=1, message="the disk said\nno")

    monkeypatch.setattr(MilvusClient, "insert", fail)
    with pytest.raises(StoreError) as info:
        translate(model, src, b.output(tmp_path))
    assert type(info.value).__module__ == "skalign.exceptions"
    assert "the disk said no" in str(info.value) and "\n" not in str(info.value)
    assert str(parse_address(b.output(tmp_path))) in str(info.value)
    monkeypatch.undo()
    assert [x for x in b.inventory(tmp_path) if "skalign" in x] == []
    assert capsys.readouterr().err == ""
    address = parse_address("milvus://alice:s3cretpw@h.example:1/docs")
    with pytest.raises(StoreError) as info, names._EDGE.errors(address):
        raise MilvusException(code=2, message="connect alice:s3cretpw@h.example:1 failed")
    assert "s3cretpw" not in str(info.value) and "alice:***@" in str(info.value)
    assert info.value.__suppress_context__
    status, err = _cli(capsys, "restore", "milvus://alice:s3cretpw@127.0.0.1:9/out")
    assert status == 2 and len(err) == 1 and "s3cretpw" not in err[0], err
