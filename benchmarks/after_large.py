"""Does a large point slow the small points measured after it in the same process?

Rechecks of the 20261201T061326Z reference (each a fresh process) read exp's CUDA end to end
at 63,287 elements as 27-29 us, where the sweep (which had measured add, mul and relu up to
2^28 elements before exp) read 35-37 us at 46,341 and 65,536.  (It does not: after / before
1.00 on the H200, results/nvidia-h200/e2e-modes/after-large.txt.)  This script measures a few
small points the way the sweep does (``Sweep.measure``, default.yaml's company and repetition
policy), then one 2^28-element add, then the same small points again, and prints the medians
per backend (pinned end to end and CPU wall) side by side.

    python3 benchmarks/after_large.py [--large 268435456] [--rounds 2] [--fresh] [--seed 1]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from softcuda.sweep.measure import Point
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import stats

SMALL = [("exp", 46341), ("exp", 63287), ("exp", 65536), ("exp", 79109), ("matmul", 169)]
POLICY = {"warmup": 1, "min_time_s": 0.02, "min_reps": 3, "max_reps": 200, "buffers": 3}


def medians(sweep: Sweep, points: list[tuple[str, int]], fresh=None) -> dict:
    """Median seconds per (op, size, backend); ``fresh()``, if given, makes a new Sweep for
    every point, as ``softcuda verify --recheck`` does."""
    out = {}
    for op, size in points:
        if fresh is not None:
            sweep = fresh()
        frame = pd.DataFrame(sweep.measure(Point(op, size, "*")), columns=sweep.frame().columns)
        cv = stats.curves(frame, "e2e_pinned")
        for row in cv.itertuples():
            out[op, size, row.backend] = row.median_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=1 << 28)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="a new Sweep for every point")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    spec = spec_from_dict(
        {"name": "after-large", "repetitions": POLICY, "settle_s": 0,
         "ops": {"exp": {"sizes": {"start": 1, "stop": 1, "per_octave": 1}},
                 "matmul": {"sizes": {"start": 1, "stop": 1, "per_octave": 1}},
                 "add": {"sizes": {"start": 1, "stop": 1, "per_octave": 1}}}},
        "<after-large>",
    )  # fmt: skip

    def new() -> Sweep:
        return Sweep(spec, "<after-large>", "/nonexistent", seed=args.seed)

    sweep, fresh = new(), (new if args.fresh else None)
    columns = {}
    for k in range(args.rounds):
        columns[f"fresh {k + 1}" if k == 0 else f"before {k + 1}"] = medians(sweep, SMALL, fresh)
        sweep.measure(Point("add", args.large, "*"))
        columns[f"after add {args.large:,} ({k + 1})"] = medians(sweep, SMALL, fresh)
    table = pd.DataFrame(columns) * 1e6
    table.index.names = ["op", "size", "backend"]
    print("median us, e2e pinned (CUDA) and wall (CPU), each point measured as the sweep does")
    print(table.round(1).to_string())
    ratio = table.iloc[:, 1::2].to_numpy() / table.iloc[:, 0::2].to_numpy()
    print(f"after / before: median {np.nanmedian(ratio):.2f}")


if __name__ == "__main__":
    main()
