"""The ``skalign`` command line: fit, save, apply and evaluate aligners on vector stores.

::

    skalign fit METHOD --source A --target B -o MODEL [--param NAME=VALUE ...]
                [--id-column NAME] [--unpaired-source P] [--unpaired-target Q]
    skalign translate MODEL INPUT OUTPUT [--column NAME] [--batch-size N] [--replace]
                [--scheduler ADDRESS] [--direction forward|inverse] [--quiet]
    skalign restore OUTPUT
    skalign plan --source A --target B [--id-column NAME] [--unpaired-source P]
                [--unpaired-target Q] [--methods M,...] [--store-size N] [--budget N]
                [--queries-source QA --queries-target QB --qrels FILE] [--json] [--report F]
    skalign evaluate MODEL --source A --target B [--id-column NAME] [--json]
    skalign search STORE --queries Q --encoder SPEC [-k N] [--candidates K] --output RESULTS
                [--text-field NAME] [--cache PATH] [--no-write-back]
    skalign demo [--only store|estimators] [--quick] [--source ENCODER] [--target ENCODER]
                [--anchors N] [--seed-pairs N]

``A``, ``B``, ``P``, ``Q``, ``INPUT`` and ``OUTPUT`` are ``.npy`` arrays, Parquet files, folders
of Parquet shards, LanceDB tables ``DIR/TABLE.lance``, FAISS indexes or PostgreSQL/pgvector,
Chroma and Qdrant addresses (see :mod:`skalign.io`); ``A`` and ``B`` are paired row for row, or
by id (``--id-column``, the databases' own ids: :mod:`skalign.cli._pairs_io`).
``METHOD`` is a short name (``procrustes``, ``linear``, ``irp``, ``gera``, ``asif``, ``bootstrap``,
``ensemble``, ``relative``) or a class name; ``--param`` values are typed from the estimator's own
parameter constraints (``none`` for ``None``, ``true``/``false`` for booleans, a method name for a
meta-estimator's ``estimator``). Mistakes the user can fix end with a one-line message on standard
error and exit status 2; no partial ``OUTPUT`` or ``MODEL`` is left behind.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import time
from functools import partial
from numbers import Integral

import numpy as np

from ..utils._console import warning_line, warnings_as_lines
from ._migrate import add_migrate_command, cmd_migrate
from ._plan import add_plan_command, check_report, cost_report, plan_cost
from ._search import add_search_command, cmd_search
from ._stores import (
    _positive_int,
    add_store_commands,
    cmd_info,
    cmd_restore,
    cmd_translate,
    parse_store_args,
)

__all__ = ["main", "parse_param", "resolve_method"]

COMMANDS = ("fit", "translate", "restore", "info", "evaluate", "plan", "migrate", "search",
            "demo")

#: hand-picked short names; every estimator is also reachable by its class name and by its class
#: name without the "Aligner"/"Projector" suffix, in any case
_ALIASES = {
    "irp": "InverseRelativeProjector",
    "bootstrap": "AnchorBootstrapper",
    "ensemble": "OrthogonalEnsembleAligner",
    "relative": "RelativeProjector",
}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class CommandError(ValueError):
    """A mistake on the command line; the message is printed as one line, exit status 2."""


# ------------------------------------------------------------------------------------- methods
def _short(name):
    return re.sub(r"(Aligner|Projector)$", "", name).lower()


def method_names():
    """Short name → estimator class of every public skalign estimator, sorted by short name."""
    from ..utils._discovery import public_estimators

    classes = dict(public_estimators())
    named = {alias: classes[cls] for alias, cls in _ALIASES.items() if cls in classes}
    taken = set(named.values())
    for name, cls in classes.items():
        if cls not in taken:
            named[_short(name)] = cls
    return dict(sorted(named.items()))


def resolve_method(name):
    """Return the estimator class for a short name or a class name (case-insensitive).

    Parameters
    ----------
    name : str
        ``"procrustes"``, ``"irp"``, ``"ProcrustesAligner"``, ...

    Returns
    -------
    cls : type
        The public estimator class.
    """
    from ..utils._discovery import public_estimators

    table = {k.lower(): v for k, v in method_names().items()}
    for cls_name, cls in public_estimators():
        table.setdefault(cls_name.lower(), cls)
        table.setdefault(_short(cls_name), cls)
    try:
        return table[name.lower()]
    except KeyError:
        raise CommandError(
            f"unknown method {name!r}; choose one of {', '.join(method_names())} (or a class "
            "name such as ProcrustesAligner)."
        ) from None


# ------------------------------------------------------------------------------------ --param
def _describe(constraint):
    if constraint is None:
        return "none"
    if constraint == "boolean":
        return "true/false"
    if constraint == "random_state":
        return "an int seed or none"
    if constraint == "verbose":
        return "an int verbosity"
    if constraint == "array-like":
        return "comma-separated numbers or a .npy file"
    if constraint == "no_validation":
        return "a method name"
    if isinstance(constraint, type):
        return f"a {constraint.__name__}"
    return str(constraint)


def _as_none(text, constraint):
    return None if text.strip().lower() in ("none", "null") else NotImplemented


def _as_bool(text, constraint):
    low = text.strip().lower()
    return True if low in _TRUE else False if low in _FALSE else NotImplemented


def _as_int(text, constraint):
    try:
        return int(text)
    except ValueError:
        return NotImplemented


def _as_number(text, interval):
    try:
        number = float(text)
    except ValueError:
        return NotImplemented
    if issubclass(interval.type, Integral):
        if not number.is_integer():
            return NotImplemented
        number = int(number)
    return number if interval.is_satisfied_by(number) else NotImplemented


def _as_option(text, options):
    return text if options.is_satisfied_by(text) else NotImplemented


def _as_array(text, constraint):
    if text.endswith(".npy"):
        return np.load(text, allow_pickle=False)
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        return NotImplemented
    arr = np.asarray(values)
    return arr.astype(np.int64) if np.all(arr == np.round(arr)) else arr


def _as_list(text, constraint):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return NotImplemented
    return value if isinstance(value, list) else NotImplemented


def _as_estimator(text, constraint):
    return resolve_method(text)()


def _as_type(text, cls):
    """A free string, or the constructor of a type that takes one (e.g. ``torch.device``)."""
    if cls is str:
        return text
    try:
        return cls(text)
    except (TypeError, ValueError, RuntimeError):
        return NotImplemented


def _converter(constraint):
    """The function that converts command-line text for one parameter constraint, or None."""
    from ..utils._compat import Interval, StrOptions

    named = {"boolean": _as_bool, "random_state": _as_int, "verbose": _as_int,
             "array-like": _as_array, "no_validation": _as_estimator}
    if constraint is None:
        return _as_none
    if isinstance(constraint, str):
        return named.get(constraint)
    if isinstance(constraint, Interval):
        return _as_number
    if isinstance(constraint, StrOptions):
        return _as_option
    if constraint is list:
        return _as_list
    if isinstance(constraint, type):
        return _as_type
    return None


def _convert(text, constraint):
    """``text`` converted for one constraint, or ``NotImplemented`` when it does not fit."""
    from ..utils._compat import Hidden

    if isinstance(constraint, Hidden):
        constraint = constraint.constraint
    convert = _converter(constraint)
    return NotImplemented if convert is None else convert(text, constraint)


def parse_param(cls, item):
    """Parse one ``NAME=VALUE`` for estimator class ``cls``, typed from its constraints.

    Constraints are tried in the order ``None``, booleans, numeric intervals, string options,
    then free strings, so ``none`` means ``None`` and ``1`` an int wherever those are allowed.

    Parameters
    ----------
    item : str
        ``NAME=VALUE`` as given to ``--param``; dashes in ``NAME`` become underscores.

    Returns
    -------
    name : str
        The parameter name.
    value : object
        The value, typed by the first of the parameter's constraints that accepts it.
    """
    if "=" not in item:
        raise CommandError(f"--param expects NAME=VALUE, got {item!r}.")
    name, text = item.split("=", 1)
    name = name.strip().replace("-", "_")
    params = [p for p in inspect.signature(cls).parameters if p != "self"]
    if name not in params:
        raise CommandError(
            f"{cls.__name__} has no parameter {name!r}; its parameters are {', '.join(params)}."
        )
    constraints = cls._parameter_constraints.get(name, "no_validation")
    if not isinstance(constraints, list):
        constraints = [constraints]

    def rank(c):
        if c is None:
            return 0
        if c == "boolean":
            return 1
        if c in (str, "no_validation") or (isinstance(c, type) and c is not list):
            return 4
        return 2

    for constraint in sorted(constraints, key=rank):
        value = _convert(text, constraint)
        if value is not NotImplemented:
            return name, value
    raise CommandError(
        f"--param {name}={text}: {cls.__name__}'s {name} must be "
        f"{' or '.join(_describe(c) for c in constraints)}."
    )


def _parse_nested(est, item):
    """Parse ``OUTER__NAME=VALUE`` for the estimator held in ``est``'s parameter ``OUTER``.

    The value is typed from that inner estimator's constraints (recursively for deeper keys).
    """
    key, text = item.split("=", 1)
    outer, inner = key.strip().replace("-", "_").split("__", 1)
    params = est.get_params(deep=False)
    if outer not in params:
        raise CommandError(f"{type(est).__name__} has no parameter {outer!r} (in --param "
                           f"{item}).")
    sub = params[outer]
    if sub is None or not hasattr(sub, "get_params"):
        raise CommandError(f"--param {item}: give the estimator first, e.g. --param "
                           f"{outer}=linear, then its parameters as {outer}__NAME=VALUE.")
    if "__" in inner:
        name, value = _parse_nested(sub, f"{inner}={text}")
    else:
        name, value = parse_param(type(sub), f"{inner}={text}")
    return f"{outer}__{name}", value


# --------------------------------------------------------------------------------- arguments


def _parser():
    parser = argparse.ArgumentParser(
        prog="skalign",
        description="Plan, fit, apply and evaluate embedding-space aligners on vector stores "
        "(.npy, Parquet files or shard folders, LanceDB tables, FAISS indexes, PostgreSQL/"
        "pgvector, Chroma, Qdrant; `skalign translate --help` lists the address forms).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fit = sub.add_parser("fit", help="fit an aligner on paired embeddings and save it (skops)")
    fit.add_argument("method", metavar="METHOD",
                     help="procrustes, linear, irp, gera, asif, bootstrap, ensemble, relative "
                     "or a class name")
    fit.add_argument("--source", required=True, metavar="A", help="source-encoder embeddings")
    fit.add_argument("--target", metavar="B", help="target-encoder embeddings of the same items, "
                     "row for row or matched by id (--id-column; vector databases' own ids)")
    fit.add_argument("-o", "--output", required=True, metavar="MODEL",
                     help="model file to write (.skops)")
    fit.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="estimator parameter, repeatable (none, true/false, numbers, strings); "
                          "an inner estimator's as OUTER__NAME=VALUE after OUTER=METHOD, e.g. "
                          "estimator=linear estimator__scoring=recall_retention")
    fit.add_argument("--unpaired-source", metavar="P", help="source embeddings with no pair")
    fit.add_argument("--unpaired-target", metavar="Q", help="target embeddings with no pair")
    _column_args(fit)

    add_store_commands(sub)
    add_migrate_command(sub, _positive_int)
    add_search_command(sub, _positive_int)

    ev = sub.add_parser("evaluate", help="cosine, top-1/top-10 and MRR on held-out pairs")
    ev.add_argument("model", metavar="MODEL", help="model file written by `skalign fit` (.skops)")
    ev.add_argument("--source", required=True, metavar="A",
                    help="held-out source-encoder embeddings (not used to fit the model)")
    ev.add_argument("--target", required=True, metavar="B",
                    help="target-encoder embeddings of the same items, row for row or matched by "
                    "id (--id-column; vector databases' own ids)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    _column_args(ev)

    add_plan_command(sub, _positive_int, _column_args)
    sub.add_parser("demo", add_help=False,
                   help="the demo: a vector store migrated to a new encoder, then the "
                        "estimators on digits (also `python -m skalign`)")
    return parser


def _column_args(p):
    p.add_argument("--source-column", metavar="NAME",
                   help="vector column of a Parquet/LanceDB A (and P)")
    p.add_argument("--target-column", metavar="NAME",
                   help="vector column of a Parquet/LanceDB B (and Q)")
    p.add_argument("--id-column", metavar="NAME", help="match the rows of A and B by id "
                   "instead of by row: the id column NAME of a Parquet/LanceDB store; a Chroma, "
                   "Qdrant, PostgreSQL (primary key) or FAISS IDMap store uses its own ids. Rows "
                   "whose id is on one side only are left out, with a warning")


def _pairs(args, out, need, min_pairs=1):
    """``(A, B)`` of ``--source`` and ``--target``, matched by id or by row
    (:func:`skalign.cli._pairs_io.read_pairs`); ids on one side only are said in a line on
    standard error."""
    import warnings

    from ._pairs_io import UnmatchedIdsWarning, read_pairs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnmatchedIdsWarning)
        pairs = read_pairs(args.source, args.target, id_column=args.id_column,
                           source_column=args.source_column, target_column=args.target_column,
                           min_pairs=min_pairs, need=need)
    for w in caught:
        if issubclass(w.category, UnmatchedIdsWarning):
            out(warning_line(args.command, w.message), file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return pairs


def _read(path, column, flag):
    from ..io import read_vectors

    X = read_vectors(path, column=column)
    if len(X) == 0:
        raise CommandError(f"{path}: {flag} has no rows.")
    return X


def _target_space(model, B):
    """What ``model.transform`` output is compared with: ``B`` or its shared-space image."""
    return model.transform_target(B) if hasattr(model, "transform_target") else np.asarray(B)


def _fmt_params(est):
    """The parameters that differ from the class defaults, as ``name=value, ...``."""
    defaults = type(est)().get_params(deep=False)
    return ", ".join(f"{k}={v!r}" for k, v in est.get_params(deep=False).items()
                     if repr(v) != repr(defaults.get(k)))


# ---------------------------------------------------------------------------------- commands
def cmd_fit(args, out):
    from .. import UnpairedPool
    from ..io import output_dim, save
    from ..metrics import mean_cosine_similarity

    cls = resolve_method(args.method)
    nested = [item for item in args.param if "__" in item.split("=", 1)[0]]
    params = dict(parse_param(cls, item) for item in args.param if item not in nested)
    est = cls(**params)
    for item in nested:
        est.set_params(**dict([_parse_nested(est, item)]))
    try:
        est._validate_params()
    except ValueError as exc:
        raise CommandError(" ".join(str(exc).split())) from None
    fit_params = inspect.signature(cls.fit).parameters
    if (args.unpaired_source or args.unpaired_target) and "unpaired" not in fit_params:
        takes = [n for n, c in method_names().items()
                 if "unpaired" in inspect.signature(c.fit).parameters]
        raise CommandError(
            f"{cls.__name__} does not use unpaired embeddings; drop --unpaired-source/"
            f"--unpaired-target or choose a method that does ({', '.join(takes)})."
        )
    y_required = fit_params["y"].default is inspect.Parameter.empty if "y" in fit_params else False
    if args.target is None and y_required:
        raise CommandError(f"{cls.__name__} needs --target B (embeddings paired with --source).")
    if args.target is None:
        A, B = _read(args.source, args.source_column, "--source"), None
    else:
        A, B = _pairs(args, out, "fitting", min_pairs=2)
    kwargs = {}
    if args.unpaired_source or args.unpaired_target:
        P = _read(args.unpaired_source, args.source_column, "--unpaired-source") \
            if args.unpaired_source else None
        Q = _read(args.unpaired_target, args.target_column, "--unpaired-target") \
            if args.unpaired_target else None
        kwargs["unpaired"] = UnpairedPool(X=P, y=Q)
    t0 = time.perf_counter()
    est.fit(A, B, **kwargs) if B is not None else est.fit(A, **kwargs)
    fit_s = time.perf_counter() - t0
    d_out = output_dim(est)
    out(f"fitted {cls.__name__}({_fmt_params(est)}) on {len(A)} pairs"
        + (f" + unpaired pool {kwargs['unpaired']!r}" if kwargs else "")
        + f": {est.n_features_in_}-d -> {d_out}-d in {fit_s:.2f} s")
    if hasattr(est, "normalize_"):  # what normalize="auto" (or the user) chose, and why
        out(f"normalize: {est.normalize_} ({est.normalize_reason_})")
    if B is not None:
        cos = mean_cosine_similarity(_target_space(est, B), est.transform(A))
        out(f"training cosine {cos:.4f}")
    path = save(est, args.output)
    out(f"saved {path} ({path.stat().st_size / 1024:.0f} kB, skops)")
    return 0


def evaluate_arrays(model, A, B):
    """Cosine, top-1, top-10 and MRR of ``model.transform(A)`` against the true targets ``B``.

    Retrieval ranks come from :func:`skalign.metrics.retrieval_ranks`, computed in row blocks
    (never an ``n × n`` similarity matrix).

    Returns
    -------
    dict
    """
    from ..metrics import mean_cosine_similarity, retrieval_ranks

    pred = model.transform(A)
    target = _target_space(model, B)
    ranks = retrieval_ranks(target, pred)
    return {
        "n_pairs": int(len(ranks)),
        "cosine": mean_cosine_similarity(target, pred),
        "top1": float(np.mean(ranks <= 1)),
        "top10": float(np.mean(ranks <= 10)),
        "mrr": float(np.mean(1.0 / ranks)),
    }


def cmd_evaluate(args, out):
    from ..io import load

    model = load(args.model)
    A, B = _pairs(args, out, "evaluating")
    if A.shape[1] != model.n_features_in_:
        raise CommandError(
            f"--source {args.source} has {A.shape[1]}-d vectors but the model translates "
            f"{model.n_features_in_}-d embeddings; pass the model's source-encoder embeddings."
        )
    n_out = getattr(model, "n_features_out_", None)
    if n_out is not None and B.shape[1] != n_out:
        raise CommandError(
            f"--target {args.target} has {B.shape[1]}-d vectors but the model was fitted on "
            f"{n_out}-d targets; pass the model's target-encoder embeddings."
        )
    scores = evaluate_arrays(model, A, B)
    scores = {"model": str(args.model), "method": type(model).__name__, **scores}
    if args.json:
        out(json.dumps(scores))
    else:
        out(f"{'pairs':>8}{'cosine':>9}{'top-1':>8}{'top-10':>8}{'MRR':>8}")
        out(f"{scores['n_pairs']:>8}{scores['cosine']:9.4f}{scores['top1']:8.4f}"
            f"{scores['top10']:8.4f}{scores['mrr']:8.4f}")
    return 0


# ------------------------------------------------------------------------------------- plan
def cmd_plan(args, out):
    from pathlib import Path

    from .. import UnpairedPool
    from ..plan import candidate_methods, plan_migration, write_report

    methods = None
    if args.methods:
        methods = [m.strip().lower() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in methods if m not in candidate_methods()]
        if unknown:
            raise CommandError(f"--methods: unknown method {unknown[0]!r}; choose from "
                               f"{', '.join(candidate_methods())}.")
    report_mode = None
    if args.report:
        report = Path(args.report)
        if report.suffix.lower() not in (".png", ".html", ".htm"):
            raise CommandError(f"--report {report}: the file name must end in .png or .html.")
        report_mode = check_report(args)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CommandError("--report needs matplotlib, which is not installed: pip install "
                               "matplotlib (or skalign[docs]), or drop --report.") from None
    if not 0 <= args.min_recall <= 1:
        raise CommandError(f"--min-recall must be in [0, 1], got {args.min_recall}.")
    judged = (args.queries_source, args.queries_target, args.qrels)
    if any(judged) and not all(judged):
        raise CommandError("judged queries need all three of --queries-source, "
                           "--queries-target and --qrels.")
    qrels = None
    if all(judged):
        from ..plan._inputs import read_qrels

        qrels = read_qrels(args.qrels)
    X, Y = _pairs(args, out, "plan", min_pairs=2)
    pool = None
    if args.unpaired_source or args.unpaired_target:
        P = _read(args.unpaired_source, args.source_column, "--unpaired-source") \
            if args.unpaired_source else None
        Q = _read(args.unpaired_target, args.target_column, "--unpaired-target") \
            if args.unpaired_target else None
        pool = UnpairedPool(X=P, y=Q)
    queries = None
    if all(judged):
        queries = (_read(args.queries_source, args.source_column, "--queries-source"),
                   _read(args.queries_target, args.target_column, "--queries-target"))
    store_rows, rates = plan_cost(args)  # the store's size and the cost's calibration
    store_size = args.store_size or store_rows
    sides = ("document", "query") if args.sides == "both" else (args.sides,)
    import warnings

    from ..utils._console import stage

    what = f"planning on {len(X)} pairs" + (f" for a store of {store_size}"
                                           if store_size else "")
    with warnings.catch_warnings(record=True) as caught, stage(what, not args.quiet
                                                                and not args.json):
        warnings.simplefilter("always", UserWarning)
        plan = plan_migration(X, Y, unpaired=pool, methods=methods, sides=sides, k=args.k,
                              store_size=store_size, curve=not args.no_curve,
                              min_recall=args.min_recall, normalize=not args.no_normalize,
                              budget=args.budget, queries=queries, qrels=qrels,
                              random_state=args.seed)
    for w in caught:
        if str(w.message) in plan.notes:
            out(warning_line("plan", w.message), file=sys.stderr)
    if args.report:
        write_report(plan, args.report, overwrite=args.overwrite, mode=report_mode)
    cost = cost_report(args, rates, store_size or plan.store_size) if rates else ([], None)
    if args.json:
        out(json.dumps(dict(plan.to_dict(), **({"cost": cost[1]} if rates else {}))))
    else:
        for line in plan.summary() + ([""] + cost[0] if rates else []):
            out(line)
        if args.report:
            out(f"report written to {args.report}")
    return 0


# -------------------------------------------------------------------------------------- main
def main(argv=None, default_command=None):
    """Run the ``skalign`` command line; return the exit status.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; ``None`` reads ``sys.argv[1:]``.
    default_command : str, default=None
        Command run when ``argv`` names none (``python -m skalign`` passes ``"demo"``, so that
        it runs the demo, with or without demo options); ``None`` requires a command.

    Returns
    -------
    status : int
        0 on success, 2 on a usage or data error (one line on standard error).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if default_command and (not argv or argv[0] not in COMMANDS + ("-h", "--help")):
        argv = [default_command, *argv]
    if argv and argv[0] == "demo":
        from ..demo import demo_main

        demo_main(argv[1:])
        return 0
    args = _parser().parse_args(argv)
    from ..exceptions import ModelFileError, StoreError

    handler = {"fit": cmd_fit, "translate": cmd_translate, "restore": cmd_restore,
               "info": cmd_info, "evaluate": cmd_evaluate, "plan": cmd_plan,
               "migrate": cmd_migrate, "search": cmd_search}
    try:
        args, secrets = parse_store_args(args)
    except StoreError as exc:
        print(f"skalign {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = partial(_scrubbed_print, secrets=secrets)
    try:
        with warnings_as_lines(args.command, partial(_scrubbed, secrets=secrets)):
            return handler[args.command](args, out)
    except (CommandError, StoreError, ModelFileError, ValueError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        out(f"skalign {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"skalign {args.command}: interrupted", file=sys.stderr)
        return 130


def _scrubbed_print(*parts, secrets=(), file=None):
    """``print``, with any password given in an address replaced by ``***`` (the messages
    already render addresses masked; this also covers text an engine quoted back), and every
    control character but newlines and tabs escaped (messages quote stored text: a stamp's
    source, an engine's error)."""
    print(_scrubbed(" ".join(str(p) for p in parts), secrets), file=file)


def _scrubbed(text, secrets=()):
    from ..utils._terminal import escape_control

    for secret in secrets:
        text = text.replace(secret, "***")
    return escape_control(text, keep="\n\t")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
