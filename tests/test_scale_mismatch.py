"""``normalize`` of the affine aligners: raw against unit-norm encoders are never silently worse.

Real data: the vendored MiniLM-L6 (raw, row norms 2-8) and MPNet embeddings of the same texts;
MPNet with its rows L2-normalised is what all-mpnet-base-v2 returns with its Normalize module, so
MiniLM → unit MPNet is the "raw encoder → normalising encoder" migration of issue 20.
"""

import warnings

import numpy as np
import pytest

from skalign import LinearAligner, ProcrustesAligner
from skalign._affine.norms import choose_normalization
from skalign.exceptions import ScaleMismatchWarning

ESTIMATORS = [ProcrustesAligner, LinearAligner]


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def top1(reembedded, translated):
    S = unit(translated) @ unit(reembedded).T
    return float(np.mean(S.argmax(1) == np.arange(len(S))))


def retention(store_a, store_b, queries, metric, k=10):
    """Mean overlap of each query's ``k`` nearest rows in two stores (cosine or Euclidean)."""
    def knn(D):
        if metric == "cos":
            S = unit(queries) @ unit(D).T
        else:
            S = 2 * queries @ D.T - (D * D).sum(1)[None]
        return np.argsort(-S, axis=1)[:, :k]

    a, b = knn(store_a), knn(store_b)
    return float(np.mean([len(np.intersect1d(x, y)) / k for x, y in zip(a, b)]))


def quality(est, X, Y, test, pairs, *, norm_source=False):
    f = unit if norm_source else (lambda A: A)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScaleMismatchWarning)
        est.fit(f(X[pairs]), Y[pairs])
    P, T = est.transform(f(X[test])), Y[test]
    return {"top1": top1(T, P), "cos": retention(P, T, T, "cos"), "l2": retention(P, T, T, "l2")}


@pytest.fixture(scope="module")
def split(docstring_pair):
    A, B, perm = docstring_pair
    return A, B, perm[:350], perm[350:1350]


# ----------------------------------------------------------------------------- the decision
@pytest.fixture
def spaces():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((400, 16))
    raw = Z * rng.uniform(2, 8, (400, 1))  # norms 2-8 times a chi-like factor, CV > 0.2
    Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
    return Z, raw, Q, rng


def test_auto_normalises_the_side_whose_norms_mean_nothing(spaces):
    Z, raw, Q, rng = spaces
    assert choose_normalization(raw, unit(Z @ Q))[0] == "source"
    assert choose_normalization(unit(Z), raw @ Q)[0] == "target"
    sides, reason = choose_normalization(raw, unit(Z @ Q))
    assert "source norms vary" in reason and "CV" in reason
    # varying norms on both sides may mean something (and an exact affine relation with a shift
    # must survive): kept
    assert choose_normalization(raw, Z @ Q * rng.uniform(2, 8, (400, 1)))[0] == "none"
    assert choose_normalization(raw, 3 * raw @ Q + 7)[0] == "none"
    # constant norms on both sides: kept when of similar size, else the non-unit side is rescaled
    assert choose_normalization(unit(Z), 1.5 * unit(Z) @ Q)[0] == "none"
    assert choose_normalization(unit(Z), 10 * unit(Z) @ Q)[0] == "target"


def test_fitted_decision_is_recorded(spaces):
    Z, raw, Q, _ = spaces
    for make in ESTIMATORS:
        est = make().fit(raw, unit(Z @ Q))
        assert est.normalize_ == "source"
        assert "source norms vary" in est.normalize_reason_
        assert est.source_norm_ == pytest.approx(np.linalg.norm(raw, axis=1).mean())
        assert est.target_norm_ == pytest.approx(1.0)
        assert make(normalize=False).fit(Z, Z @ Q).normalize_ == "none"
        assert make(normalize=True).fit(Z, Z @ Q).normalize_ == "both"


# ------------------------------------------------------------------------------- the warning
@pytest.mark.parametrize("make", ESTIMATORS)
def test_explicit_choice_that_keeps_the_mismatch_warns(make, spaces):
    Z, raw, Q, _ = spaces
    Y = unit(Z @ Q)
    for normalize in (False, "target"):
        with pytest.warns(ScaleMismatchWarning, match="raw norms of the source"):
            est = make(normalize=normalize).fit(raw, Y)
        assert "kept although" in est.normalize_reason_
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScaleMismatchWarning)
        for normalize in ("auto", "source", "both", True):
            make(normalize=normalize).fit(raw, Y)
        make(normalize=False).fit(Z, Z @ Q)  # matching spaces: nothing to warn about


