"""The native CPU kernel layer (softcuda/backends/native.py, kernels/cpu.cpp) through
cpu_threads.make_kernel, adversarially.

* Every unary and binary op, pow, sum/mean/max and softmax, float32 and float64, against the
  float64 reference within check.tolerance (measured as check.py measures), on fresh random
  inputs of odd sizes, 2-D and 3-D, transposed, sliced, reversed and broadcast operands, numbers
  on either side, on 1, 2 and 3 threads with a grain of one element and with the default grain;
  every output is poisoned with NaN first.
* Special values (NaN, infinities, signed zeros, subnormals, huge values, the exp overflow and
  underflow edges), and the float32 polynomials in ulps against numpy's own float32 results over
  a dense sweep.
* Long float32 sums, the fallback where the library cannot be had (in subprocesses), the cache,
  the layouts the layer does not cover, and two Python threads running kernels at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zlib

import numpy as np
import pytest

import softcuda as sc
from softcuda import check
from softcuda.backends import cpu_threads, native
from softcuda.config import rules_config
from softcuda.device import usable_cores
from softcuda.ops import OPS, ops_of
from tests.native_helpers import require_native

UNARY = ops_of("unary")
BINARY = ops_of("binary")
REDUCE = ("sum", "mean", "max")
DTYPES = [np.float32, np.float64]
DEFAULT_GRAIN = 32768
LAYOUT_MISS = "a layout the native kernels do not cover"

# name: (most threads, grain); None keeps the kernels' own grain
THREADINGS = {"1": (1, None), "2-tiny": (2, 1), "3-tiny": (3, 1), "3": (3, None)}


@pytest.fixture
def native_kernels() -> None:
    """Skip where the layer is off on purpose or no compiler exists; fail where it should load."""
    require_native()


@pytest.fixture(params=list(THREADINGS))
def threads(request):
    """The thread count a kernel is given, with a grain of one element ("-tiny": every thread
    has work even on a few elements) or the kernels' default grain."""
    require_native()
    most, grain = THREADINGS[request.param]
    was = native.set_grain(grain or DEFAULT_GRAIN)
    try:
        yield most
    finally:
        native.set_grain(was)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh values for every case (a seed of its own, the same on every run)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ---- layouts: (shape drawn, view of it); None for a number ----------------------------------


def _t(x):
    return x.T


ONE = {
    "0-d": ((), None),
    "1": ((1,), None),
    "7": ((7,), None),
    "37x29": ((37, 29), None),
    "5x7x11": ((5, 7, 11), None),
    "transposed": ((29, 37), _t),
    "permuted-3d": ((7, 11, 5), lambda x: x.transpose(2, 0, 1)),
    "sliced": ((64, 90), lambda x: x[::3, 1::2]),
    "sliced-3d": ((6, 9, 16), lambda x: x[::2, 1:, 3:14:2]),
    "reversed": ((37, 29), lambda x: x[::-1, ::-1]),
    "broadcast-view": ((29,), lambda x: np.broadcast_to(x, (37, 29))),
}
ONE_NOT_0D = {k: v for k, v in ONE.items() if k != "0-d"}
LARGE = (1000003,)

NUMBER = ("number", None)
TWO = {
    "0-d": [((), None), ((), None)],
    "1": [((1,), None), ((1,), None)],
    "7": [((7,), None), ((7,), None)],
    "37x29": [((37, 29), None), ((37, 29), None)],
    "5x7x11": [((5, 7, 11), None), ((5, 7, 11), None)],
    "transposed+contiguous": [((29, 37), _t), ((37, 29), None)],
    "both-transposed": [((29, 37), _t), ((29, 37), _t)],
    "sliced+transposed": [((64, 90), lambda x: x[::3, 1::2]), ((45, 22), _t)],
    "reversed+permuted": [
        ((5, 7, 11), lambda x: x[::-1, :, ::-1]),
        ((7, 11, 5), lambda x: x.transpose(2, 0, 1)),
    ],
    "(N,1)+(1,M)": [((37, 1), None), ((1, 29), None)],
    "(M,)+(N,M)": [((29,), None), ((37, 29), None)],
    "(N,M)+(M,)": [((37, 29), None), ((29,), None)],
    "(N,M)+(N,1)": [((37, 29), None), ((37, 1), None)],
    "(1,)+(N,M)": [((1,), None), ((37, 29), None)],
    "(N,1,K)+(M,K)": [((5, 1, 11), None), ((7, 11), None)],
    "transposed+(N,1)": [((29, 37), _t), ((37, 1), None)],
    "number+contiguous": [NUMBER, ((37, 29), None)],
    "contiguous+number": [((37, 29), None), NUMBER],
    "number+transposed": [NUMBER, ((29, 37), _t)],
    "sliced+number": [((64, 90), lambda x: x[::3, 1::2]), NUMBER],
    "number+1": [NUMBER, ((1,), None)],
    "0-d+number": [((), None), NUMBER],
    "0-d-array+(N,M)": [((), None), ((37, 29), None)],
    "(1,1)+(1,1)T": [((1, 1), None), ((1, 1), _t)],
    "(N,1)T+(N,1)": [((1, 37), _t), ((37, 1), None)],
}


def draw(op: str, spec, dtype, rng):
    """An operand: the op's random input of the drawn shape, seen through the view; a number
    is a numpy scalar of the output's dtype (what a plan passes for ``x * 2.0``)."""
    shape, view = spec
    if shape == "number":
        return np.dtype(dtype).type(check.random_input(op, (), dtype, rng)[()])
    x = np.asarray(check.random_input(op, shape, dtype, rng))
    return view(x) if view is not None else x


def out_shape(op: str, attrs: dict, inputs: list) -> tuple[int, ...]:
    if OPS[op].kind == "reduction":
        return np.sum(np.broadcast_to(0.0, np.shape(inputs[0])), **attrs).shape
    return np.broadcast_shapes(*(np.shape(x) for x in inputs))


def run(op: str, attrs: dict, inputs: list, dtype, threads: int):
    """cpu_threads' kernel of ``op`` into a NaN-poisoned output; the output and the kernel."""
    out = np.full(out_shape(op, attrs, inputs), np.nan, dtype)
    kernel = cpu_threads.make_kernel(op, attrs, inputs, out, threads=threads)
    kernel()
    return out, kernel


