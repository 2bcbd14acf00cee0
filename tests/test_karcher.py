"""The batched Karcher mean: closed forms, geomstats as the reference, warnings, benchmark smoke."""

import os
import sys
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from skalign.manifold import hemisphere_certified, karcher_mean


def _cloud(n, m, d, spread_deg, rng):
    """``n`` samples of ``m`` unit points at angles up to ``spread_deg`` from a random centre."""
    c = rng.standard_normal((n, d))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    T = rng.standard_normal((n, m, d))
    T -= np.einsum("nmd,nd->nm", T, c)[..., None] * c[:, None]
    T /= np.linalg.norm(T, axis=-1, keepdims=True)
    ang = np.deg2rad(spread_deg) * rng.uniform(0, 1, (n, m, 1))
    return np.cos(ang) * c[:, None] + np.sin(ang) * T


def _angle_deg(A, B):
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    chord, co = np.linalg.norm(A - B, axis=-1), np.linalg.norm(A + B, axis=-1)
    return np.degrees(2 * np.arctan2(chord, co))


@pytest.fixture(scope="module")
def frechet_mean():
    """geomstats' FrechetMean on the hypersphere, imported with the numpy backend only here."""
    if "geomstats" not in sys.modules:
        os.environ.setdefault("GEOMSTATS_BACKEND", "numpy")
    dtype = torch.get_default_dtype()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # geomstats emits an ImportWarning at import
        pytest.importorskip("geomstats")
        import geomstats.backend as gs
        from geomstats.geometry.hypersphere import Hypersphere
        from geomstats.learning.frechet_mean import FrechetMean
    torch.set_default_dtype(dtype)  # a pytorch backend would have changed it for the process
    if gs.__name__ != "geomstats.numpy":
        pytest.skip("geomstats was already imported with a non-numpy backend")

    def fit(X):
        n, m, d = X.shape
        est = FrechetMean(Hypersphere(dim=d - 1), method="batch")
        est.set(max_iter=2000, epsilon=1e-26)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(np.ascontiguousarray(np.transpose(X, (1, 0, 2))))
        return np.asarray(est.estimate_)

    return fit


@pytest.mark.parametrize("spread", [5, 30, 60])
def test_agrees_with_geomstats(frechet_mean, spread):
    rng = np.random.default_rng(spread)
    X = _cloud(300, 5, 16, spread, rng)
    ref = frechet_mean(X)
    mu64 = karcher_mean(torch.from_numpy(X)).numpy()
    mu32 = karcher_mean(torch.from_numpy(X.astype(np.float32))).numpy()
    assert mu32.dtype == np.float32
    assert _angle_deg(mu64, ref).max() < 1e-4
    assert _angle_deg(mu32, ref).max() < 1e-4
    # Negative control: the normalised arithmetic mean is a different point at these spreads.
    ext = X.sum(1) / np.linalg.norm(X.sum(1), axis=1, keepdims=True)
    if spread >= 30:
        assert _angle_deg(ext, ref).max() > 1e-2


def test_closed_forms():
    # Two points: the geodesic midpoint. Orthonormal points: the normalised diagonal.
    X = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]],
                     dtype=torch.float64)
    expected = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]], dtype=torch.float64) / 2**0.5
    torch.testing.assert_close(karcher_mean(X), expected, atol=1e-12, rtol=0)
    E = torch.eye(4, dtype=torch.float64).unsqueeze(0)
    torch.testing.assert_close(karcher_mean(E), torch.full((1, 4), 0.5, dtype=torch.float64))
    # Unnormalised input is normalised first; a single point is returned unchanged.
    torch.testing.assert_close(karcher_mean(3 * X), expected, atol=1e-12, rtol=0)
    one = torch.tensor([[[0.6, 0.8]]])
    torch.testing.assert_close(karcher_mean(one), one[:, 0])


def test_zero_points_are_missing():
    rng = np.random.default_rng(4)
    X = torch.from_numpy(_cloud(20, 4, 6, 40, rng))
    Xm = X.clone()
    Xm[:, 1] = 0
    Xm[5] = 0
    mu = karcher_mean(Xm)
    torch.testing.assert_close(mu[:5], karcher_mean(X[:5, [0, 2, 3]]))
    torch.testing.assert_close(mu[5], torch.zeros(6, dtype=X.dtype))
    Xm[6, 2:] = 0  # a single present point is its own mean
    torch.testing.assert_close(karcher_mean(Xm)[6], X[6, 0])


def test_intrinsic_not_extrinsic():
    # Three points in a great circle at 0°, 0° and 120°: the Karcher mean lies at 40° exactly,
    # the normalised mean at atan2(sin 120°, 2 + cos 120°) ≈ 30°.
    ang = np.deg2rad([0.0, 0.0, 120.0])
    X = torch.from_numpy(np.stack([np.cos(ang), np.sin(ang), 0 * ang], axis=1)[None])
    mu = karcher_mean(X, tol=1e-12).numpy()[0]
    assert abs(np.degrees(np.arctan2(mu[1], mu[0])) - 40.0) < 1e-6


def test_rows_are_independent():
    rng = np.random.default_rng(1)
    X = torch.from_numpy(_cloud(500, 4, 8, 50, rng).astype(np.float32))
    full = karcher_mean(X)
    torch.testing.assert_close(karcher_mean(X[:37]), full[:37], atol=1e-7, rtol=0)
    torch.testing.assert_close(karcher_mean(X.flip(0)), full.flip(0), atol=1e-7, rtol=0)


def test_hemisphere_warning():
    antipodal = torch.tensor([[[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]],
                              [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert hemisphere_certified(antipodal).tolist() == [False, True]
    with pytest.warns(UserWarning, match="1 of 2 samples could not be certified"):
        karcher_mean(antipodal)
    # Nine points at one pole and one 170° away: their sum points away from the lone point,
    # but the set lies in an open hemisphere (certified through the least-squares pole).
    a = np.deg2rad(170.0)
    pts = np.array([[1.0, 0.0]] * 9 + [[np.cos(a), np.sin(a)]])[None]
    X = torch.from_numpy(pts)
    assert bool(hemisphere_certified(X).all())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        karcher_mean(X)


def test_convergence_warning_and_n_iter():
    rng = np.random.default_rng(2)
    X = torch.from_numpy(_cloud(50, 5, 8, 60, rng))
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        karcher_mean(X, max_iter=1)
    _, n_iter = karcher_mean(X, return_n_iter=True)
    assert 2 <= n_iter < 100


def test_bad_shape():
    with pytest.raises(ValueError, match=r"shape \(n, m, d\)"):
        karcher_mean(torch.zeros(3, 4))


def test_benchmark_quick_runs(capsys, load_benchmark):
    module = load_benchmark("bench_karcher")
    rows = module.main(["-n", "300", "-d", "16", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "speed-up" in out
    assert all(r["time_s"] > 0 for r in rows)
    assert rows[0]["max_err_deg"] < 1e-4
