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
    fields_module = "skalign._stores.pgvector.fields"

    def finish_field(self, address, field):
        fields = self._field_functions(address)
        like = (fields.read_field_stamp(address, field) or {}).get("from_field")
        fields.finish_field(address, field, like if isinstance(like, str) else None)
