"""What a step of ``skalign migrate`` did (:class:`MigrationResult`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["MigrationResult"]


@dataclass
class MigrationResult:
    """What a step of ``skalign migrate`` did.

    Attributes
    ----------
    output : str
        The output store, password masked.
    n_rows : int
        Rows in the store.
    n_encoded : int
        Texts the encoder ran on in this call (cached texts excluded).
    n_encoded_rows : int
        Rows of the output whose vector is the encoder's own, after this call.
    method : str or None
        The map fitted on the encoded rows (``None`` when every row is encoded).
    estimate : dict
        The estimate of the store written: recall@10 and its interval at the store's size,
        ``store`` (``"mixed"``: the encoded rows' exact vectors among the translations, or
        ``"translate all"``) and the translations' ``calibration`` (how they are put on the
        encoded rows' scale).
    translated : int
        Rows (re)translated by this call.
    action : str
        ``"migrated"``, ``"continued"``, ``"continued, retranslated"`` or ``"complete"``.
    notes : list of str
        What the held-out check found that the user should know (a ``--continue`` step whose
        store is estimated below the previous step's), also issued as warnings before writing.
    """

    output: str
    n_rows: int
    n_encoded: int
    n_encoded_rows: int
    method: str | None
    estimate: dict = field(default_factory=dict)
    translated: int = 0
    action: str = "migrated"
    notes: list = field(default_factory=list)

    def to_dict(self):
        return asdict(self)
