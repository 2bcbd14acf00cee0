"""Property-based tests of :mod:`skalign._stores.address` (Hypothesis): every address form
survives a round trip through its own rendering, and the masked rendering (``render()``,
``str``, ``repr``, error messages) never depends on, nor shows, a password."""

import os
from pathlib import Path
from urllib.parse import quote

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from skalign._stores.address import Address, parse_address  # noqa: E402
from skalign.exceptions import AddressError  # noqa: E402

# no example database written into the working tree; the parser is fast, so many examples
# (SKALIGN_ADDRESS_EXAMPLES=3000 for a longer search)
settings.register_profile("skalign-address", database=None, deadline=None,
                          max_examples=int(os.environ.get("SKALIGN_ADDRESS_EXAMPLES", 300)),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("skalign-address")

# -------------------------------------------------------------------------------- strategies
#: what URLs treat specially, mixed into any other text (no surrogates: not encodable)
_SPECIAL = "@:/?#&=%+;[] \\*"
#: a character that only passwords hold: where a rendering shows it (or its percent-encoding),
#: a password leaked; no other part of an address can have put it there
MARK = "\u2603"
_chars = st.one_of(st.sampled_from(_SPECIAL),
                   st.characters(exclude_categories=("Cs",), exclude_characters=MARK))
text = st.text(_chars, max_size=16)
nonempty = st.text(_chars, min_size=1, max_size=16)
#: passwords of any text, marked
secrets = st.builds(lambda a, b: a + MARK + b, text, text)

_label = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,10}[A-Za-z0-9])?", fullmatch=True)
hostnames = st.lists(_label, min_size=1, max_size=3).map(".".join)
hosts = st.one_of(hostnames, st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))
ports = st.one_of(st.none(), st.integers(0, 65535))
#: a Unix socket folder, libpq's percent-encoded host (its case is kept)
sockets = st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\0"),
                           min_size=1, max_size=8), min_size=1, max_size=3).map(
    lambda parts: "/" + "/".join(parts))

_ident = st.text(_chars.filter(lambda c: c != "."), min_size=1, max_size=12)
tables = st.one_of(_ident, st.tuples(_ident, _ident).map(".".join))
#: libpq parameters (values: any text); ``port`` may be a libpq list
params = st.lists(st.tuples(
    st.sampled_from(["sslmode", "application_name", "connect_timeout", "options",
                     "target_session_attrs", "sslrootcert", "port", "user"]), text),
    max_size=3).map(tuple)


def _user(parts):
    """The user parsed: none written, but a password, is an empty user name (``:PW@HOST``)."""
    if parts["user"] is None and parts["password"] is not None:
        return ""
    return parts["user"]


def _host_text(host):
    if host.startswith("/"):
        return quote(host, safe="")
    return f"[{host}]" if ":" in host else host


def _netloc(user, password, host, port):
    cred = ""
    if user is not None or password is not None:
        cred = quote(user or "", safe="")
        if password is not None:
            cred += ":" + quote(password, safe="")
        cred += "@"
    return cred + _host_text(host) + (f":{port}" if port is not None else "")


def _pg_text(user, password, host, port, database, table, column, params, query_password):
    query = list(params)
    if query_password is not None:
        query.append(("password", query_password))
    query.append(("table", table))
    if column is not None:
        query.append(("column", column))
    q = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query)
    return f"postgresql://{_netloc(user, password, host, port)}/{quote(database, safe='')}?{q}"


@st.composite
def pg_parts(draw):
    return dict(user=draw(st.none() | text), password=draw(st.none() | text),
                host=draw(st.one_of(hosts, sockets)), port=draw(ports), database=draw(nonempty),
                table=draw(tables), column=draw(st.none() | nonempty), params=draw(params),
                query_password=draw(st.none() | text))


@st.composite
def http_parts(draw):
    kind = draw(st.sampled_from(["chroma", "qdrant"]))
    return dict(kind=kind, scheme=draw(st.sampled_from(["http", "https"])),
                user=draw(st.none() | text), password=draw(st.none() | text),
                host=draw(hosts), port=draw(ports),
                name=draw(nonempty.filter(lambda s: "/" not in s)),
                vector=draw(st.none() | nonempty) if kind == "qdrant" else None)


def _http_text(kind, scheme, user, password, host, port, name, vector):
    text = f"{kind}+{scheme}://{_netloc(user, password, host, port)}/{quote(name, safe='')}"
    return text + (f"?vector={quote(vector, safe='')}" if vector is not None else "")


# a local folder and collection: raw text (no ``?``, which starts the query; no NUL)
_segment = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/?\0"),
                   min_size=1, max_size=10).filter(lambda s: s not in (".", ".."))


