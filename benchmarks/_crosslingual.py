"""Load the cross-lingual development set ``benchmarks/data/crosslingual_de.npz`` and split it.

Made by ``maint_tools/make_crosslingual.py`` (English msgid / German msgstr pairs from the
gettext catalogs of Django, Sphinx, wagtail, django-allauth and Trac wheels). Dev data, not
package data: the scripts in this folder and the test suite read it from here.
"""

import gzip
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "crosslingual_de.npz"

#: (source array, target array) of the cross-lingual maps the scripts report
MAPS = {
    "e5 en -> e5 de": ("en_me5_small_q4", "de_me5_small_q4"),
    "MiniLM en -> e5 de": ("en_minilm_l6", "de_me5_small_q4"),
    "MPNet en -> e5 de": ("en_mpnet_base", "de_me5_small_q4"),
}


def load_crosslingual(path=None, texts=False):
    """``{key: float32 array}`` (row i of every array = pair i) and, with ``texts``, the meta."""
    path = Path(path) if path is not None else DATA
    with np.load(path) as z:
        arrays = {k: z[k].astype(np.float32) for k in z.files}
    if not texts:
        return arrays
    with gzip.open(path.with_name(path.name.removesuffix(".npz") + ".json.gz"), "rt",
                   encoding="utf-8") as fh:
        return arrays, json.load(fh)

