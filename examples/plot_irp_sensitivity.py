"""
====================================================================
Inverse relative projection: sensitivity to δ and ω, and stitching
====================================================================

:class:`~skalign.InverseRelativeProjector` translates embeddings from one encoder into another
through the relative space shared by both: cosines to a set of paired anchors. Decoding from the
relative space needs the pseudo-inverse of the target anchors, which is ill-conditioned when
anchors are nearly collinear. The method therefore prunes the anchors (farthest point sampling
until pairwise :math:`|\\cos| \\le 1 - \\delta`) and averages ω pruned subsets.

This example reproduces the sensitivity analysis of Maiorca et al. (2024, Fig. 3) on the small
digits encoders of :func:`skalign.datasets.load_digits_embeddings`, with the paper's plain
pseudo-inverse (``alpha=0``), then compares skalign's default decode, a ridge chosen by
generalised cross-validation (``alpha="gcv"``): the reconstruction similarity
of held-out embeddings and the mean condition number, over a grid of ``pruning_threshold`` (δ) and
``n_subspaces`` (ω), for the *intra-space* inversion (encode and decode in the same space) and the
*inter-space* translation ``mlp-a → mlp-b``. It ends with a stitching table: a classifier trained
on one encoder's embeddings is fed another encoder's embeddings translated by IRP.
"""

# %%
# Data: 300 paired anchors from the training digits
# --------------------------------------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression

from skalign import InverseRelativeProjector, ProcrustesAligner
from skalign.datasets import load_digits_embeddings
from skalign.exceptions import IllConditionedDecodeWarning

data = load_digits_embeddings(["mlp-a", "mlp-b", "mlp-wide", "cnn"])
E, labels = data.embeddings, data.target
train, test = data.train_index, data.test_index
anchors = np.random.default_rng(0).choice(train, 300, replace=False)


def centred_cosine(pred, true, mean):
    """Mean cosine around the target anchors' mean (raw cosines of embeddings are inflated)."""
    p, t = pred - mean, true - mean
    return float(np.mean(np.sum(p * t, 1) / np.linalg.norm(p, axis=1) / np.linalg.norm(t, axis=1)))


# %%
# Sensitivity grid
# ----------------
# For each (δ, ω) we fit on the anchors and measure, on the held-out digits, the cosine between
# the reconstruction and the true target embedding, and the condition number of the pruned
# target anchor matrices averaged over the subspaces. The plain pseudo-inverse warns on the
# ill-conditioned settings; the warnings are silenced here, the condition numbers show them.
deltas = np.round(np.arange(0.0, 1.0, 0.1), 1)
omegas = [1, 2, 4, 8, 16]
settings = {"intra-space (mlp-b → mlp-b)": ("mlp-b", "mlp-b"),
            "inter-space (mlp-a → mlp-b)": ("mlp-a", "mlp-b")}
similarity = {name: np.zeros((len(omegas), len(deltas))) for name in settings}
condition = {name: np.zeros((len(omegas), len(deltas))) for name in settings}
kept = np.zeros((len(omegas), len(deltas)))

for name, (src, tgt) in settings.items():
    mean = E[tgt][anchors].mean(0)
    for i, omega in enumerate(omegas):
        for j, delta in enumerate(deltas):
            irp = InverseRelativeProjector(pruning_threshold=delta, n_subspaces=omega, alpha=0.0,
                                           random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IllConditionedDecodeWarning)
                irp.fit(E[src][anchors], E[tgt][anchors])
            similarity[name][i, j] = centred_cosine(irp.transform(E[src][test]), E[tgt][test], mean)
            condition[name][i, j] = np.log10(np.mean(irp.condition_numbers_))
            kept[i, j] = irp.anchors_per_subspace_.mean()

fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True, sharey=True)
for col, name in enumerate(settings):
    for row, (values, label, cmap) in enumerate([
        (similarity[name], "reconstruction similarity", "viridis"),
        (condition[name], "log10 mean condition number", "magma_r"),
    ]):
        ax = axes[row, col]
        im = ax.imshow(values, origin="lower", aspect="auto", cmap=cmap)
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, f"{v:.2f}" if row == 0 else f"{v:.1f}", ha="center", va="center",
                    fontsize=6.5, color="white" if (v < values.mean()) == (row == 0) else "black")
        fig.colorbar(im, ax=ax, label=label)
        ax.set_xticks(range(len(deltas)), [f"{d:.1f}" for d in deltas])
        ax.set_yticks(range(len(omegas)), omegas)
        if row == 0:
            ax.set_title(name)
        if row == 1:
            ax.set_xlabel("pruning threshold δ")
        if col == 0:
            ax.set_ylabel("subspaces ω")
fig.suptitle("IRP sensitivity, plain pseudo-inverse (alpha=0), digits encoders (300 anchors)")
fig.tight_layout()

