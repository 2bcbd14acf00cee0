"""The held-out check's cosines less the padding direction and ``q . z`` of each row's fold,
made entry by entry where they are read (``skalign._migrate.heldout._Sims``), are bit for bit
the whole ``n x n`` matrices the check made before (issue 55: two of every kind's three
matrices fewer at the high-water mark of a ``migrate`` step)."""

import numpy as np

from skalign._migrate.heldout import _folds, _held_out_rows, _similarities, _unit


def whole_matrices(Yu, rows, folds):
    """The check's matrices as they were made whole: ``SP`` and, per kind, ``(ST, SO)``."""
    pads = next(iter(rows.values()))[1]
    SP = np.empty((len(Yu), len(Yu)))
    for _, test in folds:
        SP[:, test] = (Yu @ pads[test[0]])[:, None]
    out = {}
    for kind, (Tu, _) in rows.items():
        ST = Yu @ Tu.T
        along = (Tu * pads).sum(axis=1)
        norm = np.linalg.norm(Tu - along[:, None] * pads, axis=1)
        out[kind] = (ST, (ST - along * SP) / np.where(norm > 0, norm, 1.0))
    return SP, out


def test_entries_equal_the_whole_matrices():
    rng = np.random.default_rng(55)
    n, d = 150, 24
    Y = rng.normal(size=(n, d)) + 2.0 * rng.normal(size=d)  # a common direction, as e5's
    T = Y @ (np.eye(d) + 0.4 * rng.normal(size=(d, d))) + 0.3 * rng.normal(size=(n, d))
    T[7] = 0.0  # a zero translation: its norm is taken as 1
    folds = _folds(n, 4, 0)
    Yu, rows = _unit(Y), _held_out_rows(T, Y, folds)
    sims = _similarities(Yu, rows, folds)
    SP, full = whole_matrices(Yu, rows, folds)
    every = (np.arange(n)[:, None], np.arange(n)[None, :])
    np.testing.assert_array_equal(sims.pad(*every), SP)
    np.testing.assert_array_equal(sims.SE, Yu @ Yu.T)
    q = np.sort(rng.choice(n, 60, replace=False))[:, None]
    cols = rng.integers(0, n, size=(60, 13))  # gathered entries, as the candidates are read
    for kind, (ST, SO) in full.items():
        np.testing.assert_array_equal(sims.trans[kind][0], ST)
        np.testing.assert_array_equal(sims.off(kind, *every), SO)
        np.testing.assert_array_equal(sims.off(kind, q, cols), SO[q, cols])
        np.testing.assert_array_equal(sims.pad(q, cols), SP[q, cols])
        # the padded part differs from the plain cosines: the comparison is not of copies
        assert np.abs(SO - ST).max() > 1e-3
    assert len(np.unique(SP[0])) == 4  # one value per fold
