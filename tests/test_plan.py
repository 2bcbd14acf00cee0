"""skalign.plan and ``skalign plan`` / ``translate --direction``: estimates against held-out
measurements on the vendored real encoders, the recommendation, JSON, errors."""

import json

import numpy as np
import pytest

from skalign import LinearAligner, ProcrustesAligner, UnpairedPool
from skalign.cli import main
from skalign.io import save
from skalign.metrics import retrieval_retention
from skalign.plan import candidate_methods, make_candidate, plan_migration, write_report

ACTIONS = ("stay", "translate", "bridge queries", "translate + rerank", "re-embed")


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def real_plan(docstring_pair):
    """Plan on 400 real pairs (MiniLM -> MPNet) for a store of 500 items."""
    A, B, perm = docstring_pair
    pairs = perm[:400]
    plan = plan_migration(A[pairs], B[pairs], methods=["procrustes", "linear"], store_size=500,
                          n_repeats=1, n_resamples=200, normalize=False)
    return plan


def test_predicted_retention_matches_a_separate_heldout_store(docstring_pair, real_plan):
    A, B, perm = docstring_pair
    pairs, store = perm[:400], perm[400:900]
    for e in real_plan.estimates:
        est = make_candidate(e.method, 400).fit(A[pairs], B[pairs])
        if e.side == "document":
            measured = retrieval_retention(B[store], est.transform(A[store]))
        elif hasattr(est, "inverse_transform"):
            measured = retrieval_retention(B[store], A[store], B[store],
                                           est.inverse_transform(B[store]), exclude_self=True)
        else:
            rev = make_candidate(e.method, 400).fit(B[pairs], A[pairs])
            measured = retrieval_retention(B[store], A[store], B[store],
                                           rev.transform(B[store]), exclude_self=True)
        # real retention here is 0.45-0.65: a wrong estimate (no store-size handling, leaking
        # training pairs into the evaluation store) misses by 0.1-0.4
        assert abs(e.recall - measured["recall"]) < 0.05 or \
            e.recall_ci[0] <= measured["recall"] <= e.recall_ci[1], (e, measured)
        assert abs(e.ndcg - measured["ndcg"]) < 0.06 or \
            e.ndcg_ci[0] <= measured["ndcg"] <= e.ndcg_ci[1], (e, measured)
        assert e.recall_ci[0] < e.recall < e.recall_ci[1]
        assert e.recall_ci[1] - e.recall_ci[0] < 0.3
        assert e.store_size == 500 and e.extrapolated


def test_plan_contents_on_real_pairs(real_plan):
    plan = real_plan
    assert {(e.method, e.side) for e in plan.estimates} == {
        ("procrustes", "document"), ("procrustes", "query"), ("linear", "document"),
        ("linear", "query")}
    assert plan.normalized is False and plan.row_norms["source"] > 3  # raw MiniLM norms
    # the oracle is fitted on the evaluation items themselves: at least as good as any estimate
    assert plan.ceiling["recall"] >= max(e.recall for e in plan.estimates) - 0.02
    curve = plan.learning_curve["procrustes"]
    assert curve["n_pairs"][0] == 25 and curve["n_pairs"][-1] == 320
    assert curve["recall"][-1] > curve["recall"][0] + 0.2  # 25 pairs are far too few for 768-d
    rec = plan.recommendation
    assert rec["action"] in ACTIONS
    if rec["commands"]:
        assert rec["commands"][0].startswith(f"skalign fit {rec['method']} ")
    assert any("row norms differ" in r for r in rec["reasons"])  # raw MiniLM 5.2 vs MPNet 3.0
    text = "\n".join(plan.summary())
    assert "not normalised" in text and "recommendation:" in text and "ceiling" in text


def _measured(method, side, Xp, Yp, Xs, Ys):
    """Retention of ``method`` fitted on unit rows of the pairs, on a separate store."""
    def unit(A):
        return A / np.linalg.norm(A, axis=1, keepdims=True)

    Xp, Yp, Xs, Ys = unit(Xp), unit(Yp), unit(Xs), unit(Ys)
    est = make_candidate(method, len(Xp)).fit(Xp, Yp)
    if side == "document":
        return retrieval_retention(Ys, est.transform(Xs))["recall"]
    if method == "procrustes":
        return retrieval_retention(Ys, Xs, Ys, est.inverse_transform(Ys),
                                   exclude_self=True)["recall"]
    rev = make_candidate(method, len(Xp)).fit(Yp, Xp)
    return retrieval_retention(Ys, Xs, Ys, rev.transform(Ys), exclude_self=True)["recall"]


