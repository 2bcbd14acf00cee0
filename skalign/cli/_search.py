"""``skalign search``: new-model queries against a translated store, its index's candidates
re-scored by the new encoder (:class:`skalign.search.Searcher`), the encoded vectors written
back."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

__all__ = ["add_search_command", "check_output", "cmd_search", "read_candidates", "read_queries",
           "write_results"]

SEARCH_EPILOG = """\
QUERIES (Q):
  Q.npy            new-model query vectors, one row a query
  Q.txt | Q.jsonl  query texts, one a line (.jsonl: a JSON string or {"text": ...} a line),
                   encoded by --encoder
RESULTS:
  R.jsonl          one line per query, in order: {"ids": [...], "scores": [...]}
  R.parquet        the same two columns
  written under a temporary name and published whole; refused before any work when it is the
  store, one of its files (stamp, overlay, shards), its text file, the queries, the plan or the
  encode cache; an existing file needs --overwrite
TEXTS (--text-field):
  a column (Parquet, LanceDB, PostgreSQL), a metadata or payload key (Chroma, Qdrant), or,
  for .npy and FAISS stores, a text file with row i's text on line i (.txt or .jsonl);
  default: Chroma's documents, else a text, else a document field
NORMALIZE:
  yes: the query and candidate texts' vectors scaled to unit length; no: the encoder's raw
  output; auto (default): the choice of the migration that wrote STORE (`skalign info STORE`
  shows it), else yes when STORE ranks by inner product or L2 distance (where a vector's
  length changes the ranking) and (cosine) the encoder's own output otherwise. SPEC may carry
  it too: SPEC?normalize=yes. Query vectors given as .npy are used as they are.
INDEX (--index):
  where the candidates of an .npy or Parquet store come from: auto (default) scans every row
  below 250,000 rows, else uses skalign's index kept in STORE.skalign-index beside the store
  (built when missing, rebuilt when the store changed since it was built); exact: every row;
  build: the index built anew now; existing: the index as it is, refused when missing or
  stale. Stores with their own index (LanceDB, FAISS, databases) are searched by it.
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
                   help="results file: .jsonl or .parquet; never the store, its files, its "
                   "texts or an input")
    p.add_argument("--overwrite", action="store_true",
                   help="replace RESULTS if it exists (default: refuse)")
    p.add_argument("--text-field", metavar="NAME", help="where each row's text is (see TEXTS)")
    p.add_argument("--column", metavar="NAME", help="vector column or named vector")
    p.add_argument("--field", metavar="FIELD", help="search the vector field FIELD that "
                   "`skalign migrate/translate --into FIELD` added (written back there)")
    p.add_argument("--id-field", metavar="NAME", help="id column of a Parquet or LanceDB store "
                   "(default: id)")
    p.add_argument("--metric", choices=("cosine", "ip", "l2"),
                   help="similarity of an .npy, Parquet or LanceDB store (default cosine)")
    p.add_argument("--encode-cache", metavar="PATH", help="encode cache (SQLite file; default "
                   "~/.cache/skalign/encodings.sqlite)")
    p.add_argument("--no-write-back", action="store_true",
                   help="do not write encoded vectors back to the store")
    p.add_argument("--provenance-key", metavar="NAME", help="the column, metadata or payload "
                   "key of each row's provenance (default: skalign_vector; a key holding data "
                   "skalign did not write is refused before any work)")
    p.add_argument("--normalize", choices=("auto", "yes", "no"), default=None,
                   help="unit-length encoded vectors (yes), the raw output (no), or what the "
                   "store's metric needs (auto, the default; see NORMALIZE)")
    p.add_argument("--index", choices=("auto", "exact", "build", "existing"), default="auto",
                   help="candidates of an .npy or Parquet store from an exact scan or from "
                   "skalign's index beside it (see INDEX; default auto)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (they show on a "
                   "terminal only) and no summary line")
    return p


