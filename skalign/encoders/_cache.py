"""The encode cache: every text's vector kept once per encoder, across runs and crashes."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import sqlite3
import stat
import sys
import time
from pathlib import Path

import numpy as np

from ..exceptions import EncoderError
from ..utils._terminal import escape_control
from ._base import (
    Encoder,
    call_encoder,
    check_embeddings,
    check_texts,
    describe_error,
    valid_rows,
)

__all__ = ["CachedEncoder", "EncodeCache", "default_cache_path", "text_digest"]

#: sqlite's default limit on host parameters is 999 (older builds); stay under it
_IN_CHUNK = 900

#: seconds a cache waits for another process's lock
_LOCK_WAIT = 60


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
    (SQLite's write-ahead log).

    The file holds vectors of the user's texts, so it is private:

    - a new file is created readable by its owner only (``0600``, exclusively, never through a
      symbolic link; its folder ``0700`` when new); SQLite gives its ``-wal`` and ``-shm`` files
      the same mode;
    - a path that is a symbolic link (the file or its ``-wal``, ``-shm`` or ``-journal``) is
      refused;
    - an existing file that its group or others may read or write is made ``0600`` when it is
      ours, and refused when it is another user's.

    What cannot be an encode cache is refused with one
    :class:`~skalign.exceptions.EncoderError` line that names the path and what to do: a
    folder, a device, random bytes or a text file, a SQLite database of another program.
    A row that cannot be a vector (a width that is not a positive integer, a byte length other
    than 4 bytes per value) or whose values are not finite or of magnitude above ``1e15``
    (beyond it, norms and scores overflow float32) is not a cached vector: :meth:`get` leaves it
    out, and the text is encoded again and its row overwritten.

    Parameters
    ----------
    path : str or path, optional
        The SQLite file; :func:`default_cache_path` when omitted. ``":memory:"`` keeps the cache
        in this process only.

    Raises
    ------
    EncoderError
        If the file cannot be used as an encode cache (see above).
    """

    def __init__(self, path=None):
        self.path = default_cache_path() if path is None else path
        self._db = None
        if str(self.path) == ":memory:":
            self._db = sqlite3.connect(":memory:", isolation_level=None,
                                       check_same_thread=False)
            self._setup()
            return
        self.path = Path(self.path).expanduser()
        fd = _open_checked(self.path)
        try:
            self._connect()
            # sqlite opened the file by name: it must be the one checked, not one put there since
            here = os.stat(self.path, follow_symlinks=False)
            if not os.path.samestat(os.fstat(fd), here):
                raise _refused(self.path, "was replaced while it was opened")
            # made private only once known to be a cache: a file given by mistake is left as is
            _make_private(self.path, fd)
            _check_sidecars(self.path, tighten=True)
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise _refused(self.path, f"is not an encode cache ({describe_error(exc)})") from None
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def _connect(self):
        """Connect and set up, waiting out another process's lock.

        SQLite answers "database is locked" at once, without its busy handler, to some opens
        that race another process's: the change to WAL mode, or the recovery of the log of a
        process killed while writing (a killed cluster worker). Such an open is retried, with
        jitter, for as long as a write would wait.
        """
        deadline = time.monotonic() + _LOCK_WAIT
        while True:
            self._db = sqlite3.connect(str(self.path), timeout=_LOCK_WAIT,
                                       isolation_level=None, check_same_thread=False)
            try:
                self._setup()
                return
            except sqlite3.OperationalError as exc:
                self._db.close()
                self._db = None
                busy = any(w in str(exc).lower() for w in ("locked", "busy"))
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(random.uniform(0.01, 0.2))

    def _setup(self):
        db = self._db
        # before anything is written: another program's database is left as it is
        tables = {name for (name,) in
                  db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "vectors" not in tables:
            raise _refused(self.path, "is a SQLite database of another program (tables "
                                      f"{escape_control(', '.join(sorted(tables)[:5]))}), "
                                      "not an encode cache")
        if tables and _columns(db) != ["fingerprint", "digest", "dim", "vector"]:
            raise _refused(self.path, "holds a table 'vectors' that is not an encode cache's")
        if str(self.path) != ":memory:" and \
                db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (fingerprint TEXT NOT NULL, digest BLOB NOT NULL, "
            "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (fingerprint, digest)) "
            "WITHOUT ROWID")

    def _failed(self, exc):
        """A SQLite error while the cache is used, as one line naming the file."""
        return _refused(self.path, f"failed ({describe_error(exc)})")

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
            ``{digest: float32 vector}`` for the digests the cache holds under ``fingerprint``,
            less the rows that are not a usable vector (see the class): those texts are to be
            encoded again.
        """
        found = {}
        digests = list(digests)
        try:
            for lo in range(0, len(digests), _IN_CHUNK):
                part = digests[lo:lo + _IN_CHUNK]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT digest, dim, vector FROM vectors WHERE fingerprint = ? "  # noqa: S608
                    f"AND digest IN ({marks})", [fingerprint, *part])
                for digest, dim, blob in rows:
                    vector = _row_vector(dim, blob)
                    if vector is not None and isinstance(digest, bytes):
                        found[digest] = vector
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        return found

    def put(self, fingerprint, digests, vectors):
        """Store vectors, in one transaction.

        A digest already held is overwritten: a caller puts what :meth:`get` did not give it,
        missing or not a usable vector.

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
        digests = list(digests)
        if vectors.ndim != 2 or vectors.shape[0] != len(digests):
            raise ValueError(f"put needs one row per digest: {len(digests)} digests, vectors of "
                             f"shape {vectors.shape}")
        rows = [(fingerprint, d, vectors.shape[1], v.tobytes()) for d, v in zip(digests, vectors)]
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors (fingerprint, digest, dim, vector) "
                    "VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def count(self, fingerprint=None):
        """Count the vectors held.

        Parameters
        ----------
        fingerprint : str, optional
            Count only this encoder's.

        Returns
        -------
        int
            The number of rows (usable or not).
        """
        try:
            if fingerprint is None:
                return self._db.execute("SELECT count(*) FROM vectors").fetchone()[0]
            return self._db.execute("SELECT count(*) FROM vectors WHERE fingerprint = ?",
                                    [fingerprint]).fetchone()[0]
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def close(self):
        """Close the file; the cache cannot be used afterwards."""
        if self._db is not None:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"EncodeCache({str(self.path)!r})"


def _refused(path, what):
    """One line: the encode cache ``path`` ``what``, and what to do about it."""
    return EncoderError(f"the encode cache {escape_control(str(path))} {what}; remove it, or "
                        "give another file with --encode-cache (or SKALIGN_ENCODE_CACHE)")


def _columns(db):
    return [row[1] for row in db.execute("PRAGMA table_info(vectors)")]


def _row_vector(dim, blob):
    """A cache row as a float32 vector, or ``None`` when it is not a usable one."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not isinstance(blob, bytes):
        return None
    if dim < 1 or len(blob) != 4 * dim:
        return None
    vector = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    return vector if valid_rows(vector[None])[0] else None


def _open_checked(path):
    """Create the encode cache's file (``0600``, exclusively, not through a link), or check an
    existing one (not a link, a regular file, not another user's file open to others), and its
    SQLite side files; return an open descriptor of the file checked."""
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
    except (OSError, ValueError) as exc:
        raise _refused(path, f"cannot have its folder created ({describe_error(exc)})") from None
    try:
        # 0600 before any byte is written; umask can only take bits away
        os.close(os.open(path, os.O_CLOEXEC | os.O_NOFOLLOW | os.O_RDWR | os.O_CREAT
                         | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except (OSError, ValueError) as exc:
        raise _refused(path, f"cannot be created ({describe_error(exc)})") from None
    fd = _open_existing(path)
    try:
        _check_file(path, fd)
        _check_sidecars(path, tighten=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_sidecars(path, tighten):
    """The same checks on SQLite's ``-wal``, ``-shm`` and ``-journal`` files that exist; made
    ``0600`` too when ``tighten``."""
    for suffix in ("-wal", "-shm", "-journal"):
        side = path.with_name(path.name + suffix)
        # another process's last connection deletes its log files as it closes
        fd = _open_existing(side, missing_ok=True)
        if fd is not None:
            try:
                _check_file(side, fd)
                if tighten:
                    _make_private(side, fd)
            finally:
                os.close(fd)


#: How the cache's files are held while they are checked. Closing any descriptor of a file
#: releases every POSIX lock this process holds on it, SQLite's included: a plain descriptor
#: closed beside an open connection lets another process take the database for unused,
#: recover or delete its log under this connection ("locking protocol", "database disk image
#: is malformed"). Linux's path-only descriptors (O_PATH) take no part in locking.
#: O_NONBLOCK: a FIFO planted at the path must not hang the open.
_HANDLE = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK)


def _open_existing(path, missing_ok=False):
    try:
        return os.open(path, _HANDLE | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if missing_ok and exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise _refused(path, "is a symbolic link, which skalign does not follow (give the "
                                 "file's own path)") from None
        raise _refused(path, f"cannot be opened ({describe_error(exc)})") from None


def _check_file(path, fd):
    st = os.fstat(fd)
    if stat.S_ISLNK(st.st_mode):  # O_PATH with O_NOFOLLOW holds the link itself
        raise _refused(path, "is a symbolic link, which skalign does not follow (give the "
                             "file's own path)")
    if stat.S_ISDIR(st.st_mode):
        raise _refused(path, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _refused(path, "is not a regular file")
    if st.st_mode & 0o077 and st.st_uid != os.geteuid():
        raise _refused(path, f"may be read by other users (mode {stat.S_IMODE(st.st_mode):o}) "
                             "and belongs to another user, so skalign cannot make it private")


def _make_private(path, fd):
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if mode & 0o077:
        try:
            if _HANDLE == getattr(os, "O_PATH", None):
                # a path-only descriptor cannot be fchmod-ed; its /proc link names its inode
                os.chmod(f"/proc/self/fd/{fd}", mode & 0o700)
            else:
                os.fchmod(fd, mode & 0o700)
        except OSError as exc:
            raise _refused(path, f"may be read by other users (mode {mode:o}) and cannot be "
                                 f"made private ({describe_error(exc)})") from None


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
    n_repeated : int
        Of those, the texts that repeat another text of the same call (encoded, or read from
        the cache, once).
    normalize, unit_vectors : bool or None
        The wrapped encoder's (see :class:`~skalign.encoders.Encoder`).
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
        self.normalize = self.encoder.normalize
        self.unit_vectors = self.encoder.unit_vectors
        self.n_encoded = 0
        self.n_cached = 0
        self.n_repeated = 0

    def encode(self, texts):
        """Embed texts, running the model only on those the cache does not hold.

        Parameters
        ----------
        texts : list of str
            The texts, in order.

        Returns
        -------
        ndarray of shape (n_texts, dim), float32
            Row ``i`` embeds ``texts[i]``.

        Raises
        ------
        EncoderError
            If the model fails or returns bad rows (see :meth:`Encoder.encode`), the cache file
            fails, or the cache holds vectors of another width than the model's under its
            fingerprint (the fingerprint does not identify one model, or the file was altered).
        """
        texts = check_texts(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        digests = [text_digest(t) for t in texts]
        unique = dict.fromkeys(digests)
        found = self.cache.get(self.fingerprint, unique)
        widths = {v.shape[0] for v in found.values()}
        if len(widths) > 1:
            raise self._widths(widths)
        todo = [(d, t) for d, t in zip(digests, texts) if d not in found]
        todo = list(dict(todo).items())
        bar = _bar(len(todo), self.progress, self.name)
        dim = None
        try:
            for lo in range(0, len(todo), self.batch_size):
                part = todo[lo:lo + self.batch_size]
                out = check_embeddings(
                    call_encoder(self.encoder.encode, [t for _, t in part], self.name),
                    len(part), self.name, dim)
                dim = out.shape[1]
                if widths and dim not in widths:
                    raise self._widths(widths | {dim})
                self.cache.put(self.fingerprint, [d for d, _ in part], out)
                found.update(zip((d for d, _ in part), out))
                self.n_encoded += len(part)
                if bar is not None:
                    bar.update(len(part))
        finally:
            if bar is not None:
                bar.close()
        self.n_cached += len(texts) - len(todo)
        self.n_repeated += len(texts) - len(unique)
        return np.stack([found[d] for d in digests]).astype(np.float32, copy=False)

    def _widths(self, widths):
        where = ("" if str(self.cache.path) == ":memory:"
                 else f" {escape_control(str(self.cache.path))}")
        return EncoderError(
            f"the encode cache{where} holds vectors of widths {sorted(widths)} for encoder "
            f"{self.name} (fingerprint {escape_control(self.fingerprint)}): its fingerprint "
            "does not identify one model (give the encoder a fingerprint of its own), or the "
            "cache was altered (remove it, or give another file with --encode-cache)")


def _bar(total, enabled, name):
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="texts", unit_scale=True, desc=f"encoding ({name})",
                file=sys.stderr)
