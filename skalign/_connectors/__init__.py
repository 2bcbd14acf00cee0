"""Vector databases behind the one store interface of :mod:`skalign._stores`.

Addresses (what ``skalign translate`` accepts besides file paths):

* ``postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=TABLE&column=COLUMN`` — a pgvector
  ``vector(d)`` column (libpq URI; ``?host=/socket/dir`` for a Unix socket, other libpq
  parameters pass through). ``postgres://`` is accepted too.
* ``chroma:DIR/COLLECTION`` (persistent client) and ``chroma+http://HOST:PORT/COLLECTION``.
* ``qdrant:DIR/COLLECTION`` (qdrant-client's local mode) and ``qdrant+http://HOST:PORT/COLLECTION``
  (``+https`` too); ``?vector=NAME`` picks a named vector.
* ``PATH.faiss`` — a FAISS index file.

Each engine's module (imported only when its address is used) gives a reader with the protocol
of the file readers (``n_rows``, ``dim``, ``dtype``, ``column``, ``batches(batch_size, start)``,
``row(rows, k)``, ``take(positions, batch_size)``: rows read back for the verification,
``read_all()``) and a shadow writer with that of the file writers (``lock``, ``exists``,
``begin``, ``write_unit`` — given what ``encode_unit`` made of the batch where the writer has
one —, ``finish``, ``fetch``, ``publish``, ``discard``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ..exceptions import StoreError

__all__ = ["Address", "import_engine", "open_connector_reader", "open_connector_writer",
           "parse_address", "restore_connector"]

#: engine -> (module of skalign._connectors, Python module needed, extra)
ENGINES = {
    "pgvector": ("_pgvector", "psycopg", "pgvector"),
    "chroma": ("_chroma", "chromadb", "chroma"),
    "qdrant": ("_qdrant", "qdrant_client", "qdrant"),
    "faiss": ("_faiss", "faiss", "faiss"),
}


@dataclass(frozen=True)
class Address:
    """A parsed connector address.

    ``kind`` is the engine; ``display`` the address with any password masked; ``name`` the
    table or collection (``None`` for FAISS); ``column`` the vector column (PostgreSQL) or the
    named vector (Qdrant); ``path`` the local folder (Chroma, Qdrant) or index file (FAISS);
    ``url`` the server (``http://HOST:PORT``) or the libpq URI without skalign's parameters;
    ``identity`` what two addresses of the same store share.
    """

    kind: str
    text: str
    display: str
    name: str | None = None
    column: str | None = None
    path: Path | None = None
    url: str | None = None

    @property
    def identity(self):
        where = str(self.path.resolve()) if self.path is not None else self.url
        return (self.kind, where, self.name)

    def with_name(self, name):
        """The same database, another table or collection (a shadow, a backup)."""
        return Address(self.kind, self.text, _rename_display(self, name), name, self.column,
                       self.path, self.url)

    def __str__(self):
        return self.display


def _rename_display(address, name):
    if address.kind == "pgvector":
        return _pg_display(address.url, name, address.column)
    if address.kind == "faiss":
        return address.display
    if address.path is not None:
        return f"{address.kind}:{address.path}/{name}"
    return f"{address.kind}+{address.url}/{name}"


def _mask(netloc):
    if "@" not in netloc:
        return netloc
    cred, host = netloc.rsplit("@", 1)
    user = cred.split(":", 1)[0]
    return f"{user}:***@{host}" if ":" in cred else f"{user}@{host}"


def _pg_display(url, table, column):
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "password"]
    query += [("table", table)] + ([("column", column)] if column else [])
    return urlunsplit((parts.scheme, _mask(parts.netloc), parts.path,
                       urlencode(query, safe="/"), ""))


def _parse_pg(text):
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    table = next((v for k, v in query if k == "table"), None)
    column = next((v for k, v in query if k == "column"), None)
    rest = [(k, v) for k, v in query if k not in ("table", "column")]
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest, safe="/"), ""))
    masked = _pg_display(url, table or "", column)
    if not table:
        raise StoreError(f"{masked}: no table; add ?table=TABLE (and &column=COLUMN) to the "
                         "address.")
    if not parts.path.strip("/"):
        raise StoreError(f"{masked}: no database; write postgresql://USER@HOST:PORT/DB?table=…")
    return Address("pgvector", text, masked, table, column, None, url)


def _parse_local_or_http(text, kind):
    rest = text.split(":", 1)[1] if ":" in text else ""
    query = {}
    if "?" in rest:
        rest, q = rest.split("?", 1)
        query = dict(parse_qsl(q, keep_blank_values=True))
    vector = query.pop("vector", None)
    if query:
        raise StoreError(f"{text}: unknown parameter {', '.join(query)}; only ?vector=NAME "
                         f"({kind}) is understood.")
    if vector is not None and kind != "qdrant":
        raise StoreError(f"{text}: ?vector= applies to Qdrant addresses only.")
    if text.startswith(f"{kind}+http"):
        scheme, after = text.split("+", 1)[1].split("://", 1)
        after = after.split("?", 1)[0]
        host, _, name = after.partition("/")
        name = unquote(name.strip("/"))
        if not host or not name or "/" in name:
            raise StoreError(f"{text}: expected {kind}+{scheme}://HOST:PORT/COLLECTION.")
        url = f"{scheme}://{host}"
        return Address(kind, text, f"{kind}+{url}/{quote(name)}"
                       + (f"?vector={vector}" if vector else ""), name, vector, None, url)
    path = Path(rest)
    if not rest or not path.name or rest.endswith("/"):
        raise StoreError(f"{text}: expected {kind}:DIR/COLLECTION (a folder and a collection "
                         "name).")
    return Address(kind, text, text, path.name, vector, path.parent, None)


def parse_address(text):
    """The :class:`Address` of a connector address, or ``None`` for a plain file store."""
    if isinstance(text, Address):
        return text
    if not isinstance(text, str):
        text = str(text) if isinstance(text, Path) else text
        if not isinstance(text, str):
            return None
        if not text.endswith(".faiss"):
            return None
    lower = text.lower()
    if lower.startswith(("postgresql://", "postgres://")):
        return _parse_pg(text)
    for kind in ("chroma", "qdrant"):
        if lower.startswith((f"{kind}:", f"{kind}+http://", f"{kind}+https://")):
            return _parse_local_or_http(text, kind)
    if lower.endswith(".faiss"):
        return Address("faiss", text, text, None, None, Path(text), None)
    if re.match(r"[a-z][a-z0-9+.-]*://", lower):
        scheme = text.split("://", 1)[0]
        raise StoreError(f"{text}: unknown address scheme {scheme!r}; use postgresql://, "
                         "chroma:, chroma+http://, qdrant:, qdrant+http://, PATH.faiss or a file "
                         "path.")
    return None


def import_engine(kind, where):
    """Import an engine's client module; a missing one names the extra to install."""
    _, module, extra = ENGINES[kind]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise StoreError(
            f"{where}: {kind} stores need the {module} package; pip install 'skalign[{extra}]'."
        ) from None


def _module(address):
    import_engine(address.kind, address.display)
    return importlib.import_module(f".{ENGINES[address.kind][0]}", __name__)


def open_connector_reader(address, column=None):
    return _module(address).Reader(address, column)


def open_connector_writer(address, job):
    return _module(address).Writer(address, job)


def restore_connector(address):
    return _module(address).restore(address)
