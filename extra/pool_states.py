"""Why a profile's cpu_threads prices can read high at cache-sized arrays: one op's plan timed
with its pool's threads in three states, beside what the profile says.

    python extra/pool_states.py [--config CONFIG.soft] [--ops add,tanh] [--min 14] [--max 22]

For each op and size (float32), a one-op plan on cpu_threads (``single_rule_config``) is timed
per call (median of 200, the first 20 apart):

* ``hot``: calls back to back, so the pool's threads are still spinning from the last call;
* ``idle 1ms``: each call after 1 ms of sleep, the threads asleep (they sleep after 200 us);
* ``idle 50us``: each call after 50 us of busy waiting, the threads yielding their cores;

and the profile's price of the op on cpu_threads at that size (``CostModel.resident_s``),
beside numpy's one-core time for scale (hot, and after 1 ms of sleep: a core that slept
may have slowed its clock).  A sweep times each backend's plan in rounds with the
other backends' plans between, so its threads are seldom hot; a plan's steps run back to back.
The answer is in docs/findings.md ("Pricing on the quick profile").
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import softcuda as sc
from softcuda.config import load_config, single_rule_config
from softcuda.costs import CostModel

REPS, WARM = 200, 20


def _median_us(run, before) -> float:
    for _ in range(WARM):
        before()
        run()
    times = []
    for _ in range(REPS):
        before()
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="the profile whose prices are shown")
    parser.add_argument("--ops", default="add,tanh")
    parser.add_argument("--min", type=int, default=14)
    parser.add_argument("--max", type=int, default=22)
    args = parser.parse_args()
    costs = CostModel(load_config(args.config)) if args.config else None
    rng = np.random.default_rng(0)
    print("us per call, float32, cpu_threads one-op plans (numpy: one core, for scale)")
    print(f"{'op':6s} {'size':>5s} {'hot':>8s} {'idle 50us':>10s} {'idle 1ms':>9s} "
          f"{'profile':>8s} {'numpy':>8s} {'idle 1ms':>9s}")  # fmt: skip
    for op in args.ops.split(","):
        for e in range(args.min, args.max + 1, 2):
            n = 1 << e
            x = rng.standard_normal(n, dtype=np.float32)
            y = rng.standard_normal(n, dtype=np.float32)
            tx, ty = sc.tensor(x), sc.tensor(y)
            node = tx + ty if op == "add" else getattr(sc, op)(tx)
            plan = sc.compile(node, single_rule_config(op, "cpu_threads"), fuse=False)

            def run(plan=plan):
                plan.evaluate(copy=False)

            hot = _median_us(run, lambda: None)
            spun = _median_us(run, lambda: _spin(50e-6))
            slept = _median_us(run, lambda: time.sleep(1e-3))
            out = np.empty_like(x)
            ufunc = np.add if op == "add" else getattr(np, op)

            def one_core(out=out, x=x, y=y, ufunc=ufunc):
                ufunc(x, y, out) if op == "add" else ufunc(x, out)

            numpy_us = _median_us(one_core, lambda: None)
            numpy_slept = _median_us(one_core, lambda: time.sleep(1e-3))
            price = costs.resident_s(op, "cpu_threads", n) if costs is not None else None
            priced = f"{price * 1e6:8.1f}" if price is not None else f"{'-':>8s}"
            print(f"{op:6s} 2^{e:<3d} {hot:8.1f} {spun:10.1f} {slept:9.1f} {priced} "
                  f"{numpy_us:8.1f} {numpy_slept:9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
