"""cpu_threads: every op but matmul on the native kernels (OpenMP threads), against float64 numpy.

The kernels' grain is lowered to one element (the ``tiny_grain`` fixture) so that small, odd
shapes take every path that large arrays take (elements split between threads, rows of a
broadcast or strided operand split, partials over everything, tiles of a reduction along a
leading axis), on any number of threads, this 2-core machine included.  tests/test_native.py
checks the kernels themselves (special values, ulps, the fallback, the cache).
"""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softcuda as sc
from softcuda.backends import BACKENDS, cpu_threads
from softcuda.check import check_op
from softcuda.config import ConfigError, load_config, rules_config
from softcuda.device import usable_cores
from softcuda.ops import ELEMENTWISE_OPS, OPS, REDUCTION_OPS
from tests.native_helpers import require_native
from tests.profiles import short_profile
from tests.test_ops_property import broadcast_pair

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    # the fixtures only set constants, the same for every example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
dims = st.integers(min_value=1, max_value=13)


@pytest.fixture
def native_kernels() -> None:
    """Skip where the layer is off on purpose or no compiler exists; fail where it should load."""
    require_native()


@pytest.fixture(params=[1, 2, 3, 5])
def threads(request, monkeypatch, tiny_grain):
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: request.param)
    return request.param


def native_step(plan, op: str):
    """The plan's step of ``op``, checked to run a native entry point (not cpu_fallback's)."""
    (step,) = [s for s in plan.steps if s.op == op and s.backend_id == "cpu_threads"]
    assert step.runs_as is None, step.runs_as
    assert step.run.func.__name__.startswith("sc_"), step.run
    return step


