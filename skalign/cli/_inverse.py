"""A fitted aligner run the other way (new space -> old), for ``translate --direction inverse``."""

from __future__ import annotations

__all__ = ["InverseModel", "inverse_model"]


class InverseModel:
    """Wraps a fitted aligner so that ``transform`` is its ``inverse_transform``.

    Only what the store writers use is exposed: ``transform``, ``n_features_in_`` (the model's
    output width) and ``n_features_out_`` (its input width). Plain and picklable, so it ships to
    dask workers like the model itself.
    """

    def __init__(self, model):
        self.model = model
        self.n_features_in_ = int(model.n_features_out_)
        self.n_features_out_ = int(model.n_features_in_)

    def transform(self, X):
        """Map rows of the model's target space back into its source space."""
        return self.model.inverse_transform(X)


def inverse_model(model):
    """``model`` run target → source; a one-line ``ValueError`` when it has no inverse."""
    has = False
    try:
        has = hasattr(model, "inverse_transform") and hasattr(model, "n_features_out_")
    except Exception:  # available_if probes can raise on unusual inner estimators
        has = False
    if not has:
        raise ValueError(
            f"{type(model).__name__} has no inverse_transform, so --direction inverse cannot "
            "run it the other way; to bridge queries fit a map new -> old instead (skalign fit "
            "METHOD --source NEW --target OLD) and translate with it."
        )
    return InverseModel(model)
