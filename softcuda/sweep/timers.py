"""Repetition policy and timers (pyperf's discipline: warm-ups, a minimum measured time, raw
values kept).

``interleaved(groups, policy, hot)`` warms each function up, then times groups of them (the
copies of one plan) in turns, with ``hot`` each timed call right after an untimed call of
itself, until each group's repetitions add up to ``min_time_s`` and number at least
``min_reps``, never more than ``max_reps``.  Every repetition is returned; statistics are
computed later, from the CSV.

``wall`` reads the host clock around a call that must itself synchronize (``Plan.evaluate``
and the bus copies do).  CUDA phases are timed with events inside ``Plan.profile``.

``balanced_orders(n)`` is the order in which the whole-graph benchmarks take turns: rounds in
which no contestant always runs right after the same other one; ``in_turns(plans, rounds)``
times plans that way, in blocks of back-to-back calls.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any


def wall(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def per_call(plan: Any, calls: int) -> float:
    """Seconds per run of ``calls`` back-to-back ``plan.evaluate(copy=False)`` (each run
    synchronises its stream): a block, as a plan in use runs again and again."""
    t0 = time.perf_counter()
    for _ in range(calls):
        plan.evaluate(copy=False)
    return (time.perf_counter() - t0) / calls


TIMED_BLOCK_S = 5e-5
"""The least time a sweep's repetition lasts (seconds): a call shorter than that is timed as a
block of back-to-back calls of itself and the block's mean kept (``interleaved``'s ``block_s``).
A plan runs its steps and its calls back to back with no clock read between them, and a clock
read costs from 0.06 us (a TSC read in user space) to about a microsecond (a virtual machine's
clock read through its kernel): timed one call at a time, a sweep priced every small step that
much high.  At 50 us a microsecond's read is 2% of a repetition."""
MAX_BLOCK_CALLS = 64
"""The most calls in one timed block (a call of a fraction of a microsecond would ask more)."""


def block_size(seconds: float, block_s: float) -> int:
    """Calls in a block timed as one repetition where one call takes ``seconds``: enough for
    the block to last ``block_s``, at least 1 (so 1 wherever ``block_s`` is 0), at most
    MAX_BLOCK_CALLS."""
    if block_s <= 0 or seconds >= block_s:
        return 1
    return max(1, min(MAX_BLOCK_CALLS, math.ceil(block_s / max(seconds, 1e-9))))


def _block(fn: Callable[[], Any], calls: int) -> Callable[[], Any]:
    """``fn`` run ``calls`` times back to back (``fn`` itself for one call)."""
    if calls == 1:
        return fn

    def run() -> None:
        for _ in range(calls):
            fn()

    return run


