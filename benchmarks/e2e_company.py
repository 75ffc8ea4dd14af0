"""Does the company a CUDA plan is timed in change its end-to-end time?

In the sweep's raw rows a pinned end-to-end repetition of a small CUDA point takes one of two
times, about 12 us apart (exp at 46,341 elements on the H200: 21-24 us or 34-36 us), and the
share of slow repetitions moves from point to point and from attempt to attempt (38% to 77%),
so the median jumps between the two.  This script times one pinned plan (three copies, hot,
as ``Sweep.measure`` does) alone and in turns with each member of the sweep's company: the
same op's pageable plan, its CPU plan, and the host probe, then with all of them, and prints
the pinned plan's percentiles and its share of slow repetitions for each.

    python3 benchmarks/e2e_company.py [--reps 300]
"""

from __future__ import annotations

import argparse
from functools import partial
from types import SimpleNamespace

import numpy as np

from softcuda.config import single_rule_config
from softcuda.sweep.measure import Noise, compile_plan, one_op_graph, point_inputs
from softcuda.sweep.settle import probe
from softcuda.sweep.timers import interleaved

POINTS = [("exp", 46341, "cuda_elementwise", "cpu_fallback"),
          ("add", 8192, "cuda_elementwise", "cpu_fallback"),
          ("matmul", 128, "cuda_blas", "cpu_blas")]  # fmt: skip
COPIES = 3
SLOW_US = 6.0  # a repetition this much above the point's 10th percentile counts as slow


def plans(op: str, size: int, backend: str, kind: str, noise: Noise) -> list:
    masters, _, _ = point_inputs(op, size, np.dtype("float32"), noise)
    config = single_rule_config(op, backend)
    return [
        partial(compile_plan(one_op_graph(op, masters), config, kind).evaluate, copy=False)
        for _ in range(COPIES)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=args.reps, max_reps=args.reps)
    noise = Noise(np.random.default_rng(1))
    print(f"pinned end to end, us ({args.reps} repetitions over {COPIES} copies, hot); "
          f"slow: more than {SLOW_US:g} us above the 10th percentile")  # fmt: skip
    print(f"{'point':<34} {'company':<24} {'p10':>6} {'p25':>6} {'p50':>6} {'p75':>6} "
          f"{'p90':>6} {'slow':>5}")  # fmt: skip
    for op, size, cuda, cpu in POINTS:
        pinned = plans(op, size, cuda, "pinned", noise)
        others = {
            "pageable plan": [plans(op, size, cuda, "pageable", noise)],
            "CPU plan": [plans(op, size, cpu, "pageable", noise)],
            "probe": [[probe]],
        }
        everyone = [g for v in others.values() for g in v]
        cases = {"alone": [], **others, "all (as the sweep)": everyone}
        for name, company in cases.items():
            riders = 1 if company and company[-1] == [probe] else 0
            times = interleaved([pinned, *company], policy, hot=True, riders=riders)
            us = np.array([t for copy in times[0] for t in copy]) * 1e6
            p = np.percentile(us, [10, 25, 50, 75, 90])
            slow = float(np.mean(us > p[0] + SLOW_US))
            label = f"{op} {size:,} {cuda}"
            print(f"{label:<34} {name:<24} " + " ".join(f"{x:6.1f}" for x in p) + f" {slow:5.0%}")


if __name__ == "__main__":
    main()
