"""What the shared code asks of a store's engine: one :class:`Engine` per entry of the registry
(:mod:`skalign._stores.registry`), defined by the engine's own module or folder, so that no code
outside an engine tests a kind by its name.

The registry makes each engine once (``Engine(kind, needs, extra)``) and hands it out by kind
(:func:`skalign._stores.registry.engine`); file stores share :class:`~skalign._stores.files.engine.
FileEngine`, databases :class:`~skalign._stores.databases.engine.DatabaseEngine`. Nothing here
imports a client library until a method needs it (:meth:`Engine.import_client`): the facts of an
engine (its backups' names, whether it writes in place) hold without it.
"""

from __future__ import annotations

import importlib

from ..exceptions import MissingDependencyError

__all__ = ["MAX_STAMP_DEPTH", "Engine"]

#: how deep a provenance stamp may nest (:func:`skalign._stores.provenance.check_stamp`)
MAX_STAMP_DEPTH = 8


class Engine:
    """An engine: the facts and rules the pipeline, the provenance, the backups and the commands
    ask of a kind of store.

    Parameters
    ----------
    kind : str
        The registry's name of the engine.
    needs : str or None
        The client library it imports (``None``: numpy only).
    extra : str or None
        The extra of ``pip install 'skalign[EXTRA]'`` that installs it.

    Attributes
    ----------
    files : bool
        Its stores are files or folders on this machine (the stamp in a sidecar beside them, the
        shadow and journal hidden beside them).
    writes_in_place : bool
        Rows are changed where they are (a database's ``UPDATE``/upsert); ``False``: a change is
        a new file written and published in place of the old one.
    interchangeable : bool
        It translates into every other interchangeable kind (the plain file stores); the other
        kinds translate into their own kind only.
    ids_in_column : bool
        Its rows' ids are a column that ``--id-column`` names (Arrow tables).
    texts_in_lines : bool
        Its rows' texts are a text file beside the store, row ``i`` on line ``i``.
    dask_reads, dask_writes : bool
        ``dask.dataframe.read_parquet`` reads its stores / ``to_parquet`` writes them (the
        translation on a cluster, :mod:`skalign.parallel`).
    """

    files = False
    writes_in_place = True
    interchangeable = False
    ids_in_column = False
    texts_in_lines = False
    dask_reads = False
    dask_writes = False

    def __init__(self, kind, needs=None, extra=None):
        self.kind, self.needs, self.extra = kind, needs, extra

    def __repr__(self):
        return f"{type(self).__name__}({self.kind!r})"

    def import_client(self, where):
        """The engine's client library, imported; a missing one names the extra to install."""
        if self.needs is None:
            return None
        try:
            return importlib.import_module(self.needs)
        except ImportError:
            raise MissingDependencyError(
                f"{where}: {self.kind} stores need the {self.needs} package; "
                f"pip install 'skalign[{self.extra}]'.") from None

    # ------------------------------------------------------------------------ the translation
    def batch_rows(self, batch_size, d_out):
        """The default batch of a translation into this engine, from the memory budget's
        ``batch_size`` rows of ``d_out``-wide output."""
        return batch_size

    def check_output(self, address):
        """Refuse, before any work, an output address that cannot be written."""

    def short_name(self, address):
        """The store as a progress bar names it."""
        return str(address)

    # ------------------------------------------------------------------------ backups
    def backup_address(self, address):
        """Where ``--replace`` keeps the output it replaces at ``address``."""
        raise NotImplementedError

    def is_backup(self, address):
        """Whether ``address`` is named as a backup ``--replace`` keeps."""
        raise NotImplementedError

    def restore(self, address):
        """Swap the store at ``address`` and its backup (``skalign restore``); return the
        backup's address (or path)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------ provenance
    def read_stamp(self, address):
        """The stamp recorded for the store at ``address`` as parsed, unchecked (``None``:
        none)."""
        raise NotImplementedError

    def write_stamp(self, address, stamp):
        """Record ``stamp`` as the provenance of the store at ``address``."""
        raise NotImplementedError

    def move_stamp(self, output, backup, swap=False):
        """After ``--replace`` (the output moved to ``backup``) or a restore (``swap``), move
        the stamps where they do not travel with the stores themselves."""

    def stamp_place(self, address):
        """Where the stamp of ``address`` is, as a malformed stamp's message names it."""
        return str(address)

    def recover_publish(self, address, match):
        """A context manager: finish a publish of ``address`` that a killed run left (see
        :func:`skalign._stores.files.shadow.recover_publish`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------ a second field
    #: why ``--into FIELD`` cannot be done on this kind's stores (``None``: it can, where
    #: :meth:`add_field` is implemented); said as the refusal's reason
    into_refusal = None
    #: the module (dotted name) whose functions ``vector_fields``, ``field_state``,
    #: ``add_field``, ``read_field_stamp``, ``write_field_stamp`` and ``drop_field_command``
    #: (each taking the address first) implement the field methods below; ``None``: the
    #: engine overrides them, or has none
    fields_module = None

    def check_into(self, address):
        """Refuse (:class:`~skalign.exceptions.StoreError`) ``--into`` on a kind whose stores
        hold one vector field only, or whose engine does not implement it."""
        from ..exceptions import StoreError

        if self.into_refusal is not None:
            raise StoreError(f"{address}: --into FIELD is not possible: {self.into_refusal}")
        if self.fields_module is None and type(self).add_field is Engine.add_field:
            raise StoreError(f"{address}: --into FIELD is not supported for {self.kind} "
                             "stores; translate or migrate into a second store instead.")

    def _field_functions(self, address):
        """The module :attr:`fields_module`, imported (its client first)."""
        if self.fields_module is None:
            raise NotImplementedError
        self.import_client(address)
        return importlib.import_module(self.fields_module)

    def vector_fields(self, address):
        """Every vector field of the store: ``{name: width}`` in the store's order (a store of
        one unnamed array: ``{None: width}``)."""
        return self._field_functions(address).vector_fields(address)

    def field_state(self, address, field):
        """The width of the vector field ``field`` where skalign added it (:meth:`add_field`),
        ``None`` where the store has no field, column or key of that name; a name the store
        holds otherwise (the user's own column, another type) raises
        :class:`~skalign.exceptions.StoreError` naming it."""
        return self._field_functions(address).field_state(address, field)

    def add_field(self, address, field, dim, like):
        """Add the empty vector field ``field`` of width ``dim`` to the store, beside its
        vector field ``like`` (never touched): every row without a value there (SQL ``NULL``,
        absent), an index of ``like``'s kind, metric and parameters where ``like`` has one, and
        the engine's mark that skalign added it (what :meth:`field_state` reads). Called only
        where :meth:`field_state` said ``None``; atomic (a kill leaves the field or nothing)."""
        self._field_functions(address).add_field(address, field, dim, like)

    def open_field(self, address, field, *, text_field=None, **options):
        """The field ``field`` as a :class:`~skalign._stores.live.LiveStore` where the engine
        opens it its own way; ``None`` (the default): the store's live store on the column
        ``field`` with the provenance key of the field (:func:`skalign._stores.fields.
        open_field`, which every caller goes through)."""
        return None

    def read_field_stamp(self, address, field):
        """The provenance stamp of the field ``field`` as parsed, unchecked (``None``: none)."""
        return self._field_functions(address).read_field_stamp(address, field)

    def write_field_stamp(self, address, field, stamp):
        """Record ``stamp`` as the provenance of the field ``field``."""
        self._field_functions(address).write_field_stamp(address, field, stamp)

    def finish_field(self, address, field):
        """After a step wrote rows of ``field`` through :meth:`open_field` (closed since),
        make them the store's own where the live store kept them beside it (a file rewritten
        once); databases wrote them in place already."""

    def drop_field_command(self, address, field):
        """The user's own command that drops the vector field ``field`` (said in the guide
        and by ``skalign info``; skalign never drops a field)."""
        return self._field_functions(address).drop_field_command(address, field)
