"""skalign against isotrieve and rebasis on real encoders: what a migration keeps of re-embedding.

``python benchmarks/bench_migrate_peers.py [NPZ] [--pairs 25 100 500 2000] [--csv OUT]
[--doc-csv OUT] [--summary-csv OUT] [--combos SRC:TGT ...] [--merge CSV ...] [--quick]``

Data: ``../shared/data/docstrings_en.npz`` (4,000 real English sentences embedded by MiniLM,
MPNet and multilingual-e5); every ordered pair of the three encoders. Per encoder pair one seeded
permutation splits the texts into a *plan half* (2,000 texts) and a *held-out store* (the other
2,000). For each pair count ``N``:

* the known pairs are the first ``N`` texts of the plan half; the unpaired samples of the two
  stores are the plan half's 2,000 texts by the old encoder and, shuffled, by the new one (only
  skalign's bootstrap uses them: neither peer has an unpaired mode);
* ``skalign plan`` (:func:`skalign.plan.plan_migration`, default candidates, rows
  L2-normalised (its default), ``store_size`` 2,000, no learning curve) predicts each method's
  retention and recommends one;
* every method is then fitted on the ``N`` pairs and **measured** on the held-out store:
  recall@10 and nDCG@10 of the translated index against the re-embedded one, each of the 2,000
  store texts a leave-one-out query (:func:`skalign.metrics.retrieval_retention`), translation
  top-1 (the nearest re-embedded store text to a translated one is its own), fit and translate
  seconds (translating the 2,000 store rows). ``side=document`` translates the stored vectors
  (old → new); ``side=query`` maps the new encoder's queries into the old index.

Peers, through their Python APIs on the same arrays:

* ``isotrieve`` 0.4.0: ``RidgeMapping(alpha="auto")`` (its calibrate default; GCV ridge, no
  intercept) fitted old → new; the query side uses its ``inverse_transform`` (a second ridge
  new → old it fits alongside).
* ``rebasis`` 0.1.0: ``rebasis.core.fit_candidates`` (procrustes_centered, procrustes, linear,
  low_rank_affine, procrustes_centered+dsm, residual_mlp; rows L2-normalised, its default) then
  ``select_best``, each candidate scored as its ``fit_migration_adapter`` scores them — the
  recall@10 retention on the fitted sample itself (arrays only: its own scorer needs a
  ``GroundTruth`` built by its probe from texts, so the same retention is computed here with
  skalign's metric). Query side: the same on the reversed pairs (its ``fit`` direction, new →
  old). rebasis requires Python >= 3.12 only for three PEP 695 ``def f[T](...)`` annotations;
  under Python 3.11 this script loads it with those three type-parameter lists removed at import
  (annotations only, no behaviour changes; see ``_load_rebasis``).

Run with ``OMP_NUM_THREADS=1`` on a shared machine. ``--quick``: one encoder pair, 100 pairs.
``--combos SRC:TGT ...`` runs only some encoder pairs (split a run over processes, each with its
own ``--csv``); ``--merge A.csv B.csv ... --csv ALL.csv --doc-csv T.csv`` joins them and writes
the summary and the user guide's table. The committed results were made with::

    OMP_NUM_THREADS=1 python benchmarks/bench_migrate_peers.py --combos minilm_l6:mpnet_base \
        minilm_l6:me5_small_q4 --csv a.csv    # likewise mpnet_base:*, me5_small_q4:*
    python benchmarks/bench_migrate_peers.py --merge a.csv b.csv c.csv \
        --csv benchmarks/results/migrate_peers.csv --doc-csv doc/user_guide/migrate_peers.csv \
        --summary-csv benchmarks/results/migrate_peers_summary.csv
"""

import argparse
import csv
import importlib.abc
import importlib.machinery
import importlib.util
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


def fit_isotrieve(Xp, Yp, side):
    from isotrieve import RidgeMapping

    m = RidgeMapping(alpha="auto", seed=0)
    if side == "document":
        m.fit(Xp, Yp)
        return "RidgeMapping", lambda A: m.transform(A)
    m.fit(Xp, Yp)
    return "RidgeMapping (inverse)", lambda B: m.inverse_transform(B)


