"""Thread use chosen by the work (issue 57): small steps on one thread, the setting restored."""

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from skalign import InverseRelativeProjector, OrthogonalEnsembleAligner, stack_views
from skalign.utils._backend import ONE_THREAD_WORK, one_thread, work_threads


def _blas_threads():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_work_threads_one_thread_below_the_limit_and_restored(two_threads):
    blas = _blas_threads()
    with work_threads(ONE_THREAD_WORK):
        assert torch.get_num_threads() == 1
        assert all(n == 1 for n in _blas_threads())
        with one_thread():  # nested: the outer scope's setting survives the inner one
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1 and all(n == 1 for n in _blas_threads())
    assert torch.get_num_threads() == 2 and _blas_threads() == blas
    with work_threads(ONE_THREAD_WORK + 1):
        assert torch.get_num_threads() == 2
    with work_threads(1, device="cuda"):  # other devices keep the setting
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), work_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2 and _blas_threads() == blas


def _record_threads(monkeypatch, module, name):
    seen = []
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return seen


def test_irp_fit_on_one_thread_at_1000_anchors(two_threads, monkeypatch, docstring_pair):
    """IRP at 1,000 anchors (the GCV ``eigh``, the Cholesky factorisations, the farthest-point
    sampling) runs on one thread, and the caller's setting is back afterwards."""
    A, B, order = docstring_pair
    rows = order[:1000]
    eigh = _record_threads(monkeypatch, torch.linalg, "eigh")
    chol = _record_threads(monkeypatch, torch.linalg, "cholesky_ex")
    irp = InverseRelativeProjector(random_state=0).fit(A[rows], B[rows])
    assert eigh and chol and set(eigh) == set(chol) == {1}
    assert torch.get_num_threads() == 2
    again = InverseRelativeProjector(random_state=0).fit(A[rows], B[rows])
    np.testing.assert_array_equal(again.components_, irp.components_)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_ensemble_fit_on_one_thread_for_small_views(two_threads, monkeypatch, docstring_pair):
    A, _, order = docstring_pair
    V = stack_views([A[order[:300]], A[order[300:600]]])
    seen = _record_threads(monkeypatch, torch, "einsum")
    OrthogonalEnsembleAligner(n_views=2, max_iter=3).fit(V)
    assert seen and set(seen) == {1} and torch.get_num_threads() == 2


def test_bench_busy_runs(load_benchmark, capsys):
    """One quick fit alone and beside one hog, no bootstrapper rows: a row with both times, and
    the hog is gone afterwards."""
    bench = load_benchmark("bench_busy")
    fit_rows, guard_rows = bench.main(["--only", "ASIFAligner", "--repeats", "1", "--seeds",
                                       "--hogs", "1", "--pairs", "200"])
    assert [r[0] for r in fit_rows] == ["ASIFAligner"] and guard_rows == []
    assert fit_rows[0][1] > 0 and fit_rows[0][2] > 0
    assert "busy/idle" in capsys.readouterr().out
