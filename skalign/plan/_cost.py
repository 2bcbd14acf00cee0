r"""What each option of a migration costs: encoder calls, and time on 1 and on ``W`` workers,
from rates measured on the user's own machine.

:func:`calibrate` loads the new encoder, reads a seeded random sample of the store's rows by id
(their texts; drawn without listing every id where the store can,
:meth:`~skalign._stores.live.LiveStore.sample_ids`) and encodes them, ``batch_size`` at a time,
until a time budget is spent; the first batch (a model's lazy start: kernels compiled, memory
allocated) is timed apart and left out of the rate when more than one batch ran. :func:`price`
carries those rates to every option of the plan; :func:`cost_lines` says them for people.

The time model
--------------
An option encodes :math:`n` texts (0 to translate only, :math:`\min(B, N)` to migrate with a
budget :math:`B`, :math:`N - B` more for the ``--continue`` steps that finish it, :math:`N` to
re-embed a store of :math:`N` rows) in
:math:`c = \lceil n / b \rceil` encoder calls of at most :math:`b` texts (``--encode-batch``;
each text once: the encode cache encodes a text repeated in several rows once, so :math:`n` is
an upper bound on a store with repeated texts). With the encoder's measured rate :math:`r`
(texts a second on one worker, at batch size :math:`b`), the store's read rate :math:`q` (rows
read by id with their texts, a second) and the time :math:`t_0` to load the encoder, the
encoder pass on :math:`W` workers takes

.. math::

    T(n, W) = t_0 + \frac{n}{q} + \frac{n}{r \, \min(W, c)}

for :math:`n > 0` (and 0 for :math:`n = 0`): the workers load the encoder in parallel, once
each; the texts are read where the command runs, as ``skalign migrate`` reads them; and each
worker keeps the one-worker rate on a core (or a GPU) of its own, with no more workers busy
than there are calls. The pass that reads, translates and writes every row of OUTPUT is the
same for every option and is not part of :math:`T`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

__all__ = ["Rates", "calibrate", "cost_lines", "duration", "price", "stated_rates",
           "worker_counts"]

#: worker counts of the table when ``--workers`` names none
WORKER_COUNTS = (1, 4, 16, 64)

#: batches a calibration reads at most (it also stops at its time budget)
MAX_BATCHES = 64


@dataclass(frozen=True)
class Rates:
    """What a calibration measured.

    Attributes
    ----------
    encoder : str
        The encoder's name, as the messages print it.
    device : str
        Where it ran (``"cpu"``, ``"cuda:0"``; a ``module:callable``'s own device is its
        business: ``"the callable's own"``).
    batch_size : int
        Texts per encoder call.
    texts : int
        Texts encoded in the timed batches.
    calls : int
        Timed encoder calls.
    encode_seconds : float
        Time of the timed calls.
    warmup_texts : int
        Texts of the first batch, timed apart (0 when it is one of the timed batches: the
        only batch the budget allowed).
    warmup_seconds : float
        Its time.
    load_seconds : float
        Time to load the encoder.
    read_rows : int
        Rows read by id, with their texts (every batch's, the first included).
    read_seconds : float
        Time of those reads.
    budget_seconds : float
        The calibration's time budget.
    store_rows : int
        Rows of the store.
    """

    encoder: str
    device: str
    batch_size: int
    texts: int
    calls: int
    encode_seconds: float
    warmup_texts: int
    warmup_seconds: float
    load_seconds: float
    read_rows: int
    read_seconds: float
    budget_seconds: float
    store_rows: int

    @property
    def texts_per_second(self):
        """The encoder's measured rate on one worker."""
        return self.texts / max(self.encode_seconds, 1e-9)

    @property
    def rows_per_second(self):
        """The store's measured read rate (rows by id, with their texts)."""
        return self.read_rows / max(self.read_seconds, 1e-9)

    def to_dict(self):
        """The measurements and the two rates, for JSON."""
        return dict(asdict(self), texts_per_second=self.texts_per_second,
                    rows_per_second=self.rows_per_second)


def calibrate(address, encoder, *, seconds=10.0, text_field=None, column=None, device="auto",
              batch_size=64, random_state=0, **options):
    """Measure the encoder's and the store's rates on the store's own texts.

    Parameters
    ----------
    address : str or Address
        The store to migrate (any address ``skalign migrate`` takes).
    encoder : str or callable
        The new encoder, as ``skalign migrate --encoder`` takes it
        (:func:`skalign.encoders.load_encoder`).
    seconds : float, default=10.0
        Time budget: no batch is started once this much time has gone on reading and encoding
        (the encoder's loading not counted); at least one batch is encoded.
    text_field : str, default=None
        Where each row's text is (default: the store's own, else ``text`` or ``document``).
    column : str, default=None
        The vector column or named vector.
    device : str, default="auto"
        Where the encoder runs.
    batch_size : int, default=64
        Texts per encoder call (``skalign migrate --encode-batch``).
    random_state : int, default=0
        Seeds the sample of rows.
    **options
        Options of the store (``metric``, ``id_field``).

    Returns
    -------
    rates : Rates
    """
    from .._migrate.scan import all_ids
    from .._stores import open_live
    from .._stores.live import first_text_field, sample_positions
    from ..encoders import load_encoder
    from ..utils._terminal import escape_control

    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"the calibration's time budget must be a positive number of seconds, "
                         f"got {seconds!r}.")
    with open_live(address, column=column, text_field=text_field, **options) as store:
        # a seeded sample of rows: drawn by the store where it can (a file store by row
        # position), else from every id listed; the same rows either way
        want = MAX_BATCHES * batch_size
        sample = store.sample_ids(want, random_state)
        if sample is None:
            ids = all_ids(store)
            n_rows = len(ids)
            sample = [ids[i] for i in sample_positions(n_rows, want, random_state)]
            del ids
        else:
            n_rows = int(store.n_rows)
        if not len(sample):
            raise ValueError(f"{address}: the store has no rows to calibrate on.")
        if text_field is None:
            found = first_text_field(store, [sample[0]])
            if found is None:
                raise ValueError(f"{address}: no text found for its rows (the default text "
                                 "field, 'text' and 'document' tried); name the field that "
                                 "holds the texts with --text-field")
            text_field = found[0]
        t0 = time.perf_counter()
        enc = load_encoder(encoder, device=device, batch_size=batch_size)
        load = time.perf_counter() - t0
        n = len(sample)
        timed = []  # (texts, seconds) of each batch
        read_rows, read_s = 0, 0.0
        for lo in range(0, n, batch_size):
            if timed and read_s + sum(s for _, s in timed) >= seconds:
                break
            t0 = time.perf_counter()
            texts = store.fetch(sample[lo:lo + batch_size], text_field=text_field).texts
            read_s += time.perf_counter() - t0
            read_rows += len(texts)
            texts = [t for t in texts if t is not None]
            if not texts:
                continue
            t0 = time.perf_counter()
            enc.encode(texts)
            timed.append((len(texts), time.perf_counter() - t0))
    if not timed:
        raise ValueError(f"{address}: none of the {read_rows} rows read has a text in the field "
                         f"{escape_control(str(text_field))!r}; name the field that holds the "
                         "texts with --text-field")
    warm = timed.pop(0) if len(timed) > 1 else (0, 0.0)
    device_name = getattr(enc, "device", None)
    return Rates(encoder=escape_control(str(getattr(enc, "name", encoder))),
                 device=str(device_name) if device_name else "the callable's own",
                 batch_size=int(batch_size), texts=sum(t for t, _ in timed), calls=len(timed),
                 encode_seconds=sum(s for _, s in timed), warmup_texts=warm[0],
                 warmup_seconds=warm[1], load_seconds=load, read_rows=read_rows,
                 read_seconds=read_s, budget_seconds=float(seconds), store_rows=n_rows)


