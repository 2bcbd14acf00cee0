"""The edge between a backend and its engine's client library: the library's exceptions, raised
anywhere inside the backend's public methods, become one-line
:class:`~skalign.exceptions.StoreError`\\ s naming the address with its password hidden; a lost
connection becomes :class:`~skalign.exceptions.StoreConnectionError`, which keeps the shadow for
a resume."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys

from ...exceptions import StoreConnectionError, StoreError

__all__ = ["EngineEdge", "one_line"]

#: exception class names of the HTTP and gRPC clients that mean the server could not be reached
#: or went away
_CONNECTION_ERRORS = ("ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout",
                      "PoolTimeout", "RemoteProtocolError", "ReadError", "WriteError",
                      "NetworkError")


def one_line(exc, address):
    """An engine's message as one line of at most 200 characters, the password hidden."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if address is not None and address.password:
        msg = msg.replace(address.password, "***")
    return msg[:200]


def _lost_connection(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConnectionError) or type(exc).__name__ in _CONNECTION_ERRORS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class EngineEdge:
    """The exception edge of one engine.

    Parameters
    ----------
    packages : tuple of str
        Top-level packages whose exceptions (or code in whose files an exception was raised)
        are the engine's.
    classify : callable
        ``classify(address, exc, msg)`` → the :class:`StoreError` that says what ``exc`` means.
    engine : str
        The engine's name in messages.
    """

    def __init__(self, packages, classify, engine):
        self.packages, self.classify, self.engine = packages, classify, engine

    def from_engine(self, exc):
        """Whether ``exc`` is the engine's: its class is, or it was raised in its code."""
        if type(exc).__module__.split(".")[0] in self.packages:
            return True
        dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in
                     (sys.modules.get(p) for p in self.packages)
                     if getattr(m, "__file__", None))
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.startswith(dirs):
                return True
            tb = tb.tb_next
        return False

    def store_error(self, address, exc):
        msg = one_line(exc, address)
        if _lost_connection(exc):
            return StoreConnectionError(
                f"{address}: lost the connection to the {self.engine} server ({msg}); check "
                "that it runs, then run the same command again to resume.")
        return self.classify(address, exc, msg)

    @contextlib.contextmanager
    def errors(self, address):
        """Raise the engine's exceptions inside the block as :class:`StoreError` (one line)."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            if not self.from_engine(exc):
                raise
            raise self.store_error(address, exc) from None

    def edge(self, function):
        """``function`` (a method, generator or module function the pipeline calls) with the
        engine's exceptions raised as :class:`StoreError`."""
        if inspect.isgeneratorfunction(function):
            @functools.wraps(function)
            def generator(*args, **kwargs):
                with self.errors(_address_of(args)):
                    yield from function(*args, **kwargs)
            return generator

        @functools.wraps(function)
        def call(*args, **kwargs):
            with self.errors(_address_of(args)):
                return function(*args, **kwargs)
        return call

    def edges(self, cls):
        """:meth:`edge` on every public method of ``cls`` (and ``__init__``)."""
        for name, value in list(vars(cls).items()):
            if inspect.isfunction(value) and (name == "__init__" or not name.startswith("_")):
                setattr(cls, name, self.edge(value))
        return cls


def _address_of(args):
    from ..address import Address

    for a in (getattr(args[0], "address", None) if args else None, *args):
        if isinstance(a, Address):
            return a
    return None
