"""Save and load fitted aligners in a secure format, and translate whole vector stores.

Model files use `skops <https://skops.readthedocs.io>`_ (``skops.io``), not pickle: loading a
skops file never runs code from the file, and every type it would instantiate is checked against
an explicit list of trusted types first — skalign's own estimators plus the numpy and
scikit-learn types skops trusts by default. A file that names anything else is refused with a
:class:`ModelFileError` listing the unexpected types.

A model file stores the fitted estimator together with the skalign version that wrote it and the
width of its input and output embeddings (:func:`model_info`); :func:`load` warns when the
version differs from the running one, and :func:`translate` refuses input vectors of the wrong
width before writing anything.

:func:`translate` streams a vector store through a fitted aligner in bounded memory, keeping
ids and every other column or field: ``.npy`` arrays (memory-mapped), Parquet files or folders
of Parquet shards, LanceDB tables (``DIR/TABLE.lance``), FAISS indexes (``PATH.faiss``),
PostgreSQL/pgvector tables (``postgresql://...?table=T&column=C``), Chroma collections
(``chroma:DIR/NAME``, ``chroma+http://``) and Qdrant collections (``qdrant:DIR/NAME``,
``qdrant+http://``). The output is written under a temporary name, verified, then published;
an existing output is refused unless ``replace=True``, which keeps the previous store as a
backup (:func:`restore` swaps them back). :func:`read_vectors` reads the vectors of any of
these stores into memory (memory-mapped for ``.npy``).
"""

from __future__ import annotations

import importlib.abc
import json
import sys
import warnings
import zipfile
from io import BytesIO
from pathlib import Path

from ._stores.pipeline.translate import output_dim
from .exceptions import ModelFileError, StoreError

__all__ = [
    "ModelFileError",
    "StoreError",
    "display_address",
    "load",
    "migrate",
    "model_info",
    "output_dim",
    "read_vectors",
    "restore",
    "save",
    "translate",
    "trusted_types",
]

_FORMAT = "skalign-model"
_FORMAT_VERSION = 1

#: array-API adapters of other frameworks under ``sklearn.externals.array_api_compat``, and the
#: framework each imports
_ARRAY_API_BACKENDS = {"torch": "torch", "dask": "dask", "cupy": "cupy"}


class _SkipModules(importlib.abc.MetaPathFinder):
    """Import hook that makes the named modules fail to import (nothing else is affected)."""

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name in self.names:
            raise ModuleNotFoundError(f"{name} is not imported while skops.io loads", name=name)
        return None


def _import_skops():
    """``skops.io``, imported without importing torch, dask or cupy.

    At import, ``skops.io`` lists scikit-learn's estimators with scikit-learn's own estimator
    discovery, whose package walk imports every subpackage of
    scikit-learn, including the array-API adapters for torch, dask and cupy, which import those
    frameworks (torch alone takes seconds). The adapters hold no estimators, so they are skipped
    during that walk (the walk ignores packages that fail to import) unless their framework is
    already loaded; a later genuine import of an adapter works as usual. This keeps loading and
    applying a numpy-only model (:class:`~skalign.ProcrustesAligner`,
    :class:`~skalign.LinearAligner`) free of torch.
    """
    if "skops.io" not in sys.modules:
        skip = _SkipModules(f"sklearn.externals.array_api_compat.{adapter}"
                            for adapter, framework in _ARRAY_API_BACKENDS.items()
                            if framework not in sys.modules)
        sys.meta_path.insert(0, skip)
        try:
            import skops.io  # noqa: F401
        finally:
            sys.meta_path.remove(skip)
    return sys.modules["skops.io"]


def trusted_types():
    """The fully qualified type names :func:`load` accepts beyond skops' defaults.

    Computed from skalign's public estimators (the tables of :mod:`skalign._registry`, with the
    module each class is defined in, as skops reports it) plus :class:`numpy.dtype`. skops already
    trusts numpy arrays and scalars, built-in containers and scikit-learn's estimators. No
    estimator module is imported, so loading a numpy-only model never imports torch.

    Returns
    -------
    names : list of str
        Sorted, e.g. ``"skalign._affine.procrustes.ProcrustesAligner"``.
    """
    from ._registry import ESTIMATOR_NAMES, PUBLIC

    names = {f"{PUBLIC[name]}.{name}" for name in ESTIMATOR_NAMES}
    names.add("numpy.dtype")
    return sorted(names)


