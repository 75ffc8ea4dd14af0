"""Wait for the machine to run at a steady speed before a sweep measures anything.

A freshly started machine is not yet at the speed it will keep: it runs its first seconds
slower, and a sweep that measured at once would time its first points on a slower machine than
its last (``benchmarks/stability.py`` times the workloads below before, between and after its
two sweeps; docs/method.md, "Settling").  ``settle`` times a few fixed workloads — CPU compute,
CPU memory, the BLAS threads and, with a GPU, a kernel — in short windows, and returns once
each workload's last ``WINDOWS`` window medians agree within ``STEADY``, or when ``max_s`` is
spent (then ``steady`` is False, and the sweep says so and records it).  ``canary`` times the same
workloads once, to show whether the machine moved between two runs.

Settling is not enough on a shared host: a virtual machine's CPU speed moves by itself, in
spells of seconds to tens of seconds, even with nothing else running (``extra/machine_speed.py``;
docs/findings.md, "How far to trust the numbers").  So the sweep also times ``probe``, a fixed
16 K-element add, as one more group in every point's rounds, and keeps its repetitions as rows
(backend "machine", phase "probe"): each point carries the host's speed while it was measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..pool import on_page
from .timers import repeat

WINDOW_S = 0.1
"""Each workload is timed for about this long per window."""

WINDOWS = 3
STEADY = 0.05
"""Steady: the last WINDOWS window medians of every workload are within 5% of each other."""


@dataclass
class Settled:
    """What ``settle`` saw: seconds spent, whether it reached a steady speed, and each
    workload's window medians in microseconds, in the order taken."""

    seconds: float
    steady: bool
    windows: dict[str, list[float]] = field(default_factory=dict)
    off: bool = False  # settle_s was 0: nothing was timed

    def spread(self) -> dict[str, float]:
        """Each workload's spread over its last WINDOWS windows (max / min - 1)."""
        return {k: max(v[-WINDOWS:]) / min(v[-WINDOWS:]) - 1 for k, v in self.windows.items() if v}

    def to_dict(self) -> dict:
        if self.off:
            return {"off": True}
        return {
            "seconds": round(self.seconds, 2),
            "steady": self.steady,
            "window_median_us": {k: [round(x, 3) for x in v] for k, v in self.windows.items()},
        }

    def summary(self) -> str:
        """One line: how long it took and how each workload's speed moved."""
        if self.off:
            return "settling off (settle_s 0): measuring at once"
        moves = ", ".join(
            f"{k} {_us(v[0])} -> {_us(v[-1])} us" for k, v in self.windows.items() if v
        )
        if self.steady:
            return f"machine steady after {self.seconds:.1f} s ({moves})"
        short = min((len(v) for v in self.windows.values()), default=0) < WINDOWS
        spread = ", ".join(f"{k} {s:.0%}" for k, s in self.spread().items() if s > STEADY)
        why = (
            f"fewer than {WINDOWS} windows"
            if short
            else f"last {WINDOWS} windows differ by {spread}"
        )
        return f"machine not steady after {self.seconds:.1f} s ({why}); measuring anyway ({moves})"


def _us(x: float) -> str:
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


