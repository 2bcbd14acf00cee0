"""Store addresses, parsed once: an immutable :class:`Address` that renders itself with any
password hidden and names its store by an identity without credentials.

Forms (``skalign translate --help`` lists them for users):

* a file path: ``*.npy``, ``*.parquet`` (a file), a folder of ``*.parquet`` shards (an output
  path without a suffix is written as one), ``DIR/TABLE.lance`` (a LanceDB table),
  ``PATH.faiss`` (a FAISS index);
* ``postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=TABLE&column=COLUMN`` (``postgres://`` too;
  a libpq URI: ``?host=/socket/dir`` for a Unix socket, ``?password=``, ``sslmode`` and the
  other libpq parameters pass through; ``TABLE`` may be ``SCHEMA.TABLE``);
* ``chroma:DIR/COLLECTION`` and ``chroma+http[s]://HOST:PORT/COLLECTION``;
* ``qdrant:DIR/COLLECTION`` and ``qdrant+http[s]://HOST:PORT/COLLECTION``, ``?vector=NAME``
  for a named vector; ``milvus:PATH.db/COLLECTION`` (Milvus Lite) and
  ``milvus://HOST:PORT/COLLECTION`` (``milvus+http[s]://`` too), ``?vector=FIELD``.
* ``sqlite:PATH?table=TABLE&column=COLUMN``: a sqlite-vec ``vec0`` table of the SQLite
  database file ``PATH``.
* ``duckdb:PATH?table=TABLE&column=COLUMN``: a table of the DuckDB database file ``PATH``
  (a ``FLOAT[n]`` column, HNSW indexes of the vss extension).

:func:`parse_address` is the one parser; everything below the command line and
:mod:`skalign.io` holds the :class:`Address` it returns, never the text. As with SQLAlchemy's
``URL``, ``str()`` and ``repr()`` hide the password (:meth:`Address.render`), and
:attr:`Address.identity` (engine, host, port, database, table or collection, real path) is
what locks and same-store checks compare.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ..exceptions import AddressError, StoreNotFoundError

__all__ = ["Address", "FILE_KINDS", "parse_address"]

# ------------------------------------------------------------------------ the scheme table
#: a file path's suffix -> the kind it names
PATH_KINDS = {".npy": "npy", ".parquet": "parquet", ".lance": "lance", ".faiss": "faiss"}
#: the kind of a folder (or of an output path without a suffix): Parquet shards
FOLDER_KIND = "parquet-dir"
#: the kind of a libpq URI (``postgresql://``, ``postgres://``)
LIBPQ_KIND = "pgvector"
#: the kinds addressed ``KIND:DIR/COLLECTION`` and ``KIND+http[s]://HOST:PORT/COLLECTION``
COLLECTION_KINDS = ("chroma", "qdrant", "milvus")
#: the collection kinds whose addresses may name a vector, ``?vector=NAME``
NAMED_VECTOR_KINDS = ("qdrant", "milvus")
#: ``SCHEME://`` -> the collection kind it is the server form of (``KIND+http://``)
SERVER_SCHEMES = {"milvus": "milvus"}
#: scheme -> the kind of a table in a database file, ``SCHEME:PATH?table=TABLE&column=COLUMN``
FILE_TABLE_KINDS = {"sqlite": "sqlite-vec", "duckdb": "duckdb"}
#: the kinds whose stores are files or folders on this machine
FILE_KINDS = (*PATH_KINDS.values(), FOLDER_KIND)
#: libpq parameters that hold secrets: never rendered
_SECRET_PARAMS = ("password", "sslpassword")
_MASK = "***"
_DEFAULT_PG_PORT = 5432


@dataclass(frozen=True, repr=False)
class Address:
    """A parsed store address (immutable; :func:`parse_address` makes it).

    Attributes
    ----------
    kind : str
        ``"npy"``, ``"parquet"``, ``"parquet-dir"``, ``"lance"``, ``"faiss"``, ``"pgvector"``,
        ``"chroma"`` or ``"qdrant"``.
    path : pathlib.Path or None
        The file or folder (file stores), the database's folder (Chroma's and Qdrant's local
        modes); ``None`` for a server.
    name : str or None
        The table (``SCHEMA.TABLE`` as given) or collection.
    column : str or None
        The vector column (PostgreSQL) or named vector (Qdrant).
    scheme, user, host, port, database : str, str, str, int, str or None
        A server's parts (``scheme``: ``postgresql``, ``http`` or ``https``).
    params : tuple of (str, str)
        libpq parameters other than the password (PostgreSQL).
    """

    kind: str
    path: Path | None = None
    name: str | None = None
    column: str | None = None
    scheme: str | None = None
    user: str | None = None
    password: str | None = field(default=None, compare=False)
    host: str | None = None
    port: int | None = None
    database: str | None = None
    params: tuple = ()
    secret_params: tuple = field(default=(), compare=False)

    # -------------------------------------------------------------------------- rendering
    def render(self, hide_password=True):
        """The address as text; the password (and ``?password=``) as ``***`` by default."""
        if self.kind in FILE_KINDS:
            return str(self.path)
        if self.kind in FILE_TABLE_KINDS.values():
            return _render_file_table(self)
        if self.path is not None:  # a local Chroma or Qdrant folder
            text = f"{self.kind}:{self.path / self.name}"  # the root: "/NAME", not "//NAME"
            return text + (f"?vector={quote(self.column, safe='')}" if self.column else "")
        netloc = self._netloc(hide_password)
        if self.libpq:
            secrets = [(k, _MASK if hide_password else v) for k, v in self.secret_params]
            query = list(self.params) + secrets \
                + ([("table", self.name)] if self.name is not None else []) \
                + ([("column", self.column)] if self.column else [])
            return (f"postgresql://{netloc}/{quote(self.database or '', safe='')}?"
                    + urlencode(query, safe="/*", quote_via=quote))
        text = f"{self.kind}+{self.scheme}://{netloc}/{quote(self.name or '', safe='')}"
        return text + (f"?vector={quote(self.column, safe='')}" if self.column else "")

    def _netloc(self, hide_password):
        host = self.host or ""
        if host.startswith("/"):  # a Unix socket folder (libpq): percent-encoded
            host = quote(host, safe="")
        elif ":" in host:  # IPv6
            host = f"[{host}]"
        if self.port is not None:
            host = f"{host}:{self.port}"
        if self.user is None and self.password is None:
            return host
        cred = quote(self.user or "", safe="")
        if self.password is not None:
            cred += ":" + (_MASK if hide_password else quote(self.password, safe=""))
        return f"{cred}@{host}"

    def __str__(self):
        return self.render()

    def __repr__(self):
        return f"Address({self.render()!r})"

    @property
    def display(self):
        """The address as messages show it (:meth:`render` with the password hidden)."""
        return self.render()

    @property
    def libpq(self):
        """Whether the address is a libpq URI (``postgresql://``)."""
        return self.kind == LIBPQ_KIND

    # -------------------------------------------------------------------------- identity
    @property
    def identity(self):
        """What two addresses of the same store share, without credentials: the kind, the
        real path (files, local folders) or the server (host, port, database), and the table
        or collection. PostgreSQL's unqualified table names are resolved against the server's
        ``search_path`` where it is known (:meth:`resolved`)."""
        if self.path is not None:
            where = os.path.realpath(self.path)
            return (self.kind, where, self.name if self.kind not in FILE_KINDS else None)
        host, port = self.host, self.port
        if self.libpq:
            host = dict(self.params).get("host", host) or "localhost"
            port = _DEFAULT_PG_PORT if port is None else port
            port = str(dict(self.params).get("port", port))
            port = int(port) if re.fullmatch("[0-9]+", port) else port  # or a list: "5432,5433"
        host = host or ""
        return (self.kind, host if host.startswith("/") else host.lower(), port, self.database,
                self.name)

    @property
    def conninfo(self):
        """The libpq URI to connect with (the password included): passed to the driver only,
        never shown."""
        query = list(self.params) + list(self.secret_params)
        return (f"postgresql://{self._netloc(False)}/{quote(self.database or '', safe='')}"
                + (f"?{urlencode(query, safe='/', quote_via=quote)}" if query else ""))

    @property
    def url(self):
        """The server of a Chroma or Qdrant address, ``http[s]://HOST:PORT`` (no credentials);
        for PostgreSQL, :attr:`conninfo`."""
        if self.libpq:
            return self.conninfo
        if self.path is not None or self.scheme is None:
            return None
        host = f"[{self.host}]" if ":" in (self.host or "") else (self.host or "")
        return f"{self.scheme}://{host}" + (f":{self.port}" if self.port is not None else "")

    def with_name(self, name):
        """The same database, another table or collection (a shadow, a backup)."""
        return replace(self, name=name)

    def with_path(self, path):
        """The same kind of file store at another path (a backup, a shadow)."""
        return replace(self, path=Path(path))


# ------------------------------------------------------------------------------------ parsing
def parse_address(text, *, output=False):
    """Parse a store address; an :class:`Address` is returned unchanged.

    Parameters
    ----------
    text : str, path-like or Address
    output : bool, default=False
        Whether the store is to be written: a path without a suffix is then a new folder of
        Parquet shards; an input must exist.

    Returns
    -------
    Address

    Raises
    ------
    AddressError
        A malformed address or an unsupported format (one line, password masked).
    StoreNotFoundError
        An input file path that does not exist.
    """
    if isinstance(text, Address):
        return text
    if isinstance(text, os.PathLike):
        return _parse_path(Path(text), output)
    if not isinstance(text, str):
        raise AddressError(f"{type(text).__name__}: not a store address; give a path or an "
                           "address such as postgresql://…, chroma:DIR/COLLECTION.")
    return _parse_text(text, output)


def _parse_text(text, output):
    """Every text address passes here once (tests count the calls)."""
    lower = text.lower()
    if lower.startswith(("postgresql://", "postgres://")):
        return _parse_pg(text)
    for scheme, kind in SERVER_SCHEMES.items():
        if lower.startswith(f"{scheme}://"):
            return _parse_http(f"{kind}+http://{text[len(scheme) + 3:]}", kind)
    for kind in COLLECTION_KINDS:
        if lower.startswith((f"{kind}+http://", f"{kind}+https://")):
            return _parse_http(text, kind)
        if lower.startswith(f"{kind}:"):
            return _parse_local(text, kind)
    for scheme, kind in FILE_TABLE_KINDS.items():
        if lower.startswith(f"{scheme}:"):
            return _parse_file_table(text, scheme, kind)
    if re.match(r"[a-z][a-z0-9+.-]*://", lower):
        scheme = text.split("://", 1)[0]
        raise AddressError(f"{_masked_text(text)}: unknown address scheme {scheme!r}; use "
                           "postgresql://, chroma:, chroma+http://, qdrant:, qdrant+http://, "
                           "sqlite:, PATH.faiss or a file path.")
    return _parse_path(Path(text), output)


def _masked_text(text):
    """Unparseable text as a message may show it: anything like a password hidden."""
    text = re.sub(r"(//[^/?#:]*:)[^/?#]*@", r"\1***@", text)  # to the authority's last @
    return re.sub(r"((?:ssl)?password=)[^&]*", r"\1***", text, flags=re.I)


def _parse_path(path, output):
    suffix = path.suffix
    kind = PATH_KINDS.get(suffix)
    if suffix == ".parquet" and path.is_dir():
        kind = None  # a folder of shards named *.parquet
    if kind is None and (path.is_dir() or (output and suffix in ("", ".parquet"))):
        kind = FOLDER_KIND
    if kind is None:
        if not output and not path.exists():
            raise StoreNotFoundError(f"{path}: no such file or folder; check the path.")
        raise AddressError(
            f"{path}: unsupported format; use .npy, .parquet (a file or a folder of shards), a "
            "LanceDB table DIR/TABLE.lance, PATH.faiss, or a postgresql://, chroma:, qdrant: "
            "address (see skalign translate --help).")
    return Address(kind, path=path)


def _urlsplit(url, text):
    """``urlsplit``, its ``ValueError`` (a stray ``[`` or ``]``, as in an unencoded password)
    as an :class:`AddressError` that hides the password."""
    try:
        return urlsplit(url)
    except ValueError:  # its message may quote the password
        raise AddressError(f"{_masked_text(text)}: a [ or ] outside a host's IPv6 address; "
                           "percent-encode the special characters of the user name and password "
                           "(@ as %40, [ as %5B …).") from None


def _server_parts(parts, text, what):
    try:
        port = parts.port
    except ValueError:
        raise AddressError(f"{_masked_text(text)}: the port is not a number; write "
                           f"{what}.") from None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    host = parts.hostname
    raw = parts.netloc.rpartition("@")[2]
    if unquote(raw).startswith("/"):
        # libpq's Unix socket folder, percent-encoded (postgresql://%2Frun%2Fpg/db): decoded,
        # in its own case (urlsplit lowercases a host name)
        host = unquote(raw.rpartition(":")[0] if ":" in raw else raw)
    return user, password, host, port


def _parse_qsl(query):
    """A query's pairs, percent-decoded; ``+`` stays a plus sign (as libpq reads it), not the
    space of HTML forms."""
    return parse_qsl(query.replace("+", "%2B"), keep_blank_values=True)


def _parse_pg(text):
    parts = _urlsplit(text, text)
    what = "postgresql://USER@HOST:PORT/DB?table=TABLE"
    user, password, host, port = _server_parts(parts, text, what)
    query = _parse_qsl(parts.query)
    table = [v for k, v in query if k == "table"]
    column = [v for k, v in query if k == "column"]
    if len(table) > 1 or len(column) > 1:
        raise AddressError(f"{_masked_text(text)}: table= or column= given twice; give each "
                           "once.")
    params = tuple((k, v) for k, v in query if k not in ("table", "column")
                   and k not in _SECRET_PARAMS)
    secret = tuple((k, v) for k, v in query if k in _SECRET_PARAMS)
    address = Address(LIBPQ_KIND, name=table[0] if table else None,
                      column=column[0] if column else None, scheme="postgresql", user=user,
                      password=password, host=host, port=port,
                      database=unquote(parts.path.lstrip("/")), params=params,
                      secret_params=secret)
    if not table or not table[0]:
        raise AddressError(f"{address}: no table; add ?table=TABLE (and &column=COLUMN) to the "
                           "address.")
    if not address.database:
        raise AddressError(f"{address}: no database; write {what}…")
    if table[0].count(".") > 1 or table[0].startswith(".") or table[0].endswith("."):
        raise AddressError(f"{address}: table {table[0]!r} is not TABLE or SCHEMA.TABLE; name "
                           "a table of one schema.")
    if column and not column[0]:
        raise AddressError(f"{address}: empty column=; name the vector column or leave it out.")
    return address


def _query(text, kind):
    rest, _, q = text.partition("?")
    query = dict(_parse_qsl(q))
    vector = query.pop("vector", None)
    if query:
        raise AddressError(f"{_masked_text(text)}: unknown parameter {', '.join(query)}; only "
                           f"?vector=NAME (qdrant) is understood.")
    if vector is not None and kind not in NAMED_VECTOR_KINDS:
        raise AddressError(f"{_masked_text(text)}: ?vector= applies to Qdrant addresses only.")
    if vector == "":
        raise AddressError(f"{_masked_text(text)}: empty ?vector=; name the vector or leave it "
                           "out.")
    return rest, vector


def _parse_http(text, kind):
    rest, vector = _query(text, kind)
    parts = _urlsplit(rest.split("+", 1)[1], text)
    what = f"{kind}+{parts.scheme}://HOST:PORT/COLLECTION"
    user, password, host, port = _server_parts(parts, text, what)
    name = unquote(parts.path.strip("/"))
    if not host or not name or "/" in name:
        raise AddressError(f"{_masked_text(text)}: expected {what}.")
    return Address(kind, name=name, column=vector, scheme=parts.scheme.lower(), user=user,
                   password=password, host=host, port=port)


def _parse_local(text, kind):
    rest, vector = _query(text.split(":", 1)[1], kind)
    path = Path(rest)
    if not rest or not path.name or rest.endswith("/") or path.name in (".", ".."):
        raise AddressError(f"{text}: expected {kind}:DIR/COLLECTION (a folder and a collection "
                           "name).")
    return Address(kind, path=path.parent, name=path.name, column=vector)


# ------------------------------------------------------------------ a table in a database file
def _render_file_table(address):
    scheme = next(k for k, v in FILE_TABLE_KINDS.items() if v == address.kind)
    query = [("table", address.name)] + ([("column", address.column)] if address.column else [])
    return f"{scheme}:{address.path}?" + urlencode(query, quote_via=quote)


def _parse_file_table(text, scheme, kind):
    """``SCHEME:PATH?table=TABLE&column=COLUMN``: a table of the database file ``PATH``."""
    rest, _, q = text[len(scheme) + 1:].partition("?")
    form = f"{scheme}:PATH?table=TABLE&column=COLUMN"
    query = _parse_qsl(q)
    unknown = sorted({k for k, _ in query} - {"table", "column"})
    if unknown:
        raise AddressError(f"{_masked_text(text)}: unknown parameter {', '.join(unknown)}; "
                           f"write {form}.")
    table = [v for k, v in query if k == "table"]
    column = [v for k, v in query if k == "column"]
    if len(table) > 1 or len(column) > 1:
        raise AddressError(f"{_masked_text(text)}: table= or column= given twice; give each "
                           "once.")
    if rest.startswith("//"):
        raise AddressError(f"{_masked_text(text)}: write {form} with the file's path after "
                           f"{scheme}: ({scheme}:/abs/docs.db or {scheme}:docs.db).")
    if not rest or Path(rest).name in ("", ".", ".."):
        raise AddressError(f"{_masked_text(text)}: no database file; write {form}.")
    if not table or not table[0]:
        raise AddressError(f"{_masked_text(text)}: no table; add ?table=TABLE to the address "
                           f"({form}).")
    if column and not column[0]:
        raise AddressError(f"{_masked_text(text)}: empty column=; name the vector column or "
                           "leave it out.")
    for value in (*table, *column):
        if "\x00" in value:
            raise AddressError(f"{_masked_text(text)}: a NUL character in a name; SQLite names "
                               "cannot hold one.")
    return Address(kind, path=Path(rest), name=table[0], column=column[0] if column else None)