def save(estimator, path):
    """Save a fitted estimator to a skops file together with its provenance.

    Parameters
    ----------
    estimator : fitted skalign estimator
        Any public skalign estimator, fitted.
    path : str or path-like
        Destination, conventionally ending in ``.skops``. Written to a temporary name in the
        same folder and renamed at the end, so an interrupted save never leaves a truncated file.

    Returns
    -------
    path : pathlib.Path
        The file written.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from skalign import ProcrustesAligner
    >>> from skalign.io import load, model_info, save
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(50, 4)), rng.normal(size=(50, 6))
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "model.skops")
    >>> _ = save(ProcrustesAligner().fit(X, Y), path)
    >>> model_info(path)["n_features_in"], model_info(path)["n_features_out"]
    (4, 6)
    >>> np.allclose(load(path).transform(X), ProcrustesAligner().fit(X, Y).transform(X))
    True
    >>> folder.cleanup()
    """
    from sklearn.utils.validation import check_is_fitted

    from ._stores.files.shadow import atomic_file
    from ._version import __version__

    sio = _import_skops()
    if not _is_skalign_estimator(estimator):
        raise TypeError(f"save writes skalign estimators; got a {type(estimator).__name__}.")
    check_is_fitted(estimator)
    payload = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "skalign_version": __version__,
        "estimator_class": type(estimator).__name__,
        "n_features_in": int(estimator.n_features_in_),
        "n_features_out": int(output_dim(estimator)),
        "estimator": estimator,
    }
    path = Path(path)
    with atomic_file(path) as tmp:
        sio.dump(payload, tmp)
    return path


def _renamed_types(data):
    """A skops file's bytes with the estimator modules of earlier versions renamed to where they
    live now (:data:`skalign._registry.MOVED_MODULES`); the bytes unchanged when nothing moved or
    they are not a skops file (the caller's checks then say so)."""
    from ._registry import MOVED_MODULES

    def rename(node):
        if isinstance(node, dict):
            return {key: (MOVED_MODULES.get(value, value) if key == "__module__" else rename(value))
                    for key, value in node.items()}
        if isinstance(node, list):
            return [rename(value) for value in node]
        return node

    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            schema = json.loads(archive.read("schema.json"))
            renamed = rename(schema)
            if renamed == schema:
                return data
            out = BytesIO()
            with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as copy:
                for info in archive.infolist():
                    body = (json.dumps(renamed).encode() if info.filename == "schema.json"
                            else archive.read(info))
                    copy.writestr(info, body)
            return out.getvalue()
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, RecursionError):
        return data


def _read_payload(path):
    sio = _import_skops()

    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such model file; create one with `skalign fit`.")
    data = _renamed_types(path.read_bytes())
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as exc:  # zipfile.BadZipFile, KeyError, JSON errors: not a skops file
        raise ModelFileError(
            f"{path}: not a skops model file ({type(exc).__name__}); save models with "
            "skalign.io.save or `skalign fit`."
        ) from exc
    allowed = set(trusted_types())
    unexpected = sorted(set(untrusted) - allowed)
    if unexpected:
        raise ModelFileError(
            f"{path}: refusing to load untrusted types {', '.join(unexpected)}; skalign loads only "
            "its own estimators and numpy/scikit-learn types. If you wrote this file yourself, "
            "inspect it and load it with skops.io.load(path, trusted=[...])."
        )
    payload = sio.loads(data, trusted=sorted(set(untrusted)))
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ModelFileError(
            f"{path}: a skops file but not a skalign model; save models with skalign.io.save."
        )
    if not _is_skalign_estimator(payload.get("estimator")):
        raise ModelFileError(
            f"{path}: holds a {type(payload.get('estimator')).__name__}, not a skalign "
            "estimator; fit one with `skalign fit` (or save a skalign estimator).")
    return payload


def _is_skalign_estimator(estimator):
    """Whether ``estimator`` is an instance of a public skalign estimator class (scikit-learn's
    own types load as trusted skops types, but cannot translate a store)."""
    from ._registry import ESTIMATOR_NAMES, PUBLIC

    cls = type(estimator)
    return cls.__name__ in ESTIMATOR_NAMES and cls.__module__ == PUBLIC[cls.__name__]