def test_few_pairs_estimated_on_pairs_discovered_in_the_unpaired_samples(docstring_pair):
    """25 pairs + unpaired samples of 675 texts: the estimate for another store of 650 texts.

    Cross-validation over the 25 pairs alone (held-out folds of 12 items carried to 650)
    missed the other store by up to 0.17 here. The store of pairs the bootstrap discovers in
    the samples recovers what the true pairing of those texts gives within 0.005; the other
    store's texts keep about 0.03 less by themselves."""
    A, B, perm = docstring_pair
    pairs, sample, store = perm[:25], perm[25:700], perm[700:1350]
    order = np.random.default_rng(1).permutation(sample)  # the new store's sample, unordered
    pool = UnpairedPool(X=A[sample], y=B[order])
    plan = plan_migration(A[pairs], B[pairs], unpaired=pool, methods=["procrustes", "linear"],
                          store_size=650, curve=False, n_resamples=100)
    ev = plan.evaluation
    assert ev["store"] == "pseudo-pairs" and ev["certificate"] >= 0.9
    assert 600 <= ev["size"] <= 675  # mutual nearest neighbours among the sampled texts
    for e in plan.estimates:
        same_texts = _measured(e.method, e.side, A[pairs], B[pairs], A[sample[:650]],
                               B[sample[:650]])
        other_texts = _measured(e.method, e.side, A[pairs], B[pairs], A[store], B[store])
        assert abs(e.recall - same_texts) < 0.02, (e, same_texts)
        assert abs(e.recall - other_texts) < 0.05, (e, other_texts)
    assert "discovered in the unpaired samples" in "\n".join(plan.summary())
    # samples of other texts than the store's: no trustworthy pairs, back to cross-validation
    other = UnpairedPool(X=A[sample[:300]], y=B[sample[300:]])
    plan = plan_migration(A[pairs], B[pairs], unpaired=other, methods=["procrustes"],
                          sides=("document",), store_size=650, curve=False, n_resamples=50)
    assert plan.evaluation["store"] == "cross-validation"


def test_bootstrap_left_out_when_the_samples_hold_only_the_known_pairs(docstring_pair):
    """Samples of the pairs' own texts (plus 20 others, fewer than a held-out fold): the default
    bootstrap candidate is not estimated, and the plan says why; samples of 400 other texts
    bring it back."""
    A, B, perm = docstring_pair
    pairs = perm[:200]
    same = perm[:220]
    pool = UnpairedPool(X=A[same], y=B[np.random.default_rng(1).permutation(same)])
    plan = plan_migration(A[pairs], B[pairs], unpaired=pool, sides=("document",), curve=False,
                          n_resamples=50)
    ev = plan.evaluation
    assert ev["unpaired_new_rows"] == 20 and ev["store"] == "cross-validation"
    assert "20 rows that are not known pairs" in ev["bootstrap_left_out"]
    assert {e.method for e in plan.estimates} == {"procrustes", "linear"}
    assert "bootstrap not estimated: the unpaired samples hold only 20" in \
        "\n".join(plan.summary())
    # asked for by name, it is estimated all the same
    named = plan_migration(A[pairs], B[pairs], unpaired=pool, methods=["bootstrap"],
                           sides=("document",), curve=False, n_resamples=50)
    assert [e.method for e in named.estimates] == ["bootstrap"]
    assert "bootstrap_left_out" not in named.evaluation
    other = perm[200:600]
    pool = UnpairedPool(X=A[other], y=B[np.random.default_rng(1).permutation(other)])
    plan = plan_migration(A[pairs], B[pairs], unpaired=pool, sides=("document",), curve=False,
                          n_resamples=50)
    assert plan.evaluation["unpaired_new_rows"] == 400
    assert "bootstrap" in {e.method for e in plan.estimates}
    assert "bootstrap_left_out" not in plan.evaluation


