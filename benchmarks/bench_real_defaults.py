"""Every estimator's defaults against its best setting and tuned baselines, on real embeddings.

    python benchmarks/bench_real_defaults.py [PATH.npz] [--n-pairs 25,50,100,300,1000] [--seeds 3]

``PATH.npz`` is the development set ``docstrings_en.npz`` (real sentence embeddings of 4,000 texts
by three public encoders; see its README); without it, the subset vendored with skalign is used
(1,350 texts, MiniLM-L6 and MPNet). For each ordered encoder pair, pair count and random split,
the rows are split into ``--n-test`` held-out rows and a training side; the first ``n`` training
rows are the known pairs, and the whole training side (its target half shuffled) is the unpaired
pool of the semi-supervised estimators. Every estimator is fitted with its defaults and with each
setting of a small grid; the score is held-out top-1 retrieval: the translated source row's
nearest held-out target by cosine is its own pair (for shared-space estimators, the nearest
mapped target). The table gives, per setting, the mean and (min–max) over splits; "best" is the
grid setting with the best mean (an oracle: it is chosen on the held-out rows, so it bounds what
tuning could give). Procrustes and ridge with its alpha chosen by leave-one-out cross-validation
(``LinearAligner(alpha="auto")``) are the baselines every method is compared with.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from skalign import (
    AnchorBootstrapper,
    ASIFAligner,
    GeRAAligner,
    InverseRelativeProjector,
    LinearAligner,
    OrthogonalEnsembleAligner,
    ProcrustesAligner,
    UnpairedPool,
    stack_views,
)
from skalign.datasets import load_docstring_embeddings
from skalign.metrics import top_k_accuracy


@dataclass
class Method:
    """One row family of the study: how to build, fit and score an estimator."""

    name: str
    make: type
    grid: list = field(default_factory=list)
    kind: str = "translate"  # "translate", "shared" (transform_target) or "ensemble"
    min_pairs: int = 2
    max_pairs: int | None = None
    fixed: dict = field(default_factory=dict)

    def build(self, params, seed):
        kw = dict(self.fixed, **params)
        if "random_state" in self.make().get_params():
            kw.setdefault("random_state", seed)
        return self.make(**kw)


METHODS = [
    Method("Procrustes", ProcrustesAligner, [{"scale": True}, {"scale": False}]),
    Method("ridge (alpha by LOO-CV)", LinearAligner, fixed={"alpha": "auto"}),
    Method("LinearAligner", LinearAligner, [{"alpha": a} for a in (0.0, 0.01, 1.0, 10.0, 100.0)]),
    Method(
        "InverseRelativeProjector",
        InverseRelativeProjector,
        [{"pruning_threshold": d} for d in (0.0, 0.3, 0.5, 0.8, 0.9)],
    ),
    Method(
        "ASIFAligner",
        ASIFAligner,
        [{"center": c, "exponent": p} for c in (True, False) for p in (1.0, 4.0, 8.0)],
        kind="shared",
    ),
    Method(
        "GeRAAligner",
        GeRAAligner,
        [{"alpha": a} for a in (0.0, 1.0, 10.0)],
        kind="shared",
        max_pairs=300,
    ),
    Method(
        "AnchorBootstrapper",
        AnchorBootstrapper,
        [{"estimator": e} for e in (ProcrustesAligner(), LinearAligner(alpha="auto"))],
                min_pairs=15,
        max_pairs=50,
    ),
    Method(
        "OrthogonalEnsembleAligner",
        OrthogonalEnsembleAligner,
        [{"solver": s} for s in ("geodesic", "procrustes", "gpa")],
        kind="ensemble",
        fixed={"n_views": 2},
    ),
]


def split(n_rows, n_test, n_pairs, seed):
    """Held-out rows, known-pair rows and the training side, from one seeded permutation."""
    perm = np.random.default_rng(seed).permutation(n_rows)
    test, train = perm[:n_test], perm[n_test:]
    return test, train[:n_pairs], train


def evaluate(method, est, X, Y, test, pairs, train, seed):
    """Fit ``est`` the way ``method`` needs and return held-out top-1."""
    Xte, Yte = X[test], Y[test]
    if method.kind == "ensemble":
        if X.shape[1] != Y.shape[1]:
            return np.nan
        est.fit(stack_views([X[pairs], Y[pairs]]))
        views = est.transform_views(stack_views([Xte, Yte]))
        return top_k_accuracy(views[:, 1], views[:, 0])
    if "unpaired" in inspect.signature(est.fit).parameters:
        shuffled = np.random.default_rng(seed + 1).permutation(train)
        est.fit(X[pairs], Y[pairs], unpaired=UnpairedPool(X=X[train], y=Y[shuffled]))
    else:
        est.fit(X[pairs], Y[pairs])
    if method.kind == "shared":
        return top_k_accuracy(est.transform_target(Yte), est.transform(Xte))
    return top_k_accuracy(Yte, est.transform(Xte))


def describe(params):
    return ", ".join(
        f"{k}={type(v).__name__ if hasattr(v, 'fit') else v}" for k, v in params.items()
    ) or "defaults"


def run(embeddings, pairs_of_encoders, n_pairs_list, seeds, n_test, methods, log=print):
    rows = []
    for src, tgt in pairs_of_encoders:
        X, Y = embeddings[src], embeddings[tgt]
        for n in n_pairs_list:
            for m in methods:
                if n < m.min_pairs or (m.max_pairs is not None and n > m.max_pairs):
                    continue
                if m.kind == "ensemble" and X.shape[1] != Y.shape[1]:
                    continue
                settings = [{}] + list(m.grid)
                scores = np.full((len(settings), len(seeds)), np.nan)
                seconds = np.zeros(len(settings))
                for j, seed in enumerate(seeds):
                    test, pairs, train = split(len(X), n_test, n, seed)
                    for i, params in enumerate(settings):
                        t0 = time.perf_counter()
                        scores[i, j] = evaluate(m, m.build(params, seed), X, Y, test, pairs,
                                                train, seed)
                        seconds[i] += (time.perf_counter() - t0) / len(seeds)
                best = int(np.nanargmax(scores.mean(1)))
                row = {
                    "pair": f"{src}->{tgt}", "n_pairs": n, "method": m.name,
                    "default": scores[0].mean(), "default_min": scores[0].min(),
                    "default_max": scores[0].max(), "best": scores[best].mean(),
                    "best_min": scores[best].min(), "best_max": scores[best].max(),
                    "best_setting": describe(settings[best]), "fit_s": seconds[0],
                }
                rows.append(row)
                log(f"{row['pair']:28s} {n:5d} {m.name:26s} default {row['default']:.3f} "
                    f"best {row['best']:.3f} ({row['best_setting']}) {seconds[0]:.1f}s")
    return rows


def with_baselines(rows):
    """Add the Procrustes and tuned-ridge defaults of the same pair and pair count to each row."""
    ref = {(r["pair"], r["n_pairs"], r["method"]): r["default"] for r in rows}
    for r in rows:
        r["procrustes"] = ref.get((r["pair"], r["n_pairs"], "Procrustes"), np.nan)
        r["ridge_cv"] = ref.get((r["pair"], r["n_pairs"], "ridge (alpha by LOO-CV)"), np.nan)
    return rows


def doc_table(rows):
    """The table as the user guide shows it: a header, then one formatted cell per column."""
    def cell(r, key):
        return f"{r[key]:.3f} ({r[key + '_min']:.3f}–{r[key + '_max']:.3f})"

    return [["encoders", "pairs", "estimator", "defaults", "best of grid", "best setting",
             "Procrustes", "ridge (LOO-CV)"]] + [
        [r["pair"].replace("->", " → "), r["n_pairs"], r["method"], cell(r, "default"),
         cell(r, "best"), r["best_setting"], f"{r['procrustes']:.3f}", f"{r['ridge_cv']:.3f}"]
        for r in rows]


def format_table(rows):
    """:func:`doc_table` as aligned text."""
    table = doc_table(rows)
    widths = [max(len(str(c)) for c in column) for column in zip(*table)]
    return "\n".join("  ".join(f"{c!s:<{w}}" for c, w in zip(line, widths)).rstrip()
                     for line in table)


def load_rows(paths):
    """Rows saved by ``--csv`` (numbers back to int/float)."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows.append({k: (int(v) if k == "n_pairs" else v if k in TEXT else float(v))
                             for k, v in r.items()})
    return rows


