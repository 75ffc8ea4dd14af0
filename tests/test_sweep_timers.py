"""The timing loops (softcuda.sweep.timers) and the host's speed (softcuda.sweep.settle):
interleaved rounds, balanced orders, the probe and the wait for the host."""

from __future__ import annotations

import pytest


def test_hot_times_every_call_right_after_a_call_of_itself_and_groups_take_turns(monkeypatch):
    from types import SimpleNamespace

    from softcuda.sweep import timers

    log = []
    timed = []

    def fn(name):
        return lambda: log.append(name)

    def wall(f):  # the timer notes which call it timed
        f()
        timed.append(len(log) - 1)
        return 1e-6

    groups = [[fn("a0"), fn("a1"), fn("a2")], [fn("b0")]]
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=6, max_reps=6)
    monkeypatch.setattr(timers, "wall", wall)
    times = timers.interleaved(groups, policy, hot=True)
    assert [len(c) for c in times[0]] == [2, 2, 2] and [len(c) for c in times[1]] == [6]
    assert log[:4] == ["a0", "a1", "a2", "b0"]  # the warm-ups
    # every timed call comes right after an untimed call of the same function
    assert len(timed) == 12 and all(log[i - 1] == log[i] and i - 1 not in timed for i in timed)
    # a round runs a's copies then b, the next round b first: the start rotates
    assert [log[i] for i in timed[:5]] == ["a0", "a1", "a2", "b0", "b0"]
    assert [log[i] for i in timed[5:8]] == ["a0", "a1", "a2"]

    log.clear(), timed.clear()
    timers.interleaved(groups, policy)  # not hot: every call is timed
    assert timed == list(range(4, len(log)))

    log.clear(), timed.clear()
    timers.interleaved(groups, policy, riders=1)  # not hot, but the rider b0 is, always
    rider = [i for i in timed if log[i] == "b0"]
    assert rider and all(log[i - 1] == "b0" and i - 1 not in timed for i in rider)
    others = [i for i in timed if log[i] != "b0"]
    assert len(others) == sum(name != "b0" for name in log[4:])  # every call of a timed: cold


def test_settle_runs_right_before_each_timed_call_of_its_group_and_its_warm_call(monkeypatch):
    from types import SimpleNamespace

    from softcuda.sweep import timers

    log = []

    def fn(name):
        return lambda: log.append(name)

    def wall(f):
        log.append("timer")
        f()
        return 1e-6

    groups = [[fn("a")], [fn("b")]]
    policy = SimpleNamespace(warmup=0, min_time_s=0.0, min_reps=3, max_reps=3)
    monkeypatch.setattr(timers, "wall", wall)
    for hot in (True, False):
        log.clear()
        timers.interleaved(groups, policy, hot=hot, settle=[fn("settle"), None])
        starts = [i for i, x in enumerate(log) if x == "timer"]
        for i in starts:
            timed = log[i + 1]
            assert (log[i - 1] == "settle") == (timed == "a"), (hot, log)
            if hot:  # the untimed call before it found the pool woken too
                want = ["settle", "a", "settle"] if timed == "a" else ["b"]
                assert log[i - len(want) : i] == want, log
        assert log.count("settle") == (6 if hot else 3)


def test_a_rider_is_timed_in_the_others_rounds_and_stops_with_them():
    from types import SimpleNamespace

    from softcuda.sweep.timers import interleaved

    policy = SimpleNamespace(warmup=0, min_time_s=1e9, min_reps=1, max_reps=50)
    quick = SimpleNamespace(warmup=0, min_time_s=0.0, min_reps=4, max_reps=50)
    # the backends stop after 4 rounds; the rider (which alone would run to max_reps) with them
    times = interleaved([[lambda: None] * 2, [lambda: None]], quick, riders=1)
    assert [len(c) for c in times[0]] == [2, 2] and len(times[1][0]) == 2
    times = interleaved([[lambda: None], [lambda: None]], quick, riders=1)
    assert len(times[0][0]) == 4 and len(times[1][0]) == 4
    times = interleaved([[lambda: None], [lambda: None]], policy, riders=1)  # both to max_reps
    assert len(times[0][0]) == 50 and len(times[1][0]) == 50
    with pytest.raises(ValueError, match="riders"):
        interleaved([[lambda: None]], policy, riders=1)


