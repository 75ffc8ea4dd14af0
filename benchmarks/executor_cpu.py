"""Executor and compiler overhead on the CPU (a benchmark, not a test; prints figures).

1. evaluate() time per node for a chain of tiny ops, one kernel per node (``fuse=False``), as a
   ratio to a plain Python loop making the same numpy calls on preallocated outputs (target
   <= 1.5);
2. compile() time per node for a long chain, fused as compile does by default (target <= 20 us);
3. what whole-graph placement adds to compile() per node on that chain, placed and priced
   against a GPU profile with costs (target <= 20 us).  The profile is synthetic (costs from
   a simple formula, a 50 GB/s bus) and the plans are made with ``allocate=False``, so this
   runs on any machine; the solver's time does not depend on what the costs are.

    python benchmarks/executor_cpu.py [--nodes 10000] [--compile-nodes 100000] [--repeat 15]
    python benchmarks/executor_cpu.py --quick     # small chains: a smoke run of seconds (CI)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import numpy as np

import softcuda as sc
from softcuda.config import Config, CostCurve


def chain(n: int, width: int) -> tuple[sc.Tensor, sc.Tensor]:
    """n op nodes, alternating add (with one shared leaf) and tanh: n + 1 nodes in all."""
    x = sc.randn((width,), seed=1)
    y = x
    for i in range(n):
        y = y + x if i % 2 == 0 else sc.tanh(y)
    return x, y


def median_time(fn, repeat: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    reps = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        reps.append(time.perf_counter() - t0)
    return statistics.median(reps), reps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--compile-nodes", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=4, help="elements per tensor (tiny ops)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--quick", action="store_true", help="200 and 2,000 nodes, 3 repeats (a smoke run)"
    )
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.compile_nodes, args.repeat = 200, 2_000, 3
    config = sc.default_config()

    _, out = chain(args.nodes, args.width)
    # one kernel per node, as the loops below call numpy per op: the executor's own cost per
    # step (fused, the chain would be a few kernels)
    plan = sc.compile(out, config=config, fuse=False)
    t_plan, _ = median_time(lambda: plan.evaluate(copy=False), args.repeat)

    # the same numpy calls, preallocated outputs, in a plain loop
    a = np.random.default_rng(1).standard_normal(args.width).astype(np.float32)
    bufs = [np.empty_like(a) for _ in range(2)]

    def plain() -> None:
        src = a
        for i in range(args.nodes):
            dst = bufs[i % 2]
            if i % 2 == 0:
                np.add(src, a, out=dst)
            else:
                np.tanh(src, out=dst)
            src = dst

    t_plain, _ = median_time(plain, args.repeat)

    # the leanest loop Python allows: the calls and their arguments listed up front
    calls = []
    src = a
    for i in range(args.nodes):
        dst = bufs[i % 2]
        calls.append((np.add, (src, a, dst)) if i % 2 == 0 else (np.tanh, (src, dst)))
        src = dst

    def listed() -> None:
        for fn, fn_args in calls:
            fn(*fn_args)

    t_listed, _ = median_time(listed, args.repeat)

    _, big = chain(args.compile_nodes, args.width)
    compile_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        big_plan = sc.compile(big, config=config)
        compile_times.append(time.perf_counter() - t0)
    t_compile = statistics.median(compile_times)
    t0 = time.perf_counter()
    big_plan.evaluate()
    t_big_eval = time.perf_counter() - t0

    costed = gpu_profile_with_costs()
    placed_times, unplaced_times = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        sc.compile(big, config=config, allocate=False)  # per-op: no costs, no planner
        unplaced_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        placed = sc.compile(big, config=costed, allocate=False, placement="graph")
        placed_times.append(time.perf_counter() - t0)
    t_placement = statistics.median(placed_times) - statistics.median(unplaced_times)
    on_gpu = sum(s.device == "cuda" for s in placed.steps if s.kind == "kernel")
    kernels = sum(s.kind == "kernel" for s in placed.steps)  # fused groups: fewer than nodes

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    print(f"{'measure':<46} {'value':>12}  target")
    print(
        f"{'evaluate, per node (' + str(args.nodes) + '-node chain)':<46} "
        f"{t_plan / args.nodes * 1e6:>9.3f} us"
    )
    print(f"{'plain numpy loop, per call':<46} {t_plain / args.nodes * 1e6:>9.3f} us")
    print(f"{'prelisted numpy calls, per call':<46} {t_listed / args.nodes * 1e6:>9.3f} us")
    print(f"{'ratio evaluate / plain loop':<46} {t_plan / t_plain:>12.3f}  <= 1.5")
    print(f"{'ratio evaluate / prelisted calls':<46} {t_plan / t_listed:>12.3f}")
    print(
        f"{'compile, per node (' + str(args.compile_nodes) + '-node chain)':<46} "
        f"{t_compile / args.compile_nodes * 1e6:>9.3f} us  <= 20 us"
    )
    print(
        f"{'evaluate once, per node (same chain)':<46} "
        f"{t_big_eval / args.compile_nodes * 1e6:>9.3f} us"
    )
    print(
        f"{'graph placement added to compile, per node':<46} "
        f"{t_placement / args.compile_nodes * 1e6:>9.3f} us  <= 20 us"
        f"  ({on_gpu} of its {kernels} kernels placed on the GPU)"
    )
    return 0


def gpu_profile_with_costs() -> Config:
    """DEFAULT.soft made a GPU profile with costs for add and tanh (a CPU call costs 1 us + 1 ns
    per element, a GPU kernel 4 us + 2 ps) and a 50 GB/s, 8 us bus."""
    cfg = dataclasses.replace(sc.default_config(), path="synthetic-gpu.soft")
    cfg.device = {"type": "cuda"}
    sizes = tuple(4**k for k in range(2, 13))
    cfg.costs = {
        op: {
            backend: CostCurve(op, sizes, tuple(fixed + per * n for n in sizes))
            for backend, fixed, per in (
                ("cpu_fallback", 1e-6, 1e-9),
                ("cuda_elementwise", 4e-6, 2e-12),
            )
        }
        for op in ("add", "tanh")
    }
    cfg.bus = {
        f"{d}_{k}_{w}": v
        for d in ("h2d", "d2h")
        for k in ("pinned", "pageable")
        for w, v in (("gbps", "50"), ("latency_us", "8"))
    }
    cfg._device_checked = True
    return cfg


if __name__ == "__main__":
    raise SystemExit(main())
