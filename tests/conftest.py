import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

# The suite's matrices are small: extra threads only add synchronisation, and on a busy 2-core
# machine two threads per process oversubscribe the cores (fits measured 6x slower).
torch.set_num_threads(1)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.cuda`` tests are skipped, with the reason, where torch sees no CUDA device."""
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


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def load_benchmark(monkeypatch):
    """Import ``benchmarks/<name>.py`` as a module, with its folder on ``sys.path`` as when run."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
