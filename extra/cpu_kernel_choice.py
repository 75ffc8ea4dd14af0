"""Which CPU kernel layer: numba's parallel loops, or C++ compiled with OpenMP?

Times add, exp, tanh and sum over float32 arrays of 2^12 .. 2^24 elements, each as

* ``numpy``   numpy's own loop on one core (its exp and tanh are SIMD since numpy 1.22);
* ``numba``   ``@njit(parallel=True, fastmath=True)`` over ``prange`` on every core;
* ``native``  softcuda's native kernels (softcuda/backends/native.py) on every core.

and prints the medians (us).  numba must be installed (``pip install numba``); without it this
says so in one line and exits 2.  The answer is in docs/design.md ("The native CPU kernels").

    python extra/cpu_kernel_choice.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import numpy as np


def _median_us(fn) -> float:
    fn()
    times: list[float] = []
    while len(times) < 7 or (sum(times) < 0.2 and len(times) < 500):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def main() -> int:
    if importlib.util.find_spec("numba") is None:
        print("cpu_kernel_choice.py needs numba, which is not installed (pip install numba)")
        return 2
    from numba import njit, prange

    from softcuda.backends import cpu_threads

    @njit(parallel=True, fastmath=True)
    def nb_add(a, b, o):
        for i in prange(a.size):
            o[i] = a[i] + b[i]

    @njit(parallel=True, fastmath=True)
    def nb_exp(a, o):
        for i in prange(a.size):
            o[i] = np.exp(a[i])

    @njit(parallel=True, fastmath=True)
    def nb_tanh(a, o):
        for i in prange(a.size):
            o[i] = np.tanh(a[i])

    @njit(parallel=True, fastmath=True)
    def nb_sum(a):
        s = 0.0
        for i in prange(a.size):
            s += a[i]
        return s

    threads = len(os.sched_getaffinity(0))
    print(f"float32, median us per call, {threads} cores")
    print(f"{'op':5} {'size':>5} {'numpy':>9} {'numba':>9} {'native':>9}")
    rng = np.random.default_rng(0)
    for k in range(12, 25, 2):
        a = rng.standard_normal(1 << k, dtype=np.float32)
        b = rng.standard_normal(1 << k, dtype=np.float32)
        o = np.empty_like(a)
        one = np.empty((), np.float32)
        cases = {
            "add": (lambda: np.add(a, b, out=o), lambda: nb_add(a, b, o), ("add", [a, b], o)),
            "exp": (lambda: np.exp(a, out=o), lambda: nb_exp(a, o), ("exp", [a], o)),
            "tanh": (lambda: np.tanh(a, out=o), lambda: nb_tanh(a, o), ("tanh", [a], o)),
            "sum": (a.sum, lambda: nb_sum(a), ("sum", [a], one)),
        }
        for name, (numpy_fn, numba_fn, (op, ins, out)) in cases.items():
            attrs = {"axis": None, "keepdims": False} if op == "sum" else {}
            native = cpu_threads.make_kernel(op, attrs, ins, out, threads=threads)
            figures = [_median_us(f) for f in (numpy_fn, numba_fn, native)]
            print(f"{name:5} {'2^' + str(k):>5} " + " ".join(f"{x:9.1f}" for x in figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
