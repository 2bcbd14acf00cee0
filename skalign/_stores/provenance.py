"""The provenance stamp every output carries, and the names of ``--replace``'s backups.

A stamp is a small JSON object: the model's fingerprint, the source's address (password hidden)
and identity, the row count, the widths, skalign's version and the time. File stores keep it in
a sidecar ``PATH.skalign.json`` beside the output (moved with it to the backup by
``--replace`` and back by ``restore``); databases in their own place, through their backend
module's ``read_stamp``/``write_stamp`` (a PostgreSQL ``COMMENT ON TABLE``, Chroma's collection
metadata, a sidecar in Qdrant's folder). ``skalign info ADDRESS`` prints it; the pipeline reads
it to refuse translating a store twice.
"""

from __future__ import annotations

import json
import os
import time

from .address import FILE_KINDS
from .journal import write_durably
from .registry import backend_module

__all__ = ["make_stamp", "move_stamp", "read_stamp", "sidecar_path", "write_stamp"]

def make_stamp(model_fp, source, n_rows, d_in, d_out):
    """The stamp of an output translated by the model ``model_fp`` from ``source``."""
    from .._version import __version__

    return {"skalign": __version__, "model": model_fp, "source": str(source),
            "source_identity": repr(source.identity), "rows": int(n_rows), "d_in": int(d_in),
            "d_out": int(d_out), "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def sidecar_path(address):
    """A file store's stamp file: ``PATH.skalign.json`` beside it."""
    return address.path.with_name(address.path.name + ".skalign.json")


def read_stamp(address):
    """The stamp of the store at ``address``; ``None`` where it has none (not skalign's output,
    or one written before stamps)."""
    if address.kind in FILE_KINDS:
        try:
            with open(sidecar_path(address), "rb") as f:
                stamp = json.loads(f.read(1 << 16))
        except (OSError, ValueError):
            return None
        return stamp if isinstance(stamp, dict) else None
    return backend_module(address).read_stamp(address)


def write_stamp(address, stamp):
    """Record ``stamp`` as the provenance of the store at ``address``."""
    if address.kind in FILE_KINDS:
        path = sidecar_path(address)
        write_durably(path, json.dumps(stamp, sort_keys=True).encode())
        try:
            os.chmod(path, os.stat(address.path).st_mode & 0o666)
        except OSError:
            pass
        return
    backend_module(address).write_stamp(address, stamp)


def move_stamp(output, backup, *, swap=False):
    """After ``--replace`` (the output moved to ``backup``) or a restore (``swap``: the two
    exchanged), move file stores' sidecars the same way; databases' stamps travel with their
    tables and collections."""
    if output.kind not in FILE_KINDS:
        return
    a, b = sidecar_path(output), sidecar_path(backup)
    if swap:
        tmp = a.with_name(a.name + ".swap")
        if a.exists():
            os.replace(a, tmp)
        if b.exists():
            os.replace(b, a)
        if tmp.exists():
            os.replace(tmp, b)
    elif a.exists():
        os.replace(a, b)
    elif b.exists():
        os.unlink(b)  # the backup had no stamp: an older backup's stamp is not its
