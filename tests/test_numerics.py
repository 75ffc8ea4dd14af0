"""Numerical edge cases on the CPU backends, against float64 numpy: sums longer than float32
can count (2^24), the tails of sigmoid.  The CUDA counterparts are in test_cuda_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest

import softcuda as sc
from softcuda import pool
from softcuda.backends import cpu_fallback
from softcuda.check import check_op
from softcuda.config import single_rule_config

CPU = ("cpu_fallback", "cpu_blas")

# Just past 2^24 rows: a float32 sum that adds one row at a time stops at 2^24 (2^24 + 1
# rounds back to 2^24), 2^12 rows short of the truth, a relative error of 2.4e-4.
LONG = 2**24 + 2**12


@pytest.fixture(scope="module")
def long_ones():
    """A (LONG, 2) float32 leaf of ones (128 MiB) in a leaf pool of its own, released after
    the module; filled from a broadcast view, so no second copy is ever made."""
    saved = pool._leaf_pool
    pool._leaf_pool = None
    try:
        yield sc.tensor(np.broadcast_to(np.float32(1.0), (LONG, 2)))
    finally:
        pool._leaf_pool = saved


def _evaluate(node, op, backend):
    return sc.compile(node, single_rule_config(op, backend)).evaluate()


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_sum_along_a_strided_axis_counts_past_2_24(long_ones, backend, op):
    """Along axis 0 of a row-major (LONG, 2) array the two sums interleave in memory, where
    numpy adds serially instead of pairwise; the transposed view (2, LONG) reduced along
    axis 1 is the same layout."""
    want = float(LONG) if op == "sum" else 1.0
    for node in (getattr(sc, op)(long_ones, axis=0), getattr(sc, op)(long_ones.T, axis=1)):
        got = _evaluate(node, op, backend)
        np.testing.assert_allclose(got, [want, want], rtol=1e-6)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_long_sums_along_memory_and_over_everything_stay_exact(long_ones, op):
    """The layouts numpy already adds pairwise: a contiguous row, and every element."""
    want = float(LONG) if op == "sum" else 1.0
    rows = long_ones.reshape(2, LONG)  # a view: each row contiguous
    np.testing.assert_allclose(
        _evaluate(getattr(sc, op)(rows, axis=1), op, "cpu_fallback"), [want, want], rtol=1e-6
    )
    total = _evaluate(getattr(sc, op)(long_ones), op, "cpu_fallback")
    np.testing.assert_allclose(total, 2 * want if op == "sum" else want, rtol=1e-6)


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize(
    "shape,axis,flip",
    [
        ((1000, 3), 0, False),  # several blocks and a tail along a strided axis
        ((3, 1000), 1, True),  # the same data transposed
        ((4, 777, 5), 1, False),  # a middle axis
        ((777, 4), -2, False),
        ((512, 7), 0, False),  # whole blocks, no tail
    ],
)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_sums_against_float64(backend, op, shape, axis, flip, keepdims, dtype):
    attrs = {"axis": axis % len(shape), "keepdims": keepdims}
    r = check_op(op, backend, [shape], dtype=dtype, attrs=attrs, seed=3, transpose=(flip,))
    assert r.ok, r


def test_a_strided_float32_sum_errs_no_more_than_a_block_of_serial_adds():
    """[2^24, 1, 1, ...] down a column: adding serially in float32 loses every 1 after the
    first value; in blocks only the ones inside the first block go."""
    col = np.ones(2**14, np.float32)
    col[0] = 2.0**24
    a = np.stack([col, col], axis=1)
    out = np.empty(2, np.float32)
    cpu_fallback.make_kernel("sum", {"axis": 0, "keepdims": False}, [a], out)()
    want = 2.0**24 + 2**14 - 1
    assert np.all(np.abs(out - want) <= cpu_fallback.SUM_BLOCK), out


# ---- sigmoid's tails ---------------------------------------------------------------------------

# The whole float32 range of exp's argument, and the points where the tail used to go: at -17
# 0.5 * tanh(x / 2) + 0.5 rounded to 5.96e-8 (true 4.14e-8), at -20 to 0.
SIGMOID_X = np.concatenate([np.linspace(-88.0, 88.0, 4001), [-17.0, -20.0, -80.0, 20.0]])


def sigmoid_reference(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in long double (float64 where that is all there is): no overflow and
    no cancellation for |x| <= 88."""
    x = np.asarray(x, np.longdouble)
    return 1.0 / (1.0 + np.exp(-x))


def assert_relatively_close(got: np.ndarray, want: np.ndarray, dtype) -> None:
    """Within 8 ulps of the result's own size; below the smallest normal number, within the
    spacing of subnormals too (sigmoid(-88) is 6e-39, a float32 subnormal)."""
    info = np.finfo(dtype)
    want = np.asarray(want, np.longdouble)
    err = np.abs(np.asarray(got, np.longdouble) - want)
    bad = err > 8 * float(info.eps) * np.abs(want) + float(info.smallest_subnormal)
    assert not np.any(bad), list(zip(SIGMOID_X[bad][:5], got[bad][:5], want[bad][:5]))


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_keeps_its_relative_accuracy_in_both_tails(backend, dtype):
    x = SIGMOID_X.astype(dtype)
    got = _evaluate(sc.sigmoid(sc.tensor(x, dtype=dtype)), "sigmoid", backend)
    assert got.dtype == dtype
    assert_relatively_close(got, sigmoid_reference(x), dtype)


@pytest.mark.parametrize("backend", CPU)
def test_log_of_sigmoid_of_minus_20_is_minus_20(backend):
    x = sc.tensor(np.array([-20.0, -80.0], np.float32))
    plan = sc.compile(sc.log(sc.sigmoid(x)), single_rule_config("sigmoid", backend))
    np.testing.assert_allclose(plan.evaluate(), [-20.0, -80.0], rtol=1e-6)


@pytest.mark.parametrize("backend", CPU)
def test_sigmoid_saturates_quietly_and_passes_nan(backend, recwarn):
    x = np.array([-1e4, -89.0, -np.inf, np.inf, 1e4, np.nan], np.float32)
    got = _evaluate(sc.sigmoid(sc.tensor(x)), "sigmoid", backend)
    np.testing.assert_array_equal(got[:5], [0.0, 0.0, 0.0, 1.0, 1.0])
    assert np.isnan(got[5])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
