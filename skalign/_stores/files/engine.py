"""What the file stores' engines share (``.npy``, Parquet, LanceDB, FAISS): the stamp in a
sidecar ``PATH.skalign.json`` beside the store, the backup ``STEM-skalign-backup SUFFIX`` beside
it, the publish recorded in a journal (:mod:`skalign._stores.files.shadow`); each engine names
its files' ``suffix``."""

from __future__ import annotations

import os

from ...exceptions import StoreError
from ..engine import MAX_STAMP_DEPTH, Engine
from .shadow import (
    check_output,
    file_backup,
    is_file_backup,
    recover_publish,
    restore_file,
    sidecar_path,
    write_sidecar,
)

__all__ = ["FileEngine"]


class FileEngine(Engine):
    """A file store's engine.

    Attributes
    ----------
    suffix : str
        The ending of its stores' names (``".npy"``; ``""``: a folder), kept by backups.
    makes_parent : bool
        Writing a store creates its folder (a LanceDB table's database); ``False``: the
        folder must exist.
    """

    files = True
    writes_in_place = False
    suffix = ""
    makes_parent = False

    def check_output(self, address):
        check_output(address.path, self.makes_parent)

    def short_name(self, address):
        return address.path.name

    def backup_address(self, address):
        return file_backup(address, self.suffix)

    def is_backup(self, address):
        return is_file_backup(address, self.suffix)

    def restore(self, address):
        return restore_file(address, self.suffix)

    def recover_publish(self, address, match):
        return recover_publish(address, match, self.suffix)

    def stamp_place(self, address):
        return str(sidecar_path(address))

    def read_stamp(self, address):
        """The sidecar, read without following a link (a link is no stamp) and parsed with
        bounded nesting."""
        from ...utils._input_files import InputFileError, loads_bounded

        path = sidecar_path(address)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                data = f.read(1 << 16)
        except OSError:
            return None
        try:
            return loads_bounded(data, "", max_depth=MAX_STAMP_DEPTH)
        except InputFileError as exc:
            raise StoreError(f"{path}: its provenance stamp is malformed ({str(exc)[2:]}): it "
                             "was not written by skalign; remove it, or give another store."
                             ) from None
        except ValueError:
            raise StoreError(f"{path}: its provenance stamp is malformed (not JSON): it was "
                             "not written by skalign; remove it, or give another store.") \
                from None

    def write_stamp(self, address, stamp):
        write_sidecar(address, stamp, like=address.path)

    def move_stamp(self, output, backup, swap=False):
        """The sidecars moved as the stores were: to the backup's (``--replace``), or
        exchanged (a restore)."""
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