def model_info(path):
    """Read the provenance recorded in a model file, without loading the estimator.

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`save`.

    Returns
    -------
    info : dict
        ``skalign_version``, ``estimator_class``, ``n_features_in``, ``n_features_out``,
        ``format_version``.
    """
    payload = _read_payload(path)
    return {k: v for k, v in payload.items() if k not in ("estimator", "format")}


def load(path):
    """Load an estimator saved by :func:`save`, accepting only trusted types.

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`save`.

    Returns
    -------
    estimator : fitted skalign estimator
        The estimator as it was saved.

    Raises
    ------
    ModelFileError
        The file is missing, is not a skalign model file, or names a type outside
        :func:`trusted_types` (nothing from the file is instantiated in that case).

    Warns
    -----
    UserWarning
        When the file was written by another skalign version.
    """
    from ._version import __version__

    payload = _read_payload(path)
    if payload.get("skalign_version") != __version__:
        warnings.warn(
            f"{path} was saved by skalign {payload.get('skalign_version')} and is loaded by "
            f"skalign {__version__}; check its results or refit it with this version.",
            UserWarning,
            stacklevel=2,
        )
    return payload["estimator"]


def read_vectors(path, *, column=None):
    """Read all vectors of a store into one array.

    Parameters
    ----------
    path : str or path-like
        ``.npy`` (returned memory-mapped, read-only), ``.parquet`` file or directory of Parquet
        shards, or a LanceDB table ``DIR/TABLE.lance``.
    column : str, default=None
        The vector column of a Parquet file or LanceDB table; ``None`` picks the only column of
        numeric lists (or one named ``vector``/``embedding``).

    Returns
    -------
    X : ndarray of shape (n_rows, dim)
        The stored dtype for ``.npy``; float32, float64 or the stored integer type otherwise.
    """
    from ._stores.pipeline.translate import open_reader

    return open_reader(path, column=column).read_all()


