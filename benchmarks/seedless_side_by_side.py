"""Zero- and few-seed fits of two versions of skalign side by side, in one process (issue 15).

``python benchmarks/seedless_side_by_side.py [NPZ] --old-commit REV --pairs 1 2 --states 0 1
[--seeds 0 5] [--out runs.csv]``

The machine's load moves absolute times, so a change of speed is measured by fitting the same
draws with the old and the new code alternately in one process: ``REV``'s ``skalign/`` is
extracted (``git archive``) into a temporary folder as the package ``skalign_old``, the working
tree's is ``skalign``. Draws as ``bench_seedless.py`` (``--pairs`` index its encoder pairs: 0
MiniLM → MPNet, 1 MiniLM → e5, 2 MPNet → e5; 3,000-row pools), ``AnchorBootstrapper`` with its
defaults and ``random_state`` = the state. Printed per fit and version: CPU seconds of the fit
(one thread: run with ``OMP_NUM_THREADS=1``), top-1 on the 1,000 held-out texts, certificate,
soft and hard iterations of every start (``starts``: ``27s/5h``; ``x`` for a start stopped
before its hard phase), and the CPU seconds of each stage, exclusive (a stage's own time, the
stages it calls not counted): ``signature`` (the start scores and the SVDs), ``principal``,
``soft`` and ``hard`` (the two phases), ``match`` (every mutual CSLS matching: the start pairs,
the learned map's, the held-out tests'), ``held_out`` (the restarts' held-out tests, their
matchings aside), ``inner_fit``, ``certify`` (``certificate_``) and ``rest``. Data:
``../shared/data/docstrings_en.npz``. ``results/seedless_side_by_side.csv`` holds the runs the
user guide quotes::

    nice -n 19 env OMP_NUM_THREADS=1 python benchmarks/seedless_side_by_side.py \
        ../shared/data/docstrings_en.npz --old-commit 5ee7682 --pairs 1 0 --states 0 --seeds 0 5
    nice -n 19 env OMP_NUM_THREADS=1 python benchmarks/seedless_side_by_side.py \
        ../shared/data/docstrings_en.npz --old-commit 5ee7682 --pairs 2 --states 2 --new-first

and ``results/seedless_side_by_side_candidates.csv`` the dense softmaxes against the candidate
softmaxes of the soft phase::

    env OMP_NUM_THREADS=1 python benchmarks/seedless_side_by_side.py \
        ../shared/data/docstrings_en.npz --old-commit e3648d3 --pairs 2 0 --states 4 \
        --seeds 0 5 --out benchmarks/results/seedless_side_by_side_candidates.csv
"""

import argparse
import importlib
import importlib.util
import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import old_package, write_rows  # noqa: E402
from _seedless_common import ENCODER_PAIRS, draw, load, top1_mrr  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NPZ = ROOT.parent / "shared" / "data" / "docstrings_en.npz"
STAGES = [("_signature_start", "signature"), ("_principal", "principal"),
          ("_mutual_pairs", "start_pairs"), ("_held_out_pairs", "held_out"),
          ("_held_out_orthogonal", "match"), ("_fit_on_anchors", "inner_fit"),
          ("_certify", "certify"), ("_self_learning", "rest"), ("fit", "rest")]
FUNCTIONS = [("soft_self_learn", "soft"), ("self_learn", "hard"), ("csls_match", "match")]
BOOTSTRAP_MODULES = ["_bootstrap", "_bootstrap_seedless", "_bootstrap_rounds",
                     "_bootstrap_anchors", "_bootstrap_certify"]


class StageTimer:
    """Exclusive CPU seconds of the bootstrapper's stages, by wrapping them in ``pkg``."""

    def __init__(self, pkg):
        self.boot = importlib.import_module(pkg + "._bootstrap")
        self.base = importlib.import_module(pkg + ".base")
        self.exceptions = importlib.import_module(pkg + ".exceptions")
        self.seconds, self.stack = defaultdict(float), []
        cls = self.boot.AnchorBootstrapper
        for name, stage in STAGES:
            # the class's own method, or (newer versions) that of the mixin defining the step
            owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
            if owner is None:
                continue
            f = owner.__dict__[name]
            if isinstance(f, staticmethod):
                setattr(cls, name, staticmethod(self._wrap(stage, f.__func__)))
            else:
                setattr(cls, name, self._wrap(stage, f))
        # the modules that call the functions: _bootstrap alone in older versions, the modules
        # of its steps in newer ones
        modules = [importlib.import_module(f"{pkg}.{m}") for m in BOOTSTRAP_MODULES
                   if importlib.util.find_spec(f"{pkg}.{m}") is not None]
        for name, stage in FUNCTIONS:
            for module in modules:
                if hasattr(module, name):
                    setattr(module, name, self._wrap(stage, getattr(module, name)))

    def _wrap(self, stage, fn):
        def timed(*args, **kwargs):
            t0 = time.process_time()
            self.stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner, dt = self.stack.pop(), time.process_time() - t0
                self.seconds[stage] += dt - inner
                if self.stack:
                    self.stack[-1] += dt
        return timed

    def fit(self, X, Y, n_seed, partner, state):
        self.seconds.clear()
        seeds = (X[:n_seed], Y[partner[:n_seed]]) if n_seed else (None, None)
        c0 = time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            boot = self.boot.AnchorBootstrapper(random_state=state).fit(
                *seeds, unpaired=self.base.UnpairedPool(X=X, y=Y))
        cpu = time.process_time() - c0
        warned = any(issubclass(w.category, self.exceptions.DiscoveryFailedWarning)
                     for w in caught)
        return boot, cpu, warned, dict(self.seconds)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--old-commit", default="HEAD")
    p.add_argument("--pairs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--states", type=int, nargs="+", default=[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--pool", type=int, default=3000)
    p.add_argument("--new-first", action="store_true", help="fit the new version first")
    p.add_argument("--out", default=None, help="CSV of the runs")
    args = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    versions = {"old": StageTimer(old_package(args.old_commit)), "new": StageTimer("skalign")}
    order = ["new", "old"] if args.new_first else ["old", "new"]
    E, rows = load(args.npz), []
    names = [s for _, s in STAGES + FUNCTIONS]
    stages = list(dict.fromkeys(names))
    for pair in args.pairs:
        source, target = ENCODER_PAIRS[pair]
        for state in args.states:
            X, Y, partner, Xe, Ye, _, _ = draw(E, source, target, state, args.pool)
            for n_seed in args.seeds:
                for version in order:
                    load_avg = os.getloadavg()[0]
                    boot, cpu, warned, seconds = versions[version].fit(X, Y, n_seed, partner,
                                                                       state)
                    top1, _ = top1_mrr(Ye, boot.transform(Xe))
                    starts = " ".join(
                        f"{r['n_soft_iter']}s/{r['n_iter']}h"
                        + ("x" if r.get("stopped") else "") for r in boot.restarts_)
                    row = {"pair": pair, "state": state, "seeds": n_seed, "version": version,
                           "cpu_seconds": round(cpu, 2), "top1": round(top1, 4),
                           "certificate": round(boot.certificate_, 4), "warned": warned,
                           "starts": starts, "load": round(load_avg, 2),
                           **{s: round(seconds.get(s, 0.0), 2) for s in stages}}
                    rows.append(row)
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.out:
        write_rows(args.out, rows)


if __name__ == "__main__":
    main()
