"""skalign.datasets: ground truth of the synthetic generator, real digits embeddings."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from skalign.datasets import DIGITS_ENCODERS, load_digits_embeddings, make_paired_spaces


@pytest.mark.parametrize("relation", ["orthogonal", "linear", "nonlinear"])
def test_make_paired_spaces_ground_truth(relation):
    X, Y, gt = make_paired_spaces(300, 6, n_features_target=9, relation=relation, scale=2.0,
                                  shift=1.5, random_state=0, return_ground_truth=True)
    assert X.shape == (300, 6) and Y.shape == (300, 9)
    linear_part = 2.0 * X @ gt.map + 1.5
    if relation == "nonlinear":
        np.testing.assert_allclose(Y, linear_part + np.tanh(X @ gt.B), atol=1e-12)
    else:
        np.testing.assert_allclose(Y, linear_part, atol=1e-12)
    if relation == "orthogonal":
        np.testing.assert_allclose(gt.map @ gt.map.T, np.eye(6), atol=1e-12)


def test_make_paired_spaces_noise_spectrum_and_seed():
    X, Y = make_paired_spaces(5000, 8, noise=0.1, spectrum_decay=1.0, random_state=0)
    _, Y_clean = make_paired_spaces(5000, 8, spectrum_decay=1.0, random_state=0)
    rel = np.sqrt(np.mean((Y - Y_clean) ** 2) / np.mean(Y_clean**2))
    assert rel == pytest.approx(0.1, rel=0.05)
    np.testing.assert_allclose(X.var(0), 1.0 / np.arange(1, 9), rtol=0.1)
    np.testing.assert_array_equal(make_paired_spaces(10, 3, random_state=5)[1],
                                  make_paired_spaces(10, 3, random_state=5)[1])
    with pytest.raises(ValueError, match="relation must be one of"):
        make_paired_spaces(10, 3, relation="affine")


def test_digits_embeddings_are_deterministic_cached_and_informative(tmp_path):
    first = load_digits_embeddings(["mlp-a"], data_home=tmp_path)
    assert list(tmp_path.glob("digits_embeddings_*.joblib"))
    again = load_digits_embeddings(["mlp-a"], data_home=tmp_path, use_cache=False)  # retrained
    np.testing.assert_array_equal(first.embeddings["mlp-a"], again.embeddings["mlp-a"])
    E, y = first.embeddings["mlp-a"], first.target
    assert E.shape == (1797, DIGITS_ENCODERS["mlp-a"]["dim"]) and E.dtype == np.float32
    assert len(np.intersect1d(first.train_index, first.test_index)) == 0
    probe = LogisticRegression(max_iter=3000).fit(E[first.train_index], y[first.train_index])
    assert probe.score(E[first.test_index], y[first.test_index]) > 0.9


def test_digits_encoders_differ():
    data = load_digits_embeddings()
    assert data.encoders == list(DIGITS_ENCODERS)
    a, b = data.embeddings["mlp-a"], data.embeddings["mlp-b"]
    assert a.shape == b.shape and np.abs(a - b).mean() > 0.1
    assert data.embeddings["mlp-wide"].shape[1] == 48
    with pytest.raises(ValueError, match="Unknown encoder"):
        load_digits_embeddings(["resnet"])


def test_docstring_embeddings_vendored_subset():
    from skalign.datasets import REAL_ENCODERS, load_docstring_embeddings

    data = load_docstring_embeddings()
    assert set(data.embeddings) == set(REAL_ENCODERS)
    for key, (_, dim) in REAL_ENCODERS.items():
        E = data.embeddings[key]
        assert E.shape == (1350, dim) and E.dtype == np.float32 and np.isfinite(E).all()
    assert len(data.texts) == 1350 and data.target.shape == (1350,)
    # Real raw mean-pooled encoders: far from the origin and anisotropic (the geometry that broke
    # defaults tuned on digits), and the two spaces agree on which texts are near each other.
    A, B = data.embeddings["minilm_l6"], data.embeddings["mpnet_base"]
    for E in (A, B):
        assert np.linalg.norm(E.mean(0)) > 0.2 * np.linalg.norm(E, axis=1).mean()
        var = np.linalg.svd(E - E.mean(0), compute_uv=False) ** 2
        assert var[:10].sum() / var.sum() > 0.2      # isotropic: 10 / dim < 0.03
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    ka, kb = Ac @ Ac.T, Bc @ Bc.T
    assert np.corrcoef(ka.ravel(), kb.ravel())[0, 1] > 0.5


def test_docstring_embeddings_from_path(tmp_path):
    from skalign.datasets import load_docstring_embeddings

    np.savez(tmp_path / "dev.npz", a=np.ones((4, 3), np.float16))
    data = load_docstring_embeddings(tmp_path / "dev.npz")
    assert data.embeddings["a"].dtype == np.float32 and data.texts is None
    with pytest.raises(ValueError, match="no such file"):
        load_docstring_embeddings(tmp_path / "missing.npz")
