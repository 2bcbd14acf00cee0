"""Data with known ground truth for tests, examples and benchmarks. Nothing downloads."""

from ._cache import get_data_home
from ._digits import DIGITS_ENCODERS, load_digits_embeddings
from ._digits_ensemble import DIGITS_SHIFTS, load_digits_ensemble
from ._synthetic import make_paired_spaces

__all__ = [
    "DIGITS_ENCODERS",
    "DIGITS_SHIFTS",
    "get_data_home",
    "load_digits_embeddings",
    "load_digits_ensemble",
    "make_paired_spaces",
]
