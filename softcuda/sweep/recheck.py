"""Drift checks: re-time a few sizes next to each bucket boundary of a profile.

A profile can go stale in ways the device hash cannot see (a driver or clock change, another
BLAS build).  For every boundary between two backends, the sizes just outside the recorded 95%
interval of the crossover are measured again, the same way the sweep measured them: below the
interval the lower bucket's backend must still win, above it the upper bucket's.  A winner that
changed sides is drift beyond the recorded interval.  A tie (within the selection rule's
MIN_EFFECT, or overlapping intervals) is reported but is not drift.  A side that reads drift is
measured again, up to the sweep's ``repetitions.retries`` times, in passes after every other
side (as the sweep retries its points): drift is reported only where every attempt read it.
One attempt is not enough: the host's own speed moves in spells of seconds to tens of seconds,
and a side timed in a slow one reads cpu_fallback slower than the sweep did, so a boundary that
has not moved reads as drift (docs/findings.md, "Recheck").

"The same way" includes the company a point was measured in: the backends, host memory kinds
and repetition policy of the sweep's spec, read from the metadata beside the profile's raw CSV
(``[sweep] csv``), or FALLBACK where it cannot be found.  With fewer plans in each round (only
the two contenders, pinned, on one copy) a CPU backend's data stays in the caches between its
calls, so its small elementwise ops run much faster than they did in the sweep, and boundaries
that hold in the sweep's company read as drift (docs/method.md, "Checking a profile: verify
and recheck").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..backends import BACKENDS
from ..config import Config
from ..errors import DataError
from ..ops import CHAINS
from ..timings import schema
from ..timings.load import load_metadata, metadata_path
from ..timings.select import MIN_EFFECT
from ..timings.stats import metric_rows
from .machine import Machine, detect
from .measure import Point
from .runner import Sweep
from .settle import Settled, settle
from .spec import Spec, max_stop, recorded_repetitions, spec_from_dict

MARGIN = 1.25  # how far outside the recorded interval the re-timed sizes sit
FALLBACK: dict[str, Any] = {  # sweeps/default.yaml's way of measuring
    "backends": "all",
    "host_memory": ["pinned", "pageable"],
    "repetitions": {"warmup": 1, "min_time_s": 0.02, "min_reps": 3, "max_reps": 200, "buffers": 3},
    "settle_s": 60,
}
_INTERVAL = re.compile(r"(?:crossover|boundary) \d+ \[(\d+), (\d+)\]")
_ALTERNATE = re.compile(r"winners alternate over \[(\d+), (\d+)\]")


@dataclass(frozen=True)
class Recheck:
    op: str
    boundary: int
    interval: tuple[int, int]
    size: int
    expected: str  # backend that should win at this size
    other: str
    expected_s: float
    other_s: float
    earlier: tuple[str, ...] = ()  # the status of each attempt before this one (all DRIFT)

    @property
    def ratio(self) -> float:
        """other / expected: above 1 the expected backend still wins."""
        return self.other_s / self.expected_s

    @property
    def status(self) -> str:
        if self.ratio >= 1.0:
            return "ok"
        if self.ratio >= 1.0 / (1.0 + MIN_EFFECT):
            return "tie"
        return "DRIFT"


def boundaries(config: Config) -> list[tuple[str, int, tuple[int, int], str, str]]:
    """(op, boundary, recorded interval, backend below, backend above) for every change of
    backend between neighbouring buckets; the interval is read from the rule's note when
    ``softcuda init`` wrote one (the stretch where the winners alternate, where the sweep saw
    one, else the crossover's interval), else taken as the boundary +-10%."""
    found = []
    for op, rules in sorted(config.rules.items()):
        if op in CHAINS:  # a fused chain's crossover: no node is decided by it
            continue
        for below, above in zip(rules, rules[1:]):
            if below.backend == above.backend:
                continue
            note = " ".join(below.note)
            match = _ALTERNATE.search(note) or _INTERVAL.search(note)
            if match:
                interval = (int(match[1]), int(match[2]))
            else:
                interval = (round(above.lo / 1.1), round(above.lo * 1.1))
            found.append((op, above.lo, interval, below.backend, above.backend))
    return found


def _edges(config: Config, op: str, at: int) -> tuple[int, int | None]:
    """Where the two buckets that meet at boundary ``at`` of ``op`` start and end."""
    rules = config.rules[op]
    i = next(k for k, rule in enumerate(rules) if k and rule.lo == at)
    return rules[i - 1].lo, rules[i].hi


def recheck(
    config: Config,
    machine: Machine | None = None,
    seed: int = 1,
    on_settled: Callable[[Settled], None] | None = None,
    on_skipped: Callable[[str], None] | None = None,
) -> list[Recheck]:
    """Measure both sides of every boundary of ``config`` on this machine (see the module),
    once the machine runs at a steady speed (``settle``, for at most the sweep's ``settle_s``;
    the spec's default where the sweep's metadata predates settling; what it saw goes to
    ``on_settled``; no settling where no side can be timed).  A side is timed inside its own
    bucket (moved to the bucket's edge where MARGIN would leave it); where no size of the
    bucket lies outside the recorded interval, or the side lies beyond the largest size a sweep
    measures (``spec.max_stop``), it is not timed and ``on_skipped`` gets a sentence saying
    so."""
    machine = machine or detect(int(config.device.get("device_index", 0)))
    way, skipped = measured_like(config)
    sides = _sides(config, way, skipped, on_skipped or (lambda line: None))
    if sides:  # what cannot be rechecked is said before the wait, not after it
        settled = settle(machine.device_type == "cuda", way["settle_s"])
        if on_settled is not None:
            on_settled(settled)
    retries = int(way["repetitions"].get("retries", Spec.repetitions.retries))
    return _measure_sides(sides, machine, seed, retries)


@dataclass(frozen=True)
class _Side:
    """One side of a boundary to time: the spec of its one point and what it should find."""

    spec: Spec
    op: str
    at: int
    interval: tuple[int, int]
    size: int
    expected: str
    other: str


def _sides(
    config: Config,
    way: dict[str, Any],
    skipped: dict[str, float],
    on_skipped: Callable[[str], None],
) -> list[_Side]:
    """The sides of ``config``'s boundaries that can be timed, measured ``way`` (with what the
    sweep ``skipped``: ``measured_like``); each one that cannot is said to ``on_skipped``."""
    sides = []
    for op, at, (lo, hi), below, above in boundaries(config):
        start, end = _edges(config, op, at)
        lower = max(1, int(lo / MARGIN), start)
        upper = max(2, int(hi * MARGIN) + 1)
        upper = upper if end is None else min(upper, end - 1)
        largest = max_stop(op)
        for size, expected, other, outside, where in (
            (lower, below, above, lower < lo, "below"),
            (upper, above, below, upper > hi, "above"),
        ):
            if outside and size > largest:  # (a hand-written boundary: no sweep measures there)
                line = next(r.line for r in config.rules[op] if r.lo == at)
                on_skipped(
                    f"{op} boundary {at} ({config.path}:{line}): the size {where} it, "
                    f"{size}, is larger than a sweep measures {op} at ({largest}), so "
                    "that side is not rechecked"
                )
            elif outside:
                spec = _side_spec(config, way, skipped, op, size, (below, above))
                sides.append(_Side(spec, op, at, (lo, hi), size, expected, other))
            else:
                on_skipped(
                    f"{op} boundary {at}: no size of {expected}'s bucket lies {where} the "
                    f"interval [{lo}, {hi}], so that side is not rechecked"
                )
    return sides


def _side_spec(
    config: Config,
    way: dict[str, Any],
    skipped: dict[str, float],
    op: str,
    size: int,
    contenders: tuple[str, str],
) -> Spec:
    """The spec of one side's point: measured as the sweep measured it, every backend it timed
    at that size and both contenders."""
    # A contender is measured whatever it costs (no max_point_s); a backend the sweep stopped
    # timing as too slow for an op (more than max_point_s a call) stays out of that op's company
    # at the sizes the sweep did not time it at.
    repetitions = {**way["repetitions"], "max_point_s": None}
    everyone = list(BACKENDS) if way["backends"] == "all" else list(way["backends"])
    names = [b for b in everyone if size <= skipped.get(f"{op} {b}", size) or b in contenders]
    names += [b for b in contenders if b not in names]
    return spec_from_dict(
        {
            "name": "recheck",
            "backends": names,
            "host_memory": way["host_memory"],
            "repetitions": repetitions,
            "metric": config.sweep.get("metric", schema.DEFAULT_METRIC),
            "dtype": config.sweep.get("dtype", "float32"),
            "ops": {op: {"sizes": {"start": size, "stop": size, "per_octave": 1}}},
        },
        "<recheck>",
    )


def _measure_sides(sides: list[_Side], machine: Machine, seed: int, retries: int) -> list[Recheck]:
    """Time each side once, then, in passes after all the others as the sweep retries (a slow
    spell of the host lasts seconds), again each side whose every attempt so far read DRIFT;
    each side's last attempt."""
    attempts: list[list[Recheck]] = [[] for _ in sides]

    def measure(i: int) -> None:
        side = sides[i]
        sweep = Sweep(side.spec, "<recheck>", "/nonexistent", machine=machine, seed=seed + i)
        medians = _medians(sweep.measure(Point(side.op, side.size, "*")), side.spec.metric)
        if side.expected in medians and side.other in medians:
            earlier = tuple(r.status for r in attempts[i])
            attempts[i].append(
                Recheck(
                    side.op,
                    side.at,
                    side.interval,
                    side.size,
                    side.expected,
                    side.other,
                    medians[side.expected],
                    medians[side.other],
                    earlier,
                )
            )

    for i in range(len(sides)):
        measure(i)
    for _ in range(retries):
        again = [i for i, a in enumerate(attempts) if a and a[-1].status == "DRIFT"]
        if not again:
            break
        for i in again:
            measure(i)
    return [a[-1] for a in attempts if a]


def measured_like(config: Config) -> tuple[dict[str, Any], dict[str, float]]:
    """The backends, host memory kinds, repetition policy and settling time of the sweep behind
    ``config``, and what it skipped as too slow: {"<op> <backend>": the size above which it
    was not timed}, or 0 (every size) where the metadata predates that record."""
    csv = config.sweep.get("csv")
    if csv:
        for path in (Path(csv), Path(config.path).parent / csv):  # from here, or the profile
            try:
                meta = load_metadata(path)
                way = {k: meta["spec"][k] for k in ("backends", "host_memory", "repetitions")}
                way["settle_s"] = meta["spec"].get("settle_s", Spec.settle_s)  # older sweeps
                way["repetitions"] = recorded_repetitions(way["repetitions"])
            except (DataError, KeyError, TypeError):
                continue
            # checked here, as each side's spec will hold it, to be named as what it is: the
            # spec stored in the metadata, not a spec the user never wrote
            one = {"add": {"sizes": {"start": 1, "stop": 1, "per_octave": 1}}}
            spec_from_dict({"name": "recheck", "ops": one, **way}, f"{metadata_path(path)}: spec")
            stops = meta.get("stopped_at")
            stops = stops if isinstance(stops, dict) else {}
            skipped = meta.get("skipped")
            skipped = skipped if isinstance(skipped, dict) else {}
            return way, {name: stops.get(name, 0) for name in skipped}
    return dict(FALLBACK), {}


def _medians(rows: list[tuple], metric: str) -> dict[str, float]:
    """Median seconds per backend of the rows that make up ``metric`` (as the sweep decides)."""
    frame = metric_rows(pd.DataFrame(rows, columns=list(schema.COLUMNS)), metric)
    return {str(b): float(v) for b, v in frame.groupby("backend")["seconds"].median().items()}
