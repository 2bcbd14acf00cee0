"""skalign against isotrieve and rebasis on real encoders: what a migration keeps, and go/no-go.

Data: ``../shared/data/docstrings_en.npz`` (4,000 English sentences by MiniLM, MPNet and
multilingual-e5), every ordered encoder pair, split by a seeded permutation into a *plan half*
and a *held-out store* (2,000 each). The known pairs are the plan half's first ``N``; its texts
by each encoder (the new ones shuffled) are unpaired samples (only skalign's bootstrap uses
them). ``skalign plan`` (default candidates, ``store_size`` 2,000, no learning curve) predicts
each method's retention and recommends an option per ``--min-recall``; every method is fitted on
the pairs and **measured** on the store (recall@10 and nDCG@10 against re-embedding, each store
text a leave-one-out query; top-1; seconds). ``side=document`` translates the stored vectors,
``side=query`` maps new queries into the old index. Peers, through their Python APIs:

* ``isotrieve`` 0.4.0: ``RidgeMapping(alpha="auto")``, query side its ``inverse_transform``.
  Go: its ``QualityGate`` on the 10% of pairs the fit holds out, ``pass_retention`` set to the
  threshold, says PASS (``isotrieve gate`` exit code 0).
* ``rebasis`` 0.1.0: ``fit_candidates``, ``select_best`` on recall@10 retention on the fitted
  pairs as ``fit_migration_adapter`` scores (computed with skalign's metric: its scorer needs a
  ``GroundTruth`` built from texts); query side fitted new → old. Go: ``rebasis.probe.decide``
  on that score (staying measured on the pairs; no threshold, bands 0.95 / 0.85 / 0.70) says
  anything but ``full_reindex``. Install with ``pip install --ignore-requires-python
  rebasis==0.1.0``; the three ``def f[T](...)`` that need Python 3.12 are removed at import.
* skalign: go when the plan recommends translate, bridge queries or translate + rerank.

The truth: each tool's chosen map (skalign: the recommended one, else the best estimated; peers:
document side), measured, is go when its recall@10 (after the rerank, for translate + rerank)
reaches the threshold and beats staying (the old model's top-10 against the new one's).
``--quick``: one encoder pair, 100 pairs. ``--combos`` splits a run over processes (each its own
``--csv``, ``--verdict-csv``), ``--merge`` joins them. The verdicts were made with::

    OMP_NUM_THREADS=1 python benchmarks/bench_migrate_peers.py --pairs 25 200 2000 --combos \
        minilm_l6:mpnet_base mpnet_base:me5_small_q4 me5_small_q4:minilm_l6 --csv a.csv \
        --verdict-csv av.csv    # and the other three pairs into b.csv, bv.csv
    python benchmarks/bench_migrate_peers.py --merge av.csv bv.csv \
        --verdict-csv benchmarks/results/migrate_peers_verdicts.csv \
        --summary-csv benchmarks/results/migrate_peers_verdicts_summary.csv \
        --verdict-doc-csv doc/user_guide/migrate_peers_verdicts.csv

The retention table (``--csv``, ``--doc-csv``, ``--summary-csv``) used ``--pairs 25 100 500 2000``.
"""

import argparse
import csv
import importlib.abc
import importlib.machinery
import itertools
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import write_figures

from skalign import UnpairedPool
from skalign.metrics import retrieval_retention, top_k_accuracy
from skalign.plan import make_candidate, plan_migration

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
ENCODERS = ("minilm_l6", "mpnet_base", "me5_small_q4")
FIELDS = ["source", "target", "n_pairs", "tool", "method", "side", "recommended",
          "predicted_recall", "predicted_ndcg", "recall", "ndcg", "top1", "fit_s", "translate_s"]


