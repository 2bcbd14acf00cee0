"""What a worker process keeps between tasks: encoders loaded from a spec, outputs kept open."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

__all__ = ["describe_encoder", "worker_encoder", "worker_output"]

#: per worker process: encoders loaded from a spec, outputs open for one pass
_WORKER = {"encoders": {}, "stores": {}}
_WORKER_LOCK = threading.Lock()


def worker_encoder(encoder, device, batch_size, normalize, cache, precision="full"):
    """The encoder of a spec, loaded once per process (and per cache file); an encoder object
    as it is (in a :class:`~skalign.encoders.CachedEncoder` with ``cache``)."""
    from ..encoders import CachedEncoder, EncodeCache, load_encoder

    if isinstance(encoder, CachedEncoder) and cache is None:
        return encoder
    spec = isinstance(encoder, (str, os.PathLike))
    key = (os.fspath(encoder) if spec else id(encoder), device, batch_size, normalize,
           None if cache is None else str(cache), precision)
    with _WORKER_LOCK:
        found = _WORKER["encoders"].get(key)
        if found is None or (not spec and found[0] is not encoder):
            enc = load_encoder(encoder, device=device, batch_size=batch_size,
                               normalize=normalize, precision=precision)
            if cache is not None:
                enc = CachedEncoder(enc, cache=EncodeCache(None if cache is True else cache))
            found = _WORKER["encoders"][key] = (encoder, enc)
        return found[1]


def describe_encoder(encoder, *, device="auto", batch_size=64, normalize=None, cache=None,
                     precision="full"):
    """What the process that sends the tasks needs of the workers' encoder, loaded here.

    Parameters
    ----------
    encoder, device, batch_size, normalize, cache, precision
        As :func:`skalign.parallel.encode_partition` takes them.

    Returns
    -------
    dict
        ``fingerprint``, ``name``, ``batch_size``, ``normalize`` and ``unit_vectors`` of the
        encoder this worker loaded (and keeps for the tasks to come).
    """
    enc = worker_encoder(encoder, device, batch_size, normalize, cache, precision)
    return {name: getattr(enc, name) for name in
            ("fingerprint", "name", "batch_size", "normalize", "unit_vectors")}


@contextmanager
def worker_output(output, column, text_field, provenance_key, session):
    """The live output store: kept open in this process for the pass ``session`` (the
    stores of other passes closed), or opened for this call only (``session=None``)."""
    from .._stores import open_live

    def open_():
        return open_live(output, column=column, text_field=text_field,
                         provenance_key=provenance_key)

    if session is None:
        with open_() as store:
            yield store
        return
    key = (session, repr(output), column, text_field, provenance_key)
    with _WORKER_LOCK:
        for other in [k for k in _WORKER["stores"] if k[0] != session]:
            _WORKER["stores"].pop(other).close()
        store = _WORKER["stores"].get(key)
        if store is None:
            store = _WORKER["stores"][key] = open_()
    yield store

