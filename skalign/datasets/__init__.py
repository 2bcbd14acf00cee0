"""Data with known ground truth for tests, examples and benchmarks. Nothing downloads."""

from ._digits import DIGITS_ENCODERS, get_data_home, load_digits_embeddings
from ._synthetic import make_paired_spaces

__all__ = ["DIGITS_ENCODERS", "get_data_home", "load_digits_embeddings", "make_paired_spaces"]