def interleaved(
    groups: Sequence[Sequence[Callable[[], Any]]],
    policy: Any,
    hot: bool = False,
    riders: int = 0,
    settle: Sequence[Callable[[], Any] | None] | None = None,
    block_s: float = 0.0,
) -> list[list[list[float]]]:
    """Repetitions of every function, run a group at a time, groups in turns.

    A group is the copies of one plan (the same backend on copies of the data).  ``policy`` has
    ``warmup``, ``min_time_s``, ``min_reps`` and ``max_reps`` (a spec's ``Repetitions``).  Each
    round runs every active group once, starting one group further on each round; a group's
    turn times each of its copies once.  With ``hot``, each timed call comes right after an
    untimed call of the same function, so its data and code are as hot in the caches as they
    will go: without it a copy's data was last touched a round earlier, with every other
    backend's work in between, and how much of it was still cached could differ from run to
    run.  A group stops once its repetitions (over all copies) add up to ``min_time_s`` and
    number at least ``min_reps``, or reach ``max_reps``.  Running groups in turns lands drift
    (clocks, a busy neighbour) on every one alike instead of on whichever would have been
    measured last.  The last ``riders`` groups ride along: they are timed in every round while
    any other group is, and stop when the others have (or at ``max_reps``), whatever their own
    time — a probe of the machine that must cover the others' rounds and no more.  Riders are
    timed hot whatever ``hot`` says: a probe of the host's speed must not read what the others'
    data did to the caches (timed cold beside a point whose data is far larger than the caches,
    it reads far above its hot time, and scattered, and says more about that point's data than
    about the host).  ``settle``, where given, has per group a function (or None) called right
    before each of its timed calls, untimed: a cpu_threads plan's wakes the kernels' pool, so
    that the call runs on threads already spinning, as in a plan running its steps back to back
    (``native.ready``); with ``hot`` it runs before the untimed call too.  A pool thread keeps
    its own chunks of the data from call to call, so the untimed call must find the threads up
    as well: run by the caller alone while they slept (other backends' work came between), it
    left the data in the caller's cache, the timed call's threads fetched it from there, and in
    the H100's reference sweep the first copy timed in each turn read two to three times the
    next two (an add of 2^18 elements: 28 to 30 us against 11 to 14).  The garbage collector is
    paused while timing, as ``timeit`` does.

    With ``block_s``, a group that is not a rider and whose call (its settled warm-ups past the
    first timed, and where they were short or none, one more call, hot) is shorter than
    ``block_s`` is timed in blocks of ``block_size`` back-to-back calls of a copy, the settle
    function run before the block only: one repetition is then the block's mean, and the
    clock's own cost is paid once a block rather than once a call (``TIMED_BLOCK_S``).
    ``min_time_s`` still counts the time spent, blocks and all.

    Returns, per group, per copy, the seconds of each repetition (per call) in the order taken.
    """
    if any(not group for group in groups):
        raise ValueError("interleaved: every group needs at least one function")
    if not 0 <= riders < len(groups):
        raise ValueError("interleaved: riders must leave at least one group to ride along with")
    driven = len(groups) - riders
    calms = list(settle) if settle is not None else [None] * len(groups)
    # each group's first function's fastest warm-up call past the first (a fresh plan's first
    # call pays page faults and kernel loads: read from it, a 5 us call sized no block)
    warm = [math.inf] * len(groups)
    for g, group in enumerate(groups):
        calm = calms[g]
        for c, fn in enumerate(group):
            for w in range(policy.warmup):
                if c == 0 and w > 0 and block_s > 0 and g < driven:
                    if calm is not None:
                        calm()
                    warm[g] = min(warm[g], wall(fn))
                else:
                    fn()
    sizes = [1] * len(groups)
    for g in range(driven) if block_s > 0 else ():
        # short, or not yet timed: one more call, hot and settled (two with no warm-up, the
        # first of them being the plan's first call)
        unsized = warm[g] < block_s or math.isinf(warm[g])
        for _ in range(2 if policy.warmup == 0 else 1) if unsized else ():
            if calms[g] is not None:
                calms[g]()
            warm[g] = min(warm[g], wall(groups[g][0]))
        sizes[g] = block_size(warm[g], block_s)
    blocks = [[_block(fn, k) for fn in group] for group, k in zip(groups, sizes)]
    times: list[list[list[float]]] = [[[] for _ in group] for group in groups]
    taken = [0 for _ in groups]
    spent = [0.0 for _ in groups]
    active = list(range(len(groups)))
    turn = 0
    collecting = gc.isenabled()
    if collecting:
        gc.collect()
        gc.disable()
    try:
        while active:
            start = turn % len(active)
            for g in active[start:] + active[:start]:
                group = groups[g]
                room = policy.max_reps - taken[g]  # the last turn may time fewer copies
                calm = calms[g]
                calls = sizes[g]
                for c, fn in enumerate(group[:room]):
                    if hot or g >= driven:
                        if calm is not None:
                            calm()
                        fn()
                    if calm is not None:
                        calm()
                    seconds = wall(blocks[g][c])
                    times[g][c].append(seconds / calls)
                    spent[g] += seconds
                taken[g] += min(room, len(group))
            turn += 1
            active = [
                g
                for g in active
                if taken[g] < policy.max_reps
                and (g >= driven or taken[g] < policy.min_reps or spent[g] < policy.min_time_s)
            ]
            if not any(g < driven for g in active):
                active = []
    finally:
        if collecting:
            gc.enable()
    return times


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` contestants (0 .. n-1), one per round, balanced for carryover.

    Whatever a contestant's turn leaves behind (its data in the caches, the GPU's clocks, work
    still queued) is paid by whoever runs next.  Rounds that only rotate the start (0 1 2 3,
    then 1 2 3 0, ...) keep the cyclic neighbours: contestant i runs right after i - 1 in all
    rounds but one, so i pays i - 1's carryover nearly every time, and two contestants that
    run the same code read apart by their place in the round alone.  These orders are a
    Williams design: over one cycle of the returned rounds (n of them for even n, 2n for odd n)
    every contestant runs first equally often and runs right after each other contestant
    equally often (once for even n, twice for odd n).  Take round r as ``orders[r % len(orders)]``;
    a run of whole cycles is balanced.  The first round is 0, 1, n-1, 2, n-2, ...; round r adds
    r to each (mod n); for odd n the cycle goes on with the same rounds reversed.  The pair at a
    round's boundary (the last of one round, the first of the next) is outside the design.
    """
    if n < 1:
        raise ValueError("balanced_orders: needs at least one contestant")
    first, low, high = [0], 1, n - 1
    while low <= high:
        first.append(low)
        low += 1
        if low <= high:
            first.append(high)
            high -= 1
    rounds = [[(c + r) % n for c in first] for r in range(n)]
    if n % 2 and n > 1:
        rounds += [order[::-1] for order in rounds]
    return rounds


def repeat(fn: Callable[[], Any], policy: Any) -> list[float]:
    """``interleaved`` for one function: after the warm-ups every call follows a call of
    itself, so it is hot without ``hot``."""
    return interleaved([[fn]], policy)[0][0]


BLOCK_S = 2e-4
"""The least time of the fastest plan's block in ``in_turns`` (seconds): long enough that what
the first call after another plan pays, a microsecond or two on small plans (docs/method.md),
is about 1% of the block."""
MAX_CALLS = 1000
"""The most calls in a block (a plan of a microsecond or less would otherwise ask for more)."""


def block_calls(fastest_s: float) -> int:
    """Calls per block where the fastest plan takes ``fastest_s`` a call: enough for its block
    to last ``BLOCK_S``, at least 1 and at most ``MAX_CALLS``."""
    return max(1, min(MAX_CALLS, math.ceil(BLOCK_S / max(fastest_s, 1e-12))))


def in_turns(plans: dict[str, Any], rounds: int) -> tuple[int, list[tuple[str, int, float]]]:
    """Plans (name -> plan) timed in blocks of ``block_calls`` back-to-back calls each, the
    plans taking turns block by block in ``balanced_orders``: the calls per block, and (name,
    round, seconds per call) for every block in the order taken.  Each plan is warmed up
    first (kernels compiled, pools touched)."""
    warm = {name: min(per_call(plan, 1) for _ in range(2)) for name, plan in plans.items()}
    calls = block_calls(min(warm.values()))
    names = list(plans)
    orders = balanced_orders(len(names))
    taken = []
    for r in range(rounds):
        order = [names[i] for i in orders[r % len(orders)]]
        # Untimed: the round's first block follows a call of its own plan, not the previous
        # round's last one (a pair the balanced order does not cover).
        plans[order[0]].evaluate(copy=False)
        for name in order:
            taken.append((name, r, per_call(plans[name], calls)))
    return calls, taken
