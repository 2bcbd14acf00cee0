"""Milvus's names, clients, stamps and errors: the naming rule checked before a client is opened,
a Milvus Lite database (a ``.db`` folder) recognised without opening it (a client creates one
anywhere), one client per database in the process, pymilvus's and Milvus Lite's exceptions
turned into one-line :class:`~skalign.exceptions.StoreError` exceptions at the backend's edge
(their loggers, which print tracebacks of the errors they raise, silenced inside it), and the
string literals of Milvus's filter expressions."""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import json
import logging
import re
import threading
from pathlib import Path

from ...exceptions import AddressError, StoreError, StoreLockedError, StoreNotFoundError
from ..databases.common import LocalFolder, backup_name
from ..databases.edge import EngineEdge, one_line

#: the key of a collection's properties that holds the provenance stamp (JSON text)
STAMP_KEY = "skalign"
#: Milvus's rule for collection, field and partition names, and its longest name
NAME_RULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME = 255
#: characters skalign adds to an output's name for its shadow (``_skalign_`` and 12 hex
#: digits, the longest of the names it derives)
SHADOW_SUFFIX = 21
#: collection names a "no such collection" message lists at most
LISTED_NAMES = 5
#: packages whose exceptions (and log records) are the engine's
ENGINE_PACKAGES = ("pymilvus", "milvus_lite", "grpc")
#: Milvus Lite's database: a folder ending in ``.db`` that holds these
LITE_SUFFIX = ".db"
LITE_MARKERS = ("LOCK", "collections")


def _classify(address, exc, msg):
    """The :class:`StoreError` that says what a pymilvus or Milvus Lite ``exc`` means."""
    if isinstance(getattr(exc, "message", None), str):  # pymilvus's own, without its wrapper
        msg = one_line(exc.message, address)
    low = msg.lower()
    if "another process holds the lock" in low or "open local milvus failed" in low:
        return StoreLockedError(f"{address}: another process uses the Milvus Lite database "
                                f"{address.path}; wait for it to finish.")
    if "auth" in low or "permission denied" in low or "credential" in low:
        return StoreError(f"{address}: the Milvus server refused the credentials ({msg}); "
                          "check the user name and password of the address.")
    if "not found" in low or "not exist" in low:
        return StoreNotFoundError(f"{address}: Milvus says: {msg}; check the collection's "
                                  "name.")
    return StoreError(f"{address}: Milvus failed ({msg}).")


_EDGE = EngineEdge(ENGINE_PACKAGES, _classify, "Milvus")


class _Quiet(logging.Filter):
    """Drops the engine's log records while skalign calls it (pymilvus logs every failed call
    with its traceback at ERROR, Milvus Lite a failed open, and its gRPC server, in threads of
    its own, what it does not implement; skalign raises one line instead)."""

    def __init__(self):
        super().__init__()
        self.depth, self.lock = 0, threading.Lock()

    def filter(self, record):
        return not self.depth


_QUIET = _Quiet()
_SEEN = [0]


def _filter_loggers():
    """:data:`_QUIET` on every logger of the engine's packages and on their handlers (a
    logger's filter sees only the records made at that logger; pymilvus gives several of its
    loggers a handler of their own)."""
    loggers = logging.Logger.manager.loggerDict
    if len(loggers) == _SEEN[0]:
        return
    _SEEN[0] = len(loggers)
    for name, logger in list(loggers.items()):
        if name.split(".")[0] in ENGINE_PACKAGES and isinstance(logger, logging.Logger):
            for f in (logger, *logger.handlers):
                if _QUIET not in f.filters:
                    f.addFilter(_QUIET)


@contextlib.contextmanager
def quiet():
    """Inside the block, the engine's loggers record nothing (whichever thread logs: Milvus
    Lite's server answers in threads of its own)."""
    _filter_loggers()
    with _QUIET.lock:
        _QUIET.depth += 1
    try:
        yield
    finally:
        with _QUIET.lock:
            _QUIET.depth -= 1


@contextlib.contextmanager
def _errors(address):
    with quiet(), _EDGE.errors(address):
        yield


def _edge(function):
    """:meth:`EngineEdge.edge`, the engine's loggers silenced inside."""
    inner = _EDGE.edge(function)
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(*args, **kwargs):
            with quiet():
                yield from inner(*args, **kwargs)
        return generator

    @functools.wraps(function)
    def call(*args, **kwargs):
        with quiet():
            return inner(*args, **kwargs)
    return call


def _edges(cls):
    """:func:`_edge` on every public method of ``cls`` (and ``__init__``)."""
    for name, value in list(vars(cls).items()):
        if inspect.isfunction(value) and (name == "__init__" or not name.startswith("_")):
            setattr(cls, name, _edge(value))
    return cls


# ------------------------------------------------------------------------------------ names
def breaks_rule(name):
    """Why Milvus refuses ``name`` as a collection, field or partition name (``None``: it
    does not)."""
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name):
        return ("a Milvus name starts with a letter or an underscore and holds only letters, "
                "digits and underscores")
    if len(name) > MAX_NAME:
        return f"a Milvus name has at most {MAX_NAME} characters"
    return None


def shown_name(name):
    """A name as a message shows it: quoted, control characters escaped, at most 80
    characters."""
    return repr(str(name)[:80])


def check_name(address):
    """Refuse, before any work, an output collection name Milvus would refuse, for the name
    and its shadow's longer one."""
    why = breaks_rule(address.name)
    if why:
        raise AddressError(f"{address}: {shown_name(address.name)} is not a Milvus collection "
                           f"name; {why}.")
    if len(address.name) + SHADOW_SUFFIX > MAX_NAME and \
            not address.name.endswith(backup_name("")):
        raise AddressError(f"{address}: the collection name has {len(address.name)} "
                           f"characters; an output's may have at most {MAX_NAME - SHADOW_SUFFIX}"
                           f" (Milvus allows {MAX_NAME}, skalign adds {SHADOW_SUFFIX} for its "
                           "shadow).")


