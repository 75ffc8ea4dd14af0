"""CUDA backends inside plans (``cuda`` marker: skipped with the reason where no GPU is usable).

Every (op, CUDA backend) against a float64 reference on fresh random inputs with poisoned
outputs: odd sizes, broadcasting, transposed operands, batches, and the large sizes of the
issue (matmul 8192^2, elementwise 2^28).  Plus mixed CPU/CUDA graphs, transfers, pools.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import softcuda as sc
from softcuda.check import check_op
from softcuda.config import rules_config
from softcuda.costs import CostModel
from softcuda.errors import PoolError
from softcuda.ops import ELEMENTWISE_OPS, OPS, REDUCTION_OPS

pytestmark = pytest.mark.cuda

BINARY = [o for o in ELEMENTWISE_OPS if OPS[o].arity == 2]
UNARY = [o for o in ELEMENTWISE_OPS if OPS[o].arity == 1]
MATMUL = ("cuda_naive", "cuda_tiled", "cuda_blas")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize(
    "shapes",
    [
        [(1,), (1,)],
        [(3,), (3,)],
        [(127, 129), (129,)],
        [(129, 1), (1, 127)],
        [(1000,), ()],
        [(), (1000,)],
        [(5, 1, 7), (3, 1)],
        [(1000, 3), (1000, 3)],
    ],
)
def test_binary(op, shapes, dtype):
    assert (r := check_op(op, "cuda_elementwise", shapes, dtype=dtype, seed=len(shapes[0]))).ok, r


@pytest.mark.parametrize("op", BINARY)
def test_binary_transposed(op):
    r = check_op(op, "cuda_elementwise", [(127, 33), (127, 33)], transpose=(True, False), seed=3)
    assert r.ok, r


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize(
    "shape,flip",
    [((1,), False), ((3,), False), ((1000,), False), ((129, 127), True), ((4097,), False)],
)
def test_unary(op, shape, flip, dtype):
    assert (
        r := check_op(op, "cuda_elementwise", [shape], dtype=dtype, seed=5, transpose=(flip,))
    ).ok, r


@pytest.mark.parametrize("op", REDUCTION_OPS)
@pytest.mark.parametrize(
    "shape,axis,keepdims,flip",
    [
        ((1,), None, False, False),
        ((1000,), None, True, False),
        ((127, 129), 0, False, False),
        ((127, 129), 1, True, False),
        ((129, 127), 1, False, True),
        ((3, 5, 7), 1, False, False),
        ((1_000_003,), None, False, False),
    ],
)
def test_reduction(op, shape, axis, keepdims, flip):
    r = check_op(
        op,
        "cuda_elementwise",
        [shape],
        attrs={"axis": axis, "keepdims": keepdims},
        seed=7,
        transpose=(flip,),
    )
    assert r.ok, r


@pytest.mark.parametrize("backend", MATMUL)
@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 1), (3, 5, 7), (127, 129, 131), (129, 127, 1000), (1000, 3, 129), (256, 256, 256)],
)
def test_matmul(backend, m, k, n):
    assert (r := check_op("matmul", backend, [(m, k), (k, n)], seed=m)).ok, r


@pytest.mark.parametrize("backend", MATMUL)
@pytest.mark.parametrize("flip", [(True, False), (False, True), (True, True)])
def test_matmul_transposed(backend, flip):
    assert (
        r := check_op("matmul", backend, [(129, 127), (127, 131)], transpose=flip, seed=11)
    ).ok, r


@pytest.mark.parametrize("backend", MATMUL)
@pytest.mark.parametrize("b_shape", [(3, 33, 65), (1, 33, 65), (33, 65)])
def test_matmul_batched(backend, b_shape):
    assert (r := check_op("matmul", backend, [(3, 17, 33), b_shape], seed=13)).ok, r


@pytest.mark.parametrize("backend", MATMUL)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (129, 127, 131)])
@pytest.mark.parametrize("flip", [(False, False), (True, True)])
def test_matmul_float64(backend, m, k, n, flip):
    r = check_op("matmul", backend, [(m, k), (k, n)], dtype=np.float64, transpose=flip, seed=k)
    assert r.ok, r


def test_cuda_blas_binds_2d_gemm_at_compile_time_and_sets_its_own_modes():
    import functools

    import cupy
    from cupy_backends.cuda.libs import cublas

    a, b = sc.randn((65, 33), seed=1), sc.randn((33, 17), seed=2)
    plan = sc.compile(a @ b, rules_config({"matmul": "cuda_blas"}))
    (step,) = [s for s in plan.steps if s.op == "matmul"]
    assert not isinstance(step.run, functools.partial)  # the prebound gemm, not cupy.matmul
    batched = sc.compile(
        sc.randn((2, 5, 3), seed=3) @ sc.randn((2, 3, 4), seed=4),
        rules_config({"matmul": "cuda_blas"}),
    )
    (step,) = [s for s in batched.steps if s.op == "matmul"]
    assert isinstance(step.run, functools.partial)  # batches go through cupy.matmul
    handle = cupy.cuda.device.get_cublas_handle()
    # what some CuPy routines leave behind: device pointers, and tensor-op math (float32
    # products through float16 tensor cores, about 1e-3 off)
    cublas.setPointerMode(handle, 1)
    cublas.setMathMode(handle, 1)
    try:
        plan.poison()
        got = plan.evaluate()
        modes = cublas.getPointerMode(handle), cublas.getMathMode(handle)
    finally:
        cublas.setPointerMode(handle, 0)
        cublas.setMathMode(handle, 0)
    assert modes == (0, 0)  # host pointers, default math: set by the call itself
    want = a.data.astype(np.float64) @ b.data.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", MATMUL)
@pytest.mark.parametrize(
    "shapes",
    [
        [(0, 2, 3), (3, 4)],
        [(1, 2, 3), (0, 3, 4)],
        [(0, 3), (3, 4)],
        [(2, 3), (3, 0)],
        [(2, 0), (0, 3)],
        [(2, 2, 0), (0, 3)],
    ],
    ids=str,
)
def test_matmul_with_empty_dimensions(backend, shapes):
    assert (r := check_op("matmul", backend, shapes, seed=1)).ok, r


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's reference: mean of nothing
@pytest.mark.parametrize(
    "op,shapes,attrs",
    [
        ("add", [(0, 3), (3,)], {}),
        ("mul", [(0,), (1,)], {}),
        ("sigmoid", [(3, 0)], {}),
        ("sum", [(0, 3)], {"axis": None}),
        ("sum", [(0, 3)], {"axis": 0}),
        ("mean", [(0, 3)], {"axis": None}),
        ("mean", [(3, 0)], {"axis": 1, "keepdims": True}),
        ("max", [(0, 3)], {"axis": 1}),
    ],
    ids=str,
)
def test_empty_tensors_on_cuda_elementwise(op, shapes, attrs):
    assert (r := check_op(op, "cuda_elementwise", shapes, attrs=attrs, seed=2)).ok, r


@pytest.mark.parametrize("backend", ["cuda_tiled", "cuda_blas"])
def test_matmul_8192(backend):
    assert (r := check_op("matmul", backend, [(8192, 8192), (8192, 8192)], seed=1)).ok, r


@pytest.mark.parametrize("op", ["add", "relu"])
def test_elementwise_2_28(op):
    shape = (1 << 28,)
    r = check_op(op, "cuda_elementwise", [shape] * OPS[op].arity, seed=2)
    assert r.ok, r


@pytest.mark.parametrize("host_memory", ["pageable", "pinned"])
def test_mixed_cpu_cuda_graph_matches_all_cpu(host_memory):
    x = sc.randn((300, 200), seed=0)
    w = sc.randn((200, 100), seed=1)
    out = sc.sum(sc.tanh(x @ w) * 2.0 - sc.relu(x @ w), axis=1)
    mixed = rules_config(
        {
            "matmul": "cuda_tiled",
            "tanh": "cuda_elementwise",
            "mul": "cpu_blas",
            "relu": "cuda_elementwise",
            "sub": "cpu_blas",
            "sum": "cuda_elementwise",
        }
    )
    plan = sc.compile(out, mixed, host_memory=host_memory)
    kinds = [r["op"] for r in plan.rows()]
    assert "h2d" in kinds and "d2h" in kinds
    plan.poison()
    got = plan.evaluate()
    want = sc.compile(out, sc.default_config()).evaluate()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_cuda_chain_pays_no_transfer_between_its_nodes():
    x = sc.randn((1024,), seed=0)
    y = x
    for _ in range(20):
        y = sc.tanh(y) + x
    plan = sc.compile(y, rules_config({"tanh": "cuda_elementwise", "add": "cuda_elementwise"}))
    ops = [r["op"] for r in plan.rows()]
    assert ops.count("h2d") == 1 and ops.count("d2h") == 1  # x goes up once, y comes back once
    ref = x.data.astype(np.float64)
    expect = ref
    for _ in range(20):
        expect = np.tanh(expect) + ref
    np.testing.assert_allclose(plan.evaluate(), expect, rtol=1e-5)
    explain = plan.explain()
    assert "h2d" in explain and "baked" in explain


@pytest.mark.parametrize("host_memory", ["pageable", "pinned"])
def test_host_memory_kind_is_recorded_and_results_agree(host_memory):
    x = sc.randn((4096,), seed=4)
    plan = sc.compile(sc.exp(x), rules_config({"exp": "cuda_elementwise"}), host_memory=host_memory)
    assert plan.host_memory == host_memory and host_memory in plan.explain()
    np.testing.assert_allclose(plan.evaluate(), np.exp(x.data.astype(np.float64)), rtol=1e-6)
    x.assign(np.zeros(4096))  # a pinned leaf is rewritten in place; the next run sees it
    np.testing.assert_allclose(plan.evaluate(), np.ones(4096))


def test_device_pool_alignment_chaining_reset_and_generation():
    import cupy

    from softcuda.pool import DevicePool

    pool = DevicePool(block_size=1 << 12)
    a, b = pool.alloc(10), pool.alloc(200)  # one size class (256 bytes each): one block, bumped
    assert (a.offset, b.offset) == (0, 256) and a.block is b.block
    va = a.view((2,), np.float32)
    assert isinstance(va, cupy.ndarray) and va.data.ptr % 256 == 0
    va[:] = cupy.asarray([1.0, 2.0], dtype=cupy.float32)
    big = pool.alloc(1 << 13)  # over a quarter of a block: a block of its own
    assert pool.stats.blocks == 2 and big.offset == 0
    pool.reset()
    with pytest.raises(PoolError, match="stale view"):
        a.view((2,), np.float32)


def test_a_tensor_too_large_for_the_device_names_the_bytes():
    from softcuda.pool import DevicePool

    with pytest.raises(
        PoolError,
        match=r"asked CUDA device 0 for \d+ bytes, but only \d+ of "
        r"\d+ bytes are free",
    ):
        DevicePool().alloc(1 << 50)


def test_profile_times_transfers_and_kernels_with_events():
    x = sc.randn((1 << 20,), seed=0)
    plan = sc.compile(sc.relu(x), rules_config({"relu": "cuda_elementwise"}), host_memory="pinned")
    rows = {r["op"]: r for r in plan.profile(repeat=3) if r["repetitions_s"]}
    assert set(rows) == {"h2d", "relu", "d2h"}
    assert all(r["median_s"] > 0 for r in rows.values())


def test_a_kernel_s_event_time_leaves_out_the_host_that_launches_it():
    """The host takes 3 ms to launch the kernel; its event time must not count them."""
    import time

    x = sc.randn((4096,), seed=1)
    plan = sc.compile(sc.relu(x), rules_config({"relu": "cuda_elementwise"}), host_memory="pinned")
    step = next(s for s in plan.steps if s.op == "relu")
    launch = step.run

    def slow_launch():
        time.sleep(0.003)
        launch()

    step.run = slow_launch
    reps = next(r for r in plan.profile(repeat=5) if r["op"] == "relu")["repetitions_s"]
    assert max(reps) < 0.001, reps


def test_the_gate_holds_the_stream_and_grows_when_the_host_is_slower():
    import time

    import cupy

    from softcuda.backends.cuda_timing import Gate

    stream = cupy.cuda.Stream(non_blocking=True)
    gate = Gate(ns=2_000_000)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    gate.hold(stream)
    end.record(stream)
    assert gate.held()  # queried at once: still spinning
    assert gate.ns == 2_000_000 - 2_000_000 // 16  # a gate that held shortens a little
    stream.synchronize()
    assert cupy.cuda.get_elapsed_time(start, end) >= 2.0  # ms
    gate = Gate(ns=10_000)
    gate.hold(stream)
    time.sleep(0.005)
    assert not gate.held() and gate.ns == 20_000 and gate.retakes == 1


def test_pinned_and_pageable_plans_of_one_graph_coexist_in_alternation():
    """Plans compiled from the same tensors under several profiles and both host memory kinds
    keep evaluating correctly in alternation; each sees every new value a leaf is given, and a
    pinned plan copies from the leaf's pinned mirror while the leaf itself stays pageable."""
    from softcuda.pool import PinnedHostPool

    x, w = sc.randn((257, 129), seed=1), sc.randn((129, 65), seed=2)
    out = {"h": sc.tanh(x @ w + 1.0), "s": sc.sum(sc.relu(x), axis=0)}
    gpu = rules_config(
        {"matmul": "cuda_naive", "add": "cuda_elementwise", "tanh": "cuda_elementwise"}
    )
    other = rules_config({"matmul": "cuda_tiled", "sum": "cuda_elementwise"})
    plans = [
        sc.compile(out, gpu, host_memory="pinned"),
        sc.compile(out, gpu, host_memory="pageable"),
        sc.compile(out, other, host_memory="pinned"),
        sc.compile(out, other, host_memory="pageable"),
        sc.compile(out),  # DEFAULT.soft: all on the CPU
    ]
    assert not isinstance(x._allocation.pool, PinnedHostPool)
    assert isinstance(x._mirror.pool, PinnedHostPool)
    rng = np.random.default_rng(5)
    for _ in range(3):
        xv, wv = rng.standard_normal((257, 129)), rng.standard_normal((129, 65))
        x.assign(xv)
        w.assign(wv)
        x32, w32 = xv.astype(np.float32).astype(np.float64), wv.astype(np.float32)
        want_h = np.tanh(x32 @ w32.astype(np.float64) + 1.0)
        want_s = np.maximum(x32, 0).sum(axis=0)
        for plan in [*plans, *reversed(plans)]:
            plan.poison()
            got = plan.evaluate()
            np.testing.assert_allclose(got["h"], want_h, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(got["s"], want_s, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("flip", [False, True])
def test_softmax_on_cuda(dtype, axis, flip):
    r = check_op(
        "softmax",
        "cuda_elementwise",
        [(129, 67)],
        attrs={"axis": axis},
        dtype=dtype,
        transpose=(flip,),
        seed=4,
    )
    assert r.ok, r


@pytest.mark.parametrize("exponent", [2.0, 0.5, -1.5, 3.25])
def test_pow_on_cuda(exponent):
    x = np.random.default_rng(2).random((1000, 3)) + 0.1
    plan = sc.compile(
        sc.tensor(x, np.float64) ** exponent, rules_config({"pow": "cuda_elementwise"})
    )
    plan.poison()
    np.testing.assert_allclose(plan.evaluate(), np.power(x, exponent), rtol=1e-13)


def test_a_pinned_plan_copies_a_view_of_a_leaf_from_the_leaf_s_mirror():
    """A transposed leaf feeding the GPU is copied from page-locked memory too."""
    a, w = sc.randn((200, 300), seed=1), sc.randn((200, 50), seed=2)
    plan = sc.compile(a.T @ w, rules_config({"matmul": "cuda_blas"}), host_memory="pinned")
    assert a._mirror is not None and w._mirror is not None
    np.testing.assert_allclose(plan.evaluate(), a.data.T @ w.data, rtol=1e-4, atol=1e-3)


def _calibrated(tmp_path, module: str):
    """The committed profile before and after ``python -m softcuda.sweep.MODULE`` on a copy
    (one [bus] figure measured on this machine and written into it); the command must succeed."""
    import subprocess
    import sys

    from softcuda.config import load_config

    profile = tmp_path / "P.soft"
    profile.write_text((Path(__file__).parent.parent / "CONFIG.soft").read_text())
    before = load_config(profile)
    done = subprocess.run(
        [sys.executable, "-m", f"softcuda.sweep.{module}", str(profile)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    after = load_config(profile)
    assert after.rules == before.rules and after.costs == before.costs
    return before, after


def test_the_hand_off_calibration_times_its_plans_and_writes_switch_us_into_a_profile(tmp_path):
    """hand_off: a figure per size, never below 0, every round kept; the module's command
    writes [bus] switch_us into a profile and leaves the rest of it as it was."""
    from softcuda.sweep import switch

    found = switch.hand_off(sizes=(1024, 1 << 16), rounds=4)
    assert found["bytes"] == [4096, 1 << 18] and len(found["seconds"]) == 2
    assert all(len(reps) == 4 for reps in found["repetitions_s"])
    assert all(0 <= s < 1e-3 for s in found["seconds"])
    assert switch.switch_line(found) is not None
    _, after = _calibrated(tmp_path, "switch")
    assert "switch_us" in after.bus and CostModel(after).switch_s(4096) >= 0


def test_the_launch_calibration_reads_the_host_s_pace_and_writes_it_into_a_profile(tmp_path):
    """issue_time: positive, every round kept, the median among them; the module's command
    writes [bus] launch_us into a profile and leaves the rest of it as it was."""
    from softcuda.sweep import launch

    found = launch.issue_time(rounds=5)
    reps = found["repetitions_s"]
    assert len(reps) == 5 and min(reps) <= found["seconds"] <= max(reps)
    assert 0 < found["seconds"] < 1e-3
    _, after = _calibrated(tmp_path, "launch")
    assert CostModel(after).launch_s > 0


def test_a_hand_off_to_pooled_cpu_steps_wakes_the_pool_before_it_waits_for_the_gpu():
    from functools import partial

    from softcuda.backends import native

    cfg = rules_config({"relu": "cuda_elementwise", "tanh": "cpu_threads", "add": "cpu_threads"})
    cfg.device["type"] = "cuda"
    rng = np.random.default_rng(5)
    x = rng.standard_normal(1 << 21).astype(np.float32)
    plan = sc.compile(sc.tanh(sc.relu(sc.tensor(x))), cfg, placement="per-op")
    runs = plan._runs
    waits = [i for i, r in enumerate(runs) if r == plan._stream.synchronize]
    wakes = [i for i, r in enumerate(runs) if isinstance(r, partial) and r.func is native.wake]
    assert waits and [i + 1 for i in wakes] == waits[:1], (wakes, waits)
    out = np.asarray(plan.evaluate())
    assert np.max(np.abs(out - np.tanh(np.maximum(x, 0).astype(np.float64)))) < 1e-6
    # a host step too small for a second thread: a wait, no wake
    small = sc.compile(sc.tanh(sc.relu(sc.tensor(x[:64]))), cfg, placement="per-op")
    assert not [r for r in small._runs if isinstance(r, partial) and r.func is native.wake]
