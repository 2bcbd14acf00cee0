"""Several contrastive (InfoNCE) encoders of scikit-learn's digits, with out-of-distribution shifts.

A small-scale version of the setting of Peng et al. (arXiv:2411.13073): encoders with the same
architecture are trained with a self-supervised InfoNCE objective on the same unlabelled digits,
differing only in their seed; their embeddings are evaluated on held-out digits and on shifted
copies of them that the training augmentations do not cover. Nothing is downloaded; embeddings
are cached in :func:`~skalign.datasets.get_data_home`.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.utils import Bunch, check_random_state

from ._cache import cached

__all__ = ["DIGITS_SHIFTS", "load_digits_ensemble"]

_CACHE_VERSION = 2
_SIDE = 8

#: The out-of-distribution shifts applied to the held-out digits.
DIGITS_SHIFTS = {
    "intensity": "contrast reduced to 45 % on a raised background: x → 0.3 + 0.45·x",
    "crop": "a random 6×6 crop upsampled to 8×8 (zoom by 4/3 with a random offset)",
    "shift": "translation by 2 pixels in a random direction (training augmentation: at most 1)",
}


# ---------------------------------------------------------------------------------- image ops
def _translate(img, dy, dx, pad):
    """Shift each ``(B, 8, 8)`` image by its own integer ``(dy, dx)``, |d| ≤ pad, zero fill."""
    P = torch.nn.functional.pad(img, (pad, pad, pad, pad))
    ar = torch.arange(_SIDE)
    rows = (ar + pad - dy.unsqueeze(1)).unsqueeze(2)
    cols = (ar + pad - dx.unsqueeze(1)).unsqueeze(1)
    return P[torch.arange(len(img)).view(-1, 1, 1), rows, cols]


def _augment(img, gen):
    """Training augmentation: ±1-pixel translation, intensity scaling, pixel dropout, noise."""
    B = len(img)
    dy, dx = (torch.randint(-1, 2, (B,), generator=gen) for _ in range(2))
    out = _translate(img, dy, dx, 1)
    out = out * (0.75 + 0.5 * torch.rand(B, 1, 1, generator=gen))
    out = out * (torch.rand(out.shape, generator=gen) > 0.1)
    return out + 0.05 * torch.randn(out.shape, generator=gen)


def _shift_images(img, kind, rng):
    """Apply an out-of-distribution shift (see :data:`DIGITS_SHIFTS`) to ``(B, 8, 8)`` images."""
    B = len(img)
    if kind == "intensity":
        return 0.3 + 0.45 * img
    if kind == "shift":
        dirs = np.array([(2, 0), (-2, 0), (0, 2), (0, -2)])[rng.randint(4, size=B)]
        return _translate(img, torch.as_tensor(dirs[:, 0]), torch.as_tensor(dirs[:, 1]), 2)
    if kind == "crop":
        off = rng.randint(0, 3, size=(B, 2))
        crops = torch.stack([img[i, r:r + 6, c:c + 6] for i, (r, c) in enumerate(off)])
        return torch.nn.functional.interpolate(
            crops.unsqueeze(1), size=(_SIDE, _SIDE), mode="bilinear", align_corners=False
        ).squeeze(1)
    raise ValueError(f"Unknown shift {kind!r}; choose from {list(DIGITS_SHIFTS)}.")


# ------------------------------------------------------------------------------------ encoders
def _build_encoder(dim, hidden):
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(_SIDE * _SIDE, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, dim),
    )


def train_infonce_encoder(images, *, seed, dim=16, hidden=128, epochs=60, batch_size=256,
                          temperature=0.2, lr=3e-3):
    r"""Train an MLP encoder on unlabelled ``(n, 8, 8)`` images with the InfoNCE objective.

    Two augmented copies of each image in a batch are embedded on the unit sphere and the
    symmetric InfoNCE loss

    .. math::

        -\frac{1}{2B}\sum_{k=1}^{B} \Big[\log \frac{e^{\langle z_k, z'_k\rangle/\tau}}
        {\sum_l e^{\langle z_k, z'_l\rangle/\tau}} + \log \frac{e^{\langle z'_k, z_k\rangle/\tau}}
        {\sum_l e^{\langle z'_k, z_l\rangle/\tau}}\Big]

    is minimised with Adam. Training runs on one CPU thread (the previous thread count is
    restored afterwards): the model is tiny, multi-threaded small kernels are slower on a shared
    machine, and a fixed thread count makes the result bit-for-bit deterministic for a given
    ``seed``. The global torch RNG is left untouched.

    Returns
    -------
    encoder : torch.nn.Module in eval mode
        Its output, L2-normalised, is the embedding.
    """
    with _one_thread():
        return _train(images, seed, dim, hidden, epochs, batch_size, temperature, lr)


@contextlib.contextmanager
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _train(images, seed, dim, hidden, epochs, batch_size, temperature, lr):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        encoder = _build_encoder(dim, hidden)
    gen = torch.Generator().manual_seed(seed)
    X = torch.as_tensor(images, dtype=torch.float32)
    opt = torch.optim.Adam(encoder.parameters(), lr=lr)
    target = torch.arange(batch_size)
    for _ in range(epochs):
        for idx in torch.randperm(len(X), generator=gen).split(batch_size):
            if len(idx) < 2:
                continue
            B = X[idx]
            z1 = torch.nn.functional.normalize(encoder(_augment(B, gen)), dim=1)
            z2 = torch.nn.functional.normalize(encoder(_augment(B, gen)), dim=1)
            logits = z1 @ z2.T / temperature
            t = target[: len(idx)]
            loss = 0.5 * (torch.nn.functional.cross_entropy(logits, t)
                          + torch.nn.functional.cross_entropy(logits.T, t))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return encoder.eval()


def load_digits_ensemble(n_encoders=5, *, dim=16, random_state=0, epochs=60, test_size=0.5,
                         split_seed=0, data_home=None, use_cache=True):
    """Load embeddings of digits by several InfoNCE encoders, in and out of distribution.

    ``n_encoders`` MLP encoders of identical architecture are trained with the self-supervised
    InfoNCE objective (augmentations: ±1-pixel translation, intensity scaling, pixel dropout,
    noise) on the unlabelled training digits; they differ only in their seeds, which are drawn
    from ``random_state``. Each split is returned as one stacked matrix (the input of
    :class:`~skalign.OrthogonalEnsembleAligner`), with one L2-normalised view per encoder:

    * ``"train"``: the digits the encoders were trained on (fit the alignment here, no labels);
    * ``"test"``: held-out digits (in distribution);
    * ``"intensity"``, ``"crop"``, ``"shift"``: the held-out digits under the shifts of
      :data:`DIGITS_SHIFTS` (out of distribution).

    The result is cached in :func:`~skalign.datasets.get_data_home`; a rerun with the same
    arguments returns identical arrays.

    Parameters
    ----------
    n_encoders : int, default=5
        Number of encoders, i.e. of views in each stacked matrix.
    dim : int, default=16
        Embedding width of every encoder.
    random_state : int, RandomState instance or None, default=0
        Draws the encoders' seeds and the random parts of the shifts. ``None`` disables the cache.
    epochs : int, default=60
        Training epochs per encoder (about 0.5–2 s each on one CPU core).
    test_size : float, default=0.5
        Fraction of the 1,797 digits held out (stratified).
    split_seed : int, default=0
        Seed of the train/test split (fixed across ``random_state`` so that only the encoders
        vary).
    data_home : str or path-like, default=None
        Cache folder; see :func:`~skalign.datasets.get_data_home`.
    use_cache : bool, default=True
        Read and write the on-disk cache.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``X`` (dict split → float32 array of shape (n_split, n_encoders · dim)), ``target``
        (dict split → digit labels), ``splits`` (the split names, in order), ``n_views``,
        ``dim``, ``seeds`` (the encoders' seeds) and ``DESCR``.

    Examples
    --------
    >>> from skalign.datasets import load_digits_ensemble
    >>> data = load_digits_ensemble(n_encoders=3)  # doctest: +SKIP
    >>> data.X["crop"].shape  # doctest: +SKIP
    (899, 48)
    """
    if isinstance(random_state, np.random.RandomState) or random_state is None:
        use_cache = False
    rng = check_random_state(random_state)
    seeds = [int(s) for s in rng.randint(np.iinfo(np.int32).max, size=n_encoders)]
    shift_seed = int(rng.randint(np.iinfo(np.int32).max))

    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32).reshape(-1, _SIDE, _SIDE)
    labels = digits.target
    train_index, test_index = train_test_split(
        np.arange(len(labels)), test_size=test_size, stratify=labels, random_state=split_seed
    )
    train_index, test_index = np.sort(train_index), np.sort(test_index)
    test_images = torch.as_tensor(images[test_index])
    shift_rng = np.random.RandomState(shift_seed)
    inputs = {"train": torch.as_tensor(images[train_index]), "test": test_images}
    for kind in DIGITS_SHIFTS:
        inputs[kind] = _shift_images(test_images, kind, shift_rng)
    target = {"train": labels[train_index]}
    target.update({name: labels[test_index] for name in inputs if name != "train"})

    params = {"seeds": seeds, "shift_seed": shift_seed, "dim": dim, "epochs": epochs,
              "test_size": test_size, "split_seed": split_seed}
    def compute():
        blocks = {name: [] for name in inputs}
        for seed in seeds:
            enc = train_infonce_encoder(inputs["train"].numpy(), seed=seed, dim=dim, epochs=epochs)
            with torch.no_grad(), _one_thread():
                for name, imgs in inputs.items():
                    z = torch.nn.functional.normalize(enc(imgs), dim=1)
                    blocks[name].append(z.numpy().astype(np.float32))
        return {name: np.hstack(b) for name, b in blocks.items()}

    X = cached("digits_ensemble", {"v": _CACHE_VERSION, **params}, compute, data_home=data_home,
               use_cache=use_cache)
    return Bunch(
        X=X,
        target=target,
        splits=list(inputs),
        n_views=n_encoders,
        dim=dim,
        seeds=seeds,
        DESCR=(
            f"{n_encoders} InfoNCE MLP encoders (width {dim}, seeds {seeds}) trained on "
            f"{len(train_index)} unlabelled digits; splits: " + ", ".join(inputs) + ". Shifts: "
            + "; ".join(f"{k}: {v}" for k, v in DIGITS_SHIFTS.items()) + "."
        ),
    )
