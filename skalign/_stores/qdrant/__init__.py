"""Qdrant: the reader and writer (store), the live store, names and their checks, the publish
recovery, bulk loading, and a second named vector (``--into FIELD``, :mod:`.fields`);
:class:`QdrantEngine` is what the shared code asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["QdrantEngine"]


class QdrantEngine(DatabaseEngine):
    """Qdrant's engine. Its local mode passes every row through Python as lists of floats (an
    upsert copies the lists twice): its default batch is smaller than other databases'."""

    most_batch_rows = 1024

    def modules(self):
        from . import recovery, store

        return store, recovery

    # a second named vector (--into FIELD): .fields
    def _fields(self, address):
        self.import_client(address)
        from . import fields

        return fields

    def vector_fields(self, address):
        return self._fields(address).vector_fields(address)

    def field_state(self, address, field):
        return self._fields(address).field_state(address, field)

    def add_field(self, address, field, dim, like):
        self._fields(address).add_field(address, field, dim, like)

    def read_field_stamp(self, address, field):
        return self._fields(address).read_field_stamp(address, field)

    def write_field_stamp(self, address, field, stamp):
        self._fields(address).write_field_stamp(address, field, stamp)

    def drop_field_command(self, address, field):
        return self._fields(address).drop_field_command(address, field)
