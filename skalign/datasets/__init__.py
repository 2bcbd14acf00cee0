"""Data with known ground truth for tests, examples and benchmarks. Nothing downloads."""

from ._cache import get_data_home
from ._digits import DIGITS_ENCODERS, load_digits_embeddings
from ._digits_ensemble import DIGITS_SHIFTS, load_digits_ensemble
from ._real import REAL_ENCODERS, load_docstring_embeddings
from ._synthetic import make_paired_spaces

__all__ = [
    "DIGITS_ENCODERS",
    "DIGITS_SHIFTS",
    "REAL_ENCODERS",
    "get_data_home",
    "load_docstring_embeddings",
    "load_digits_embeddings",
    "load_digits_ensemble",
    "make_paired_spaces",
]
