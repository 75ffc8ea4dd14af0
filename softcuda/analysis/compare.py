"""Comparing two sweeps of one spec: do they choose the same backends, and do their medians
repeat?

``compare_sweeps(frames, metric)`` takes two sweeps' raw rows (every attempt, as
``load_csvs(..., attempts="all")`` reads them) and returns a ``Comparison``:

* per op, the bucket assignments each sweep's rows decide (``timings.select.decide``): the same
  backends in the same order, and how far each boundary moved;
* every median both sweeps measured, side by side (``agreement``): one row per (metric, op,
  dtype, backend, size), with the ratio run 2 / run 1 and whether it is within TOLERANCE;
* the host's speed while each point was measured in each sweep (its probe rows), so that the
  medians can also be compared over the points where the host ran at the same speed in both,
  which separates the instrument from the machine.

A median is counted once per series measured: a CPU backend's ``wall`` rows make its curve in
every metric (``schema.METRICS``), so its median is one measurement, not three.  The verdict:
stable when every op that either sweep decided has identical assignments in both (so A against B
judges as B against A) and at least SHARE of the medians, each counted once, agree within
TOLERANCE.  The restated verdict (``Restated``) judges kernel-only medians, which only CUDA
backends have: for a CPU-only pair it is not applicable (``stable`` None), not a failure.
``format_comparison`` writes the report that ``softcuda compare-sweeps`` and
``benchmarks/stability.py`` print.

Two sweeps from different devices (their rows' device hashes differ) are no repeat of one sweep:
their medians differ by the machine as well as by the runs, so ``compare_sweeps`` refuses them
unless asked (``across_devices``), and the comparison says which devices they were.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from softcuda.errors import DataError
from softcuda.timings import schema
from softcuda.timings.select import Bucket, decide
from softcuda.timings.stats import curves, is_cpu_backend, probe_medians

TOLERANCE = 0.10
"""Two medians agree when run 2 / run 1 is within this of 1."""
SAME_HOST = 0.05
"""Points whose probe (the host's speed while the point was measured) agrees within this in
both runs were measured on a host running at the same speed."""
SHARE = 0.90
"""The verdict: stable when the assignments match and at least this share of the measured
medians agree within TOLERANCE."""
KERNEL_TOLERANCE = 0.05
"""The restated criterion (``Restated``): every kernel-only median within this."""
BOUNDARY_TOLERANCE = 0.15
"""The restated criterion: a boundary may move by this, or within its own 95% interval."""
PAIR_KEYS = ["op", "dtype", "backend", "size"]


@dataclass(frozen=True)
class Comparison:
    """What ``compare_sweeps`` found; ``format_comparison`` says it in words."""

    metric: str
    buckets: tuple[dict[str, list[Bucket]], dict[str, list[Bucket]]]
    retried: tuple[tuple[int, int, int], ...]
    """Per run: (points measured again, points, attempts after the first)."""
    host: pd.Series
    """run 2 / run 1 of each point's probe median, by (op, size); empty without probe rows."""
    table: pd.DataFrame
    """``agreement`` of the chosen attempts, with ``same_host`` and ``steady`` columns."""
    firsts: pd.DataFrame | None
    """``agreement`` of the first attempts alone, each median once; None when neither run
    measured a point again."""
    devices: tuple[str, str] = ("", "")
    """Per run: the device its rows were measured on (``device_of``)."""
    same_device: bool = True
    """Both runs' rows name the same device hashes."""

    @property
    def ops(self) -> list[str]:
        """The ops either run decided, so that A against B judges as B against A."""
        one, two = self.buckets
        return sorted(set(one) | set(two))

    @property
    def same_assignments(self) -> bool:
        """Every op of either run has the same backends, in the same order, in the other."""
        return all(self._same(op) for op in self.ops)

    def _same(self, op: str) -> bool:
        one, two = self.buckets
        return _backends(one.get(op, [])) == _backends(two.get(op, []))

    @property
    def once(self) -> pd.DataFrame:
        """The rows of ``table`` that count each measured median once."""
        # (an empty table's column is of object dtype, which would select columns, not rows)
        return self.table[self.table["first"].astype(bool)]

    @property
    def share(self) -> float:
        """The share of medians, each counted once, within TOLERANCE (NaN with none)."""
        return float(self.once["ok"].mean()) if len(self.table) else float("nan")

    @property
    def stable(self) -> bool:
        return bool(len(self.table)) and self.same_assignments and self.share >= SHARE

    @property
    def restated(self) -> Restated:
        """The stricter reading of stability that the reference is held to (``Restated``)."""
        return restate(self)

    def to_dict(self) -> dict[str, Any]:
        """The findings as plain data (``softcuda compare-sweeps --json``)."""
        one, two = self.buckets
        once = self.once
        cpu = once["backend"].map(is_cpu_backend).astype(bool)
        restated = self.restated
        return {
            "metric": self.metric,
            "stable": self.stable,
            "same_device": self.same_device,
            "devices": list(self.devices),
            "restated": {
                "applicable": restated.applicable,
                "stable": restated.stable,
                "boundaries": [
                    {
                        "op": b.op,
                        "run_1": b.run_1,
                        "run_2": b.run_2,
                        "interval": b.interval,
                        "ok": b.ok,
                    }
                    for b in restated.boundaries
                ],
                "kernel_within": list(restated.kernels),
                "e2e_within": {m: list(v) for m, v in restated.e2e.items()},
            },
            "same_assignments": self.same_assignments,
            "tolerance": TOLERANCE,
            "share_required": SHARE,
            "assignments": {
                op: {
                    "same": self._same(op),
                    "run_1": [_bucket(b) for b in one.get(op, [])],
                    "run_2": [_bucket(b) for b in two.get(op, [])],
                }
                for op in self.ops
            },
            "medians": {
                "compared": len(once),
                "within": int(once["ok"].sum()),
                "share_within": None if once.empty else round(self.share, 4),
                "cpu": [int(once["ok"][cpu].sum()), int(cpu.sum())],
                "cuda": [int(once["ok"][~cpu].sum()), int((~cpu).sum())],
            },
            "host_same_speed_points": [_same_host(self.host), len(self.host)],
        }


@dataclass(frozen=True)
class Boundary:
    """One bucket boundary of an op whose assignments match in both runs."""

    op: str
    run_1: int
    run_2: int
    interval: tuple[int, int] | None
    """Run 1's 95% bootstrap interval of this boundary, where its profile note gives one."""

    @property
    def ok(self) -> bool:
        """Moved by at most BOUNDARY_TOLERANCE, or into run 1's own interval: whichever is
        wider."""
        if abs(self.run_2 / self.run_1 - 1) <= BOUNDARY_TOLERANCE:
            return True
        return self.interval is not None and self.interval[0] <= self.run_2 <= self.interval[1]


@dataclass(frozen=True)
class Restated:
    """Stability as the reference is held to it: identical bucket assignments; every boundary
    moved by less than its own 95% interval or BOUNDARY_TOLERANCE, whichever is wider; every
    kernel-only median (a CUDA backend's resident time, timed by events) within
    KERNEL_TOLERANCE.  End-to-end medians carry the host's own spread, so they are reported,
    as the share within TOLERANCE beside the host's probe, and not judged."""

    same_assignments: bool
    boundaries: tuple[Boundary, ...]
    kernels: tuple[int, int]
    """(within KERNEL_TOLERANCE, compared)."""
    e2e: dict[str, tuple[int, int]]
    """Per end-to-end metric: (within TOLERANCE, compared), each median once."""

    @property
    def applicable(self) -> bool:
        """There are kernel-only medians to judge: without CUDA rows (a CPU-only pair) the
        criterion has nothing to hold, and a verdict either way would be made up."""
        return self.kernels[1] > 0

    @property
    def stable(self) -> bool | None:
        """The verdict; None where it is not ``applicable``."""
        if not self.applicable:
            return None
        return (
            self.same_assignments
            and all(b.ok for b in self.boundaries)
            and self.kernels[0] == self.kernels[1]
        )


_INTERVAL = re.compile(r"(?:crossover|boundary) (\d+) \[(\d+), (\d+)\]")


def restate(c: Comparison) -> Restated:
    """``Restated`` for a comparison."""
    one, two = c.buckets
    boundaries = []
    for op in c.ops:
        a, b = one.get(op, []), two.get(op, [])
        if _backends(a) != _backends(b):
            continue
        for below, x, y in zip(a, a[1:], b[1:]):  # a bucket's note describes its upper edge
            found = _INTERVAL.search(below.note)
            interval = (int(found[2]), int(found[3])) if found else None
            boundaries.append(Boundary(op, x.lo, y.lo, interval))
    table = c.table
    # numpy masks select rows even of an empty table (whose object columns would not)
    cpu = table["backend"].map(is_cpu_backend).to_numpy(bool)
    kernel = table[(table["metric"] == "resident").to_numpy(bool) & ~cpu]
    within = ((kernel["ratio"] - 1).abs() <= KERNEL_TOLERANCE).to_numpy(bool)
    e2e = {}
    for metric in schema.METRICS:
        if metric != "resident":
            rows = table[(table["metric"] == metric).to_numpy(bool)]
            e2e[metric] = (int(rows["ok"].to_numpy(bool).sum()), len(rows))
    return Restated(c.same_assignments, tuple(boundaries), (int(within.sum()), len(kernel)), e2e)


def device_of(frame: pd.DataFrame) -> str:
    """The device a sweep's rows were measured on: its name and the start of its device hash
    (two machines of one name differ by hash alone, another driver say), several joined by
    "; " where one file holds several."""
    pairs = frame[["device", "device_hash"]].drop_duplicates().sort_values(["device_hash"])
    return "; ".join(f"{d}, device hash {h[:12]}" for d, h in pairs.itertuples(index=False))


def compare_sweeps(
    frames: Sequence[pd.DataFrame],
    metric: str = schema.DEFAULT_METRIC,
    *,
    names: Sequence[str] = ("run 1", "run 2"),
    across_devices: bool = False,
) -> Comparison:
    """Compare two sweeps' rows (every attempt) under ``metric``; see the module docstring.
    Sweeps from different devices raise ``DataError`` (naming them by ``names``) unless
    ``across_devices``: a stability check of the instrument must not pass or fail by the
    machine."""
    devices = (device_of(frames[0]), device_of(frames[1]))
    same_device = set(frames[0]["device_hash"]) == set(frames[1]["device_hash"])
    if not same_device and not across_devices:
        raise DataError(
            f"{names[0]} and {names[1]} were measured on different devices ({devices[0]}, and "
            f"{devices[1]}), so they are no repeat of one sweep: compare them only on purpose, "
            "with --across-devices"
        )
    one, two = (decide(f, metric) for f in frames)  # bus rows drop out
    retried = []
    for f in frames:
        points = f[["op", "size"]].drop_duplicates()
        again = f.loc[f["attempt"] > 0, ["op", "size", "attempt"]].drop_duplicates()
        retried.append((len(again.drop_duplicates(["op", "size"])), len(points), len(again)))
    per_run = [probe_medians(f).droplevel("device") for f in frames]  # one device: by op, size
    probes = pd.concat({"probe_s_1": per_run[0], "probe_s_2": per_run[1]}, axis=1, join="inner")
    host = probes["probe_s_2"] / probes["probe_s_1"]
    same_host = set(host.index[(host - 1).abs() <= SAME_HOST])
    table = agreement(frames)
    table["same_host"] = [(op, size) in same_host for op, size in zip(table["op"], table["size"])]
    table["steady"] = ~(table["unstable_1"] | table["unstable_2"]).astype(bool)
    firsts = None
    if any((f["attempt"] > 0).any() for f in frames):
        firsts = agreement([f[f["attempt"] == 0] for f in frames])
        firsts = firsts[firsts["first"].astype(bool)]
    return Comparison(metric, (one, two), tuple(retried), host, table, firsts, devices, same_device)


def agreement(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Every median of both runs side by side: one row per (metric, op, backend, size) that both
    runs measured, with ``ratio`` (run 2 / run 1), ``ok`` (within TOLERANCE) and ``first``: True
    on the first row of each measured series.  A metric's curve of a CPU backend is its ``wall``
    rows in every metric (``schema.METRICS``), so the three rows of one CPU point are one
    median; ``first`` marks it once (under the first metric), so counting ``first`` rows counts
    each measurement once."""
    parts = []
    for metric, (cpu_phase, cuda_phase, cuda_memory) in schema.METRICS.items():
        c1, c2 = (curves(f, metric) for f in frames)
        both = c1.merge(c2, on=PAIR_KEYS, suffixes=("_1", "_2"))
        if both.empty:
            continue
        cpu = both["backend"].map(is_cpu_backend).astype(bool)
        source = np.where(cpu, f"{cpu_phase}", f"{cuda_phase}/{cuda_memory or 'device'}")
        parts.append(both.assign(metric=metric, source=source))
    if not parts:  # nothing in common: the columns that callers count by, no rows
        columns = ["metric", *PAIR_KEYS, "ratio", "ok", "first", "unstable_1", "unstable_2"]
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True)
    table["ratio"] = table["median_s_2"] / table["median_s_1"]
    table["ok"] = (table["ratio"] - 1).abs() <= TOLERANCE
    table["first"] = ~table.duplicated([*PAIR_KEYS, "source"])
    return table


def format_comparison(c: Comparison, canaries: list[dict[str, float]] | None = None) -> str:
    """The comparison as a report; ``canaries``: the fixed workloads (``settle.canary``) timed
    before run 1, after run 1 and after run 2, when the caller ran the sweeps itself."""
    out = [*_retried_lines(c), *_assignment_lines(c), _host_line(c.host)]
    if c.table.empty:
        out.append(
            "\nthe two runs have no (op, dtype, backend, size) in common: nothing to compare"
        )
        return "\n".join(out) + "\n"
    out.extend(_median_lines(c.table))
    if canaries:
        out.extend(_canary_lines(canaries))
    out.extend(_verdict_lines(c))
    return "\n".join(out) + "\n"


def _retried_lines(c: Comparison) -> list[str]:
    """How many points each run measured again: the comparison reads each point's steadiest
    attempt, and a reader should know how many points that choice touched."""
    return [
        f"run {run}: {again} of {points} points measured again ({attempts} attempts; the "
        "steadiest attempt of each is compared)"
        for run, (again, points, attempts) in enumerate(c.retried, 1)
    ]


def _assignment_lines(c: Comparison) -> list[str]:
    """Per op, whether both runs chose the same backends, and how far each boundary moved when
    they did: the first half of the verdict."""
    out = [f"\nbucket assignments ({c.metric}):"]
    one, two = c.buckets
    for op in c.ops:
        a, b = one.get(op, []), two.get(op, [])
        match = _backends(a) == _backends(b)
        state = "same" if match else "DIFFERENT"
        out.append(f"  {op:<8} {state:<10} run 1: {_describe(a)}")
        if not match:
            out.append(f"  {'':<8} {'':<10} run 2: {_describe(b)}")
        elif len(a) > 1:
            moves = [f"{x.lo} -> {y.lo} ({y.lo / x.lo - 1:+.0%})" for x, y in zip(a[1:], b[1:])]
            out.append(f"  {'':<8} boundaries moved: {', '.join(moves)}")
    return out


def _host_line(host: pd.Series) -> str:
    """The host's speed in run 2 against run 1 (probe medians): a CPU median that moved with
    the host is the machine's doing, not the instrument's."""
    if not len(host):
        return "\nthe host while each point was measured: no probe rows in these runs"
    return (
        f"\nthe host while each point was measured (probe: a 16 K numpy add in the same "
        f"rounds): run 2 / run 1 median {host.median():.2f}, from {host.min():.2f} to "
        f"{host.max():.2f}; within {SAME_HOST:.0%} at {_same_host(host)} of {len(host)} points"
    )


def _median_lines(table: pd.DataFrame) -> list[str]:
    """Per metric, how many medians agree within TOLERANCE, the worst ones, and the share over
    the points where the host or the flags say the measurement was steady."""
    out = [f"\nmedians within {TOLERANCE:.0%} (run 2 / run 1):"]
    for metric, both in table.groupby("metric", sort=False):
        ok, ratio = both["ok"], both["ratio"]
        worst = both.iloc[int(np.argmax((ratio - 1).abs().to_numpy()))]
        out.append(
            f"  {metric:<13} {int(ok.sum()):>5} of {len(ok):<5} ({ok.mean():.0%}); median "
            f"ratio {ratio.median():.3f}; worst {worst['ratio']:.2f} at {worst['op']} "
            f"{worst['backend']} {int(worst['size'])}"
        )
        off = both[~ok].sort_values("ratio", key=lambda x: (x - 1).abs(), ascending=False)
        for r in off.head(5).itertuples():
            out.append(
                f"  {'':<13}   {r.op} {r.backend} {int(r.size)}: {r.median_s_1:.3g} s -> "
                f"{r.median_s_2:.3g} s ({r.ratio:.2f})"
                + (" (flagged unstable)" if r.unstable_1 or r.unstable_2 else "")
            )
        for label, mask in (
            ("points where the host ran at the same speed in both runs", both["same_host"]),
            ("points flagged stable in both runs", both["steady"]),
        ):
            if mask.any():
                out.append(
                    f"  {'':<13} {label}: {int(ok[mask].sum())} of {int(mask.sum())} within "
                    f"{TOLERANCE:.0%}"
                )
    return out


def _canary_lines(canaries: list[dict[str, float]]) -> list[str]:
    """The fixed workloads before and after each run: whether the machine itself changed
    while the sweeps ran."""
    out = ["\nthe machine (fixed workloads, median us: before run 1, after run 1, after run 2):"]
    for name in canaries[0]:
        values = [w[name] for w in canaries]
        out.append(
            f"  {name:<14} {'  '.join(f'{v:9.2f}' for v in values)}   "
            f"run 2 / run 1 {values[2] / values[1]:.2f}"
        )
    return out


def _verdict_lines(c: Comparison) -> list[str]:
    """The counts the verdict is made of (each median once), the verdict, the restated one,
    and the same share over the first attempts and the steady points, for reading it."""
    table, once = c.table, c.once
    cpu = once["backend"].map(is_cpu_backend).astype(bool)
    out = [
        f"\neach median counted once (a CPU backend's median is one measurement, the same in "
        f"every metric):\n  {int(once['ok'].sum())} of {len(once)} within {TOLERANCE:.0%}: "
        f"CPU backends {int(once['ok'][cpu].sum())} of {int(cpu.sum())}, CUDA backends "
        f"{int(once['ok'][~cpu].sum())} of {int((~cpu).sum())}"
        f"\n  (counted once per metric, as the earlier checks counted: "
        f"{int(table['ok'].sum())} of {len(table)}, {table['ok'].mean():.0%})"
    ]
    same = c.same_assignments
    out.append(
        f"\nassignments {'identical' if same else 'DIFFER'}; {c.share:.1%} of medians within "
        f"{TOLERANCE:.0%} -> {'STABLE' if c.stable else 'NOT STABLE'}"
    )
    out.append(_format_restated(c.restated, c.host))
    if c.firsts is not None:
        out.append(
            f"the first attempts only (roughly what a sweep without retries would have read; "
            f"its refinement sizes came from the chosen attempts): "
            f"{_share(c.firsts['ok'])} of {len(c.firsts)} medians within {TOLERANCE:.0%}"
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
        out.append(
            f"{label}: {_share(once['ok'][mask])} of {int(mask.sum())} medians within "
            f"{TOLERANCE:.0%}"
        )
    return out


def _format_restated(r: Restated, host: pd.Series) -> str:
    moved = [
        f"{b.op} {b.run_1} -> {b.run_2} ({b.run_2 / b.run_1 - 1:+.0%}"
        + (f", interval [{b.interval[0]}, {b.interval[1]}]" if b.interval else ", no interval")
        + ("" if b.ok else ", OUT")
        + ")"
        for b in r.boundaries
    ]
    spread = (
        f"; the host's probe, run 2 / run 1, from {host.min():.2f} to {host.max():.2f}"
        if len(host)
        else ""
    )
    e2e = ", ".join(f"{m} {ok} of {n}" for m, (ok, n) in r.e2e.items())
    ok_b = sum(b.ok for b in r.boundaries)
    if not r.applicable:
        verdict = "not applicable (restated: no CUDA kernel-only medians to compare)"
    else:
        verdict = f"{'STABLE' if r.stable else 'NOT STABLE'} (restated)"
    return (
        f"\nrestated (identical assignments; boundaries within their 95% interval or "
        f"{BOUNDARY_TOLERANCE:.0%}; kernel-only medians within {KERNEL_TOLERANCE:.0%}):\n"
        f"  boundaries {ok_b} of {len(r.boundaries)}: {'; '.join(moved) or 'none'}\n"
        f"  kernel-only medians within {KERNEL_TOLERANCE:.0%}: {r.kernels[0]} of {r.kernels[1]}\n"
        f"  end-to-end medians within {TOLERANCE:.0%} (reported, not judged): {e2e}{spread}\n"
        f"  -> {verdict}"
    )


def _same_host(host: pd.Series) -> int:
    """How many points' probes agree within SAME_HOST between the two runs."""
    return int(((host - 1).abs() <= SAME_HOST).sum())


def _backends(buckets: list[Bucket]) -> list[str]:
    return [b.backend for b in buckets]


def _bucket(b: Bucket) -> dict[str, Any]:
    return {"lo": b.lo, "hi": b.hi, "backend": b.backend}


def _describe(buckets: list[Bucket]) -> str:
    if not buckets:
        return "not measured"
    return " | ".join(f"[{b.lo}, {'inf' if b.hi is None else b.hi}) {b.backend}" for b in buckets)


def _share(ok: pd.Series) -> str:
    """The share of True in ``ok`` as a percentage, "-" when it is empty."""
    return f"{ok.mean():.0%}" if len(ok) else "-"