def fit_rebasis(Xp, Yp, side):
    core = _load_rebasis()
    src, dst = (Xp, Yp) if side == "document" else (Yp, Xp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cands = core.fit_candidates(src, dst, normalize=True)
    s, d = core.l2_normalize(src), core.l2_normalize(dst)
    k = min(10, len(s) - 1)
    for c in cands:  # in-sample recall@k retention, as rebasis scores its migration candidates
        mapped = c.adapter.apply(s)
        if side == "document":
            c.score = retrieval_retention(d, mapped, k=k)["recall"]
        else:
            c.score = retrieval_retention(s, d, s, mapped, k=k, exclude_self=True)["recall"]
    best = core.select_best(cands)
    return best.method, lambda A: best.adapter.apply(core.l2_normalize(A))


# ------------------------------------------------------------------------------- measuring
def measure(side, mapper, Xs, Ys):
    """Retention, top-1 and translate seconds of one fitted map on the held-out store."""
    t0 = time.perf_counter()
    if side == "document":
        index = np.asarray(mapper(Xs), dtype=np.float32)
        secs = time.perf_counter() - t0
        r = retrieval_retention(Ys, index)
        top1 = top_k_accuracy(Ys, index)
    else:
        queries = np.asarray(mapper(Ys), dtype=np.float32)
        secs = time.perf_counter() - t0
        r = retrieval_retention(Ys, Xs, Ys, queries, exclude_self=True)
        top1 = top_k_accuracy(Xs, queries)
    return r["recall"], r["ndcg"], top1, secs


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def skalign_mapper(name, Xp, Yp, pool, side, random_state=0):
    """The plan's candidate fitted on L2-normalised rows (the plan's default), as a function."""
    mapper = _skalign_fit(name, unit(Xp), unit(Yp),
                          UnpairedPool(X=unit(pool.X), y=unit(pool.y)), side, random_state)
    return lambda A: mapper(unit(A))


def _skalign_fit(name, Xp, Yp, pool, side, random_state):
    est = make_candidate(name, len(Xp), random_state)
    kwargs = {"unpaired": pool} if name == "bootstrap" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(Xp, Yp, **kwargs)
        if side == "document":
            return est.transform
        if hasattr(est, "inverse_transform"):
            return est.inverse_transform
        rev = make_candidate(name, len(Xp), random_state)
        if kwargs:
            kwargs = {"unpaired": UnpairedPool(X=pool.y, y=pool.X)}
        return rev.fit(Yp, Xp, **kwargs).transform


def run_pair(E, src, tgt, counts, seed=0, out=print):
    X, Y = E[src], E[tgt]
    perm = np.random.default_rng(seed).permutation(len(X))
    half, store = perm[:2000], perm[2000:4000]
    Xs, Ys = X[store], Y[store]
    pool = UnpairedPool(X=X[half], y=Y[np.random.default_rng(seed + 1).permutation(half)])
    rows = []
    for n in counts:
        pairs = half[:n]
        Xp, Yp = X[pairs], Y[pairs]
        plan = plan_migration(Xp, Yp, unpaired=pool, store_size=len(store), curve=False,
                              n_resamples=200, random_state=seed)
        rec = plan.recommendation
        for e in plan.estimates:
            t0 = time.perf_counter()
            mapper = skalign_mapper(e.method, Xp, Yp, pool, e.side, seed)
            fit_s = time.perf_counter() - t0
            recall, ndcg, top1, tr_s = measure(e.side, mapper, Xs, Ys)
            rows.append(dict(source=src, target=tgt, n_pairs=n, tool="skalign", method=e.method,
                             side=e.side, recommended=int(rec["method"] == e.method and
                                                          rec["side"] == e.side),
                             predicted_recall=e.recall, predicted_ndcg=e.ndcg, recall=recall,
                             ndcg=ndcg, top1=top1, fit_s=fit_s, translate_s=tr_s))
        for tool, fitter in (("isotrieve", fit_isotrieve), ("rebasis", fit_rebasis)):
            for side in ("document", "query"):
                t0 = time.perf_counter()
                try:
                    method, mapper = fitter(Xp, Yp, side)
                except Exception as exc:  # a peer refusing the input is a result too
                    out(f"  {tool} {side} at {n} pairs failed: {type(exc).__name__}: {exc}")
                    continue
                fit_s = time.perf_counter() - t0
                recall, ndcg, top1, tr_s = measure(side, mapper, Xs, Ys)
                rows.append(dict(source=src, target=tgt, n_pairs=n, tool=tool, method=method,
                                 side=side, recommended="", predicted_recall="",
                                 predicted_ndcg="", recall=recall, ndcg=ndcg, top1=top1,
                                 fit_s=fit_s, translate_s=tr_s))
        for r in rows[-(len(plan.estimates) + 4):]:
            out("  " + " ".join(f"{r[f]:.3f}" if isinstance(r[f], float) else str(r[f])
                                for f in FIELDS))
    return rows


def summarise(rows, out=print):
    """The issue's targets, checked on the rows; returns them as ``{key: value}``."""
    sk = [r for r in rows if r["tool"] == "skalign"]
    close = [abs(r["predicted_recall"] - r["recall"]) <= 0.05 for r in sk]
    figures = {"prediction_rows": len(close), "prediction_within_005": sum(close),
               "prediction_median_abs_error": float(np.median(
                   [abs(r["predicted_recall"] - r["recall"]) for r in sk]))}
    out(f"prediction within 0.05 of the held-out recall@10: {sum(close)}/{len(close)} rows "
        f"({np.mean(close):.0%}); median |error| {figures['prediction_median_abs_error']:.3f}")
    for n in sorted({r["n_pairs"] for r in sk}):
        err = [abs(r["predicted_recall"] - r["recall"]) for r in sk if r["n_pairs"] == n]
        figures[f"prediction_within_005_n{n}"] = int(sum(e <= 0.05 for e in err))
        figures[f"prediction_rows_n{n}"] = len(err)
        figures[f"prediction_median_abs_error_n{n}"] = float(np.median(err))
        figures[f"prediction_max_abs_error_n{n}"] = float(np.max(err))
        out(f"  {n:>5} pairs: {sum(e <= 0.05 for e in err)}/{len(err)} within 0.05, median "
            f"|error| {np.median(err):.3f}, max {np.max(err):.3f}")
    n_ahead = n_cells = 0
    keys = sorted({(r["source"], r["target"]) for r in rows})
    for key in keys:
        peers2000 = [r["recall"] for r in rows if (r["source"], r["target"]) == key
                     and r["tool"] != "skalign" and r["n_pairs"] == max(
                         x["n_pairs"] for x in rows)]
        for n in sorted({r["n_pairs"] for r in rows}):
            sel = [r for r in rows if (r["source"], r["target"]) == key and r["n_pairs"] == n]
            rec = [r for r in sel if r["recommended"] == 1]
            peers = [r["recall"] for r in sel if r["tool"] != "skalign"]
            if not rec:
                continue
            best_peer = max(peers) if peers else float("nan")
            n_cells += 1
            n_ahead += bool(not peers or rec[0]["recall"] >= best_peer)
            line = (f"{key[0]} -> {key[1]} {n:>5} pairs: recommended {rec[0]['method']}/"
                    f"{rec[0]['side']} keeps {rec[0]['recall']:.3f}; best peer {best_peer:.3f}")
            if peers2000:
                line += f"; best peer at the largest count {max(peers2000):.3f}"
            out(line)
    figures.update(recommended_cells=n_cells, recommended_at_least_best_peer=n_ahead)
    out(f"recommended method >= best peer in {n_ahead}/{n_cells} (encoder pair, pair count)")
    figures.update(_few_pair_ratios(rows, keys, out))
    return figures


def _few_pair_ratios(rows, keys, out):
    """The recommended method at the fewest pairs against the best peer at the most pairs, and
    the ridge map against centred Procrustes (document side) at the most pairs."""
    lo, hi = min(r["n_pairs"] for r in rows), max(r["n_pairs"] for r in rows)
    ratios, gains = [], []
    for key in keys:
        sel = [r for r in rows if (r["source"], r["target"]) == key]
        rec = [r["recall"] for r in sel if r["n_pairs"] == lo and r["recommended"] == 1]
        peers = [r["recall"] for r in sel if r["n_pairs"] == hi and r["tool"] != "skalign"]
        if rec and peers:
            ratios.append(rec[0] / max(peers))
            out(f"{key[0]} -> {key[1]}: recommended at {lo} pairs keeps {ratios[-1]:.3f} x the "
                f"best peer at {hi}")
        doc = {r["method"]: r["recall"] for r in sel if r["n_pairs"] == hi and
               r["tool"] == "skalign" and r["side"] == "document"}
        if "linear" in doc and "procrustes" in doc:
            gains.append(doc["linear"] - doc["procrustes"])
    figures = {}
    if ratios:
        figures.update(few_pair_ratio_min=min(ratios), few_pair_ratio_max=max(ratios),
                       few_pair_cells=len(ratios),
                       few_pair_cells_at_least_095=int(sum(x >= 0.95 for x in ratios)))
        out(f"at {lo} pairs: {figures['few_pair_cells_at_least_095']}/{len(ratios)} encoder "
            f"pairs keep >= 0.95 x the best peer at {hi} (ratios {min(ratios):.3f}-"
            f"{max(ratios):.3f})")
    if gains:
        figures.update(ridge_minus_procrustes_min=min(gains), ridge_minus_procrustes_max=max(gains))
    return figures


def write_doc_csv(rows, path):
    """The user guide's table: per encoder pair and pair count, every tool's best row."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["encoders", "pairs", "tool (method, side)", "recall@10", "nDCG@10", "top-1",
                    "predicted recall@10", "fit s", "translate s"])
        short = {"minilm_l6": "MiniLM", "mpnet_base": "MPNet", "me5_small_q4": "e5"}
        for (s, t, n), grp in itertools.groupby(
                sorted(rows, key=lambda r: (r["source"], r["target"], r["n_pairs"])),
                key=lambda r: (r["source"], r["target"], r["n_pairs"])):
            grp = list(grp)
            picks = [r for r in grp if r["recommended"] == 1]
            for tool in ("isotrieve", "rebasis"):
                mine = [r for r in grp if r["tool"] == tool]
                if mine:
                    picks.append(max(mine, key=lambda r: r["recall"]))
            proc = [r for r in grp if r["tool"] == "skalign" and r["method"] == "procrustes"
                    and r["side"] == "document"]
            picks += [r for r in proc if r not in picks]
            for r in picks:
                label = ("skalign plan's pick" if r["recommended"] == 1 else r["tool"]) + \
                    f" ({r['method']}, {r['side']})"
                pred = f"{r['predicted_recall']:.3f}" if r["predicted_recall"] != "" else "-"
                w.writerow([f"{short[s]} -> {short[t]}", n, label, f"{r['recall']:.3f}",
                            f"{r['ndcg']:.3f}", f"{r['top1']:.3f}", pred, f"{r['fit_s']:.2f}",
                            f"{r['translate_s']:.3f}"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", type=int, nargs="+", default=[25, 100, 500, 2000])
    p.add_argument("--encoders", nargs="+", default=list(ENCODERS))
    p.add_argument("--csv", default=None, help="write every row to this CSV")
    p.add_argument("--doc-csv", default=None, help="write the user guide's table to this CSV")
    p.add_argument("--summary-csv", default=None,
                   help="write the summary's figures (key,value) to this CSV, for the guide")
    p.add_argument("--combos", nargs="+", metavar="SRC:TGT",
                   help="only these ordered encoder pairs (to split the run over processes)")
    p.add_argument("--merge", nargs="+", metavar="CSV",
                   help="no runs: merge the rows of earlier --csv files, then summarise")
    p.add_argument("--quick", action="store_true", help="one encoder pair, 100 pairs")
    args = p.parse_args(argv)
    if args.merge:
        rows = [r for path in args.merge for r in read_csv(path)]
        return finish(rows, args)
    import torch

    torch.set_num_threads(1)
    Z = np.load(args.npz)
    E = {k: Z[k].astype(np.float32) for k in args.encoders}
    combos = list(itertools.permutations(args.encoders, 2))
    if args.combos:
        combos = [tuple(c.split(":")) for c in args.combos]
    counts = args.pairs
    if args.quick:
        combos, counts = combos[:1], [100]
    rows = []
    t0 = time.time()
    for src, tgt in combos:
        print(f"{src} -> {tgt}  ({time.time() - t0:.0f} s)")
        print("  " + " ".join(FIELDS))
        rows += run_pair(E, src, tgt, counts)
        if args.csv:
            Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                w.writeheader()
                w.writerows(rows)
    return finish(rows, args)


def finish(rows, args):
    if args.csv and args.merge:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows)
    figures = summarise(rows)
    if args.summary_csv:
        write_figures(args.summary_csv, figures)
    if args.doc_csv:
        write_doc_csv(rows, args.doc_csv)
    return rows


def read_csv(path):
    """Rows written by ``--csv``, numbers back to numbers."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for key in ("n_pairs", "recommended"):
                r[key] = int(r[key]) if r[key] != "" else ""
            for key in FIELDS[7:]:
                r[key] = float(r[key]) if r[key] != "" else ""
            rows.append(r)
    return rows


if __name__ == "__main__":
    main()