def translate(model, input, output=None, *, column=None, batch_size=None, progress=False,
              replace=False, force=False, into=None):
    """Translate every vector of a store with a fitted aligner, streaming in batches.

    Peak memory is bounded by ``batch_size`` (and, for Parquet, the input's row-group size),
    whatever the number of rows. Ids and all other columns (documents, metadata, payloads) are
    copied; the vector column is replaced by the translated float32 vectors. ``.npy`` output
    holds the vectors only; a table made from ``.npy`` input gets an ``id`` column with the row
    number.

    The input is never modified. The output is written in the shadow — a hidden file or folder
    next to it, a ``…_skalign_partial`` table or collection — committed as it goes (each
    batch in a database or LanceDB; about every second, fsynced, in the other files),
    verified (row count; a sample of 32 rows from the whole output, rows a crashed run
    committed included, translated again from the input and compared, with their ids and
    fields) and only then published under its name. After a crash (even SIGKILL) the same call
    resumes from the last committed batch and removes what the crashed run left; a second call
    writing the same output at the same time fails at once. On bad data (NaN rows, a ragged
    column) nothing is left. The ``.npy``, FAISS and single Parquet file shadows (and the parts
    of a folder made from unsharded input) are written with direct I/O where the file system
    allows it (``O_DIRECT`` on Linux), so the output does not pass through the page cache;
    while the translation runs, numpy's BLAS threads are capped at the cores the store's own
    writer threads leave free.

    Parameters
    ----------
    model : fitted skalign estimator, or str or path-like
        An estimator, or the path of a model file saved by :func:`save`.
    input, output : str or path-like
        ``.npy``, ``.parquet`` file, a directory of Parquet shards (output: a path without
        suffix; one shard per input shard, same names, or one ``part-NNNNN.parquet`` per batch
        for unsharded input), a LanceDB table ``DIR/TABLE.lance``, a FAISS index ``PATH.faiss``,
        or a database address: ``postgresql://USER@HOST:PORT/DB?table=TABLE&column=COLUMN``,
        ``chroma:DIR/COLLECTION``, ``chroma+http://HOST:PORT/COLLECTION``,
        ``qdrant:DIR/COLLECTION``, ``qdrant+http://HOST:PORT/COLLECTION`` (``?vector=NAME``),
        ``sqlite:PATH?table=TABLE&column=COLUMN`` (a sqlite-vec ``vec0`` table),
        ``duckdb:PATH?table=TABLE&column=COLUMN`` (a DuckDB table).
        A database or FAISS input is written to the same engine.
    column : str, default=None
        The vector column (input and output). ``None`` picks the only column of numeric lists,
        or ``vector``/``embedding``; for ``.npy`` input it names the output column
        (default ``"vector"``).
    batch_size : int, default=None
        Rows per batch; ``None`` keeps one batch's float32 input and output near 128 MiB (64
        MiB for Parquet output, which encodes two batches at once).
    progress : bool, default=False
        Show a tqdm progress bar on standard error.
    replace : bool, default=False
        Allow an existing ``output`` — or ``output`` equal to ``input`` — and swap the new one in
        (atomically where the engine allows), keeping the previous one as a backup that
        :func:`restore` puts back. Without it an existing output raises :class:`StoreError`.
        A backup is never overwritten (:class:`~skalign.exceptions.StoreExistsError`), the
        backup itself is never taken as ``input`` for its own output
        (:class:`~skalign.exceptions.UnsafeOperationError`), and when ``output`` already holds
        this model's translation of ``input`` nothing is done (``noop`` says so).
    force : bool, default=False
        Translate even a store that is named as a backup or whose provenance stamp says it is
        already this model's output (refused otherwise with
        :class:`~skalign.exceptions.UnsafeOperationError`), or again an output that holds it.
    into : str, default=None
        Write the translation into a new vector field of ``input`` itself, named ``into``
        (``output`` left out): a pgvector column with an index like the old one's, a LanceDB or
        Parquet column, ... The old field, the rows and their other fields are never changed;
        each row of the new field is marked ``translated:<model>`` under the key
        ``skalign_vector_<into>``, so a call killed part-way and run again writes only the
        rows left. A store whose engine holds one vector field only (Chroma) is refused.

    Returns
    -------
    n_rows : int
        Number of rows translated (an ``int`` whose ``backup`` attribute names the backup
        ``replace`` kept, or ``None``, ``resumed_from`` the rows a crashed run had
        committed and this call did not translate again, 0 for a fresh start, and
        ``restarted`` why a crashed run's shadow could not be resumed and was translated
        afresh — a Chroma shadow Chroma itself refuses to open after a kill — or ``None``).
    """
    from ._stores.pipeline.translate import translate_store

    if isinstance(model, (str, Path)):
        model = load(model)
    if into is not None or output is None:
        if output is not None or into is None:
            raise ValueError("give an output store, or into=FIELD for a new field of the "
                             "input itself (not both).")
        from ._stores.address import parse_address
        from ._stores.fields import translate_into

        return translate_into(model, parse_address(input), into, column=column,
                              batch_size=batch_size, progress=progress)
    return translate_store(model, input, output, column=column, batch_size=batch_size,
                           progress=progress, replace=replace, force=force)