def operands(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a, b (random) and c (empty) float32 arrays of ``n``, each on its own page at a fixed
    offset (0, 1 KiB, 2 KiB): how far apart they sit modulo 4 KiB decides 4K aliasing, and a
    fixed workload must not change speed with where the C allocator put it."""
    rng = np.random.default_rng(0)
    out = [on_page(4 * n, offset).view(np.float32) for offset in (0, 1024, 2048)]
    out[0][:] = rng.standard_normal(n, dtype=np.float32)
    out[1][:] = rng.standard_normal(n, dtype=np.float32)
    return out[0], out[1], out[2]


def workloads(cuda: bool) -> dict[str, Callable[[], float]]:
    """Fixed workloads, each a function that runs once and returns its own seconds."""
    rng = np.random.default_rng(0)
    out: dict[str, Callable[[], float]] = {}
    for n in (1 << 14, 1 << 22):
        a, b, c = operands(n)
        out[f"cpu add 2^{n.bit_length() - 1}"] = _wall(lambda a=a, b=b, c=c: np.add(a, b, out=c))
    x, y = rng.standard_normal((2, 256, 256), dtype=np.float32)
    z = np.empty_like(x)
    out["cpu matmul 256"] = _wall(lambda: np.matmul(x, y, out=z))
    if cuda:
        import cupy

        g = cupy.ones(1 << 24, dtype=cupy.float32)
        h = cupy.empty_like(g)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()

        def gpu_add() -> float:
            start.record()
            cupy.add(g, g, out=h)
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) * 1e-3

        out["gpu add 2^24"] = gpu_add
    return out


def _wall(fn: Callable[[], object]) -> Callable[[], float]:
    def timed() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return timed


PROBE = "cpu add 2^14"
_probe_data: list[np.ndarray] = []


def probe() -> None:
    """One call of the probe workload (``PROBE``) on fixed arrays, untimed: the runner times it
    alongside the point's backends."""
    if not _probe_data:
        _probe_data.extend(operands(1 << 14))
    a, b, c = _probe_data
    np.add(a, b, out=c)


def host_time(calls: int = 201) -> float:
    """Median seconds of ``calls`` calls of ``probe`` timed by ``timers.repeat`` (one warm-up,
    each call right after one of itself, the garbage collector paused): the host's speed now,
    read alone.  The retry gate compares such readings only with each other: a point's probe
    rows, timed between its backends' calls, read slower beside CUDA plans that sleep in
    ``synchronize`` (docs/method.md, "Measuring again")."""
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=calls, max_reps=calls)
    return float(np.median(repeat(probe, policy)))


def keep_busy(seconds: float) -> None:
    """Run the probe for ``seconds``: a wait that keeps the CPU as busy as measuring does (an
    idle CPU may wake slower, and read slower than the readings taken right after points)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        probe()


def wait_for_host(
    best_s: float,
    tolerance: float,
    max_s: float,
    *,
    measure: Callable[[], float] = host_time,
    sleep: Callable[[float], None] = keep_busy,
    clock: Callable[[], float] = time.monotonic,
    step_s: float = 0.25,
) -> tuple[float, bool]:
    """Wait, at most ``max_s``, until ``measure()`` (the probe) takes at most ``best_s`` times
    1 + ``tolerance``; returns the seconds waited after the first reading (0 when that one is
    already fast) and whether the host ended fast.  With ``max_s`` 0 it reads once.
    Re-measuring a point that was timed in one of the host's slow spells only helps once the
    spell is over, and they last tens of seconds: a retry pass asks here before each point."""
    if measure() <= best_s * (1 + tolerance):
        return 0.0, True
    began = clock()
    while True:
        waited = clock() - began
        if waited >= max_s:
            return waited, False
        sleep(min(step_s, max_s - waited))
        if measure() <= best_s * (1 + tolerance):
            return clock() - began, True


def window(fn: Callable[[], float], seconds: float) -> float:
    """Median microseconds of ``fn`` run for about ``seconds`` (at least 5 times)."""
    reps: list[float] = []
    end = time.perf_counter() + seconds
    while len(reps) < 5 or time.perf_counter() < end:
        reps.append(fn())
    return 1e6 * float(np.median(reps))


def settle(
    cuda: bool,
    max_s: float,
    *,
    work: dict[str, Callable[[], float]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Settled:
    """Time the workloads window after window until they are steady or ``max_s`` is spent."""
    if max_s <= 0:  # (before the workloads are made: their arrays, and CuPy with a GPU)
        return Settled(0.0, False, off=True)
    work = workloads(cuda) if work is None else work
    result = Settled(0.0, False, {name: [] for name in work})
    began = clock()
    while True:
        for name, fn in work.items():
            result.windows[name].append(window(fn, WINDOW_S))
        result.seconds = clock() - began
        recent = [v[-WINDOWS:] for v in result.windows.values()]
        if all(len(r) == WINDOWS and max(r) <= min(r) * (1 + STEADY) for r in recent):
            result.steady = True
            return result
        if result.seconds >= max_s:
            return result


def canary(cuda: bool, seconds: float = 0.3) -> dict[str, float]:
    """Each workload's median microseconds over about ``seconds``."""
    return {name: window(fn, seconds) for name, fn in workloads(cuda).items()}
