"""
===================================================
Label efficiency of GeRA on real digit embeddings
===================================================

:class:`~skalign.GeRAAligner` aligns two encoders with a contrastive loss on a few *pairs* plus a
geometric term that keeps each encoder's local neighbourhoods, measured on plentiful *unpaired*
embeddings, from being distorted. Here two different small encoders trained on scikit-learn's
digits play the two modalities: an MLP (``"mlp-a"``) against a CNN (``"cnn"``) and against a wider
tanh MLP (``"mlp-wide"``), see :func:`~skalign.datasets.load_digits_embeddings`. We vary the
number of pairs from 25 to 1,000 and keep the unpaired pool fixed (all
1,078 training digits, seen separately by each encoder, with no correspondence given), then
measure cross-space retrieval of the 719 held-out digits: top-1 accuracy and mean reciprocal rank
(MRR) of the true counterpart among all held-out targets.

Compared methods:

* **GeRA at its defaults** (``GeRAAligner()``: Procrustes start, up to 20 epochs of contrastive
  fine-tuning at temperature ``0.5``, as many as pairs held out from the fit favour — none, and
  the start is returned, when no epoch beats it there —, ``alpha=0``) and **GeRA with the
  geometric term** (``alpha=10``, everything else the same: same start, batches and budget);
* :class:`~skalign.ProcrustesAligner` and the *tuned* ridge :class:`~skalign.LinearAligner`
  (its default ``alpha="auto"``: leave-one-out choice of the penalty, as
  :class:`~sklearn.linear_model.RidgeCV`), which map the source into the target space; retrieval
  there uses cosine similarity after centring on the pool's target mean (the same information the
  other methods get);
* :class:`~skalign.ASIFAligner` at its defaults, the training-free relative representation
  (anchors = the pairs).
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

from skalign import ASIFAligner, GeRAAligner, LinearAligner, ProcrustesAligner, UnpairedPool
from skalign.datasets import load_digits_embeddings
from skalign.metrics import mean_reciprocal_rank, top_k_accuracy

threads = torch.get_num_threads()
torch.set_num_threads(1)  # tiny matrices: extra threads only add synchronisation overhead

data = load_digits_embeddings(["mlp-a", "cnn", "mlp-wide"])
train, test = data.train_index, data.test_index
n_pairs = [25, 50, 100, 200, 400, 1000]
seeds = [0, 1, 2]
names = ["GeRA (defaults)", "GeRA (alpha=10)", "Procrustes", "ridge (LOO alpha)", "ASIF"]


def sweep(source, target):
    """Held-out top-1 and MRR of every method, per seed and number of pairs."""
    A, B = data.embeddings[source], data.embeddings[target]
    pool = UnpairedPool(X=A[train], y=B[train])  # fixed; no correspondence given
    target_mean = B[train].mean(0)
    top1 = {name: np.zeros((len(seeds), len(n_pairs))) for name in names}
    mrr = {name: np.zeros((len(seeds), len(n_pairs))) for name in names}
    for s, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        for j, n in enumerate(n_pairs):
            idx = rng.choice(train, size=n, replace=False)
            methods = [GeRAAligner(random_state=seed), GeRAAligner(alpha=10.0, random_state=seed),
                       ProcrustesAligner(), LinearAligner(), ASIFAligner()]
            for name, method in zip(names, methods):
                if isinstance(method, GeRAAligner):
                    method.fit(A[idx], B[idx], unpaired=pool)
                else:
                    method.fit(A[idx], B[idx])
                if isinstance(method, (GeRAAligner, ASIFAligner)):  # shared space
                    queries, gallery = method.transform(A[test]), method.transform_target(B[test])
                else:  # translated into the target space
                    queries = method.transform(A[test]) - target_mean
                    gallery = B[test] - target_mean
                top1[name][s, j] = top_k_accuracy(gallery, queries)
                mrr[name][s, j] = mean_reciprocal_rank(gallery, queries)
    return top1, mrr


# %%
# Sweep the number of pairs
# -------------------------
# Three random draws of the pairs per size, for two encoder pairs; the unpaired pool never changes.
results = {}
for target in ["cnn", "mlp-wide"]:
    results[target] = sweep("mlp-a", target)
    for metric, values in zip(["top-1", "MRR"], results[target]):
        print(f"mlp-a -> {target}: held-out {metric} (mean of {len(seeds)} draws)")
        print(f"{'pairs':<18}" + "".join(f"{n:>8}" for n in n_pairs))
        for name in names:
            print(f"{name:<18}" + "".join(f"{v:8.3f}" for v in values[name].mean(0)))

# %%
# Plot
# ----
fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
for row, target in enumerate(results):
    for col, metric in enumerate(["top-1 accuracy", "MRR"]):
        ax = axes[row, col]
        values = results[target][col]
        for name in names:
            ax.errorbar(n_pairs, values[name].mean(0), yerr=values[name].std(0), marker="o",
                        capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_ylabel(f"held-out {metric}")
        ax.set_title(f"mlp-a → {target}", fontsize=10)
        ax.grid(alpha=0.3)
for ax in axes[1]:
    ax.set_xlabel("number of pairs (1,078 unpaired points per space)")
axes[0, 0].legend(fontsize=8)
fig.tight_layout()
plt.show()

torch.set_num_threads(threads)

# %%
# Reading the result
# ------------------
# Against the *tuned* ridge map (leave-one-out penalty) GeRA's defaults are close on these small
# 32-dimensional encoders, within 5 points of top-1 either way at every size. On ``cnn`` they lead
# with 25 and 50 pairs (by 5 and 2 points), trail with 100 and 200 (by 4) and are level from 400
# on; on ``mlp-wide`` they lead at every size but 50 pairs (by 2–5 points; ridge leads by 3 at
# 50). The geometric term (``alpha=10``) helps at no size here: 1–9 points of top-1 below the
# defaults with up to 200 pairs, 9–13 from 400 on. Procrustes and ASIF trail both: an isometry
# cannot absorb the two encoders' different shapes.
#
# On real sentence encoders (384–768 dimensions, the GeRA user guide's table) the picture is
# different: GeRA's defaults beat tuned ridge and Procrustes by 6–36 points of top-1 with 25–100
# pairs; with 1,000 pairs they lead Procrustes by 1.6 points on MiniLM → e5 and are level with it
# on MiniLM → MPNet, where the held-out pairs keep the start or a few epochs. Always compare with
# ``LinearAligner()`` and ``ProcrustesAligner()`` on your own data;
# ``GridSearchCV(GeRAAligner(), {"alpha": [...]}).fit(X, y, unpaired=pool)`` passes the whole pool
# to every fold.
