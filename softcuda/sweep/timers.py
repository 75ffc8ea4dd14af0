"""Repetition policy and timers (pyperf's discipline: warm-ups, a minimum measured time, raw
values kept).

``repeat(fn, policy)`` runs ``fn`` ``warmup`` times untimed, then times it until the measured
repetitions add up to ``min_time_s`` and there are at least ``min_reps`` of them, never more
than ``max_reps``.  Every repetition is returned; statistics are computed later, from the CSV.

The timer is a hook: ``wall`` reads the host clock around a call that must itself synchronize
(``Plan.evaluate`` does).  CUDA phases are timed with events inside ``Plan.profile``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wall(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def repeat(
    fn: Callable[[], Any],
    *,
    warmup: int,
    min_time_s: float,
    min_reps: int,
    max_reps: int,
    timer: Callable[[Callable[[], Any]], float] = wall,
) -> list[float]:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    total = 0.0
    while len(times) < max_reps and (len(times) < min_reps or total < min_time_s):
        seconds = timer(fn)
        times.append(seconds)
        total += seconds
    return times


def count_for(first: list[float], *, min_time_s: float, min_reps: int, max_reps: int) -> int:
    """How many repetitions the same policy would take for a function as slow as ``first``."""
    if not first:
        return min_reps
    mean = sum(first) / len(first)
    wanted = int(min_time_s / mean) + 1 if mean > 0 else max_reps
    return max(min_reps, min(max_reps, wanted))
