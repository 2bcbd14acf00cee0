"""``skalign search``: new-model queries against a translated store, its index's candidates
re-scored by the new encoder (:class:`skalign.search.Searcher`), the encoded vectors written
back."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["add_search_command", "cmd_search", "read_queries", "write_results"]

SEARCH_EPILOG = """\
QUERIES (Q):
  Q.npy            new-model query vectors, one row a query
  Q.txt | Q.jsonl  query texts, one a line (.jsonl: a JSON string or {"text": ...} a line),
                   encoded by --encoder
RESULTS:
  R.jsonl          one line per query, in order: {"ids": [...], "scores": [...]}
  R.parquet        the same two columns
TEXTS (--text-field):
  a column (Parquet, LanceDB, PostgreSQL), a metadata or payload key (Chroma, Qdrant), or,
  for .npy and FAISS stores, a text file with row i's text on line i (.txt or .jsonl);
  default: Chroma's documents, else a text, else a document field
WRITE-BACK:
  Each candidate's text is encoded once (--encode-cache keeps the vectors across runs), its vector
  written back as the row's final vector, provenance encoded:<fingerprint>; databases in place,
  file stores in STORE.skalign-live beside the store (the store's files are never written).
"""


def add_search_command(sub, positive_int):
    """Add ``search`` to the subparsers ``sub``."""
    p = sub.add_parser(
        "search", help="search a translated store, candidates re-scored by the new encoder",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Search STORE with new-model queries: the store's own index gives K "
        "candidates per query, the new encoder re-scores them exactly, the k best are written "
        "to RESULTS; encoded vectors are written back to the store.", epilog=SEARCH_EPILOG)
    p.add_argument("store", metavar="STORE", help="the store (see skalign translate --help for "
                   "the address forms)")
    p.add_argument("--queries", required=True, metavar="Q",
                   help="query vectors (.npy) or texts (one a line)")
    p.add_argument("--encoder", required=True, metavar="SPEC",
                   help="the new encoder: a sentence-transformers model folder or cached name, "
                   "or module:callable")
    p.add_argument("-k", type=positive_int, default=10, metavar="N",
                   help="results per query (default 10)")
    p.add_argument("--candidates", default="100", metavar="K",
                   help="candidates per query: a number, or a plan file (JSON with "
                   "{\"rerank\": {\"k_candidates\": K}}) (default 100)")
    p.add_argument("--output", required=True, metavar="RESULTS",
                   help="results file: .jsonl or .parquet")
    p.add_argument("--text-field", metavar="NAME", help="where each row's text is (see TEXTS)")
    p.add_argument("--column", metavar="NAME", help="vector column or named vector")
    p.add_argument("--id-field", metavar="NAME", help="id column of a Parquet or LanceDB store "
                   "(default: id)")
    p.add_argument("--metric", choices=("cosine", "ip", "l2"),
                   help="similarity of an .npy, Parquet or LanceDB store (default cosine)")
    p.add_argument("--encode-cache", metavar="PATH", help="encode cache (SQLite file; default "
                   "~/.cache/skalign/encodings.sqlite)")
    p.add_argument("--no-write-back", action="store_true",
                   help="do not write encoded vectors back to the store")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    return p


def read_queries(path):
    """Query vectors (``.npy``) or texts (one a line; ``.jsonl``: JSON strings or objects
    with a ``"text"``)."""
    if str(path).endswith(".npy"):
        try:
            Q = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ValueError(f"{path}: not a readable .npy array ({exc}).") from None
        if Q.ndim != 2 or Q.dtype.kind not in "fiu":
            raise ValueError(f"{path}: query vectors must be a 2-D array of numbers, got "
                             f"{Q.dtype} of shape {Q.shape}.")
        return Q.astype(np.float32)
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    if str(path).endswith(".jsonl"):
        texts = []
        for n, line in enumerate(lines, 1):
            try:
                value = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}: line {n} is not JSON.") from None
            value = value.get("text") if isinstance(value, dict) else value
            if not isinstance(value, str):
                raise ValueError(f"{path}: line {n} holds no text (a JSON string, or an object "
                                 "with a \"text\" string).")
            texts.append(value)
        lines = texts
    if not lines:
        raise ValueError(f"{path}: no queries.")
    return lines


def write_results(path, result):
    """Write ``result`` (:class:`~skalign.search.SearchResult`) to ``.jsonl`` or ``.parquet``,
    under a temporary name renamed into place."""
    from ._stores.shadow import create_file, tmp_sibling

    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"{path}: RESULTS must end in .jsonl or .parquet.")
    suffix = path.suffix
    tmp = tmp_sibling(path, suffix)
    fd = create_file(tmp, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if suffix == ".jsonl":
                for ids, scores in zip(result.ids, result.scores):
                    f.write((json.dumps({"ids": ids, "scores": [float(s) for s in scores]})
                             + "\n").encode())
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                pq.write_table(pa.table({"ids": result.ids,
                                         "scores": [np.asarray(s, np.float32)
                                                    for s in result.scores]}), f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cmd_search(args, out):
    from .encoders import CachedEncoder, EncodeCache, load_encoder
    from .search import Searcher

    candidates = args.candidates
    if candidates.isdigit():
        candidates = int(candidates)
        if candidates < 1:
            raise ValueError("--candidates must be at least 1.")
    if not str(args.output).endswith((".jsonl", ".parquet")):
        raise ValueError(f"{args.output}: RESULTS must end in .jsonl or .parquet.")
    queries = read_queries(args.queries)
    options = {k: v for k, v in (("id_field", args.id_field), ("metric", args.metric))
               if v is not None}
    encoder = CachedEncoder(load_encoder(args.encoder), cache=EncodeCache(args.encode_cache))
    with Searcher(args.store, encoder, k_candidates=candidates, text_field=args.text_field,
                  column=args.column, write_back=not args.no_write_back, **options) as s:
        result = s.search(queries, k=args.k)
    write_results(args.output, result)
    if not args.quiet:
        st = s.stats
        out(f"{st.queries} queries, {s.k_candidates_} candidates each: {st.encoded} texts "
            f"encoded ({st.encoded / max(st.queries, 1):.1f} per query), {st.written} rows "
            f"written back; results in {args.output}")
    return 0
