"""AnchorBootstrapper from zero or five seed pairs, and its success certificate, on real pools."""

import warnings

import numpy as np
import pytest
import torch

from skalign import AnchorBootstrapper, ProcrustesAligner, UnpairedPool
from skalign.exceptions import DiscoveryFailedWarning
from skalign.metrics import top_k_accuracy


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def split(seedless_split):
    return seedless_split


def _fit(X, y, pool, **params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boot = AnchorBootstrapper(random_state=0, **params).fit(X, y, pool)
    return boot, [w.category for w in caught]


def _exact(boot, shuffle):
    src, tgt = boot.anchor_pairs_.T
    return float(np.mean(shuffle[tgt] == src))


@pytest.mark.slow
def test_zero_pairs_reach_the_supervised_ceiling(split):
    """No pair at all: MiniLM (384) -> MPNet (768) from the two pools alone."""
    pool, shuffle, Xt, Yt, ceiling = split
    boot, caught = _fit(None, None, pool)
    assert boot.discovery_ == "self_learning" and DiscoveryFailedWarning not in caught
    assert len(boot.anchor_pairs_) >= 800  # n_anchors="auto": every reliable pair
    assert _exact(boot, shuffle) >= 0.95  # chance: 0.001
    assert top_k_accuracy(Yt, boot.transform(Xt)) >= 0.95 * ceiling  # ceiling ~0.97
    assert boot.certificate_ >= 0.8 and boot.restarts_[0]["n_soft_iter"] > 0
    assert boot.n_features_in_ == 384 and boot.n_features_out_ == 768
    assert len(boot.source_anchors_) == len(boot.anchor_pairs_)


def test_soft_self_learning_lifts_a_weak_start(split):
    """The soft phase alone turns the signature start (~9 % right) into the right pairing."""
    from skalign._bootstrap.matching import csls_match
    from skalign._bootstrap.self_learning import csls_scores, soft_self_learn
    from skalign._bootstrap.signatures import principal_basis, similarity_signatures
    from skalign.utils._backend import row_normalize

    pool, shuffle, *_ = split
    X, Y = (torch.as_tensor(A - A.mean(0)) for A in (pool.X, pool.y))
    X, Y = row_normalize(X), row_normalize(Y)
    U, V = similarity_signatures(X, len(X)), similarity_signatures(Y, len(Y))

    def right_share(match):
        mutual = torch.nonzero(match.mutual()).flatten().numpy()
        return float(np.mean(shuffle[match.forward.numpy()[mutual]] == mutual))

    start = right_share(csls_match(U, V, k=10))
    assert start < 0.2  # chance: 0.001
    XR, YR = (row_normalize(Z @ principal_basis(Z, 128).T) for Z in (X, Y))
    C = csls_scores(U @ V.T, 10)
    W, history = soft_self_learn(XR, YR, C)
    assert right_share(csls_match(XR @ W, YR, k=10)) >= 0.95
    assert len(history) < 100  # stopped on its own
    assert any(h["extrapolated"] for h in history)
    # deterministic: the same steps again, bit for bit
    W1, again = soft_self_learn(XR, YR, C)
    assert torch.equal(W, W1) and [h["objective"] for h in again] == [
        h["objective"] for h in history]


def test_soft_candidates_are_the_dense_iteration_when_they_are_every_row(split):
    """With as many candidates as rows the candidate softmaxes are the dense ones: the same
    maps and objectives up to rounding; with the default few candidates the phase still lifts
    the start to the right pairing, in fewer seconds per iteration than the dense one."""
    from skalign._bootstrap.matching import csls_match
    from skalign._bootstrap.self_learning import SOFT_CANDIDATES, csls_scores, soft_self_learn
    from skalign._bootstrap.signatures import principal_basis, similarity_signatures
    from skalign.utils._backend import row_normalize

    pool, shuffle, *_ = split
    X, Y = (row_normalize(torch.as_tensor(A - A.mean(0))) for A in (pool.X, pool.y))
    C = csls_scores(similarity_signatures(X, len(X)) @ similarity_signatures(Y, len(Y)).T, 10)
    XR, YR = (row_normalize(Z @ principal_basis(Z, 128).T) for Z in (X, Y))
    dense_W, dense = soft_self_learn(XR, YR, C, n_candidates=None, max_iter=12)
    every_W, every = soft_self_learn(XR, YR, C, n_candidates=len(X), max_iter=12)
    assert len(dense) == len(every) > 3
    assert float((dense_W - every_W).abs().max()) < 1e-4
    assert max(abs(a["objective"] - b["objective"]) for a, b in zip(dense, every)) < 1e-5
    assert SOFT_CANDIDATES < len(X) // 10
    W, few = soft_self_learn(XR, YR, C)
    match = csls_match(XR @ W, YR, k=10)
    mutual = torch.nonzero(match.mutual()).flatten().numpy()
    assert len(mutual) >= 900 and np.mean(shuffle[match.forward.numpy()[mutual]] == mutual) >= 0.95


def test_over_relaxed_soft_steps_shorten_a_slow_climb(split):
    """Softer temperatures climb slowly (20 plain steps here): the over-relaxed steps reach
    the same pairing in fewer, and at the fixed point they turn plain (no oscillation)."""
    from skalign._bootstrap.matching import csls_match
    from skalign._bootstrap.self_learning import csls_scores, soft_self_learn
    from skalign._bootstrap.signatures import principal_basis, similarity_signatures
    from skalign.utils._backend import row_normalize

    pool, shuffle, *_ = split
    X, Y = (row_normalize(torch.as_tensor(A - A.mean(0))) for A in (pool.X, pool.y))
    C = csls_scores(similarity_signatures(X, len(X)) @ similarity_signatures(Y, len(Y)).T, 10)
    XR, YR = (row_normalize(Z @ principal_basis(Z, 128).T) for Z in (X, Y))
    runs = {}
    for beta in (0.0, 2.0):
        W, history = soft_self_learn(XR, YR, C.clone(), start_temperature=0.1, temperature=0.2,
                                     extrapolation=beta)
        match = csls_match(XR @ W, YR, k=10)
        mutual = torch.nonzero(match.mutual()).flatten().numpy()
        right = np.mean(shuffle[match.forward.numpy()[mutual]] == mutual)
        assert right >= 0.95 and len(mutual) >= 900
        runs[beta] = history
    plain, fast = runs[0.0], runs[2.0]
    assert not any(h["extrapolated"] for h in plain) and fast[1]["extrapolated"] is False
    assert len(fast) < len(plain)
    # the last steps sit at the fixed point: the stall test, not max_iter, ended both
    assert len(plain) < 100 and len(fast) < 100
    assert abs(fast[-1]["objective"] - plain[-1]["objective"]) < 1e-3


def test_soft_phase_stops_sooner_once_it_has_taken_off(split):
    """After the take-off the soft phase stops after SOFT_LANDED_PATIENCE flat iterations, not
    the full patience; up to there its course is the same, bit for bit, and so are its pairs."""
    from skalign._bootstrap.matching import csls_match
    from skalign._bootstrap.self_learning import SOFT_TAKEOFF, csls_scores, soft_self_learn
    from skalign._bootstrap.signatures import principal_basis, similarity_signatures
    from skalign.utils._backend import row_normalize

    pool, shuffle, *_ = split
    X, Y = (row_normalize(torch.as_tensor(A - A.mean(0))) for A in (pool.X, pool.y))
    C = csls_scores(similarity_signatures(X, len(X)) @ similarity_signatures(Y, len(Y)).T, 10)
    XR, YR = (row_normalize(Z @ principal_basis(Z, 128).T) for Z in (X, Y))
    runs = {}
    for landed in (3, 8):  # 8: the full patience all along, the previous rule
        W, history = soft_self_learn(XR, YR, C, landed_patience=landed)
        match = csls_match(XR @ W, YR, k=10)
        mutual = torch.nonzero(match.mutual()).flatten().numpy()
        runs[landed] = history, set(zip(mutual, match.forward.numpy()[mutual]))
        assert np.mean(shuffle[match.forward.numpy()[mutual]] == mutual) >= 0.95
    (fast, fast_pairs), (full, full_pairs) = runs[3], runs[8]
    objectives = [h["objective"] for h in fast]
    assert max(objectives) >= SOFT_TAKEOFF * objectives[0]  # it took off
    assert len(full) - len(fast) >= 3
    assert objectives == [h["objective"] for h in full[:len(fast)]]
    assert abs(full[-1]["objective"] - fast[-1]["objective"]) < 1e-3
    assert len(fast_pairs ^ full_pairs) <= 0.02 * len(full_pairs)


def test_hard_phase_stops_at_its_fixed_point(split, monkeypatch):
    """At keep probability 1 the hard loop is deterministic: it stops as soon as its pairs
    repeat. Without that exit it runs on to its stall test and returns the same map, bit for
    bit, and the same objective."""
    from skalign._bootstrap.matching import csls_match
    from skalign._bootstrap.self_learning import csls_scores, self_learn, soft_self_learn
    from skalign._bootstrap.signatures import principal_basis, similarity_signatures
    from skalign.utils._backend import row_normalize

    pool, shuffle, *_ = split
    X, Y = (row_normalize(torch.as_tensor(A - A.mean(0))) for A in (pool.X, pool.y))
    C = csls_scores(similarity_signatures(X, len(X)) @ similarity_signatures(Y, len(Y)).T, 10)
    XR, YR = (row_normalize(Z @ principal_basis(Z, 128).T) for Z in (X, Y))
    W, _ = soft_self_learn(XR, YR, C)
    match = csls_match(XR @ W, YR, k=10)
    a = torch.nonzero(match.mutual()).flatten()
    W, history, objective = self_learn(X, Y, a, match.forward[a], p0=1.0)
    final = csls_match(X @ W, Y, k=10)
    mutual = torch.nonzero(final.mutual()).flatten().numpy()
    assert len(mutual) >= 900
    assert np.mean(shuffle[final.forward.numpy()[mutual]] == mutual) >= 0.97
    # the same loop with the exit disabled (no two pair sets compare equal)
    monkeypatch.setattr(torch, "equal", lambda *args: False)
    W_on, history_on, objective_on = self_learn(X, Y, a, match.forward[a], p0=1.0)
    assert len(history_on) > len(history) and objective_on == objective
    assert [h["objective"] for h in history_on[:len(history)]] == [
        h["objective"] for h in history]
    monkeypatch.undo()
    assert torch.equal(W_on, W)


@pytest.mark.slow
def test_zero_pairs_the_other_way(docstring_pair):
    """MPNet (768) -> MiniLM (384): the wider source, another pool of 1,000 texts."""
    A, B, order = docstring_pair
    pool_rows, test_rows = order[350:1350], order[:350]
    shuffle = np.random.default_rng(2).permutation(1000)
    pool = UnpairedPool(X=B[pool_rows], y=A[pool_rows][shuffle])
    ceiling = top_k_accuracy(A[test_rows], ProcrustesAligner().fit(B[pool_rows], A[pool_rows])
                             .transform(B[test_rows]))
    boot, caught = _fit(None, None, pool)
    assert DiscoveryFailedWarning not in caught and boot.certificate_ >= 0.8
    assert _exact(boot, shuffle) >= 0.95  # chance: 0.001
    assert top_k_accuracy(A[test_rows], boot.transform(B[test_rows])) >= 0.95 * ceiling


def test_zero_pair_fits_repeat_bit_for_bit(split):
    pool, *_ = split
    small = UnpairedPool(X=pool.X[:400], y=pool.y[:400])
    one, _ = _fit(None, None, small, n_restarts=1)
    two, _ = _fit(None, None, small, n_restarts=1)
    np.testing.assert_array_equal(one.anchor_pairs_, two.anchor_pairs_)
    assert one.certificate_ == two.certificate_
    np.testing.assert_array_equal(one.transform(pool.X[:50]), two.transform(pool.X[:50]))


def test_restarts_explore_with_their_own_soft_settings(split):
    """Nothing to find: every restart runs, each with its own temperatures and subspace, and
    each stops after its soft phase, its start pairs failing their held-out certificate."""
    from skalign._bootstrap.seedless import _START_CERTIFICATE_MIN
    from skalign._bootstrap.self_learning import SOFT_SCHEDULE

    pool, *_ = split
    noise = np.random.default_rng(1).standard_normal((300, 768)).astype(np.float32)
    boot, caught = _fit(None, None, UnpairedPool(X=pool.X[:300], y=noise), n_restarts=3)
    assert DiscoveryFailedWarning in caught and boot.certificate_ < boot.min_certificate
    settings = [(r["n_components"], *r["soft_temperatures"]) for r in boot.restarts_]
    assert settings == list(SOFT_SCHEDULE) and len(set(settings)) == 3
    for r in boot.restarts_:  # the soft objective alone would not tell (0.5-0.75 here)
        assert r["n_soft_iter"] > 0 and r["start_certificate"] < _START_CERTIFICATE_MIN
        assert "start certificate" in r["stopped"] and r["n_iter"] == 0
        assert np.isnan(r["certificate"])
    # no hard phase ran, and the fit is still a fitted, usable (and warned) model
    assert boot.n_iter_ == 0 and boot.rounds_ == [] and len(boot.anchor_pairs_) > 0
    assert boot.transform(pool.X[:5]).shape == (5, 768)


def test_five_seed_pairs_reach_the_supervised_ceiling(split):
    pool, shuffle, Xt, Yt, ceiling = split
    seeds = np.arange(5)  # source pool rows 0-4 and their true targets
    target_rows = np.argsort(shuffle)[seeds]
    boot, caught = _fit(pool.X[seeds], pool.y[target_rows], pool)
    assert boot.discovery_ == "self_learning" and DiscoveryFailedWarning not in caught
    assert _exact(boot, shuffle) >= 0.95
    assert top_k_accuracy(Yt, boot.transform(Xt)) >= 0.95 * ceiling
    assert boot.certificate_ >= 0.8 and boot.restarts_[0]["start"] == "signatures+seeds"
    first = boot.restarts_[0]  # its start pairs certify themselves; nothing stopped it
    assert first["start_certificate"] >= 0.9 and first["stopped"] is None
    assert len(boot.restarts_) == 1  # passed: no other restart ran


@pytest.mark.slow
def test_impossible_target_pool_warns(split):
    """A target pool of random vectors has nothing to find: the certificate must say so."""
    pool, *_ = split
    noise = np.random.default_rng(0).standard_normal((500, 768)).astype(np.float32)
    with pytest.warns(DiscoveryFailedWarning, match="every self-learning start failed"):
        boot = AnchorBootstrapper(n_restarts=1, random_state=0).fit(
            None, None, UnpairedPool(X=pool.X[:500], y=noise))
    assert boot.certificate_ < boot.min_certificate and boot.restarts_[0]["stopped"]


def test_wrong_seed_pairs_warn_in_the_rounds_too(split):
    """Seeded discovery is certified as well: 30 shuffled seed pairs give a warned, wrong map."""
    pool, shuffle, *_ = split
    rows = np.arange(30)
    wrong = np.argsort(shuffle)[np.roll(rows, 1)]
    boot, caught = _fit(pool.X[rows], pool.y[wrong], pool)
    assert boot.discovery_ == "rounds"
    assert DiscoveryFailedWarning in caught and _exact(boot, shuffle) < 0.1


def test_bad_pools_give_clear_errors(split):
    pool, *_ = split
    X, Y = pool.X, pool.y
    with pytest.raises(ValueError, match="both a source pool"):
        AnchorBootstrapper().fit(None, None, unpaired=UnpairedPool(X=X))
    with pytest.raises(ValueError, match="both a source pool"):
        AnchorBootstrapper().fit(None, None)
    with pytest.raises(ValueError, match="at least 50"):
        AnchorBootstrapper().fit(None, None, unpaired=UnpairedPool(X=X[:20], y=Y))
    bad = X.copy()
    bad[7, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        AnchorBootstrapper().fit(None, None, unpaired=UnpairedPool(X=bad, y=Y))
    const = np.ones_like(Y[:200])
    with pytest.raises(ValueError, match="constant pool"):
        AnchorBootstrapper().fit(None, None, unpaired=UnpairedPool(X=X, y=const))
    with pytest.raises(ValueError, match="constant pool"):
        AnchorBootstrapper().fit(X[:5], Y[:5], unpaired=UnpairedPool(X=X, y=const))
