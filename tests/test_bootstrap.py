"""AnchorBootstrapper: anchors recovered on pools with a known permutation, API, numerics."""

import pickle

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV

from skalign import InverseRelativeProjector, LinearAligner, UnpairedPool
from skalign import AnchorBootstrapper
from skalign.datasets import make_paired_spaces


def _pools(n=500, d=16, noise=0.1, extra=0, seed=0):
    """15 seed pairs, a source pool and a permuted target pool (plus ``extra`` distractors)."""
    X, Y = make_paired_spaces(n_samples=n + 15 + extra, n_features=d, noise=noise,
                              random_state=seed)
    perm = np.random.default_rng(seed).permutation(n + extra)
    pool = UnpairedPool(X=X[15:15 + n], y=Y[15:][perm])
    return X[:15], Y[:15], pool, perm


def _rate(boot, perm):
    src, tgt = boot.anchor_pairs_.T
    return float(np.mean(perm[tgt] == src))


@pytest.mark.parametrize("plan", ["dense", "chunked", "sparse"])
def test_recovers_a_known_permutation(plan):
    Xs, Ys, pool, perm = _pools()
    boot = AnchorBootstrapper(LinearAligner(), n_anchors=100, plan=plan, random_state=0)
    boot.fit(Xs, Ys, unpaired=pool)
    assert boot.anchor_pairs_.shape == (85, 2) and boot.anchor_pairs_.dtype == np.int64
    assert _rate(boot, perm) >= 0.95
    assert np.isfinite(boot.loss_curve_).all() and boot.n_iter_ == len(boot.loss_curve_) >= 1
    assert boot.plan_marginal_error_ < 1e-2


def test_wrong_seed_pairs_recover_nothing():
    """Negative control: shuffled seed pairs carry no correspondence."""
    Xs, Ys, pool, perm = _pools()
    boot = AnchorBootstrapper(LinearAligner(), n_anchors=100, random_state=0)
    boot.fit(Xs, Ys[np.roll(np.arange(15), 1)], unpaired=pool)
    assert _rate(boot, perm) < 0.1


def test_hard_correspondence_and_paper_reg_with_distractors():
    """ε = 1e-4 of the median cost, a target pool with 200 extra rows, hard assignment."""
    Xs, Ys, pool, perm = _pools(n=400, extra=200)
    boot = AnchorBootstrapper(LinearAligner(), n_anchors=80, sinkhorn_reg=1e-4,
                              correspondence="hard", init="random", random_state=1)
    boot.fit(Xs, Ys, unpaired=pool)
    assert np.isfinite(boot.anchors_y_).all()
    assert boot.plan_marginal_error_ < 1e-1
    assert _rate(boot, perm) >= 0.9


def test_fitted_attributes_and_delegation():
    Xs, Ys, pool, perm = _pools(n=300)
    boot = AnchorBootstrapper(LinearAligner(alpha=1e-3), n_anchors=60, random_state=0)
    boot.fit(Xs, Ys, unpaired=pool)
    np.testing.assert_array_equal(boot.anchors_X_[:15], Xs)
    np.testing.assert_array_equal(boot.anchors_X_[15:], pool.X[boot.anchor_pairs_[:, 0]])
    np.testing.assert_array_equal(boot.anchors_y_[15:], pool.y[boot.anchor_pairs_[:, 1]])
    assert boot.anchor_confidence_.shape == (45,) and (boot.anchor_confidence_ >= 0).all()
    np.testing.assert_array_equal(boot.transform(pool.X[:5]), boot.estimator_.transform(pool.X[:5]))
    assert boot.score(Xs, Ys) == boot.estimator_.score(Xs, Ys)
    same = AnchorBootstrapper(LinearAligner(alpha=1e-3), n_anchors=60, random_state=0)
    np.testing.assert_array_equal(same.fit(Xs, Ys, unpaired=pool).anchor_pairs_, boot.anchor_pairs_)
    loaded = pickle.loads(pickle.dumps(boot))
    np.testing.assert_array_equal(loaded.transform(Xs), boot.transform(Xs))
    given = AnchorBootstrapper(LinearAligner(), anchor_indices=[3, 5, 7], random_state=0)
    given.fit(Xs, Ys, unpaired=pool)
    np.testing.assert_array_equal(given.anchor_pairs_[:, 0], [3, 5, 7])
    np.testing.assert_array_equal(perm[given.anchor_pairs_[:, 1]], [3, 5, 7])


def test_without_pool_and_input_errors():
    Xs, Ys, pool, _ = _pools(n=100)
    boot = AnchorBootstrapper(LinearAligner()).fit(Xs, Ys)
    assert boot.n_iter_ >= 1 and len(boot.anchors_X_) == 30
    with pytest.raises(ValueError, match="UnpairedPool"):
        AnchorBootstrapper().fit(Xs, Ys, unpaired=pool.X)
    with pytest.raises(ValueError, match="features"):
        AnchorBootstrapper().fit(Xs[:, :8], Ys, unpaired=pool)
    with pytest.raises(ValueError, match="anchor_indices"):
        AnchorBootstrapper(anchor_indices=[1000]).fit(Xs, Ys, unpaired=pool)
    with pytest.raises(ValueError, match="n_samples = 1"):
        AnchorBootstrapper().fit(Xs[:1], Ys[:1], unpaired=pool)


def test_grid_search_over_both_levels():
    Xs, Ys, pool, _ = _pools(n=200)
    X, Y = make_paired_spaces(n_samples=215, n_features=16, noise=0.1, random_state=0)
    search = GridSearchCV(
        AnchorBootstrapper(n_anchors=40, random_state=0),
        {"sinkhorn_reg": [1e-2, 1e-1], "estimator__pruning_threshold": [0.0, 0.1]}, cv=3,
    )
    search.fit(X[:15], Y[:15], unpaired=pool)
    assert isinstance(search.best_estimator_.estimator_, InverseRelativeProjector)
    assert len(search.cv_results_["params"]) == 4


def test_irp_with_discovered_anchors_translates_like_ground_truth():
    d = 32
    X, Y = make_paired_spaces(n_samples=1515, n_features=d, relation="orthogonal", noise=0.05,
                              random_state=3)
    perm = np.random.default_rng(3).permutation(1000)
    pool = UnpairedPool(X=X[15:1015], y=Y[15:1015][perm])
    X_test, Y_test = X[1015:], Y[1015:]
    boot = AnchorBootstrapper(n_anchors=300, random_state=0).fit(X[:15], Y[:15], unpaired=pool)
    assert isinstance(boot.estimator_, InverseRelativeProjector)
    ao = boot.score(X_test, Y_test)
    src = boot.anchor_pairs_[:, 0]
    gt = InverseRelativeProjector().fit(np.vstack([X[:15], pool.X[src]]),
                                        np.vstack([Y[:15], Y[15:1015][src]]))
    seed = InverseRelativeProjector().fit(X[:15], Y[:15])
    print(f"held-out cosine: AO {ao:.4f}  GT {gt.score(X_test, Y_test):.4f}  "
          f"seed-only {seed.score(X_test, Y_test):.4f}  exact pairs {_rate(boot, perm):.3f}")
    assert ao >= gt.score(X_test, Y_test) - 0.02
    assert ao > seed.score(X_test, Y_test) + 0.05


def test_benchmark_smoke(load_benchmark):
    bench = load_benchmark("bench_bootstrap")
    rows = bench.run(300, 40, 5, 5)
    assert len(rows) == 2 and rows[0][5] > 0.9  # exact-pair rate of the bootstrapper
