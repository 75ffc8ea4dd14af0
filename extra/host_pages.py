"""Does how the host memory is backed move the millisecond CPU points?

The stability checks miss most often at CPU points of 4-16 MiB that run a millisecond or more
(sum and relu on cpu_fallback at 1.5-4 M elements moved by up to 51% between two sweeps, and
a point's attempts within one sweep by up to 1.7x). Each attempt gets fresh pool blocks, so
one candidate is the memory under them: whether the kernel backs a block with 2 MiB pages
(transparent huge pages) depends on where the block lands and what memory is free.

In rounds, this times numpy's sum and add on buffers of each kind, made afresh every round
(interleaved, so drift in the host lands on every kind alike), and one set of buffers made
once (the host's drift alone); with CuPy, also a synchronous pageable host-to-device copy of
one buffer, which the driver stages through the CPU:
  on_page     the host pool's blocks (softcuda.pool.on_page), as the sweep allocates them
  huge        an anonymous mapping on a 2 MiB boundary with madvise(MADV_HUGEPAGE)
  small       the same with madvise(MADV_NOHUGEPAGE)
  fixed       on_page buffers made once, before the first round
For each it prints the median over rounds of the per-round medians, their range and the
range of the 2 MiB-page share of the buffers (from /proc/self/smaps).

    python extra/host_pages.py [--rounds 10] [--calls 30]
"""

from __future__ import annotations

import argparse
import mmap
import re
import time

import numpy as np

from softcuda.pool import on_page

HUGE = 2 * 1024 * 1024
SIZES = (1 << 20, 2 << 20, 4 << 20)  # float32 elements: 4, 8 and 16 MiB a buffer
KINDS = ("on_page", "huge", "small", "fixed")


def mapped(nbytes: int, advice: int) -> tuple[np.ndarray, mmap.mmap]:
    """``nbytes`` from a fresh anonymous mapping, starting on a 2 MiB boundary, advised."""
    # private: a shared anonymous mapping is shmem, whose 2 MiB pages follow another setting
    mm = mmap.mmap(-1, nbytes + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(mm, dtype=np.uint8)
    skip = (-raw.ctypes.data) % HUGE
    mm.madvise(advice, skip - skip % mmap.PAGESIZE, nbytes + HUGE - skip)
    return raw[skip : skip + nbytes], mm


def huge_share(arrays: list[np.ndarray]) -> float:
    """Share of the arrays' bytes in mappings backed by 2 MiB pages (AnonHugePages)."""
    spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays]
    huge_kb = total_kb = 0
    lo = hi = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                inside = any(s < hi and e > lo for s, e in spans)
            elif inside and line.startswith("AnonHugePages:"):
                huge_kb += int(line.split()[1])
                total_kb += (hi - lo) // 1024
    return huge_kb / total_kb if total_kb else float("nan")


def buffers(kind: str, n: int, noise: np.ndarray):
    nbytes = n * 4
    keep = []
    out = []
    for _ in range(3):  # x, y, z
        if kind == "on_page":
            raw = on_page(nbytes)
        else:
            advice = mmap.MADV_HUGEPAGE if kind == "huge" else mmap.MADV_NOHUGEPAGE
            raw, mm = mapped(nbytes, advice)
            keep.append(mm)
        out.append(raw.view(np.float32))
    x, y, z = out
    x[:] = noise[:n]
    y[:] = noise[n : 2 * n]
    z[:] = 0.0
    return (x, y, z), keep


def h2d(device, x: np.ndarray) -> None:
    """A synchronous host-to-device copy of ``x`` (pageable) into ``device``."""
    import cupy

    cupy.cuda.runtime.memcpy(device.data.ptr, x.ctypes.data, x.nbytes, 1)  # 1: host to device


def hot_median(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        fn()  # untimed: the data hot, as the sweep times points up to 64 MiB
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def time_ops(arrays, device, calls: int) -> dict[str, float]:
    """Hot medians (s) of the ops on one set of buffers (x, y, z)."""
    x, y, z = arrays
    ops = {"sum": lambda: np.sum(x), "add": lambda: np.add(x, y, out=z)}
    if device is not None:  # a pageable copy: the driver stages it through the CPU
        ops["h2d"] = lambda: h2d(device, x)
    return {op: hot_median(fn, calls) for op, fn in ops.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    for path in ("enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{path}") as f:
                print(f"transparent_hugepage/{path}: {f.read().strip()}")
        except OSError as exc:
            print(f"transparent_hugepage/{path}: unreadable ({exc.strerror})")
    noise = np.random.default_rng(0).standard_normal(2 * max(SIZES), dtype=np.float32)
    device = None
    try:
        import cupy

        device = cupy.empty(max(SIZES), dtype=cupy.float32)
    except Exception as exc:  # no CuPy or no GPU: the CPU ops only
        print(f"no pageable copies timed: {type(exc).__name__}: {exc}")
    started = time.perf_counter()
    fixed = {n: buffers("on_page", n, noise) for n in SIZES}
    times: dict[tuple, list[float]] = {}
    shares: dict[tuple, list[float]] = {}
    for r in range(args.rounds):
        for n in SIZES:
            for kind in KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]:  # turns, as the sweep
                arrays, keep = fixed[n] if kind == "fixed" else buffers(kind, n, noise)
                shares.setdefault((kind, n), []).append(huge_share(list(arrays)))
                for op, t in time_ops(arrays, device, args.calls).items():
                    times.setdefault((op, n, kind), []).append(t)
                del arrays, keep  # the mappings go before the next kind's are made
    print(
        f"\n{args.rounds} rounds in {time.perf_counter() - started:.0f} s, {args.calls} hot calls "
        "each; per-round medians in us"
    )
    print(
        f"{'op':4} {'elements':>9} {'kind':8} {'median':>9} {'min':>9} {'max':>9} "
        f"{'max/min':>7}  2 MiB pages"
    )
    for op in sorted({key[0] for key in times}, key=("sum", "add", "h2d").index):
        for n in SIZES:
            for kind in KINDS:
                t = np.array(times[(op, n, kind)]) * 1e6
                s = np.array(shares[(kind, n)])
                print(
                    f"{op:4} {n:>9} {kind:8} {np.median(t):9.1f} {t.min():9.1f} {t.max():9.1f} "
                    f"{t.max() / t.min():7.2f}  {np.nanmin(s):.0%}-{np.nanmax(s):.0%}"
                )


if __name__ == "__main__":
    main()
