"""Search a translated store with the new encoder in the loop: candidates from the store's own
index (or from skalign's index beside a file store without one), re-scored exactly by the new
encoder's vectors, which are written back as the rows' final vectors.

A translated store ranks new-model queries well enough to *find* the right rows, not always to
*order* them: a query's top-100 in the translated store holds far more of its top-10 in the
re-embedded store than the translated top-10 does (the user guide has the measurements).
:class:`Searcher` takes the store index's ``K`` best rows (the *candidates*) for each query,
encodes the texts of those that have no encoded vector yet (through an
:class:`~skalign.encoders.EncodeCache`: each text is encoded once, ever), scores all ``K``
exactly and returns the best ``k``. Every vector it encodes is written back to its row as that
row's final vector, with the provenance ``encoded:<fingerprint>``: the rows traffic touches are
migrated for good, and the store converges to a full re-embedding, the most-searched rows
first.

Read more in the :ref:`User Guide <search_rerank>`.
"""

from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass

import numpy as np

from .exceptions import EncoderError

__all__ = ["SearchResult", "SearchStats", "Searcher", "candidates_from_plan", "search"]

#: queries searched at a time (their candidates fetched and encoded together)
QUERY_BATCH = 32


@dataclass(frozen=True)
class SearchResult:
    """What :meth:`Searcher.search` returns.

    Attributes
    ----------
    ids : list of list
        Per query, the ids of its ``k`` best rows, best first.
    scores : list of ndarray
        Per query, their exact scores under the new encoder (the store's similarity: cosine,
        inner product, or negated squared L2 distance).
    """

    ids: list
    scores: list


@dataclass
class SearchStats:
    """Counts over a :class:`Searcher`'s life.

    Attributes
    ----------
    queries : int
        Queries searched.
    candidates : int
        Candidate rows scored (a row counted once per query that found it).
    encoded : int
        Texts the encoder actually ran on (the cost: the rest came from the encode cache).
    cached : int
        Candidate texts the encode cache answered.
    already_encoded : int
        Candidates whose stored vector this encoder computed (scored as stored).
    without_text : int
        Candidates without a text, scored by their stored vector.
    written : int
        Rows whose encoded vector was written back to the store.
    stale : int
        Candidates marked encoded whose text (or text field) changed since: re-encoded.
    conflicts : int
        Rows not written back because another writer changed their provenance after this
        searcher read it (compare-and-set: that writer's vector is kept).
    """

    queries: int = 0
    candidates: int = 0
    encoded: int = 0
    cached: int = 0
    already_encoded: int = 0
    without_text: int = 0
    written: int = 0
    stale: int = 0
    conflicts: int = 0

    def as_dict(self):
        return dict(vars(self))


def candidates_from_plan(path):
    """The number of candidates a plan file recommends: ``{"rerank": {"k_candidates": K}}``.

    Parameters
    ----------
    path : str or path-like
        A JSON file (``skalign plan --json`` output, or any object with that key).

    Returns
    -------
    int
    """
    try:
        with open(path, "rb") as f:
            plan = json.loads(f.read(1 << 24))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the plan ({exc.strerror}).") from None
    except ValueError:
        raise ValueError(f"{path}: not a JSON plan file (skalign plan --json).") from None
    rerank = plan.get("rerank") if isinstance(plan, dict) else None
    k = rerank.get("k_candidates") if isinstance(rerank, dict) else None
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"{path}: the plan holds no rerank estimate "
                         "({\"rerank\": {\"k_candidates\": K}}); give the number of candidates "
                         "instead.")
    return int(k)


def _resolve_candidates(k_candidates, plan):
    if isinstance(k_candidates, str) and k_candidates == "auto":
        if plan is None:
            raise ValueError("k_candidates='auto' reads K from a plan: pass plan=PATH (written "
                             "by skalign plan --json), or give K.")
        return candidates_from_plan(plan)
    if isinstance(k_candidates, (str, os.PathLike)):
        return candidates_from_plan(k_candidates)
    if isinstance(k_candidates, bool) or not isinstance(k_candidates, numbers.Integral) \
            or k_candidates < 1:
        raise ValueError(f"k_candidates must be a positive integer, 'auto' or a plan file, "
                         f"got {k_candidates!r}.")
    return int(k_candidates)


