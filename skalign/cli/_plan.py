"""``skalign plan``'s arguments and the checks of its ``--report`` file (the command itself is
:func:`skalign.cli.cmd_plan`)."""

from __future__ import annotations

__all__ = ["add_plan_command", "check_report", "plan_cost"]


def add_plan_command(sub, positive_int, column_args):
    """Add ``plan`` to the subparsers ``sub``."""
    pl = sub.add_parser("plan", help="estimate what each migration method keeps of "
                        "re-embedding (recall@10/nDCG@10), and recommend one",
                        description="From paired items (and unpaired samples of both stores), "
                        "estimate each method's retention against re-embedding on both sides "
                        "(translate documents, or bridge queries), staying on the old model, "
                        "reranking the translated top K, a budget curve over the number of pairs "
                        "and a ceiling, at the store size given; recommend the cheapest option "
                        "that keeps --min-recall.")
    pl.add_argument("--source", required=True, metavar="A",
                    help="old-encoder embeddings of the paired items")
    pl.add_argument("--target", required=True, metavar="B",
                    help="new-encoder embeddings of the same items: row i of A and B (or, with "
                    "--id-column, the rows with the same id)")
    pl.add_argument("--unpaired-source", metavar="P", help="a sample of the old store (no pair "
                    "needed); with --unpaired-target it adds the bootstrap candidate")
    pl.add_argument("--unpaired-target", metavar="Q", help="a sample of new-encoder embeddings "
                    "of store items, in any order")
    pl.add_argument("--methods", metavar="M,...", help="comma-separated candidates among "
                    "procrustes, linear, bootstrap, irp, gera (default: procrustes, linear and, "
                    "with both unpaired samples, bootstrap)")
    pl.add_argument("--sides", choices=("both", "document", "query"), default="both",
                    help="translate the documents, bridge the queries, or both (default: both)")
    pl.add_argument("--store-size", type=positive_int, metavar="N", help="store size the "
                    "retention is estimated for (default: the number of pairs); retrieval is "
                    "harder in larger stores")
    pl.add_argument("--k", type=positive_int, default=10, metavar="K",
                    help="neighbourhood size of recall@K and nDCG@K (default: 10)")
    pl.add_argument("--budget", type=positive_int, metavar="N", help="pairs you can afford to "
                    "re-embed: the budget curve is read at N (past the pairs it is extrapolated "
                    "and capped at the ceiling), and when several options keep --min-recall the "
                    "one that keeps the most within N encodes is named beside the cheapest")
    pl.add_argument("--queries-source", metavar="QA", help="judged queries embedded by the old "
                    "model (with --queries-target and --qrels: every option priced in nDCG@K)")
    pl.add_argument("--queries-target", metavar="QB", help="the same queries embedded by the "
                    "new model, row for row")
    pl.add_argument("--qrels", metavar="FILE", help="relevance labels: TREC qrels "
                    "'QUERY-ROW 0 DOC-ROW RELEVANCE' or JSON {query row: {doc row: relevance}};"
                    " doc rows index the pairs")
    pl.add_argument("--min-recall", type=float, default=0.6, metavar="R",
                    help="recommend re-embedding when no method keeps recall@K >= R "
                    "(default: 0.6)")
    pl.add_argument("--no-normalize", action="store_true",
                    help="fit on the rows as given (default: L2-normalise every row first, "
                    "which removes scale differences between the encoders)")
    pl.add_argument("--no-curve", action="store_true", help="skip the learning curve")
    pl.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    pl.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    pl.add_argument("--quiet", action="store_true", help="no progress line while planning (it "
                    "shows on a terminal only)")
    pl.add_argument("--report", metavar="FILE", help="also write the curves and estimates as a "
                    ".png or an .html page (needs matplotlib); never one of the inputs")
    pl.add_argument("--overwrite", action="store_true",
                    help="replace the --report file if it exists (default: refuse)")
    column_args(pl)
    cost = pl.add_argument_group(
        "cost", "with --store and --encoder, a short calibration run encodes texts of the store "
        "on this machine and the plan states each option's encoder calls and time on 1 and on "
        "N workers from the rates measured (the guide's 'skalign plan' page gives the model)")
    cost.add_argument("--store", metavar="S", help="the store to migrate: its row count is the "
                      "default --store-size, and its texts calibrate the cost (with --encoder); "
                      "only read")
    cost.add_argument("--store-column", metavar="NAME", help="the vector column or named vector "
                      "of --store")
    cost.add_argument("--text-field", metavar="NAME", help="where each row's text is in --store "
                      "(default: Chroma's documents, else a text or document field)")
    cost.add_argument("--encoder", metavar="SPEC", help="the new encoder, as skalign migrate "
                      "takes it: a sentence-transformers folder or cached name, or "
                      "module:callable")
    cost.add_argument("--calibrate", type=float, default=10.0, metavar="SECONDS",
                      help="time budget of the calibration run, the encoder's loading not "
                      "counted (default: 10)")
    cost.add_argument("--workers", type=positive_int, metavar="N", help="also price N workers "
                      "(the table always has 1, 4, 16 and 64)")
    cost.add_argument("--device", default="auto", help="where the encoder runs for the "
                      "calibration: auto, cpu, cuda (default: auto)")
    cost.add_argument("--encode-batch", type=positive_int, default=64, metavar="N",
                      help="texts per encoder call, as skalign migrate's (default: 64)")


