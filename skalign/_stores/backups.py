"""The names of what skalign keeps beside a store: ``--replace``'s backups
(``STEM-skalign-backup.EXT`` beside a file store, ``NAME_skalign_backup`` for a table or
collection, a hashed name where PostgreSQL's 63 bytes would cut it) and a file store's stamp
(``PATH.skalign.json``)."""

from __future__ import annotations

from .address import FILE_KINDS
from .databases.common import backup_name

__all__ = ["BACKUP_SUFFIX", "backup_address", "is_backup", "sidecar_path"]

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
        from .pgvector.indexes import derived_name

        schema, dot, table = address.name.rpartition(".")
        return address.with_name(f"{schema}{dot}{derived_name(table, 'backup')}")
    return address.with_name(backup_name(address.name))


def is_backup(address):
    """Whether ``address`` is named as a backup ``--replace`` keeps."""
    if address.kind in FILE_KINDS:
        return _stem(address.path, address.kind).endswith(f"-{BACKUP_SUFFIX}")
    return (address.name or "").endswith(backup_name(""))


def sidecar_path(address):
    """A file store's stamp file: ``PATH.skalign.json`` beside it."""
    return address.path.with_name(address.path.name + ".skalign.json")
