"""Live access to a published store: search its own index, read rows by id, replace vectors.

The translation pipeline (:mod:`skalign._stores.pipeline`) streams a whole store into a shadow
copy; the searcher (:mod:`skalign.search`), the pair reader and the progressive migration need the
opposite: a few rows at a time, by id, in the store as it is served. Each backend provides a
:class:`LiveStore` in a module of its own (``<backend>_live``), registered in
:mod:`skalign._stores.registry` under ``live``.

Row provenance: a row's vector is either *translated* (written by a map) or *encoded* (the new
encoder's own output for the row's text). A live store records which, per row, in the engine's
own place for row metadata (a Chroma metadata key, a Qdrant payload key, a column in a table, a
sidecar file beside file stores), under the key :data:`PROVENANCE_KEY`, with the value
``"encoded:<encoder fingerprint>"`` for encoded rows; a row without the key is translated (or
original, in a store skalign never touched).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

__all__ = ["METRICS", "PROVENANCE_KEY", "TEXT_FIELDS", "LiveRows", "LiveStore", "encoded_mark",
           "first_text_field", "similarity", "translated_mark"]

#: the metadata/payload key or column name that holds a row's provenance
PROVENANCE_KEY = "skalign_vector"
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


def encoded_mark(fingerprint):
    """The provenance value of a row whose vector the encoder ``fingerprint`` computed."""
    return f"encoded:{fingerprint}"


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

    def encoded_by(self, fingerprint):
        """Boolean mask: the rows whose stored vector ``fingerprint`` encoded."""
        mark = encoded_mark(fingerprint)
        return np.array([p == mark for p in self.provenance], dtype=bool)


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

    @abstractmethod
    def fetch(self, ids, text_field=None):
        """The rows ``ids`` as :class:`LiveRows`; an unknown id raises
        :class:`~skalign.exceptions.StoreNotFoundError` naming it (masked by the caller)."""

    @abstractmethod
    def write_back(self, ids, vectors, mark):
        """Replace the vectors of rows ``ids`` and set their provenance to ``mark``.

        Each row changes atomically for a concurrent reader: it sees either the old vector and
        provenance or the new ones, never a mix. Every other field of the row is kept.
        """

    def close(self):
        """Release the engine's handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
