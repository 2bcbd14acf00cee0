"""PostgreSQL with pgvector: the reader and writer (store), the live store, the publish
recovery, index rebuilding and COPY loading; :class:`PgvectorEngine` is what the shared code
asks of it.
"""

from __future__ import annotations

from ..databases.engine import DatabaseEngine

__all__ = ["PgvectorEngine"]


class PgvectorEngine(DatabaseEngine):
    """PostgreSQL's engine: its backups are named within the 63 bytes PostgreSQL keeps of a name
    (:func:`~skalign._stores.pgvector.indexes.derived_name`: hashed where it would be cut)."""

    def modules(self):
        from . import recovery, store

        return store, recovery

    def restore(self, address):
        self.import_client(address)
        from .recovery import restore

        return restore(address)

    def backup_address(self, address):
        from .indexes import derived_name

        schema, dot, table = address.name.rpartition(".")
        return address.with_name(f"{schema}{dot}{derived_name(table, 'backup')}")

    # a second vector column (--into FIELD): .fields
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

    def finish_field(self, address, field):
        fields = self._fields(address)
        like = (fields.read_field_stamp(address, field) or {}).get("from_field")
        fields.finish_field(address, field, like if isinstance(like, str) else None)

    def drop_field_command(self, address, field):
        return self._fields(address).drop_field_command(address, field)
