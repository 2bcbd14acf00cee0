"""The encode cache: every text's vector kept once per encoder, across runs and crashes."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np

from ._base import Encoder, check_embeddings, check_texts

__all__ = ["CachedEncoder", "EncodeCache", "default_cache_path", "text_digest"]

#: sqlite's default limit on host parameters is 999 (older builds); stay under it
_IN_CHUNK = 900


def text_digest(text):
    """Compute the cache key of a text.

    Parameters
    ----------
    text : str
        The text.

    Returns
    -------
    bytes
        The sha256 of its UTF-8 bytes (32 bytes).
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def default_cache_path():
    """Locate the encode cache's file when none is given.

    Returns
    -------
    pathlib.Path
        ``$SKALIGN_ENCODE_CACHE``, else ``$XDG_CACHE_HOME/skalign/encodings.sqlite``
        (``~/.cache`` when ``XDG_CACHE_HOME`` is unset).
    """
    env = os.environ.get("SKALIGN_ENCODE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "skalign" / "encodings.sqlite"


class EncodeCache:
    """Vectors of encoded texts in a SQLite file, keyed by (encoder fingerprint, text digest).

    Each :meth:`put` is one committed transaction: after a crash (even ``SIGKILL``) every batch
    put before it is there, and nothing is half-written. Several processes may share one file
    (SQLite's write-ahead log). The file is created readable by its owner only (``0600``, in a
    ``0700`` folder when the folder is new): it holds vectors of the user's texts.

    Parameters
    ----------
    path : str or path, optional
        The SQLite file; :func:`default_cache_path` when omitted. ``":memory:"`` keeps the cache
        in this process only.
    """

    def __init__(self, path=None):
        self.path = default_cache_path() if path is None else path
        if str(self.path) != ":memory:":
            self.path = Path(self.path).expanduser()
            if not self.path.parent.exists():
                self.path.parent.mkdir(mode=0o700, parents=True)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o600))
        self._db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None,
                                   check_same_thread=False)
        if str(self.path) != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (fingerprint TEXT NOT NULL, digest BLOB NOT NULL, "
            "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (fingerprint, digest)) "
            "WITHOUT ROWID")

    def get(self, fingerprint, digests):
        """Look up vectors.

        Parameters
        ----------
        fingerprint : str
            The encoder's fingerprint.
        digests : iterable of bytes
            The texts' digests (:func:`text_digest`).

        Returns
        -------
        dict
            ``{digest: float32 vector}`` for the digests the cache holds under ``fingerprint``.
        """
        found = {}
        digests = list(digests)
        for lo in range(0, len(digests), _IN_CHUNK):
            part = digests[lo:lo + _IN_CHUNK]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT digest, dim, vector FROM vectors WHERE fingerprint = ? "  # noqa: S608
                f"AND digest IN ({marks})", [fingerprint, *part])
            for digest, dim, blob in rows:
                found[bytes(digest)] = np.frombuffer(blob, dtype="<f4", count=dim).copy()
        return found

    def put(self, fingerprint, digests, vectors):
        """Store vectors, in one transaction; digests already held keep their vector.

        Parameters
        ----------
        fingerprint : str
            The encoder's fingerprint.
        digests : list of bytes
            The texts' digests (:func:`text_digest`).
        vectors : array-like of shape (len(digests), dim)
            One row per digest.
        """
        vectors = np.asarray(vectors, dtype="<f4")
        rows = [(fingerprint, d, vectors.shape[1], v.tobytes()) for d, v in zip(digests, vectors)]
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR IGNORE INTO vectors (fingerprint, digest, dim, vector) "
                "VALUES (?, ?, ?, ?)", rows)

    def count(self, fingerprint=None):
        """Count the vectors held.

        Parameters
        ----------
        fingerprint : str, optional
            Count only this encoder's.

        Returns
        -------
        int
            The number of vectors.
        """
        if fingerprint is None:
            return self._db.execute("SELECT count(*) FROM vectors").fetchone()[0]
        return self._db.execute("SELECT count(*) FROM vectors WHERE fingerprint = ?",
                                [fingerprint]).fetchone()[0]

    def close(self):
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"EncodeCache({str(self.path)!r})"


class CachedEncoder(Encoder):
    """An encoder that runs its model only on texts no earlier call (or run) encoded.

    Texts are deduplicated within a call, looked up in the cache by (fingerprint, sha256 of the
    text), and the rest encoded in batches, each batch committed to the cache as soon as it is
    encoded: a run killed midway and started again encodes only what had not been committed.

    Parameters
    ----------
    encoder : encoder spec
        Anything :func:`~skalign.encoders.as_encoder` accepts.
    cache : EncodeCache, str, path or None, default=None
        The cache, or its file; ``None`` keeps vectors in memory for this object's life only.
    progress : bool, default=False
        A progress bar (tqdm) on standard error while texts are encoded.

    Attributes
    ----------
    n_encoded : int
        Texts the model actually ran on, over this object's life.
    n_cached : int
        Texts answered from the cache (or from a duplicate within the call).
    """

    def __init__(self, encoder, cache=None, progress=False):
        from ._spec import as_encoder

        self.encoder = as_encoder(encoder)
        if not isinstance(cache, EncodeCache):
            cache = EncodeCache(":memory:" if cache is None else cache)
        self.cache = cache
        self.progress = progress
        self.fingerprint = self.encoder.fingerprint
        self.name = self.encoder.name
        self.batch_size = self.encoder.batch_size
        self.n_encoded = 0
        self.n_cached = 0

    def encode(self, texts):
        texts = check_texts(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        digests = [text_digest(t) for t in texts]
        unique = dict.fromkeys(digests)
        found = self.cache.get(self.fingerprint, unique)
        todo = [(d, t) for d, t in zip(digests, texts) if d not in found]
        todo = list(dict(todo).items())
        bar = _bar(len(todo), self.progress, self.name)
        dim = next(iter(found.values())).shape[0] if found else None
        try:
            for lo in range(0, len(todo), self.batch_size):
                part = todo[lo:lo + self.batch_size]
                out = check_embeddings(self.encoder.encode([t for _, t in part]), len(part),
                                       self.name, dim)
                dim = out.shape[1]
                self.cache.put(self.fingerprint, [d for d, _ in part], out)
                found.update(zip((d for d, _ in part), out))
                self.n_encoded += len(part)
                if bar is not None:
                    bar.update(len(part))
        finally:
            if bar is not None:
                bar.close()
        self.n_cached += len(texts) - len(todo)
        widths = {v.shape[0] for v in found.values()}
        if len(widths) > 1:
            from ..exceptions import EncoderError
            raise EncoderError(
                f"the encode cache holds vectors of widths {sorted(widths)} for encoder "
                f"{self.name} (fingerprint {self.fingerprint}); its fingerprint does not "
                "identify one model: give the encoder a fingerprint of its own")
        return np.stack([found[d] for d in digests]).astype(np.float32, copy=False)


def _bar(total, enabled, name):
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="texts", unit_scale=True, desc=f"encoding ({name})",
                file=sys.stderr)
