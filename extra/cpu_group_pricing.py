"""Fused CPU chains: the cost model's price against their measured time, with and without the
profile's chain variants (``ops.CHAINS``: a fused group of eight terms of each heavy op).

Question: does a group's price from the measured chains (``CostModel._cpu_member_s``) track
what fused CPU kernels take better than the older rule, each further heavy member at its lone
curve's top slope?  The answer is in docs/investigations.md ("Pricing a fused CPU group").

    python extra/cpu_group_pricing.py --config CONFIG.soft

The profile must be this machine's and hold cpu_threads curves of the chains (a quick sweep
since they were added).  Each graph is compiled all on the CPU, timed on the host clock (its
output left in the plan's buffer, as the sweep times a plan), and both prices are printed over
the median time.  Exit 2 where the profile has no chains.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import softcuda as sc
from softcuda.analysis.chains import chain_graph
from softcuda.config import load_config
from softcuda.ops import CHAINS


def heavy_chain(k: int, n: int):
    """k heavy ops in turn (tanh, exp, sigmoid), each of its input halved."""
    y = sc.randn((n,), seed=1)
    for i in range(k):
        y = (sc.tanh, sc.exp, sc.sigmoid)[i % 3](y * 0.5)
    return y


def median_s(plan, reps: int) -> float:
    plan.evaluate(copy=False)
    plan.evaluate(copy=False)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        plan.evaluate(copy=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="CONFIG.soft", help="this machine's profile")
    parser.add_argument("--reps", type=int, default=15, help="timed calls per graph")
    parser.add_argument("--max", type=int, default=22, help="largest size, as a power of 2")
    args = parser.parse_args()
    with_chains = load_config(args.config)
    if not any("cpu_threads" in with_chains.costs.get(name, {}) for name in CHAINS):
        print(f"{args.config} has no cpu_threads curves of the chains ({', '.join(CHAINS)})")
        return 2
    without = copy.deepcopy(with_chains)
    for name in CHAINS:
        without.costs.pop(name, None)
    print(f"# python extra/cpu_group_pricing.py --config {args.config}")
    print(f"# {os.cpu_count()} CPUs; profile: {with_chains.meta.get('hash_string')}")
    print(f"{'chain':>6} {'k':>3} {'size':>6} {'measured':>12} {'old/meas':>9} {'new/meas':>9}")
    errors: dict[str, list[float]] = {"old": [], "new": []}
    for family in ("unary", "mixed", "heavy"):
        for k in (4, 8, 16):
            for e in range(12, args.max + 1, 2):
                n = 1 << e
                graph = heavy_chain(k, n) if family == "heavy" else chain_graph(family, k, n)
                new = sc.compile(graph, with_chains, placement="cpu")
                old = sc.compile(graph, without, placement="cpu", allocate=False)
                seconds = median_s(new, args.reps)
                ratios = {"old": old.predicted_s / seconds, "new": new.predicted_s / seconds}
                for name, ratio in ratios.items():
                    errors[name].append(abs(ratio - 1))
                print(
                    f"{family:>6} {k:3d} {'2^' + str(e):>6} {seconds * 1e6:10.1f}us "
                    f"{ratios['old']:9.2f} {ratios['new']:9.2f}",
                    flush=True,
                )
    for name, found in errors.items():
        print(
            f"{name}: |predicted/measured - 1| median {statistics.median(found):.1%}, "
            f"worst {max(found):.1%} over {len(found)} graphs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
