"""skalign.parallel: a 2-worker dask LocalCluster gives the local path's results."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from skalign import LinearAligner, ProcrustesAligner
from skalign.datasets import load_docstring_embeddings
from skalign.io import save, translate

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.dataframe")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # dask's scratch space in a folder of pytest's, not /tmp/dask-scratch-space
    scratch = str(tmp_path_factory.mktemp("dask"))
    with dask.config.set({"temporary-directory": scratch}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                     dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def real():
    data = load_docstring_embeddings()
    return data.embeddings["minilm_l6"][:600], data.embeddings["mpnet_base"][:600]


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
def test_translate_parquet_on_cluster_equals_local(tmp_path, cluster, real):
    from skalign.parallel import translate_parquet

    A, B = real
    model = ProcrustesAligner().fit(A[:300], B[:300])
    (tmp_path / "in").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(300, 600), 4)):
        pq.write_table(pa.table({"doc_id": [f"d{j}" for j in rows],
                                 "vector": pa.array(list(A[rows]), pa.list_(pa.float32(), 384)),
                                 "row": pa.array(rows, pa.int64())}),
                       tmp_path / "in" / f"part-{i}.parquet")
    path = save(model, tmp_path / "m.skops")
    n = translate_parquet(path, tmp_path / "in", tmp_path / "dask", scheduler=cluster,
                          batch_size=32)
    translate(model, tmp_path / "in", tmp_path / "local", batch_size=32)
    assert n == 300
    assert len(list((tmp_path / "dask").glob("*.parquet"))) == 4
    assert sorted(os.listdir(tmp_path)) == ["dask", "dask.skalign.json", "in", "local",
                                            "local.skalign.json", "m.skops"]
    on_cluster = pq.read_table(tmp_path / "dask").sort_by("row")
    local = pq.read_table(tmp_path / "local").sort_by("row")
    assert on_cluster.schema.remove_metadata() == local.schema.remove_metadata()
    assert on_cluster.select(["doc_id", "row"]).equals(local.select(["doc_id", "row"]))
    V = np.stack(on_cluster["vector"].to_numpy(zero_copy_only=False))
    # float32 rounding apart: the local translation caps BLAS at the cores the Parquet encoders
    # leave (one here), the workers do not, and OpenBLAS's Haswell kernel sums a product in
    # another order on one thread than on two (4.8e-7 on values near 0.2)
    np.testing.assert_allclose(V, np.stack(local["vector"].to_numpy(zero_copy_only=False)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(V, model.transform(A[300:600]), atol=1e-6)


def test_translate_parquet_errors_leave_nothing(tmp_path, cluster, real):
    from skalign.exceptions import StoreError
    from skalign.parallel import translate_parquet

    A, B = real
    model = ProcrustesAligner().fit(A[:50], B[:50])
    np.save(tmp_path / "x.npy", A[:10])
    with pytest.raises(StoreError, match="Parquet files or folders of shards only"):
        translate_parquet(model, tmp_path / "x.npy", tmp_path / "out", scheduler=cluster)
    pq.write_table(pa.table({"vector": [list(B[0])]}), tmp_path / "b.parquet")
    with pytest.raises(StoreError, match="768 dimensions but the model translates 384-d"):
        translate_parquet(model, tmp_path / "b.parquet", tmp_path / "out", scheduler=cluster)
    assert sorted(os.listdir(tmp_path)) == ["b.parquet", "x.npy"]


def test_grid_search_on_cluster_equals_local(cluster, real):
    from sklearn.model_selection import GridSearchCV

    from skalign.parallel import cluster_backend

    A, B = real
    grid = {"alpha": [0.0, 1.0, 10.0]}
    local = GridSearchCV(LinearAligner(), grid, cv=3).fit(A[:240], B[:240])
    with cluster_backend(cluster) as client:
        remote = GridSearchCV(LinearAligner(), grid, cv=3, n_jobs=-1).fit(A[:240], B[:240])
        assert len(client.scheduler_info()["workers"]) == 2
    np.testing.assert_allclose(remote.cv_results_["mean_test_score"],
                               local.cv_results_["mean_test_score"], rtol=1e-6)
    assert remote.best_params_ == local.best_params_


def test_local_path_needs_no_dask(tmp_path):
    """fit/translate/evaluate run with dask and distributed made unimportable.

    (When dask is installed, scikit-learn's bundled array_api_compat — imported by skops —
    loads ``dask.array`` on its own; it tolerates dask's absence, and so does skalign.)
    """
    code = (
        "import sys, numpy as np\n"
        "class NoDask:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dask', 'distributed'):\n"
        "            raise ImportError('dask is blocked: ' + name)\n"
        "sys.meta_path.insert(0, NoDask())\n"
        "from skalign.cli import main\n"
        "import skalign.parallel\n"
        "rng = np.random.default_rng(0)\n"
        f"d = {str(tmp_path)!r}\n"
        "np.save(d + '/a.npy', rng.normal(size=(40, 6)))\n"
        "np.save(d + '/b.npy', rng.normal(size=(40, 4)))\n"
        "assert main(['fit', 'linear', '--source', d + '/a.npy', '--target', d + '/b.npy',\n"
        "             '-o', d + '/m.skops']) == 0\n"
        "assert main(['translate', d + '/m.skops', d + '/a.npy', d + '/o.parquet',\n"
        "             '--quiet']) == 0\n"
        "assert main(['evaluate', d + '/m.skops', '--source', d + '/a.npy', '--target',\n"
        "             d + '/b.npy']) == 0\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
