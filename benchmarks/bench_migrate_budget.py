"""Which rows of a store to re-embed first, and what a partly re-embedded store keeps.

``python benchmarks/bench_migrate_budget.py [NPZ] [--pairs SRC:TGT ...] [--splits 3]
[--store 2000] [--fractions 0.02 0.05 0.1 0.2 0.4] [--csv OUT] [--quick]``

``skalign migrate`` encodes a budget of a store's rows with the new encoder, fits a map on their
(old, new) pairs, translates every other row and keeps the encoded rows' exact vectors. Per
encoder pair and seeded split, a store of ``--store`` random texts of the development set
(``../shared/data/docstrings_en.npz``) is migrated with a fraction of its rows encoded, chosen by:

* ``random``: uniform, seeded (what ``skalign migrate`` does);
* ``stratified``: mini-batch k-means (at most 100 clusters, fitted on at most 20,000 rows) on
  the old unit vectors; the budget shared among clusters by size, drawn uniformly within each;
* ``centres``: mini-batch k-means with one cluster per encoded row, the row nearest each centre
  (``O(n · budget · d)`` per pass: a large store needs a subsample);
* ``sample centres``: what ``skalign migrate`` does (``skalign._migrate.choice``): a k-means
  with one cluster per encoded row on a uniform sample of at most 20 rows per encoded row, in
  the sample's 64 leading principal directions, from uniform first centres, three Lloyd rounds,
  the sample row nearest each centre (``O(budget² · 64)`` per round, whatever the store's size);
* ``hubs``: the rows most often among the other rows' old-space cosine top-10;
* ``centres+hubs``: half the budget ``centres``, the other half ``hubs``;
* ``uncertain``: half ``random``; two ridge maps fitted on halves of those pairs translate the
  other rows, and the rows whose two translations differ most (cosine) take the other half.

Maps: ``skalign.plan.make_candidate``'s ``linear`` (ridge, penalty by cross-validated recall@10)
and ``procrustes``, as ``skalign migrate`` fits them. Queries: the new vectors of the store's own
rows, each with its own row left out (as issue 48 measured, and
``skalign.metrics.retrieval_retention``'s default): a store is searched with texts like its own,
each region in proportion to its size. Truth: the exact cosine top-10 in the fully re-embedded
store; recall@10 = the share of it the migrated store returns. Baselines: ``stay`` (old queries
in the old store: no migration) and ``translate only`` (the ``random`` pairs' map applied to
every row, none written exactly). Cells: the better map's mean over splits (``R`` ridge,
``P`` Procrustes) and the sd over splits; then each strategy minus ``random`` on the same split,
mean [min, max]. ``--quick``: one pair, one 600-row split, 2 % and 40 %. The guide's table:
``--csv doc/user_guide/migrate_budget.csv`` (3 CPU-minutes on one thread).
"""

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import MiniBatchKMeans

from skalign.plan import make_candidate

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"
PAIRS = ("minilm_l6:mpnet_base", "minilm_l6:me5_small_q4", "me5_small_q4:minilm_l6")
FRACTIONS = (0.02, 0.05, 0.10, 0.20, 0.40)
MAPS = {"linear": "R", "procrustes": "P"}
SHORT = {"minilm_l6": "MiniLM", "mpnet_base": "MPNet", "me5_small_q4": "e5"}


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def top10(Q, D):
    """Row ``i`` of ``Q``'s cosine top-10 among the rows of ``D``, row ``i`` of ``D`` left out."""
    S = unit(Q) @ unit(D).T
    np.fill_diagonal(S, -np.inf)
    return np.argpartition(-S, 10, axis=1)[:, :10]


def recall10(truth, got):
    """Mean share of each row of ``truth`` (top-10 index sets) found in the same row of ``got``."""
    return float((truth[:, :, None] == got[:, None, :]).any(axis=2).mean())


class Store:
    """One split's store: old vectors, and the new ones that ``encode`` reveals row by row."""

    def __init__(self, X, Y, seed):
        self.X, self._Y, self.seed = X, Y, seed
        self.U = unit(X)
        self._in_degree = None

    def encode(self, rows):
        return self._Y[rows]

    def in_degree(self):
        """How often each row is among the other rows' old-space cosine top-10."""
        if self._in_degree is None:
            self._in_degree = np.bincount(top10(self.U, self.U).ravel(), minlength=len(self.U))
        return self._in_degree


