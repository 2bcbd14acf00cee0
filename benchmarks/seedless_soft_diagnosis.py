"""Zero-pair discovery step by step: how many pairs are right after the start, the soft
self-learning and the hard self-learning, for chosen soft settings.

``python benchmarks/seedless_soft_diagnosis.py [NPZ] --pair 2 --state 0
[--config T0,TAU,COMPONENTS,FRACTION ...] [--hard] [--rows 3000]``

Data: ``../shared/data/docstrings_en.npz``, drawn as ``bench_seedless.py`` draws it
(``--pair`` indexes its encoder pairs: 0 MiniLM → MPNet, 1 MiniLM → e5, 2 MPNet → e5; a random
state gives the pools). For each ``--config`` (first temperature, later temperature, principal
components, share of the rows; default ``0.02,0.05,128,1``) it runs the similarity-signature
start, the soft self-learning (:func:`skalign._self_learning.soft_self_learn`) and, with
``--hard``, the hard self-learning from the soft phase's mutual pairs with ``p0`` 0.1, 0.5, 1,
and prints the mutual CSLS pairs and the share of them that are right (the texts are known
here) after each step, with seconds. The user guide's bootstrap page and
:mod:`skalign._self_learning` quote its output for MPNet → e5, states 0 and 1. Run with
``OMP_NUM_THREADS=1`` on a shared machine.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _seedless_common import ENCODER_PAIRS, draw, load  # noqa: E402

from skalign._backend import make_generator, row_normalize  # noqa: E402
from skalign._matching import csls_match  # noqa: E402
from skalign._self_learning import csls_scores, self_learn, soft_self_learn  # noqa: E402
from skalign._signatures import principal_basis, similarity_signatures  # noqa: E402

DEFAULT_NPZ = Path(__file__).resolve().parents[2] / "shared" / "data" / "docstrings_en.npz"


def config(text):
    t0, tau, comp, frac = text.split(",")
    return float(t0), float(tau), int(comp), float(frac)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("npz", nargs="?", default=str(DEFAULT_NPZ))
    p.add_argument("--pair", type=int, default=2)
    p.add_argument("--state", type=int, default=0)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--config", type=config, nargs="+", default=[(0.02, 0.05, 128, 1.0)],
                   help="T0,TAU,COMPONENTS,FRACTION: first and later soft temperature, "
                        "principal components, share of the rows")
    p.add_argument("--hard", action="store_true", help="also run the hard self-learning")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    E = load(args.npz)
    s, t = ENCODER_PAIRS[args.pair]
    X, Y, partner, *_ = draw(E, s, t, args.state, args.rows)
    X, Y = torch.as_tensor(X), torch.as_tensor(Y)
    XP, YP = row_normalize(X - X.mean(0)), row_normalize(Y - Y.mean(0))
    gen = make_generator(args.state, torch.device("cpu"))
    n = len(XP)

    def right(U, V, ix, iy):
        m = csls_match(U, V, k=10)
        a = torch.nonzero(m.mutual()).flatten()
        ok = partner[ix[a].numpy()] == iy[m.forward[a]].numpy()
        return len(a), float(ok.mean()) if len(a) else 0.0

    print(f"{s} -> {t}, random state {args.state}, {n} rows per pool")
    for t0_, tau, ncomp, frac in args.config:
        start = time.perf_counter()
        if frac < 1:
            k = int(frac * n)
            ix = torch.sort(torch.randperm(n, generator=gen)[:k]).values
            iy = torch.sort(torch.randperm(n, generator=gen)[:k]).values
        else:
            ix = iy = torch.arange(n)
        XS, YS = XP[ix], YP[iy]
        U, V = similarity_signatures(XS, len(ix)), similarity_signatures(YS, len(iy))
        C = csls_scores(U @ V.T, 10)
        mutual, share = right(U, V, ix, iy)
        line = (f"T0={t0_} tau={tau} components={ncomp} rows={frac:g}: start {mutual} mutual, "
                f"{share:.3f} right ({time.perf_counter() - start:.1f} s)")
        BX, BY = principal_basis(XS, ncomp), principal_basis(YS, ncomp)
        XR, YR = row_normalize(XS @ BX.T), row_normalize(YS @ BY.T)
        t1 = time.perf_counter()
        W, hist = soft_self_learn(XR, YR, C, start_temperature=t0_, temperature=tau,
                                  max_iter=150)
        mutual, share = right(XR @ W, YR, ix, iy)
        line += (f" | soft: {len(hist)} iterations, objective {hist[-1]['objective']:.4f}, "
                 f"{mutual} mutual, {share:.3f} right ({time.perf_counter() - t1:.1f} s)")
        if args.hard:
            m = csls_match(XR @ W, YR, k=10)
            a = torch.nonzero(m.mutual()).flatten()
            for p0 in (0.1, 0.5, 1.0):
                t2 = time.perf_counter()
                Wh, h, _ = self_learn(XS, YS, a, m.forward[a], generator=gen, p0=p0)
                line += (f" | hard p0={p0}: {len(h)} iterations, "
                         f"{right(XS @ Wh, YS, ix, iy)[1]:.3f} right "
                         f"({time.perf_counter() - t2:.1f} s)")
        print(line, flush=True)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
