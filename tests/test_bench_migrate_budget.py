"""The migrate-budget benchmark's quick mode on the vendored MiniLM/MPNet embeddings.

Asserted: encoding 40 % of the store keeps far more than encoding 2 %, whichever rows are chosen;
the reported figure of a ``random`` choice equals an independent numpy computation of the same
migration (centred Procrustes by SVD, encoded rows written exactly, leave-one-out cosine
top-10 against the re-embedded store), which writing nothing exactly would miss; the ``stay``
baseline equals :func:`skalign.metrics.retrieval_retention`; and ``hubs`` are the rows most
often among the others' old-space top-10.
"""

import csv

import numpy as np
import pytest


@pytest.fixture(scope="module")
def vendored(tmp_path_factory):
    from skalign.datasets import load_docstring_embeddings

    E = load_docstring_embeddings().embeddings
    path = tmp_path_factory.mktemp("budget") / "pair.npz"
    np.savez(path, **E)
    return path, E["minilm_l6"], E["mpnet_base"]


def _unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _loo_top10(Q, D):
    S = _unit(Q).astype(np.float64) @ _unit(D).astype(np.float64).T
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1)[:, :10]


def _recall(Ys, T):
    truth, got = _loo_top10(Ys, Ys), _loo_top10(Ys, T)
    return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got)])


def test_bench_migrate_budget_quick(load_benchmark, vendored, tmp_path):
    from skalign.metrics import retrieval_retention

    path, X, Y = vendored
    bench = load_benchmark("bench_migrate_budget")
    out = tmp_path / "budget.csv"
    results, table = bench.main([str(path), "--quick", "--csv", str(out)])

    cell = {(t["strategy"], t["fraction"]): t["mean"] for t in table}
    for strategy in bench.STRATEGIES:
        assert cell[(strategy, 0.4)] > cell[(strategy, 0.02)] + 0.3, strategy

    rows = bench.split_rows(len(X), 600, 0)
    Xs, Ys = X[rows], Y[rows]
    got = next(r for r in results if (r["strategy"], r["map"], r["fraction"])
               == ("random", "procrustes", 0.4))
    chosen = got["chosen"]
    assert len(np.unique(chosen)) == 240
    mx, my = Xs[chosen].mean(0), Ys[chosen].mean(0)
    U, _, Vt = np.linalg.svd((Xs[chosen] - mx).T.astype(np.float64) @ (Ys[chosen] - my),
                             full_matrices=False)
    T = (Xs - mx) @ (U @ Vt) + my
    translated_only = _recall(Ys, T)
    T[chosen] = Ys[chosen]
    expected = _recall(Ys, T)
    assert got["recall"] == pytest.approx(expected, abs=0.003)
    assert abs(translated_only - expected) > 0.01  # the check tells the two apart

    stay = next(r["recall"] for r in results if r["strategy"] == "stay")
    assert stay == pytest.approx(retrieval_retention(Ys, Xs, Ys, Xs, exclude_self=True)["recall"])

    with open(out, newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == ["encoders", "rows chosen", "2% encoded", "40% encoded"]
    assert [r[1] for r in lines[1:]] == ["stay", "translate only", *bench.STRATEGIES]


def test_hubs_are_the_most_retrieved_rows(load_benchmark, vendored):
    _, X, Y = vendored
    bench = load_benchmark("bench_migrate_budget")
    store = bench.Store(X[:300], Y[:300], seed=0)
    degree = np.bincount(_loo_top10(X[:300], X[:300]).ravel(), minlength=300)
    chosen = bench.choose_hubs(store, 20, np.random.default_rng(0))
    assert degree[chosen].min() >= np.sort(degree)[-20]
    assert degree[chosen].min() > np.median(degree)
