"""How close does cpu_threads come to the host's own memory bandwidth, and what does it cost
where it has nothing to split?

For each size (float32 elements) it times, in the same rounds (interleaved, medians):

* ``numpy``        one ``np.add(a, b, out)`` on the calling thread: the single-core answer;
* ``cpu_threads``  softcuda's kernel for ``add`` (pieces pulled by persistent workers);
* ``pieces N``     the same cut into pieces of N bytes (``--pieces``; a size larger than the op
                   gives one chunk per thread, handed out up front);
* ``pinned``       the same with each worker pinned to a core of its own;
* ``numexpr``      ``numexpr.evaluate("a + b", out=...)`` on as many threads, when installed;
* ``copy``         a multi-threaded ``np.copyto`` of one array, chunked on the same workers:
                   the host's copy bandwidth, the ceiling an elementwise op is held to.

Bandwidth counts the bytes an op must move (add: two reads and a write; copy: a read and a
write).  Printed per size: each variant's median and GB/s, cpu_threads' share of the copy
bandwidth, and its time over numpy's.  The targets: at 2^24 elements and more, cpu_threads'
add reaches 80% of the copy bandwidth; at 2^12, it costs at most twice numpy's call.

    python benchmarks/cpu_threads.py                  # 2^12 .. 2^28
    python benchmarks/cpu_threads.py --quick          # 2^12 .. 2^20, a few repetitions (CI)
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from functools import partial

import numpy as np

from softcuda.backends import cpu_threads


def pin_workers(pool: cpu_threads.Workers, cores: list[int]) -> None:
    """Pin each worker of ``pool`` to one core of ``cores`` (the calling thread stays free)."""
    ready = threading.Barrier(pool.threads)

    def pin(core: int) -> None:
        os.sched_setaffinity(0, {core})  # 0: the calling thread, on Linux
        ready.wait()

    tasks = [ready.wait] + [partial(pin, c) for c in cores[1 : pool.threads]]
    pool.run(tasks)


def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2^12 .. 2^20, few repetitions")
    parser.add_argument("--threads", type=int, default=cpu_threads.default_threads())
    parser.add_argument("--min-exp", type=int, default=12)
    parser.add_argument("--max-exp", type=int, default=None)
    parser.add_argument(
        "--pieces",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        help="also time cpu_threads cut into pieces of these many bytes (comma-separated)",
    )
    args = parser.parse_args()
    top = args.max_exp or (20 if args.quick else 28)
    threads = args.threads
    try:
        import numexpr

        numexpr.set_num_threads(threads)
    except ImportError:
        numexpr = None
    cores = sorted(os.sched_getaffinity(0))
    pinned_pool = cpu_threads.Workers(threads)
    can_pin = len(cores) >= threads
    if can_pin:
        pin_workers(pinned_pool, cores)
    print(
        f"cpu_threads benchmark: {threads} threads, {len(cores)} cores usable, numpy "
        f"{np.__version__}, numexpr {numexpr.__version__ if numexpr else 'not installed'}, "
        f"chunks of at least {cpu_threads.MIN_CHUNK_BYTES} bytes"
    )
    head = f"{'n':>11} {'variant':<12} {'median':>11} {'GB/s':>8}"
    print(head)
    rng = np.random.default_rng(0)
    shares: dict[int, float] = {}
    costs: dict[int, float] = {}
    for e in range(args.min_exp, top + 1):
        n = 1 << e
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        out = np.empty_like(a)
        copy_out = np.empty_like(a)
        kernel = cpu_threads.make_kernel("add", {}, [a, b], out, threads=threads)
        variants = {"numpy": partial(np.add, a, b, out), "cpu_threads": kernel}
        default = cpu_threads.PIECE_BYTES
        for piece in args.pieces:  # the same, cut into pieces of this many bytes
            cpu_threads.PIECE_BYTES = piece
            label = "per thread" if piece >= 3 * a.nbytes else f"pieces {piece >> 10}K"
            variants[label] = cpu_threads.make_kernel("add", {}, [a, b], out, threads=threads)
        cpu_threads.PIECE_BYTES = default
        if can_pin and isinstance(kernel, partial) and kernel.func != np.add:
            variants["pinned"] = partial(pinned_pool.share, kernel.args[0])
        if numexpr is not None:
            variants["numexpr"] = partial(numexpr.evaluate, "a + b", {"a": a, "b": b}, out=out)
        parts = max(1, min(threads, (2 * a.nbytes) // cpu_threads.MIN_CHUNK_BYTES))
        bounds = [n * i // parts for i in range(parts + 1)]
        copies = [
            partial(np.copyto, copy_out[lo:hi], a[lo:hi]) for lo, hi in zip(bounds, bounds[1:])
        ]
        variants["copy"] = partial(cpu_threads.workers(threads).run, copies)
        moved = {k: (2 if k == "copy" else 3) * a.nbytes for k in variants}
        budget = 0.05 if args.quick else 1.0
        once = min(timed(variants["numpy"], 3))
        reps = int(min(2000, max(3 if args.quick else 15, budget / max(once, 1e-7))))
        times: dict[str, list[float]] = {k: [] for k in variants}
        for fn in variants.values():
            fn()  # warm: pages touched, workers awake
        names = list(variants)
        for r in range(reps):  # interleaved, in an order that rotates: drift and the caches
            for k in names[r % len(names) :] + names[: r % len(names)]:  # land on all alike
                times[k] += timed(variants[k], 1)
        med = {k: statistics.median(v) for k, v in times.items()}
        np.testing.assert_allclose(out, a + b, rtol=1e-6)
        for k in variants:
            print(f"{n:>11} {k:<12} {med[k] * 1e6:>9.1f}us {moved[k] / med[k] / 1e9:>8.1f}")
        share = (moved["cpu_threads"] / med["cpu_threads"]) / (moved["copy"] / med["copy"])
        shares[e], costs[e] = share, med["cpu_threads"] / med["numpy"]
        print(
            f"{n:>11} cpu_threads add: {share:.0%} of the copy bandwidth, "
            f"{costs[e]:.2f}x numpy's time"
        )
    large = [shares[e] for e in shares if e >= 24]
    if large:
        verdict = "met" if min(large) >= 0.8 else "NOT met"
        print(
            f"target, 2^24 and up: at least 80% of the copy bandwidth: {verdict} "
            f"(lowest {min(large):.0%})"
        )
    if 12 in costs:
        verdict = "met" if costs[12] <= 2 else "NOT met"
        print(f"target, 2^12: at most 2x numpy's time: {verdict} ({costs[12]:.2f}x)")


if __name__ == "__main__":
    main()
