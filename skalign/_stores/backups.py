"""The names of what skalign keeps beside a store: ``--replace``'s backups
(``STEM-skalign-backup.EXT`` beside a file store, ``NAME_skalign_backup`` for a table or
collection, a hashed name where PostgreSQL's 63 bytes would cut it: each engine's rule,
:meth:`~skalign._stores.engine.Engine.backup_address`) and a file store's stamp
(``PATH.skalign.json``)."""

from __future__ import annotations

from .files.shadow import BACKUP_SUFFIX, sidecar_path
from .registry import engine

__all__ = ["BACKUP_SUFFIX", "backup_address", "is_backup", "sidecar_path"]


def backup_address(address):
    """Where ``--replace`` keeps the output it replaces at ``address``."""
    return engine(address).backup_address(address)


def is_backup(address):
    """Whether ``address`` is named as a backup ``--replace`` keeps."""
    return engine(address).is_backup(address)
