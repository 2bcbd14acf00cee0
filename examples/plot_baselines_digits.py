"""
=====================================================
Procrustes vs. least squares on real digit embeddings
=====================================================

Two small encoders trained on scikit-learn's digits embed the same images in unrelated
coordinates. We fit :class:`~skalign.ProcrustesAligner` (an isometry, optionally scaled) and
:class:`~skalign.LinearAligner` (a ridge affine map) on a growing number of anchor pairs and
measure, on held-out digits,

* the translation quality: mean cosine similarity and top-1 retrieval of the true counterpart,
* the stitching accuracy: a classifier trained on encoder B's space, fed encoder A's translated
  embeddings.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression

from skalign import LinearAligner, ProcrustesAligner
from skalign.datasets import load_digits_embeddings
from skalign.metrics import top_k_accuracy

data = load_digits_embeddings(["mlp-a", "cnn"])
A, B, labels = data.embeddings["mlp-a"], data.embeddings["cnn"], data.target
train, test = data.train_index, data.test_index

clf = LogisticRegression(max_iter=3000).fit(B[train], labels[train])
print(f"classifier on B's own embeddings: {clf.score(B[test], labels[test]):.3f}")

# %%
# Sweep the number of anchor pairs
# --------------------------------
aligners = {
    "Procrustes": ProcrustesAligner(),
    "Procrustes + scale": ProcrustesAligner(scale=True),
    "Linear (ridge 1e-2)": LinearAligner(alpha=1e-2),
    "Linear (ridge, LOO alpha)": LinearAligner(),  # alpha="auto": leave-one-out choice
}
n_anchors = [40, 80, 160, 320, 640]
rng = np.random.default_rng(0)
results = {name: {"cosine": [], "top-1": [], "stitched accuracy": []} for name in aligners}
for n in n_anchors:
    anchors = rng.choice(train, size=n, replace=False)
    for name, aligner in aligners.items():
        aligner.fit(A[anchors], B[anchors])
        B_hat = aligner.transform(A[test])
        results[name]["cosine"].append(aligner.score(A[test], B[test]))
        results[name]["top-1"].append(top_k_accuracy(B[test], B_hat))
        results[name]["stitched accuracy"].append(clf.score(B_hat, labels[test]))

for metric in ("top-1", "stitched accuracy"):
    print(f"{metric:<27}" + "".join(f"{n:>8}" for n in n_anchors))
    for name, res in results.items():
        print(f"{name:<27}" + "".join(f"{v:8.3f}" for v in res[metric]))

# %%
# Plot
# ----
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharex=True)
for ax, metric in zip(axes, ["cosine", "top-1", "stitched accuracy"]):
    for name, res in results.items():
        ax.plot(n_anchors, res[metric], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xticks(n_anchors, [str(n) for n in n_anchors])
    ax.minorticks_off()
    ax.set_xlabel("anchor pairs")
    ax.set_title(metric)
axes[2].axhline(clf.score(B[test], labels[test]), color="k", ls="--", lw=1, label="B itself")
axes[2].legend(fontsize=8)
fig.suptitle("mlp-a → cnn on held-out digits")
fig.tight_layout()
plt.show()

# %%
# The isometry is data-efficient but cannot absorb the different scales and shapes of the two
# spaces; the least-squares map needs more anchors than dimensions but then wins on every metric.
# ``LinearAligner()`` chooses its penalty by exact leave-one-out error over the anchors (the
# criterion of :class:`~sklearn.linear_model.RidgeCV`, one SVD for all candidates; the choice is
# in ``alpha_``), so the baseline is tuned without a grid search. Here it matches or beats the
# fixed ``1e-2`` at every anchor count (top-1 0.70 against 0.48 with 40 anchors). The criterion is
# squared error, not retrieval: on real sentence embeddings with 50 pairs a smaller penalty than
# the leave-one-out choice retrieves better (see the GeRA user guide), so check on your data.