@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 2])
@SETTINGS
@given(
    shapes=broadcast_pair(),
    flip=st.tuples(st.booleans(), st.booleans()),
    seed=st.integers(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_binary(threads, op, shapes, flip, seed, dtype):
    flip = tuple(f and len(s) == 2 for f, s in zip(flip, shapes))
    result = check_op(
        op, "cpu_threads", list(shapes), seed=seed % 2**16, transpose=flip, dtype=dtype
    )
    assert result.ok, result


@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 1])
@SETTINGS
@given(
    shape=st.lists(dims, min_size=0, max_size=3).map(tuple),
    flip=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_unary(threads, op, shape, flip, dtype, seed):
    flip = (flip and len(shape) == 2,)
    result = check_op(op, "cpu_threads", [shape], seed=seed, dtype=dtype, transpose=flip)
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
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((3001,), None),  # one long run: a partial per thread, combined
        ((3001, 2), None),
        ((97, 31), 1),  # rows shared between threads
        ((3001, 2), 0),  # a long leading axis, two outputs: one tile
        ((7, 600), 0),  # 600 outputs: three tiles of 256 on three threads
        ((5, 9, 300), 1),  # outer x tiles
    ],
    ids=str,
)
def test_every_reduction_path_agrees_with_float64_on_three_threads(
    monkeypatch, native_kernels, tiny_grain, op, shape, axis
):
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 3)
    x = np.random.default_rng(4).random(shape).astype(np.float32)
    x[tuple(d // 2 for d in shape)] = -5.0  # a max that is not at an edge
    plan = sc.compile(getattr(sc, op)(sc.tensor(x), axis=axis), rules_config({op: "cpu_threads"}))
    assert native_step(plan, op).run.args[-1].value == 3
    plan.poison()
    want = OPS[op].reference([x.astype(np.float64)], {"axis": axis})
    np.testing.assert_allclose(plan.evaluate(), want, rtol=2e-6)


def test_a_long_float32_sum_of_everything_stays_exact():
    x = sc.ones((2**24 + 40,))
    plan = sc.compile(sc.sum(x), rules_config({"sum": "cpu_threads"}))
    assert float(plan.evaluate()) == 2**24 + 40


@pytest.mark.skipif(usable_cores() < 2, reason="one core: one thread is all there is")
def test_the_thread_count_comes_from_the_profile_and_no_python_thread_starts(native_kernels):
    cfg = rules_config({"add": "cpu_threads"})
    cfg.device["cpu_threads"] = str(usable_cores())
    x = sc.randn((999,), seed=1)
    plans = [sc.compile(x + x, cfg), sc.compile(x * 2.0 + x, cfg, fuse=False)]
    for plan in plans:
        assert native_step(plan, "add").run.args[-1].value == usable_cores()  # the kernel's most
    before = threading.active_count()
    for plan, k in zip(plans, (2, 3)):
        np.testing.assert_allclose(plan.evaluate(), k * x.data, rtol=1e-6)
    assert threading.active_count() == before  # OpenMP's threads are not Python's


def test_without_a_setting_the_kernel_may_use_every_usable_core(native_kernels):
    x = sc.randn((64,), seed=1)
    plan = sc.compile(sc.tanh(x), rules_config({"tanh": "cpu_threads"}))
    assert native_step(plan, "tanh").run.args[-1].value == usable_cores()


def test_check_setting_accepts_one_to_every_core_and_names_the_range_otherwise():
    cores = usable_cores()
    assert cpu_threads.check_setting("threads", 1) is None
    assert cpu_threads.check_setting("threads", cores) is None
    for bad in (0, cores + 1):
        why = cpu_threads.check_setting("threads", bad)
        assert why == f"[device] cpu_threads = {bad}, but this process may use 1 to {cores} cores"


def test_a_profile_asking_more_threads_than_cores_is_refused_at_compile_naming_its_line(
    tmp_path,
):
    threads = usable_cores() + 1
    path = tmp_path / "big.soft"
    path.write_text(short_profile("sum | any = cpu_threads", device=f"cpu_threads = {threads}\n"))
    line = path.read_text().splitlines().index(f"cpu_threads = {threads}") + 1
    with pytest.raises(ConfigError, match=rf"big.soft:{line}: .*this process may use 1 to"):
        sc.compile(sc.sum(sc.ones((3,))), load_config(path))


def test_cpu_threads_runs_its_own_kernels_at_every_size():
    """A small op runs the native kernel on the calling thread (one grain: no OpenMP region),
    not cpu_fallback's kernel: the registry must not tell selection to read cpu_fallback's
    timings for it (timings.stats.shared_kernels)."""
    assert BACKENDS["cpu_threads"].runs_as_below is None
    assert {"add", "sum", "softmax", "tanh"} <= BACKENDS["cpu_threads"].own_ops
    assert "matmul" not in BACKENDS["cpu_threads"].own_ops


def test_a_small_op_is_a_native_kernel_bound_to_its_arrays(native_kernels):
    a, b = np.ones(7, np.float32), np.full(7, 2.0, np.float32)
    out = np.full(7, np.nan, np.float32)
    kernel = cpu_threads.make_kernel("add", {}, [a, b], out, threads=4)
    assert kernel.func.__name__ == "sc_add_f32" and getattr(kernel, "runs_as", None) is None
    assert kernel.arrays[0] is a and kernel.arrays[1] is b and kernel.arrays[2] is out
    kernel()
    np.testing.assert_array_equal(out, 3.0)


def test_a_kernel_keeps_views_it_made_alive(native_kernels, tiny_grain):
    """A broadcast operand is a view made inside make_kernel, whose pointer the kernel carries:
    nothing but the kernel holds it, and the kernel must still read the right values."""
    out = np.full((33, 17), np.nan)
    kernel = cpu_threads.make_kernel("mul", {}, [np.arange(17.0), np.arange(33.0)[:, None]], out, 3)
    gc.collect()
    kernel()
    np.testing.assert_array_equal(out, np.arange(33.0)[:, None] * np.arange(17.0))


def test_matmul_runs_on_blas_not_the_native_layer():
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    out = np.empty((3, 5), np.float32)
    kernel = cpu_threads.make_kernel("matmul", {}, [a, b], out, threads=2)
    assert kernel.func is np.matmul
    kernel()
    np.testing.assert_array_equal(out, 4.0)


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


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_softmax_rows_are_shared_between_threads(threads, axis):
    result = check_op("softmax", "cpu_threads", [(23, 19)], attrs={"axis": axis}, seed=9)
    assert result.ok, result


def test_a_forked_child_after_a_one_thread_run_works(native_kernels):
    x = sc.randn((4096,), seed=2)
    cfg = rules_config({"add": "cpu_threads"})
    cfg.device["cpu_threads"] = "1"
    plan = sc.compile(x + x, cfg)
    plan.evaluate()
    assert _child_evaluates(plan, 2 * x.data) == 0


@pytest.mark.skipif(usable_cores() < 2, reason="one core: no OpenMP team to fork under")
def test_a_forked_child_can_run_threaded_kernels_after_its_parent_did(native_kernels, tiny_grain):
    """multiprocessing forks on Linux: a worker process evaluating a plan its parent already
    ran on OpenMP threads, which do not survive the fork (the child runs on one thread)."""
    x = sc.randn((4096,), seed=2)
    cfg = rules_config({"add": "cpu_threads"})
    cfg.device["cpu_threads"] = "2"
    plan = sc.compile(x + x, cfg)
    plan.evaluate()  # the parent's OpenMP team exists
    assert _child_evaluates(plan, 2 * x.data) == 0


def _child_evaluates(plan, want) -> int:
    """Fork; the child evaluates ``plan`` (3 s at most) and exits 0 if it matched ``want``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            import signal

            signal.alarm(3)
            ok = np.allclose(plan.evaluate(), want)
            os._exit(0 if ok else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


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
        ((1024, 10), 0),  # a long axis before short rows
        ((3, 300, 2, 8), 1),
        ((300, 17), 0),
    ],
    ids=str,
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_a_short_axis_adjacent_in_memory_is_reduced_across_rows(
    backend, op, shape, axis, keepdims, tiny_grain, monkeypatch
):
    """Short reduced axes, leading and trailing, kept dims or not, against float64: cpu_fallback's
    short-axis path (_moved) and, on three threads, the native kernels' rows and tiles."""
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 3)
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


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_nan_and_infinities_survive_every_reduction_path(native_kernels, tiny_grain, threads):
    x = np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32)
    x[3, 4], x[5, 0], x[6, 9] = np.nan, np.inf, -np.inf
    for axis in (None, 0, 1):
        for op, ref in (("max", np.max), ("sum", np.sum), ("mean", np.mean)):
            want = ref(x.astype(np.float64), axis=axis)
            out = np.full(np.shape(want), 7.0, np.float32)
            kernel = cpu_threads.make_kernel(op, {"axis": axis}, [x], out, threads)
            assert getattr(kernel, "runs_as", None) is None
            kernel()
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=f"{op} {axis}")
            np.testing.assert_allclose(out, want, rtol=1e-5, err_msg=f"{op} {axis}")


