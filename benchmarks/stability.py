"""Stability of the sweep: run one spec twice back to back on this machine and compare.

Prints, per op, the bucket assignments of both runs (same backends in the same order, and how
far each boundary moved), how many (op, backend, size, metric) medians agree within 10%, and
fixed workloads timed before, between and after the runs, which show whether the machine
itself moved (they are the workloads a sweep times while it settles, ``softcuda.sweep.settle``).
Each point's probe rows (a fixed workload timed in the same rounds) say how fast the host ran
while it was measured; the medians are also compared over the points where the host ran at the
same speed in both runs, which separates the instrument from the machine.
Exit status 0 when every assignment matches and at least 90% of the medians agree, else 1.
A median is counted once per series measured: a CPU backend's ``wall`` rows make its curve in
every metric, so its median is one measurement, not three (``agreement``).

    python benchmarks/stability.py sweeps/stability.yaml [--results /tmp/stability]
    python benchmarks/stability.py sweeps/stability.yaml --compare RUN1.csv.gz RUN2.csv.gz
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
import pandas as pd

from softcuda.sweep.machine import detect
from softcuda.sweep.runner import Sweep
from softcuda.sweep.settle import canary
from softcuda.sweep.spec import load_spec
from softcuda.timings import schema
from softcuda.timings.select import decide
from softcuda.timings.stats import curves, is_cpu_backend, probe_medians

TOLERANCE = 0.10
SAME_HOST = 0.05
"""Points whose probe (the host's speed while the point was measured) agrees within this in
both runs were measured on a host running at the same speed."""
SHARE = 0.90
"""The verdict: stable when the assignments match and at least this share of the measured
medians agree within TOLERANCE."""


def describe(buckets) -> str:
    return " | ".join(f"[{b.lo}, {'inf' if b.hi is None else b.hi}) {b.backend}" for b in buckets)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--results", default=None, help="folder for the two raw CSVs")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar="CSV",
        default=None,
        help="measure nothing: compare two raw CSVs of this spec that were measured before",
    )
    args = parser.parse_args()
    spec = load_spec(args.spec)
    if args.compare:
        from softcuda.timings.load import load_csvs

        print(f"comparing {args.compare[0]} and {args.compare[1]} (spec {args.spec})")
        frames = [load_csvs([path], attempts="all") for path in args.compare]
        return compare(frames, spec.metric, None)
    machine = detect()
    results = args.results or tempfile.mkdtemp(prefix="softcuda-stability-")
    print(f"machine: {machine.label}; spec {args.spec}; raw CSVs under {results}")
    cuda = machine.device_type == "cuda"
    canaries = [canary(cuda)]
    frames = []
    for run in (1, 2):
        sweep = Sweep(spec, args.spec, results, machine=machine)
        frames.append(sweep.run())  # each sweep settles first, as `softcuda init` does
        print(
            f"run {run}: settling: {sweep.settle().summary()}; measured in {sweep.elapsed_s} s, "
            f"{sweep.waited_s:.1f} s of it waiting for the host before re-measuring"
        )
        canaries.append(canary(cuda))
    return compare(frames, spec.metric, canaries)


def compare(frames, metric: str, canaries) -> int:
    """Print the comparison of two runs' rows; 0 when they count as stable, else 1."""
    buckets = [decide(f, metric) for f in frames]  # bus rows drop out
    for run, f in enumerate(frames, 1):
        points = f[["op", "size"]].drop_duplicates()
        again = f.loc[f["attempt"] > 0, ["op", "size", "attempt"]].drop_duplicates()
        print(
            f"run {run}: {len(again.drop_duplicates(['op', 'size']))} of {len(points)} points "
            f"measured again ({len(again)} attempts; the steadiest attempt of each is compared)"
        )

    same = True
    print(f"\nbucket assignments ({metric}):")
    for op in sorted(buckets[0]):
        a, b = buckets[0][op], buckets[1].get(op, [])
        backends_a, backends_b = [x.backend for x in a], [x.backend for x in b]
        match = backends_a == backends_b
        same &= match
        moves = []
        if match:
            for x, y in zip(a[1:], b[1:]):
                moves.append(f"{x.lo} -> {y.lo} ({y.lo / x.lo - 1:+.0%})")
        state = "same" if match else "DIFFERENT"
        print(f"  {op:<8} {state:<10} run 1: {describe(a)}")
        if not match:
            print(f"  {'':<8} {'':<10} run 2: {describe(b)}")
        if moves:
            print(f"  {'':<8} boundaries moved: {', '.join(moves)}")

    per_run = [probe_medians(f).droplevel("device") for f in frames]  # one device: by op, size
    probes = pd.concat({"probe_s_1": per_run[0], "probe_s_2": per_run[1]}, axis=1, join="inner")
    host = probes["probe_s_2"] / probes["probe_s_1"]
    same_host = set(host.index[(host - 1).abs() <= SAME_HOST])
    if len(host):
        print(
            f"\nthe host while each point was measured (probe: a 16 K numpy add in the same "
            f"rounds): run 2 / run 1 median {host.median():.2f}, from {host.min():.2f} to "
            f"{host.max():.2f}; within {SAME_HOST:.0%} at {len(same_host)} of {len(host)} points"
        )
    else:
        print("\nthe host while each point was measured: no probe rows in these runs")

    table = agreement(frames)
    if table.empty:
        print("\nthe two runs have no (op, dtype, backend, size) in common: nothing to compare")
        return 1
    table["same_host"] = [(op, size) in same_host for op, size in zip(table["op"], table["size"])]
    table["steady"] = ~(table["unstable_1"] | table["unstable_2"])
    print(f"\nmedians within {TOLERANCE:.0%} (run 2 / run 1):")
    for metric, both in table.groupby("metric", sort=False):
        ok, ratio = both["ok"], both["ratio"]
        worst = both.iloc[int(np.argmax((ratio - 1).abs().to_numpy()))]
        print(
            f"  {metric:<13} {int(ok.sum()):>5} of {len(ok):<5} ({ok.mean():.0%}); median "
            f"ratio {ratio.median():.3f}; worst {worst['ratio']:.2f} at {worst['op']} "
            f"{worst['backend']} {int(worst['size'])}"
        )
        off = both[~ok].sort_values("ratio", key=lambda x: (x - 1).abs(), ascending=False)
        for r in off.head(5).itertuples():
            print(
                f"  {'':<13}   {r.op} {r.backend} {int(r.size)}: {r.median_s_1:.3g} s -> "
                f"{r.median_s_2:.3g} s ({r.ratio:.2f})"
                + (" (flagged unstable)" if r.unstable_1 or r.unstable_2 else "")
            )
        for label, mask in (
            ("points where the host ran at the same speed in both runs", both["same_host"]),
            ("points flagged stable in both runs", both["steady"]),
        ):
            if mask.any():
                print(
                    f"  {'':<13} {label}: {int(ok[mask].sum())} of {int(mask.sum())} within "
                    f"{TOLERANCE:.0%}"
                )
    if canaries:
        print("\nthe machine (fixed workloads, median us: before run 1, after run 1, after run 2):")
    for name in canaries[0] if canaries else ():
        values = [c[name] for c in canaries]
        print(
            f"  {name:<14} {'  '.join(f'{v:9.2f}' for v in values)}   "
            f"run 2 / run 1 {values[2] / values[1]:.2f}"
        )

    # The summary counts each measured median once (``agreement``'s ``first`` rows).
    once = table[table["first"]]
    share = float(once["ok"].mean())  # not empty: the table is not
    verdict = same and share >= SHARE
    cpu = once["backend"].map(is_cpu_backend).astype(bool)
    print(
        f"\neach median counted once (a CPU backend's median is one measurement, the same in "
        f"every metric):\n  {int(once['ok'].sum())} of {len(once)} within {TOLERANCE:.0%}: "
        f"CPU backends {int(once['ok'][cpu].sum())} of {int(cpu.sum())}, CUDA backends "
        f"{int(once['ok'][~cpu].sum())} of {int((~cpu).sum())}"
        f"\n  (counted once per metric, as the earlier checks counted: "
        f"{int(table['ok'].sum())} of {len(table)}, {table['ok'].mean():.0%})"
    )
    print(
        f"\nassignments {'identical' if same else 'DIFFER'}; {share:.1%} of medians within "
        f"{TOLERANCE:.0%} -> {'STABLE' if verdict else 'NOT STABLE'}"
    )
    if any((f["attempt"] > 0).any() for f in frames):
        firsts = agreement([f[f["attempt"] == 0] for f in frames])
        firsts = firsts[firsts["first"]]
        print(
            f"the first attempts only (roughly what a sweep without retries would have read; "
            f"its refinement sizes came from the chosen attempts): "
            f"{_share(firsts['ok'])} of {len(firsts)} medians within {TOLERANCE:.0%}"
        )
    for label, mask in (
        (
            f"where the host ran at the same speed in both runs (probe within {SAME_HOST:.0%})",
            once["same_host"],
        ),
        (
            "of the points flagged stable in both runs (spread, timing floor, repetitions, the "
            "host off its best speed)",
            once["steady"],
        ),
    ):
        print(
            f"{label}: {_share(once['ok'][mask])} of {int(mask.sum())} medians within "
            f"{TOLERANCE:.0%}"
        )
    return 0 if verdict else 1


def _share(ok: pd.Series) -> str:
    """The share of True in ``ok`` as a percentage, "-" when it is empty."""
    return f"{ok.mean():.0%}" if len(ok) else "-"


def agreement(frames) -> pd.DataFrame:
    """Every median of both runs side by side: one row per (metric, op, backend, size) that both
    runs measured, with ``ratio`` (run 2 / run 1), ``ok`` (within TOLERANCE) and ``first``: True
    on the first row of each measured series.  A metric's curve of a CPU backend is its ``wall``
    rows in every metric (``schema.METRICS``), so the three rows of one CPU point are one
    median; ``first`` marks it once (under the first metric), so counting ``first`` rows counts
    each measurement once."""
    parts = []
    for metric, (cpu_phase, cuda_phase, cuda_memory) in schema.METRICS.items():
        both = _paired(frames, metric)
        if both.empty:
            continue
        cpu = both["backend"].map(is_cpu_backend).astype(bool)
        source = np.where(cpu, f"{cpu_phase}", f"{cuda_phase}/{cuda_memory or 'device'}")
        parts.append(both.assign(metric=metric, source=source))
    if not parts:  # nothing in common: the columns that callers count by, no rows
        return pd.DataFrame(columns=["metric", *PAIR_KEYS, "ratio", "ok", "first"])
    table = pd.concat(parts, ignore_index=True)
    table["ratio"] = table["median_s_2"] / table["median_s_1"]
    table["ok"] = (table["ratio"] - 1).abs() <= TOLERANCE
    table["first"] = ~table.duplicated([*PAIR_KEYS, "source"])
    return table


PAIR_KEYS = ["op", "dtype", "backend", "size"]


def _paired(frames, metric: str):
    """The two runs' curves of ``metric`` side by side (suffixes _1, _2), per op, dtype, backend
    and size."""
    c1, c2 = (curves(f, metric) for f in frames)
    return c1.merge(c2, on=PAIR_KEYS, suffixes=("_1", "_2"))


if __name__ == "__main__":
    raise SystemExit(main())