@st.composite
def local_parts(draw):
    kind = draw(st.sampled_from(["chroma", "qdrant"]))
    folder = "/".join(draw(st.lists(_segment, max_size=3)))
    if draw(st.booleans()):
        folder = "/" + folder
    return dict(kind=kind, folder=folder or ".", name=draw(_segment),
                vector=draw(st.none() | nonempty) if kind == "qdrant" else None)


def _local_text(kind, folder, name, vector):
    text = f"{kind}:{folder.rstrip('/')}/{name}"
    return text + (f"?vector={quote(vector, safe='')}" if vector else "")


# ------------------------------------------------------------------------------- checks
def _round_trip(a):
    b = parse_address(a.render(hide_password=False))
    assert b == a
    assert (b.password, b.secret_params) == (a.password, a.secret_params)
    assert b.identity == a.identity
    return b


def _masked(a):
    return a.render(), str(a), repr(a), a.display


def _never_shows(texts):
    """No password (marked with ``MARK``), raw or percent-encoded, in any of ``texts``."""
    for t in texts:
        assert MARK not in t and quote(MARK) not in t and quote(MARK).lower() not in t


# -------------------------------------------------------------------------------- PostgreSQL
@given(pg_parts())
def test_pg_parts_parsed_and_round_trip(parts):
    a = parse_address(_pg_text(**parts))
    expect_host = parts["host"] if parts["host"].startswith("/") else parts["host"].lower()
    assert (a.kind, a.user, a.password, a.host, a.port, a.database, a.name, a.column) == (
        "pgvector", _user(parts), parts["password"], expect_host, parts["port"],
        parts["database"], parts["table"], parts["column"])
    assert a.params == parts["params"]
    assert a.secret_params == ((("password", parts["query_password"]),)
                               if parts["query_password"] is not None else ())
    _round_trip(a)
    # the driver gets every part back, the passwords included
    assert parse_address(a.conninfo + "&table=t" if "?" in a.conninfo
                         else a.conninfo + "?table=t").password == a.password


@given(pg_parts(), secrets, st.one_of(text, secrets))
def test_pg_masked_rendering_ignores_the_password(parts, pw1, pw2):
    assume(pw1 != pw2)
    a = parse_address(_pg_text(**dict(parts, password=pw1, query_password=pw1)))
    b = parse_address(_pg_text(**dict(parts, password=pw2, query_password=pw2)))
    assert _masked(a) == _masked(b)
    assert a == b and a.identity == b.identity
    _never_shows(_masked(a))


@given(pg_parts(), nonempty)
def test_pg_identity_ignores_where_the_password_is(parts, pw):
    parts = dict(parts, user=parts["user"] if parts["user"] is not None else "")
    in_userinfo = parse_address(_pg_text(**dict(parts, password=pw, query_password=None)))
    in_query = parse_address(_pg_text(**dict(parts, password=None, query_password=pw)))
    neither = parse_address(_pg_text(**dict(parts, password=None, query_password=None)))
    assert in_userinfo.identity == in_query.identity == neither.identity
    assert in_userinfo == in_query == neither
    assert in_userinfo.password == pw and dict(in_query.secret_params)["password"] == pw


@given(st.one_of(hosts, sockets), ports)
def test_pg_socket_as_host_or_parameter_is_one_server(host, port):
    assume(host.startswith("/"))
    as_host = parse_address(f"postgresql://{_netloc('u', None, host, port)}/db?table=t")
    as_param = parse_address(
        f"postgresql://u@/db?host={quote(host, safe='')}"
        + (f"&port={port}" if port is not None else "") + "&table=t")
    assert as_host.identity == as_param.identity
    assert as_host.identity[1] == host  # its case kept


@given(pg_parts(), secrets, st.none() | secrets,
       st.sampled_from(["host", "port", "table", "dup", "scheme"]))
def test_pg_error_messages_hide_the_password(parts, pw, query_pw, broken):
    parts = dict(parts, password=pw, query_password=query_pw)
    text = _pg_text(**parts)
    netloc = _netloc(parts["user"], pw, parts["host"], parts["port"])
    if broken == "port":
        text = text.replace(netloc, _netloc(parts["user"], pw, "h", None) + ":x1", 1)
    elif broken == "table":
        text = text.replace("table=", "table=a.b.", 1)
    elif broken == "dup":
        text += "&table=again"
    elif broken == "scheme":
        text = "mysql" + text[len("postgresql"):]
    else:
        text = text.replace("table=", "tablex=", 1)
    with pytest.raises(AddressError) as err:
        parse_address(text)
    msg = str(err.value)
    assert "\n" not in msg
    _never_shows([msg])


