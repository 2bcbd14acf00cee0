"""
===================================================
Label efficiency of GeRA on real digit embeddings
===================================================

:class:`~skalign.GeRAAligner` aligns two encoders with a contrastive loss on a few *pairs* plus a
geometric term that keeps each encoder's local neighbourhoods, measured on plentiful *unpaired*
embeddings, from being distorted. Here two different small encoders trained on scikit-learn's
digits (an MLP and a CNN, see :func:`~skalign.datasets.load_digits_embeddings`) play the two
modalities. We vary the number of pairs from 25 to 1,000 and keep the unpaired pool fixed (all
1,078 training digits, seen separately by each encoder, with no correspondence given), then
measure cross-space retrieval of the 719 held-out digits: top-1 accuracy and mean reciprocal rank
(MRR) of the true counterpart among all held-out targets.

Compared methods:

* **GeRA** (``alpha=10``) and **contrastive only** (the same estimator with ``alpha=0``: same maps,
  initialisation, batches and early stopping, no geometric term);
* :class:`~skalign.ProcrustesAligner` and :class:`~skalign.LinearAligner` (ridge ``1e-2``), which
  map the source into the target space; retrieval there uses cosine similarity after centring on
  the pool's target mean (the same information the other methods get);
* :class:`~skalign.ASIFAligner`, the training-free relative representation (anchors = the pairs,
  centred, ``p = 8``, at most 100 non-zeros).
"""

import matplotlib.pyplot as plt
import numpy as np
import torch

from skalign import ASIFAligner, GeRAAligner, LinearAligner, ProcrustesAligner, UnpairedPool
from skalign.datasets import load_digits_embeddings
from skalign.metrics import mean_reciprocal_rank, top_k_accuracy

threads = torch.get_num_threads()
torch.set_num_threads(1)  # tiny matrices: extra threads only add synchronisation overhead

data = load_digits_embeddings(["mlp-a", "cnn"])
A, B = data.embeddings["mlp-a"], data.embeddings["cnn"]
train, test = data.train_index, data.test_index
pool = UnpairedPool(X=A[train], y=B[train])
target_mean = B[train].mean(0)


def shared_space(method, idx):
    """Fit on the pairs ``idx``; return (queries, gallery) for the held-out digits."""
    if isinstance(method, GeRAAligner):
        method.fit(A[idx], B[idx], unpaired=pool)
        return method.transform(A[test]), method.transform_target(B[test])
    method.fit(A[idx], B[idx])
    if isinstance(method, ASIFAligner):
        return method.transform(A[test]), method.transform_target(B[test])
    return method.transform(A[test]) - target_mean, B[test] - target_mean


# %%
# Sweep the number of pairs
# -------------------------
# Two random draws of the pairs per size; the unpaired pool never changes.
n_pairs = [25, 50, 100, 200, 400, 1000]
seeds = [0, 1]
names = ["GeRA (alpha=10)", "contrastive only", "Procrustes", "Linear (ridge)", "ASIF"]
top1 = {name: np.zeros((len(seeds), len(n_pairs))) for name in names}
mrr = {name: np.zeros((len(seeds), len(n_pairs))) for name in names}
for s, seed in enumerate(seeds):
    rng = np.random.default_rng(seed)
    for j, n in enumerate(n_pairs):
        idx = rng.choice(train, size=n, replace=False)
        methods = [GeRAAligner(alpha=10.0, random_state=seed),
                   GeRAAligner(alpha=0.0, random_state=seed),
                   ProcrustesAligner(), LinearAligner(alpha=1e-2),
                   ASIFAligner(n_nonzero=100, exponent=8.0, center=True)]
        for name, method in zip(names, methods):
            queries, gallery = shared_space(method, idx)
            top1[name][s, j] = top_k_accuracy(gallery, queries)
            mrr[name][s, j] = mean_reciprocal_rank(gallery, queries)

print("held-out top-1 (mean of 2 draws)")
print(f"{'pairs':<18}" + "".join(f"{n:>8}" for n in n_pairs))
for name in names:
    print(f"{name:<18}" + "".join(f"{v:8.3f}" for v in top1[name].mean(0)))
print("held-out MRR (mean of 2 draws)")
for name in names:
    print(f"{name:<18}" + "".join(f"{v:8.3f}" for v in mrr[name].mean(0)))

# %%
# Plot
# ----
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
for ax, (metric, values) in zip(axes, [("top-1 accuracy", top1), ("MRR", mrr)]):
    for name in names:
        ax.errorbar(n_pairs, values[name].mean(0), yerr=values[name].std(0), marker="o",
                    capsize=3, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("number of pairs")
    ax.set_ylabel(f"held-out {metric}")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
fig.suptitle("mlp-a → cnn digit embeddings, 1,078 unpaired points per space")
fig.tight_layout()
plt.show()

torch.set_num_threads(threads)

# %%
# Reading the result
# ------------------
# The geometric term helps the contrastive aligner most between about 50 and 400 pairs, where the
# contrastive loss alone starts to distort the neighbourhoods it does not see; with 25 pairs both
# variants stay close to their (Procrustes) initialisation and tie. On these small, low-dimensional
# encoders the closed-form ridge map is nevertheless the strongest method from 50 pairs on, so
# GeRA's advantage here is over its own contrastive-only baseline, Procrustes and ASIF, not over
# least squares. Choose ``alpha`` (and ``n_neighbors``) by cross-validation:
# ``GridSearchCV(GeRAAligner(), {"alpha": [...]}).fit(X, y, unpaired=pool)`` passes the whole pool
# to every fold.