def migrate(source, output, encoder, budget, *, text_field=None, column=None,
            min_recall=0.0, anyway=False, random_state=0, cache=None, continue_=False,
            progress=False, batch_size=None, provenance_key=None, into=None,
            rebuild_index=False):
    """Migrate a store to a new encoder: encode ``budget`` rows' texts, translate the rest.

    The rows are chosen from their old vectors: those nearest the centres of a seeded k-means,
    up to a budget of 4,096; above it, and for ``continue_``'s further rows, drawn uniformly
    (seeded). Their texts are encoded by ``encoder`` through the encode cache, a map is planned
    (:func:`skalign.plan.plan_migration`) and fitted on those pairs, and ``output`` is written
    in one pass as by :func:`translate` (shadow write, verification, resume after a crash,
    provenance stamp): every other row translated, the encoded rows with their encoder's
    vectors exactly, each carrying a mark, ``encoded:<encoder fingerprint>:<text field>:<digest
    of the text>`` (a metadata or payload key or a column ``skalign_vector``; the folder
    ``PATH.skalign-live`` beside a file store). A translated row carries none, or
    ``translated:<map>`` once ``continue_`` has written it in place. With ``continue_=True``,
    ``budget`` more rows of ``output`` are encoded, the map is refitted on all encoded rows and
    the other rows translated again when its estimate is higher; once every row is encoded,
    ``output`` holds exactly the encoder's vectors. Killed at any point, the same call run
    again finishes it.

    Parameters
    ----------
    source : str or path-like
        The store embedded by the old encoder (never modified); its rows carry their texts.
    output : str or path-like
        The store to write (or, with ``continue_``, to finish).
    encoder : encoder spec
        Anything :func:`skalign.encoders.load_encoder` accepts, or a
        :class:`~skalign.encoders.CachedEncoder`.
    budget : int
        Rows to encode (with ``continue_``: more rows).
    text_field : str, default=None
        Where the texts are; ``None`` tries the store's default (Chroma's documents), then
        ``text`` and ``document``.
    column : str, default=None
        The vector column or named vector.
    min_recall : float, default=0.0
        Raise :class:`~skalign.exceptions.MigrationRefused` (a :class:`StoreError` holding
        the plan) when no map's estimated recall@10 reaches it.
    anyway : bool, default=False
        Migrate even below ``min_recall``.
    random_state : int, default=0
        Seed of the k-means and of the rows drawn uniformly.
    cache : str, path-like or EncodeCache, default=None
        The encode cache; ``None`` keeps vectors for this call only (the command line uses
        :func:`skalign.encoders.default_cache_path`).
    continue_ : bool, default=False
        Finish ``output`` progressively.
    progress : bool, default=False
        Progress bars on standard error.
    batch_size : int, default=None
        Rows per translation batch (:func:`translate`).
    provenance_key : str, default=None
        The column, metadata or payload key of each row's mark in ``output`` (default
        ``skalign_vector``); a key holding values skalign did not write is refused before any
        text is encoded.
    into : str, default=None
        Migrate into a new vector field of ``source`` itself, named ``into`` (``output``
        ``None``), instead of a second store: the old field, rows and payloads untouched, every
        row of the new field written in place and marked under ``skalign_vector_<into>`` (see
        :func:`translate`'s ``into``); ``continue_`` goes on with that field.
    rebuild_index : bool, default=False
        With ``continue_`` on a database written in place: write a step of a large share of
        the table the store's faster way where it has one (pgvector: a step of at least a
        tenth of the rows staged, then written in one transaction that builds the HNSW index
        again instead of updating it row by row). Searches of the table wait for that
        transaction, minutes on a large table; without it each batch is a short
        transaction and searches go on throughout.

    Returns
    -------
    result : MigrationResult
        A dataclass: ``n_rows``, ``n_encoded`` (texts encoded by this call),
        ``n_encoded_rows`` (rows holding their encoder's vector), ``method`` and ``estimate``
        (the map and its recall@10 estimate at the store's size), ``translated`` (rows
        translated by this call) and ``action``; ``to_dict()`` gives them as a dict.
    """
    if into is not None or output is None:
        if output is not None or into is None or provenance_key is not None:
            raise ValueError("give an output store, or into=FIELD for a new field of the "
                             "source itself (not both; a field's provenance key is its own).")
        from ._migrate.into import migrate_into

        return migrate_into(source, into, encoder, budget, text_field=text_field,
                            column=column, min_recall=min_recall, anyway=anyway,
                            random_state=random_state, cache=cache, continue_=continue_,
                            progress=progress, batch_size=batch_size,
                            rebuild_index=rebuild_index)
    from ._migrate.migration import migrate_store

    return migrate_store(source, output, encoder, budget, text_field=text_field, column=column,
                         min_recall=min_recall, anyway=anyway, random_state=random_state,
                         cache=cache, continue_=continue_, progress=progress,
                         batch_size=batch_size, provenance_key=provenance_key,
                         rebuild_index=rebuild_index)


def restore(output):
    """Put back the store that ``translate(..., replace=True)`` replaced at ``output``.

    The backup and the current output swap places, so calling it twice undoes it.

    Parameters
    ----------
    output : str or path-like
        The output (path or address) given to :func:`translate`.

    Returns
    -------
    backup : str
        Where the store that was in place is now kept.
    """
    from ._stores.pipeline.translate import restore_store

    return str(restore_store(output))


def display_address(address):
    """A store address as skalign prints it in messages, with any password masked.

    Parameters
    ----------
    address : str or path-like
        A file path or a database address such as
        ``postgresql://user:secret@host:5432/db?table=docs``.

    Returns
    -------
    str
        The address, ``user:***@`` in place of a password.

    Examples
    --------
    >>> from skalign.io import display_address
    >>> display_address("postgresql://me:secret@db.example:5432/app?table=docs&column=v")
    'postgresql://me:***@db.example:5432/app?table=docs&column=v'
    """
    from ._stores.address import parse_address

    return parse_address(address, output=True).render()
