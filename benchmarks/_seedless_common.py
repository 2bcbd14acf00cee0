"""Shared by bench_seedless.py and bench_cuda.py: splits of the development set, metrics.

Each draw splits the 4,000 texts of ``docstrings_en.npz`` at random into a pool (its first
``n_pool`` rows) and 1,000 held-out evaluation texts; the target pool holds the same texts as
the source pool, shuffled. With ``disjoint=True`` the 3,000 texts left after the held-out ones
are cut in two halves: the source pool is the first half's source embeddings, the target pool
the second half's target embeddings (no text on both sides; at most 1,500 rows per side).
Top-1 and MRR count, for each held-out source text, the rank of its
own target among all 1,000 held-out targets by cosine, both sides centred on their own mean.
"""

import time
import warnings

import numpy as np

from skalign import AnchorBootstrapper, ProcrustesAligner, UnpairedPool
from skalign.exceptions import DiscoveryFailedWarning
from skalign.metrics import retrieval_retention

ENCODER_PAIRS = [("minilm_l6", "mpnet_base"), ("minilm_l6", "me5_small_q4"),
                 ("mpnet_base", "me5_small_q4")]
#: English -> German pairs of the cross-lingual development set (``data/crosslingual_de.npz``,
#: ``make_crosslingual.py``): another model and language, and one model in two languages
CROSSLINGUAL_PAIRS = [("en_minilm_l6", "de_me5_small_q4"), ("en_me5_small_q4", "de_me5_small_q4")]
N_EVAL = 1000


def load(path):
    Z = np.load(path)
    return {k: Z[k].astype(np.float32) for k in Z.files}


def draw(E, source, target, state, n_pool, impossible=False, disjoint=False):
    """Pools, the true partner of every source-pool row, and the held-out texts.

    Returns ``X, Y, partner, Xe, Ye, Xt, Yt``: the pools, the target-pool row of each source-pool
    row (-1 for disjoint pools), the held-out pairs, and both embeddings of the source-pool texts
    (true pairs: the seed pairs and the ceiling's training pairs).
    """
    rng = np.random.default_rng(state)
    rows = rng.permutation(len(E[source]))
    held = rows[-N_EVAL:]
    if disjoint:
        half = min(n_pool, (len(rows) - N_EVAL) // 2)
        pool, other = rows[:half], rows[half:2 * half]
        X, Y = E[source][pool], E[target][other]
        partner = np.full(half, -1)
    else:
        pool = rows[:n_pool]
        shuffle = rng.permutation(n_pool)
        X, Y = E[source][pool], E[target][pool][shuffle]
        partner = np.argsort(shuffle)  # target-pool row of source-pool row i
    if impossible:  # nothing to find: random vectors of the target's width
        Y = rng.standard_normal(Y.shape).astype(np.float32)
    return X, Y, partner, E[source][held], E[target][held], E[source][pool], E[target][pool]


def ranks(Y_true, Y_pred):
    """Rank of each row's own target among all rows (1 = top), cosine after centring."""
    A = Y_pred - Y_pred.mean(0)
    B = Y_true - Y_true.mean(0)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    S = A @ B.T
    return (S > np.diag(S)[:, None]).sum(1) + 1


def top1_mrr(Y_true, Y_pred):
    r = ranks(Y_true, Y_pred)
    return float(np.mean(r == 1)), float(np.mean(1.0 / r))


def ceiling(X_pairs, Y_pairs, Xe, Ye):
    """Procrustes on 1,000 true pairs, evaluated on the held-out texts."""
    return top1_mrr(Ye, ceiling_map(X_pairs, Y_pairs).transform(Xe))


def ceiling_map(X_pairs, Y_pairs):
    """The supervised ceiling's fitted map: Procrustes on 1,000 true pairs."""
    return ProcrustesAligner().fit(X_pairs[:1000], Y_pairs[:1000])


def retention10(Y_true, Y_pred):
    """Neighbourhood retention of the held-out texts as a translated store: recall@10 of each
    text's 10 nearest others among the translated rows against those among the target
    encoder's own rows (leave-one-out, cosine; :func:`skalign.metrics.retrieval_retention`)."""
    return retrieval_retention(Y_true, Y_pred, k=10)["recall"]


def fit_skalign(X, Y, partner, n_seed, state, Yt=None, **params):
    """AnchorBootstrapper from ``n_seed`` true pairs (source-pool rows 0..n_seed-1) and the pools.

    The seeds' targets are ``Yt[:n_seed]`` (the target embeddings of the source-pool texts;
    needed for disjoint pools), else their partners in ``Y``. ``exact`` (the share of discovered
    pairs that are true pairs) is NaN for disjoint pools.
    """
    seed_y = Yt[:n_seed] if Yt is not None else Y[partner[:n_seed]]
    seeds = (X[:n_seed], seed_y) if n_seed else (None, None)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boot = AnchorBootstrapper(random_state=state, **params).fit(
            *seeds, unpaired=UnpairedPool(X=X, y=Y))
    seconds = time.perf_counter() - t0
    warned = any(issubclass(w.category, DiscoveryFailedWarning) for w in caught)
    src, tgt = boot.anchor_pairs_.T
    exact = float(np.mean(partner[src] == tgt)) if len(src) else 0.0
    if len(partner) and partner[0] < 0:
        exact = float("nan")
    return boot, seconds, warned, exact
