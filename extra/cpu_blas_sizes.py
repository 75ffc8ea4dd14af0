"""numpy's float32 matmul (the BLAS that cpu_blas calls) at every even n in a range.

The sweep measures matmul at 4 sizes per octave; between them the BLAS's time need not be
monotone (its threading and blocking change with n).  This scan times a plain ``a @ b`` at
every even n, 600 hot calls after 100 warm-ups, and prints the median and the 10th percentile
in microseconds.  Run it twice to compare thread counts:

    python extra/cpu_blas_sizes.py
    OPENBLAS_NUM_THREADS=1 python extra/cpu_blas_sizes.py
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def scan(lo: int, hi: int, calls: int = 600, warmup: int = 100) -> list[tuple[int, float, float]]:
    """(n, median µs, 10th percentile µs) for every even n in [lo, hi]."""
    rng = np.random.default_rng(0)
    rows = []
    for n in range(lo + lo % 2, hi + 1, 2):
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        for _ in range(warmup):
            a @ b
        times = np.empty(calls)
        for i in range(calls):
            start = time.perf_counter()
            a @ b
            times[i] = time.perf_counter() - start
        rows.append((n, float(np.median(times)) * 1e6, float(np.percentile(times, 10)) * 1e6))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lo", type=int, default=96)
    parser.add_argument("--hi", type=int, default=200)
    args = parser.parse_args()
    print(f"threads env {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    for n, median, p10 in scan(args.lo, args.hi):
        print(n, round(median, 1), round(p10, 1), flush=True)


if __name__ == "__main__":
    main()
