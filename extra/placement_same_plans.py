"""Which placements in a placement-benchmark run were one plan, step for step, and the graph
plan's gap to the fastest where they were not (reads the benchmark's raw CSV; no GPU needed).

The benchmark's first run timed its four placements in a fixed order, and at small sizes the
graph plan read 10-20% slower than an all-CPU plan that was step for step the same.  This
recompiles every case with allocate=False against the profile the run used, so that only the
cases whose fastest placement is a different plan count against the graph placement.

    python extra/placement_same_plans.py results/nvidia-h200/placement.csv.gz [--config CONFIG.soft]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import placement as bench  # noqa: E402

import softcuda as sc  # noqa: E402
from softcuda.config import load_config  # noqa: E402
from softcuda.planner import PLACEMENTS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--config", default="CONFIG.soft")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    config = load_config(args.config)
    medians = pd.read_csv(args.csv).groupby(["case", "placement"])["seconds"].median()
    ratios, distinct = [], []
    for name, _, build in bench.cases(quick=False):
        steps = {
            p: bench._steps(
                sc.compile(
                    build(), config=config, host_memory="pinned", placement=p, allocate=False
                )
            )
            for p in PLACEMENTS
        }
        times = {p: medians[(name, p)] for p in PLACEMENTS}
        fastest = min(times, key=times.get)
        ratio = times["graph"] / times[fastest]
        ratios.append(ratio)
        if steps[fastest] != steps["graph"]:
            distinct.append((ratio, name, fastest))
    print(
        f"cases: {len(ratios)}; graph / fastest: median {statistics.median(ratios):.3f}, "
        f"worst {max(ratios):.3f}, within 10% at {sum(r <= 1.10 for r in ratios)}"
    )
    print(f"where the fastest placement is a different plan: {len(distinct)} cases")
    for ratio, name, fastest in sorted(distinct, reverse=True):
        print(f"  {name:<34} graph / {fastest:<7} {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
