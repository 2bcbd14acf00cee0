"""``skalign plan --store --encoder``: the cost of each option from a calibration run, checked
against running the options with a stand-in encoder whose cost is known."""

import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skalign.cli import main
from skalign.plan._cost import duration, price, stated_rates

N = 120  # rows of the store
BUDGET = 32  # the first step's (a plan needs at least 24 pairs)
BATCH = 8
PER_CALL, PER_TEXT = 0.02, 0.02  # the stand-in's cost: seconds per call and per text

STANDIN = f"""\
import time
import numpy as np
TEXTS = []
CALLS = []
def embed(texts):
    CALLS.append(len(texts))
    TEXTS.extend(texts)
    time.sleep({PER_CALL} + {PER_TEXT} * len(texts))
    return np.stack([np.random.default_rng(len(TEXTS) + i).normal(size=16)
                     for i in range(len(texts))]).astype(np.float32)
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A Parquet store of ``N`` docstrings (old vectors, texts), the pairs of a plan and the
    stand-in encoder ``cost_standin:embed`` on ``sys.path``."""
    import sys

    from skalign.datasets import load_docstring_embeddings

    d = load_docstring_embeddings()
    here = tmp_path_factory.mktemp("cost")
    old = d.embeddings["minilm_l6"][:N].astype(np.float32)
    pq.write_table(pa.table({"id": [f"doc-{i}" for i in range(N)], "text": list(d.texts[:N]),
                             "vector": pa.array(list(old), type=pa.list_(pa.float32()))}),
                   here / "src.parquet")
    np.save(here / "A.npy", old)
    np.save(here / "B.npy", d.embeddings["mpnet_base"][:N].astype(np.float32))
    (here / "cost_standin.py").write_text(STANDIN)
    sys.path.insert(0, str(here))
    try:
        yield here
    finally:
        sys.path.remove(str(here))
        sys.modules.pop("cost_standin", None)


def _run(args, capsys):
    status = main(args)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out


def test_predicted_cost_matches_running_the_options(store, capsys, monkeypatch):
    import cost_standin

    monkeypatch.setenv("SKALIGN_ENCODE_CACHE", str(store / "cache.sqlite"))
    out = _run(["plan", "--source", str(store / "A.npy"), "--target", str(store / "B.npy"),
                "--store", str(store / "src.parquet"), "--encoder", "cost_standin:embed",
                "--calibrate", "1", "--encode-batch", str(BATCH), "--budget", str(BUDGET),
                "--workers", "3", "--methods", "procrustes", "--no-curve", "--json"], capsys)
    cost = json.loads(out)["cost"]
    cal = cost["calibration"]
    # the rate is the stand-in's at this batch size (per call and per text), not a constant
    true_rate = BATCH / (PER_CALL + PER_TEXT * BATCH)
    assert 0.75 * true_rate < cal["texts_per_second"] <= 1.02 * true_rate
    assert cal["batch_size"] == BATCH and cal["store_rows"] == N and cost["store_size"] == N
    # the time budget bounds the run: no batch starts after it
    batch_s = PER_CALL + PER_TEXT * BATCH
    assert cal["encode_seconds"] + cal["read_seconds"] < 1 + 3 * batch_s
    assert cal["texts"] == sum(cost_standin.CALLS[1:]) and cal["calls"] == \
        len(cost_standin.CALLS) - 1  # the first batch timed apart
    opts = {o["option"]: o for o in cost["options"]}
    assert list(opts) == ["translate only", f"migrate --budget {BUDGET}",
                          "then --continue to the end", "re-embed all"]
    assert [o["texts"] for o in opts.values()] == [0, BUDGET, N - BUDGET, N]
    assert [o["encoder_calls"] for o in opts.values()] == [
        0, math.ceil(BUDGET / BATCH), math.ceil((N - BUDGET) / BATCH), math.ceil(N / BATCH)]
    assert list(opts["re-embed all"]["seconds"]) == ["1", "3", "4", "16", "64"]
    s = opts["re-embed all"]["seconds"]
    assert s["3"] < s["1"] / 2.5 and opts["translate only"]["seconds"]["1"] == 0

    # run the options: the encoder calls are the ones predicted, exactly
    del cost_standin.TEXTS[:], cost_standin.CALLS[:]
    src, dst = str(store / "src.parquet"), str(store / "out.parquet")
    common = ["--encoder", "cost_standin:embed", "--encode-batch", str(BATCH), "--quiet"]
    _run(["migrate", src, dst, "--budget", str(BUDGET), "--methods", "procrustes", "--anyway",
          *common], capsys)
    first = opts[f"migrate --budget {BUDGET}"]
    assert len(cost_standin.TEXTS) == first["texts"]
    assert len(cost_standin.CALLS) == first["encoder_calls"]
    del cost_standin.TEXTS[:], cost_standin.CALLS[:]
    t0 = time.perf_counter()
    _run(["migrate", src, dst, "--continue", "--budget", str(N - BUDGET), *common], capsys)
    wall = time.perf_counter() - t0
    rest = opts["then --continue to the end"]
    assert len(cost_standin.TEXTS) == rest["texts"]
    assert len(cost_standin.CALLS) == rest["encoder_calls"]
    # re-embedding every row the first step left: the time predicted on one worker
    assert 0.85 < wall / rest["seconds"]["1"] < 1.6, (wall, rest["seconds"]["1"])
    # the whole store was encoded, every text once: re-embed all's count
    assert len(cost_standin.TEXTS) + first["texts"] == opts["re-embed all"]["texts"]