def choose_random(store, budget, rng, exclude=()):
    free = np.setdiff1d(np.arange(len(store.X)), exclude)
    return rng.choice(free, size=budget, replace=False)


def choose_stratified(store, budget, rng):
    n, k = len(store.X), min(budget, 100)
    sub = rng.choice(n, size=min(n, 20_000), replace=False)
    km = MiniBatchKMeans(k, n_init=3, batch_size=1024, random_state=store.seed).fit(store.U[sub])
    label = km.predict(store.U)
    share = budget * np.bincount(label, minlength=k) / n
    quota = np.floor(share).astype(int)
    quota[np.argsort(quota - share)[:budget - quota.sum()]] += 1  # largest remainders
    return np.concatenate([rng.choice(np.flatnonzero(label == c), size=q, replace=False)
                           for c, q in enumerate(quota) if q])


def choose_centres(store, budget, rng):
    km = MiniBatchKMeans(budget, n_init=1, batch_size=1024, random_state=store.seed).fit(store.U)
    dist = km.transform(store.U)
    taken = np.zeros(len(store.X), dtype=bool)
    for c in range(budget):  # the nearest row not yet taken, so every centre gets its own row
        order = np.argsort(dist[:, c])
        taken[order[np.argmax(~taken[order])]] = True
    return np.flatnonzero(taken)


def choose_sample_centres(store, budget, rng):
    from skalign._migrate.choice import centre_rows, choose_rows, rows_to_cluster

    pool = rows_to_cluster(len(store.X), budget, random_state=store.seed)
    if not len(pool):
        return choose_rows(len(store.X), budget, random_state=store.seed)
    return pool[centre_rows(store.X[pool], budget, random_state=store.seed)]


def choose_hubs(store, budget, rng, exclude=()):
    deg = store.in_degree().astype(float)
    deg[np.asarray(exclude, dtype=int)] = -1
    return np.lexsort((rng.random(len(deg)), -deg))[:budget]  # ties broken at random