def read_queries(path):
    """Query vectors (``.npy``, finite numbers) or texts (one a line; ``.jsonl``: JSON strings
    or objects with a ``"text"``, each line bounded in depth by
    :func:`~skalign.utils._input_files.loads_bounded`)."""
    from ..utils._input_files import InputFileError, loads_bounded

    if str(path).endswith(".npy"):
        try:
            Q = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ValueError(f"{path}: not a readable .npy array ({exc}).") from None
        if Q.ndim != 2 or Q.dtype.kind not in "fiu":
            raise ValueError(f"{path}: query vectors must be a 2-D array of numbers, got "
                             f"{Q.dtype} of shape {Q.shape}.")
        Q = Q.astype(np.float32)
        if not np.isfinite(Q).all():
            row = int(np.flatnonzero(~np.isfinite(Q).all(axis=1))[0])
            raise ValueError(f"{path}: query {row} holds a NaN or infinite number (or one "
                             "beyond float32's range).")
        return Q
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    if str(path).endswith(".jsonl"):
        texts = []
        for n, line in enumerate(lines, 1):
            try:
                value = loads_bounded(line, f"{path}, line {n}")
            except InputFileError:
                raise
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


def read_candidates(path):
    """The number of candidates a plan file recommends (``{"rerank": {"k_candidates": K}}``),
    read with bounded depth and finite numbers only."""
    from ..utils._input_files import InputFileError, loads_bounded

    try:
        with open(path, "rb") as f:
            data = f.read(1 << 24)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the plan ({exc.strerror}).") from None
    try:
        plan = loads_bounded(data, f"--candidates {path}")
    except InputFileError:
        raise
    except ValueError:
        raise ValueError(f"{path}: not a JSON plan file (skalign plan --json).") from None
    rerank = plan.get("rerank") if isinstance(plan, dict) else None
    k = rerank.get("k_candidates") if isinstance(rerank, dict) else None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{path}: the plan holds no rerank estimate "
                         "({\"rerank\": {\"k_candidates\": K}}); give the number of candidates "
                         "instead.")
    return k


def write_results(path, result, *, overwrite=False, mode=0o666):
    """Write ``result`` (:class:`~skalign.search.SearchResult`) to ``.jsonl`` or ``.parquet``:
    created exclusively under a temporary name, fsynced, then published at ``path``
    (:func:`~skalign.utils._results_files.write_output_file`; a file already there only with
    ``overwrite``)."""
    from ..utils._results_files import write_output_file

    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"{path}: RESULTS must end in .jsonl or .parquet.")

    def write(f):
        if path.suffix == ".jsonl":
            for ids, scores in zip(result.ids, result.scores):
                f.write((json.dumps({"ids": ids, "scores": [float(s) for s in scores]})
                         + "\n").encode())
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"ids": result.ids,
                                     "scores": [np.asarray(s, np.float32)
                                                for s in result.scores]}), f)

    return write_output_file(path, write, overwrite=overwrite, mode=mode)


def check_output(args, candidates_file):
    """Refuse ``--output`` before any work: the store or any of its files, its text file,
    the queries, the plan, the encode cache, an existing file without ``--overwrite``
    (:func:`~skalign.utils._results_files.check_output_file`). Returns the file's permission bits:
    no looser than the store's and the queries'."""
    from .._stores.registry import engine
    from ..encoders._cache import default_cache_path
    from ..utils._results_files import (
        check_output_file,
        input_guards,
        output_file_mode,
        store_file,
        store_guards,
    )

    cache = args.encode_cache if args.encode_cache is not None else default_cache_path()
    kind = getattr(args.store, "kind", None)
    texts = args.text_field if kind is not None and engine(kind).texts_in_lines else None
    guards = [*store_guards(args.store),
              *input_guards("the --queries file", args.queries),
              *input_guards("the --candidates plan", candidates_file),
              *input_guards("the store's text file (--text-field)", texts),
              *input_guards("the encode cache", cache, sqlite=True)]
    check_output_file(args.output, "--output", overwrite=args.overwrite, guards=guards,
                      suffixes=(".jsonl", ".parquet"))
    return output_file_mode((store_file(args.store), args.queries, texts),
                            args.output if args.overwrite else None)