def stated_rates(texts_per_second, batch_size, load_seconds, rows_per_second, encoder="",
                 device=""):
    """The :class:`Rates` of rates as a page states them (the encoder's to 0.1 text a second,
    the store's to a row a second): what the guide's tables are computed from, so that they
    can be computed again from the page."""
    return Rates(encoder=encoder, device=device, batch_size=int(batch_size),
                 texts=round(texts_per_second * 10), calls=1, encode_seconds=10.0,
                 warmup_texts=0, warmup_seconds=0.0, load_seconds=float(load_seconds),
                 read_rows=round(rows_per_second), read_seconds=1.0, budget_seconds=0.0,
                 store_rows=0)


def worker_counts(workers=None):
    """The worker counts of the table: 1 and :data:`WORKER_COUNTS`, with ``workers`` when
    given."""
    return sorted(set(WORKER_COUNTS) | ({int(workers)} if workers else set()))


def price(rates, store_size, *, budget=None, workers=WORKER_COUNTS):
    """Each option's encoder calls and time on each worker count (the module's time model).

    Parameters
    ----------
    rates : Rates
        What :func:`calibrate` measured.
    store_size : int
        Rows of the store, ``N``.
    budget : int, default=None
        ``skalign migrate --budget B``: priced as its own option when given.
    workers : sequence of int, default=WORKER_COUNTS
        Worker counts to price.

    Returns
    -------
    options : list of dict
        ``{"option", "texts", "encoder_calls", "seconds"}``, ``seconds`` a dict from each
        worker count to the encoder pass's time, in the order translate only, migrate with the
        budget and the ``--continue`` steps that encode every other row after it (with
        ``budget``), re-embed all.
    """
    if int(store_size) < 1:
        raise ValueError(f"the store size must be at least 1, got {store_size}.")
    rows = [("translate only", 0)]
    if budget is not None:
        rows.append((f"migrate --budget {int(budget):,}", min(int(budget), int(store_size))))
        if int(budget) < int(store_size):
            rows.append(("then --continue to the end", int(store_size) - int(budget)))
    rows.append(("re-embed all", int(store_size)))
    out = []
    for option, n in rows:
        calls = -(-n // rates.batch_size)
        out.append({"option": option, "texts": n, "encoder_calls": calls,
                    "seconds": {int(w): _seconds(rates, n, calls, int(w)) for w in workers}})
    return out


def _seconds(rates, n, calls, workers):
    if n == 0:
        return 0.0
    return (rates.load_seconds + n / rates.rows_per_second
            + n / (rates.texts_per_second * min(workers, calls)))


def duration(seconds):
    """``seconds`` in words a person reads at a glance, to two digits: ``0 s``, ``4.2 s``,
    ``3 min 5 s``, ``55 min``, ``2.5 h``, ``48 days``."""
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.2g} h" if seconds < 36000 else f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.2g} days" if seconds < 864000 else \
        f"{seconds / 86400:,.0f} days"