def assert_correct(op: str, attrs: dict, inputs: list, out: np.ndarray, reduce_len: int = 1):
    """Within check.tolerance of the float64 reference, as check.check_op measures it."""
    ref = check.reference(op, attrs, inputs)
    error = check.relative_error(out, ref, check.error_scale(op, attrs, inputs, ref))
    tol = check.tolerance(op, out.dtype, reduce_len)
    assert error <= tol, f"{op} {attrs}: relative error {error:.3g} > {tol:.3g}"


def assert_native(kernel, op: str, dtype) -> None:
    sfx = "f32" if np.dtype(dtype) == np.float32 else "f64"
    assert getattr(kernel, "runs_as", None) is None, kernel.runs_as
    name = kernel.func.__name__
    family = OPS[op].family
    want = "sc_reduce" if family == "reduce" else f"sc_{op}"  # softmax's family: its op's name
    assert name in (f"{want}_{sfx}", f"{want}_{sfx}_rows"), name
    assert kernel.arrays  # the arrays whose pointers it carries, kept alive


def is_dense(x) -> bool:
    return isinstance(x, np.ndarray) and x.flags.c_contiguous


# ---- every op, every layout, every thread setting --------------------------------------------


@pytest.mark.parametrize("layout", list(ONE))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, dtype, layout, threads, rng):
    x = draw(op, ONE[layout], dtype, rng)
    out, kernel = run(op, {}, [x], dtype, threads)
    assert_native(kernel, op, dtype)  # every layout: flat or the rows entry point
    assert_correct(op, {}, [x], out)


@pytest.mark.parametrize("threads", ["1", "3"], indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary_large(op, dtype, threads, rng):
    x = draw(op, (LARGE, None), dtype, rng)
    out, kernel = run(op, {}, [x], dtype, threads)
    assert_native(kernel, op, dtype)
    assert_correct(op, {}, [x], out)


@pytest.mark.parametrize("layout", list(TWO))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY)
def test_binary(op, dtype, layout, threads, rng):
    a, b = (draw(op, spec, dtype, rng) for spec in TWO[layout])
    out, kernel = run(op, {}, [a, b], dtype, threads)
    assert_native(kernel, op, dtype)
    assert_correct(op, {}, [a, b], out)
    # the IEEE operation itself: bit for bit numpy's result in the dtype
    np.testing.assert_array_equal(out, OPS[op].cpu(a, b))


