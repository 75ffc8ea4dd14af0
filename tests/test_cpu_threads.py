"""cpu_threads: chunked ops across persistent workers, against float64 numpy.

The chunk threshold is lowered to a few bytes so that small, odd shapes take every path that
large arrays take (rows split, partials along the reduced axis, partials over everything), on
any number of threads, this 2-core machine included.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softcuda as sc
from softcuda.backends import cpu_threads
from softcuda.check import check_op
from softcuda.config import rules_config
from softcuda.device import usable_cores
from softcuda.ops import ELEMENTWISE_OPS, OPS, REDUCTION_OPS
from tests.test_ops_property import broadcast_pair

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    # the fixtures only set constants, the same for every example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
dims = st.integers(min_value=1, max_value=13)


@pytest.fixture(autouse=True)
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(cpu_threads, "MIN_CHUNK_BYTES", 16)


@pytest.fixture(params=[1, 2, 3, 5])
def threads(request, monkeypatch):
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: request.param)
    return request.param


@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 2])
@SETTINGS
@given(shapes=broadcast_pair(), flip=st.tuples(st.booleans(), st.booleans()), seed=st.integers())
def test_binary(threads, op, shapes, flip, seed):
    flip = tuple(f and len(s) == 2 for f, s in zip(flip, shapes))
    result = check_op(op, "cpu_threads", list(shapes), seed=seed % 2**16, transpose=flip)
    assert result.ok, result


@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 1])
@SETTINGS
@given(
    shape=st.lists(dims, min_size=0, max_size=3).map(tuple),
    flip=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_unary(threads, op, shape, flip, dtype):
    flip = (flip and len(shape) == 2,)
    result = check_op(op, "cpu_threads", [shape], seed=len(shape), dtype=dtype, transpose=flip)
    assert result.ok, result


@pytest.mark.parametrize("op", REDUCTION_OPS)
@SETTINGS
@given(
    shape=st.lists(dims, min_size=1, max_size=3).map(tuple),
    axis=st.integers(-4, 3),
    keepdims=st.booleans(),
    flip=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_reductions(threads, op, shape, axis, keepdims, flip, dtype):
    axis = None if not -len(shape) <= axis < len(shape) else axis % len(shape)
    attrs = {"axis": axis, "keepdims": keepdims}
    flip = (flip and len(shape) == 2,)
    result = check_op(op, "cpu_threads", [shape], attrs=attrs, dtype=dtype, transpose=flip, seed=1)
    assert result.ok, result


@pytest.mark.parametrize("op", REDUCTION_OPS)
def test_partials_along_the_reduced_axis_agree_with_float64(monkeypatch, op):
    """Three threads, two columns: the work is cut along the reduced axis itself, each chunk
    reduced on its own and the partials combined."""
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 3)
    rows = np.random.default_rng(4).random((3001, 2)).astype(np.float32)
    plan = sc.compile(getattr(sc, op)(sc.tensor(rows), axis=0), rules_config({op: "cpu_threads"}))
    want = OPS[op].reference([rows.astype(np.float64)], {"axis": 0})
    np.testing.assert_allclose(plan.evaluate(), want, rtol=2e-6)


def test_a_long_float32_sum_of_everything_stays_exact():
    x = sc.ones((2**24 + 40,))
    plan = sc.compile(sc.sum(x), rules_config({"sum": "cpu_threads"}))
    assert float(plan.evaluate()) == 2**24 + 40


@pytest.mark.skipif(usable_cores() < 2, reason="one core: nothing to hand off")
def test_the_thread_count_comes_from_the_profile_and_workers_are_shared():
    cfg = rules_config({"add": "cpu_threads"})
    cfg.device["cpu_threads"] = str(usable_cores())
    x = sc.randn((999,), seed=1)
    plans = [sc.compile(x + x, cfg), sc.compile(x * 2.0 + x, cfg)]
    step = next(s for s in plans[0].steps if s.backend_id == "cpu_threads")
    assert step.run.func.__self__ is cpu_threads.workers(usable_cores())
    before = threading.active_count()
    for plan, k in zip(plans, (2, 3)):
        np.testing.assert_allclose(plan.evaluate(), k * x.data, rtol=1e-6)
    assert threading.active_count() == before  # evaluating starts no thread


def test_a_small_op_runs_on_the_calling_thread_as_cpu_fallback(monkeypatch):
    monkeypatch.setattr(cpu_threads, "MIN_CHUNK_BYTES", 1 << 20)
    x = sc.randn((4096,), seed=1)
    plan = sc.compile(x + x, rules_config({"add": "cpu_threads"}))
    step = next(s for s in plan.steps if s.backend_id == "cpu_threads")
    assert step.run.func is np.add  # cpu_fallback's own prebound ufunc call, no hand-off


def test_an_error_in_a_worker_reaches_the_caller_and_the_pool_goes_on():
    pool = cpu_threads.workers(3)
    done = []

    def boom():
        raise FloatingPointError("chunk 2")

    with pytest.raises(FloatingPointError, match="chunk 2"):
        pool.run([lambda: done.append(0), lambda: done.append(1), boom])
    pool.run([lambda: done.append(3), lambda: done.append(4), lambda: done.append(5)])
    assert sorted(done) == [0, 1, 3, 4, 5]


def test_plans_evaluated_from_two_threads_at_once_stay_right(threads):
    x = sc.randn((501, 7), seed=3)
    plans = [
        sc.compile(
            sc.sum(x * float(k), axis=0), rules_config({"mul": "cpu_threads", "sum": "cpu_threads"})
        )
        for k in (1, 2)
    ]
    want = x.data.astype(np.float64).sum(axis=0)
    errors = []

    def loop(plan, k):
        for _ in range(50):
            got = plan.evaluate()
            if not np.allclose(got, k * want, rtol=1e-4, atol=1e-3):
                errors.append((k, got))

    workers = [threading.Thread(target=loop, args=(p, k)) for p, k in zip(plans, (1, 2))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


@pytest.mark.parametrize("axis", [0, 1])
def test_softmax_rows_are_shared_between_threads(threads, axis):
    result = check_op("softmax", "cpu_threads", [(23, 19)], attrs={"axis": axis}, seed=9)
    assert result.ok, result


def test_an_interrupted_hand_off_leaves_a_pool_that_still_works():
    """Ctrl-C while the caller waits for a worker leaves that worker's answer behind; the
    next run must still wait for its own tasks, not return on the stale answer."""
    import signal
    import time

    pool = cpu_threads.Workers(2)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):  # raised while waiting on the worker's answer
            pool.run([lambda: None, lambda: time.sleep(0.3)])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    time.sleep(0.4)  # the slow worker answers now, into the interrupted run's lock
    done = []
    pool.run([lambda: None, lambda: (time.sleep(0.05), done.append(1))])
    assert done == [1]  # run returned only after the worker's task finished


def test_errors_are_raised_once_and_never_left_for_a_later_run():
    pool = cpu_threads.Workers(3)

    def fail(kind):
        def task():
            raise kind("from a chunk")

        return task

    with pytest.raises(RuntimeError):
        pool.run([fail(RuntimeError), fail(ValueError), fail(ValueError)])
    pool.run([lambda: None, lambda: None, lambda: None])  # nothing stale to raise


@pytest.mark.skipif(usable_cores() < 2, reason="one core: nothing to hand off")
def test_workers_run_under_the_caller_s_errstate():
    x = np.ones(1 << 20, np.float32)
    x[-1] = -1.0  # in the last piece: a worker's
    cfg = rules_config({"log": "cpu_threads"})
    cfg.device["cpu_threads"] = str(usable_cores())
    plan = sc.compile(sc.log(sc.tensor(x)), cfg)
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        plan.evaluate()


def test_a_forked_child_gets_workers_of_its_own():
    import os

    x = sc.randn((4096,), seed=2)
    plan = sc.compile(x + x, rules_config({"add": "cpu_threads"}))
    plan.evaluate()  # the parent's workers exist
    pid = os.fork()
    if pid == 0:  # the child: without fresh workers this run would wait forever
        import signal

        signal.alarm(10)
        ok = np.allclose(plan.evaluate(), 2 * x.data)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("backend", ["cpu_fallback", "cpu_threads"])
@pytest.mark.parametrize("op", REDUCTION_OPS)
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((1024, 10), 1),
        ((33, 2), -1),
        ((40, 32), 1),
        ((5, 40, 7), 2),
        ((7, 9, 50), 1),
        ((1024, 10), 0),  # a long axis before short rows: moved innermost
        ((3, 300, 2, 8), 1),
        ((300, 17), 0),  # rows too long: numpy's loop
    ],
    ids=str,
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_a_short_axis_adjacent_in_memory_is_reduced_across_rows(backend, op, shape, axis, keepdims):
    """The short-axis path (cpu_fallback's _moved, which cpu_threads' small inputs and
    chunks run too) against float64, kept dims or not; (7, 9, 50) along 1 is not adjacent and
    takes numpy's loop, as its neighbours' results must agree with."""
    for seed in range(3):
        result = check_op(
            op, backend, [shape], attrs={"axis": axis, "keepdims": keepdims}, seed=seed
        )
        assert result.ok, result


def test_the_short_axis_path_is_taken_and_keeps_nan_and_infinities():
    from softcuda.backends import cpu_fallback

    x = np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32)
    x[3, 4], x[5, 0], x[6, 9] = np.nan, np.inf, -np.inf
    assert cpu_fallback._short_adjacent(x, 1) and cpu_fallback._short_adjacent(x.T, 0)
    assert not cpu_fallback._short_adjacent(x.T, 1)  # strided: numpy's loop
    assert not cpu_fallback._short_adjacent(np.ones((64, 64)), 1)  # too long to pay
    assert cpu_fallback._short_adjacent(np.ones((64, 20)), 1, "max")
    assert not cpu_fallback._short_adjacent(np.ones((64, 20)), 1, "sum")  # numpy's sum is fast
    assert not cpu_fallback._short_adjacent(np.ones((1 << 21, 10)), 1)  # too large to copy
    assert cpu_fallback._along_short_rows(np.ones((128, 16)), 0)
    assert not cpu_fallback._along_short_rows(np.ones((128, 17)), 0)
    assert not cpu_fallback._along_short_rows(np.ones((16, 128)).T, 0)  # not dense row-major
    for op, ref in (("max", np.max), ("sum", np.sum), ("mean", np.mean)):
        out = np.full((64,), 7.0, np.float32)
        cpu_fallback.make_kernel(op, {"axis": 1, "keepdims": False}, [x], out)()
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref(x, axis=1)))
        np.testing.assert_allclose(out, ref(x.astype(np.float64), axis=1), rtol=1e-5)


def test_the_registry_knows_below_which_bytes_cpu_threads_runs_cpu_fallback_s_kernel(
    monkeypatch,
):
    # Selection reads cpu_fallback's timings for cpu_threads below these bytes
    # (timings.stats.shared_kernels): the registry's figure must be where make_kernel stops
    # cutting an op into chunks.
    from softcuda.backends import BACKENDS

    monkeypatch.undo()  # this module's fixture lowers MIN_CHUNK_BYTES: the real one here
    other, below = BACKENDS["cpu_threads"].runs_as_below
    assert (other, below) == ("cpu_fallback", 2 * cpu_threads.MIN_CHUNK_BYTES)
    for n, own in ((below // 12 - 1, False), (below // 12 + 1, True)):  # add: 12 bytes each
        a, b, out = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
        kernel = cpu_threads.make_kernel("add", {}, [a, b], out, threads=4)
        assert (getattr(kernel, "func", None) == cpu_threads.workers(4).share) is own, n