def choose_centres_hubs(store, budget, rng):
    first = choose_centres(store, budget // 2, rng)
    return np.concatenate([first, choose_hubs(store, budget - len(first), rng, exclude=first)])


def choose_uncertain(store, budget, rng):
    first = choose_random(store, budget // 2, rng)
    halves = np.array_split(rng.permutation(first), 2)
    T = [unit(fit("linear", store.X[h], store.encode(h)).transform(store.X)) for h in halves]
    doubt = 1.0 - np.sum(T[0] * T[1], axis=1)
    doubt[first] = -np.inf
    return np.concatenate([first, np.argsort(-doubt)[:budget - len(first)]])


STRATEGIES = {"random": choose_random, "stratified": choose_stratified,
              "centres": choose_centres,
              "sample centres": choose_sample_centres, "hubs": choose_hubs,
              "centres+hubs": choose_centres_hubs, "uncertain": choose_uncertain}


def fit(method, Xp, Yp):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # few-pair warnings: the point here
        return make_candidate(method, n_pairs=len(Xp)).fit(Xp, Yp)


def split_rows(n, size, seed):
    return np.sort(np.random.default_rng(seed).permutation(n)[:size])


def run_split(X, Y, size, seed, fractions, strategies):
    """Recall@10 of every (fraction, strategy, map) on one split, as result dicts."""
    rows = split_rows(len(X), size, seed)
    store, Ys = Store(X[rows], Y[rows], seed), Y[rows]
    truth = top10(Ys, Ys)
    stay = recall10(truth, top10(store.X, store.X))
    out = [dict(fraction=f, strategy="stay", map="-", recall=stay) for f in fractions]
    for f in fractions:
        budget = max(2, round(f * size))
        for name in strategies:
            chosen = STRATEGIES[name](store, budget, np.random.default_rng([seed, budget]))
            assert len(np.unique(chosen)) == budget, name
            exact = store.encode(chosen)
            for method in MAPS:
                T = np.asarray(fit(method, store.X[chosen], exact).transform(store.X), np.float32)
                cell = dict(fraction=f, map=method, chosen=chosen)
                if name == "random":
                    out.append(dict(cell, strategy="translate only",
                                    recall=recall10(truth, top10(Ys, T))))
                T[chosen] = exact
                out.append(dict(cell, strategy=name, recall=recall10(truth, top10(Ys, T))))
    return out


def summarise(results):
    """Per (pair, strategy, fraction): the better map's mean and sd over splits, and the paired
    difference from ``random`` (each on its better map) as mean, min, max."""
    cells = {}
    for key in dict.fromkeys((r["pair"], r["strategy"], r["fraction"]) for r in results):
        by_map = {}
        for r in results:
            if (r["pair"], r["strategy"], r["fraction"]) == key:
                by_map.setdefault(r["map"], {})[r["split"]] = r["recall"]
        best = max(by_map, key=lambda m: np.mean(list(by_map[m].values())))
        cells[key] = (best, by_map[best])
    table = []
    for (pair, strategy, f), (best, per_split) in cells.items():
        v = np.array(list(per_split.values()))
        ref = cells[(pair, "random", f)][1]
        d = v - np.array([ref[s] for s in per_split])
        table.append(dict(pair=pair, strategy=strategy, fraction=f, map=best, mean=v.mean(),
                          sd=v.std(ddof=1) if len(v) > 1 else 0.0, diff=d.mean(),
                          diff_min=d.min(), diff_max=d.max()))
    return table


def by_row(table):
    """``(pair, strategy, {fraction: cell})`` per line of the table, in the order first met."""
    for pair, strategy in dict.fromkeys((t["pair"], t["strategy"]) for t in table):
        yield pair, strategy, {t["fraction"]: t for t in table
                               if (t["pair"], t["strategy"]) == (pair, strategy)}


def print_table(table, fractions, out=print):
    head = f"{'encoders':<16} {'strategy':<15}" + "".join(f"{f:>17.0%}" for f in fractions)
    for title, cell in (
            ("recall@10 (mean over splits, sd; R ridge / P Procrustes)",
             lambda t: f"{t['mean']:.3f}±{t['sd']:.3f} {MAPS.get(t['map'], '-')}"),
            ("minus random on the same split: mean [min, max]",
             lambda t: f"{t['diff']:+.3f}[{t['diff_min']:+.2f},{t['diff_max']:+.2f}]")):
        out(f"\n{title}\n{head}")
        for pair, strategy, got in by_row(table):
            if not (title.startswith("minus") and strategy in ("random", "stay")):
                out(f"{pair:<16} {strategy:<15}" + "".join(f"{cell(got[f]):>17}"
                                                           for f in fractions))


def write_csv(table, fractions, path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["encoders", "rows chosen"] + [f"{f:.0%} encoded" for f in fractions])
        for pair, strategy, got in by_row(table):
            w.writerow([pair, strategy] + [f"{got[f]['mean']:.3f} ± {got[f]['sd']:.3f}"
                                           for f in fractions])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pairs", nargs="+", default=list(PAIRS), metavar="SRC:TGT")
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--store", type=int, default=2000, help="rows per store")
    p.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    p.add_argument("--csv", default=None, help="write the guide's table to this CSV")
    p.add_argument("--quick", action="store_true", help="one pair, one 600-row split, 2 and 40 %")
    args = p.parse_args(argv)
    import torch
    from threadpoolctl import threadpool_limits

    # the maps are small: on a shared 2-core machine a second thread only adds contention
    # (one 384 x 768 SVD measured 12x slower with two threads while other jobs ran)
    torch.set_num_threads(1)
    with threadpool_limits(1):
        return run(args, p)


def run(args, p):
    Z = np.load(args.npz)
    pairs = [s.split(":") for s in args.pairs if set(s.split(":")) <= set(Z.files)]
    if args.quick:
        pairs, args.splits, args.store, args.fractions = pairs[:1], 1, 600, [0.02, 0.4]
    if not pairs:
        p.error(f"{args.npz} holds none of the encoder pairs {', '.join(args.pairs)}")
    strategies = ["random"] + [s for s in args.strategies if s != "random"]
    results, t0 = [], time.perf_counter()
    for src, tgt in pairs:
        X, Y = Z[src].astype(np.float32), Z[tgt].astype(np.float32)
        for seed in range(args.splits):
            for r in run_split(X, Y, args.store, seed, args.fractions, strategies):
                results.append(dict(r, pair=f"{SHORT.get(src, src)} -> {SHORT.get(tgt, tgt)}",
                                    split=seed))
            print(f"{src} -> {tgt} split {seed} done ({time.perf_counter() - t0:.0f} s)")
    table = summarise(results)
    print_table(table, args.fractions)
    if args.csv:
        write_csv(table, args.fractions, args.csv)
    return results, table


if __name__ == "__main__":
    main()