# --------------------------------------------------- normalize=False is the map as it was
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normalize_false_is_the_plain_affine_map(spaces, dtype):
    Z, raw, Q, _ = spaces
    X, Y = raw.astype(dtype), unit(Z @ Q).astype(dtype)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    mx, my = X64.mean(0), Y64.mean(0)
    U, _, Vt = np.linalg.svd((X64 - mx).T @ (Y64 - my))
    with pytest.warns(ScaleMismatchWarning):
        est = ProcrustesAligner(normalize=False).fit(X, Y)
    np.testing.assert_allclose(est.components_, U @ Vt, atol=1e-8)
    expected = (X64 - mx) @ (U @ Vt) + my
    out = est.transform(X)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    with pytest.warns(ScaleMismatchWarning):
        lin = LinearAligner(alpha=1.0, normalize=False).fit(X, Y)
    Xc = X64 - mx
    W = np.linalg.solve(Xc.T @ Xc + np.eye(16), Xc.T @ (Y64 - my))
    np.testing.assert_allclose(lin.transform(X), Xc @ W + my, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------ transform and inverse_transform
@pytest.mark.parametrize("make", ESTIMATORS)
def test_transform_normalises_new_rows_row_by_row(make, spaces):
    Z, raw, Q, _ = spaces
    est = make().fit(raw[:300], unit(Z[:300] @ Q))
    assert est.normalize_ == "source"
    # a row's translation does not depend on its norm (the source side is normalised) ...
    np.testing.assert_allclose(est.transform(raw[300:] * 7.5), est.transform(raw[300:]),
                               rtol=1e-5, atol=1e-6)
    # ... nor on the other rows of the batch
    full = est.transform(raw[300:])
    np.testing.assert_allclose(est.set_params(batch_size=3).transform(raw[300:350]), full[:50],
                               rtol=1e-5, atol=1e-6)


def test_target_side_is_rescaled_to_its_mean_norm(spaces):
    Z, raw, Q, _ = spaces
    est = ProcrustesAligner().fit(unit(Z), raw @ Q)
    assert est.normalize_ == "target"
    norms = np.linalg.norm(est.transform(unit(Z)), axis=1)
    # the translations live at the target's scale, not on the unit sphere
    assert abs(norms.mean() / est.target_norm_ - 1) < 0.25


def test_inverse_transform_recovers_directions_at_the_mean_source_norm(spaces):
    Z, raw, Q, _ = spaces
    est = ProcrustesAligner().fit(raw, unit(Z @ Q))  # square orthogonal map, source normalised
    back = est.inverse_transform(est.transform(raw[:50]))
    cos = np.sum(unit(back) * unit(raw[:50]), axis=1)
    assert cos.min() > 1 - 1e-5
    np.testing.assert_allclose(np.linalg.norm(back, axis=1), est.source_norm_, rtol=1e-5)


# ----------------------------------------------------------------------- the real-data target
@pytest.mark.parametrize("make", ESTIMATORS)
def test_raw_minilm_to_unit_mpnet_defaults_match_normalised_sources(make, split):
    """Defaults reach ≥ 0.95x top-1 and neighbourhood retention of the fit on L2-normalised
    sources; the old behaviour (normalize=False) is > 10 % worse on the Euclidean
    retention, so a default that did nothing would fail."""
    A, B, test, pairs = split
    Bu = unit(B)
    auto = quality(make(), A, Bu, test, pairs)
    normalised = quality(make(normalize=False), A, Bu, test, pairs, norm_source=True)
    old = quality(make(normalize=False), A, Bu, test, pairs)
    for key in ("top1", "cos", "l2"):
        assert auto[key] >= 0.95 * normalised[key], (key, auto, normalised)
    assert old["l2"] < 0.9 * normalised["l2"], (old, normalised)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_raw_minilm_to_raw_mpnet_is_unchanged(make, split):
    """Both raw: auto keeps the norms, so the translations are exactly those of the plain map,
    with no warning."""
    A, B, test, pairs = split
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScaleMismatchWarning)
        auto = make().fit(A[pairs], B[pairs])
        old = make(normalize=False).fit(A[pairs], B[pairs])
    assert auto.normalize_ == "none"
    np.testing.assert_array_equal(auto.transform(A[test]), old.transform(A[test]))
