"""Is the slow mode of small CUDA end-to-end calls the CPU the host thread happens to run on?

``e2e_company.py`` (deleted; docs/investigations.md) found that the company a plan is timed in
does not make its slow repetitions: they came and went from one process to the next.  The host
is a 16-vCPU KVM guest whose vCPUs run a 16 K numpy add at different speeds, changing over seconds
(results/nvidia-h200/stability/machine-speed.txt).  This script pins the timing thread to each
CPU in turn (``os.sched_setaffinity``), times one pinned plan there (exp at 46,341 elements,
three copies, hot, as the sweep does) and the host probe, and repeats the pass; then it times
the plan unpinned.  If the slow mode is the CPU's, each CPU's repetitions sit in one mode and
the unpinned ones mix them.

    python extra/e2e_per_cpu.py [--reps 150] [--passes 3]

Its output on the H200: results/nvidia-h200/e2e-modes/e2e-per-cpu.txt.  Without a usable GPU
it says why in one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from types import SimpleNamespace

import numpy as np

from softcuda.backends import cuda_available
from softcuda.config import single_rule_config
from softcuda.sweep.measure import Noise, compile_plan, one_op_graph, point_inputs
from softcuda.sweep.settle import probe
from softcuda.sweep.timers import interleaved, repeat

OP, SIZE, BACKEND, MEMORY = "exp", 46341, "cuda_elementwise", "pinned"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=150)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    ok, why = cuda_available()
    if not ok:
        print(f"e2e_per_cpu.py needs a usable CUDA GPU: {why}", file=sys.stderr)
        return 2
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=args.reps, max_reps=args.reps)
    noise = Noise(np.random.default_rng(1))
    masters, _, _ = point_inputs(OP, SIZE, np.dtype("float32"), noise)
    config = single_rule_config(OP, BACKEND)
    copies = [
        partial(compile_plan(one_op_graph(OP, masters), config, MEMORY).evaluate, copy=False)
        for _ in range(3)
    ]
    everywhere = sorted(os.sched_getaffinity(0))
    print(f"{OP} {SIZE:,} {BACKEND}, pinned end to end, us, per CPU the timing thread was "
          f"pinned to ({args.reps} repetitions); probe: 16 K numpy add, median us")  # fmt: skip
    print(f"{'pass':>4} {'cpu':>4} {'p10':>6} {'p50':>6} {'p90':>6} {'probe':>6}")
    medians: dict[int, list[float]] = {c: [] for c in everywhere}
    for k in range(args.passes):
        for cpu in everywhere:
            os.sched_setaffinity(0, {cpu})
            us = np.array([t for c in interleaved([copies], policy, hot=True)[0] for t in c]) * 1e6
            host = np.median(repeat(probe, SimpleNamespace(**{**vars(policy), "min_reps": 101,
                                                              "max_reps": 101}))) * 1e6  # fmt: skip
            p = np.percentile(us, [10, 50, 90])
            medians[cpu].append(float(p[1]))
            print(f"{k + 1:>4} {cpu:>4} " + " ".join(f"{x:6.1f}" for x in p) + f" {host:6.2f}")
        os.sched_setaffinity(0, everywhere)
        us = np.array([t for c in interleaved([copies], policy, hot=True)[0] for t in c]) * 1e6
        p = np.percentile(us, [10, 50, 90])
        print(f"{k + 1:>4} {'any':>4} " + " ".join(f"{x:6.1f}" for x in p))
    spread = [max(v) / min(v) for v in medians.values()]
    best = min(min(v) for v in medians.values())
    print(f"per CPU, slowest / fastest median over the passes: {np.median(spread):.2f} "
          f"(median over CPUs), best median {best:.1f} us")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
