r"""Texts grouped by length: the batches one machine and a cluster's workers both form.

A batch of texts of similar length needs little padding: a transformer encodes ``b`` texts
padded to the longest, at a cost of about :math:`b \cdot \max_i \ell_i` tokens instead of
:math:`\sum_i \ell_i`. The texts are put longest first and cut into batches of ``batch_size``
distinct texts. The same texts give the same batches wherever they are cut in whole batches,
which is what makes a cluster's vectors bit-equal to one process's: a model such as
all-MiniLM-L6-v2 gives a text vectors that differ in the last bits (about ``2e-7``) with the
other texts of its batch, so both must encode the same batches.
"""

from __future__ import annotations

import numpy as np

__all__ = ["encode_by_length", "length_batches", "length_order"]


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
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    return np.array(sorted(range(len(texts)), key=lambda i: (-len(texts[i]), first[texts[i]], i)),
                    dtype=np.intp)


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
