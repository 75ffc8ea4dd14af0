"""Correctness of softcuda's CUDA kernels (softcuda.backends.cuda_kernels) on a real GPU.

Every test carries the `cuda` marker and is skipped, with the reason, where CuPy or a device is
not usable.  Each case draws fresh random inputs, poisons the output with NaN, launches the
prebound run() and compares with a float64 reference: ||out - ref|| / ||ref|| below 1e-5
(float32 elementwise and reductions), 1e-4 (float32 matmul, K up to 8192) or 1e-12 / 1e-11
(float64).  NaN never passes.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from softcuda.backends import cuda_available
from softcuda.backends import cuda_kernels as ck
from softcuda.ops import OPS

pytestmark = pytest.mark.cuda

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-12}
TOL_MM = {np.float32: 1e-4, np.float64: 1e-11}


@pytest.fixture
def rand(cp: Any) -> Any:
    rng = np.random.default_rng()

    def make(shape: tuple[int, ...], dtype: Any, lo: float = -1.0, hi: float = 1.0) -> Any:
        return cp.asarray(rng.uniform(lo, hi, size=shape).astype(dtype))

    return make


def rel_err(out: Any, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("nan")
    # Differences below float32's smallest normal count as zero: a subnormal result
    # (sigmoid(-100) in float32) has too few bits for a relative comparison.
    tiny = float(np.finfo(np.float32).tiny)
    diff = (out - ref).ravel()
    diff[np.abs(diff) < tiny] = 0.0
    return float(np.linalg.norm(diff)) / max(float(np.linalg.norm(ref.ravel())), tiny)


def nan_out(cp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    return cp.full(shape, np.nan, dtype=dtype)


def f64(x: Any) -> np.ndarray:
    return x.get().astype(np.float64)


# ------------------------------------------------------------------------------- module basics


def test_source_hash_is_stable_hex() -> None:
    h = ck.source_hash()
    assert h == ck.source_hash() and len(h) == 64
    int(h, 16)


# ------------------------------------------------------------------------------- binary

BINARY_CASES = {
    "n=1": lambda r, dt: (r((1,), dt), r((1,), dt)),
    "n=3": lambda r, dt: (r((3,), dt), r((3,), dt)),
    "n=127": lambda r, dt: (r((127,), dt), r((127,), dt)),
    "n=129": lambda r, dt: (r((129,), dt), r((129,), dt)),
    "n=1000": lambda r, dt: (r((1000,), dt), r((1000,), dt)),
    "misaligned": lambda r, dt: (r((1001,), dt)[1:], r((1001,), dt)[1:]),
    "scalar a": lambda r, dt: (r((), dt), r((1000,), dt)),
    "scalar b": lambda r, dt: (r((1003,), dt), r((), dt)),
    "scalar b (1,1)": lambda r, dt: (r((37, 129), dt), r((1, 1), dt)),
    "row bcast": lambda r, dt: (r((127, 129), dt), r((129,), dt)),
    "col bcast": lambda r, dt: (r((127, 129), dt), r((127, 1), dt)),
    "a.T": lambda r, dt: (r((129, 127), dt).T, r((127, 129), dt)),
    "b strided": lambda r, dt: (r((64, 43), dt), r((128, 129), dt)[::2, ::3]),
    "outer bcast": lambda r, dt: (r((5, 1, 7), dt), r((1, 6, 1), dt)),
    "neg stride": lambda r, dt: (r((999,), dt)[::-1], r((999,), dt)),
}
NP_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ck.BINARY_OPS)
@pytest.mark.parametrize("case", list(BINARY_CASES))
def test_binary(cp: Any, rand: Any, op: str, dt: Any, case: str) -> None:
    a, b = BINARY_CASES[case](rand, dt)
    if op == "div":
        b = cp.abs(b) + 0.5  # divisors away from zero
    out = nan_out(cp, np.broadcast_shapes(a.shape, b.shape), dt)
    ck.make_binary(op, a, b, out)()
    assert rel_err(out.get(), NP_BINARY[op](f64(a), f64(b))) < TOL[dt]


@pytest.mark.parametrize("op", ck.BINARY_OPS)
@pytest.mark.parametrize("shapes", [((0,), (0,)), ((0, 3), (3,)), ((0,), (1,)), ((3, 0), (3, 1))])
def test_binary_on_empty_shapes(cp: Any, op: str, shapes: tuple) -> None:
    a, b = cp.ones(shapes[0], np.float32), cp.ones(shapes[1], np.float32)
    out = nan_out(cp, np.broadcast_shapes(*shapes), np.float32)
    ck.make_binary(op, a, b, out)()
    cp.cuda.Device().synchronize()  # a bad launch would raise here
    assert out.shape == np.broadcast_shapes(*shapes)


@pytest.mark.parametrize("op", ck.UNARY_OPS)
def test_unary_on_empty_shapes(cp: Any, op: str) -> None:
    for a in (cp.ones((0,), np.float32), cp.ones((3, 0), np.float64).T):
        ck.make_unary(op, a, nan_out(cp, a.shape, a.dtype))()
    cp.cuda.Device().synchronize()


def test_binary_rerun_sees_new_values_and_runs_on_stream(cp: Any, rand: Any) -> None:
    a, b = rand((4099,), np.float32), rand((4099,), np.float32)
    out = nan_out(cp, a.shape, np.float32)
    run = ck.make_binary("mul", a, b, out)
    a[...] = rand((4099,), np.float32)  # run() reads the arrays at launch time
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        run()
    stream.synchronize()
    assert rel_err(out.get(), f64(a) * f64(b)) < 1e-6


def test_add_large(cp: Any, rand: Any) -> None:
    n = 1 << 28
    a, b = rand((n,), np.float32), rand((n,), np.float32)
    out = nan_out(cp, (n,), np.float32)
    ck.make_binary("add", a, b, out)()
    ref = a.astype(np.float64) + b.astype(np.float64)
    err = float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))
    assert err < 1e-7  # one float32 rounding per element


# ------------------------------------------------------------------------------- unary and copy

UNARY_LAYOUTS = {
    "n=1": lambda a: a[:1],
    "n=3": lambda a: a[:3],
    "n=127": lambda a: a[:127],
    "contig": lambda a: a,
    "misaligned": lambda a: a[1:],
    "x.T": lambda a: a[: 129 * 127].reshape(129, 127).T,
    "strided": lambda a: a[: 64 * 90].reshape(64, 90)[::3, ::2],
}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ck.UNARY_OPS)
@pytest.mark.parametrize("layout", list(UNARY_LAYOUTS))
def test_unary(cp: Any, rand: Any, op: str, dt: Any, layout: str) -> None:
    lo, hi = {"log": (0.01, 10.0), "sigmoid": (-120.0, 120.0)}.get(op, (-5.0, 5.0))
    a = UNARY_LAYOUTS[layout](rand((129 * 127 + 1,), dt, lo, hi))
    out = nan_out(cp, a.shape, dt)
    ck.make_unary(op, a, out)()
    assert rel_err(out.get(), OPS[op].reference([f64(a)], {})) < TOL[dt]


def test_sigmoid_extremes(cp: Any) -> None:
    x = cp.asarray(np.array([-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4], np.float32))
    out = nan_out(cp, x.shape, np.float32)
    ck.make_unary("sigmoid", x, out)()
    got = out.get()
    assert np.all(np.isfinite(got)) and got[0] == 0.0 and got[-1] == 1.0 and got[3] == 0.5


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("layout", list(UNARY_LAYOUTS))
def test_step_is_exact_at_nan_infinities_zeros_and_subnormals(
    cp: Any, dt: Any, layout: str
) -> None:
    """0 for NaN, -inf, +-0 and negative values, 1 for every positive value down to the smallest
    subnormal (elementwise.cu is built without -ftz), in every lane of a vector load."""
    info = np.finfo(dt)
    tiny = info.smallest_subnormal
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, info.tiny, info.max, -info.max, 1.0]
    a = UNARY_LAYOUTS[layout](cp.asarray(np.resize(np.array(edges, dt), 129 * 127 + 1)))
    out = nan_out(cp, a.shape, dt)
    ck.make_unary("step", a, out)()
    np.testing.assert_array_equal(out.get(), (a.get() > 0).astype(dt))


@pytest.mark.parametrize("dt", DTYPES)
def test_sigmoid_keeps_its_relative_accuracy_in_both_tails(cp: Any, dt: Any) -> None:
    """Every x in [-88, 88] (and -17, -20, -80, 20) within 8 ulps of the long-double value
    wherever that value is a normal number."""
    x = np.concatenate([np.linspace(-88.0, 88.0, 4001), [-17.0, -20.0, -80.0, 20.0]]).astype(dt)
    out = nan_out(cp, x.shape, dt)
    ck.make_unary("sigmoid", cp.asarray(x), out)()
    want = 1.0 / (1.0 + np.exp(-x.astype(np.longdouble)))
    err = np.abs(out.get().astype(np.longdouble) - want)
    info = np.finfo(dt)
    # Below the smallest normal number the GPU's exp may flush to zero (an absolute error
    # under info.tiny); above it, every value keeps its relative accuracy.
    bad = err > 8 * float(info.eps) * want + float(info.tiny)
    assert not np.any(bad), list(zip(x[bad][:5], out.get()[bad][:5], want[bad][:5]))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.T,
        lambda x: x.reshape(10, 12, 21).transpose(2, 0, 1),
        lambda x: x[3:50:2, ::-3],
        lambda x: x,
    ],
    ids=["x.T", "permuted", "slice", "contig"],
)
def test_copy(cp: Any, rand: Any, dt: Any, view: Any) -> None:
    a = view(rand((120, 21), dt))
    out = nan_out(cp, a.shape, dt)
    ck.make_copy(a, out)()
    np.testing.assert_array_equal(out.get(), a.get())


# ------------------------------------------------------------------------------- reductions

REDUCE_SPECS = [
    ((1,), None),
    ((3,), None),
    ((1000,), None),
    (((1 << 20) + 3,), None),
    ((127, 129), None),
    ((127, 129), 0),
    ((127, 129), 1),
    ((127, 129), -1),
    ((4, 33, 65), 0),
    ((4, 33, 65), 1),
    ((4, 33, 65), 2),
    ((3, 5000), 1),
    ((5000, 3), 0),
    ((1024, 1024), 0),  # reduce_cols in chunks of rows, folded: a bias's gradient
    ((2000, 10), 0),
    ((3, 700, 45), 1),
]
NP_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ck.REDUCE_OPS)
@pytest.mark.parametrize("spec", REDUCE_SPECS, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_reduce(
    cp: Any, rand: Any, op: str, dt: Any, spec: tuple, keepdims: bool, layout: str
) -> None:
    shape, axis = spec
    x = rand(shape, dt, -1.0, 3.0)
    if layout == "transposed":
        if len(shape) < 2:
            pytest.skip("1-d input has no transposed layout")
        x = cp.ascontiguousarray(x.T).T  # F-order: the kernel goes through its scratch copy
    ref = NP_REDUCE[op](f64(x), axis=axis, keepdims=keepdims)
    out = nan_out(cp, np.shape(ref), dt)
    ck.make_reduce(op, x, out, axis, keepdims)()
    assert rel_err(out.get(), ref) < TOL[dt]


# Longer than float32 can count: a float32 accumulator stops at 2^24 when adding ones.
LONG = 1 << 25
# Random values: float32 keeps only the result's rounding (accumulators are double); float64
# accumulates serially per thread, rounding growing with sqrt(2^25).
TOL_LONG = {np.float32: 1e-6, np.float64: 1e-10}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize(
    "shape,axis,layout",
    [
        ((LONG, 2), 0, "contig"),  # reduce_cols: chunks of rows, folded in float64
        ((2, LONG), 1, "contig"),  # reduce_rows_block
        ((2, LONG), 1, "transposed"),  # through the scratch copy
        ((LONG, 2), None, "contig"),  # reduce_all, two stages
        ((LONG + 3,), None, "misaligned"),  # reduce_all without vectors
    ],
    ids=str,
)
def test_reduce_past_float32_counting(
    cp: Any, op: str, dt: Any, shape: tuple, axis: Any, layout: str
) -> None:
    """Ones (exact answer) and random values (float64 reference on the device) over 2^25 terms
    per output: no accumulator may be a serial float32 one."""
    if layout == "transposed":
        x = cp.ones(shape[::-1], dt).T
    elif layout == "misaligned":
        x = cp.ones(shape[0] + 1, dt)[1:]
    else:
        x = cp.ones(shape, dt)
    count = x.size if axis is None else x.shape[axis]
    out_shape = () if axis is None else tuple(d for i, d in enumerate(x.shape) if i != axis)
    out = nan_out(cp, out_shape, dt)
    run = ck.make_reduce(op, x, out, axis, False)
    run()
    np.testing.assert_allclose(out.get(), 1.0 if op == "mean" else float(count), rtol=1e-6)
    x[...] = cp.random.random_sample(x.shape, dtype=dt)  # same arrays: run() sees new values
    ref = getattr(cp, op)(x.astype(np.float64), axis=axis)
    run()
    assert rel_err(out.get(), ref.get()) < TOL_LONG[dt]


@pytest.mark.parametrize("shape,axis", [(((1 << 22) + 5,), None), ((4099, 515), 0)], ids=str)
def test_reduce_is_deterministic(cp: Any, rand: Any, shape: tuple, axis: Any) -> None:
    x = rand(shape, np.float32)
    outs = []
    for _ in range(3):
        out = nan_out(cp, x.shape[1:] if axis == 0 else (), np.float32)
        ck.make_reduce("sum", x, out, axis, False)()
        outs.append(out.get())
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ck.REDUCE_OPS)
@pytest.mark.parametrize(
    "shape,axis", [((0,), None), ((0, 3), None), ((0, 3), 0), ((3, 0), 1), ((0, 3), 1)], ids=str
)
def test_reduce_over_nothing(cp: Any, op: str, dt: Any, shape: tuple, axis: Any) -> None:
    """sum 0 and mean NaN over nothing (numpy's values); an empty output stays empty."""
    count = 0 if axis is None else shape[axis]
    if op == "max" and count == 0:
        pytest.skip("max over nothing is refused when the node is defined")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = NP_REDUCE[op](np.zeros(shape), axis=axis)
    out = cp.full(np.shape(ref), 7.0, dtype=dt)  # 7: neither answer
    ck.make_reduce(op, cp.zeros(shape, dt), out, axis, False)()
    np.testing.assert_array_equal(out.get(), ref)


def test_max_propagates_nan(cp: Any, rand: Any) -> None:
    x = rand((10007,), np.float32)
    x[5000] = np.nan
    out = cp.zeros((), np.float32)
    ck.make_reduce("max", x, out, None, False)()
    assert np.isnan(out.get())


# ------------------------------------------------------------------------------- softmax

# Shapes and axes that take each of make_softmax's paths on an H100 or H200 (132 SMs):
# warp rows (many short rows), block rows (rows of 2048 or more, or few rows), columns (a
# non-last axis with many columns), and the composed launches (one very long row; few columns).
# Rows of up to 1,024 (warp) or 8,192 (block) elements are held in registers (8 or 32 a lane,
# 16 or 32 a thread); longer ones take the online kernels, which read each row twice.  float32
# block rows of 2,048 to 4,096 elements, a multiple of 4, take the float4 kernel instead
# (float64 ones keep the held kernel).
SOFTMAX_CASES = {
    "warp rows": ((1000, 37), -1),
    "warp rows 1": ((700, 1), 1),
    "warp rows held 32": ((1000, 1001), -1),
    "warp rows online": ((600, 1500), -1),
    "block rows": ((300, 5003), -1),
    "block rows held 16": ((140, 4094), -1),
    "block rows vec4": ((140, 4096), -1),
    "block rows vec4 2048": ((700, 2048), -1),
    "few rows vec4": ((3, 3000), -1),
    "block rows online": ((133, 9001), -1),
    "few rows": ((3, 1000), 1),
    "one long row": ((70001,), None),
    "columns": ((3, 50, 6001), 1),
    "columns axis 0": ((129, 20000), 0),
    "few columns": ((41, 7), 0),
    "3-d last axis": ((5, 130, 33), 2),
}


def _softmax_ref(x: np.ndarray, axis: Any, log: bool) -> np.ndarray:
    return OPS["log_softmax" if log else "softmax"].reference([x], {"axis": axis})


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("case", SOFTMAX_CASES)
@pytest.mark.parametrize("view", ["contiguous", "transposed"])
def test_softmax(cp: Any, rand: Any, log: bool, dt: Any, case: str, view: str) -> None:
    shape, axis = SOFTMAX_CASES[case]
    x = rand(shape, dt, -30.0, 30.0)
    if view == "transposed":  # the same logical array, strided: read through a copy
        x = cp.ascontiguousarray(x.T).T
    out = nan_out(cp, shape, dt)
    ck.make_softmax(x, out, axis, log)()
    ref = _softmax_ref(f64(x), axis, log)
    assert rel_err(out.get(), ref) < (1e-5 if dt == np.float32 else 1e-12), case


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize(
    "shape",
    [(600, 40), (600, 1500), (40, 3002), (40, 3000), (140, 9000), (40, 9000)],
    # the last, a few rows too long for one block each, takes the composed launches
    ids=["warp held", "warp online", "block held", "block vec4", "block online", "composed"],
)
def test_softmax_special_values_as_numpy(cp: Any, log: bool, shape: tuple) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape) * 5
    x[1, 3] = np.nan  # a NaN row
    x[2, :] = -np.inf  # a row of -inf: NaN (-inf - -inf)
    x[3, ::2] = -np.inf  # -inf among finite values: 0 (log: -inf)
    x[4, 7] = np.inf  # +inf: NaN (inf - inf)
    x[5, :] = 1e4  # equal large logits
    x[6, 0] = -np.inf  # -inf first, while the running maximum is still -inf
    for dt in DTYPES:
        xd = cp.asarray(x.astype(dt))
        out = nan_out(cp, shape, dt)
        ck.make_softmax(xd, out, -1, log)()
        with np.errstate(invalid="ignore", over="ignore"):
            want = _softmax_ref(x.astype(dt).astype(np.float64), -1, log)
        got = out.get().astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        fine = np.isfinite(want)
        np.testing.assert_allclose(got[fine], want[fine], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_rows_off_a_16_byte_boundary_keep_the_scalar_kernel(cp: Any, log: bool) -> None:
    # a contiguous view one float in: the float4 kernel would read misaligned vectors
    shape = (50, 4096)
    flat = cp.asarray(np.random.default_rng(3).standard_normal(1 + 50 * 4096) * 8, np.float32)
    x = flat[1:].reshape(shape)
    assert x.flags.c_contiguous and x.data.ptr % 16 == 4
    for out in (nan_out(cp, shape, np.float32), cp.full(1 + 50 * 4096, np.nan, np.float32)[1:]):
        out = out.reshape(shape)
        ck.make_softmax(x, out, -1, log)()
        assert rel_err(out.get(), _softmax_ref(f64(x), -1, log)) < 1e-5


@pytest.mark.parametrize("shape", [(37, 4096), (3, 1000), (140, 2052)], ids=str)
def test_softmax_tuning_variants_are_right(cp: Any, rand: Any, shape: tuple) -> None:
    """softmax.cu's SC_TUNING build (extra/softmax_variants.py times it): every variant that
    takes the shape, on a poisoned output, against numpy's float64 softmax."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "extra"))
    try:
        import softmax_variants as sv
    finally:
        sys.path.pop(0)
    x = rand(shape, np.float32, -30.0, 30.0)
    ref = _softmax_ref(f64(x), -1, False)
    ran = 0
    for entry, threads, longest, whole in sv.VARIANTS.values():
        if shape[1] > longest or (whole and shape[1] % 4):
            continue
        launch, out = sv._variant(ck, x, entry, threads)
        out.fill(np.nan)
        launch()
        assert rel_err(out.get(), ref) < 1e-5, entry
        ran += 1
    assert ran >= 3


# ------------------------------------------------------------------------------- matmul


def mm_cases(r: Any, dt: Any) -> dict[str, tuple[Any, Any]]:
    def d(*s: int) -> Any:
        return r(s, dt)

    cases = {f"{m}x{k}x{n}": (d(m, k), d(k, n)) for m, k, n in [
        (1, 1, 1), (3, 5, 7), (127, 129, 131), (129, 127, 1000), (1000, 3, 129),
        (256, 256, 256), (128, 2000, 64),
    ]}  # fmt: skip
    cases.update(
        {
            "a.T (m-vec)": (d(132, 100).T, d(132, 260)),
            "a.T odd": (d(129, 127).T, d(129, 131)),
            "b.T (k-vec)": (d(100, 132), d(260, 132).T),
            "b.T odd": (d(127, 129), d(131, 129).T),
            "a.T b.T": (d(132, 100).T, d(260, 132).T),
            "a strided": (d(200, 129)[::2, 1:], d(128, 96)),
            "b strided": (d(64, 128), d(128, 300)[:, ::3]),
            "misaligned a": (d(64 * 128 + 1)[1:].reshape(64, 128), d(128, 64)),
            "batched": (d(4, 65, 33), d(4, 33, 129)),
            "batch bcast a": (d(1, 65, 36), d(3, 36, 129)),
            "2d @ 3d": (d(65, 36), d(3, 36, 129)),
            "3d @ 2d": (d(3, 65, 36), d(36, 129)),
            "batched a.T": (d(2, 64, 65).transpose(0, 2, 1), d(2, 64, 40)),
            # Row-major a and b with k and n multiples of 4 (layout kn, which the kn-only
            # configurations need) and m, k, n off the 128 x 16 x 128 tile grid.
            "kn 1x4x4": (d(1, 4), d(4, 4)),
            "kn 129x36x260": (d(129, 36), d(36, 260)),
            "kn 1000x1028x132": (d(1000, 1028), d(1028, 132)),
            "kn batched": (d(2, 131, 20), d(2, 20, 140)),
        }
    )
    return cases


MM_CASE_NAMES = list(mm_cases(lambda s, dt: np.empty(s, dt), np.float32))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(
    "variant",
    ["naive", "tiled", "tiled_big", "tiled_u1", "tiled_u2"]
    + ["tiled_sw", "tiled_pf", "tiled_pfsw", "tiled_pfkt", "tiled_pf8"],
)
@pytest.mark.parametrize("case", MM_CASE_NAMES)
def test_matmul(cp: Any, rand: Any, variant: str, dt: Any, case: str) -> None:
    a, b = mm_cases(rand, dt)[case]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = nan_out(cp, shape, dt)
    if variant == "naive":
        ck.make_matmul("naive", a, b, out)()
    elif variant == "tiled":
        ck.make_matmul("tiled", a, b, out)()
    else:  # force a 128x128 configuration (small cases pick 64x64 tiles on their own)
        try:
            run = ck.make_matmul("tiled", a, b, out, _cfg="_" + variant.split("_")[1])
        except ValueError:
            pytest.skip("configuration has no entry point for this layout")
        run()
    assert rel_err(out.get(), np.matmul(f64(a), f64(b))) < TOL_MM[dt]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("variant", ["naive", "tiled"])
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((0, 2, 3), (3, 4)),  # empty out: no launch (a zero grid dimension is invalid)
        ((0, 3), (3, 4)),
        ((2, 3), (3, 0)),
        ((0, 0), (0, 0)),
        ((2, 0), (0, 3)),  # k = 0: a launch whose sums are all zero
        ((2, 2, 0), (0, 3)),
        ((129, 0), (0, 131)),
    ],
    ids=str,
)
def test_matmul_with_empty_dimensions(
    cp: Any, variant: str, dt: Any, a_shape: tuple, b_shape: tuple
) -> None:
    want = np.matmul(np.zeros(a_shape), np.zeros(b_shape))
    out = nan_out(cp, want.shape, dt)
    ck.make_matmul(variant, cp.ones(a_shape, dt), cp.ones(b_shape, dt), out)()
    np.testing.assert_array_equal(out.get(), want)


def test_matmul_large_tiled(cp: Any, rand: Any) -> None:
    n = 8192
    a, b = rand((n, n), np.float32), rand((n, n), np.float32)
    out = nan_out(cp, (n, n), np.float32)
    ck.make_matmul("tiled", a, b, out)()
    ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
    err = float(cp.linalg.norm(out.astype(np.float64) - ref) / cp.linalg.norm(ref))
    assert err < 1e-4


# ------------------------------------------------------------------------------- availability


def test_available_never_raises() -> None:
    ok, why = cuda_available()
    assert isinstance(ok, bool) and (why == "") == ok
