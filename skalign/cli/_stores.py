"""The store commands of the ``skalign`` command line: ``translate``, ``restore`` and ``info``,
and the parsing of every store address a command takes, once, at the edge."""

from __future__ import annotations

import argparse
import json
import time

__all__ = ["TRANSLATE_EPILOG", "_positive_int", "add_store_commands", "cmd_info", "cmd_restore",
           "cmd_translate", "parse_store_args"]

_PAIRS = {"source": False, "target": False, "unpaired_source": False, "unpaired_target": False}
#: command -> its store arguments, each with whether the store is written (an output)
STORE_ARGS = {"translate": {"input": False, "output": True}, "restore": {"output": True},
              "info": {"address": False}, "fit": _PAIRS, "evaluate": _PAIRS,
              "plan": {**_PAIRS, "store": False},
              "migrate": {"source": False, "output": True}, "search": {"store": False}}


TRANSLATE_EPILOG = """\
STORES (INPUT and OUTPUT):
  X.npy                      a 2-D array (memory-mapped)
  X.parquet | FOLDER         a Parquet file, or a folder of Parquet shards
  DIR/TABLE.lance            a LanceDB table
  PATH.faiss                 a FAISS index whose vectors can be reconstructed (Flat, IVFFlat,
                             HNSWFlat, IDMap/IDMap2 keep their ids); written as the same type
  postgresql://USER@HOST:PORT/DB?table=TABLE&column=COLUMN
                             a pgvector vector(d) column (libpq URI; ?host=/socket/dir for a
                             Unix socket); OUTPUT: a new table, same other columns and index
  chroma:DIR/COLLECTION      Chroma persistent client; chroma+http://HOST:PORT/COLLECTION
  qdrant:DIR/COLLECTION      Qdrant local mode; qdrant+http://HOST:PORT/COLLECTION;
                             ?vector=NAME for a named vector
  sqlite:PATH?table=TABLE&column=COLUMN
                             a sqlite-vec vec0 table of the SQLite file PATH; OUTPUT: a new
                             vec0 table (same columns) in that file or another
  milvus:PATH.db/COLLECTION  Milvus Lite; milvus://HOST:PORT/COLLECTION (a server);
                             ?vector=FIELD for one of several vector fields
  duckdb:PATH?table=TABLE&column=COLUMN
                             a FLOAT[n] column of a DuckDB file (vss HNSW indexes rebuilt);
                             OUTPUT: a new table in that file or another
  A database or FAISS INPUT is written to the same engine. Passwords are masked in messages.

SAFETY:
  The output is written under a temporary name (file, table, collection), committed batch by
  batch, verified (row count, ids, sampled rows translated again) and only then published.
  Killed part-way? Run the same command again: it resumes from the last committed batch and
  removes what the crashed run left. A second run on the same OUTPUT fails at once.
  An existing OUTPUT needs --replace; the previous one is kept as a backup (files:
  NAME-skalign-backup, tables and collections: NAME_skalign_backup) and `skalign restore
  OUTPUT` swaps it back. A backup is never overwritten: remove or restore it first.
  Every output carries a provenance stamp (`skalign info OUTPUT`): translating a backup or a
  store that is already this model's output is refused (--force overrides), and --replace run
  again with the same model and input does nothing.

INTO (--into FIELD):
  skalign translate MODEL STORE --into FIELD writes the translation into a new vector field of
  STORE (a pgvector column with an index like the old one's, a LanceDB or Parquet column, a
  Qdrant named vector): the old field, the rows and their other fields are never changed, old
  queries keep working, and each row of FIELD is marked translated:<model> under
  skalign_vector_FIELD. Killed part-way?
  The same command writes the rows left. Query it with `skalign search --field FIELD`; drop
  the old field with your engine's own command once you have switched (the guide gives it).
"""


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_store_commands(sub):
    """Add ``translate``, ``restore`` and ``info`` to the subparsers ``sub``."""
    tr = sub.add_parser(
        "translate", help="translate a whole store, streaming in batches",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Translate every vector of INPUT into OUTPUT, keeping ids and all other "
        "fields.", epilog=TRANSLATE_EPILOG)
    tr.add_argument("model", metavar="MODEL", help="model file written by `skalign fit` (.skops)")
    tr.add_argument("input", metavar="INPUT", help="store to translate (never modified): a file "
                    "path or an address, see STORES below")
    tr.add_argument("output", metavar="OUTPUT", nargs="?", help="store to write, same forms; "
                    "written in the shadow and published when complete and verified (left out "
                    "with --into)")
    tr.add_argument("--into", metavar="FIELD", help="write the translation into a new vector "
                    "field FIELD of INPUT itself, beside its old one (never touched), no OUTPUT: "
                    "see INTO below")
    tr.add_argument("--column", metavar="NAME", help="vector column of a Parquet/LanceDB input "
                    "(default: the only list-of-floats column, or vector/embedding)")
    tr.add_argument("--batch-size", type=_positive_int, metavar="N",
                    help="rows per batch, the unit of commit and resume in databases (default: "
                    "about 128 MiB of float32 per batch, half that for Parquet output, at most "
                    "2048 rows for PostgreSQL, 1024 for Chroma and Qdrant)")
    tr.add_argument("--replace", action="store_true", help="allow an existing OUTPUT (or "
                    "OUTPUT = INPUT): swap the translation in, keep the previous one as a backup "
                    "(`skalign restore OUTPUT` puts it back)")
    tr.add_argument("--force", action="store_true", help="translate even a store that is a "
                    "backup or already this model's output (the provenance stamp says so)")
    tr.add_argument("--scheduler", metavar="ADDRESS", help="dask distributed scheduler (e.g. "
                    "tcp://host:8786): translate Parquet shards on that cluster")
    tr.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    tr.add_argument("--device", metavar="DEVICE", help="where the model computes: cpu, cuda, "
                    "cuda:N or auto (default: the device it was fitted on, or the CPU on a "
                    "machine without that device)")
    tr.add_argument("--direction", choices=("forward", "inverse"), default="forward",
                    help="forward: old -> new space (model.transform); inverse: new -> old "
                    "(model.inverse_transform), e.g. to bridge new-encoder queries into the old "
                    "index (default: forward)")

    rs = sub.add_parser("restore", help="put back the store `translate --replace` replaced")
    rs.add_argument("output", metavar="OUTPUT", help="the OUTPUT given to `translate --replace`")

    info = sub.add_parser("info", help="the provenance stamp of a store skalign wrote")
    info.add_argument("address", metavar="ADDRESS", help="a store: a file path or an address")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument("--column", metavar="NAME", help="the vector field to describe, where the "
                      "store has several (each field skalign added is listed after it)")


