"""Which repetition policy gives medians that repeat?  (A benchmark that guides the sweep's
defaults; run it on the GPU machine.)

Short points (microseconds) are where two sweeps disagreed.  This measures a handful of them,
through the sweep's own plans and ``interleaved``, under several repetition policies, in
``--trials`` rounds separated by different disturbances (idle, heavy work, nothing), and prints
for every policy how often two consecutive trials' medians agree within 10%.

    python benchmarks/repeatability.py [--trials 8] [--csv trials.csv]
"""

from __future__ import annotations

import argparse
import itertools
import time
from functools import partial
from types import SimpleNamespace as NS

import numpy as np
import pandas as pd

from softcuda import backends
from softcuda.config import single_rule_config
from softcuda.pool import leaf_pool
from softcuda.sweep.runner import _compile, _graph, _inputs, _phase, detect

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

POLICIES = {
    "now": NS(warmup=1, min_time_s=0.02, min_reps=5, max_reps=200, pause_gc=False),
    "warm": NS(warmup=1, warmup_s=0.02, min_time_s=0.02, min_reps=5, max_reps=200),
    "many": NS(warmup=1, warmup_s=0.02, min_time_s=0.1, min_reps=5, max_reps=2000),
    "batch": NS(
        warmup=1, warmup_s=0.02, min_sample_s=0.0005, min_time_s=0.05, min_reps=20, max_reps=200
    ),
    # as "many", spread over 3 copies of every plan (own leaves and buffers): averages over
    # where the data happens to sit in memory
    "rotate": NS(warmup=1, warmup_s=0.01, min_time_s=0.033, min_reps=5, max_reps=667, copies=3),
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


def measure(op: str, size: int, policy, machine, rng) -> list[dict]:
    dtype = np.dtype("float32")
    masters, _, _ = _inputs(op, size, dtype, rng)
    names = [b for b in machine.backends if op in backends.BACKENDS[b].measured_ops]
    plans = []
    for backend in names:
        config = single_rule_config(op, backend)
        cpu = backends.BACKENDS[backend].device == "cpu"
        for kind in ("pageable",) if cpu else ("pinned", "pageable"):
            for _ in range(getattr(policy, "copies", 1)):
                plans.append(
                    (
                        backend,
                        kind,
                        "wall" if cpu else "end_to_end",
                        _compile(_graph(op, masters), config, kind),
                    )
                )
    from softcuda.sweep.timers import interleaved

    times = interleaved([partial(p[3].evaluate, copy=False) for p in plans], policy)
    merged: dict = {}
    for p, reps in zip(plans, times):
        merged.setdefault(p[:3], (p[3], []))[1].extend(reps)
    out = []
    for (backend, kind, phase), (plan, reps) in merged.items():
        base = dict(op=op, size=size, backend=backend, host_memory=kind)
        out.append(dict(base, phase=phase, median_s=float(np.median(reps)), n=len(reps)))
        if phase == "end_to_end" and kind == "pinned":
            steps = plan.profile(repeat=min(len(reps), 200), warmup=0)
            parts = [st["repetitions_s"] for st in steps if _phase(st) == "kernel"]
            if parts:
                k = np.sum(parts, axis=0)
                out.append(dict(base, phase="kernel", median_s=float(np.median(k)), n=len(k)))
    del plans
    leaf_pool().reset()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    machine = detect()
    cuda = machine.device_type == "cuda"
    print(f"machine: {machine.label}; {args.trials} trials; policies: {', '.join(POLICIES)}")
    rows = []
    started = time.monotonic()
    for trial in range(args.trials):
        order = list(POLICIES)
        order = order[trial % len(order) :] + order[: trial % len(order)]
        for (op, size), name in itertools.product(POINTS, order):
            disturb(trial, cuda)
            rng = np.random.default_rng(size)
            for r in measure(op, size, POLICIES[name], machine, rng):
                rows.append(dict(r, trial=trial, policy=name))
        print(f"  trial {trial} done at {time.monotonic() - started:.0f} s", flush=True)
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)

    keys = ["op", "size", "backend", "host_memory", "phase", "policy"]
    df = df.sort_values(keys + ["trial"])
    df["prev"] = df.groupby(keys)["median_s"].shift()
    pairs = df.dropna(subset=["prev"]).assign(ratio=lambda d: d["median_s"] / d["prev"])
    pairs["ok"] = (pairs["ratio"] - 1).abs() <= 0.10
    print("\nconsecutive trials whose medians agree within 10%, by policy and phase:")
    table = pairs.pivot_table(index="phase", columns="policy", values="ok", aggfunc="mean")
    print((100 * table[list(POLICIES)]).round(0).to_string())
    print(
        "\nall phases:",
        ", ".join(f"{p} {100 * pairs[pairs.policy == p].ok.mean():.0f}%" for p in POLICIES),
    )
    spread = df.groupby(keys)["median_s"].agg(lambda s: s.max() / s.min()).unstack("policy")
    print("\nmax/min of the trials' medians per point (worst 25 under 'now'):")
    spread = spread[list(POLICIES)].sort_values("now", ascending=False)
    print(spread.head(25).round(2).to_string())
    cost = df.groupby("policy")["n"].sum()
    print("\nrepetitions taken per policy:", cost.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
