"""The verification before publishing: a sample of rows translated again from the source and
compared, with their ids and other fields, to what the shadow holds."""

from __future__ import annotations

import numpy as np

from ...exceptions import VerificationError

__all__ = ["keep_sample", "verification_positions", "verify"]

#: The verification sample: rows translated again from the source and compared with the output
#: before it is published, ``SAMPLE_ROWS`` consecutive rows in each of ``N_VERIFY //
#: SAMPLE_ROWS`` windows, one in each quarter of the store. Drawn from the whole output: rows a
#: crashed run committed are read back from the source (``reader.take``), the rows this run
#: translates are kept as they stream by. The same rows on every run over the same store.
N_VERIFY = 32
SAMPLE_ROWS = 8


def verification_positions(reader, batch_size):
    """The sorted row positions the verification samples: ``SAMPLE_ROWS`` consecutive rows at
    a seeded place in each quarter of the store (all rows of a store of at most ``N_VERIFY``)."""
    n = reader.n_rows
    windows = N_VERIFY // SAMPLE_ROWS
    rng = np.random.default_rng(n)  # fixed per store: the same rows on every run
    picked = []
    for w in range(windows):
        a, b = w * n // windows, (w + 1) * n // windows
        if b > a:
            s = a + int(rng.integers(0, max(1, b - a - SAMPLE_ROWS + 1)))
            picked.extend(range(s, min(s + SAMPLE_ROWS, b)))
    return picked


def keep_sample(reader, rb, vectors, start, sample, kept):
    """Keep the sampled rows of a batch this run translates: source vector and fields."""
    lo, hi = np.searchsorted(sample, [start, start + len(vectors)])
    for pos in sample[lo:hi]:
        k = pos - start
        row = reader.row(rb, k) if reader.has_rows and rb is not None else None
        kept[pos] = (np.array(vectors[k]), row)


def verify(job, writer, model, n, sample, kept):
    where = str(job.dst)
    if n != job.reader.n_rows:
        raise VerificationError(f"{where}: verification failed: {n} rows written, the input has "
                         f"{job.reader.n_rows}; run the same command again.")
    if not sample:
        return
    earlier = [p for p in sample if p not in kept]  # committed by a crashed run: read back
    if earlier:
        vectors, rows = job.reader.take(earlier, job.batch_size)
        kept.update((p, (v, r)) for p, v, r in zip(earlier, vectors, rows))
    sources = np.stack([kept[p][0] for p in sample])
    rows = [kept[p][1] for p in sample]
    got, got_rows = writer.fetch(sample, rows)
    want = np.asarray(model.transform(sources), dtype=np.float32)
    if writer.normalizes:  # cosine engines keep directions: compare those
        want = want / np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-30)
        got = got / np.maximum(np.linalg.norm(got, axis=1, keepdims=True), 1e-30)
    scale = np.maximum(1.0, np.abs(want).max(axis=1, keepdims=True))
    close = np.abs(got - want) <= 1e-5 * scale + 1e-6 if got.shape == want.shape else None
    if close is None or not close.all():
        bad = sample[int(np.flatnonzero(~close.all(axis=1))[0])] if close is not None else None
        at = f" (row {bad} among them)" if bad is not None else ""
        raise VerificationError(f"{where}: verification failed: sampled rows differ from the "
                                f"model's translation{at}; the output was not published and "
                                "its shadow was removed. Run the command again.")
    if got_rows is not None:
        for pos, a, b in zip(sample, rows, got_rows):
            if a is not None and {k: v for k, v in b.items() if k != job.out_column} != a:
                raise VerificationError(f"{where}: verification failed: row {pos} lost its id or "
                                 "fields; the output was not published.")