# ---- the pool woken at a hand-off from the GPU -------------------------------------------------


def _handed_to_the_cpu(n: int, cpu_op) -> list:
    """The host steps of a plan that runs a relu on the GPU and ``cpu_op`` of it on
    cpu_threads (lowered only: no GPU is needed to see the plan)."""
    on_cpu = dict.fromkeys(("tanh", "add", "neg", "sum"), "cpu_threads")
    cfg = rules_config({"relu": "cuda_elementwise", **on_cpu})
    cfg.device["type"] = "cuda"
    y = cpu_op(sc.relu(sc.randn((n,), seed=1)))
    plan = sc.compile(y, cfg, placement="per-op", allocate=False)
    kinds = [(s.kind, s.device) for s in plan.steps if s.kind not in ("leaf", "view")]
    assert kinds[:3] == [("h2d", "cuda"), ("kernel", "cuda"), ("d2h", "cpu")], kinds
    return cfg, [s for s in plan.steps if s.on_host]


def test_a_host_segment_after_the_gpu_wakes_as_many_threads_as_its_widest_kernel_runs_on(
    native_kernels,
):
    from softcuda.backends import native
    from softcuda.bind import pool_team

    threads = cpu_threads.default_threads()
    n = 1 << 21
    cfg, host = _handed_to_the_cpu(n, sc.tanh)
    team = min(threads, native.chunks(n * native.weight("tanh"), n, threads))
    assert pool_team(host, cfg) == team
    if threads > 1:
        assert pool_team(host, cfg) > 1
    # a fused group counts every member's work, as its kernel does
    cfg, host = _handed_to_the_cpu(n, lambda t: sc.tanh(sc.tanh(t)) + t)
    assert [len(s.group.members) for s in host if s.group is not None] == [3]
    work = n * (2 * native.weight("tanh") + native.weight("add"))
    assert pool_team(host, cfg) == min(threads, native.chunks(work, n, threads))
    # a reduction is counted over its input, not its one output
    cfg, host = _handed_to_the_cpu(n, lambda t: sc.sum(sc.neg(t) + 1.0))
    assert pool_team(host, cfg) == min(threads, native.chunks(n * 2, n, threads))
    cfg, host = _handed_to_the_cpu(n, lambda t: sc.sum(t.reshape((1024, n // 1024)), axis=1))
    assert pool_team(host, cfg) == min(threads, native.chunks(n, n, threads))
    # a kernel too small for a second thread wakes nobody; the profile's thread count bounds it
    cfg, host = _handed_to_the_cpu(64, sc.tanh)
    assert pool_team(host, cfg) == 1
    cfg, host = _handed_to_the_cpu(n, sc.tanh)
    cfg.device["cpu_threads"] = "1"
    assert pool_team(host, cfg) == 1


def test_a_bound_fused_group_wakes_the_team_its_own_kernel_cuts_its_work_for(native_kernels):
    from softcuda.backends import native
    from softcuda.bind import pool_team

    threads = cpu_threads.default_threads()
    n = 1 << 21
    cfg = rules_config({"tanh": "cpu_threads", "sum": "cpu_threads", "mul": "cpu_threads"})
    x = sc.tensor(np.random.default_rng(2).standard_normal((1024, n // 1024)).astype(np.float32))
    plan = sc.compile(sc.sum(sc.tanh(x * 0.5), axis=1), cfg)  # bound: its arrays' walk known
    (step,) = [s for s in plan.steps if s.group is not None]
    bound = step.group.bound
    assert bound is not None and bound.items < n  # cut by rows, not by elements
    team = min(threads, native.chunks(bound.work, bound.items, threads))
    assert pool_team(plan.steps, cfg) == team


def test_waking_the_pool_returns_and_leaves_every_later_job_right(native_kernels):
    # wake() is ready() without the wait: a job of no work the caller finishes alone; the
    # workers it wakes then find the next job, or none, and the results never change
    from softcuda.backends import native

    rng = np.random.default_rng(11)
    x = rng.standard_normal(300_001).astype(np.float32)
    plan = sc.compile(sc.tanh(sc.tensor(x)), rules_config({"tanh": "cpu_threads"}))
    expected = np.tanh(x.astype(np.float64))
    native.wake(1)  # one thread: nothing to wake
    for round_ in range(200):
        native.wake(2 + round_ % 5)  # more threads than this machine may have, too
        if round_ % 3 == 0:
            native.wake(3)  # twice before a job
        out = plan.evaluate()
        assert np.max(np.abs(out - expected)) < 1e-6, round_