def test_bootstrap_never_sees_its_held_out_pairs(docstring_pair):
    from skalign.plan._fits import pool_without

    A, B, perm = docstring_pair
    pool = UnpairedPool(X=A[perm[:100]], y=B[perm[50:150]])
    rest = pool_without(pool, A[perm[:10]], B[perm[140:150]])
    assert rest.X.shape == (90, A.shape[1]) and rest.y.shape == (90, B.shape[1])
    np.testing.assert_array_equal(rest.X, A[perm[10:100]])
    np.testing.assert_array_equal(rest.y, B[perm[50:140]])


def _priced(estimates, stay=0.3, stay_ci=(0.28, 0.32), store_size=2000, min_recall=0.6,
            budget=None, rerank=None, curve=None):
    """The stages a recommendation is made on, from estimates given by hand."""
    from types import SimpleNamespace

    from skalign.plan._estimate import Estimates, best_estimate
    from skalign.plan._recommend import options

    est = Estimates(estimates=estimates, stay={"recall": stay, "recall_ci": stay_ci},
                    rerank=rerank or {}, ceiling={"recall": 0.8}, learning_curve={},
                    curve_store_size=0, budget_store=None, notes=(),
                    best={side: best_estimate(estimates, side) for side in ("document",
                                                                            "query")})
    candidates = {e.method: SimpleNamespace(learns=e.method == "bootstrap") for e in estimates}
    inputs = SimpleNamespace(k=10, min_recall=min_recall, store_size=store_size, n_pairs=2000,
                             row_norms={"source": 1.0, "target": 1.0}, normalize=True,
                             sides=("document", "query"), qrels=None, budget=budget,
                             candidates=candidates)
    opts = SimpleNamespace(options=options(est, store_size), budget=curve or {}, notes=())
    return inputs, est, opts


def _estimate(method, r, side="document", half=0.012):
    from skalign.plan import Estimate

    return Estimate(method, side, "", r, (r - half, r + half), r, (r - 0.01, r + 0.01), 2000,
                    False, 1.0)


def test_bootstrap_recommended_only_when_clearly_ahead():
    from skalign.plan._recommend import recommend

    def plan_with(boot):
        ests = [_estimate(m, r) for m, r in (("procrustes", 0.680), ("linear", 0.683),
                                             ("bootstrap", boot))]
        return recommend(*_priced(ests)).recommendation

    tie = plan_with(0.690)  # ahead by 0.007, under half its interval (0.012)
    assert tie["method"] == "linear"
    assert any("needs no unpaired samples" in r for r in tie["reasons"])
    assert plan_with(0.700)["method"] == "bootstrap"  # ahead by 0.017


# ------------------------------------------------------- the option that keeps the most in budget
def test_most_within_budget_named_when_its_gain_beats_the_overlap():
    """Stay keeps --min-recall and is recommended (the cheapest); translating with the budget's
    2,000 encoded rows keeps 0.11 more, and the two intervals do not overlap: it is named."""
    from skalign.plan._recommend import most_within_budget, recommend

    curve = {"method": "linear", "n_pairs": [25, 2000], "recall": [0.3, 0.65],
             "store_size": 100_000, "stay": 0.62, "overtakes_stay_at": 2000, "budget": 2000,
             "recall_at_budget": 0.73, "budget_extrapolated": False,
             "recall_at_budget_ci": [0.70, 0.76]}
    priced = _priced([_estimate("linear", 0.65, half=0.05)], stay=0.62, stay_ci=(0.58, 0.66),
                     store_size=100_000, budget=2000, curve=curve)
    rec = recommend(*priced).recommendation
    assert rec["action"] == "stay"  # still the cheapest that keeps 0.6
    most = rec["most_within_budget"]
    assert most["says"] == "translate (linear) keeps +0.11 for 2,000 encodes"
    assert (most["option"], most["encoded_texts"]) == ("translate", 2000)
    assert most["gain"] == pytest.approx(0.11) and most["overlap"] == 0.0
    assert most["recall_ci"] == (0.70, 0.76) and most["against"] == 0.62
    assert rec["reasons"][-1].startswith("most kept within --budget 2,000: translate (linear) "
                                         "keeps +0.11 for 2,000 encodes (recall@10 0.730 "
                                         "[0.700, 0.760] against stay's 0.620")
    # a gain inside the intervals' overlap is not named: translating keeps at most 0.65
    # [0.60, 0.70] here, 0.03 more than staying's 0.62 [0.58, 0.66], and the intervals share 0.06
    options = priced[2].options
    stay = options[0]
    small = dict(curve, recall_at_budget=0.64, recall_at_budget_ci=[0.58, 0.70])
    assert most_within_budget(options[:2], small, 2000, 0.6, stay) is None
    # one option keeping --min-recall is not several
    assert most_within_budget(options, curve, 2000, 0.7, options[-1]) is None
    # without a budget nothing is named
    rec = recommend(*_priced([_estimate("linear", 0.65, half=0.05)], stay=0.62,
                             stay_ci=(0.58, 0.66), curve=curve)).recommendation
    assert rec["most_within_budget"] is None
    assert not any(r.startswith("most kept") for r in rec["reasons"])