def test_a_short_call_is_timed_in_blocks_whose_mean_is_one_repetition_and_the_clock_paid_once(
    monkeypatch,
):
    """A clock that costs a fixed offset a read (as a virtual machine's read through its kernel
    does): timed one call at a time, a call of about 1 us reads 1 us high; timed in blocks of
    back-to-back calls, the offset is shared by the block.  Riders and calls longer than the
    block are timed alone, and the settle function runs before a block, not before each call
    in it.  (Times are powers of two, so that the sums are exact.)"""
    from types import SimpleNamespace

    from softcuda.sweep import timers

    us = 2.0**-20  # about a microsecond
    now = [0.0]
    calls = {"short": 0, "long": 0, "rider": 0, "settle": 0}

    def clock():  # every read costs ``us``
        now[0] += us
        return now[0]

    def wall(f):
        start = clock()
        f()
        return clock() - start

    def fn(name, seconds):
        def run():
            calls[name] += 1
            now[0] += seconds

        return run

    def settle():
        calls["settle"] += 1

    monkeypatch.setattr(timers, "wall", wall)
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=4, max_reps=4)
    groups = [[fn("short", us)], [fn("long", 256 * us)], [fn("rider", us)]]
    alone = timers.interleaved(groups, policy, hot=True, riders=1)
    assert [s[0] for s in alone] == [[2 * us] * 4, [257 * us] * 4, [2 * us] * 4]

    calls.update(short=0, long=0, rider=0, settle=0)
    block_s = 32 * us
    blocked = timers.interleaved(
        groups, policy, hot=True, riders=1, settle=[settle, None, None], block_s=block_s
    )
    k = timers.block_size(2 * us, block_s)  # sized from a call as the clock reads it
    assert k == 16
    short, long, rider = (s[0] for s in blocked)
    assert short == [us + us / k] * 4  # the clock's cost shared by the block
    assert long == [257 * us] * 4  # longer than a block: one call a repetition
    assert rider == [2 * us] * 4  # a rider times one call, as it always did
    # warm-up 1 (a first call, untimed), one settled call to size the block, then 4
    # repetitions of a hot call and a block of k
    assert calls["short"] == 1 + 1 + 4 * (1 + k) and calls["long"] == 1 + 1 + 4 * 2
    assert calls["settle"] == 1 + 4 * 2  # before the sizing call, each hot call and each block

    # a fresh plan's first call is slow (page faults, kernel loads): the block is sized from
    # the calls after it, never from it
    first = {"n": 0}

    def cold_first():
        first["n"] += 1
        now[0] += (64 if first["n"] == 1 else 1) * us

    for warmup in (0, 1, 3):
        first["n"] = 0
        policy = SimpleNamespace(warmup=warmup, min_time_s=0.0, min_reps=2, max_reps=2)
        (series,) = timers.interleaved([[cold_first]], policy, hot=True, block_s=block_s)[0]
        assert series == [us + us / k] * 2, warmup
    # a later warm-up as long as a block: timed alone, with no call to size it
    calls.update(long=0)
    policy = SimpleNamespace(warmup=2, min_time_s=0.0, min_reps=2, max_reps=2)
    timers.interleaved([[fn("long", 256 * us)]], policy, hot=True, block_s=block_s)
    assert calls["long"] == 2 + 2 * 2
    assert timers.block_size(1e-9, 5e-5) == timers.MAX_BLOCK_CALLS
    assert timers.block_size(1e-6, 0.0) == 1 and timers.block_size(1e-4, 5e-5) == 1


def follows(orders: list[list[int]]) -> dict[tuple[int, int], int]:
    """How often, within the rounds, each contestant runs right after each other one."""
    counts: dict[tuple[int, int], int] = {}
    for order in orders:
        for before, after in zip(order, order[1:]):
            counts[before, after] = counts.get((before, after), 0) + 1
    return counts


@pytest.mark.parametrize("n", range(1, 9))
def test_balanced_orders_let_nobody_always_follow_the_same_contestant(n):
    from softcuda.sweep.timers import balanced_orders

    orders = balanced_orders(n)
    times = 1 if n % 2 == 0 or n == 1 else 2  # odd n needs two squares
    assert len(orders) == n * times
    assert all(sorted(order) == list(range(n)) for order in orders)
    assert sorted(order[0] for order in orders) == sorted(list(range(n)) * times)
    every_pair = {(a, b): times for a in range(n) for b in range(n) if a != b}
    assert follows(orders) == every_pair


