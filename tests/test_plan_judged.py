"""skalign.plan with judged queries: nDCG@10 of every option against an independent computation
(scikit-learn's ndcg_score), the qrels readers, and "stay" where nothing beats staying.

The judged set is built from the vendored texts' labels (standard-library module): per label,
one text outside the pairs is the query and the pairs' texts of that label are relevant."""

import json

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from skalign.cli import main
from skalign.datasets import load_docstring_embeddings
from skalign.plan import plan_migration


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def judged_set(docstring_pair):
    A, B, perm = docstring_pair
    labels = load_docstring_embeddings().target
    pairs, rest = perm[:600], perm[600:]
    queries, qrels = [], {}
    for lab in np.unique(labels[pairs]):
        outside = rest[labels[rest] == lab]
        if len(outside) == 0:
            continue
        qrels[len(queries)] = {int(d): 1.0 for d in np.flatnonzero(labels[pairs] == lab)}
        queries.append(outside[0])
    queries = np.array(queries)
    return A[pairs], B[pairs], A[queries], B[queries], qrels


def _sklearn_ndcg(Q, D, qrels):
    scores = unit(Q) @ unit(D).T
    out = []
    for q, rel in qrels.items():
        truth = np.zeros(len(D))
        truth[list(rel)] = list(rel.values())
        out.append(ndcg_score(truth[None], scores[q][None], k=10))
    return float(np.mean(out))


def test_stay_and_reembed_ndcg_match_sklearn(judged_set):
    X, Y, QA, QB, qrels = judged_set
    plan = plan_migration(X, Y, methods=["linear"], store_size=600, curve=False,
                          n_resamples=100, queries=(QA, QB), qrels=qrels)
    opts = {o["option"]: o for o in plan.judged["options"]}
    assert set(opts) == {"stay", "re-embed", "translate", "bridge queries",
                         "translate + rerank"}
    assert abs(opts["stay"]["ndcg"] - _sklearn_ndcg(QA, X, qrels)) < 0.02
    assert abs(opts["re-embed"]["ndcg"] - _sklearn_ndcg(QB, Y, qrels)) < 0.02
    assert plan.judged["n_queries"] == len(qrels) > 30
    text = "\n".join(plan.summary())
    assert "judged queries" in text and "nDCG@10" in text


def test_ndcg_by_hand():
    from skalign.plan._recommend import ndcg_per_query

    # ranked: d2 (rel 1), d0 (rel 3), d5 (unjudged); ideal 3, 1
    got = ndcg_per_query([[2, 0, 5]], {7: {0: 3.0, 2: 1.0}}, [7], k=3)[0]
    dcg = 1 / np.log2(2) + 3 / np.log2(3)
    idcg = 3 / np.log2(2) + 1 / np.log2(3)
    assert got == pytest.approx(dcg / idcg)


def test_stay_recommended_when_the_new_model_knows_nothing(judged_set):
    X, _, QA, _, qrels = judged_set
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((len(X), 64)).astype(np.float32)
    QB = rng.standard_normal((len(QA), 64)).astype(np.float32)
    plan = plan_migration(X, Y, methods=["procrustes"], store_size=600, curve=False,
                          n_resamples=100, queries=(QA, QB), qrels=qrels)
    assert plan.recommendation["action"] == "stay"
    assert any("neither re-embedding nor any translation beats staying" in r
               for r in plan.recommendation["reasons"])


def test_cli_qrels_trec_and_json(judged_set, tmp_path, capsys):
    X, Y, QA, QB, qrels = judged_set
    for name, M in (("a", X), ("b", Y), ("qa", QA), ("qb", QB)):
        np.save(tmp_path / f"{name}.npy", M)
    (tmp_path / "q.trec").write_text("".join(f"{q} 0 {d} {int(r)}\n" for q, rel in qrels.items()
                                             for d, r in rel.items()))
    (tmp_path / "q.json").write_text(json.dumps({str(q): {str(d): r for d, r in rel.items()}
                                                 for q, rel in qrels.items()}))
    base = ["plan", "--source", str(tmp_path / "a.npy"), "--target", str(tmp_path / "b.npy"),
            "--queries-source", str(tmp_path / "qa.npy"), "--queries-target",
            str(tmp_path / "qb.npy"), "--methods", "procrustes", "--no-curve", "--json"]
    results = []
    for f in ("q.trec", "q.json"):
        assert main(base + ["--qrels", str(tmp_path / f)]) == 0
        results.append(json.loads(capsys.readouterr().out)["judged"]["options"])
    assert results[0] == results[1]
    (tmp_path / "bad.trec").write_text("1 0 x 1\n")
    assert main(base + ["--qrels", str(tmp_path / "bad.trec")]) == 2
    err = capsys.readouterr().err
    assert "line 1: expected 'QUERY-ROW 0 DOC-ROW RELEVANCE'" in err
    assert len(err.strip().splitlines()) == 1
    assert main(base[:5] + ["--qrels", str(tmp_path / "q.trec")]) == 2
    assert "need all three" in capsys.readouterr().err
