"""RelativeProjector: the relative encode and decode of one space, on their own."""

import pickle

import numpy as np
import pytest

from skalign import RelativeProjector
from skalign.datasets import make_paired_spaces


def centred_cosines(A, B, mu):
    A, B = A - mu, B - mu
    return np.sum(A * B, -1) / np.linalg.norm(A, axis=-1) / np.linalg.norm(B, axis=-1)


def test_transform_is_cosine_to_centred_anchors():
    rng = np.random.default_rng(0)
    anchors, X = rng.standard_normal((40, 6)) * 3 + 5, rng.standard_normal((30, 6)) * 3 + 5
    proj = RelativeProjector().fit(anchors)
    mu = anchors.mean(0)
    ref = centred_cosines(X[:, None, :], anchors[None, :, :], mu)
    np.testing.assert_allclose(proj.transform(X), ref, atol=1e-5)
    assert proj.transform(X).shape == (30, 40) and proj.n_features_out_ == 40
    assert proj.scale_ == pytest.approx(np.linalg.norm(anchors - mu, axis=1).mean())
    assert list(proj.get_feature_names_out()) == [f"relativeprojector{i}" for i in range(40)]


def test_relative_space_is_invariant_to_angle_preserving_maps():
    X, Y = make_paired_spaces(500, 16, relation="orthogonal", scale=4.0, shift=-3.0, random_state=0)
    rx = RelativeProjector().fit(X[:100]).transform(X[100:])
    ry = RelativeProjector().fit(Y[:100]).transform(Y[100:])
    np.testing.assert_allclose(rx, ry, atol=1e-4)
    # Negative control: a general linear map does not preserve angles.
    _, Z = make_paired_spaces(500, 16, relation="linear", random_state=0)
    rz = RelativeProjector().fit(Z[:100]).transform(Z[100:])
    assert np.abs(rx - rz).max() > 0.3


def test_decode_inverts_encode_when_anchors_span_the_space():
    rng = np.random.default_rng(1)
    anchors, X = rng.standard_normal((50, 8)) + 2, rng.standard_normal((200, 8)) + 2
    proj = RelativeProjector().fit(anchors)
    back = proj.inverse_transform(proj.transform(X))
    assert centred_cosines(back, X, anchors.mean(0)).min() > 0.9999
    assert proj.score(X) > 0.9999
    radii = np.linalg.norm(back - anchors.mean(0), axis=1)
    np.testing.assert_allclose(radii, proj.scale_, rtol=1e-4)  # rescale="normalize"
    # Fewer anchors than dimensions: the decode only reaches the anchors' span.
    few = RelativeProjector().fit(anchors[:4])
    assert few.score(X) < 0.9 and few.ranks_.tolist() == [3]


def test_decode_in_another_space_translates():
    X, Y = make_paired_spaces(1000, 12, n_features_target=20, scale=2.0, shift=1.0, random_state=3)
    rel = RelativeProjector().fit(X[:200]).transform(X[200:])
    out = RelativeProjector().fit(Y[:200]).inverse_transform(rel)
    assert out.shape == (800, 20)
    assert centred_cosines(out, Y[200:], Y[:200].mean(0)).min() > 0.999


def test_anchor_subsets_average_the_subset_decoders():
    rng = np.random.default_rng(2)
    anchors, X = rng.standard_normal((30, 5)), rng.standard_normal((10, 5))
    subsets = [np.array([3, 1, 4, 15, 9]), np.array([2, 6, 5, 3, 29, 8, 0])]
    proj = RelativeProjector(anchor_subsets=subsets).fit(anchors)
    assert proj.anchor_index_.tolist() == subsets[0].tolist() + subsets[1].tolist()
    full = RelativeProjector().fit(anchors)
    R = full.transform(X)
    np.testing.assert_allclose(proj.transform(X), np.hstack([R[:, s] for s in subsets]), atol=1e-6)
    C = anchors - anchors.mean(0)
    A = C / np.linalg.norm(C, axis=1, keepdims=True)
    raw = sum(R[:, s] @ np.linalg.pinv(A[s].T) for s in subsets) / 2
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True) * full.scale_ + anchors.mean(0)
    np.testing.assert_allclose(proj.inverse_transform(proj.transform(X)), expected, atol=1e-5)
    # Statistics always come from every anchor given to fit.
    np.testing.assert_allclose(proj.source_mean_, anchors.mean(0))
    assert len(proj.condition_numbers_) == 2


def test_rescale_scale_keeps_the_raw_decode():
    rng = np.random.default_rng(4)
    anchors = rng.standard_normal((5, 8))  # 5 anchors in 8-d: decodes are shorter than unit
    X = rng.standard_normal((20, 8))
    proj = RelativeProjector(rescale="scale").fit(anchors)
    radii = np.linalg.norm(proj.inverse_transform(proj.transform(X)) - anchors.mean(0), axis=1)
    assert radii.max() < proj.scale_ * 0.999


def test_errors_and_degenerate_rows():
    with pytest.raises(ValueError, match="identical"):
        RelativeProjector().fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="distinct row indices"):
        RelativeProjector(anchor_subsets=[np.array([0, 9])]).fit(np.random.rand(5, 3))
    with pytest.raises(ValueError, match="non-empty 1-D array of integers"):
        RelativeProjector(anchor_subsets=[np.array([0.5])]).fit(np.random.rand(5, 3))
    anchors = np.random.default_rng(0).standard_normal((10, 3))
    proj = RelativeProjector().fit(anchors)
    # A row on the anchor mean has no direction: zero relative coordinates, not NaN.
    assert np.array_equal(proj.transform(anchors.mean(0, keepdims=True)), np.zeros((1, 10)))
    with pytest.raises(ValueError, match="10 features"):
        proj.inverse_transform(np.zeros((2, 9)))


def test_pickle_roundtrip():
    anchors = np.random.default_rng(0).standard_normal((20, 4))
    proj = RelativeProjector().fit(anchors)
    loaded = pickle.loads(pickle.dumps(proj))
    for name in ("source_mean_", "anchors_", "decoder_"):
        assert isinstance(getattr(loaded, name), np.ndarray)
    np.testing.assert_array_equal(loaded.transform(anchors), proj.transform(anchors))


def _rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("rescale", ["normalize", "scale"])
def test_float64_input_is_computed_in_float64(rescale):
    rng = np.random.default_rng(0)
    anchors, X = rng.standard_normal((40, 6)) * 3 + 5, rng.standard_normal((30, 6)) * 3 + 5
    proj = RelativeProjector(rescale=rescale).fit(anchors)
    C = X - proj.source_mean_
    rel = (C / np.linalg.norm(C, axis=1, keepdims=True)) @ proj.anchors_.T
    dec = rel @ proj.decoder_
    if rescale == "normalize":
        dec = dec / np.linalg.norm(dec, axis=1, keepdims=True)
    dec = dec * proj.scale_ + proj.source_mean_
    out, back = proj.transform(X), proj.inverse_transform(rel)
    assert out.dtype == back.dtype == np.float64
    assert _rel_err(out, rel) < 1e-10 and _rel_err(back, dec) < 1e-10
    # float32 input is computed in float32: it cannot meet the float64 bound.
    assert _rel_err(proj.transform(X.astype(np.float32)), rel) > 1e-10
    assert _rel_err(proj.inverse_transform(rel.astype(np.float32)), dec) > 1e-10