print("mean anchors kept per subspace, by δ:",
      dict(zip(deltas.tolist(), np.round(kept.mean(0), 1).tolist())))
for name in settings:
    i, j = np.unravel_index(np.argmax(similarity[name]), similarity[name].shape)
    print(f"{name}: best similarity {similarity[name][i, j]:.3f} at δ={deltas[j]}, "
          f"ω={omegas[i]}; no pruning (δ=0, ω=1): {similarity[name][0, 0]:.3f}")

src, tgt = settings["inter-space (mlp-a → mlp-b)"]
mean = E[tgt][anchors].mean(0)
for delta in (0.0, 0.3, 0.8):
    irp = InverseRelativeProjector(pruning_threshold=delta, random_state=0)
    irp.fit(E[src][anchors], E[tgt][anchors])
    sim = centred_cosine(irp.transform(E[src][test]), E[tgt][test], mean)
    print(f"GCV ridge (alpha_={irp.alpha_:.3g}), δ={delta}: inter-space similarity {sim:.3f}")

# %%
# The digits encoders do not fill their 32 dimensions (``mlp-b`` has seven dead ReLU units: its
# centred anchors have rank 25), so without pruning the anchor matrix is singular (condition
# number ~1e16) and the pseudo-inverse blows up directions of tiny variance. Within one space
# this is harmless — encoding and decoding with the same anchors is an exact round trip, the
# intra-space similarity is 1 — but between two encoders those directions carry noise that does
# not transfer, and the translation collapses. Pruning to about a dozen nearly orthogonal anchors
# (δ ≥ 0.4) brings the condition number down by 14 orders of magnitude and the similarity up to
# about 0.95. As in the paper, ω barely matters at low δ and matters most when pruning is
# aggressive: the average over ω subsets covers more directions than any one of them.
#
# skalign's default decode adds a ridge, chosen by generalised cross-validation on the anchors
# (printed above), which damps the directions of tiny variance instead of inverting them. On
# these digits encoders the ridge alone is not enough without pruning (δ = 0: 0.62 against 0.55
# unregularised): the noise sits in the target anchors' dead directions, the design of the decode,
# which cross-validating the decode's fit does not see. With the default mild pruning (δ = 0.3)
# it reaches 0.91, near the best of the plain grid. On real text encoders it is the other way
# round — the ridge is what prevents the collapse of the plain pseudo-inverse at δ ≤ 0.5, and any
# δ up to 0.5 is within 4 % of the best (see the user guide's real-data table).
#
# Stitching: a classifier trained on encoder B, fed encoder A translated into B
# ------------------------------------------------------------------------------
rows = []
for src, tgt in [("mlp-a", "mlp-b"), ("mlp-b", "mlp-a"), ("cnn", "mlp-b"), ("mlp-wide", "mlp-b")]:
    clf = LogisticRegression(max_iter=2000).fit(E[tgt][train], labels[train])
    native = clf.score(E[tgt][test], labels[test])
    same_width = E[src].shape[1] == E[tgt].shape[1]
    raw = clf.score(E[src][test], labels[test]) if same_width else np.nan
    scores = []
    for est in (InverseRelativeProjector(random_state=0),
                InverseRelativeProjector(pruning_threshold=0.8, random_state=0),
                InverseRelativeProjector(pruning_threshold=0.0, n_subspaces=1, alpha=0.0,
                                         rtol=0.1),
                ProcrustesAligner()):
        if isinstance(est, ProcrustesAligner) and not same_width:
            scores.append(np.nan)
            continue
        est.fit(E[src][anchors], E[tgt][anchors])
        scores.append(clf.score(est.transform(E[src][test]), labels[test]))
    rows.append((f"{src} → {tgt}", native, raw, *scores))

header = ("pair", "B on B", "raw A", "IRP defaults", "IRP δ=0.8", "rtol=0.1", "Procrustes")
print("{:<18}".format(header[0]) + "".join(f"{h:>14}" for h in header[1:]))
for r in rows:
    print(f"{r[0]:<18}" + "".join(f"{v:>14.3f}" for v in r[1:]))

# %%
# IRP recovers most of the native accuracy with no training, from 300 anchors, whereas feeding
# the untranslated embeddings is near chance (0.1) even when the widths match. The ``rtol=0.1``
# column skips pruning and truncates the spectrum of the single pseudo-inverse instead (singular
# values below a tenth of the largest are dropped): a strong alternative when the anchors
# over-determine a low-rank space. Procrustes, fitted
# directly on the same anchors, is a strong reference when both spaces have the same width; IRP
# also handles different widths (``mlp-wide`` is 48-d) and keeps the two halves independent: the
# source side only needs its own anchors to encode, the target side its own to decode
# (:class:`~skalign.RelativeProjector`).
plt.show()
