"""What the scripts on real embeddings share: their seeded splits, scores and result files.

The English development set is ``docstrings_en.npz`` (``../shared/data``, read with
:func:`skalign.datasets.load_docstring_embeddings`, which falls back on the subset vendored with
skalign); the English → German set is ``data/crosslingual_de.npz`` (``_crosslingual.py``).

Known pairs (:func:`pairs_and_pools`): held-out rows, then the known pairs, the rest of the rows
as unpaired pools. Seedless draws (:func:`draw`, ``bench_seedless.py`` and ``bench_cuda.py``): a
pool of the first ``n_pool`` rows of a permutation and its last 1,000 rows held out, the target
pool the same texts shuffled; with ``disjoint=True`` the rows not held out are cut in two halves,
the source pool from one and the target pool from the other (no text on both sides). Their top-1
and MRR rank each held-out source text's own target among all 1,000 held-out targets by cosine,
both sides centred on their own mean.
"""

import csv
import time
import warnings

import numpy as np

from skalign import AnchorBootstrapper, ProcrustesAligner, UnpairedPool
from skalign.exceptions import DiscoveryFailedWarning
from skalign.metrics import retrieval_retention, top_k_accuracy


def split(n_rows, n_test, seed):
    """One seeded permutation of the rows: (the first ``n_test``, held out; the others)."""
    perm = np.random.default_rng(seed).permutation(n_rows)
    return perm[:n_test], perm[n_test:]


def pairs_and_pools(A, B, n_pairs, seed, n_test):
    """A split for the semi-supervised estimators: ``(Xp, Yp, Xte, Yte, pool, target_mean)``.

    Rows are permuted by ``seed``; the first ``n_test`` are held out, the next ``n_pairs`` are the
    known pairs and the rest form the unpaired pools, the target side in an order of the same
    generator's (no correspondence given). ``target_mean`` is the mean target row of everything
    not held out: the centre :func:`centred_top1` compares translations at.
    """
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(A))
    test, train = perm[:n_test], perm[n_test:]
    pairs, rest = train[:n_pairs], train[n_pairs:]
    pool = UnpairedPool(X=A[rest], y=B[rng.permutation(rest)])
    return A[pairs], B[pairs], A[test], B[test], pool, B[train].mean(0)


def centred_top1(Y_true, Y_pred, target_mean):
    """Held-out top-1 of rows translated into the target space, both sides centred on
    ``target_mean`` (the information the shared-space estimators get from their pools)."""
    return top_k_accuracy(Y_true - target_mean, Y_pred - target_mean)


def read_rows(path, text=()):
    """The rows of a CSV file written by a script, numbers parsed back: a column named in
    ``text`` stays text, a whole number becomes an ``int``, any other number a ``float``, an
    empty cell ``None``."""
    def value(key, cell):
        if key in text or cell == "":
            return cell if key in text else None
        try:
            return int(cell)
        except ValueError:
            try:
                return float(cell)
            except ValueError:
                return cell

    with open(path, newline="") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


ENCODER_PAIRS = [("minilm_l6", "mpnet_base"), ("minilm_l6", "me5_small_q4"),
                 ("mpnet_base", "me5_small_q4")]
#: English -> German pairs of the cross-lingual development set (``data/crosslingual_de.npz``,
#: ``maint_tools/make_crosslingual.py``): another model and language, and one model in two languages
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
