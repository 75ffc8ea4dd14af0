"""Drift checks: re-time a few sizes next to each bucket boundary of a profile.

A profile can go stale in ways the device hash cannot see (a driver or clock change, another
BLAS build).  For every boundary between two backends, the sizes just outside the recorded 95%
interval of the crossover are measured again, the same way the sweep measures them: below the
interval the lower bucket's backend must still win, above it the upper bucket's.  A winner that
changed sides is drift beyond the recorded interval.  A tie (within the selection rule's
MIN_EFFECT, or overlapping intervals) is reported but is not drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config import Config
from . import schema
from .runner import Machine, Point, Sweep, detect
from .spec import spec_from_dict

MARGIN = 1.25  # how far outside the recorded interval the re-timed sizes sit
_INTERVAL = re.compile(r"(?:crossover|boundary) \d+ \[(\d+), (\d+)\]")


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

    @property
    def ratio(self) -> float:
        """other / expected: above 1 the expected backend still wins."""
        return self.other_s / self.expected_s

    @property
    def status(self) -> str:
        from .select import MIN_EFFECT

        if self.ratio >= 1.0:
            return "ok"
        if self.ratio >= 1.0 / (1.0 + MIN_EFFECT):
            return "tie"
        return "DRIFT"


def boundaries(config: Config) -> list[tuple[str, int, tuple[int, int], str, str]]:
    """(op, boundary, recorded interval, backend below, backend above) for every change of
    backend between neighbouring buckets; the interval is read from the rule's note when
    ``softcuda init`` wrote one, else taken as the boundary +-10%."""
    found = []
    for op, rules in sorted(config.rules.items()):
        for below, above in zip(rules, rules[1:]):
            if below.backend == above.backend:
                continue
            match = _INTERVAL.search(" ".join(below.note))
            if match:
                interval = (int(match[1]), int(match[2]))
            else:
                interval = (round(above.lo / 1.1), round(above.lo * 1.1))
            found.append((op, above.lo, interval, below.backend, above.backend))
    return found


def recheck(config: Config, machine: Machine | None = None, seed: int = 1) -> list[Recheck]:
    """Measure both sides of every boundary of ``config`` on this machine (see the module)."""
    machine = machine or detect(int(config.device.get("device_index", 0)))
    metric = config.sweep.get("metric", schema.DEFAULT_METRIC)
    kinds = sorted({schema.METRICS[metric][2] or "pinned"})
    results = []
    for op, at, (lo, hi), below, above in boundaries(config):
        spec = spec_from_dict(
            {
                "name": "recheck",
                "backends": sorted({below, above}),
                "host_memory": kinds,
                "metric": metric,
                "repetitions": {"warmup": 2, "min_time_s": 0.05, "min_reps": 10, "max_reps": 200},
                "ops": {op: {"sizes": {"start": max(1, at), "stop": max(1, at), "per_octave": 1}}},
            },
            "<recheck>",
        )
        sweep = Sweep(spec, "<recheck>", "/nonexistent", machine=machine, seed=seed)
        for size, expected, other in (
            (max(1, int(lo / MARGIN)), below, above),
            (max(2, int(hi * MARGIN) + 1), above, below),
        ):
            rows = sweep.measure(Point(op, size, "*"))
            medians = _medians(rows, metric)
            if expected in medians and other in medians:
                results.append(
                    Recheck(
                        op, at, (lo, hi), size, expected, other, medians[expected], medians[other]
                    )
                )
    return results


def _medians(rows: list[tuple], metric: str) -> dict[str, float]:
    """Median seconds per backend of the rows that make up ``metric`` (as the sweep decides)."""
    import pandas as pd

    from ..analysis.stats import metric_rows

    frame = metric_rows(pd.DataFrame(rows, columns=list(schema.COLUMNS)), metric)
    return {str(b): float(v) for b, v in frame.groupby("backend")["seconds"].median().items()}
