"""The length order a step's texts are encoded in (:func:`skalign.encoders._grouping.
length_order`): longest first, texts of one length in the order each first appears, the rows
of a text together; computed on arrays, not a key tuple per row."""

import tracemalloc

import numpy as np

from skalign.encoders._grouping import length_batches, length_order


def _by_definition(texts):
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    return sorted(range(len(texts)), key=lambda i: (-len(texts[i]), first[texts[i]], i))


def test_the_order_is_the_definitions():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(0, 50))
        texts = ["ab" * int(rng.integers(0, 4)) + "é" * int(rng.integers(0, 3)) for _ in range(n)]
        got = length_order(texts)
        assert got.dtype == np.intp and got.tolist() == _by_definition(texts)
    texts = ["bb", "a", "cc", "a", "bb", "", "ddd"]
    assert length_order(texts).tolist() == [6, 0, 4, 2, 1, 3, 5]
    assert [b.tolist() for b in length_batches(texts, 2)] == [[6, 0, 4], [2, 1, 3], [5]]


def test_the_order_holds_no_tuple_per_row():
    """100,000 texts: ordering them peaks under 120 bytes a row (a key tuple per row: about
    200)."""
    rng = np.random.default_rng(1)
    texts = ["x" * int(rng.integers(1, 200)) + str(int(rng.integers(0, 50_000)))
             for _ in range(100_000)]
    n = len(texts)
    tracemalloc.start()
    try:
        order = length_order(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 120 * n, peak / n
    assert order.tolist() == _by_definition(texts)
