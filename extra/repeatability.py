"""Which repetition policy gives medians that repeat?  (A benchmark that guides the sweep's
defaults; run it on the GPU machine.)

Short points (microseconds) are where two sweeps disagreed.  This measures a handful of them
through the sweep itself (``Sweep.measure``, so every plan, copy, gate and repetition is the
sweep's), under a few repetition policies, in ``--trials`` rounds separated by different
disturbances (idle, heavy work, nothing), and prints for every policy how often two consecutive
trials' medians agree within 10%.

    python extra/repeatability.py [--trials 6] [--csv trials.csv]

Its first run (archived ``repeatability-policies.txt``, see results/nvidia-h200/ARCHIVE.md)
compared five policies: a time-based warm-up, 10x the repetitions and back-to-back batches did
not help; spreading the repetitions over 3 copies of each plan did; kernel event times were
bimodal.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time

import numpy as np
import pandas as pd

from softcuda.sweep.machine import detect
from softcuda.sweep.measure import Noise, Point
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema

POINTS = [
    ("matmul", 16),
    ("matmul", 64),
    ("matmul", 128),
    ("add", 256),
    ("add", 16384),
    ("add", 131072),
    ("relu", 65536),
    ("sum", 4096),
    ("sum", 65536),
]

BASE = {"warmup": 1, "min_time_s": 0.02, "min_reps": 5, "max_reps": 200}
POLICIES = {
    "one copy": {**BASE, "buffers": 1},
    "3 copies": {**BASE, "buffers": 3},
    "3 copies, 3x reps": {**BASE, "buffers": 3, "max_reps": 600, "min_time_s": 0.06},
}


def disturb(trial: int, cuda: bool) -> None:
    kind = trial % 3
    if kind == 0:
        time.sleep(0.3)  # idle: clocks may drop
    elif kind == 1:  # heavy work, as a large point of the sweep would leave behind
        a = np.random.default_rng(trial).standard_normal(1 << 24, dtype=np.float32)
        for _ in range(5):
            a + a
        if cuda:
            import cupy

            d = cupy.ones(1 << 26, dtype=cupy.float32)
            for _ in range(20):
                d + d
            cupy.cuda.get_current_stream().synchronize()


def sweep_for(policy: dict, machine, folder: str) -> Sweep:
    ops = {op: {"sizes": {"start": 16, "stop": 16, "per_octave": 1}} for op, _ in POINTS}
    spec = spec_from_dict({"name": "repeatability", "ops": ops, "repetitions": policy}, "policy")
    return Sweep(spec, "repeatability", folder, machine=machine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    machine = detect()
    cuda = machine.device_type == "cuda"
    print(f"machine: {machine.label}; {args.trials} trials; policies: {', '.join(POLICIES)}")
    folder = tempfile.mkdtemp(prefix="softcuda-repeatability-")
    rows = []
    started = time.monotonic()
    for trial in range(args.trials):
        order = list(POLICIES)
        order = order[trial % len(order) :] + order[: trial % len(order)]
        for (op, size), name in itertools.product(POINTS, order):
            disturb(trial, cuda)
            sweep = sweep_for(POLICIES[name], machine, folder)
            sweep.noise = Noise(np.random.default_rng(size))  # the same data in every trial
            raw = pd.DataFrame(sweep.measure(Point(op, size, "*")), columns=list(schema.COLUMNS))
            keys = ["op", "size", "backend", "host_memory", "phase"]
            for key, group in raw.groupby(keys):
                median, n = float(group["seconds"].median()), len(group)
                rows.append(dict(zip(keys, key), median_s=median, n=n, trial=trial, policy=name))
        print(f"  trial {trial} done at {time.monotonic() - started:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)

    keys = ["op", "size", "backend", "host_memory", "phase", "policy"]
    df = df.sort_values(keys + ["trial"])
    df["prev"] = df.groupby(keys)["median_s"].shift()
    pairs = df.dropna(subset=["prev"]).assign(ratio=lambda d: d["median_s"] / d["prev"])
    pairs["ok"] = (pairs["ratio"] - 1).abs() <= 0.10
    print("\nconsecutive trials whose medians agree within 10%, by policy and phase (%):")
    table = pairs.pivot_table(index="phase", columns="policy", values="ok", aggfunc="mean")
    print((100 * table[list(POLICIES)]).round(0).to_string())
    print(
        "\nall phases:",
        ", ".join(f"{p} {100 * pairs[pairs.policy == p].ok.mean():.0f}%" for p in POLICIES),
    )
    spread = df.groupby(keys)["median_s"].agg(lambda s: s.max() / s.min()).unstack("policy")
    first = next(iter(POLICIES))
    print(f"\nmax/min of the trials' medians per point (worst 25 under '{first}'):")
    spread = spread[list(POLICIES)].sort_values(first, ascending=False)
    print(spread.head(25).round(2).to_string())
    cost = df.groupby("policy")["n"].sum()
    print("\nrepetitions taken per policy:", cost.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