def cost_lines(rates, options, where="the store"):
    """The cost of each option, as lines of text for people.

    Parameters
    ----------
    rates : Rates
    options : list of dict
        What :func:`price` returned.
    where : str, default="the store"
        How to name the store the options are priced for.

    Returns
    -------
    lines : list of str
    """
    workers = list(options[0]["seconds"])
    warm = (f"; first batch of {rates.warmup_texts} texts, {rates.warmup_seconds:.2f} s, timed "
            "apart" if rates.warmup_texts else "; one batch only: its warm-up is in the rate")
    lines = [
        f"cost of the encoder pass for {where}, from rates measured on this machine:",
        f"  {rates.encoder} on {rates.device}, batch {rates.batch_size}: "
        f"{rates.texts_per_second:,.1f} texts/s ({rates.texts} texts of the store in "
        f"{rates.calls} call{'s' if rates.calls != 1 else ''}, {rates.encode_seconds:.2f} s{warm})",
        f"  loading it {rates.load_seconds:.2f} s; reading texts by id "
        f"{rates.rows_per_second:,.0f} rows/s ({rates.read_rows} rows)",
        f"{'option':<28}{'texts':>14}{'encoder calls':>15}"
        + "".join(f"{f'{w} worker' + ('s' if w > 1 else ''):>12}" for w in workers),
    ]
    for o in options:
        lines.append(f"{o['option']:<28}{o['texts']:>14,}{o['encoder_calls']:>15,}"
                     + "".join(f"{duration(o['seconds'][w]):>12}" for w in workers))
    lines.append("times: loading the encoder + reading the texts + encoding them, each worker "
                 "at the measured rate on a core (or GPU) of its own; writing OUTPUT, the same "
                 "for every option, is not included; a text repeated in several rows is "
                 "encoded once")
    return lines