def plan_cost(args):
    """``(store_rows, rates)`` of ``--store`` and ``--encoder``: the store's row count
    (``None`` without ``--store``) and the calibration's
    :class:`~skalign.plan._cost.Rates` (``None`` without ``--encoder``); refuses an encoder
    without a store, or a time budget that is not a positive number, before any work."""
    import math

    if args.encoder is not None and args.store is None:
        raise ValueError("--encoder calibrates the cost on the store's own texts: give --store "
                         "too.")
    given = [flag for flag, value in (("--text-field", args.text_field),
                                      ("--store-column", args.store_column))
             if value is not None]
    if given and args.store is None:
        raise ValueError(f"{given[0]} applies to --store; give --store too.")
    if not (math.isfinite(args.calibrate) and args.calibrate > 0):
        raise ValueError(f"--calibrate must be a positive number of seconds, got "
                         f"{args.calibrate}.")
    if args.store is None:
        return None, None
    if args.encoder is None:
        from .._stores import open_live

        with open_live(args.store, column=args.store_column) as store:
            return int(store.n_rows), None
    from ..plan._cost import calibrate
    from ..utils._console import stage

    with stage(f"calibrating the cost: encoding texts of the store for up to {args.calibrate:g} "
               "s", not args.quiet and not args.json):
        rates = calibrate(args.store, args.encoder, seconds=args.calibrate,
                          text_field=args.text_field, column=args.store_column,
                          device=args.device, batch_size=args.encode_batch,
                          random_state=args.seed)
    return rates.store_rows, rates


def cost_report(args, rates, store_size):
    """``(lines, record)``: the cost table of the plan for a store of ``store_size`` rows as
    lines of text and as a JSON-ready dict."""
    from ..plan._cost import cost_lines, price, worker_counts

    options = price(rates, store_size, budget=args.budget, workers=worker_counts(args.workers))
    record = {"store_size": int(store_size), "calibration": rates.to_dict(),
              "options": [dict(o, seconds={str(w): s for w, s in o["seconds"].items()})
                          for o in options]}
    where = f"a store of {store_size:,} rows" + (
        "" if store_size == rates.store_rows else
        f" (--store-size; --store has {rates.store_rows:,})")
    return cost_lines(rates, options, where), record


def check_report(args):
    """Refuse ``--report`` before any work when it is one of the inputs (a store or any of its
    files, the judged queries, the qrels), a folder, in a missing folder, or an existing file
    without ``--overwrite``; return its permission bits, no looser than the inputs'."""
    from ..utils._results_files import (
        check_output_file,
        input_guards,
        output_file_mode,
        store_file,
        store_guards,
    )

    inputs = {"--source": args.source, "--target": args.target,
              "--unpaired-source": args.unpaired_source,
              "--unpaired-target": args.unpaired_target,
              "--queries-source": args.queries_source, "--queries-target": args.queries_target,
              "--store": args.store}
    guards = [g for flag, store in inputs.items() if store is not None
              for g in store_guards(store, f"the {flag} store")]
    files = {"--queries-source": args.queries_source, "--queries-target": args.queries_target,
             "--qrels": args.qrels}
    guards += [g for flag, path in files.items() for g in input_guards(f"the {flag} file", path)]
    check_output_file(args.report, "--report", overwrite=args.overwrite, guards=guards)
    return output_file_mode([store_file(s) for s in inputs.values()],
                            args.report if args.overwrite else None)