def parse_store_args(args):
    """Replace every store address among ``args`` by its parsed
    :class:`~skalign._stores.address.Address` (the only parse of that text in the command);
    return ``args`` and the passwords they hold (for the last-resort scrub of messages)."""
    from .._stores.address import parse_address

    secrets = set()
    for name, output in STORE_ARGS.get(args.command, {}).items():
        text = getattr(args, name, None)
        if text is None:
            continue
        address = parse_address(text, output=output)
        setattr(args, name, address)
        secrets.update(p for p in (address.password, *(v for _, v in address.secret_params))
                       if p and len(p) > 2)
    return args, sorted(secrets, key=len, reverse=True)


def cmd_translate(args, out):
    from ..io import load, output_dim

    model = load(args.model)
    if args.device is not None:
        from ..utils._backend import set_fitted_device

        if not set_fitted_device(model, args.device):
            from ..exceptions import StoreError

            raise StoreError(f"--device {args.device}: {type(model).__name__} has no device "
                               "to set; translate without --device.")
    if args.direction == "inverse":
        from ._inverse import inverse_model

        model = inverse_model(model)
    t0 = time.perf_counter()
    if args.into is not None or args.output is None:
        return _translate_into(args, model, out, t0)
    if args.scheduler:
        from ..parallel import translate_parquet

        n = translate_parquet(model, args.input, args.output, scheduler=args.scheduler,
                              column=args.column, batch_size=args.batch_size)
    else:
        from ..io import translate

        n = translate(model, args.input, args.output, column=args.column,
                      batch_size=args.batch_size, progress=not args.quiet, replace=args.replace,
                      force=args.force)
        if n.noop is not None:
            out(n.noop)
            return 0
    secs = time.perf_counter() - t0
    if not args.quiet:
        out(f"translated {n} rows {model.n_features_in_}-d -> {output_dim(model)}-d: "
            f"{args.input} -> {args.output} in {secs:.2f} s "
            f"({n / max(secs, 1e-9):,.0f} rows/s)"
            + (f", resumed at row {n.resumed_from}" if getattr(n, "resumed_from", 0) else ""))
        if getattr(n, "restarted", None):
            out(f"translated from row 0: {n.restarted}")
        if getattr(n, "backup", None):
            out(f"previous {args.output} kept as {n.backup}; `skalign restore "
                f"{args.output}` puts it back")
    return 0


