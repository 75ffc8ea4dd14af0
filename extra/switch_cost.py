"""Does handing a value from the GPU to a CPU step inside a plan cost more than its copy?

An investigation for the placement model.  In the placement benchmark
(``results/nvidia-h200/placement.txt``) the three graph plans that hand a value from the GPU to
a CPU step mid-plan (GGGC and GGGGGGGC unary chains at 2^14 elements, the batch-256 MLP) were
predicted 11 to 24% short of their measured time, the all-CUDA plans of the same graphs -4 to
11%, and the two that hand one from the CPU to the GPU within 3%.  The model prices
a switch as its copy alone.  This times, in turns (pinned host memory, blocks of calls), for n
elements and a chain of k relus on the GPU:

    gpu     k relus and a neg on CUDA, the result copied home
    mixed   k relus on CUDA, the result copied home, then the neg on the CPU (cpu_fallback)
    head    k relus on CUDA, the result copied home (the mixed plan without its CPU step)
    tail    the neg on the CPU alone, on host data the CPU itself last touched

and prints ``mixed - head - tail``: what the switch adds beyond the copy and the two parts
timed apart (a synchronisation the CPU waits out, data the DMA left outside the CPU's caches),
beside ``gpu - head``, what one more GPU step adds.  Run it on the GPU machine:

    python extra/switch_cost.py [--rounds 15]

It times them with ``softcuda.sweep.switch.hand_off``, which measures the same difference
(k = 1, the median of each round's) for the profile's ``[bus] switch_us``; this adds k = 7 and
prints each plan's own median and the difference of the medians.
"""

from __future__ import annotations

import argparse
import sys

from softcuda.backends import cuda_available
from softcuda.sweep.switch import hand_off


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    ok, reason = cuda_available()
    if not ok:
        print(f"switch_cost.py needs a usable CUDA GPU: {reason}", file=sys.stderr)
        return 2
    print("times in us, medians of", args.rounds, "rounds; pinned host memory")
    head = f"{'n':>9} {'k':>3} {'gpu':>8} {'mixed':>8} {'head':>8} {'tail':>8}"
    print(head + f" {'switch':>8} {'+1 GPU':>8}")
    sizes = (2**10, 2**12, 2**14, 2**16, 2**18, 2**20)
    for k in (1, 7):
        medians = hand_off(sizes, args.rounds, k)["medians_s"]  # per plan, per size
        for i, n in enumerate(sizes):
            t = {name: medians[name][i] * 1e6 for name in medians}
            switch = t["mixed"] - t["head"] - t["tail"]
            more = t["gpu"] - t["head"]
            cells = " ".join(f"{t[name]:8.1f}" for name in ("gpu", "mixed", "head", "tail"))
            print(f"{n:>9} {k:>3} {cells} {switch:8.1f} {more:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