TEXT = {"pair", "method", "best_setting"}


def order(rows):
    names = [m.name for m in METHODS]
    return sorted(rows, key=lambda r: (r["pair"], r["n_pairs"], names.index(r["method"])))


def write_doc_csv(rows, path):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(doc_table(rows))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", nargs="?", help="docstrings_en.npz (default: the vendored subset)")
    p.add_argument("--encoders", default=None,
                   help="comma-separated SRC:TGT pairs (default: every ordered pair from "
                        "minilm_l6 to the others, plus mpnet_base:me5_small_q4 where present)")
    p.add_argument("--n-pairs", default="25,50,100,300,1000")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--n-test", type=int, default=None,
                   help="held-out rows (default 2000, or 350 on the vendored subset)")
    p.add_argument("--methods", default=None, help="comma-separated names (substring match)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    p.add_argument("--table-from", nargs="+", default=None, metavar="CSV",
                   help="print the table of rows saved by earlier --csv runs (runs with disjoint "
                        "--methods, same splits) instead of computing")
    p.add_argument("--doc-csv", default=None,
                   help="write the printed table as a CSV for the documentation")
    args = p.parse_args(argv)
    if args.table_from:
        rows = order(with_baselines(load_rows(args.table_from)))
        print(format_table(rows))
        if args.doc_csv:
            write_doc_csv(rows, args.doc_csv)
        return rows

    torch.set_num_threads(args.threads)
    data = load_docstring_embeddings(args.path)
    emb = data.embeddings
    if args.encoders:
        pairs = [tuple(s.split(":")) for s in args.encoders.split(",")]
    else:
        pairs = [("minilm_l6", k) for k in emb if k != "minilm_l6"]
        if {"mpnet_base", "me5_small_q4"} <= set(emb):
            pairs.append(("mpnet_base", "me5_small_q4"))
    n_test = args.n_test or (2000 if len(next(iter(emb.values()))) >= 4000 else 350)
    n_max = len(next(iter(emb.values()))) - n_test
    n_pairs = [n for n in map(int, args.n_pairs.split(",")) if n <= n_max]
    methods = METHODS
    if args.methods:
        wanted = [w.strip().lower() for w in args.methods.split(",")]
        methods = [m for m in METHODS if any(w in m.name.lower() for w in wanted)]
    rows = with_baselines(run(emb, pairs, n_pairs, list(range(args.seeds)), n_test, methods,
                              log=lambda s: print(s, file=sys.stderr, flush=True)))
    print(f"held-out top-1 on {n_test} rows, mean (min–max) over {args.seeds} splits; "
          f"chance {1 / n_test:.4f}")
    print(format_table(rows))
    if args.doc_csv:
        write_doc_csv(rows, args.doc_csv)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()}
                        for r in rows)
    return rows


if __name__ == "__main__":
    main()
