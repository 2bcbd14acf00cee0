r"""Texts grouped by length: the batches one machine and a cluster's workers both form.

A batch of texts of similar length needs little padding: a transformer encodes ``b`` texts
padded to the longest, at a cost of about :math:`b \cdot \max_i \ell_i` tokens instead of
:math:`\sum_i \ell_i`. The texts are put longest first and cut into batches of ``batch_size``
distinct texts. The same texts give the same batches wherever they are cut in whole batches,
which is what makes a cluster's vectors bit-equal to one process's: a model such as
all-MiniLM-L6-v2 gives a text vectors that differ in the last bits (about ``2e-7``) with the
other texts of its batch, so both must encode the same batches. A pass too large to hold
in memory is encoded a piece of whole batches at a time (:func:`encode_in_pieces`): the
batches of the whole pass, as a cluster cuts it into partitions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LOOKUP_ROWS", "cache_hits", "encode_by_length", "encode_in_pieces",
           "length_batches", "length_order"]

#: texts looked up in an encode cache at a time (their vectors are read with them)
LOOKUP_ROWS = 8192


def length_order(texts):
    """Row indices in the order texts are encoded: longest first; rows of one text together.

    Texts of one length keep the order in which each first appears; the rows of a text follow
    each other (so that a batch of distinct texts holds all of them).

    Parameters
    ----------
    texts : sequence of str

    Returns
    -------
    ndarray of int
        A permutation of ``range(len(texts))``.
    """
    n, first = len(texts), {}
    # the sort keys as arrays (a key tuple per row took about 200 bytes a row more)
    where = np.fromiter((first.setdefault(t, i) for i, t in enumerate(texts)), np.int64, n)
    del first
    lengths = np.fromiter(map(len, texts), np.int64, n)
    return np.lexsort((np.arange(n), where, -lengths)).astype(np.intp)


def length_batches(texts, batch_size):
    """The rows of each batch: :func:`length_order` cut every ``batch_size`` distinct texts.

    Parameters
    ----------
    texts : sequence of str
    batch_size : int
        Distinct texts per batch (an encoder encodes each text once).

    Returns
    -------
    list of ndarray of int
        Row indices of ``texts``; their concatenation is :func:`length_order`.
    """
    order = length_order(texts)
    batches, start, seen = [], 0, set()
    for pos, i in enumerate(order):
        if texts[i] not in seen and len(seen) == batch_size:
            batches.append(order[start:pos])
            start, seen = pos, set()
        seen.add(texts[i])
    if len(order):
        batches.append(order[start:])
    return batches


def encode_by_length(encoder, texts):
    """``encoder.encode(texts)``, the texts given in :func:`length_order`.

    An encoder cuts what it is given into batches of ``batch_size`` in order: a
    :class:`~skalign.encoders.CachedEncoder` is given every row (it drops repeated and cached
    texts first), another encoder each distinct text once; either way its batches are
    :func:`length_batches`' of the texts it has to encode.

    Parameters
    ----------
    encoder : Encoder
    texts : list of str

    Returns
    -------
    ndarray of shape (len(texts), dim), float32
        Row ``i`` embeds ``texts[i]``.
    """
    from ._cache import CachedEncoder

    order = length_order(texts)
    if isinstance(encoder, CachedEncoder):
        V = encoder.encode([texts[i] for i in order])
        out = np.empty_like(V)
        out[order] = V
        return out
    distinct = list(dict.fromkeys(texts[i] for i in order))
    V = encoder.encode(distinct)
    where = {t: j for j, t in enumerate(distinct)}
    return V[[where[t] for t in texts]] if len(distinct) else V


def cache_hits(encoder, texts):
    """Which texts the encode cache of ``encoder`` holds: the texts it will not encode (a
    value that is not text is never held).

    Looked up :data:`LOOKUP_ROWS` texts at a time (the cache reads their vectors with them).

    Parameters
    ----------
    encoder : Encoder
        A :class:`~skalign.encoders.CachedEncoder`; for another encoder no text is cached.
    texts : list of str or None

    Returns
    -------
    ndarray of bool of shape (len(texts),)
    """
    from ._cache import CachedEncoder, text_digest

    hit = np.zeros(len(texts), dtype=bool)
    if not isinstance(encoder, CachedEncoder):
        return hit
    for lo in range(0, len(texts), LOOKUP_ROWS):
        digests = [text_digest(t) if isinstance(t, str) else None
                   for t in texts[lo:lo + LOOKUP_ROWS]]
        found = encoder.cache.get(encoder.fingerprint, {d for d in digests if d is not None})
        hit[lo:lo + len(digests)] = [d is not None and d in found for d in digests]
    return hit


def encode_in_pieces(encoder, texts, rows):
    """:func:`encode_by_length` of ``texts``, a piece of about ``rows`` rows at a time.

    The texts an encode cache holds (:func:`cache_hits`) are read from it first; the others
    are cut into :func:`length_batches` of them all, and each piece is whole batches of that
    plan, encoded as :func:`encode_by_length` encodes it: the model runs on the very batches
    :func:`encode_by_length` gives it for all the texts at once, and a cluster's partitions
    too (they are whole batches of the same plan). Memory holds one piece's vectors.

    Parameters
    ----------
    encoder : Encoder
    texts : list of str
    rows : int
        Rows per piece wished: a piece holds whole batches, at least one.

    Yields
    ------
    idx : ndarray of int
        Positions in ``texts`` of the piece's rows.
    V : ndarray of shape (len(idx), dim), float32
        Their vectors: row ``j`` embeds ``texts[idx[j]]``.
    """
    hit = cache_hits(encoder, texts)
    cached = np.flatnonzero(hit)
    for lo in range(0, len(cached), rows):
        idx = cached[lo:lo + rows]
        yield idx, encoder.encode([texts[i] for i in idx])
    todo = np.flatnonzero(~hit)
    size = max(1, int(getattr(encoder, "batch_size", None) or 64))
    piece, held = [], 0
    batches = length_batches([texts[i] for i in todo], size)
    for k, batch in enumerate(batches):
        piece.append(todo[batch])
        held += len(batch)
        if held >= rows or k == len(batches) - 1:
            # the piece's rows in the plan's order: encode_by_length keeps that order
            idx = np.concatenate(piece)
            yield idx, encode_by_length(encoder, [texts[i] for i in idx])
            piece, held = [], 0