# ------------------------------------------------------------------------------------ peers
class _StripTypeParams(importlib.abc.MetaPathFinder):
    """Loads ``rebasis.*`` with ``def name[T](`` rewritten to ``def name(`` (Python 3.11)."""

    class Loader(importlib.machinery.SourceFileLoader):
        def source_to_code(self, data, path, *, _optimize=-1):
            text = re.sub(rb"\bdef (\w+)\[\w+\]\(", rb"def \1(", data)
            return compile(text, path, "exec", dont_inherit=True, optimize=_optimize)

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("rebasis"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not str(spec.origin).endswith(".py"):
            return spec
        spec.loader = self.Loader(name, spec.origin)
        return spec


def _load_rebasis():
    if "rebasis.core" not in sys.modules:
        if sys.version_info < (3, 12):
            sys.meta_path.insert(0, _StripTypeParams())
        import logging

        import structlog

        # rebasis logs every fitted candidate to standard output; keep the table readable
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    import rebasis.core

    return rebasis.core


def fit_isotrieve(Xp, Yp, side, seed=0):
    """RidgeMapping; document side also its gate, on the 10% of pairs it holds out of the fit."""
    from isotrieve import RidgeMapping
    from isotrieve.quality.gate import QualityGate
    from sklearn.model_selection import train_test_split

    m = RidgeMapping(alpha="auto", seed=seed).fit(Xp, Yp)
    if side == "query":
        return "RidgeMapping (inverse)", m.inverse_transform, None
    _, Xh, _, Yh = train_test_split(Xp, Yp, test_size=0.1, random_state=seed)

    def verdict(thr):  # the gate's exit code: 0 (PASS) is go, 1 (WARN or FAIL) is not
        gate = QualityGate({"pass_retention": thr, "warn_retention": min(0.55, thr)})
        return gate.evaluate(m, Xh, Yh).verdict.value
    return "RidgeMapping", m.transform, verdict


def fit_rebasis(Xp, Yp, side):
    """select_best on in-sample recall@10; document side also ``decide`` on that score."""
    core = _load_rebasis()
    src, dst = (Xp, Yp) if side == "document" else (Yp, Xp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cands = core.fit_candidates(src, dst, normalize=True)
    s, d = core.l2_normalize(src), core.l2_normalize(dst)
    k = min(10, len(s) - 1)
    for c in cands:  # in-sample recall@k retention, as rebasis scores its migration candidates
        m = c.adapter.apply(s)
        c.score = retrieval_retention(*((d, m) if side == "document" else (s, d, s, m)), k=k,
                                      exclude_self=True)["recall"]
    best = core.select_best(cands)
    mapper = lambda A: best.adapter.apply(core.l2_normalize(A))  # noqa: E731
    if side == "query":
        return best.method, mapper, None
    from rebasis.probe import decide  # its own rule, staying measured on the pairs

    stay = retrieval_retention(d, s, d, s, k=k, exclude_self=True)["recall"]
    decision = decide(best.score, old_model_arr=stay).decision
    return best.method, mapper, lambda thr: decision  # no threshold: the same at every one


# ------------------------------------------------------------------------------- measuring
def measure(side, mapper, Xs, Ys):
    """Retention, top-1 and translate seconds of one fitted map on the held-out store."""
    t0 = time.perf_counter()
    out = np.asarray(mapper(Xs if side == "document" else Ys), dtype=np.float32)
    secs = time.perf_counter() - t0
    if side == "document":
        return (*retrieval_retention(Ys, out).values(), top_k_accuracy(Ys, out), secs)
    return (*retrieval_retention(Ys, Xs, Ys, out, exclude_self=True).values(),
            top_k_accuracy(Xs, out), secs)


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def skalign_mapper(name, Xp, Yp, pool, side, random_state=0):
    """The plan's candidate fitted on L2-normalised rows (the plan's default), as a function."""
    Xp, Yp, pool = unit(Xp), unit(Yp), UnpairedPool(X=unit(pool.X), y=unit(pool.y))
    est = make_candidate(name, len(Xp), random_state)
    kwargs = {"unpaired": pool} if name == "bootstrap" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(Xp, Yp, **kwargs)
        if side == "document" or hasattr(est, "inverse_transform"):
            f = est.transform if side == "document" else est.inverse_transform
        else:
            kwargs = {"unpaired": UnpairedPool(X=pool.y, y=pool.X)} if kwargs else {}
            f = make_candidate(name, len(Xp), random_state).fit(Yp, Xp, **kwargs).transform
    return lambda A: f(unit(A))


GO = {"isotrieve": {"PASS"}, "rebasis": {"bridge_sufficient", "bridge_and_migrate", "caution"},
      "skalign": {"translate", "bridge queries", "translate + rerank"}}
VFIELDS = ["source", "target", "n_pairs", "min_recall", "tool", "verdict", "go", "method", "side",
           "recall", "stay", "truth", "disagrees"]


def rerank_recall(Ys, index, K, k=10):
    """Share of each store text's true top-``k`` inside the translated index's top-``K``: the
    recall@k once those ``K`` are re-scored by the new encoder (leave-one-out, averaged)."""
    true, cand = unit(Ys) @ unit(Ys).T, unit(Ys) @ unit(index).T
    for M in (true, cand):
        np.fill_diagonal(M, -np.inf)
    top = np.argpartition(-true, k, axis=1)[:, :k]
    pool = np.argpartition(-cand, K, axis=1)[:, :K]
    return float(np.mean([len(np.intersect1d(t, c)) / k for t, c in zip(top, pool)]))


def run_pair(E, src, tgt, counts, thresholds=(0.6, 0.4), seed=0, out=print):
    """Rows of every fitted map, and per threshold each tool's go/no-go against the truth."""
    X, Y = E[src], E[tgt]
    perm = np.random.default_rng(seed).permutation(len(X))
    half, store = perm[:2000], perm[2000:4000]
    Xs, Ys = X[store], Y[store]
    pool = UnpairedPool(X=X[half], y=Y[np.random.default_rng(seed + 1).permutation(half)])
    stay = retrieval_retention(Ys, Xs, Ys, Xs, exclude_self=True)["recall"]
    rows, verdicts = [], []
    for n in counts:
        Xp, Yp, fits = X[half[:n]], Y[half[:n]], {}
        plans = {t: plan_migration(Xp, Yp, unpaired=pool, store_size=len(store), curve=False,
                                   n_resamples=200, random_state=seed, min_recall=t)
                 for t in thresholds}
        rec, ests = plans[thresholds[0]].recommendation, plans[thresholds[0]].estimates
        fitters = [("skalign", e.side, lambda e=e: (e.method, skalign_mapper(
            e.method, Xp, Yp, pool, e.side, seed), None), e) for e in ests]
        fitters += [(tool, side, lambda f=f, side=side: f(Xp, Yp, side), None) for tool, f in
                    (("isotrieve", fit_isotrieve), ("rebasis", fit_rebasis))
                    for side in ("document", "query")]
        for tool, side, fit, e in fitters:
            t0 = time.perf_counter()
            try:
                method, mapper, verdict = fit()
            except Exception as exc:  # a peer refusing the input is a result too
                out(f"  {tool} {side} at {n} pairs failed: {type(exc).__name__}: {exc}")
                continue
            fit_s = time.perf_counter() - t0
            recall, ndcg, top1, tr_s = measure(side, mapper, Xs, Ys)
            fits[tool, method, side] = verdict, mapper, recall
            planned = ("", "", "") if e is None else (int((rec["method"], rec["side"]) == (
                method, side)), e.recall, e.ndcg)
            rows.append(dict(zip(FIELDS, (src, tgt, n, tool, method, side, *planned, recall,
                                          ndcg, top1, fit_s, tr_s))))
            out("  " + " ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                for v in rows[-1].values()))
        for t, p in plans.items():
            r, best = p.recommendation, p.best()
            picks = [("skalign", r["action"], r["method"] or best.method, r["side"] or best.side)]
            picks += [(tool, v(t), m, side) for (tool, m, side), (v, _, _) in fits.items() if v]
            for tool, verdict, method, side in picks:
                _, mapper, recall = fits[tool, method, side]
                if verdict == "translate + rerank":
                    recall = rerank_recall(Ys, mapper(Xs), p.rerank["k_candidates"])
                go, truth = verdict in GO[tool], recall >= t and recall > stay
                verdicts.append(dict(source=src, target=tgt, n_pairs=n, min_recall=t, tool=tool,
                                     verdict=verdict, go=int(go), method=method, side=side,
                                     recall=recall, stay=stay, truth=int(truth),
                                     disagrees=int(go != truth)))
                out("  " + " ".join(str(v) for v in verdicts[-1].values()))
    return rows, verdicts


def summarise(rows, out=print):
    """The issue's targets, checked on the rows; returns them as ``{key: value}``."""
    err = {}
    for r in rows:
        if r["tool"] == "skalign":
            err.setdefault(r["n_pairs"], []).append(abs(r["predicted_recall"] - r["recall"]))
    figures = {}
    for tag, e in [("", np.concatenate(list(err.values())))] + [
            (f"_n{n}", np.array(v)) for n, v in sorted(err.items())]:
        figures.update({f"prediction_rows{tag}": len(e),
                        f"prediction_within_005{tag}": int(sum(e <= .05)),
                        f"prediction_median_abs_error{tag}": float(np.median(e)),
                        f"prediction_max_abs_error{tag}": float(np.max(e))})
        out(f"prediction{tag or ' (all rows)'}: {sum(e <= .05)}/{len(e)} within 0.05 of the "
            f"held-out recall@10, median |error| {np.median(e):.3f}, max {np.max(e):.3f}")
    n_ahead = n_cells = 0
    lo, hi = min(r["n_pairs"] for r in rows), max(r["n_pairs"] for r in rows)
    ratios, gains = [], []
    for key in sorted({(r["source"], r["target"]) for r in rows}):
        sel = [r for r in rows if (r["source"], r["target"]) == key]
        peers_hi = max((r["recall"] for r in sel if r["tool"] != "skalign"
                        and r["n_pairs"] == hi), default=None)
        for n in sorted({r["n_pairs"] for r in sel}):
            rec = [r for r in sel if r["n_pairs"] == n and r["recommended"] == 1]
            peers = [r["recall"] for r in sel if r["n_pairs"] == n and r["tool"] != "skalign"]
            if rec:
                n_cells += 1
                n_ahead += bool(not peers or rec[0]["recall"] >= max(peers))
                out(f"{key[0]} -> {key[1]} {n:>5} pairs: recommended {rec[0]['method']}/"
                    f"{rec[0]['side']} keeps {rec[0]['recall']:.3f}; best peer "
                    f"{max(peers, default=np.nan):.3f}, at {hi} pairs {peers_hi or np.nan:.3f}")
            if rec and n == lo and peers_hi:  # the fewest pairs against the peers' most
                ratios.append(rec[0]["recall"] / peers_hi)
        doc = {r["method"]: r["recall"] for r in sel if r["n_pairs"] == hi and
               r["tool"] == "skalign" and r["side"] == "document"}
        if "linear" in doc and "procrustes" in doc:
            gains.append(doc["linear"] - doc["procrustes"])
    figures.update(recommended_cells=n_cells, recommended_at_least_best_peer=n_ahead)
    out(f"recommended method >= best peer in {n_ahead}/{n_cells} (encoder pair, pair count)")
    if ratios:
        figures.update(few_pair_ratio_min=min(ratios), few_pair_ratio_max=max(ratios),
                       few_pair_cells=len(ratios),
                       few_pair_cells_at_least_095=int(sum(x >= 0.95 for x in ratios)))
        out(f"at {lo} pairs: {figures['few_pair_cells_at_least_095']}/{len(ratios)} encoder "
            f"pairs keep >= 0.95 x the best peer at {hi} ({min(ratios):.3f}-{max(ratios):.3f})")
    if gains:
        figures.update(ridge_minus_procrustes_min=min(gains), ridge_minus_procrustes_max=max(gains))
    return figures


SHORT = {"minilm_l6": "MiniLM", "mpnet_base": "MPNet", "me5_small_q4": "e5"}


def write_doc_csv(rows, path):
    """The user guide's table: per encoder pair and pair count, every tool's best row."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["encoders", "pairs", "tool (method, side)", "recall@10", "nDCG@10", "top-1",
                    "predicted recall@10", "fit s", "translate s"])
        key = lambda r: (r["source"], r["target"], r["n_pairs"])  # noqa: E731
        for (s, t, n), grp in itertools.groupby(sorted(rows, key=key), key=key):
            grp = sorted(grp, key=lambda r: -r["recall"])
            picks = [r for r in grp if r["recommended"] == 1]
            picks += [next(r for r in grp if r["tool"] == tool) for tool in ("isotrieve",
                      "rebasis") if any(r["tool"] == tool for r in grp)]
            picks += [r for r in grp if r["tool"] == "skalign" and r["method"] == "procrustes"
                      and r["side"] == "document" and r not in picks]
            for r in picks:
                pred = f"{r['predicted_recall']:.3f}" if r["predicted_recall"] != "" else "-"
                w.writerow([f"{SHORT[s]} -> {SHORT[t]}", n, ("skalign plan's pick" if
                            r["recommended"] == 1 else r["tool"]) + f" ({r['method']}, "
                            f"{r['side']})", f"{r['recall']:.3f}", f"{r['ndcg']:.3f}",
                            f"{r['top1']:.3f}", pred, f"{r['fit_s']:.2f}",
                            f"{r['translate_s']:.3f}"])


def score_verdicts(verdicts, out=print):
    """Per tool and threshold: agreements with the truth, false go, false no-go."""
    figures = {}
    for (tool, t), g in itertools.groupby(sorted(verdicts, key=lambda v: (v["tool"], -v[
            "min_recall"])), key=lambda v: (v["tool"], v["min_recall"])):
        g = list(g)
        fgo, fno = (sum(v["go"] == go and v["disagrees"] for v in g) for go in (1, 0))
        stays = sum(v["verdict"] == "stay" and v["disagrees"] and v["stay"] >= t for v in g)
        figures.update({f"{tool}_{round(100 * t)}_{key}": x for key, x in (
            ("cells", len(g)), ("agree", len(g) - fgo - fno), ("false_go", fgo),
            ("false_no_go", fno), ("false_no_go_stay_kept", stays))})
        out(f"{tool:>9} at min recall@10 {t:.2f}: agrees {len(g) - fgo - fno}/{len(g)}, false "
            f"go {fgo}, false no-go {fno} ({stays} of them stay, which kept the threshold)")
    return figures


def write_verdict_doc_csv(verdicts, path):
    """The user guide's go/no-go table: one row per encoder pair, pair count and threshold."""
    cells = {}
    for v in verdicts:
        mark = {(1, 0): "; false go", (0, 1): "; false no-go"}.get((v["go"], v["truth"]), "")
        cells.setdefault((v["source"], v["target"], v["n_pairs"], -v["min_recall"]), {
            "stay": f"{v['stay']:.3f}"})[v["tool"]] = (
            f"{v['verdict']}: {'go' if v['go'] else 'no-go'} ({v['recall']:.3f}){mark}")
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["encoders", "pairs", "min recall@10", "stay recall@10",
                                  "skalign plan (measured)", "isotrieve gate (measured)",
                                  "rebasis decide (measured)"]] + [
            [f"{SHORT[s]} -> {SHORT[t]}", n, f"{-m:.2f}", c["stay"]] + [c.get(tool, "refused")
             for tool in ("skalign", "isotrieve", "rebasis")] for (s, t, n, m), c in
            sorted(cells.items(), key=lambda i: (SHORT[i[0][0]], SHORT[i[0][1]], *i[0][2:]))])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, nargs="+", default=[25, 100, 500, 2000])
    p.add_argument("--min-recall", type=float, nargs="+", default=[0.6, 0.4])
    p.add_argument("--encoders", nargs="+", default=list(ENCODERS))
    for name, what in (("csv", "every row"), ("doc-csv", "the user guide's table"),
                       ("summary-csv", "the summary's figures (key,value)"),
                       ("verdict-csv", "every go/no-go"),
                       ("verdict-doc-csv", "the user guide's go/no-go table")):
        p.add_argument(f"--{name}", default=None, help=f"write {what} to this CSV")
    p.add_argument("--combos", nargs="+", metavar="SRC:TGT", help="only these encoder pairs")
    p.add_argument("--merge", nargs="+", metavar="CSV", help="no runs: join earlier CSVs")
    p.add_argument("--quick", action="store_true", help="one encoder pair, 100 pairs")
    args = p.parse_args(argv)
    rows, verdicts = [], []
    for m in map(read_csv, args.merge or []):
        (verdicts if m and "truth" in m[0] else rows).extend(m)
    if not args.merge:
        import torch

        torch.set_num_threads(1)
        Z = np.load(args.npz)
        E = {k: Z[k].astype(np.float32) for k in args.encoders}
        combos = [tuple(c.split(":")) for c in args.combos or []] or list(
            itertools.permutations(args.encoders, 2))
        if args.quick:
            combos, args.pairs = combos[:1], [100]
        t0 = time.time()
        for src, tgt in combos:
            print(f"{src} -> {tgt}  ({time.time() - t0:.0f} s)\n  " + " ".join(FIELDS) + "\n  "
                  + " ".join(VFIELDS))
            more = run_pair(E, src, tgt, args.pairs, tuple(args.min_recall))
            rows, verdicts = rows + more[0], verdicts + more[1]
            write_csv(args.csv, FIELDS, rows)
            write_csv(args.verdict_csv, VFIELDS, verdicts)
    else:
        write_csv(args.csv, FIELDS, rows)
        write_csv(args.verdict_csv, VFIELDS, verdicts)
    figures = (summarise(rows) if rows else {}) | (score_verdicts(verdicts) if verdicts else {})
    if figures and args.summary_csv:
        write_figures(args.summary_csv, figures)
    if rows and args.doc_csv:
        write_doc_csv(rows, args.doc_csv)
    if verdicts and args.verdict_doc_csv:
        write_verdict_doc_csv(verdicts, args.verdict_doc_csv)
    return rows, verdicts


def write_csv(path, fields, rows):
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fields)
            w.writeheader()
            w.writerows(rows)


def read_csv(path):
    """Rows written by ``--csv`` or ``--verdict-csv``, numbers back to numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ints, floats = {"n_pairs", "recommended", "go", "truth", "disagrees"}, set(FIELDS[7:])
    for r, key in itertools.product(rows, list(rows[0]) if rows else []):
        if r[key] != "" and key in ints | floats | {"min_recall", "stay"}:
            r[key] = (int if key in ints else float)(r[key])
    return rows


if __name__ == "__main__":
    main()
