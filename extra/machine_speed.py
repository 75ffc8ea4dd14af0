"""How steady is this machine's CPU?  Times a fixed 16 K-element numpy add on each CPU in turn
(the thread pinned with sched_setaffinity), round after round, and prints one line per round:
the median microseconds on every CPU.  Shows whether a slow spell hits every CPU at once (the
host's clocks) or some CPUs only (a neighbour on a sibling hyperthread), and how long it lasts.

    python extra/machine_speed.py [--seconds 120] [--window 0.02]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from softcuda.sweep.settle import operands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--window", type=float, default=0.02, help="seconds per CPU per round")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    a, b, c = operands(1 << 14)  # the probe's workload, operands at fixed page offsets
    print(f"cpus {cpus}; median us of a 16 K add per CPU, one line per round")
    print("t_s    " + " ".join(f"{x:>5}" for x in cpus) + "   min   max")
    began = time.monotonic()
    table = []
    while time.monotonic() - began < args.seconds:
        row = []
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            reps = []
            end = time.perf_counter() + args.window
            while time.perf_counter() < end or len(reps) < 5:
                t0 = time.perf_counter()
                np.add(a, b, out=c)
                reps.append(time.perf_counter() - t0)
            row.append(1e6 * float(np.median(reps)))
        table.append(row)
        t = time.monotonic() - began
        print(
            f"{t:6.1f} " + " ".join(f"{x:5.2f}" for x in row) + f" {min(row):5.2f} {max(row):5.2f}"
        )
    os.sched_setaffinity(0, set(cpus))
    arr = np.array(table)
    print("per CPU over all rounds: median " + " ".join(f"{x:5.2f}" for x in np.median(arr, 0)))
    print(
        "per CPU over all rounds: max/min " + " ".join(f"{x:5.2f}" for x in arr.max(0) / arr.min(0))
    )
    fast = arr.min()
    print(
        f"share of (round, cpu) samples within 10% of the fastest ({fast:.2f} us): "
        f"{(arr <= fast * 1.1).mean():.0%}"
    )


if __name__ == "__main__":
    main()
