"""A check of the HNSW index files a persistent Chroma folder keeps for a collection, before
Chroma loads them.

Chroma's local mode keeps each collection's HNSW index as four files in its vector segment's
folder, written by chroma-core/hnswlib's ``persistDirty``: ``header.bin`` first (the element
count, the top level and the entry point), then the changed elements' rows of
``data_level0.bin`` (each element's level-0 neighbours, its vector and its label), their
entries of ``length.bin``, and ``link_lists.bin`` (for each element in turn a 4-byte size and
its neighbours on the levels above 0). Nothing orders these writes on the disk, and a SIGKILL
between two of them leaves a header that counts elements whose neighbour lists were never
written. Chroma loads such files without a check, and the first search through the graph then
follows a null or stale link: the process dies of a segmentation fault inside Chroma
(seen once in the kill studies at 200,000 records,
``5ae3bf6:benchmarks/stores_resume_repeats.py``) or Chroma refuses the collection.

:func:`hnsw_fault` reads the files as hnswlib's loader does and says what is inconsistent,
so that a crashed run's shadow with torn files is dropped instead of opened. It reads the
100-byte header, the level-0 neighbours at the head of each element's row of
``data_level0.bin`` and every size and neighbour of ``link_lists.bin``
(``5ae3bf6:benchmarks/chroma_torn_index.py`` times it).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

__all__ = ["HEADER", "hnsw_fault", "read_header"]

#: ``header.bin``'s fields in the order hnswlib's ``HEADER_FIELDS`` writes them, packed
#: (``writeBinaryPOD`` writes each field's bytes with no padding), as :mod:`struct` codes
HEADER = (("version", "i"), ("offset_level0", "Q"), ("max_elements", "Q"),
          ("count", "Q"), ("size_data_per_element", "Q"), ("label_offset", "Q"),
          ("offset_data", "Q"), ("max_level", "i"), ("entry_point", "I"), ("max_m", "Q"),
          ("max_m0", "Q"), ("m", "Q"), ("mult", "d"), ("ef_construction", "Q"))
_HEADER = struct.Struct("<" + "".join(code for _, code in HEADER))


def read_header(folder):
    """``header.bin`` of an HNSW folder as a dict (:data:`HEADER`'s names)."""
    raw = (Path(folder) / "header.bin").read_bytes()
    if len(raw) != _HEADER.size:
        raise ValueError(f"header.bin holds {len(raw)} bytes, not {_HEADER.size}")
    return dict(zip((name for name, _ in HEADER), _HEADER.unpack(raw)))


def hnsw_fault(folder):
    """What makes an HNSW folder's files inconsistent, or ``None`` where they agree.

    Checked, for the ``count`` elements the header lists: ``data_level0.bin`` and
    ``length.bin`` hold a row for each; ``link_lists.bin`` holds, in turn, a size that is a
    whole number of upper levels no higher than the header's top level, and that many levels
    of links; each element's neighbour lists, on level 0 and above,
    hold no more than ``M0`` (``M``) ids, each below ``count`` and of an element that has that
    level; the entry point has the top level. Where the header is missing or not hnswlib's
    format, the fault says so too.

    Parameters
    ----------
    folder : path-like
        The vector segment's folder (``header.bin``, ``data_level0.bin``, ``length.bin``,
        ``link_lists.bin``).

    Returns
    -------
    fault : str or None
    """
    folder = Path(folder)
    try:
        h = read_header(folder)
    except (OSError, ValueError) as exc:
        return f"its HNSW header cannot be read ({exc})"
    try:
        return _fault(folder, h)
    except (OSError, ValueError, MemoryError) as exc:  # sizes read from torn files
        return f"its HNSW files cannot be read ({type(exc).__name__}: {exc})"


def _fault(folder, h):
    """:func:`hnsw_fault` once the header is read."""
    n, size = h["count"], h["size_data_per_element"]
    if h["version"] != 1 or h["offset_level0"] != 0 or size % 4 or not 0 < h["max_m"] <= h[
            "max_m0"] or h["offset_data"] != 4 + 4 * h["max_m0"]:
        return "its HNSW header is not in the format this check knows"
    if n == 0:
        return None
    if n > h["max_elements"]:
        return f"its HNSW header counts {n} elements, above its capacity {h['max_elements']}"
    m0, m, top = h["max_m0"], h["max_m"], h["max_level"]
    per_level = 1 + m  # 4-byte words of one upper level: the count, then maxM ids
    data = np.memmap(folder / "data_level0.bin", dtype="<u4", mode="r")
    lengths = (folder / "length.bin").stat().st_size
    # at most every element with every level up to the top; Chroma, writing on over torn files
    # it had loaded, once made this file sparse and 3.8 TB long (seeks by sizes read from
    # nothing)
    most = 4 * n * (1 + max(top, 0) * per_level)
    listed = (folder / "link_lists.bin").stat().st_size
    if listed > most:
        return (f"link_lists.bin holds {listed} bytes, more than the lists of the header's {n} "
                "elements can")
    links = np.fromfile(folder / "link_lists.bin", dtype="<u4")
    if data.size < n * (size // 4):
        return f"data_level0.bin holds {data.size * 4 // size} of the header's {n} elements"
    if lengths < 4 * n:
        return f"length.bin holds {lengths // 4} of the header's {n} elements"
    level0 = np.array(data[: n * (size // 4)].reshape(n, size // 4)[:, : 1 + m0])
    fault = _neighbours(level0, m0, n, np.full(n, True), "level 0")
    if fault:
        return fault
    levels, starts = _walk(links, n, per_level)
    if levels is None:
        return f"link_lists.bin ends before the header's {n} elements are listed"
    if starts is None:
        return "link_lists.bin holds a size that is not a whole number of levels"
    if levels.max(initial=0) > top:
        return f"link_lists.bin lists an element above the header's top level {top}"
    if h["entry_point"] >= n or levels[h["entry_point"]] != top:
        return "the HNSW entry point does not have the header's top level"
    for level in range(1, int(levels.max(initial=0)) + 1):
        who = np.flatnonzero(levels >= level)
        rows = links[starts[who, None] + (level - 1) * per_level + np.arange(per_level)]
        fault = _neighbours(rows, m, n, levels >= level, f"level {level}")
        if fault:
            return fault
    return None


def _walk(links, n, per_level):
    """Each element's level and the word where its links begin in ``link_lists.bin``: the file
    is a chain (each size says where the next begins), followed here one element with upper
    levels at a time; the elements without (about 15 in 16 at M = 16) are skipped in runs.
    ``(None, None)`` where the file ends first, ``(levels, None)`` where a size is not a whole
    number of levels. Words after the chain are not read, as hnswlib's loader does not."""
    levels = np.zeros(n, dtype=np.int64)
    starts = np.zeros(n, dtype=np.int64)
    nonzero = np.flatnonzero(links)
    pos, i = 0, 0  # word of element i's size
    while i < n:
        # the elements from i on are level-0 (a zero size, one word each) up to the next
        # nonzero word at or after pos
        k = np.searchsorted(nonzero, pos)
        nxt = int(nonzero[k]) if k < nonzero.size else links.size
        zeros = min(nxt - pos, n - i)
        i, pos = i + zeros, pos + zeros
        if i == n:
            break
        if pos >= links.size:
            return None, None
        size = int(links[pos])
        if size % (4 * per_level):
            return levels, None
        levels[i] = size // (4 * per_level)
        starts[i] = pos + 1
        pos += 1 + size // 4
        if pos > links.size:
            return None, None
        i += 1
    return levels, starts


def _neighbours(rows, most, n, has_level, where):
    """A fault where a list of ``rows`` (count, then ids) holds more than ``most`` ids, or an
    id that is not below ``n`` or whose element lacks the level (``has_level``)."""
    counts = rows[:, 0] & 0xFFFF  # hnswlib reads a list's count as its first two bytes
    if (counts > most).any():
        return f"an HNSW neighbour list on {where} holds more than {most} ids"
    used = np.arange(rows.shape[1] - 1) < counts[:, None]
    ids = rows[:, 1:][used]
    if (ids >= n).any():
        return f"an HNSW neighbour list on {where} names an element beyond the header's {n}"
    if not has_level[ids].all():
        return f"an HNSW neighbour list on {where} names an element without that level"
    return None