def _translate_into(args, model, out, t0):
    """``skalign translate MODEL STORE --into FIELD``."""
    from ..io import output_dim, translate

    if args.into is None or args.output is not None:
        raise ValueError("give OUTPUT, or --into FIELD for a new field of INPUT itself"
                         + (", not both." if args.output is not None else "."))
    for flag in ("replace", "force", "scheduler"):
        if getattr(args, flag):
            raise ValueError(f"--{flag} does not apply to --into: the field is written in "
                             "place, row by row, and the old field never changes.")
    n = translate(model, args.input, into=args.into, column=args.column,
                  batch_size=args.batch_size, progress=not args.quiet)
    secs = time.perf_counter() - t0
    if not args.quiet:
        out(f"translated {n} rows {model.n_features_in_}-d -> {output_dim(model)}-d into the "
            f"field {args.into} of {args.input} in {secs:.2f} s"
            + (f"; {n.resumed_from} rows held it already" if n.resumed_from else ""))
    return 0


def cmd_restore(args, out):
    from ..io import restore

    backup = restore(args.output)
    out(f"restored {args.output}; the store it replaced is now {backup}")
    return 0


def cmd_info(args, out):
    from .._stores.pipeline.translate import open_reader
    from .._stores.provenance import read_stamp
    from ..exceptions import StoreError
    from ..utils._terminal import escape_control

    stamp, fields = read_stamp(args.address), fields_info(args.address)
    try:
        reader = open_reader(args.address, column=args.column)
    except StoreError:  # several vector fields: the one skalign did not add, if one
        own = [f["field"] for f in fields or () if not f["added"]]
        if args.column is not None or len(own) != 1:
            raise
        reader = open_reader(args.address, column=own[0])
    info = {"store": str(args.address), "kind": args.address.kind, "rows": int(reader.n_rows),
            "dim": int(reader.dim) if reader.n_rows else None, "stamp": stamp,
            "fields": fields}
    if stamp is not None:
        from .._migrate.migration import count_provenance

        info["vectors"] = count_provenance(args.address)
        if info["vectors"] is None:
            info["not_counted"] = _not_live(args.address)
    migration = stamp.get("migration") if isinstance(stamp, dict) else None
    if isinstance(migration, dict):
        info["lengths"] = vector_lengths(args.address)
    if args.json:  # json.dumps escapes every control character (and all non-ASCII)
        out(json.dumps(info, sort_keys=True))
        return 0

    def say(line):  # stamps and stores hold whatever their writers chose: escape controls
        out(escape_control(line))

    say(f"{info['store']}: {info['kind']}, {info['rows']} rows of {info['dim']}-d vectors")
    for line in _field_lines(info["fields"]):
        say(line)
    if stamp is None:
        say("no provenance stamp: not written by skalign (or by a version before 0.x stamps)")
        return 0
    say(f"translated by skalign {stamp.get('skalign')} on {stamp.get('written')} from "
        f"{stamp.get('source')} ({stamp.get('rows')} rows, {stamp.get('d_in')}-d -> "
        f"{stamp.get('d_out')}-d), model {stamp.get('model')}")
    rows = info.get("vectors")
    if info.get("not_counted"):
        say(f"rows not counted by provenance: {info['not_counted']}")
    if rows and rows["encoded"]:
        share = rows["encoded"] / max(rows["rows"], 1)
        rest = ("; every row does: none is a translation" if rows["encoded"] == rows["rows"]
                else f"; {rows['translated']} hold translations" if rows["translated"] else "")
        say(f"{rows['encoded']} of {rows['rows']} rows ({share:.1%}) hold their text's vector "
            f"by the new encoder (encoder {', '.join(rows['encoders'])}){rest}")
    elif rows and rows["translated"] and isinstance(migration, dict):
        say(f"none of the {rows['rows']} rows holds its text's vector by the new encoder: "
            f"{rows['translated']} hold translations")
    if rows and rows.get("stale"):
        say(f"{rows['stale']} rows are marked encoded but their text, text field or encoder "
            "changed since: they count as translations")
    if isinstance(migration, dict):
        say(_normalize_line(migration.get("normalize"), info.get("lengths")))
    others = rows is None or rows["translated"] or rows["stale"]
    if isinstance(migration, dict) and migration.get("method") and others:
        est = migration.get("estimate") or {}
        say(f"migrated: the other rows translated by {migration['method']}, estimated "
            f"recall@10 {est.get('recall_at_10')} at {est.get('store_size')} rows")
    return 0


