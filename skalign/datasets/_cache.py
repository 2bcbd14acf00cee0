"""Where generated data sets are cached, and the memoisation every loader uses."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import joblib

__all__ = ["cached", "get_data_home"]


def get_data_home(data_home=None) -> Path:
    """Return the folder of skalign's cached data, creating it if missing.

    Parameters
    ----------
    data_home : str or path-like, default=None
        The folder to use; ``None`` means ``$SKALIGN_DATA``, else ``~/skalign_data``.

    Returns
    -------
    path : pathlib.Path
        The folder, with ``~`` expanded.
    """
    path = data_home or os.environ.get("SKALIGN_DATA") or Path.home() / "skalign_data"
    path = Path(path).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached(name, params, compute, *, data_home=None, use_cache=True):
    """``compute()``, memoised on disk as ``<data_home>/<name>_<hash of params>.joblib``.

    ``params`` (JSON-serialisable) must hold everything the result depends on, including a
    version number to bump when the generator changes. The file is written to a temporary name
    and renamed, so concurrent processes (e.g. parallel test workers) never read a partial file.
    """
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    path = get_data_home(data_home) / f"{name}_{key}.joblib"
    if use_cache and path.exists():
        return joblib.load(path)
    value = compute()
    if use_cache:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        joblib.dump(value, tmp)
        os.replace(tmp, path)
    return value
