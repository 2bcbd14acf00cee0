"""
===================================================
Defaults against tuned baselines on real encoders
===================================================

The digits encoders used in most examples are small and well behaved; real sentence encoders are
not: their embeddings are anisotropic (a few directions carry much of the variance), offset from
the origin and hubby. Defaults that look fine on digits have collapsed on them. This example runs
the study script ``benchmarks/bench_real_defaults.py`` on the real embeddings that ship with skalign
(:func:`~skalign.datasets.load_docstring_embeddings`: 1,350 first sentences of Python
standard-library docstrings embedded by all-MiniLM-L6-v2 and all-mpnet-base-v2) and compares each
estimator's **defaults** with the **best setting of a small grid** (chosen on the held-out rows,
so an upper bound for tuning) and with two tuned one-line baselines: orthogonal **Procrustes** and
**ridge** regression with its penalty chosen by leave-one-out cross-validation.

The score is held-out top-1 retrieval over 350 held-out texts: the translated MiniLM embedding's
nearest MPNet embedding (cosine) must be the same text's. Chance is 1/350. Each figure is the
mean over three random splits. The same script on the full development set (4,000 texts, three
encoders, 2,000 held-out) gives the table in the user guide (:ref:`real_data`).
"""

import importlib.util
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

# The study lives in the benchmarks folder beside the examples; sphinx-gallery runs this file from
# the examples folder.
here = Path(__file__).resolve().parent if "__file__" in globals() else Path(os.getcwd())
spec = importlib.util.spec_from_file_location(
    "bench_real_defaults", here.parent / "benchmarks" / "bench_real_defaults.py"
)
study = sys.modules["bench_real_defaults"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)

from skalign.datasets import load_docstring_embeddings  # noqa: E402

threads = torch.get_num_threads()
torch.set_num_threads(1)
data = load_docstring_embeddings()
rows = study.with_baselines(
    study.run(
        data.embeddings,
        [("minilm_l6", "mpnet_base")],
        n_pairs_list=[25, 50, 100, 300],
        seeds=[0, 1, 2],
        n_test=350,
        methods=[m for m in study.METHODS if m.name != "LinearAligner"],
        log=lambda line: None,
    )
)
torch.set_num_threads(threads)
print(study.format_table(rows))

# %%
# Each panel is one pair count; bars are the defaults, the dot the best grid setting, and the
# lines the two tuned baselines.
counts = sorted({r["n_pairs"] for r in rows})
fig, axes = plt.subplots(1, len(counts), figsize=(3.2 * len(counts), 3.6), sharey=True)
for ax, n in zip(axes, counts):
    sub = [r for r in rows if r["n_pairs"] == n and not r["method"].startswith(("Procrustes",
                                                                               "ridge"))]
    y = np.arange(len(sub))
    ax.barh(y, [r["default"] for r in sub], color="tab:blue", label="defaults")
    ax.plot([r["best"] for r in sub], y, "o", color="tab:orange", label="best of grid")
    ax.axvline(sub[0]["procrustes"], color="k", ls="--", lw=1, label="Procrustes")
    ax.axvline(sub[0]["ridge_cv"], color="tab:green", ls=":", lw=1.5, label="ridge (LOO-CV)")
    ax.set_yticks(y, [r["method"].replace("Aligner", "").replace("Projector", "") for r in sub])
    ax.set_xlim(0, 1)
    ax.set_title(f"{n} pairs")
    ax.set_xlabel("held-out top-1")
axes[0].legend(loc="lower right", fontsize=7)
fig.tight_layout()
plt.show()