def _not_live(address):
    """Why the store at ``address`` cannot be opened live (its provenance then is not
    counted), or ``None``."""
    from .._stores import open_live
    from ..exceptions import StoreError

    try:
        open_live(address).close()
    except StoreError as exc:
        return str(exc)
    return None


def fields_info(address):
    """The store's vector fields, each ``{"field", "dim", "added"}`` and, for a field skalign
    added (``--into``), its ``stamp``, row ``vectors`` (:func:`~skalign._migrate.into.
    field_counts`) and the ``drop`` command of the fields it replaces; ``None`` for a kind
    without named fields."""
    from .._migrate.into import field_counts
    from .._stores.fields import read_field_stamp
    from .._stores.registry import engine
    from ..exceptions import StoreError

    eng = engine(address)
    try:
        fields = eng.vector_fields(address)
    except (NotImplementedError, StoreError):
        return None
    out = []
    for name, dim in fields.items():
        item = {"field": name, "dim": dim, "added": False}
        try:
            added = eng.field_state(address, name) is not None
        except StoreError:  # the user's own field
            added = False
        if added:
            item.update(added=True, stamp=read_field_stamp(address, name),
                        vectors=field_counts(address, name))
        out.append(item)
    replaced = {(o.get("stamp") or {}).get("from_field") for o in out if o["added"]}
    for item in out:  # the old fields a new one was made from
        if not item["added"] and item["field"] in replaced:
            item["drop"] = eng.drop_field_command(address, item["field"])
    return out


