"""Repetition policy and timers (pyperf's discipline: warm-ups, a minimum measured time, raw
values kept).

``interleaved(fns, policy)`` runs each function ``warmup`` times untimed, then times them in
turns until each one's repetitions add up to ``min_time_s`` and number at least ``min_reps``,
never more than ``max_reps``.  Every repetition is returned; statistics are computed later,
from the CSV.

``wall`` reads the host clock around a call that must itself synchronize (``Plan.evaluate``
and the bus copies do).  CUDA phases are timed with events inside ``Plan.profile``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


def wall(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(fns: Sequence[Callable[[], Any]], policy: Any) -> list[list[float]]:
    """Repetitions of every function, run round-robin with a rotating start.

    ``policy`` has ``warmup``, ``min_time_s``, ``min_reps`` and ``max_reps`` (a spec's
    ``Repetitions``).  Each function is repeated until its own repetitions add up to
    ``min_time_s`` and number at least ``min_reps``, never more than ``max_reps``.  Running them
    in turns lands drift (clocks, caches, a busy neighbour) on every one alike instead of on
    whichever would have been measured last.
    """
    for _ in range(policy.warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    spent = [0.0 for _ in fns]
    active = list(range(len(fns)))
    turn = 0
    while active:
        start = turn % len(active)
        for i in active[start:] + active[:start]:
            seconds = wall(fns[i])
            times[i].append(seconds)
            spent[i] += seconds
        turn += 1
        active = [
            i
            for i in active
            if len(times[i]) < policy.max_reps
            and (len(times[i]) < policy.min_reps or spent[i] < policy.min_time_s)
        ]
    return times


def repeat(fn: Callable[[], Any], policy: Any) -> list[float]:
    """``interleaved`` for one function."""
    return interleaved([fn], policy)[0]
