"""What the engines' live stores (:mod:`.chroma_live`, :mod:`.qdrant_live`,
:mod:`.pgvector_live`) share: the checks of what they are given, before the engine sees it
(queries and vectors of the store's width and finite, ``k`` a positive integer, ids unique and
of a type the engine's client sends as it received it, a provenance mark that is text), and the
process's lock of a database whose engine does not replace a row's vector and metadata at once
(:func:`database_lock`)."""

from __future__ import annotations

import numbers
import threading
import uuid

import numpy as np

from ..exceptions import StoreError, StoreNotFoundError

__all__ = ["check_ids", "check_k", "check_mark", "check_options", "check_vectors",
           "database_lock", "missing_id"]

#: a database's identity (its folder or server) -> the lock of :func:`database_lock`
_LOCKS = {}
_LOCKS_LOCK = threading.Lock()


def database_lock(address):
    """The lock every live store of ``address``'s database (a local folder, a server; the
    identity without the collection: an alias and its collection share it) takes in this
    process around its reads and write-backs, where the engine applies a row's new vector and
    its new metadata in two steps a concurrent read can fall between."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(address.identity[:-1], threading.RLock())


def check_options(address, options):
    """Refuse options an engine's live store does not take (they belong to file stores)."""
    if options:
        raise StoreError(f"{address}: {address.kind} stores take no option "
                         f"{', '.join(sorted(options))}; leave it out.")


def check_k(k):
    """``k`` as an ``int`` of at least 1."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    return int(k)


def check_vectors(vectors, dim, address, what="queries"):
    """``vectors`` as a C-contiguous float32 array of shape ``(n, dim)``, every value finite.

    Parameters
    ----------
    vectors : array-like of shape (n, dim)
    dim : int
        The store's width (0: a store without rows, whose width is not known yet).
    address : Address
        Named in the messages.
    what : str
        What the rows are, in the messages.
    """
    try:
        X = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise StoreError(f"{address}: {what} are not an array of numbers.") from None
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2:
        raise StoreError(f"{address}: {what} must be a 2-D array (n, {dim}), got shape "
                         f"{X.shape}.")
    if dim and X.shape[1] != dim:
        raise StoreError(f"{address}: {what} have {X.shape[1]} dimensions but the store's "
                         f"vectors have {dim}.")
    finite = np.isfinite(X).all(axis=1)
    if not finite.all():
        raise StoreError(f"{address}: {what} row {int(np.flatnonzero(~finite)[0])} holds a "
                         "value a float32 cannot hold (infinite or NaN).")
    return np.ascontiguousarray(X)


def check_ids(ids, address):
    """``ids`` as a list of Python scalars (a numpy integer as ``int``), each once."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise StoreError(f"{address}: ids must be a list of ids, got {type(ids).__name__}.")
    out = [i.item() if isinstance(i, np.generic) else i for i in ids]
    seen = set()
    for i in out:
        if isinstance(i, bool) or not isinstance(i, (int, str, uuid.UUID)):
            raise StoreError(f"{address}: id {_shown(i)} is a {type(i).__name__}; ids are the "
                             "store's own (integers, text or UUIDs), as top_k returns them.")
        if i in seen:
            raise StoreError(f"{address}: id {_shown(i)} is given twice; give each row once.")
        seen.add(i)
    return out


def check_mark(mark, address):
    """The provenance value: non-empty text."""
    if not isinstance(mark, str) or not mark:
        raise StoreError(f"{address}: the provenance mark must be non-empty text, got "
                         f"{_shown(mark)}.")
    return mark


def _shown(value):
    """A value as a message shows it: its ``repr``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def missing_id(address, ident):
    """The error for an id the store does not hold."""
    return StoreNotFoundError(f"{address}: no row with id {_shown(ident)}; ids are the "
                              "store's own, as top_k returns them.")