def _field_lines(fields):
    """What ``skalign info`` says of the vector fields (one line per field, then the drop
    command of the old ones)."""
    if not fields or len(fields) < 2 and not any(f["added"] for f in fields):
        return []
    lines = ["vector fields: " + ", ".join(
        f"{f['field']} ({f['dim']}-d{', added by skalign' if f['added'] else ''})"
        for f in fields)]
    for f in fields:
        stamp, rows = f.get("stamp") or {}, f.get("vectors")
        if not f["added"]:
            continue
        how = "migrated" if isinstance(stamp.get("migration"), dict) else "translated"
        line = (f"field {f['field']}: {how} from {stamp.get('from_field')} by skalign "
                f"{stamp.get('skalign')} on {stamp.get('written')}, model {stamp.get('model')}")
        if stamp.get("filling"):
            line += "; a step was interrupted: run the same command again to finish it"
        if rows:
            line += (f"; {rows['encoded']} of {rows['rows']} rows hold their text's vector by "
                     f"the new encoder, {rows['translated']} translations, {rows['stale']} "
                     f"stale, {rows['empty']} not written")
        lines.append(line)
    lines += [f"once your queries use the new field, drop {f['field']} yourself: {f['drop']}"
              for f in fields if f.get("drop")]
    return lines


#: rows read to measure the vectors' lengths in ``skalign info``
LENGTH_SAMPLE = 2048
#: consecutive rows in each block of that sample
LENGTH_BLOCK = 128


def vector_lengths(address):
    """Mean L2 norm of the encoded rows and of the other rows (translated or stale) of a live
    store, over every row of a store of at most :data:`LENGTH_SAMPLE` rows, else over that many
    in blocks spread evenly over it (a store whose ``sample_norms`` gives a sample samples
    itself: a database's own block sample):
    ``{"sampled", "encoded", "translated"}`` (a mean ``None`` where the sample has no such
    row); ``None`` when the store cannot be read live."""
    import numpy as np

    from .._migrate.scan import all_ids, ids_at
    from .._stores import open_live
    from ..exceptions import StoreError

    try:
        with open_live(address) as store:
            got = store.sample_norms(LENGTH_SAMPLE)  # None: no sample of the engine's own
            if got is not None:
                return _lengths(*got) if len(got[0]) else None
            ids = all_ids(store)
            if not len(ids):
                return None
            # blocks of consecutive rows: a file store decodes a row group or page per block,
            # not per row (2,048 rows spread one by one read a whole 10^6-row store)
            if len(ids) <= LENGTH_SAMPLE:
                pick = np.arange(len(ids))
            else:
                starts = np.linspace(0, len(ids) - LENGTH_BLOCK, LENGTH_SAMPLE // LENGTH_BLOCK)
                pick = np.unique((starts.astype(np.int64)[:, None]
                                  + np.arange(LENGTH_BLOCK)).ravel())
            rows = store.fetch(ids_at(ids, pick))
    except StoreError:
        return None
    return _lengths(np.linalg.norm(np.asarray(rows.vectors, dtype=np.float64), axis=1),
                    rows.provenance)


def _lengths(norms, marks):
    """:func:`vector_lengths`' means of the rows' lengths ``norms`` by their ``marks``."""
    import numpy as np

    from .._stores.live import parse_mark

    encoded = np.array([getattr(parse_mark(p), "kind", None) == "encoded" for p in marks],
                       dtype=bool)
    return {"sampled": int(len(norms)),
            "encoded": round(float(norms[encoded].mean()), 4) if encoded.any() else None,
            "translated": round(float(norms[~encoded].mean()), 4) if (~encoded).any() else None}


def _normalize_line(recorded, lengths):
    """How a migrated store's encoded vectors were normalised (its stamp), and the lengths
    its rows have."""
    said = {"yes": "yes (unit vectors)", "no": "no (the encoder's raw output)",
            "own": "the encoder's own output"}.get(recorded, "not recorded (a migration by an "
                                                             "earlier skalign)")
    line = f"normalize: {said}"
    if lengths:
        parts = [f"{name} rows {lengths[name]:.3f}" for name in ("encoded", "translated")
                 if lengths[name] is not None]
        line += (f"; mean vector length over {lengths['sampled']} rows: " + ", ".join(parts))
    return line