class Searcher:
    r"""Search a store by new-model queries, re-scoring its index's candidates exactly.

    For each query :math:`q`, the store's own index gives its :math:`K` best rows
    :math:`C(q)` (by their stored vectors: translated, or already encoded). Each candidate
    :math:`i` gets the new encoder's vector :math:`e_i = f(t_i)` of its text :math:`t_i` —
    its stored vector when that is already :math:`f`'s output (the row's provenance says so),
    else encoded now — and the result is

    .. math::

        \operatorname{top\text{-}k}_{i \in C(q)} \; s(q, e_i)

    with :math:`s` the store's similarity (cosine, inner product or negated squared L2
    distance). Encoded vectors are written back to their rows
    (provenance ``encoded:<fingerprint>``) in batches of ``write_batch`` rows, each row
    atomically for concurrent readers.

    Parameters
    ----------
    store : str or path-like
        The store's address, as ``skalign search`` takes it: a path (``.npy``, Parquet,
        LanceDB, FAISS) or an address such as ``postgresql://…``, ``chroma:DIR/COLLECTION`` or
        ``qdrant:DIR/COLLECTION``. It is opened here and closed by :meth:`close`.
    encoder : str, path-like, callable, Encoder or CachedEncoder
        The new encoder: a sentence-transformers model folder or name, ``module:callable``, a
        callable from a list of str to an array, an :class:`~skalign.encoders.Encoder` (what
        :func:`skalign.encoders.as_encoder` accepts), or a
        :class:`~skalign.encoders.CachedEncoder`, which brings its own cache.
    k_candidates : int, "auto" or path-like, default=100
        Candidates per query, :math:`K`: a number; a plan file (JSON with
        ``{"rerank": {"k_candidates": K}}``); or ``"auto"``, the plan file ``plan``. At least
        ``k`` are taken.
    plan : path-like, default=None
        The plan file ``k_candidates="auto"`` reads.
    text_field : str, default=None
        Where each row's text is (a column, metadata or payload key; for ``.npy`` and FAISS
        stores, a text file with row ``i``'s text on line ``i``). ``None``: the store's own
        (Chroma's documents), else a ``text``, else a ``document`` field.
    column : str, default=None
        The vector column (tables) or named vector (Qdrant).
    cache : str, path-like, EncodeCache or None, default=None
        The encode cache (a SQLite file); ``None`` keeps vectors in memory for this
        searcher's life. Ignored when ``encoder`` is a :class:`~skalign.encoders.CachedEncoder`.
    query_encoder : str, path-like, callable or Encoder, default=None
        Encodes text queries (default: ``encoder``, without the cache).
    rescore : {"translated", "all"}, default="translated"
        Which candidates are encoded: those whose stored vector is not this encoder's output
        (``"translated"``), or all of them (``"all"``, for measurements: an encoded row's
        stored vector is already its encoder output).
    write_back : bool, default=True
        Write encoded vectors back to the store.
    write_batch : int, default=256
        Rows written back at a time (and at :meth:`flush` and :meth:`close`).
    provenance_key : str, default=None
        The metadata/payload key or column of each row's provenance (default
        ``skalign_vector``); a store whose rows hold that key with values skalign did not
        write is refused before any work.
    progress : bool, default=False
        Progress bars on standard error, when it is a terminal: the query texts encoded, then
        the queries searched with their rate and the candidate texts encoded so far.
    index : {"auto", "exact", "build", "existing"}, default="auto"
        Where the candidates of a store without an index of its own (``.npy``, Parquet) come
        from: an exact scan of every row (``"exact"``), or skalign's index kept beside the
        store (an inverted file, ``STORE.skalign-index``), checked against the store as it is
        now. ``"auto"``: the exact scan below 250,000 rows, else the index, built when it is
        missing and rebuilt when the store changed since; ``"build"``: the index built anew
        now, whatever the size; ``"existing"``: the index as it is, refused when it is missing
        or stale (a serving process that must not spend minutes building). A store with an
        index of its own (LanceDB, FAISS, the databases) is searched by that index: only
        ``"auto"`` applies.
    **store_options
        Options of the store's live backend (file stores: ``id_field``, ``metric``).

    Attributes
    ----------
    encoder : CachedEncoder
        The new encoder with its encode cache.
    k_candidates_ : int
        :math:`K` as resolved.
    index_ : str
        Where the candidates come from: ``"own"`` (the store's own index), ``"exact"`` (an
        exact scan), or skalign's index beside the store: ``"loaded"`` (it was current),
        ``"built"`` (there was none) or ``"rebuilt"`` (the store had changed since).
    stats : SearchStats

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from skalign.search import Searcher
    >>> folder = tempfile.mkdtemp()
    >>> rng = np.random.default_rng(0)
    >>> texts = [f"text {i}" for i in range(50)]
    >>> table = {t: rng.standard_normal(8) for t in texts}
    >>> new = lambda batch: np.stack([table[t] for t in batch])  # the new encoder
    >>> store = os.path.join(folder, "store.npy")
    >>> np.save(store, new(texts) + 0.3 * rng.standard_normal((50, 8)))  # "translated"
    >>> with open(os.path.join(folder, "texts.txt"), "w") as f:
    ...     _ = f.write("\n".join(texts) + "\n")
    >>> with Searcher(store, new, k_candidates=20,
    ...               text_field=os.path.join(folder, "texts.txt")) as s:
    ...     result = s.search(new(["text 7"]), k=3)
    >>> result.ids[0][0], s.stats.written
    (7, 20)
    >>> import shutil; shutil.rmtree(folder)
    """

    def __init__(self, store, encoder, *, k_candidates=100, plan=None, text_field=None,
                 column=None, cache=None, query_encoder=None, rescore="translated",
                 write_back=True, write_batch=256, provenance_key=None, progress=False,
                 index="auto", **store_options):
        from ._stores import open_live
        from ._stores.files.ann import INDEX_MODES
        from .encoders import CachedEncoder, as_encoder

        if not isinstance(index, str) or index not in INDEX_MODES:
            raise ValueError(f"index={index!r}: use one of {', '.join(INDEX_MODES)}.")
        if rescore not in ("translated", "all"):
            raise ValueError(f"rescore={rescore!r}: use 'translated' or 'all'.")
        if isinstance(write_batch, bool) or not isinstance(write_batch, numbers.Integral) \
                or write_batch < 1:
            raise ValueError(f"write_batch must be a positive integer, got {write_batch!r}.")
        self.k_candidates_ = _resolve_candidates(k_candidates, plan)
        self.encoder = encoder if isinstance(encoder, CachedEncoder) else \
            CachedEncoder(encoder, cache=cache)
        self.query_encoder = self.encoder.encoder if query_encoder is None else \
            as_encoder(query_encoder)
        self.rescore, self.write_back, self.write_batch = rescore, write_back, int(write_batch)
        self.progress = bool(progress)
        self.text_field = text_field
        # the address is parsed here (the command line passes the one it parsed already)
        self.store = open_live(store, column=column, text_field=text_field,
                               provenance_key=provenance_key, **store_options)
        try:
            if self.write_back:
                self.store.check_provenance_key()
            self.index_ = self._use_index(index)
        except BaseException:
            self.store.close()
            raise
        self.stats = SearchStats()
        self._pending = {}
        self._text_found = text_field is not None

    def _use_index(self, mode):
        """Attach skalign's index to a store without its own and say how it was found (see
        :attr:`index_`); a store with its own index takes ``"auto"`` only."""
        from ._stores.files.ann import use_index
        from ._stores.files.live import FileLiveStore

        if isinstance(self.store, FileLiveStore) and self.store.exact:
            return use_index(self.store, mode, progress=self.progress)
        if mode != "auto":
            raise ValueError(f"index={mode!r}: the {self.store.kind} store is searched by its "
                             "own index; index='exact', 'build' and 'existing' apply to stores "
                             "without one (.npy arrays and Parquet files).")
        return "own"

    # ------------------------------------------------------------------------------ search
    def search(self, queries, k=10):
        """The ``k`` best rows of each query, by the new encoder's vectors.

        Parameters
        ----------
        queries : array-like of shape (n_queries, dim) or list of str
            New-model query vectors, or texts (encoded by ``query_encoder``).
        k : int, default=10

        Returns
        -------
        SearchResult
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}.")
        from .utils._console import bar

        Q = self._queries(queries)
        K = max(self.k_candidates_, int(k))
        ids, scores = [], []
        shown = bar(len(Q), "searching", "queries", self.progress)
        encoded = self.stats.encoded
        try:
            for lo in range(0, len(Q), QUERY_BATCH):
                part_ids, part_scores = self._search_batch(Q[lo:lo + QUERY_BATCH], int(k), K)
                ids += part_ids
                scores += part_scores
                if shown is not None:
                    shown.set_postfix_str(f"{self.stats.encoded - encoded} texts encoded",
                                          refresh=False)
                    shown.update(len(part_ids))
        finally:
            if shown is not None:
                shown.close()
        return SearchResult(ids, scores)

    def _queries(self, queries):
        if isinstance(queries, str):
            raise TypeError("queries must be an array of vectors or a list of str, not one str.")
        if isinstance(queries, (list, tuple)) and queries and all(
                isinstance(q, str) for q in queries):
            Q = self._encode_queries(list(queries))
        else:
            Q = np.asarray(queries, dtype=np.float32)
            if Q.ndim == 1:
                Q = Q[None, :]
        if Q.ndim != 2 or (len(Q) and Q.shape[1] != self.store.dim):
            raise ValueError(f"queries must be of shape (n, {self.store.dim}) (the store's "
                             f"width), got {Q.shape}.")
        if not np.isfinite(Q).all():
            raise ValueError("queries hold non-finite values.")
        return Q

    def _encode_queries(self, texts):
        """The query texts encoded, in batches of the encoder's size under a progress bar."""
        from .utils._console import bar

        shown = bar(len(texts), "encoding queries", "texts", self.progress)
        if shown is None:
            return self.query_encoder.encode(texts)
        step = max(int(getattr(self.query_encoder, "batch_size", 64) or 64), 1)
        parts = []
        try:
            for lo in range(0, len(texts), step):
                parts.append(self.query_encoder.encode(texts[lo:lo + step]))
                shown.update(len(parts[-1]))
        finally:
            shown.close()
        if len({p.shape[1] for p in parts}) > 1:
            raise EncoderError(f"the encoder {self.query_encoder.name} returned query vectors "
                               f"of widths {sorted({p.shape[1] for p in parts})}")
        return np.concatenate(parts)

    def _search_batch(self, Q, k, K):
        from ._stores.live import similarity

        cand, _ = self.store.top_k(Q, K)
        unique = list(dict.fromkeys(i for ids in cand for i in ids))
        V = self._vectors(unique)
        at = {i: j for j, i in enumerate(unique)}
        out_ids, out_scores = [], []
        for q, ids in zip(Q, cand):
            if not ids:
                out_ids.append([])
                out_scores.append(np.empty(0, np.float32))
                continue
            s = similarity(q[None, :], V[[at[i] for i in ids]], self.store.metric)[0]
            order = np.argsort(-s, kind="stable")[:k]
            out_ids.append([ids[j] for j in order])
            out_scores.append(s[order])
        self.stats.queries += len(Q)
        self.stats.candidates += sum(len(ids) for ids in cand)
        if len(self._pending) >= self.write_batch:
            self.flush()
        return out_ids, out_scores

    def _vectors(self, ids):
        """The new encoder's vector of each candidate (a stored one where it is already that)."""
        V = np.empty((len(ids), self.store.dim), np.float32)
        fetch = [j for j, i in enumerate(ids) if i not in self._pending or self.rescore == "all"]
        for j, i in enumerate(ids):
            if i in self._pending:
                V[j] = self._pending[i][0]
        if not fetch:
            return V
        from ._stores.live import encoded_mark

        rows = self._fetch([ids[j] for j in fetch])
        V[fetch] = rows.vectors
        field = self.store.text_source(self.text_field)
        states = rows.states(self.encoder.fingerprint, field)
        done = np.array([st == "encoded" for st in states], dtype=bool)
        self.stats.already_encoded += int(done.sum())
        self.stats.stale += sum(st == "stale" for st in states)
        todo = [n for n in range(len(fetch))
                if (self.rescore == "all" or not done[n]) and rows.texts[n] is not None]
        no_text = sum(1 for n in range(len(fetch)) if rows.texts[n] is None and not done[n])
        if no_text and not todo and self.text_field is None:
            raise ValueError(f"{self.store.kind} store: its rows have no text to encode; "
                             "pass text_field (--text-field): where each row's text is.")
        self.stats.without_text += no_text
        if not todo:
            return V
        before = self.encoder.n_encoded, self.encoder.n_cached
        E = self.encoder.encode([rows.texts[n] for n in todo])
        self.stats.encoded += self.encoder.n_encoded - before[0]
        self.stats.cached += self.encoder.n_cached - before[1]
        if E.shape[1] != self.store.dim:
            raise EncoderError(f"the encoder {self.encoder.name} gives {E.shape[1]}-d vectors "
                               f"but the store holds {self.store.dim}-d ones: search a store "
                               "translated into this encoder's space.")
        for n, e in zip(todo, E):
            V[fetch[n]] = e
            if self.write_back and not done[n]:
                # the mark binds the text encoded; the row is written only if its provenance
                # is still the one read with that text (compare-and-set)
                self._pending[ids[fetch[n]]] = (
                    e, encoded_mark(self.encoder.fingerprint, field, rows.texts[n]),
                    rows.provenance[n])
        return V

    def _fetch(self, ids):
        """``store.fetch``; without a ``text_field``, the first of the store's default field,
        ``text`` and ``document`` that holds texts is found on the first rows and kept."""
        from ._stores.live import TEXT_FIELDS, first_text_field

        rows = self.store.fetch(ids, text_field=self.text_field)
        if self._text_found or any(t is not None for t in rows.texts):
            self._text_found = True
            return rows
        found = first_text_field(self.store, ids, TEXT_FIELDS[1:])
        if found is None:
            return rows
        self.text_field, self._text_found = found[0], True
        return found[1]

    # ------------------------------------------------------------------------- write-back
    def flush(self):
        """Write the encoded vectors not yet written back to the store."""
        if not self._pending:
            return
        ids = list(self._pending)
        pending = [self._pending[i] for i in ids]
        written = self.store.write_back(ids, np.stack([p[0] for p in pending]),
                                        [p[1] for p in pending], expected=[p[2] for p in pending])
        self.stats.written += int(np.sum(written))
        self.stats.conflicts += int(len(ids) - np.sum(written))
        self._pending = {}

    def close(self):
        """Write back what is pending and close the store."""
        from ._stores.files.live import FileLiveStore

        try:
            self.flush()
        finally:
            if isinstance(self.store, FileLiveStore) and self.store.ann is not None:
                self.store.ann.close()
            self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def search(store, queries, encoder, *, k=10, k_candidates=100, **options):
    """Search ``store`` once: :class:`Searcher` opened, searched and closed.

    Parameters
    ----------
    store : str or path-like
        The store's address (see :class:`Searcher`).
    queries : array-like of shape (n_queries, dim) or list of str
    encoder : str, path-like, callable, Encoder or CachedEncoder
        The new encoder (see :class:`Searcher`).
    k : int, default=10
    k_candidates : int, "auto" or path-like, default=100
    **options
        Other :class:`Searcher` parameters.

    Returns
    -------
    SearchResult
    """
    with Searcher(store, encoder, k_candidates=k_candidates, **options) as searcher:
        return searcher.search(queries, k=k)
