"""Repetition policy and timers (pyperf's discipline: warm-ups, a minimum measured time, raw
values kept).

``interleaved(fns, policy)`` warms each function up, then times them in turns until each one's
repetitions add up to ``min_time_s`` and number at least ``min_reps``, never more than
``max_reps``.  Every repetition is returned; statistics are computed later, from the CSV.

``wall`` reads the host clock around a call that must itself synchronize (``Plan.evaluate``
and the bus copies do).  CUDA phases are timed with events inside ``Plan.profile``.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any


def wall(fn: Callable[[], Any], loops: int = 1) -> float:
    """Seconds per call of ``fn``, over ``loops`` calls back to back."""
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops


def warm(fn: Callable[[], Any], calls: int, seconds: float) -> float:
    """Run ``fn`` at least ``calls`` times and for at least ``seconds``; return the last call's
    time (0 when no call was made)."""
    last = 0.0
    spent = 0.0
    done = 0
    while done < calls or spent < seconds:
        last = wall(fn)
        spent += last
        done += 1
    return last


def interleaved(fns: Sequence[Callable[[], Any]], policy: Any) -> list[list[float]]:
    """Repetitions of every function, run round-robin with a rotating start.

    ``policy`` has ``warmup``, ``min_time_s``, ``min_reps`` and ``max_reps`` (a spec's
    ``Repetitions``), and optionally ``warmup_s`` (warm each function for at least this long
    too) and ``min_sample_s`` (a repetition of a function faster than this times that many
    seconds' worth of back-to-back calls and records the time per call).  Each function is
    repeated until its own repetitions add up to ``min_time_s`` and number at least
    ``min_reps``, never more than ``max_reps``.  Running them in turns lands drift (clocks,
    caches, a busy neighbour) on every one alike instead of on whichever would have been
    measured last.  The garbage collector is paused while timing, as ``timeit`` does.
    """
    warmup_s = getattr(policy, "warmup_s", 0.0) or 0.0
    min_sample_s = getattr(policy, "min_sample_s", 0.0) or 0.0
    loops = []
    for fn in fns:
        last = warm(fn, max(policy.warmup, 1 if min_sample_s else 0), warmup_s)
        loops.append(max(1, math.ceil(min_sample_s / last)) if min_sample_s and last else 1)
    times: list[list[float]] = [[] for _ in fns]
    spent = [0.0 for _ in fns]
    active = list(range(len(fns)))
    turn = 0
    collecting = gc.isenabled() and getattr(policy, "pause_gc", True)
    if collecting:
        gc.collect()
        gc.disable()
    try:
        while active:
            start = turn % len(active)
            for i in active[start:] + active[:start]:
                seconds = wall(fns[i], loops[i])
                times[i].append(seconds)
                spent[i] += seconds * loops[i]
            turn += 1
            active = [
                i
                for i in active
                if len(times[i]) < policy.max_reps
                and (len(times[i]) < policy.min_reps or spent[i] < policy.min_time_s)
            ]
    finally:
        if collecting:
            gc.enable()
    return times


def repeat(fn: Callable[[], Any], policy: Any) -> list[float]:
    """``interleaved`` for one function."""
    return interleaved([fn], policy)[0]