def test_most_within_budget_counts_one_off_encodes_only():
    """Re-embedding is within a budget that covers the store; translate + rerank, which encodes
    per query, is never counted against a one-off budget."""
    from skalign.plan._recommend import recommend

    rerank = {"k_candidates": 50, "recall_at_10": 0.95, "recall_ci": (0.93, 0.97),
              "supported": True}
    ests = [_estimate("linear", 0.70, half=0.02)]
    rec = recommend(*_priced(ests, stay=0.3, store_size=1000, budget=1000,
                             rerank=rerank)).recommendation
    assert rec["action"] == "translate"
    assert rec["most_within_budget"]["says"] == "re-embed keeps +0.30 for 1,000 encodes"
    rec = recommend(*_priced(ests, stay=0.3, store_size=1000, budget=999,
                             rerank=rerank)).recommendation
    assert rec["most_within_budget"] is None  # the store is larger; rerank is per query


def test_most_within_budget_in_the_text_json_and_figure(pair_files, tmp_path, capsys):
    """On real pairs: staying keeps --min-recall 0.5 and is recommended, a translation keeps
    more with no text encoded; the plan names it in its text, its JSON and its figure."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from skalign.plan._report import _figure

    argv = ["plan", "--source", pair_files / "a.npy", "--target", pair_files / "b.npy",
            "--methods", "procrustes", "--no-curve", "--min-recall", "0.5", "--budget", "100"]
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    plan = json.loads(out)
    rec = plan["recommendation"]
    options = {o["option"]: o for o in plan["options"]}
    assert rec["action"] == "stay" and options["stay"]["recall"] >= 0.5
    most = rec["most_within_budget"]
    # within a budget of 100 encodes (the store is 200): stay, translate and bridge queries
    top = max((options[o] for o in ("stay", "translate", "bridge queries")),
              key=lambda o: o["recall"])
    assert top["option"] != "stay" and most["option"] == top["option"]
    assert most["recall"] == top["recall"] and most["encoded_texts"] == 0
    assert most["gain"] == pytest.approx(top["recall"] - options["stay"]["recall"])
    overlap = max(min(top["recall_ci"][1], options["stay"]["recall_ci"][1])
                  - max(top["recall_ci"][0], options["stay"]["recall_ci"][0]), 0)
    assert most["gain"] > overlap and most["overlap"] == pytest.approx(overlap)
    assert most["says"] == (f"{top['option']} (procrustes) keeps {most['gain']:+.2f} for no "
                            "encodes")
    status, out, _ = run(capsys, *argv)
    assert status == 0 and f"within the budget: {most['says']}" in out
    real = plan_migration(*_pair_rows(pair_files), methods=["procrustes"], curve=False,
                          min_recall=0.5, budget=100)
    assert real.recommendation["most_within_budget"]["says"] == most["says"]
    fig = _figure(real)
    assert most["says"] in fig.axes[1].get_title()
    plt.close(fig)


def _pair_rows(pair_files):
    return np.load(pair_files / "a.npy"), np.load(pair_files / "b.npy")


def test_unrelated_target_space_says_re_embed(docstring_pair):
    A, _, perm = docstring_pair
    X = A[perm[:300]]
    Y = np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32)
    plan = plan_migration(X, Y, methods=["procrustes", "linear"], curve=False, n_resamples=100)
    assert plan.normalized
    assert plan.recommendation["action"] == "re-embed"
    assert plan.best().recall < 0.2
    assert plan.ceiling["recall"] < plan.min_recall
    assert any("even the ceiling" in r for r in plan.recommendation["reasons"])


def test_normalize_and_errors(docstring_pair):
    A, B, perm = docstring_pair
    p = plan_migration(A[perm[:60]], B[perm[:60]], methods=["procrustes"], sides=("document",),
                       curve=False, normalize=True, n_resamples=50)
    assert p.normalized and [e.side for e in p.estimates] == ["document"]
    with pytest.raises(ValueError, match="unknown plan method"):
        plan_migration(A[:60], B[:60], methods=["nope"])
    with pytest.raises(ValueError, match="unpaired samples of both stores"):
        plan_migration(A[:60], B[:60], methods=["bootstrap"])
    with pytest.raises(ValueError, match="at least"):
        plan_migration(A[:15], B[:15])
    assert "bootstrap" in candidate_methods()


def test_report_png_and_html(real_plan, tmp_path):
    png = write_report(real_plan, tmp_path / "r.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = write_report(real_plan, tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page and "recommendation" in page
    with pytest.raises(ValueError, match=".png or .html"):
        write_report(real_plan, tmp_path / "r.pdf")


# ------------------------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def pair_files(docstring_pair, tmp_path_factory):
    A, B, perm = docstring_pair
    d = tmp_path_factory.mktemp("plan")
    np.save(d / "a.npy", A[perm[:200]])
    np.save(d / "b.npy", B[perm[:200]])
    np.save(d / "b_short.npy", B[perm[:150]])
    return d


def test_cli_plan_json_schema(pair_files, tmp_path, capsys):
    report = tmp_path / "plan.png"
    status, out, err = run(capsys, "plan", "--source", pair_files / "a.npy", "--target",
                           pair_files / "b.npy", "--methods", "procrustes", "--no-curve",
                           "--json", "--report", report)
    assert status == 0, err
    plan = json.loads(out)
    assert set(plan) >= {"n_pairs", "k", "normalized", "row_norms", "estimates", "ceiling",
                         "recommendation", "learning_curve", "store_size", "seconds"}
    assert plan["n_pairs"] == 200 and plan["k"] == 10 and plan["normalized"] is True
    for e in plan["estimates"]:
        assert set(e) >= {"method", "side", "recall", "recall_ci", "ndcg", "ndcg_ci", "how"}
        assert 0 <= e["recall_ci"][0] <= e["recall"] <= e["recall_ci"][1] <= 1
    assert plan["recommendation"]["action"] in ACTIONS
    assert report.read_bytes()[:4] == b"\x89PNG"


def test_cli_plan_text(pair_files, capsys):
    status, out, _ = run(capsys, "plan", "--source", pair_files / "a.npy", "--target",
                         pair_files / "b.npy", "--methods", "procrustes", "--no-curve")
    assert status == 0
    assert "recommendation:" in out and "procrustes" in out and "L2-normalised" in out
    status, out, _ = run(capsys, "plan", "--source", pair_files / "a.npy", "--target",
                         pair_files / "b.npy", "--methods", "procrustes", "--no-curve",
                         "--no-normalize")
    assert status == 0 and "not normalised" in out


@pytest.mark.parametrize("extra, match", [
    (["--target", "b_short.npy"], "has 200 rows but --target"),
    (["--methods", "procrustes,nope"], "unknown method 'nope'"),
    (["--report", "out.pdf"], "must end in .png or .html"),
    (["--min-recall", "2"], "--min-recall must be in"),
    (["--methods", "bootstrap"], "unpaired samples of both stores"),
    (["--id-column", "id"], "needs a Parquet or LanceDB"),
])
def test_cli_plan_errors_exit_2_one_line(pair_files, tmp_path, capsys, extra, match):
    argv = ["plan", "--source", pair_files / "a.npy", "--target", pair_files / "b.npy",
            "--no-curve"]
    for i, v in enumerate(extra):
        argv.append(pair_files / v if v.endswith(".npy") else
                    tmp_path / v if v.endswith(".pdf") else v)
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and match in err
    assert not (tmp_path / "out.pdf").exists()


def test_cli_plan_id_column_names_a_missing_id(docstring_pair, tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    A, B, perm = docstring_pair

    def table(M, ids):
        vec = pa.FixedSizeListArray.from_arrays(pa.array(M.reshape(-1)), M.shape[1])
        return pa.table({"doc_id": pa.array(ids), "vector": vec})

    ids = [f"doc{i}" for i in range(120)]
    # the source store holds the items in another order: pairs are matched by id, not by row
    order = np.random.default_rng(1).permutation(120)
    pq.write_table(table(A[perm[:120]][order], [ids[i] for i in order]), tmp_path / "a.parquet")
    pq.write_table(table(B[perm[:120]], ids), tmp_path / "b.parquet")
    status, out, err = run(capsys, "plan", "--source", tmp_path / "a.parquet", "--target",
                           tmp_path / "b.parquet", "--id-column", "doc_id", "--methods",
                           "procrustes", "--no-curve", "--json")
    assert status == 0, err
    by_id = json.loads(out)["estimates"][0]["recall"]
    by_row = plan_migration(A[perm[:120]], B[perm[:120]], methods=["procrustes"], curve=False,
                            n_resamples=1000).estimates[0].recall
    assert by_id == pytest.approx(by_row)
    # an id of the target only: its row is left out, with a warning that counts it
    pq.write_table(table(B[perm[:121]], ids + ["doc_new"]), tmp_path / "b2.parquet")
    status, out, err = run(capsys, "plan", "--source", tmp_path / "a.parquet", "--target",
                           tmp_path / "b2.parquet", "--id-column", "doc_id", "--methods",
                           "procrustes", "--no-curve", "--json")
    assert status == 0, err
    assert json.loads(out)["estimates"][0]["recall"] == pytest.approx(by_row)
    assert ("skalign plan: warning: 1 id of --target (e.g. 'doc_new') is not in --source; "
            "using the 120 pairs") in err


def test_translate_direction_inverse(pair_files, tmp_path, capsys, docstring_pair):
    A, B, perm = docstring_pair
    model = ProcrustesAligner().fit(A[perm[:200]], B[perm[:200]])
    save(model, tmp_path / "m.skops")
    status, out, err = run(capsys, "translate", tmp_path / "m.skops", pair_files / "b.npy",
                           tmp_path / "q.npy", "--direction", "inverse", "--quiet")
    assert status == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"),
                               model.inverse_transform(B[perm[:200]]), atol=1e-5)
    # the wrong width for the inverse direction is refused like any other
    status, _, err = run(capsys, "translate", tmp_path / "m.skops", pair_files / "a.npy",
                         tmp_path / "q2.npy", "--direction", "inverse", "--quiet")
    assert status == 2 and "768-d" in err and not (tmp_path / "q2.npy").exists()
    save(LinearAligner().fit(A[perm[:200]], B[perm[:200]]), tmp_path / "lin.skops")
    status, out, err = run(capsys, "translate", tmp_path / "lin.skops", pair_files / "b.npy",
                           tmp_path / "q3.npy", "--direction", "inverse")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "no inverse_transform" in err and not (tmp_path / "q3.npy").exists()


def test_substores_read_off_the_rankings_match_ranking_each_substore(docstring_pair):
    """Each sub-store's top-k read off the store's rankings gives the per-item recall and nDCG
    that ranking the sub-store itself gives (skalign.metrics.retrieval_retention), down to the
    sub-stores too small a share of the store to be read (those are ranked on their own)."""
    from skalign.metrics import retrieval_retention
    from skalign.plan._estimate import _depth, _ranked, _retention, _within

    A, B, perm = docstring_pair
    Y, X = B[perm[:600]], A[perm[:600]]
    W = np.linalg.lstsq(X, Y, rcond=None)[0]
    index = X @ W
    k = 10
    true, pred = _ranked(Y, Y, _depth(len(Y), k)), _ranked(Y, index, _depth(len(Y), k))
    rng = np.random.default_rng(0)
    read = 0
    for size in (600, 300, 150, 40):
        idx = np.sort(rng.choice(len(Y), size, replace=False))
        R, S = _within(true, idx, k), _within(pred, idx, k)
        if R is None or S is None:
            assert size < 600  # the whole store is always read
            continue
        read += 1
        recall, ndcg = _retention(R, S, k)
        ref = retrieval_retention(Y[idx], index[idx], Y[idx], Y[idx], k=k, exclude_self=True,
                                  per_query=True)
        np.testing.assert_array_equal(recall, ref["recall"])
        np.testing.assert_array_equal(ndcg, ref["ndcg"])
    assert read >= 3
