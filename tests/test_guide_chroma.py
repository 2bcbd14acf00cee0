"""The user guide's migration page, followed as written for a Chroma collection: its Python
snippet builds the pairs, its commands fit, evaluate and translate, and the translated
collection holds the new encoder's vectors. Only the encoder is a stand-in (no model can be
downloaded here): ``sentence_transformers.SentenceTransformer`` is replaced by a deterministic
encoder B of the same texts that encoder A embedded."""

import hashlib
import re
import shlex
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

PAGE = Path(__file__).resolve().parents[1] / "doc" / "user_guide" / "migrate.rst"
D_LATENT, D_A, D_B = 24, 32, 48
_rng = np.random.default_rng(7)
W_A = _rng.normal(size=(D_LATENT, D_A))
W_B = _rng.normal(size=(D_LATENT, D_B))


def _latent(texts):
    """A text's meaning: a fixed random vector per text."""
    return np.stack([np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))
                     .normal(size=D_LATENT) for t in texts])


def encode_a(texts):
    return (_latent(texts) @ W_A).astype(np.float32)


def encode_b(texts):
    Z = _latent(texts)
    return (np.tanh(0.3 * Z) @ W_B + 0.05 * Z @ W_B).astype(np.float32)


class FakeSentenceTransformer:
    def __init__(self, name):
        self.name = name

    def encode(self, texts):
        return encode_b(list(texts))


def _python_blocks(text):
    return [textwrap.dedent(b)
            for b in re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", text)]


def _commands(text, section):
    """The ``$ skalign ...`` commands of a section's console blocks, continuation lines
    joined."""
    body = text.split(f"\n{section}\n", 1)[1].split("\n----", 1)[0]
    body = re.sub(r"\\\n\s*", " ", body)
    return [shlex.split(line.split("$ ", 1)[1].split("   #")[0])
            for line in body.splitlines() if line.strip().startswith("$ skalign ")]


def test_the_migration_page_migrates_a_chroma_collection(tmp_path, monkeypatch, capsys):
    chromadb = pytest.importorskip("chromadb")
    from skalign.cli import main

    text = PAGE.read_text()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "sentence_transformers",
                        types.SimpleNamespace(SentenceTransformer=FakeSentenceTransformer))
    docs = [f"stored document number {i} about topic {i % 17}" for i in range(2600)]
    client = chromadb.PersistentClient("./chroma")
    col = client.create_collection("docs", metadata={"hnsw:space": "cosine"})
    for lo in range(0, len(docs), 1000):
        col.add(ids=[f"d{i}" for i in range(lo, min(lo + 1000, len(docs)))],
                documents=docs[lo:lo + 1000], embeddings=encode_a(docs[lo:lo + 1000]),
                metadatas=[{"n": i} for i in range(lo, min(lo + 1000, len(docs)))])
    del client

    snippet = next(b for b in _python_blocks(text) if "get_collection" in b)
    exec(compile(snippet, str(PAGE), "exec"), {})  # the page's own code: the pairs
    assert np.load("known_a.npy").shape == (2000, D_A)
    held = [f"held-out text {i}" for i in range(300)]
    np.save("heldout_a.npy", encode_a(held))
    np.save("heldout_b.npy", encode_b(held))

    fit_cmds = _commands(text, "Fit and check the map")
    assert [c[1] for c in fit_cmds] == ["plan", "fit", "evaluate"]
    for cmd in fit_cmds[1:]:
        assert main(cmd[1:]) == 0, capsys.readouterr().err
    assert "top-1" in capsys.readouterr().out

    chroma_cmds = [c for c in _commands(text, "Chroma and Qdrant") if "chroma:" in " ".join(c)]
    assert chroma_cmds
    for cmd in chroma_cmds:
        assert main(cmd[1:] + ["--quiet"]) == 0, capsys.readouterr().err
    assert main(["info", chroma_cmds[0][-1]]) == 0
    assert "translated by skalign" in capsys.readouterr().out

    out = chromadb.PersistentClient("./chroma").get_collection("docs_mpnet")
    got = out.get(include=["embeddings", "documents", "metadatas"])
    assert len(got["ids"]) == len(docs)
    T = np.asarray(got["embeddings"], dtype=np.float64)
    B = encode_b(got["documents"]).astype(np.float64)
    cos = np.sum(T * B, 1) / np.linalg.norm(T, axis=1) / np.linalg.norm(B, axis=1)
    assert np.median(cos) > 0.9, np.median(cos)  # a linear map of a mildly nonlinear encoder
    assert all(m["n"] == int(i[1:]) for i, m in zip(got["ids"], got["metadatas"]))
