"""The check of a persistent Chroma folder's HNSW files (``skalign._stores.chroma.hnsw_files``), on
files Chroma wrote, each test changing one thing in a copy of them. The states a kill leaves
(two real states of one shadow, mixed) are in ``test_connectors.py``."""

import shutil
import struct

import numpy as np
import pytest

from skalign._stores.chroma.hnsw_files import HEADER, hnsw_fault, read_header

#: offset of each header field in ``header.bin``
OFFSETS = {}
_at = 0
for _name, _code in HEADER:
    OFFSETS[_name] = (_at, _code)
    _at += struct.calcsize("<" + _code)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The HNSW folder of a collection of 600 16-d records, written by Chroma."""
    chromadb = pytest.importorskip("chromadb")
    from chromadb.api.shared_system_client import SharedSystemClient

    from skalign._stores.chroma.store import segment_folders

    root = tmp_path_factory.mktemp("hnsw")
    client = chromadb.PersistentClient(path=str(root))
    col = client.create_collection("col", metadata={"hnsw:space": "cosine",
                                                    "hnsw:sync_threshold": 100},
                                   embedding_function=None)
    X = np.random.default_rng(0).normal(size=(600, 16)).astype(np.float32)
    for lo in range(0, 600, 100):
        col.add(ids=[f"id{i}" for i in range(lo, lo + 100)], embeddings=X[lo:lo + 100])
    SharedSystemClient.clear_system_cache()
    (seg,) = segment_folders(root)
    return root / seg


@pytest.fixture
def folder(written, tmp_path):
    dest = tmp_path / "seg"
    shutil.copytree(written, dest)
    return dest


def _set(folder, field, value):
    at, code = OFFSETS[field]
    with open(folder / "header.bin", "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<" + code, value))


def _words(folder, name):
    return np.fromfile(folder / name, dtype="<u4")


def _upper(folder):
    """``(element, word of its first upper level)`` of each element with upper levels."""
    h, links = read_header(folder), _words(folder, "link_lists.bin")
    out, pos = [], 0
    for i in range(h["count"]):
        if links[pos]:
            out.append((i, pos + 1))
        pos += 1 + links[pos] // 4
    return out


def test_files_chroma_wrote_agree(written):
    h = read_header(written)
    assert h["count"] == 600 and h["version"] == 1 and h["max_level"] >= 1
    assert hnsw_fault(written) is None


def test_a_missing_or_foreign_header_is_a_fault(folder):
    _set(folder, "version", 2)
    assert hnsw_fault(folder) == "its HNSW header is not in the format this check knows"
    (folder / "header.bin").write_bytes(b"\0" * 10)
    assert hnsw_fault(folder).startswith("its HNSW header cannot be read (header.bin holds 10")
    (folder / "header.bin").unlink()
    assert hnsw_fault(folder).startswith("its HNSW header cannot be read")


def test_files_that_cannot_be_read_are_a_fault(folder):
    (folder / "data_level0.bin").write_bytes(b"")  # numpy cannot map an empty file
    assert hnsw_fault(folder).startswith("its HNSW files cannot be read (ValueError")
    (folder / "data_level0.bin").unlink()
    assert hnsw_fault(folder).startswith("its HNSW files cannot be read (FileNotFoundError")


def test_a_header_counting_more_than_the_files_hold(folder):
    _set(folder, "count", 650)
    assert hnsw_fault(folder) == "data_level0.bin holds 600 of the header's 650 elements"
    _set(folder, "count", 10 ** 6)
    assert hnsw_fault(folder).startswith("its HNSW header counts 1000000 elements, above")


def test_link_lists_cut_short_or_not_whole_levels(folder):
    links = _words(folder, "link_lists.bin")
    links[:-3].tofile(folder / "link_lists.bin")
    assert hnsw_fault(folder) == "link_lists.bin ends before the header's 600 elements are listed"
    links = links.copy()
    pos = int(np.flatnonzero(links)[0])  # the first element with upper levels: its size
    links[pos] += 4
    links.tofile(folder / "link_lists.bin")
    assert hnsw_fault(folder) == "link_lists.bin holds a size that is not a whole number of levels"


def test_a_link_list_file_longer_than_any_index_is_a_fault_not_a_crash(folder):
    """Chroma, adding on over torn files it had loaded, once left ``link_lists.bin`` sparse and
    3.8 TB long; reading it whole failed to allocate 3.47 TiB."""
    with open(folder / "link_lists.bin", "r+b") as f:
        f.truncate(4 * 10 ** 12)
    assert hnsw_fault(folder) == ("link_lists.bin holds 4000000000000 bytes, more than the lists "
                                  "of the header's 600 elements can")


def test_neighbour_lists_that_name_what_is_not_there(folder):
    h = read_header(folder)
    words = h["size_data_per_element"] // 4
    data = _words(folder, "data_level0.bin")
    bad = data.copy()
    bad[5 * words] = h["max_m0"] + 1  # element 5's count on level 0
    bad.tofile(folder / "data_level0.bin")
    assert hnsw_fault(folder) == ("an HNSW neighbour list on level 0 holds more than "
                                  f"{h['max_m0']} ids")
    bad = data.copy()
    assert bad[5 * words] & 0xFFFF >= 1
    bad[5 * words + 1] = 600  # its first neighbour: beyond the 600 elements
    bad.tofile(folder / "data_level0.bin")
    assert hnsw_fault(folder) == ("an HNSW neighbour list on level 0 names an element beyond "
                                  "the header's 600")
    data.tofile(folder / "data_level0.bin")
    assert hnsw_fault(folder) is None
    # on level 1: a neighbour that has no level 1
    upper = _upper(folder)
    with_level = {i for i, _ in upper}
    level0_only = next(i for i in range(600) if i not in with_level)
    links = _words(folder, "link_lists.bin")
    at = next(at for _, at in upper if links[at] & 0xFFFF >= 1)
    links[at + 1] = level0_only
    links.tofile(folder / "link_lists.bin")
    assert hnsw_fault(folder) == ("an HNSW neighbour list on level 1 names an element without "
                                  "that level")


def test_an_entry_point_below_the_top_level(folder):
    h = read_header(folder)
    with_level = {i for i, _ in _upper(folder)}
    _set(folder, "entry_point", next(i for i in range(600) if i not in with_level))
    assert hnsw_fault(folder) == "the HNSW entry point does not have the header's top level"
    _set(folder, "entry_point", h["entry_point"])
    assert h["max_level"] >= 2  # hnswlib draws the levels with a fixed seed
    _set(folder, "max_level", h["max_level"] - 1)
    assert hnsw_fault(folder) == ("link_lists.bin lists an element above the header's top "
                                  f"level {h['max_level'] - 1}")
    _set(folder, "max_level", 0)  # no upper levels: the file can hold only a size per element
    size = (folder / "link_lists.bin").stat().st_size
    assert size > 4 * 600
    assert hnsw_fault(folder) == (f"link_lists.bin holds {size} bytes, more than the lists of "
                                  "the header's 600 elements can")
