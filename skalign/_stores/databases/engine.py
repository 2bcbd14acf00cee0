"""What the database engines share (PostgreSQL, Chroma, Qdrant): rows changed in place, the
backup ``NAME_skalign_backup`` beside the table or collection, the stamp kept by the database
itself, and a publish that a killed run left finished from what the database records. Each
engine names its store module (``restore``, ``read_stamp``, ``write_stamp``) and its
``recovery.recover_publish``; both are imported, client library first, only when asked."""

from __future__ import annotations

from ..engine import Engine
from .common import backup_name

__all__ = ["DatabaseEngine"]


class DatabaseEngine(Engine):
    """A database's engine.

    Attributes
    ----------
    most_batch_rows : int
        The default batch of a translation into it is at most this many rows: the server's
        write of one batch overlaps the translation of the next, and smaller batches overlap
        more of the two (measured: 40,000 rows into pgvector took 1.4x its bulk load with
        8,192-row batches, 2x with the memory budget's 29,000). Every run, a rerun after a
        crash too, reads, translates and loads its first batch with nothing to overlap:
        200,000 rows into pgvector committed their first batch 0.40 s in with 2,048 rows
        against 1.18 s with 8,192, in the same time overall.
    """

    most_batch_rows = 2048

    def modules(self):
        """``(store, recovery)``: the engine's store module and its recovery module."""
        raise NotImplementedError

    def _store(self, address):
        self.import_client(address)
        return self.modules()[0]

    def batch_rows(self, batch_size, d_out):
        return min(batch_size, self.most_batch_rows)

    def backup_address(self, address):
        return address.with_name(backup_name(address.name))

    def is_backup(self, address):
        return (address.name or "").endswith(backup_name(""))

    def restore(self, address):
        return self._store(address).restore(address)

    def read_stamp(self, address):
        return self._store(address).read_stamp(address)

    def write_stamp(self, address, stamp):
        self._store(address).write_stamp(address, stamp)

    def recover_publish(self, address, match):
        self.import_client(address)
        return self.modules()[1].recover_publish(address, match)