def check_field(address, name, what="field"):
    """Refuse a field name (``?vector=``, a provenance key) that Milvus would refuse: it is
    written into filter expressions, so only names of Milvus's rule are used."""
    why = breaks_rule(name)
    if why:
        raise AddressError(f"{address}: {shown_name(name)} is not a Milvus {what} name; {why}.")
    return name


def literal(value):
    """``value`` (a primary key: an integer or a string) as a literal of a filter expression.
    A string is double-quoted with its backslashes, quotes and line breaks escaped (the
    expression parsers of Milvus and Milvus Lite read the other characters as they are)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{type(value).__name__} is not a Milvus primary key")
    if isinstance(value, int):
        return str(int(value))
    for a, b in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        value = value.replace(a, b)
    return f'"{value}"'


def listed(names):
    names = sorted(names)
    shown = ", ".join(shown_name(n)[:62] for n in names[:LISTED_NAMES]) or "none"
    return shown + (f", … ({len(names)} in all)" if len(names) > LISTED_NAMES else "")


# ---------------------------------------------------------------------------- Lite folders
class LiteFolder(LocalFolder):
    """A Milvus Lite database: a folder ``*.db`` holding its lock file and collections."""

    def is_store(self, folder):
        folder = Path(folder)
        return folder.is_dir() and all((folder / m).exists() for m in LITE_MARKERS)

    def check_store(self, address):
        _check_suffix(address)
        if not address.path.exists():
            raise StoreNotFoundError(f"{address}: no Milvus Lite database {address.path}; check "
                                     "the path (milvus:PATH.db/COLLECTION).")
        if not self.is_store(address.path):
            raise StoreNotFoundError(f"{address}: {address.path} is not a Milvus Lite database "
                                     "(no LOCK and collections/ in it); check the path "
                                     "(milvus:PATH.db/COLLECTION).")

    def check_output(self, address):
        _check_suffix(address)
        super().check_output(address)


def _check_suffix(address):
    if address.path.name.endswith(LITE_SUFFIX) and address.path.name != LITE_SUFFIX:
        return
    raise AddressError(f"{address}: a Milvus Lite database is a path ending in .db "
                       f"(milvus:PATH.db/COLLECTION), got {shown_name(str(address.path))}.")


FOLDER = LiteFolder("Milvus Lite", "milvus", LITE_MARKERS[0])


# ---------------------------------------------------------------------------------- clients
_CLIENTS = {}
_LITE_PATHS = set()


def client_key(address):
    """The cache key of a database's client: its folder or server (and credentials)."""
    return (address.identity[:-1], address.user, address.password)


def client(address, create=False):
    """One client per database: a Milvus Lite folder (which must be a Milvus Lite database
    unless ``create``: a client makes one) or a server (``user:password`` as its token)."""
    key = client_key(address)
    if key in _CLIENTS:
        return _CLIENTS[key]
    from pymilvus import MilvusClient

    if address.path is not None:
        if not create:
            FOLDER.check_store(address)
        with contextlib.suppress(ImportError):  # its logger, which logs a failed open's
            import milvus_lite.server_manager  # noqa: F401  traceback, made before it is quieted
        with _errors(address):
            opened = MilvusClient(str(address.path))
        _LITE_PATHS.add(str(address.path))
    else:
        token = f"{address.user or ''}:{address.password or ''}" \
            if address.user is not None or address.password is not None else ""
        try:
            with quiet():
                opened = MilvusClient(uri=address.url, token=token, timeout=10)
        except Exception as exc:
            message = exc.message if isinstance(getattr(exc, "message", None), str) else exc
            raise StoreError(f"{address}: cannot reach the Milvus server "
                             f"({one_line(message, address)}); check HOST:PORT and that the "
                             "server runs.") from None
    if not _CLIENTS:
        atexit.register(close_all)
    _CLIENTS[key] = opened
    return opened


def close_all():
    """Close every client, and stop the Milvus Lite servers of the folders they opened (their
    locks released: another process may open the folders then)."""
    while _CLIENTS:
        with contextlib.suppress(Exception), quiet():
            _CLIENTS.popitem()[1].close()
    with contextlib.suppress(ImportError):
        from milvus_lite.server_manager import server_manager_instance

        while _LITE_PATHS:
            with contextlib.suppress(Exception), quiet():
                server_manager_instance.release_server(_LITE_PATHS.pop())


# ------------------------------------------------------------------------------------ stamps
def parse_stamp(text):
    """The stamp in a property's JSON text, or ``None``."""
    try:
        stamp = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
    return stamp if isinstance(stamp, dict) else None


def properties(conn, name):
    """The properties of the collection (or alias) ``name``."""
    return dict(conn.describe_collection(name).get("properties") or {})


def set_stamp(conn, name, stamp):
    """``stamp`` as JSON text under :data:`STAMP_KEY` of the properties of ``name``."""
    conn.alter_collection_properties(name, properties={
        STAMP_KEY: json.dumps(stamp, sort_keys=True)})


def load(conn, name):
    """Load the collection ``name`` where it is not (Milvus reads only loaded ones)."""
    state = conn.get_load_state(name).get("state")
    if getattr(state, "name", str(state)) != "Loaded":
        conn.load_collection(name)


def aliases(conn):
    """``{alias: collection}`` of the database."""
    return {a: conn.describe_alias(a)["collection_name"]
            for a in conn.list_aliases().get("aliases") or []}