@given(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/?#"),
               max_size=12).map(lambda t: t[: len(t) // 2] + MARK + t[len(t) // 2:]))
def test_raw_password_in_a_malformed_address_is_masked(pw):
    """A password typed unencoded (``@``, ``:``, ``[`` included) never reaches a message, and
    the message is the same for every password (but those with a stray bracket, an error of
    their own)."""
    def message(password):
        with pytest.raises(AddressError) as err:
            parse_address(template.format(password))
        return str(err.value)

    for template in ("postgresql://me:{}@db.example:x1/app?table=t",
                     "postgresql://me:{}@db.example/app?column=c",
                     "qdrant+https://me:{}@q.example:x1/docs",
                     "chroma+http://me:{}@q.example/docs?password=x",
                     "mysql://me:{}@db.example/app"):
        for tail in ("", "["):
            msg = message(pw + tail)
            assert "\n" not in msg
            _never_shows([msg])
            if "[" not in pw and "]" not in pw:
                assert msg == message("another-one" + tail)


# ----------------------------------------------------------------------- Chroma and Qdrant
@given(http_parts())
def test_http_parts_parsed_and_round_trip(parts):
    a = parse_address(_http_text(**parts))
    assert (a.kind, a.scheme, a.user, a.password, a.host, a.port, a.name, a.column) == (
        parts["kind"], parts["scheme"], _user(parts), parts["password"], parts["host"].lower(),
        parts["port"], parts["name"], parts["vector"])
    _round_trip(a)
    assert a.url is not None and "@" not in a.url  # the server, no credentials


@given(http_parts(), secrets, st.one_of(text, secrets))
def test_http_masked_rendering_ignores_the_password(parts, pw1, pw2):
    assume(pw1 != pw2)
    a = parse_address(_http_text(**dict(parts, password=pw1)))
    b = parse_address(_http_text(**dict(parts, password=pw2)))
    assert _masked(a) == _masked(b)
    assert a == b and a.identity == b.identity
    _never_shows(_masked(a))


@given(local_parts())
def test_local_parts_parsed_and_round_trip(parts):
    a = parse_address(_local_text(**parts))
    assert (a.kind, a.path, a.name, a.column) == (
        parts["kind"], Path(parts["folder"]), parts["name"], parts["vector"])
    _round_trip(a)
    assert a.identity[1] == str(Path(parts["folder"]).resolve())


# ------------------------------------------------------------------------------ file paths
@given(st.lists(_segment, min_size=1, max_size=3),
       st.sampled_from([".npy", ".parquet", ".lance", ".faiss"]))
def test_file_paths_round_trip(segments, suffix):
    path = "/".join(segments) + suffix
    assume(not path.lower().startswith(("chroma:", "qdrant:")) and "://" not in path)
    a = parse_address(path, output=True)
    assert isinstance(a, Address) and a.path == Path(path)
    _round_trip(a)


def test_identity_of_a_file_through_relative_absolute_and_linked_paths(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    ids = {parse_address(p, output=True).identity
           for p in ("real/x.npy", str(real / "x.npy"), "link/x.npy", "./real/../real/x.npy")}
    assert len(ids) == 1
    local = {parse_address(f"qdrant:{p}/docs").identity for p in ("real", real, "link")}
    assert len(local) == 1


def test_examples_of_the_fixes():
    # ?vector= of a local Qdrant folder is encoded when rendered
    a = parse_address("qdrant:q/docs?vector=a%26b%2Bc")
    assert a.column == "a&b+c" and parse_address(str(a)) == a
    # '+' is a plus sign in a libpq URI, as libpq reads it
    pg = parse_address("postgresql://u@h/db?table=t&password=a+b&application_name=x+y")
    assert dict(pg.secret_params)["password"] == "a+b" and pg.params == (
        ("application_name", "x+y"),)
    # a percent-encoded socket folder keeps its case and is the ?host= server
    s = parse_address("postgresql://u@%2FRun%2FPg:5433/db?table=t")
    assert s.host == "/Run/Pg" and s.identity == parse_address(
        "postgresql://u@/db?host=/Run/Pg&port=5433&table=t").identity
    # a libpq list of ports does not break the identity
    assert parse_address("postgresql://u@h/db?table=t&port=5432,5433").identity[2] == \
        "5432,5433"
    # no table: the message does not invent one
    with pytest.raises(AddressError) as err:
        parse_address("postgresql://u:hunter22@h/db?column=c")
    assert "table=None" not in str(err.value) and "hunter22" not in str(err.value)
    # a raw '[' in a password: urlsplit's ValueError (which quotes it) as a masked AddressError
    with pytest.raises(AddressError) as err:
        parse_address("postgresql://u:[hunter22]@h/db?table=t")
    assert "hunter22" not in str(err.value)
    # a raw '@' in a password: masked to the authority's last '@'
    with pytest.raises(AddressError) as err:
        parse_address("postgresql://u:hun@ter22@h:xx/db?table=t")
    assert "ter22" not in str(err.value)