@pytest.mark.parametrize("threads", ["1", "3"], indirect=True)
@pytest.mark.parametrize("number", ["none", "a", "b"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY)
def test_binary_large(op, dtype, number, threads, rng):
    a, b = (draw(op, NUMBER if number == side else (LARGE, None), dtype, rng) for side in "ab")
    out, kernel = run(op, {}, [a, b], dtype, threads)
    assert_native(kernel, op, dtype)
    assert_correct(op, {}, [a, b], out)
    np.testing.assert_array_equal(out, OPS[op].cpu(a, b))


@pytest.mark.parametrize("exponent", [1.5, -0.5, 3.0])
@pytest.mark.parametrize("layout", list(ONE))
@pytest.mark.parametrize("dtype", DTYPES)
def test_pow(dtype, layout, exponent, threads, rng):
    x = draw("pow", ONE[layout], dtype, rng)
    attrs = {"exponent": exponent}
    out, kernel = run("pow", attrs, [x], dtype, threads)
    if is_dense(x):
        assert_native(kernel, "pow", dtype)
    else:  # pow has no rows entry point: cpu_fallback's kernel, and it says so
        assert kernel.runs_as == ("cpu_fallback", LAYOUT_MISS)
    assert_correct("pow", attrs, [x], out)


@pytest.mark.parametrize("threads", ["1", "3"], indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_large(dtype, threads, rng):
    x = draw("pow", (LARGE, None), dtype, rng)
    out, kernel = run("pow", {"exponent": 1.5}, [x], dtype, threads)
    assert_native(kernel, "pow", dtype)
    assert_correct("pow", {"exponent": 1.5}, [x], out)


def axes_of(layout: str):
    shape = draw("sum", ONE[layout], np.float64, np.random.default_rng(0)).shape
    return [None, *range(len(shape))]


REDUCE_CASES = [(layout, axis) for layout in ONE_NOT_0D for axis in axes_of(layout)] + [
    ("0-d", None)
]


@pytest.mark.parametrize("layout,axis", REDUCE_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", REDUCE)
def test_reduction(op, dtype, layout, axis, threads, rng):
    x = draw(op, ONE[layout], dtype, rng)
    for keepdims in (False, True):
        attrs = {"axis": axis, "keepdims": keepdims}
        out, kernel = run(op, attrs, [x], dtype, threads)
        if is_dense(x):
            assert_native(kernel, op, dtype)
        length = x.size if axis is None else x.shape[axis]
        assert_correct(op, attrs, [x], out, length)
        if op == "max":  # a maximum is one of the inputs: exactly numpy's
            np.testing.assert_array_equal(out, np.max(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3"], indirect=True)
@pytest.mark.parametrize("shape,axis", [(LARGE, None), (LARGE, 0), ((1009, 991), 0)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", REDUCE)
def test_reduction_large(op, dtype, shape, axis, threads, rng):
    x = draw(op, (shape, None), dtype, rng)
    out, kernel = run(op, {"axis": axis}, [x], dtype, threads)
    assert_native(kernel, op, dtype)
    assert_correct(op, {"axis": axis}, [x], out, x.size if axis is None else x.shape[axis])


SOFTMAX_CASES = [(layout, axis) for layout in ONE_NOT_0D for axis in axes_of(layout)]


@pytest.mark.parametrize("layout,axis", SOFTMAX_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(dtype, layout, axis, threads, request, rng):
    x = draw("softmax", ONE[layout], dtype, rng)
    one_run = axis is None or x.ndim == 1
    if one_run and x.size < threads and THREADINGS[request.node.callspec.params["threads"]][1]:
        pytest.skip("fewer elements than threads: test_softmax_of_one_run_reads_nothing_past_...")
    attrs = {"axis": axis}
    out, kernel = run("softmax", attrs, [x], dtype, threads)
    if is_dense(x):
        assert_native(kernel, "softmax", dtype)
    else:
        assert kernel.runs_as == ("cpu_fallback", LAYOUT_MISS)
    assert_correct("softmax", attrs, [x], out, x.size if axis is None else x.shape[axis])
    total = np.sum(out.astype(np.float64), axis=axis)
    np.testing.assert_allclose(total, 1.0, rtol=64 * np.finfo(dtype).eps)


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3"], indirect=True)
@pytest.mark.parametrize("shape,axis", [(LARGE, None), ((1009, 991), 0), ((991, 1009), 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_large(dtype, shape, axis, threads, rng):
    x = draw("softmax", (shape, None), dtype, rng)
    out, kernel = run("softmax", {"axis": axis}, [x], dtype, threads)
    assert_native(kernel, "softmax", dtype)
    assert_correct("softmax", {"axis": axis}, [x], out, x.size if axis is None else x.shape[axis])


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3"], indirect=True)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(1029, 10), (513, 63), (300, 1)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_short_rows_run_in_blocks_with_numpy_s_special_values(dtype, shape, op, threads, rng):
    """Rows shorter than SC_SHORT_ROW go a block of rows at a time, turned on its side: blocks of
    256 rows (65 of 63 elements: 4,096 elements at most) and a partial last one, split over
    threads; a NaN row, a row of -inf, -inf among finite values and +inf come out as numpy's
    float64 reference has them."""
    x = (rng.standard_normal(shape) * 20).astype(dtype)
    x[1, 0] = np.nan
    x[2, :] = -np.inf
    x[3, ::2] = -np.inf
    x[4, -1] = np.inf
    x[260, 0] = -np.inf  # in the second block, first in its row
    out, kernel = run(op, {"axis": -1}, [x], dtype, threads)
    assert_native(kernel, op, dtype)
    with np.errstate(invalid="ignore"):
        want = OPS[op].reference([x.astype(np.float64)], {"axis": -1})
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(want))
    fine = np.isfinite(want)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(out[fine], want[fine], rtol=16 * eps, atol=16 * eps * 40)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (3, 0, 2)], ids=str)
@pytest.mark.parametrize("threads", ["1", "3-tiny"], indirect=True)
def test_zero_size_arrays(shape, threads, recwarn):
    """Nothing to compute: nothing written, no crash; over nothing a sum is 0 and a mean NaN."""
    x = np.ones(shape, np.float32)
    for op in (*UNARY, "pow"):
        attrs = {"exponent": 1.5} if op == "pow" else {}
        out, _ = run(op, attrs, [x], np.float32, threads)
        assert out.shape == shape
    for b in (x, np.float32(2.0), np.ones(shape[-1:], np.float32)):
        out, _ = run("add", {}, [x, b], np.float32, threads)
        assert out.shape == shape
    for axis in (None, *range(len(shape))):
        out, _ = run("softmax", {"axis": axis}, [x], np.float32, threads)
        assert out.shape == shape
        for op, empty in (("sum", 0.0), ("mean", np.nan)):
            out, _ = run(op, {"axis": axis}, [x], np.float32, threads)
            count = x.size if axis is None else shape[axis]
            want = np.full(out.shape, empty if count == 0 else float(count), np.float32)
            if op == "mean" and count:
                want[:] = 1.0
            np.testing.assert_array_equal(out, want, err_msg=f"{op} {axis}")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("threads", ["1", "3-tiny"], indirect=True)
def test_more_dims_than_the_rows_entry_takes(threads, rng):
    """Nine strided dims that cannot be merged (the rows entry takes eight): cpu_fallback's
    kernel, right; a broadcast that merges to fewer dims stays native."""
    x = draw("tanh", ((2,) * 9, None), np.float64, rng).transpose(*range(8, -1, -1))
    out, kernel = run("tanh", {}, [x], np.float64, threads)
    assert kernel.runs_as == ("cpu_fallback", LAYOUT_MISS)
    assert_correct("tanh", {}, [x], out)
    a = draw("add", ((2,) * 9, None), np.float64, rng)
    b = draw("add", ((2, 1) * 4 + (2,), None), np.float64, rng)
    out, kernel = run("add", {}, [a, b], np.float64, threads)
    assert_correct("add", {}, [a, b], out)
    np.testing.assert_array_equal(out, a + b)


SENTINEL = 12345.0
GUARD_OPS = [*UNARY, *BINARY, "pow", "sum", "mean", "max", "softmax"]


def guarded(values: np.ndarray, around: float) -> np.ndarray:
    """``values`` as a view into a larger buffer whose elements around it are ``around``."""
    buf = np.full(values.size + 8, around, values.dtype)
    buf[4 : 4 + values.size] = values.ravel()
    return buf[4 : 4 + values.size].reshape(values.shape)


def _guard_params():
    params = []
    for n in (1, 2, 3, 7, 33):
        for threads in ("1", "2-tiny", "3-tiny"):
            for axis in (None, 0):
                params.append(pytest.param(n, threads, axis, id=f"{n}-{threads}-{axis}"))
    return params


@pytest.mark.parametrize("n,threads,axis", _guard_params(), indirect=["threads"])
def test_softmax_of_one_run_reads_nothing_past_its_input(n, threads, axis):
    """The elements next to the input are huge: read, they would take the maximum."""
    x = guarded(np.linspace(-1.0, 1.0, n), 1e30)
    out, kernel = run("softmax", {"axis": axis}, [x], np.float64, threads)
    assert_native(kernel, "softmax", np.float64)
    assert_correct("softmax", {"axis": axis}, [x], out, n)


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3-tiny"], indirect=True)
@pytest.mark.parametrize("shape", [(1,), (2,), (7,), (33,), (3, 5), (5, 3), (2, 300)], ids=str)
@pytest.mark.parametrize("op", GUARD_OPS)
def test_no_kernel_reads_or_writes_past_its_arrays(op, shape, threads, rng):
    """Inputs whose neighbours in memory are huge (a read past them shows in a sum, a max or a
    softmax), outputs whose neighbours hold a sentinel (a write past them overwrites it), on
    every path: flat, rows, one long run, rows of a reduction, tiles along a leading axis.
    Softmax over one run of fewer elements than threads is test_softmax_of_one_run_..."""
    dtype = np.float32
    along = OPS[op].family in ("reduce", "softmax")
    for axis in [None, *range(len(shape))] if along else [None]:
        if op == "softmax" and (axis is None or len(shape) == 1) and np.prod(shape) < threads:
            continue
        attrs = {"axis": axis} if along else {"exponent": 1.5} if op == "pow" else {}
        ins = [guarded(draw(op, (shape, None), dtype, rng), 1e30) for _ in range(OPS[op].arity)]
        if op in BINARY and len(shape) == 2:  # and a broadcast row, through the rows entry
            ins[1] = guarded(draw(op, ((1, shape[1]), None), dtype, rng), 1e30)
        target = out_shape(op, attrs, ins)
        size = int(np.prod(target))
        buf = np.full(size + 8, SENTINEL, dtype)
        out = buf[4 : 4 + size].reshape(target)
        out[...] = np.nan
        kernel = cpu_threads.make_kernel(op, attrs, ins, out, threads=threads)
        assert_native(kernel, op, dtype)
        kernel()
        assert (buf[:4] == SENTINEL).all() and (buf[4 + size :] == SENTINEL).all(), (op, axis)
        length = ins[0].size if axis is None else ins[0].shape[axis]
        assert_correct(op, attrs, ins, out, length if along else 1)


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3-tiny"], indirect=True)
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_of_infinities_nan_and_huge_values(dtype, axis, threads):
    big = float(np.finfo(dtype).max)
    rows = [
        [0.0, 1.0, np.inf],  # inf - inf: NaN, as numpy's
        [np.nan, 1.0, 2.0],
        [-np.inf, 0.0, 1.0],  # exp(-inf) = 0
        [-np.inf, -np.inf, -np.inf],  # -inf - -inf: NaN
        [1e30, -1e30, 0.0],
        [big, -big, 0.0],
        [-big, -big, -big],
    ]
    x = np.array(rows, dtype)
    out, kernel = run("softmax", {"axis": axis}, [x], dtype, threads)
    assert_native(kernel, "softmax", dtype)
    with np.errstate(all="ignore"):
        want = OPS["softmax"].reference([x.astype(np.float64)], {"axis": axis})
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out, want, rtol=64 * float(np.finfo(dtype).eps), atol=0)


def test_more_threads_than_the_kernels_keep_partials_for(native_kernels, tiny_grain, rng):
    """One long run on 300 threads: the kernels keep 256 partials, and must use no more."""
    x = draw("sum", ((1001,), None), np.float64, rng)
    for op in ("sum", "mean", "max", "softmax"):
        out, kernel = run(op, {"axis": None}, [x], np.float64, 300)
        assert_native(kernel, op, np.float64)
        assert_correct(op, {"axis": None}, [x], out, x.size)


def test_jobs_of_changing_chunk_counts_run_every_chunk_once(native_kernels, tiny_grain):
    """Thousands of jobs in a row, each cut into a number of chunks unlike the last, on more
    threads than cores: a chunk is claimed by its owner or a helper once (a worker that read
    an ended job's epoch claims nothing of the next), so every element is written, once,
    and integer sums come out exact."""
    rng = np.random.default_rng(11)
    sizes = [int(n) for n in rng.integers(1, 5000, 300)] + [1, 2, 4095, 4096, 4097]
    arrays = {n: np.arange(n, dtype=np.float64) for n in set(sizes)}
    for round_ in range(6):
        for n in sizes:
            x = arrays[n]
            out, _ = run("add", {}, [x, x], np.float64, 8)
            assert np.array_equal(out, 2 * x), (round_, n)
            total, _ = run("sum", {"axis": None}, [x], np.float64, 5 + round_ % 3)
            assert float(total) == n * (n - 1) / 2, (round_, n)


def test_the_pool_is_ready_with_every_thread_asked_for(native_kernels):
    # after a sleep the workers are asleep; ready() wakes them and waits for each to take part
    import time

    time.sleep(0.01)
    assert native.ready(1) == 1
    assert native.ready(2, wait_us=200_000) == 2
    assert native.ready(6, wait_us=200_000) == 6  # more threads than this machine's cores
    # a thread counts once, and only in time: with no time to wait, the caller alone
    assert native.ready(6, wait_us=0) == 1
    assert 1 <= native.ready(2000, wait_us=1000) <= 1023  # the pool's own cap
    rng = np.random.default_rng(3)
    x = rng.standard_normal(100_001)
    out, _ = run("add", {}, [x, x], np.float64, 6)  # the pool still runs jobs after it
    assert np.array_equal(out, 2 * x)


def test_an_output_that_is_not_contiguous_runs_cpu_fallback_correctly(native_kernels, rng):
    x = draw("tanh", ((37, 29), None), np.float32, rng)
    out = np.full((29, 37), np.nan, np.float32).T
    kernel = cpu_threads.make_kernel("tanh", {}, [x], out, threads=2)
    assert kernel.runs_as == ("cpu_fallback", LAYOUT_MISS)
    kernel()
    assert_correct("tanh", {}, [x], out)


def test_set_grain_returns_the_last_value_and_the_default_is_pytorch_s(native_kernels):
    was = native.set_grain(7)
    try:
        assert native.set_grain(0) == 7  # a grain below one is one
        assert native.set_grain(DEFAULT_GRAIN) == 1
    finally:
        native.set_grain(was)
    out = subprocess.run(
        [sys.executable, "-c", "from softcuda.backends import native; print(native.set_grain(1))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert int(out.stdout) == DEFAULT_GRAIN


# ---- special values ---------------------------------------------------------------------------


def ordered(x: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered as the numbers are (-0 and +0 one apart)."""
    x = np.asarray(x)
    bits = x.view(np.int32 if x.dtype == np.float32 else np.int64).astype(np.int64)
    top = np.int64(-(2**31) if x.dtype == np.float32 else -(2**63))
    return np.where(bits < 0, top - bits - 1, bits)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The distance in ulps; inf where one is NaN and the other not; 0 where both are NaN."""
    got, want = np.asarray(got), np.asarray(want)
    a, b = ordered(got), ordered(want)
    same_side = (a >= 0) == (b >= 0)  # a difference that cannot overflow int64
    apart = np.abs(a).astype(np.float64) + np.abs(b).astype(np.float64)
    d = np.where(same_side, np.abs(np.where(same_side, a - b, 0)).astype(np.float64), apart)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    d[nan_got & nan_want] = 0.0
    d[nan_got ^ nan_want] = np.inf
    return d


def specials(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    edges = [88.7, 88.72, 88.7228, 88.73, 89.0, -87.3, -87.34, -103.9, -103.97, -104.0, -104.5]
    edges += [709.7, 709.8, -708.4, -745.1, -746.0]  # float64's
    values = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0]
    values += [float(info.tiny), -float(info.tiny), float(info.smallest_subnormal)]
    values += [-float(info.smallest_subnormal), float(info.tiny) / 3, -float(info.tiny) / 3]
    values += [float(info.max), -float(info.max), 1e30, -1e30, 1e-30, -1e-30, 1e-8, -1e-8]
    values += [0.549, -0.549, 0.55, -0.55, 9.0, -9.0, 17.0, -17.0, 44.0, -44.0, 1e4, -1e4]
    with np.errstate(over="ignore"):
        return np.array(values + edges + [-e for e in edges], dtype=dtype)


# ulps from numpy's own result in the dtype: ours are polynomials (float32) or the C++ library
# (float64); neg, relu, square, step and abs are exact
ULPS = {
    np.float32: {"exp": 2, "log": 4, "tanh": 8, "sigmoid": 4},
    np.float64: {"exp": 2, "log": 2, "tanh": 2, "sigmoid": 4},
}


def numpy_result(op: str, x: np.ndarray) -> np.ndarray:
    """numpy's own result in x's dtype (sigmoid: the registry's formula in that dtype)."""
    with np.errstate(all="ignore"):
        return np.asarray(OPS[op].reference([x], {}), dtype=x.dtype)


def assert_like_numpy(op: str, x: np.ndarray, got: np.ndarray, zero_sign: bool = True) -> None:
    want = numpy_result(op, x)
    bound = ULPS[x.dtype.type].get(op, 0)
    d = ulps(got, want)
    bad = d > bound
    if zero_sign:  # a zero has numpy's sign
        bad |= (want == 0) & (np.signbit(got) != np.signbit(want))
    bad |= np.isinf(want) & (got != want)  # infinities exactly, sign included
    if np.any(bad):
        rows = [f"  x={a!r} got={g!r} numpy={w!r} ({u:g} ulp)" for a, g, w, u in
                zip(x[bad], got[bad], want[bad], d[bad])][:12]  # fmt: skip
        raise AssertionError(f"{op} {x.dtype} off numpy (bound {bound} ulp):\n" + "\n".join(rows))


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3-tiny"], indirect=True)
@pytest.mark.parametrize("view", ["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary_at_special_values(op, dtype, view, threads):
    x = specials(dtype)
    if view == "transposed":  # the rows entry point: every value through a strided read
        x = np.resize(x, (x.size, 3)).T.copy().T
    out = np.full(x.shape, np.nan, dtype)
    kernel = cpu_threads.make_kernel(op, {}, [x], out, threads=threads)
    assert_native(kernel, op, dtype)
    kernel()
    # relu(-0.0) is checked apart (test_relu_of_minus_zero_is_plus_zero_as_numpy_s)
    keep = ~((x == 0) & np.signbit(x)) if op == "relu" else np.ones(x.shape, bool)
    assert_like_numpy(op, x[keep], out[keep])


@pytest.mark.parametrize("threads", ["1", "3-tiny"], indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY)
def test_binary_at_special_values(op, dtype, threads):
    """Every pair of NaN, infinities, signed zeros, subnormals, ones and the largest values,
    as arrays, as a number on either side and broadcast: numpy's bits, the sign of zero too."""
    info = np.finfo(dtype)
    big, sub, tiny = float(info.max), float(info.smallest_subnormal), float(info.tiny)
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, big, -big, sub, tiny], dtype)
    a, b = np.repeat(sp, sp.size), np.tile(sp, sp.size)
    cases = [(a, b), (sp[:, None], sp[None, :])]
    cases += [(v, sp) for v in sp] + [(sp, v) for v in sp]  # numpy scalars of the dtype
    for x, y in cases:
        out, kernel = run(op, {}, [x, y], dtype, threads)
        assert_native(kernel, op, dtype)
        with np.errstate(all="ignore"):
            want = OPS[op].cpu(x, y)
        same = (np.isnan(out) & np.isnan(want)) | (
            (out == want) & (np.signbit(out) == np.signbit(want))
        )
        assert same.all(), (
            np.broadcast_to(x, out.shape)[~same],
            np.broadcast_to(y, out.shape)[~same],
            out[~same],
            want[~same],
        )


@pytest.mark.parametrize("exponent", [1.5, 0.0, -1.0, 2.0, 0.5, -0.5, 3.0, -2.5])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_at_special_values_of_its_domain(native_kernels, dtype, exponent):
    """x >= 0 (the op's domain), infinity and NaN: numpy's np.power in the dtype, within an
    ulp (numpy computes some exponents as sqrt, square or a reciprocal)."""
    info = np.finfo(dtype)
    x = np.array([0.0, float(info.smallest_subnormal), float(info.tiny) / 3, float(info.tiny),
                  1e-30, 0.5, 1.0, 2.0, 1e30, float(info.max), np.inf, np.nan], dtype)  # fmt: skip
    out = np.full(x.shape, 7.0, dtype)
    cpu_threads.make_kernel("pow", {"exponent": exponent}, [x], out, threads=1)()
    with np.errstate(all="ignore"):
        want = np.power(x, np.dtype(dtype).type(exponent))
    d = ulps(out, want)
    assert (d <= 1).all(), list(zip(x[d > 1], out[d > 1], want[d > 1]))
    assert (np.signbit(out) == np.signbit(want))[want == 0].all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_of_minus_zero_is_plus_zero_as_numpy_s(native_kernels, dtype):
    x = np.full(5, -0.0, dtype)
    out = np.full(5, np.nan, dtype)
    cpu_threads.make_kernel("relu", {}, [x], out, threads=1)()
    assert not np.any(np.signbit(out)), out


def test_the_zeros_keep_their_sign_where_numpy_keeps_it(native_kernels):
    x = np.array([-0.0, 0.0, -0.0], np.float32)
    for op, want in (("tanh", [-0.0, 0.0, -0.0]), ("neg", [0.0, -0.0, 0.0]),
                     ("abs", [0.0, 0.0, 0.0]), ("square", [0.0, 0.0, 0.0])):  # fmt: skip
        for dtype in DTYPES:
            out = np.full(3, np.nan, dtype)
            cpu_threads.make_kernel(op, {}, [x.astype(dtype)], out, threads=1)()
            np.testing.assert_array_equal(np.signbit(out), np.signbit(want), err_msg=op)
            np.testing.assert_array_equal(out, want, err_msg=op)


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_overflow_and_underflow_edges(native_kernels, dtype):
    x = np.array([88.7, 88.72, 88.7228, 88.7229, 88.73, 89.0, 1e4, np.inf, -87.3, -87.33,
                  -87.34, -103.9, -103.97, -103.98, -104.0, -150.0, -np.inf], dtype)  # fmt: skip
    out = np.full(x.shape, np.nan, dtype)
    cpu_threads.make_kernel("exp", {}, [x], out, threads=1)()
    want = numpy_result("exp", x)
    assert_like_numpy("exp", x, out)
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    np.testing.assert_array_equal(out == 0, want == 0)
    if dtype == np.float32:
        assert np.isinf(out[x > 88.723]).all() and np.isfinite(out[x < 88.722]).all()
        assert out[x == np.float32(-103.9)][0] > 0  # a subnormal, not flushed to zero
        assert out[-2] == 0 and out[-1] == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_of_zero_negative_subnormal_and_infinity(native_kernels, dtype):
    info = np.finfo(dtype)
    sub = [float(info.smallest_subnormal), float(info.tiny) / 3, float(info.tiny) / 1024]
    x = np.array([0.0, -0.0, -1.0, -float(info.tiny), -np.inf, np.inf, np.nan, *sub], dtype)
    out = np.full(x.shape, 7.0, dtype)
    cpu_threads.make_kernel("log", {}, [x], out, threads=1)()
    assert out[0] == -np.inf and out[1] == -np.inf
    assert np.isnan(out[2:5]).all() and out[5] == np.inf and np.isnan(out[6])
    assert_like_numpy("log", x, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_log_tanh_sigmoid_in_ulps_over_a_dense_sweep(native_kernels, dtype):
    """Every one of 2^21 points in [-120, 100] (and for log their magnitudes and the
    subnormals) against numpy's own result in the dtype, in ulps."""
    sweep = np.linspace(-120.0, 100.0, 2**21 + 1).astype(dtype)
    for op in ("exp", "log", "tanh", "sigmoid"):
        x = sweep
        if op == "log":
            tiny = np.finfo(dtype).tiny
            x = np.concatenate([np.abs(sweep), np.geomspace(tiny / 2**20, tiny, 4097, dtype=dtype)])
        out = np.full(x.shape, np.nan, dtype)
        cpu_threads.make_kernel(op, {}, [x], out, threads=2)()
        assert_like_numpy(op, x, out)


def test_float32_log_at_the_worst_point_against_numpy_is_within_3_ulps_of_exact(native_kernels):
    """The worst point of an exhaustive search over [2^-20, 128) against numpy: x = 0.77887386,
    where ours is 2 ulps above the correctly rounded result and numpy's vectorized float32 log
    (the AVX2 and AVX-512 paths) 3 ulps below it: 5 apart.  The bound that matters is against
    the exact result; numpy's own error is not ours to match."""
    x = np.array([0.778873860836029], np.float32)
    out = np.full(1, np.nan, np.float32)
    cpu_threads.make_kernel("log", {}, [x], out, threads=1)()
    rounded = np.log(x.astype(np.float64)).astype(np.float32)
    assert ulps(out, rounded)[0] <= 3
    assert ulps(out, np.log(x))[0] <= 3 + ulps(np.log(x), rounded)[0]


# ---- reductions: NaN, infinities, long float32 sums ------------------------------------------


@pytest.mark.parametrize("threads", list(THREADINGS), indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 100003])
def test_max_with_a_nan_anywhere_is_nan(dtype, n, threads):
    for where in sorted({0, n // 3, n // 2, n - 1}):
        x = np.arange(n, dtype=dtype)
        x[where] = np.nan
        out, kernel = run("max", {"axis": None}, [x], dtype, threads)
        assert_native(kernel, "max", dtype)
        assert np.isnan(out), (n, where, out)
        # as one column of a (n, 3) input along 0 (tiles) and one row of its transpose (rows)
        x2 = np.tile(np.arange(n, dtype=dtype)[:, None], (1, 3))
        x2[where, 1] = np.nan
        for a, axis in ((x2, 0), (np.ascontiguousarray(x2.T), 1), (x2, None)):
            out, _ = run("max", {"axis": axis}, [a], dtype, threads)
            np.testing.assert_array_equal(out, np.max(a, axis=axis), err_msg=f"{n} {where}")


@pytest.mark.parametrize("threads", ["1", "3-tiny"], indirect=True)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_of_infinities_and_nan_are_numpy_s(dtype, threads):
    cases = [
        [np.inf, 1.0, 2.0],
        [np.inf, -np.inf, 1.0],
        [-np.inf, -np.inf, -np.inf],
        [np.nan, np.nan, np.nan],
        [1.0, 2.0, np.nan],
        [float(np.finfo(dtype).max)] * 4,  # overflows: inf, as numpy's
        [-0.0, -0.0],
    ]
    for values in cases:
        for axis in (None, 0, 1):
            x = np.array([values, values[::-1]], dtype)
            for op in REDUCE:
                out, _ = run(op, {"axis": axis}, [x], dtype, threads)
                with np.errstate(all="ignore"):
                    want = OPS[op].reference([x.astype(np.float64)], {"axis": axis}).astype(dtype)
                np.testing.assert_array_equal(out, want, err_msg=f"{op} {values} {axis}")


@pytest.mark.parametrize("threads", ["1", "3"], indirect=True)
def test_a_sum_of_2_to_the_24_and_more_float32_ones_is_exact(threads):
    n = 2**24 + 40
    x = np.ones(n, np.float32)
    for op, want in (("sum", n), ("mean", 1.0)):
        out, kernel = run(op, {"axis": None}, [x], np.float32, threads)
        assert_native(kernel, op, np.float32)
        assert float(out) == want, (op, float(out))


def test_long_float32_columns_and_rows_sum_exactly(native_kernels):
    n = 2**24 + 8
    cols = np.ones((n, 2), np.float32)
    out, _ = run("sum", {"axis": 0}, [cols], np.float32, 2)  # tiles: one partial per column
    np.testing.assert_array_equal(out, [n, n])
    del cols
    rows = np.ones((2, n), np.float32)
    out, _ = run("sum", {"axis": 1}, [rows], np.float32, 2)  # a row per thread
    np.testing.assert_array_equal(out, [n, n])


@pytest.fixture(scope="module")
def ten_million() -> dict:
    rng = np.random.default_rng(10**7)
    return {
        "uniform": rng.random(10**7, dtype=np.float32),
        "normal": rng.standard_normal(10**7, dtype=np.float32),
    }


@pytest.mark.parametrize("threads", ["1", "2-tiny", "3"], indirect=True)
@pytest.mark.parametrize("values", ["uniform", "normal"])
def test_ten_million_float32_sums_round_like_a_pairwise_sum(ten_million, values, threads):
    """Within 2 ulps of the float64 sum, or within the rounding a pairwise sum makes: float32
    blocks of 256 round about 16 terms per vector lane before the blocks add in double, so the
    error is a random walk of sqrt(16 n) roundings of rms-sized partials (4 times that allowed;
    a sum accumulated in float32 element by element errs three times more than that here).  A
    normal draw cancels to a result near 40, whose ulp is far below any float32 partial's
    rounding: there the bound decides (numpy's own pairwise sum errs 2e-4 on it)."""
    x = ten_million[values]
    exact = np.sum(x, dtype=np.float64)
    walk = (
        4
        * 2.0**-24
        * float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
        * (16 * x.size) ** 0.5
    )
    for op, want, scale in (("sum", exact, 1.0), ("mean", exact / x.size, 1.0 / x.size)):
        out, _ = run(op, {"axis": None}, [x], np.float32, threads)
        off = abs(float(out) - want)
        two_ulps = 2 * float(np.spacing(np.float32(abs(want))))
        assert off <= max(two_ulps, walk * scale), (op, float(out), want)


# ---- the fallback and the cache, in processes of their own ------------------------------------

CHILD = textwrap.dedent(
    """
    import json, os, warnings
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # once must be the library's doing, not the filter's
        import softcuda as sc
        from softcuda.backends import native
        from softcuda.config import rules_config
        cfg = rules_config({op: "cpu_threads" for op in ("add", "tanh", "sum", "softmax")})
        x = np.random.default_rng(0).standard_normal((37, 29)).astype(np.float32)
        t = sc.tensor(x)
        plans = [sc.compile(sc.sum(sc.tanh(t + t), axis=0), cfg, fuse=False),
                 sc.compile(sc.softmax(t, axis=1), cfg, fuse=False)]
        for plan in plans:
            plan.poison()
        outs = [plan.evaluate() for plan in plans] + [plan.evaluate() for plan in plans]
    print(json.dumps({
        "x": x.tolist(),
        "outs": [np.asarray(o, np.float64).tolist() for o in outs],
        "reason": native.unavailable(),
        "compile_s": native.compile_seconds(),
        "spin": os.environ.get("GOMP_SPINCOUNT"),
        "warnings": [[w.category.__name__, str(w.message)] for w in caught],
        "explain": plans[0].explain(),
        "runs_as": [list(s.runs_as) if s.runs_as else None for s in plans[0].steps
                    if s.backend_id == "cpu_threads"],
    }))
    """
)


def child_env(**env: str) -> dict:
    """This process's environment with ``env`` added, less the GOMP_SPINCOUNT that loading the
    library here set (a child must set its own) and any SOFTCUDA_NATIVE (each test sets it)."""
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "SOFTCUDA_NATIVE")}
    return {**base, **env}


def child(**env: str) -> dict:
    """CHILD in a fresh interpreter with ``env`` added to this one's environment."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_child_values(report: dict) -> None:
    x = np.array(report["x"], np.float32)
    x64 = x.astype(np.float64)
    want = [np.tanh(2 * x64).sum(axis=0), OPS["softmax"].reference([x64], {"axis": 1})]
    for got, ref in zip(report["outs"], want + want):
        np.testing.assert_allclose(np.array(got), ref, rtol=1e-5, atol=1e-6)


def assert_fell_back(report: dict, reason_has: str) -> str:
    reason = report["reason"]
    assert reason and reason_has in reason
    assert "\n" not in reason  # one sentence
    assert_child_values(report)
    warned = [m for c, m in report["warnings"] if c == "RuntimeWarning"]
    assert len(warned) == 1, report["warnings"]  # once, for both plans and both runs
    assert reason in warned[0] and "cpu_fallback" in warned[0]
    assert report["runs_as"] and all(r == ["cpu_fallback", reason] for r in report["runs_as"])
    assert f"runs as cpu_fallback: {reason}" in report["explain"]
    assert "cpu_threads (as cpu_fallback)" in report["explain"]
    return reason


def test_softcuda_native_0_runs_cpu_fallback_and_says_so(tmp_path):
    report = child(SOFTCUDA_NATIVE="0", SOFTCUDA_CACHE=str(tmp_path / "cache"))
    assert_fell_back(report, "SOFTCUDA_NATIVE=0")
    assert not (tmp_path / "cache").exists()  # nothing built


def test_a_compiler_that_does_not_exist_runs_cpu_fallback_and_says_so(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    report = child(CXX="/nonexistent/c++", SOFTCUDA_CACHE=str(cache))
    assert_fell_back(report, "/nonexistent/c++")
    assert list(cache.iterdir()) == []


def test_a_compiler_that_fails_names_its_first_error_line(tmp_path):
    fake = tmp_path / "fake-c++"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo fake 1.0 && exit 0\n"
                    "echo 'cpu.cpp: In function f:' >&2\n"
                    "echo 'cpu.cpp:3:1: error: no space on the moon' >&2\n"
                    "echo '    | ^~~~' >&2\necho '1 error generated.' >&2\nexit 1\n")  # fmt: skip
    fake.chmod(0o755)
    cache = tmp_path / "cache"
    report = child(CXX=str(fake), SOFTCUDA_CACHE=str(cache))
    reason = assert_fell_back(report, "could not compile")
    assert "error: no space on the moon" in reason and str(fake) in reason
    assert "^~~~" not in reason  # the first error, not the caret under the last
    assert not list(cache.glob("cpu-*.so")) and not list(cache.glob("build-*"))  # cleaned up


def test_a_cache_that_cannot_be_written_compiles_for_the_process_and_says_so_once(tmp_path):
    """A read-only home (here a cache path under a file, which no user can create, root
    included): the kernels are built in a temporary folder, loaded, and the folder removed;
    one warning names the cache; the plans run the native kernels."""
    require_native()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker / "cache"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    report = child(SOFTCUDA_CACHE=str(cache), TMPDIR=str(scratch))
    assert report["reason"] is None and report["compile_s"] > 0
    warned = [m for c, m in report["warnings"] if c == "RuntimeWarning"]
    assert len(warned) == 1 and str(cache) in warned[0] and "this process only" in warned[0]
    assert report["runs_as"] == [None] * len(report["runs_as"])
    assert_child_values(report)
    assert list(scratch.iterdir()) == []  # the library built for the process is gone


def test_a_cache_folder_named_like_a_temporary_build_is_never_removed(tmp_path):
    """Only the folders a build made for its process are removed after loading: a user's
    cache whose name happens to start like them keeps its files."""
    require_native()
    cache = tmp_path / "softcuda-build-cache"
    cache.mkdir()
    (cache / "mine.txt").write_text("keep me")
    first = child(SOFTCUDA_CACHE=str(cache))
    second = child(SOFTCUDA_CACHE=str(cache))
    assert first["reason"] is None and second["reason"] is None
    assert (cache / "mine.txt").read_text() == "keep me"
    assert second["compile_s"] == 0  # the library built by the first stayed in the cache


def test_a_read_only_cache_that_holds_the_library_loads_it(tmp_path):
    require_native()
    built = sorted(native.cache_dir().glob("cpu-*.so"), key=lambda p: p.stat().st_mtime)
    assert built, "this process loaded the library from its cache folder"
    cache = tmp_path / "ro"
    cache.mkdir()
    for path in built:
        shutil.copy(path, cache / path.name)
    cache.chmod(0o500)
    try:
        report = child(SOFTCUDA_CACHE=str(cache), GOMP_SPINCOUNT="123")
    finally:
        cache.chmod(0o700)
    assert report["reason"] is None and report["compile_s"] == 0
    assert report["spin"] == "123"  # the user's setting is kept
    assert report["runs_as"] == [None] * len(report["runs_as"])
    assert not [w for w in report["warnings"] if w[0] == "RuntimeWarning"]
    assert_child_values(report)


def test_the_second_process_loads_what_the_first_compiled(tmp_path):
    require_native()
    cache = tmp_path / "fresh"
    first = child(SOFTCUDA_CACHE=str(cache))
    assert first["reason"] is None and first["compile_s"] > 0
    second = child(SOFTCUDA_CACHE=str(cache))
    assert second["reason"] is None and second["compile_s"] == 0
    for report in (first, second):
        assert_child_values(report)
        assert report["spin"] is None  # libgomp's own spin count: softcuda sets none
        assert report["runs_as"] == [None] * len(report["runs_as"])
        assert "runs as" not in report["explain"]
    (library,) = cache.glob("cpu-*.so")
    assert re.fullmatch(r"cpu-[0-9a-f]{16}\.so", library.name)
    assert sorted(p.name for p in cache.iterdir()) == [library.name]  # no build folder left


def test_two_processes_compiling_into_one_fresh_cache_at_once_both_work(tmp_path):
    require_native()
    cache = tmp_path / "race"
    env = child_env(SOFTCUDA_CACHE=str(cache))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        report = json.loads(out)
        assert report["reason"] is None
        assert_child_values(report)
    assert len(list(cache.glob("cpu-*.so"))) == 1 and not list(cache.glob("build-*"))


# ---- layouts the layer does not cover ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op,attrs", [("pow", {"exponent": 1.5}), ("softmax", {"axis": 0}), ("softmax", {"axis": 1})]
)
def test_an_uncovered_layout_runs_cpu_fallback_and_says_so(
    native_kernels, op, attrs, dtype, rng, recwarn
):
    leaf = np.asarray(check.random_input(op, (29, 37), dtype, rng))
    x = leaf.T
    out, kernel = run(op, attrs, [x], dtype, 3)
    assert kernel.runs_as == ("cpu_fallback", LAYOUT_MISS)
    assert_correct(op, attrs, [x], out, x.shape[attrs["axis"]] if "axis" in attrs else 1)
    # through a plan: the step says it and explain() names it; no warning (the layer is there)
    node = getattr(sc, op)(sc.tensor(leaf).T, **attrs)
    plan = sc.compile(node, rules_config({op: "cpu_threads"}), fuse=False)
    (step,) = [s for s in plan.steps if s.op == op]
    assert step.runs_as == ("cpu_fallback", LAYOUT_MISS)
    text = plan.explain()
    assert "cpu_threads (as cpu_fallback)" in text
    assert f"runs as cpu_fallback: {LAYOUT_MISS}" in text
    plan.poison()
    assert_correct(
        op, attrs, [x], plan.evaluate(), x.shape[attrs["axis"]] if "axis" in attrs else 1
    )
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_covered_plan_explains_no_fallback(native_kernels):
    x = sc.randn((37, 29), seed=1)
    cfg = rules_config({"tanh": "cpu_threads", "mul": "cpu_threads", "softmax": "cpu_threads"})
    plan = sc.compile(sc.softmax(sc.tanh(x) * 2.0, axis=0), cfg, fuse=False)
    assert all(s.runs_as is None for s in plan.steps)
    assert "runs as" not in plan.explain() and "(as " not in plan.explain()


# ---- two Python threads at once ---------------------------------------------------------------


@pytest.mark.parametrize("threads", ["1", "2-tiny"], indirect=True)
def test_two_python_threads_evaluating_plans_at_once_stay_right(threads):
    if threads > usable_cores():
        pytest.skip("a profile may not ask more threads than this process has cores")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((257, 131)).astype(np.float32)
    b = rng.standard_normal((129, 263))
    cfg = rules_config({op: "cpu_threads" for op in ("tanh", "mul", "sum", "softmax", "add")})
    cfg.device["cpu_threads"] = str(threads)
    plans = [
        sc.compile(sc.softmax(sc.tanh(sc.tensor(a)) * 3.0, axis=1), cfg, fuse=False),
        sc.compile(sc.sum(sc.tensor(b) + sc.tensor(b[:1]), axis=0), cfg, fuse=False),
    ]
    with np.errstate(all="ignore"):
        wants = [
            OPS["softmax"].reference([3.0 * np.tanh(a.astype(np.float64))], {"axis": 1}),
            (b + b[:1]).sum(axis=0),
        ]
    for plan in plans:
        assert all(s.runs_as is None for s in plan.steps)
    start = threading.Barrier(2)
    errors: list = []

    def loop(plan, want):
        start.wait()
        for _ in range(40):
            got = plan.evaluate()
            if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                errors.append(float(np.max(np.abs(got - want))))

    workers = [threading.Thread(target=loop, args=pw) for pw in zip(plans, wants)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


@pytest.mark.parametrize("threads", ["1", "3"], indirect=True)
@pytest.mark.parametrize("exponent", [0.5, 2.0, 3.0, -1.0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_by_a_half_or_two_is_numpy_s_to_the_bit(dtype, exponent, threads):
    """sc_pow takes 0.5 as a square root and 2 as x * x, as numpy's power does: the same bits,
    specials included (-0 to -0, -inf to NaN under 0.5); other exponents through pow."""
    specials = [-0.0, 0.0, -np.inf, np.inf, np.nan, -1.0, 4.0, 2.25, 1e-40, 3e38, -3.0, 0.1]
    x = np.array(specials * 100, dtype=dtype)
    out, kernel = run("pow", {"exponent": exponent}, [x], dtype, threads)
    assert_native(kernel, "pow", dtype)
    with np.errstate(all="ignore"):
        want = np.power(x, dtype(exponent))
    if exponent in (0.5, 2.0):
        np.testing.assert_array_equal(out, want)
        real = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(out[real]), np.signbit(want[real]))
    else:
        np.testing.assert_allclose(out, want, rtol=4 * np.finfo(dtype).eps)
