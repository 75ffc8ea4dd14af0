"""Why does the sweep read cpu_threads slower above ROTATE_MAX_BYTES than a plan in use runs?

An investigation for the profile's large sizes.  In the placement benchmark
(``results/nvidia-h200/placement.txt``) the all-CPU plans of one tanh and one relu at 2^24
elements ran in 2.2 ms, where the reference's [costs] say 3.75 ms (tanh) and 5.1 ms (relu): the
graph plan went to the GPU (2.5 ms) and read 1.14 of the fastest.  Above ROTATE_MAX_BYTES the
sweep times a point once per round, cold (no untimed call before each timed one), on one set of
leaves, and never measures it again; below, it times it hot and retries points whose probe read
the host slow.  This times cpu_threads' plan of one op at sizes around that limit, in pageable
host memory, five ways:

    alone     back-to-back calls of the plan (``timers.per_call``), as a plan in use runs
    evicted   each call after streaming 1 GiB through the CPU (its data out of every cache)
    cold      the sweep's rounds above the limit: cpu_fallback, cpu_threads and the CUDA plan
              (pinned) in turns, each timed once a round, the probe riding along
    hot       the same rounds, each timed call right after an untimed call of itself (the
              sweep's way below the limit)
    turns     the placement benchmark's way: the cpu_threads and CUDA plans in blocks, in turns

and the probe's median in the cold and hot rounds (``settle.probe``: the host's speed as the
sweep records it).  Run it on the GPU machine (CPU columns only without one):

    python extra/large_cpu.py [--ops tanh relu] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from functools import partial
from types import SimpleNamespace

import numpy as np

import softcuda as sc
from softcuda.backends import cuda_available
from softcuda.config import single_rule_config
from softcuda.ops import OPS
from softcuda.sweep.settle import probe
from softcuda.sweep.timers import in_turns, interleaved, per_call, wall


def graph(op: str, x: sc.Tensor) -> sc.Tensor:
    return getattr(sc, op)(*([x] * OPS[op].arity))


def plan_of(op: str, x: sc.Tensor, backend: str, memory: str = "pageable"):
    return sc.compile(
        graph(op, x), config=single_rule_config(op, backend), host_memory=memory, placement="per-op"
    )


def caches() -> str:
    """The host's cache sizes as Linux reports them (cpu0), one line."""
    found = []
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(f"{base}/{index}/level") as f:
                level = f.read().strip()
            with open(f"{base}/{index}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{index}/size") as f:
                size = f.read().strip()
            with open(f"{base}/{index}/shared_cpu_list") as f:
                shared = f.read().strip()
        except OSError:
            continue
        found.append(f"L{level} {kind} {size} (cpus {shared})")
    return "; ".join(found) or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", default=["tanh", "relu"])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    gpu, _ = cuda_available()
    print("caches:", caches())
    print(f"cores: {os.cpu_count()}; medians in ms, {args.rounds} repetitions each")
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=args.rounds, max_reps=args.rounds)
    flood = np.ones(1 << 28, dtype=np.float32)  # 1 GiB
    cols = ("alone", "evicted", "cold", "hot", "turns", "probe cold", "probe hot")
    print(f"{'op':>5} {'n':>10} {'MiB':>5} " + " ".join(f"{c:>10}" for c in cols))
    for op in args.ops:
        for n in (1 << 21, 1 << 22, 1 << 23, 3 << 22, 1 << 24, 1 << 25):
            x = sc.tensor(np.random.default_rng(n).standard_normal(n, dtype=np.float32))
            threads = plan_of(op, x, "cpu_threads")
            one = plan_of(op, x, "cpu_fallback")
            cuda = plan_of(op, x, "cuda_elementwise", "pinned") if gpu else None
            ms = {}
            alone = [per_call(threads, 1) for _ in range(2)]  # warm
            alone = [per_call(threads, 1) for _ in range(args.rounds)]
            ms["alone"] = statistics.median(alone)
            evicted = []
            for _ in range(args.rounds):
                float(flood.sum())
                evicted.append(wall(partial(threads.evaluate, copy=False)))
            ms["evicted"] = statistics.median(evicted)
            groups = [[partial(p.evaluate, copy=False)] for p in (one, threads, cuda) if p]
            for name, hot in (("cold", False), ("hot", True)):
                times = interleaved(groups + [[probe]], policy, hot=hot, riders=1)
                ms[name] = statistics.median(times[1][0])
                ms[f"probe {name}"] = statistics.median(times[-1][0])
            if cuda is not None:
                _, taken = in_turns({"cpu": threads, "cuda": cuda}, args.rounds)
                ms["turns"] = statistics.median(s for who, _, s in taken if who == "cpu")
            cells = " ".join(
                f"{ms[c] * 1e3:10.3f}"
                if c in ms and not c.startswith("probe")
                else (f"{ms[c] * 1e6:8.2f}us" if c in ms else f"{'-':>10}")
                for c in cols
            )
            data = (OPS[op].arity + 1) * 4 * n >> 20  # inputs and output, float32
            print(f"{op:>5} {n:>10} {data:>5} {cells}", flush=True)
            del threads, one, cuda, x
    return 0


if __name__ == "__main__":
    sys.exit(main())
