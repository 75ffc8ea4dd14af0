"""Why a sweep's small CPU points can read slower than the same op inside a plan: one op timed
the sweep's way (each call on the host clock) beside blocks of back-to-back calls.

    python extra/timer_offset.py [--ops add,tanh] [--min 10] [--max 18] [--backends B1,B2]

It prints the host's clock source and what one ``time.perf_counter`` costs, and what the
sweep's ``wall`` reads around a call that does nothing.  Then, per op, size and CPU backend
(float32, one-op plans from ``single_rule_config``, three copies of the data as a sweep's
``buffers: 3``):

* ``single``: ``timers.interleaved`` as ``measure.time_point`` called it before short calls
  were timed in blocks (hot, the pool woken before each timed call where the sweep wakes it,
  no ``block_s``): the median single call;
* ``block``: the median over blocks of back-to-back calls lasting at least 0.2 ms each, as the
  placement benchmark times plans (``timers.per_call``);
* ``gap``: the two apart.  A gap as large as the empty call's reading at every size is the
  clock's (a host whose clock source is read through the kernel); one that grows with the size
  is the threads' or the caches'.

The answer is in docs/findings.md ("Pricing on the quick profile").
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from softcuda.config import single_rule_config
from softcuda.sweep import timers
from softcuda.sweep.measure import _settle, compile_plan, one_op_graph

CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")


def clock_figures() -> tuple[str, float, float]:
    """(clock source, ns per perf_counter call, median ns of ``timers.wall`` on a no-op)."""
    source = CLOCKSOURCE.read_text().strip() if CLOCKSOURCE.exists() else "unknown"
    pc, n = time.perf_counter, 200_000
    t0 = pc()
    for _ in range(n):
        pc()
    per_read = (pc() - t0) / n
    empty = statistics.median(timers.wall(lambda: None) for _ in range(20_000))
    return source, per_read * 1e9, empty * 1e9


def one(op: str, size: int, backend: str, rng: np.random.Generator) -> tuple[float, float]:
    """(single-call median, block median) seconds of one op's plan on ``backend``."""
    arity = 2 if op in ("add", "sub", "mul", "div") else 1
    config = single_rule_config(op, backend)
    copies = []
    for _ in range(3):
        masters = [rng.random(size, dtype=np.float32) + 0.5 for _ in range(arity)]
        copies.append(compile_plan(one_op_graph(op, masters), config, "pageable"))
    policy = SimpleNamespace(warmup=2, min_time_s=0.02, min_reps=30, max_reps=300)
    calm = _settle(backend, op, size)
    times = timers.interleaved([[partial_eval(p) for p in copies]], policy, hot=True, settle=[calm])
    sweep = statistics.median(t for series in times[0] for t in series)
    fastest = min(timers.per_call(copies[0], 1) for _ in range(5))
    calls = timers.block_calls(fastest)
    block = statistics.median(timers.per_call(copies[i % 3], calls) for i in range(30))
    return sweep, block


def partial_eval(plan):
    return lambda: plan.evaluate(copy=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="add,tanh")
    parser.add_argument("--min", type=int, default=10, help="smallest size, log2")
    parser.add_argument("--max", type=int, default=18, help="largest size, log2")
    parser.add_argument("--backends", default="cpu_fallback,cpu_threads")
    args = parser.parse_args()
    source, read_ns, empty_ns = clock_figures()
    print(
        f"clock source {source}; perf_counter {read_ns:.0f} ns a call; "
        f"wall() of a no-op {empty_ns:.0f} ns (median)"
    )
    rng = np.random.default_rng(7)
    head = ("op", "size", "backend", "single", "block", "gap", "ratio")
    print("{:<6} {:>8} {:<13} {:>9} {:>9} {:>9} {:>6}".format(*head))
    for op in args.ops.split(","):
        for e in range(args.min, args.max + 1, 2):
            for backend in args.backends.split(","):
                sweep, block = one(op, 2**e, backend, rng)
                print(
                    f"{op:<6} {'2^' + str(e):>8} {backend:<13} {sweep * 1e6:8.2f}u "
                    f"{block * 1e6:8.2f}u {(sweep - block) * 1e6:8.2f}u "
                    f"{sweep / block if block > 0 else math.nan:6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
