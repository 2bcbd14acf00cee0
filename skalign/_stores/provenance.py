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

__all__ = ["BACKUP_SUFFIX", "backup_address", "is_backup", "make_stamp", "move_stamp",
           "read_stamp", "sidecar_path", "write_stamp"]

#: the suffix of a backup's name: ``STEM-skalign-backup.EXT`` for files,
#: ``NAME_skalign_backup`` for tables and collections
BACKUP_SUFFIX = "skalign-backup"
_SUFFIXES = {"npy": ".npy", "parquet": ".parquet", "parquet-dir": "", "lance": ".lance",
             "faiss": ".faiss"}


def _stem(path, kind):
    suffix = _SUFFIXES[kind]
    name = path.name
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name


def backup_address(address):
    """Where ``--replace`` keeps the output it replaces at ``address``."""
    if address.kind in FILE_KINDS:
        path = address.path
        return address.with_path(path.with_name(
            f"{_stem(path, address.kind)}-{BACKUP_SUFFIX}{_SUFFIXES[address.kind]}"))
    if address.kind == "pgvector":  # PostgreSQL cuts names at 63 bytes: a hashed name there
        from .pg_indexes import derived_name

        schema, dot, table = address.name.rpartition(".")
        return address.with_name(f"{schema}{dot}{derived_name(table, 'backup')}")
    return address.with_name(f"{address.name}_{BACKUP_SUFFIX.replace('-', '_')}")


def is_backup(address):
    """Whether ``address`` is named as a backup ``--replace`` keeps."""
    if address.kind in FILE_KINDS:
        return _stem(address.path, address.kind).endswith(f"-{BACKUP_SUFFIX}")
    return (address.name or "").endswith(f"_{BACKUP_SUFFIX.replace('-', '_')}")


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
