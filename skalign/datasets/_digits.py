"""Real embeddings from small encoders trained with torch on scikit-learn's bundled digits.

Nothing is downloaded: the images ship with scikit-learn (``sklearn.datasets.load_digits``), the
encoders are trained here in a few seconds each, and the embeddings are cached on disk.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.utils import Bunch

from ._cache import cached

__all__ = ["DIGITS_ENCODERS", "load_digits_embeddings"]

_CACHE_VERSION = 1
#: Threads used to train the encoders: the count the published figures were computed with.
_TRAIN_THREADS = 2

#: The encoder catalogue: name → architecture, embedding width, activation and training seed.
#: ``mlp-a``/``mlp-b`` share architecture and width and differ only in their seed (the classic
#: "same model, different initialisation" pair); ``mlp-wide`` and ``cnn`` differ in architecture
#: and width.
DIGITS_ENCODERS = {
    "mlp-a": {"arch": "mlp", "hidden": 128, "dim": 32, "activation": "relu", "seed": 0},
    "mlp-b": {"arch": "mlp", "hidden": 128, "dim": 32, "activation": "relu", "seed": 1},
    "mlp-wide": {"arch": "mlp", "hidden": 256, "dim": 48, "activation": "tanh", "seed": 2},
    "cnn": {"arch": "cnn", "hidden": 32, "dim": 32, "activation": "relu", "seed": 3},
}


def _activation(name):
    return {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[name]()


def build_encoder(spec, n_inputs=64):
    """The torch module for one catalogue entry (embedding = its output)."""
    if spec["arch"] == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(n_inputs, spec["hidden"]),
            _activation(spec["activation"]),
            torch.nn.Linear(spec["hidden"], spec["dim"]),
            _activation(spec["activation"]),
        )
    if spec["arch"] == "cnn":
        side = int(round(n_inputs**0.5))
        return torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, side, side)),
            torch.nn.Conv2d(1, 16, 3, padding=1),
            _activation(spec["activation"]),
            torch.nn.Conv2d(16, spec["hidden"], 3, stride=2, padding=1),
            _activation(spec["activation"]),
            torch.nn.Flatten(),
            torch.nn.Linear(spec["hidden"] * ((side + 1) // 2) ** 2, spec["dim"]),
            _activation(spec["activation"]),
        )
    raise ValueError(f"Unknown architecture {spec['arch']!r}.")


def train_classifier_encoder(spec, X, labels, *, n_classes=10, epochs=60, batch_size=64, lr=3e-3):
    """Train ``build_encoder(spec)`` with a linear softmax head; return the encoder in eval mode.

    Deterministic for a given ``spec["seed"]``: parameters are initialised inside
    :func:`torch.random.fork_rng`, so the caller's global RNG state is left untouched, mini-batches
    are drawn from a local generator, and training always runs on ``_TRAIN_THREADS`` threads
    (float sums depend on how work is split across threads, so the caller's thread count would
    otherwise change the embeddings, and every figure computed from them, by a few thousandths).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(_TRAIN_THREADS)
    try:
        return _train(spec, X, labels, n_classes, epochs, batch_size, lr)
    finally:
        torch.set_num_threads(threads)


def _train(spec, X, labels, n_classes, epochs, batch_size, lr):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        encoder = build_encoder(spec, X.shape[1])
        head = torch.nn.Linear(spec["dim"], n_classes)
    gen = torch.Generator().manual_seed(spec["seed"])
    Xt = torch.as_tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(labels, dtype=torch.long)
    params = list(encoder.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(epochs):
        for idx in torch.randperm(len(Xt), generator=gen).split(batch_size):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(head(encoder(Xt[idx])), yt[idx])
            loss.backward()
            opt.step()
    return encoder.eval()


def load_digits_embeddings(encoders=None, *, test_size=0.4, split_seed=0, data_home=None,
                           use_cache=True):
    """Load embeddings of the 1,797 scikit-learn digits by several small trained encoders.

    Each encoder (see :data:`DIGITS_ENCODERS`) is trained as a classifier on the training split
    only; its penultimate layer is the embedding. Held-out rows are therefore genuinely unseen by
    every encoder. The result is cached in :func:`~skalign.datasets.get_data_home`; a rerun with
    the same arguments returns identical arrays.

    Parameters
    ----------
    encoders : list of str, default=None
        Names from :data:`DIGITS_ENCODERS`; ``None`` means all.
    test_size : float, default=0.4
        Fraction of the digits held out from encoder training (stratified).
    split_seed : int, default=0
        Seed of the train/test split.
    data_home : str or path-like, default=None
        Cache folder; see :func:`~skalign.datasets.get_data_home`.
    use_cache : bool, default=True
        Read and write the on-disk cache.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``embeddings`` (dict name → float32 array of shape (1797, dim)), ``target`` (digit labels),
        ``images`` (1797 × 64 scaled pixels in [0, 1]), ``train_index`` and ``test_index``,
        ``encoders`` (the names, in order) and ``DESCR``.

    Examples
    --------
    >>> from skalign.datasets import load_digits_embeddings
    >>> data = load_digits_embeddings(["mlp-a", "mlp-b"])  # doctest: +SKIP
    >>> data.embeddings["mlp-a"].shape  # doctest: +SKIP
    (1797, 32)
    """
    names = list(DIGITS_ENCODERS) if encoders is None else list(encoders)
    unknown = [n for n in names if n not in DIGITS_ENCODERS]
    if unknown:
        raise ValueError(f"Unknown encoder(s) {unknown}; choose from {list(DIGITS_ENCODERS)}.")
    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32)
    labels = digits.target
    train_index, test_index = train_test_split(
        np.arange(len(labels)), test_size=test_size, stratify=labels, random_state=split_seed
    )
    def compute():
        embeddings = {}
        for name in names:
            enc = train_classifier_encoder(DIGITS_ENCODERS[name], images[train_index],
                                           labels[train_index])
            with torch.no_grad():
                embeddings[name] = enc(torch.as_tensor(images)).numpy().astype(np.float32)
        return embeddings

    params = {"v": _CACHE_VERSION, "enc": {n: DIGITS_ENCODERS[n] for n in names},
              "test_size": test_size, "split_seed": split_seed}
    embeddings = cached("digits_embeddings", params, compute, data_home=data_home,
                        use_cache=use_cache)
    return Bunch(
        embeddings=embeddings,
        target=labels,
        images=images,
        train_index=np.sort(train_index),
        test_index=np.sort(test_index),
        encoders=names,
        DESCR=(
            "Embeddings of scikit-learn's 8x8 digits by small torch encoders trained as "
            f"classifiers on {len(train_index)} training digits: " + ", ".join(names) + "."
        ),
    )