def test_a_rotating_start_fails_that_balance_and_no_contestants_is_refused():
    """The rotation the benchmarks used before: with 4 contestants, 1 runs right after 0 in 3
    rounds of 4 and never right after 2."""
    from softcuda.sweep.timers import balanced_orders

    rotated = [[(c + r) % 4 for c in range(4)] for r in range(4)]
    assert follows(rotated)[0, 1] == 3 and (2, 1) not in follows(rotated)
    with pytest.raises(ValueError):
        balanced_orders(0)


def test_a_group_never_takes_more_than_max_reps_and_an_empty_group_is_refused():
    from types import SimpleNamespace

    from softcuda.sweep.timers import interleaved

    policy = SimpleNamespace(warmup=0, min_time_s=1.0, min_reps=1, max_reps=7)
    times = interleaved([[lambda: None] * 3], policy)
    assert [len(c) for c in times[0]] == [3, 2, 2]
    with pytest.raises(ValueError, match="at least one function"):
        interleaved([[]], policy)


def test_host_time_is_the_median_of_hot_calls_with_the_collector_paused(monkeypatch):
    import gc

    from softcuda.sweep import settle

    now = [0.0]
    durations = iter([1.0, 1e-6, 1e-6, 5e-6, 1e-6, 9e-6])  # the first call is the warm-up
    collecting = []

    def fake_probe():
        collecting.append(gc.isenabled())
        now[0] += next(durations)

    monkeypatch.setattr(settle, "probe", fake_probe)
    monkeypatch.setattr(settle.time, "perf_counter", lambda: now[0])
    assert settle.host_time(calls=5) == pytest.approx(1e-6)
    assert collecting[1:] == [False] * 5 and gc.isenabled()


def test_waiting_for_the_host_returns_once_the_probe_is_fast_or_the_time_is_spent():
    from softcuda.sweep.settle import wait_for_host

    now = [0.0]
    host = iter([4.0e-6, 3.9e-6, 3.4e-6, 3.2e-6])

    def sleep(s):
        now[0] += s

    waited = wait_for_host(
        3e-6, 0.10, 10, measure=lambda: next(host), sleep=sleep, clock=lambda: now[0]
    )
    # three readings over 3.3 us, 0.25 s apart, then 3.2 us
    assert waited == (pytest.approx(0.75), True)
    slow = wait_for_host(3e-6, 0.10, 0.6, measure=lambda: 5e-6, sleep=sleep, clock=lambda: now[0])
    assert slow == (pytest.approx(0.6), False)  # the last sleep is cut to what is left
    fast = wait_for_host(3e-6, 0.10, 5, measure=lambda: 3.3e-6, sleep=sleep, clock=lambda: now[0])
    assert fast == (0.0, True)  # 3.3 us is within 10% of 3 us: no wait
    once = wait_for_host(3e-6, 0.10, 0, measure=lambda: 5e-6, sleep=sleep, clock=lambda: now[0])
    assert once == (0.0, False)  # no time to wait: one reading


def test_the_pool_is_woken_only_before_a_cpu_threads_kernel_that_spreads_over_it(monkeypatch):
    from softcuda.backends import cpu_threads, native
    from softcuda.sweep.measure import _settle

    if native.library() is None:
        pytest.skip(f"the native kernels are unavailable: {native.unavailable()}")
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 4)
    assert native.chunks(1 << 20, 1 << 20, 4) > 1 and native.chunks(1024, 1024, 4) == 1
    assert callable(_settle("cpu_threads", "add", 1 << 20))
    # one chunk: the kernel runs on the calling thread alone, as in a plan, so no spinning
    # neighbours while it is timed (on the H100 host they slowed it by 1.7 us)
    assert _settle("cpu_threads", "add", 1024) is None
    # a heavy op spreads sooner: tanh at 2^14 counts 8 one-flop elements each
    assert native.chunks(8 << 14, 1 << 14, 4) > 1
    assert callable(_settle("cpu_threads", "tanh", 1 << 14))
    assert _settle("cpu_threads", "add", 1 << 14) is None
    # a softmax row is a heavy op's work per element, as its kernel counts it
    assert callable(_settle("cpu_threads", "softmax", 1 << 14))
    assert callable(_settle("cpu_threads", "log_softmax_short", 1 << 14))
    # numpy's matmul and the other backends never wake it
    assert _settle("cpu_threads", "matmul", 1 << 20) is None
    assert _settle("cpu_fallback", "add", 1 << 20) is None
