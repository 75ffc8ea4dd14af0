"""Stability of the sweep: run one spec twice back to back on this machine and compare.

Prints, per op, the bucket assignments of both runs (same backends in the same order, and how
far each boundary moved), how many (op, backend, size, metric) medians agree within 10%, and
fixed workloads timed before, between and after the runs, which show whether the machine
itself moved (they are the workloads a sweep times while it settles, ``softcuda.sweep.settle``).
Each point's probe rows (a fixed workload timed in the same rounds) say how fast the host ran
while it was measured; the medians are also compared over the points where the host ran at the
same speed in both runs, which separates the instrument from the machine.
Exit status 0 when every assignment matches and at least 90% of the medians agree, else 1.

    python benchmarks/stability.py sweeps/stability.yaml [--results /tmp/stability]
    python benchmarks/stability.py sweeps/stability.yaml --compare RUN1.csv.gz RUN2.csv.gz
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
import pandas as pd

from softcuda.analysis.stats import curves, probe_medians
from softcuda.sweep import schema
from softcuda.sweep.runner import Sweep, detect
from softcuda.sweep.select import decide
from softcuda.sweep.settle import canary
from softcuda.sweep.spec import load_spec

TOLERANCE = 0.10
SAME_HOST = 0.05
"""Points whose probe (the host's speed while the point was measured) agrees within this in
both runs were measured on a host running at the same speed."""


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
        from softcuda.analysis.load import load_csvs

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

    print(f"\nmedians within {TOLERANCE:.0%} (run 2 / run 1):")
    total_ok = total = 0
    same_ok = same_total = 0
    flagged_ok = flagged_total = 0
    for metric in schema.METRICS:
        both = _paired(frames, metric)
        if both.empty:
            continue
        ratio = both["median_s_2"] / both["median_s_1"]
        ok = (ratio - 1).abs() <= TOLERANCE
        total_ok += int(ok.sum())
        total += len(ok)
        worst = both.assign(ratio=ratio).iloc[int(np.argmax((ratio - 1).abs().to_numpy()))]
        print(
            f"  {metric:<13} {int(ok.sum()):>5} of {len(ok):<5} ({ok.mean():.0%}); median "
            f"ratio {ratio.median():.3f}; worst {worst['ratio']:.2f} at {worst['op']} "
            f"{worst['backend']} {int(worst['size'])}"
        )
        off = both.assign(ratio=ratio)[~ok]
        for r in (
            off.sort_values("ratio", key=lambda x: (x - 1).abs(), ascending=False)
            .head(5)
            .itertuples()
        ):
            print(
                f"  {'':<13}   {r.op} {r.backend} {int(r.size)}: {r.median_s_1:.3g} s -> "
                f"{r.median_s_2:.3g} s ({r.ratio:.2f})"
                + (" (flagged unstable)" if r.unstable_1 or r.unstable_2 else "")
            )
        steady = [(op, size) in same_host for op, size in zip(both["op"], both["size"])]
        if any(steady):
            r = ratio[steady]
            same_ok += int(((r - 1).abs() <= TOLERANCE).sum())
            same_total += len(r)
            print(
                f"  {'':<13} points where the host ran at the same speed in both runs: "
                f"{int(((r - 1).abs() <= TOLERANCE).sum())} of {len(r)} within {TOLERANCE:.0%}"
            )
        stable = both[~(both["unstable_1"] | both["unstable_2"])]
        if len(stable):
            r = stable["median_s_2"] / stable["median_s_1"]
            flagged_ok += int(((r - 1).abs() <= TOLERANCE).sum())
            flagged_total += len(r)
            print(
                f"  {'':<13} points flagged stable in both runs: "
                f"{int(((r - 1).abs() <= TOLERANCE).sum())} of {len(r)} within {TOLERANCE:.0%}"
            )
    if canaries:
        print("\nthe machine (fixed workloads, median us: before run 1, after run 1, after run 2):")
    for name in canaries[0] if canaries else ():
        values = [c[name] for c in canaries]
        print(
            f"  {name:<14} {'  '.join(f'{v:9.2f}' for v in values)}   "
            f"run 2 / run 1 {values[2] / values[1]:.2f}"
        )
    share = total_ok / total if total else 0.0
    same_share = same_ok / same_total if same_total else 0.0
    verdict = same and share >= 0.9
    print(
        f"\nassignments {'identical' if same else 'DIFFER'}; {share:.0%} of medians within "
        f"{TOLERANCE:.0%} -> {'STABLE' if verdict else 'NOT STABLE'}"
    )
    if any((f["attempt"] > 0).any() for f in frames):
        firsts = [f[f["attempt"] == 0] for f in frames]
        ok = n = 0
        for metric in schema.METRICS:
            both = _paired(firsts, metric)
            ok += int(((both["median_s_2"] / both["median_s_1"] - 1).abs() <= TOLERANCE).sum())
            n += len(both)
        print(
            f"the first attempts only (roughly what a sweep without retries would have read; "
            f"its refinement sizes came from the chosen attempts): "
            f"{ok / max(n, 1):.0%} of {n} medians within {TOLERANCE:.0%}"
        )
    if same_total:
        print(
            f"where the host ran at the same speed in both runs (probe within {SAME_HOST:.0%}): "
            f"{same_share:.0%} of {same_total} medians within {TOLERANCE:.0%}"
        )
    print(
        f"of the points flagged stable in both runs (spread, timing floor, repetitions, the "
        f"host off its best speed): {flagged_ok / max(flagged_total, 1):.0%} of {flagged_total} "
        f"medians within {TOLERANCE:.0%}"
    )
    return 0 if verdict else 1


def _paired(frames, metric: str):
    """The two runs' curves of ``metric`` side by side (suffixes _1, _2), per op, backend, size."""
    c1, c2 = (curves(f, metric) for f in frames)
    return c1.merge(c2, on=["op", "backend", "size"], suffixes=("_1", "_2"))


if __name__ == "__main__":
    raise SystemExit(main())
