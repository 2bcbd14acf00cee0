import numpy as np
import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Runs a test on the CPU and, where one is visible, on a CUDA device."""
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(0)
