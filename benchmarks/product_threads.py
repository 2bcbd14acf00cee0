"""The 10⁶ × 384 × 768 float32 product of ``bench_stores.py``'s ``.npy`` row, by itself, at
1 to 16 BLAS threads: one product over all rows (``whole``), the command's batches into one
reused buffer (``batches reuse``), into fresh arrays (``fresh``) and into the rows of one output
(``into``); then torch's product of the same batches at 8 and 16 threads, and a 3 GB copy into
touched and into fresh memory. Best of two each, random rows and weights (the product does not
depend on the values). What a translation's product costs where cores are many, against the
rest of its work (``bench_stores.py``'s ``transform_s``, ``translate_s``).

    python benchmarks/product_threads.py

``results/product_threads_h100.txt`` is its output on the lent machine (16 cores beside an
H100, 2026-11-28).
"""

import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits


def best(f, repeats=2):
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        seconds.append(time.perf_counter() - t0)
    return round(min(seconds), 3)


def main():
    print([(d["internal_api"], d.get("architecture"), d["num_threads"])
           for d in threadpool_info()])
    rng = np.random.default_rng(0)
    n, d, k, batch = 1_000_000, 384, 768, 29127
    X = rng.standard_normal((n, d), dtype=np.float32)
    W = rng.standard_normal((d, k), dtype=np.float32)
    Y = np.empty((n, k), np.float32)
    Y[:] = 0
    print("copy 3GB into touched", best(lambda: np.copyto(Y, 1.0)))
    print("fresh 3GB alloc+fill", best(lambda: np.ones((n, k), np.float32)))
    ob = np.empty((batch, k), np.float32)

    def reuse():
        for lo in range(0, n, batch):
            b = X[lo:lo + batch]
            np.matmul(b, W, out=ob[:len(b)])

    def fresh():
        for lo in range(0, n, batch):
            np.matmul(X[lo:lo + batch], W)

    def into():
        for lo in range(0, n, batch):
            b = X[lo:lo + batch]
            np.matmul(b, W, out=Y[lo:lo + len(b)])

    for threads in (1, 2, 4, 8, 16):
        with threadpool_limits(threads, "blas"):
            print(f"blas threads {threads}: whole {best(lambda: np.matmul(X, W, out=Y))}  "
                  f"batches reuse {best(reuse)}  fresh {best(fresh)}  into {best(into)}",
                  flush=True)
    import torch

    Xt, Wt, obt = torch.from_numpy(X), torch.from_numpy(W), torch.empty((batch, k))

    def torch_reuse():
        for lo in range(0, n, batch):
            b = Xt[lo:lo + batch]
            torch.mm(b, Wt, out=obt[:len(b)])

    for threads in (8, 16):
        torch.set_num_threads(threads)
        print(f"torch threads {threads}: batches reuse {best(torch_reuse)}",
              torch.__config__.parallel_info().splitlines()[-3:], flush=True)


if __name__ == "__main__":
    main()