def test_the_text_table_and_the_refusals(store, capsys):
    args = ["plan", "--source", str(store / "A.npy"), "--target", str(store / "B.npy"),
            "--methods", "procrustes", "--no-curve", "--quiet"]
    assert main(args + ["--encoder", "cost_standin:embed"]) == 2
    assert "give --store too" in capsys.readouterr().err
    assert main(args + ["--text-field", "text"]) == 2
    assert "--text-field applies to --store" in capsys.readouterr().err
    assert main(args + ["--store", str(store / "src.parquet"), "--encoder",
                        "cost_standin:embed", "--calibrate", "0"]) == 2
    assert "--calibrate must be a positive number" in capsys.readouterr().err
    assert main(args + ["--store", str(store / "src.parquet"), "--encoder",
                        "cost_standin:embed", "--text-field", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "--text-field" in err and "Traceback" not in err
    # --store alone gives the store size; --store-size prices a larger store
    out = _run(args + ["--store", str(store / "src.parquet")], capsys)
    assert f"on a store of {N} items" in out and "cost of the encoder pass" not in out
    out = _run(args + ["--store", str(store / "src.parquet"), "--encoder", "cost_standin:embed",
                       "--calibrate", "0.3", "--encode-batch", "16", "--store-size",
                       "100000000"], capsys)
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("cost of the encoder"))
    assert "a store of 100,000,000 rows (--store-size; --store has 120)" in lines[head]
    assert re.match(r"  cost_standin:embed on the callable's own, batch 16: [\d.,]+ texts/s",
                    lines[head + 1]) and lines[head + 2].startswith("  loading it")
    assert lines[head + 3].split()[:3] == ["option", "texts", "encoder"]
    assert lines[head + 4].startswith("translate only") and "0 s" in lines[head + 4]
    assert re.match(r"re-embed all +100,000,000 +6,250,000 ", lines[head + 5])


def test_the_calibration_draws_its_rows_without_listing_every_id(store, monkeypatch):
    """A file store draws the calibration's rows by position (``sample_ids``), no id listed;
    they are the very rows drawn from the listed ids where a store cannot (the documented
    default), so the calibration reads and encodes the same texts either way."""
    from skalign._stores.files.live import FileLiveStore
    from skalign._stores.live import LiveStore, sample_positions
    from skalign.plan._cost import MAX_BATCHES, calibrate

    def run():
        seen = []

        def embed(texts):
            seen.extend(texts)
            return np.ones((len(texts), 4), np.float32)

        rates = calibrate(str(store / "src.parquet"), embed, seconds=600, batch_size=1,
                          random_state=3)
        return rates, seen

    def listed(self):
        raise AssertionError("the calibration listed every id")

    with monkeypatch.context() as m:
        m.setattr(FileLiveStore, "ids", listed)
        m.setattr(FileLiveStore, "id_array", listed)
        drawn, seen = run()
    monkeypatch.setattr(FileLiveStore, "sample_ids", LiveStore.sample_ids)
    from_list, seen_listed = run()
    texts = pq.read_table(store / "src.parquet", columns=["text"]).column("text").to_pylist()
    assert seen == seen_listed == [texts[i] for i in sample_positions(N, MAX_BATCHES, 3)]
    assert drawn.store_rows == from_list.store_rows == N
    assert drawn.read_rows == from_list.read_rows == MAX_BATCHES < N


def _rates(rate, *, load=0.0, read=1e9, batch=64):
    return stated_rates(rate, batch, load, read)


def test_the_time_model():
    r = _rates(100.0, load=5.0, read=1000.0, batch=10)
    o = {x["option"]: x for x in price(r, 1000, budget=30, workers=(1, 2, 200))}
    # T = load + n / read rate + n / (rate * min(W, calls))
    assert o["re-embed all"]["seconds"][1] == pytest.approx(5 + 1 + 10)
    assert o["re-embed all"]["seconds"][2] == pytest.approx(5 + 1 + 5)
    assert o["re-embed all"]["seconds"][200] == pytest.approx(5 + 1 + 10 / 100)
    assert o["migrate --budget 30"]["seconds"][200] == pytest.approx(5 + 0.03 + 0.3 / 3)
    assert [x["encoder_calls"] for x in o.values()] == [0, 3, 97, 100]
    assert "then --continue to the end" not in {x["option"] for x in price(r, 20, budget=30)}
    assert [duration(s) for s in (0, 4.25, 59, 185, 3287, 7200, 86400 * 3, 86400 * 48)] == [
        "0 s", "4.2 s", "59 s", "3 min 5 s", "55 min", "2 h", "3 days", "48 days"]
    with pytest.raises(ValueError, match="store size"):
        price(r, 0)


def test_the_guides_table_is_what_the_model_computes():
    """The cluster page's 10^8-row table (benchmarks/bench_plan_cost.py's result file, which
    the page includes) is what :func:`price` gives for the rates the page quotes."""
    import csv

    root = Path(__file__).parents[1]
    page = (root / "doc" / "user_guide" / "cluster.rst").read_text()
    assert ":file: ../../benchmarks/results/bench_plan_cost.csv" in page
    results = root / "benchmarks" / "results"
    with open(results / "bench_plan_cost_figures.csv", newline="") as f:
        fig = {row["key"]: row["value"] for row in csv.DictReader(f)}
    for key in ("texts_per_second", "batch", "load_s", "read_rows_per_s"):
        assert f"<bench_plan_cost_figures:{key}>" in page
    r = _rates(float(fig["texts_per_second"]), load=float(fig["load_s"]),
               read=float(fig["read_rows_per_s"]), batch=int(fig["batch"]))
    with open(results / "bench_plan_cost.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3
    for row in rows:
        w = int(row["workers"])
        o = price(r, 10**8, workers=(w,))[-1]
        assert int(row["texts"].replace(",", "")) == o["texts"] == 10**8
        assert int(row["encoder calls"].replace(",", "")) == o["encoder_calls"]
        assert row["time"] == duration(o["seconds"][w])
        assert int(row["seconds"]) == round(o["seconds"][w])


def test_the_benchmark_runs(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("bench_plan_cost")
    rates = bench.main(["--texts", "48", "--calibrate", "0.2", "--batch", "16",
                        "--standin-ms", "2", "--rows", "1000", "--workers", "1", "2",
                        "--csv", str(tmp_path / "t.csv")])
    out = capsys.readouterr().out
    assert rates.store_rows == 48 and "predicted" in out and "measured" in out
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert rows[0] == "workers,texts,encoder calls,time,seconds" and len(rows) == 3
    assert "texts_per_second" in (tmp_path / "t_figures.csv").read_text()
