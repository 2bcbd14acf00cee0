import atexit
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

# The suite's matrices are small: extra threads only add synchronisation, and on a busy 2-core
# machine two threads per process oversubscribe the cores (fits measured 6x slower).
torch.set_num_threads(1)


def pytest_sessionstart(session):
    """At exit, name what the run left in the system's temporary folder (pytest's own folders
    aside): a test, doctest or example that forgets to remove its files fills a CI machine's disk
    run after run. Registered first, this runs after the exit handlers that libraries register
    to remove their folders (scikit-learn's memmaps). Another process writing there meanwhile is
    named too, so this reports and does not fail."""
    folder = tempfile.gettempdir()
    before = set(os.listdir(folder))

    def report():
        left = sorted(name for name in set(os.listdir(folder)) - before
                      # multiprocessing removes its folder after this handler has run
                      if not name.startswith(("pytest-of-", "pymp-")))
        if left:
            print(f"left in {folder} since the test run began (by the run, or by another "
                  f"process): {', '.join(left)}", file=sys.stderr)

    atexit.register(report)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

#: Modules marked ``kernel_independent``: what they assert is the storage engines' behaviour
#: (transactions, kill points, publish windows, resume, hostile names, refusals, concurrent
#: readers and writers) or the source tree itself (imports, references, docstrings, the public
#: API). Every vector they compare is checked against a result computed in the same run, under
#: the same BLAS kernel, to 1e-5, never against a stored figure or a quality margin: rerunning
#: them under another OpenBLAS kernel tests nothing new, so ci/blas_kernels.py leaves them out
#: (about 60 % of the suite's time).
KERNEL_INDEPENDENT = {
    "test_chroma_qdrant_safety.py", "test_connectors.py", "test_docstrings.py",
    "test_duckdb_store.py", "test_encode_cache_sharing.py", "test_file_safety.py",
    "test_id_arrays.py", "test_imports.py", "test_into.py", "test_into_qdrant.py",
    "test_live_stores.py", "test_migrate_hostile.py", "test_milvus_store.py",
    "test_pg_hostile.py", "test_pg_writeback.py", "test_public_api.py",
    "test_publish_window.py", "test_references.py", "test_resume.py", "test_sample_ids.py",
}


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.cuda`` tests are skipped, with the reason, where torch sees no CUDA
    device; the tests of :data:`KERNEL_INDEPENDENT` modules are marked
    ``kernel_independent``."""
    mark = pytest.mark.kernel_independent
    for item in items:
        if item.path.name in KERNEL_INDEPENDENT:
            item.add_marker(mark)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=DEVICES)
def device(request):
    """Runs a test on the CPU and, where one is visible, on a CUDA device."""
    return request.param


@pytest.fixture(scope="module")
def pg_base(tmp_path_factory):
    """The libpq URI of a PostgreSQL with pgvector started for the module (skipped where
    pgserver, psycopg or pgvector is not installed)."""
    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    from store_backends import serve_postgres

    server = serve_postgres(tmp_path_factory)
    try:
        yield next(server)
    finally:
        server.close()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def docstring_pair():
    """The vendored real embeddings, MiniLM (source) and MPNet (target), and one seeded row order.

    Tests slice ``perm`` into held-out, pair and pool rows; all of them draw from this one order.
    """
    from skalign.datasets import load_docstring_embeddings

    E = load_docstring_embeddings().embeddings
    A, B = E["minilm_l6"], E["mpnet_base"]
    return A, B, np.random.default_rng(0).permutation(len(A))


@pytest.fixture(scope="module")
def seedless_split(docstring_pair):
    """MiniLM -> MPNet: a 1,000-text pool (target side shuffled) and 350 held-out texts.

    Returns ``pool, shuffle, X_test, Y_test, ceiling``: the unpaired pool, the permutation of
    its target side (target row ``j`` is source row ``shuffle[j]``), the held-out pairs and the
    held-out top-1 of Procrustes on the pool's 1,000 true pairs.
    """
    from skalign import ProcrustesAligner, UnpairedPool
    from skalign.metrics import top_k_accuracy

    A, B, order = docstring_pair
    pool_rows, test_rows = order[:1000], order[1000:]
    shuffle = np.random.default_rng(1).permutation(1000)
    pool = UnpairedPool(X=A[pool_rows], y=B[pool_rows][shuffle])
    ceiling = top_k_accuracy(B[test_rows],
                             ProcrustesAligner().fit(A[pool_rows], B[pool_rows])
                             .transform(A[test_rows]))
    return pool, shuffle, A[test_rows], B[test_rows], ceiling


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def load_benchmark(monkeypatch, tmp_path_factory):
    """Import ``benchmarks/<name>.py`` as a module, with its folder on ``sys.path`` as when run.

    The scripts' temporary folders (and dask's scratch space) go into a folder of pytest's,
    removed with the run's others, rather than the system's."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempdir")))

    def load(name):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