_INDEX_LINES = {
    "own": "candidates: the store's own index",
    "exact": "candidates: an exact scan of every row",
    "loaded": "candidates: skalign's index beside the store (current)",
    "built": "candidates: skalign's index beside the store (built now)",
    "rebuilt": "candidates: skalign's index beside the store (rebuilt: the store had changed)",
}


def _migration(address):
    """The record of the migration that wrote the store (its stamp's), or ``None``."""
    from .._stores.provenance import read_stamp
    from ..exceptions import StoreError

    try:
        stamp = read_stamp(address)
    except StoreError:
        return None
    migration = stamp.get("migration") if isinstance(stamp, dict) else None
    return migration if isinstance(migration, dict) else None


def _use_field(args):
    """Point ``args`` at the field ``--field`` names: its column, its provenance key, its
    stamp's migration (for --normalize auto)."""
    import dataclasses

    from .._stores.fields import check_field_name, field_key, read_field_stamp
    from .._stores.registry import engine
    from ..exceptions import StoreError

    if args.column is not None or args.provenance_key is not None:
        raise ValueError("--field names the vector field and its provenance key: leave out "
                         "--column and --provenance-key.")
    address, field = args.store, check_field_name(args.field, args.store)
    eng = engine(address)
    eng.check_into(address)
    try:
        state = eng.field_state(address, field)
    except StoreError:
        raise StoreError(f"{address}: {field!r} is one of the store's own fields, not one "
                         "skalign added: search it with --column.") from None
    if state is None:
        raise StoreError(f"{address}: no field {field!r}; add it with `skalign migrate STORE "
                         f"--into {field}` (or translate --into).")
    stamp = read_field_stamp(address, field) or {}
    args.field_migration = stamp.get("migration") if isinstance(
        stamp.get("migration"), dict) else None
    args.store = dataclasses.replace(address, column=None)
    args.column, args.provenance_key = field, field_key(field)


def cmd_search(args, out):
    from ..encoders import CachedEncoder, EncodeCache, load_encoder
    from ..search import Searcher
    from ..utils._console import stage
    from ._migrate import choose_normalize, normalize_line

    candidates = args.candidates
    if candidates.isdigit():
        candidates = int(candidates)
        if candidates < 1:
            raise ValueError("--candidates must be at least 1.")
    if not str(args.output).endswith((".jsonl", ".parquet")):
        raise ValueError(f"{args.output}: RESULTS must end in .jsonl or .parquet.")
    mode = check_output(args, None if isinstance(candidates, int) else candidates)
    if not isinstance(candidates, int):
        candidates = read_candidates(candidates)
    queries = read_queries(args.queries)
    if args.field is not None:
        _use_field(args)
    options = {k: v for k, v in (("id_field", args.id_field), ("metric", args.metric))
               if v is not None}
    spec, unit, _, why = choose_normalize(
        args, args.store, "STORE", options, migration=getattr(
            args, "field_migration", None) if args.field else _migration(args.store))
    progress = not args.quiet
    with stage(f"loading the encoder {spec}", progress):
        encoder = CachedEncoder(load_encoder(spec, normalize=unit),
                                cache=EncodeCache(args.encode_cache))
    with Searcher(args.store, encoder, k_candidates=candidates, text_field=args.text_field,
                  column=args.column, write_back=not args.no_write_back,
                  provenance_key=args.provenance_key, progress=progress, index=args.index,
                  **options) as s:
        result = s.search(queries, k=args.k)
    write_results(args.output, result, overwrite=args.overwrite, mode=mode)
    if not args.quiet:
        st = s.stats
        out(f"{st.queries} queries, {s.k_candidates_} candidates each: {st.encoded} texts "
            f"encoded ({st.encoded / max(st.queries, 1):.1f} per query), {st.written} rows "
            f"written back; results in {args.output}")
        out(normalize_line(encoder, why))
        out(_INDEX_LINES[s.index_])
    return 0
