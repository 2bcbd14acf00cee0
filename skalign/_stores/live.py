"""Live access to a published store: search its own index, read rows by id, replace vectors.

The translation pipeline (:mod:`skalign._stores.pipeline.translate`) streams a whole store into a
shadow copy; the searcher (:mod:`skalign.search`), the pair reader and the progressive migration
need the opposite: a few rows at a time, by id, in the store as it is served. Each backend
provides a :class:`LiveStore` (``npy.NpyLive``, ``<engine>/live``), registered in
:mod:`skalign._stores.registry` under ``live``.

Row provenance: a row's vector is either *translated* (written by a map) or *encoded* (the new
encoder's own output for the row's text). A live store records which, per row, in the engine's
own place for row metadata (a Chroma metadata key, a Qdrant payload key, a column in a table, the
overlay beside file stores), under the key :data:`PROVENANCE_KEY` (or the one the user chose),
with the value

.. code-block:: text

    encoded:<encoder fingerprint>:<text field, percent-encoded>:<sha256 of the text, 16 hex>

for an encoded row (:func:`encoded_mark`): the mark binds what the vector was computed from. A
reader re-checks it against the row's *current* text (:func:`mark_state`): a row whose text or
text field changed since it was encoded is *stale*, and is counted, served and finished as a
translated one. A row without the key, or with ``translated:<map>``, is translated (or original,
in a store skalign never touched).

Writers that share rows (the searcher's write-back, ``skalign migrate --continue``) write by
compare-and-set: :meth:`LiveStore.write_back` with ``expected`` changes a row only where its
provenance is still the value the writer read, so no writer reverts another's encoded row.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np

from ..exceptions import StoreError
from .live_input import check_write, shown

__all__ = ["FIELD_KEY_PREFIX", "METRICS", "PROVENANCE_KEY", "TEXT_FIELDS", "LiveRows",
           "LiveStore", "add_marks", "check_key_name", "encoded_mark", "field_key", "field_token",
           "first_text_field", "is_mark", "mark_state", "owned_key_or_refuse", "parse_mark",
           "sample_positions", "scan_batch", "similarity", "text_digest", "translated_mark",
           "without_marks"]

#: the metadata/payload key or column name that holds a row's provenance
PROVENANCE_KEY = "skalign_vector"
#: a vector field's provenance key is this prefix and the field's name (``--into FIELD``,
#: :func:`field_key`)
FIELD_KEY_PREFIX = PROVENANCE_KEY + "_"
#: the similarities a live store ranks by (:func:`similarity`)
METRICS = ("cosine", "ip", "l2")


def similarity(queries, vectors, metric, sq_norms=None):
    r"""Scores of every row of ``vectors`` for every query, higher is better.

    .. math::

        s_{\mathrm{cosine}}(q, v) = \frac{q^\top v}{\lVert q\rVert\,\lVert v\rVert},\qquad
        s_{\mathrm{ip}}(q, v) = q^\top v,\qquad
        s_{\mathrm{l2}}(q, v) = -\lVert q - v\rVert^2

    (a zero row has cosine 0 with everything). Engines' distances map onto these: cosine
    distance :math:`1 - s`, squared L2 distance :math:`-s`.

    Parameters
    ----------
    queries : ndarray of shape (n_queries, dim)
    vectors : ndarray of shape (n, dim)
    metric : {"cosine", "ip", "l2"}
    sq_norms : ndarray of shape (n,), default=None
        :math:`\lVert v\rVert^2` of each row, where the caller keeps them (computed here
        otherwise).

    Returns
    -------
    ndarray of shape (n_queries, n), float32
    """
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r}: use one of {', '.join(METRICS)}.")
    Q = np.asarray(queries, dtype=np.float32)
    V = np.asarray(vectors, dtype=np.float32)
    dots = Q @ V.T
    if metric == "ip":
        return dots
    if sq_norms is None:
        sq_norms = np.einsum("ij,ij->i", V, V)
    q_sq = np.einsum("ij,ij->i", Q, Q)
    if metric == "l2":
        return 2 * dots - q_sq[:, None] - sq_norms[None, :]
    qn, vn = np.sqrt(q_sq), np.sqrt(sq_norms)
    return dots / np.where(qn > 0, qn, 1)[:, None] / np.where(vn > 0, vn, 1)[None, :]


def field_key(field):
    """The provenance key (column, payload or metadata key) of the rows of the vector field
    ``field`` that ``--into`` added: ``skalign_vector_FIELD``, never the store's default
    :data:`PROVENANCE_KEY`."""
    return FIELD_KEY_PREFIX + field


def translated_mark(fingerprint):
    """The provenance value of a row written in place by the map ``fingerprint`` (``skalign
    migrate --continue``'s retranslation); rows of a translated store carry no mark."""
    return f"translated:{fingerprint}"


#: where a row's text is looked for when no text field is named: the store's default field
#: (Chroma's documents), then these keys or columns
TEXT_FIELDS = (None, "text", "document")


def first_text_field(store, ids, names=TEXT_FIELDS):
    """The first of ``names`` under which ``store`` holds a text for any of the rows ``ids``,
    with those rows as :class:`LiveRows`; ``None`` when none does (a name the store refuses is
    skipped)."""
    from ..exceptions import StoreError

    for name in names:
        try:
            rows = store.fetch(ids, text_field=name)
        except StoreError:
            continue
        if any(t is not None for t in rows.texts):
            return name, rows
    return None


def text_digest(text):
    """The first 16 hex digits of the SHA-256 of ``text`` (UTF-8): what a mark binds."""
    return hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def field_token(field):
    """A text field as a mark names it: percent-encoded (no ``:`` or control character), ``""``
    for the store's default field."""
    return "" if field is None else quote(str(field), safe="")


def encoded_mark(fingerprint, field, text):
    """The provenance value of a row whose vector the encoder ``fingerprint`` computed from
    ``text``, read from the text field ``field`` (``None``: the store's default field)."""
    return f"encoded:{fingerprint}:{field_token(field)}:{text_digest(text)}"


_ENCODED = re.compile(
    r"encoded:(?P<fp>[^\x00-\x1f\x7f]+):(?P<field>[^:\s]*):(?P<digest>[0-9a-f]{16})")
_TRANSLATED = re.compile(r"translated:(?P<fp>[^\x00-\x1f\x7f]+)")
_DIGEST = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class Mark:
    """A parsed provenance value: ``kind`` (``"encoded"`` or ``"translated"``), the encoder's
    or map's ``fingerprint``, and for an encoded row the ``field`` token and text ``digest``."""

    kind: str
    fingerprint: str
    field: str | None = None
    digest: str | None = None


def parse_mark(value):
    """The :class:`Mark` a provenance value holds; ``None`` for a value skalign did not write
    (not text, or not of the forms above; marks of skalign before 0.5, ``encoded:<fp>``
    without a digest, included: they cannot be checked)."""
    if not isinstance(value, str) or len(value) > 4096:
        return None
    m = _ENCODED.fullmatch(value)
    if m is not None:
        return Mark("encoded", m["fp"], m["field"], m["digest"])
    m = _TRANSLATED.fullmatch(value)
    if m is not None:
        return Mark("translated", m["fp"])
    return None


def is_mark(value):
    """Whether ``value`` can be skalign's: ``None`` (no mark) or a value :func:`parse_mark`
    reads, or an ``encoded:``/``translated:`` value of an earlier version."""
    return value is None or (isinstance(value, str) and (
        parse_mark(value) is not None or re.fullmatch(r"(encoded|translated):[^\x00-\x1f]+",
                                                      value) is not None))


def without_marks(fields):
    """``fields`` (a row's metadata or payload) without skalign's provenance under
    :data:`PROVENANCE_KEY`: a translation never copies its source's marks into its output, whose
    marks are what the run that wrote it wrote (a user's own value under that key is kept)."""
    if not isinstance(fields, dict) or PROVENANCE_KEY not in fields \
            or not is_mark(fields[PROVENANCE_KEY]):
        return fields
    return {k: v for k, v in fields.items() if k != PROVENANCE_KEY}


def check_key_name(name, address, limit=255):
    """The provenance key: :data:`PROVENANCE_KEY` by default, else a
    name of at most ``limit`` characters without control characters."""
    if name is None:
        return PROVENANCE_KEY
    if not isinstance(name, str) or not name or len(name) > limit or any(
            ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise StoreError(f"{address}: the provenance key must be a name of 1 to {limit} "
                         f"characters without control characters, got {shown(name)}.")
    return name


def owned_key_or_refuse(address, key, values):
    """Refuse, before anything is written, a provenance ``key`` whose stored ``values`` (those
    read from some rows) are not all skalign's marks: the key is the user's own."""
    foreign = next((v for v in values if not is_mark(v)), _NO_VALUE)
    if foreign is not _NO_VALUE:
        raise StoreError(
            f"{address}: its rows already hold a {key!r} that skalign did not write (e.g. "
            f"{shown(foreign)}); skalign keeps each row's provenance under that key and never "
            "overwrites a user's data: choose another key with --provenance-key NAME.")


_NO_VALUE = object()


def mark_state(value, fingerprint, field, text):
    r"""What a row's provenance ``value`` says of its vector now, given its current ``text`` in
    ``field``: ``"encoded"`` (the encoder ``fingerprint`` computed it from exactly this text
    in this field), ``"stale"`` (an encoded mark whose encoder, field or text no longer
    matches: the vector is not this encoder's output of the current text) or ``"translated"``
    (no encoded mark).

    ``fingerprint=None`` accepts any encoder."""
    mark = parse_mark(value)
    if mark is None:
        return "stale" if isinstance(value, str) and value.startswith("encoded:") \
            else "translated"
    if mark.kind != "encoded":
        return "translated"
    if (fingerprint is not None and mark.fingerprint != fingerprint) \
            or mark.field != field_token(field) or not isinstance(text, str) \
            or mark.digest != text_digest(text):
        return "stale"
    return "encoded"


def scan_batch(ids, marks, text_of):
    """One batch of :meth:`LiveStore.mark_scan` from a page of rows read without vectors.

    Parameters
    ----------
    ids : list
        The page's row ids.
    marks : list
        Their provenance values as read (a value that is not a string is no mark).
    text_of : callable
        ``text_of(j)``: the text of the page's row ``j`` in the store's default text field,
        called only for the rows whose mark begins with ``encoded:``.

    Returns
    -------
    tuple
        ``(translated, unmarked, ids, marks, texts)`` as :meth:`LiveStore.mark_scan` yields it.
    """
    translated = unmarked = 0
    keep = []
    for j, m in enumerate(marks):
        if not isinstance(m, str):
            unmarked += 1
        elif not m.startswith("encoded:"):
            translated += 1
        else:
            keep.append(j)
    return (translated, unmarked, [ids[j] for j in keep], [marks[j] for j in keep],
            [text_of(j) for j in keep])


def empty_counts(empty=False):
    """Counts of no row, as :meth:`LiveStore.count_marks` returns them."""
    out = {"rows": 0, "encoded": 0, "stale": 0, "translated": 0, "encoders": {}}
    if empty:
        out["empty"] = 0
    return out


def add_marks(marks, read_texts, mine, counts, texts=None, tokens=(), empty=False):
    """Add the rows of provenance ``marks`` to ``counts`` (:meth:`LiveStore.count_marks`'s
    dict), each row as :func:`mark_state` finds it against its current text.

    Parameters
    ----------
    marks : list of (str or None)
        The rows' provenance values.
    read_texts : callable
        ``read_texts(field, rows)``: the current texts in the text field ``field`` (``None``:
        the store's default) of the rows ``rows`` (indexes into ``marks``); a
        :class:`~skalign.exceptions.StoreError` counts them as texts the field does not hold.
    mine : str or None
        The encoder a row must be encoded by to count as encoded (``None``: any).
    counts : dict
        Updated in place: ``encoded``, ``stale``, ``translated``, ``encoders`` (the rows each
        encoder fingerprint holds exactly) and, with ``empty``, ``empty``; ``rows`` is the
        caller's.
    texts : list, default=None
        Each row's text in the store's default field where the caller read it beside the
        marks: the rows whose mark names one of ``tokens`` take theirs from it.
    tokens : collection of str, default=()
        The field tokens (:func:`field_token`) ``texts`` answers for.
    empty : bool, default=False
        Count the rows without a mark under ``empty``, not among ``translated``.
    """
    from urllib.parse import unquote

    fields = {}
    stale = translated = unmarked = 0
    heads = {}  # the rows of each mark less its digest: each parsed once, not once a row
    for n, p in enumerate(marks):
        if p is None:
            unmarked += 1
        elif not isinstance(p, str) or not p.startswith("encoded:"):
            translated += 1
        elif len(p) <= 4096 and p[-17:-16] == ":" and _DIGEST.fullmatch(p, len(p) - 16):
            heads.setdefault(p[:-17], []).append(n)
        else:
            stale += 1  # an earlier version's mark: nothing to check it against
    if empty:
        counts["empty"] += unmarked
    else:
        translated += unmarked
    fields = {}
    for head, rows_n in heads.items():
        mark = parse_mark(f"{head}:{'0' * 16}")  # as parse_mark reads the whole mark
        if mark is None or mark.kind != "encoded":
            stale += len(rows_n)
        else:
            fields.setdefault(mark.field, []).append((mark.fingerprint, rows_n))
    encoders = counts["encoders"]
    for token, groups in fields.items():
        field = unquote(token) if token else None
        rows_n = [n for _, part in groups for n in part]
        if field_token(field) != token:  # not the token a mark of that field holds
            stale += len(rows_n)
            continue
        if texts is not None and token in tokens:
            got = [texts[n] for n in rows_n]
        else:
            try:
                got = read_texts(field, rows_n)
            except StoreError:
                got = [None] * len(rows_n)  # the field is gone: nothing is encoded from it
        at = 0
        for fp, part in groups:
            ok = 0
            for n, text in zip(part, got[at:at + len(part)]):
                if isinstance(text, str) and marks[n][-16:] == text_digest(text):
                    ok += 1
            at += len(part)
            if ok:
                encoders[fp] = encoders.get(fp, 0) + ok
            if mine is None or fp == mine:
                counts["encoded"] += ok
                stale += len(part) - ok
            else:
                stale += len(part)
    counts["stale"] += stale
    counts["translated"] += translated


@dataclass(frozen=True)
class LiveRows:
    """Rows read by id from a live store, in the order asked for.

    Attributes
    ----------
    ids : list
        The ids asked for (the engine's own ids, as :meth:`LiveStore.top_k` returns them).
    vectors : numpy.ndarray of shape (n, dim), float32
        The vectors stored now.
    texts : list of str or None
        Each row's text (``None`` for a row without one, or when no text field was asked for).
    provenance : list of str or None
        Each row's provenance value (:data:`PROVENANCE_KEY`), ``None`` where it has none.
    """

    ids: list
    vectors: np.ndarray
    texts: list
    provenance: list

    def states(self, fingerprint, field):
        """Each row's :func:`mark_state` against its text here (read from ``field``)."""
        return [mark_state(p, fingerprint, field, t)
                for p, t in zip(self.provenance, self.texts)]

    def encoded_by(self, fingerprint, field):
        """Boolean mask: the rows whose stored vector ``fingerprint`` encoded from their
        current text in ``field`` (rows fetched with that text field)."""
        return np.array([s == "encoded" for s in self.states(fingerprint, field)], dtype=bool)


def sample_positions(n_rows, n, random_state):
    """``min(n, n_rows)`` row positions of ``range(n_rows)`` drawn uniformly without
    replacement (``numpy.random.default_rng(random_state)``), in increasing order: the rows
    :meth:`LiveStore.sample_ids` draws, whether the engine draws them itself or the caller
    from the listed ids."""
    rng = np.random.default_rng(random_state)
    return np.sort(rng.choice(int(n_rows), min(int(n), int(n_rows)), replace=False))


class LiveStore(ABC):
    """One store opened for searching, reading rows by id and replacing vectors in place.

    Attributes
    ----------
    kind : str
        The registry's name of the backend.
    dim : int
        The vectors' width.
    n_rows : int
        The number of rows.
    metric : {"cosine", "ip", "l2"}
        The similarity the store's own index ranks by.
    """

    kind = None
    metric = "cosine"
    #: the metadata/payload key or column holding each row's provenance
    provenance_key = PROVENANCE_KEY
    #: whether the provenance is kept in the rows (under :attr:`provenance_key`)
    in_row_provenance = False
    #: a file store's overlay (:mod:`skalign._stores.files.overlay`: every row's provenance
    #: beside read-only files, the rows' texts read by position); ``None`` for the others
    overlay = None
    #: whether :meth:`write_many` can write a large step faster than :meth:`write_back` batch
    #: by batch when its caller allows it (``rebuild=True``; pgvector: the vector index built
    #: once again instead of updated row by row, while readers wait), so that a writer gives
    #: it a whole step rather than its batches one at a time
    bulk_writes = False

    @property
    def vector_field(self):
        """The name of the vector field (column, named vector) the store reads; ``None`` for a
        store of one unnamed array."""
        column = getattr(self, "column", None)
        if column is None and hasattr(self, "vector_column"):
            column = self.vector_column()
        return column

    def text_source(self, text_field=None):
        """The text field, as marks name it, that :meth:`fetch` reads with ``text_field``
        (``None``: the store's own default)."""
        field = text_field if text_field is not None else getattr(self, "text_field", None)
        return None if field is None else str(field)

    def count_marks(self, mine=None, empty=False):
        """Rows per provenance, each encoded mark checked against the row's current text, read
        without the rows' vectors: ``{"rows", "encoded", "stale", "translated", "encoders"}``
        as :func:`~skalign._migrate.counts.count_provenance` counts them row by row (the same
        numbers: :func:`add_marks` over every row).

        This default counts the batches of :meth:`mark_scan`; an engine that can count in the
        engine itself overrides it. ``None`` where the engine cannot read its marks apart from
        its vectors (:meth:`mark_scan` gives ``None``): the caller reads row by row.

        Parameters
        ----------
        mine : str, default=None
            The encoder a row must be encoded by to count as encoded (``None``: any).
        empty : bool, default=False
            Count the rows without a mark apart (``"empty"``, not among ``"translated"``: rows
            of a field ``--into`` has not written yet).

        Returns
        -------
        dict or None
        """
        scan = self.mark_scan()
        if scan is None:
            return None
        counts = empty_counts(empty)
        default = self.text_source(None)
        tokens = {"", field_token(default)} if default is not None else {""}
        for translated, unmarked, ids, marks, texts in scan:
            counts["rows"] += translated + unmarked + len(marks)
            counts["translated"] += translated + (0 if empty else unmarked)
            if empty:
                counts["empty"] += unmarked

            def read_texts(field, rows, ids=ids):
                return self.mark_texts([ids[k] for k in rows], field)

            add_marks(marks, read_texts, mine, counts, texts, tokens, empty)
        return counts

    def mark_scan(self):
        """Every row's provenance read without its vector, for :meth:`count_marks`: batches
        ``(translated, unmarked, ids, marks, texts)``, each of ``translated`` rows whose mark
        does not begin with ``encoded:``, ``unmarked`` rows without a mark (both counted by
        the engine, not listed) and the rows ``ids`` (a list) with their provenance values
        ``marks`` (``None``: none) and their texts ``texts`` in the store's default text field
        (``None`` where the batch holds none). The batches read one state of the store where
        the engine allows it.

        ``None`` (this default): the engine cannot read its marks apart from its vectors."""
        return None

    def mark_texts(self, ids, text_field):
        """The texts of the rows ``ids`` in ``text_field`` (``None``: the store's default), for
        :meth:`count_marks`'s rows whose mark names another field than the one
        :meth:`mark_scan` read; this default reads them with :meth:`fetch`."""
        return self.fetch(ids, text_field=text_field).texts

    def sample_norms(self, rows):
        """The vector lengths and provenance values ``(norms, marks)`` of every row of a store
        of at most ``rows`` rows, else of about ``rows`` of them the engine samples itself
        (``skalign info``'s vector-length line). ``None`` (this default): the engine has no
        sample of its own, and the caller reads blocks of rows spread over the store."""
        return None

    def sample_ids(self, n, random_state):
        """The ids of ``min(n, N)`` rows drawn uniformly without replacement, in the
        store's order (:func:`sample_positions` of the :math:`N` rows the store holds at the
        draw, :attr:`n_rows` while it is unchanged, seeded by ``random_state``), drawn
        without listing every id: the rows ``skalign plan --calibrate`` reads its texts
        from. A file store draws row positions; pgvector, DuckDB and sqlite-vec count and
        number the rows in one snapshot. ``None`` (this default): the engine cannot reach a
        row by its position without listing its ids; the caller lists them (:meth:`ids`)
        and draws the same positions from the list.

        Parameters
        ----------
        n : int
            Rows wished.
        random_state : int
            Seeds the draw.

        Returns
        -------
        list or None
        """
        return None

    def check_provenance_key(self):
        """Refuse (:class:`~skalign.exceptions.StoreError`) a provenance key that holds a user's
        own data, before anything is written; engines that keep provenance beside the store
        (file stores' overlay) have nothing to check."""

    @abstractmethod
    def top_k(self, queries, k):
        """The store index's ``k`` best rows per query.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, dim), float32
        k : int

        Returns
        -------
        ids : list of list
            Per query, the ids of its candidates, best first (fewer than ``k`` only in a store
            with fewer rows).
        scores : list of ndarray
            Per query, the index's similarity of each candidate (higher is better; an L2
            index's distances are negated).
        """

    @abstractmethod
    def ids(self):
        """Every row's id, in the store's own stable order (file stores: row order; engines:
        their id order or insertion order, the same on every call while the store is not
        changed). ``skalign migrate`` samples rows by position in this list, and ``--continue``
        checks the output's list equals the source's."""

    def id_array(self):
        """:meth:`ids` as one ``int64`` array where the engine reads them so (a file store's
        ids; a database's integer keys, read a page at a time:
        :mod:`skalign._stores.databases.ids`), else :meth:`ids`' list (this default): what a
        command that holds every id for its whole run keeps, 8 bytes an integer id against
        about 36 in a list."""
        ids = self.ids()
        return ids if isinstance(ids, list) else list(ids)

    @abstractmethod
    def fetch(self, ids, text_field=None):
        """The rows ``ids`` as :class:`LiveRows`; an unknown id raises
        :class:`~skalign.exceptions.StoreNotFoundError` naming it (masked by the caller)."""

    def write_back(self, ids, vectors, marks, expected=None):
        """Replace the vectors of rows ``ids`` and set their provenance to ``marks``.

        Each row changes atomically for a concurrent reader: it sees either the old vector and
        provenance or the new ones, never a mix. Every other field of the row is kept.

        Parameters
        ----------
        ids : list
        vectors : ndarray of shape (len(ids), dim)
        marks : str or list of str
            The provenance of each row (one value: every row's).
        expected : list of (str or None), default=None
            Compare-and-set: row ``i`` is written only where its provenance is still
            ``expected[i]`` (``None``: it has none), as one step with the write; ``None``
            writes every row.

        Returns
        -------
        written : ndarray of bool
            Which rows were written (all of them without ``expected``).
        """
        ids, V, marks, expected = check_write(self.address, self._check_write_ids(ids), vectors,
                                              marks, expected, self._write_dim())
        if not ids:
            return np.zeros(0, dtype=bool)
        self.check_provenance_key()
        return np.asarray(self._write_back(ids, V, marks, expected), dtype=bool)

    def write_many(self, batches, rows, rebuild=False):
        """Write ``batches`` in order, each ``(ids, vectors, marks, expected)`` as
        :meth:`write_back` takes it, as one step of ``rows`` rows in all: each row as
        :meth:`write_back` of its batch in that order would write it (compare-and-set against
        its provenance when its batch is written).

        ``batches`` may be an iterator, read once, one batch at a time (a step larger than
        memory). This default writes each batch with :meth:`write_back`; an engine that
        declares :attr:`bulk_writes` writes a large step its own faster way where ``rebuild``
        allows it.

        Parameters
        ----------
        batches : iterable of tuple
        rows : int
            The rows of all batches together (what the engine chooses its way by).
        rebuild : bool, default=False
            Allow the engine's faster way for a large step even where readers wait for it
            (pgvector: the table locked while its HNSW index is built again, minutes on a
            large table). ``False``: batch by batch, each batch a short transaction, searches
            go on throughout.

        Returns
        -------
        list of ndarray of bool
            Each batch's ``written``.
        """
        return [self.write_back(*batch) for batch in batches]

    def _check_write_ids(self, ids):
        """The ids a write-back is given, before the shared checks (an engine's own rules)."""
        return ids

    def _write_dim(self):
        """The width write-back vectors must have."""
        return self.dim

    @abstractmethod
    def _write_back(self, ids, vectors, marks, expected):
        """:meth:`write_back` once its input is checked (``ids`` a non-empty list, ``vectors``
        float32 of the store's width, ``marks`` and ``expected`` one per row) and the key is
        the store's to write: the engine's own write."""

    def close(self):
        """Release the engine's handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
