"""Constants as kernel arguments: a binary op's operand handed to ``make_kernel`` as a number.

A plan passes a constant (``x * 2.0``, ``2.0 - x``) to the backend as a numpy scalar of the
output's dtype, in place of that operand's array, in either position.  Every backend computes
with that number into the ``out`` it was given: checked here against a float64 numpy reference
on odd sizes, empty, transposed and sliced operands and numbers near both ends of the dtype's
range, ``out`` poisoned with NaN first.  The CPU backends run here; the CUDA cases carry the
``cuda`` marker and skip, with the reason, where no GPU is usable.  Between the two, the CUDA
kernel choice is checked without a GPU: the entry point make_binary names must be one that
elementwise.cu defines, and the number must be the launch's argument itself.
"""

from __future__ import annotations

import gc
import re
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from softcuda import backends
from softcuda.backends import CPU_BACKENDS, cpu_threads
from softcuda.backends import cuda_kernels as ck
from softcuda.check import tolerance
from softcuda.ops import ops_of
from tests.native_helpers import require_native

OPS = ops_of("binary")
NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
DTYPES = [np.float32, np.float64]
POSITIONS = ["a", "b"]  # where the number goes: "a" is 2.0 - x, "b" is x - 2.0


def number(kind: str, dt: Any) -> np.generic:
    """What the plan passes: ``out.dtype.type(value)``.  tiny and huge keep every result here
    a normal number (array values have magnitudes in [0.5, 2)): x / tiny and huge * x stay
    below the dtype's maximum, tiny / x above its smallest normal."""
    info = np.finfo(dt)
    value = {
        "ordinary": 0.7,
        "negative": -3.0,
        "tiny": float(info.tiny) * 1e8,
        "huge": float(info.max) / 1e8,
    }[kind]
    return dt(value)


NUMBERS = ["ordinary", "negative", "tiny", "huge"]

# The array operand: (shape to draw, view of it); out has the view's shape.
LAYOUTS = {
    "n=1": ((1,), lambda x: x),
    "n=7": ((7,), lambda x: x),
    "37x129": ((37, 129), lambda x: x),
    "transposed": ((129, 37), lambda x: x.T),
    "sliced": ((64, 90), lambda x: x[::3, 1::2]),
    "0-d": ((), lambda x: x),
    "empty": ((0, 5), lambda x: x),
}


def draw(shape: tuple[int, ...], dt: Any, seed: int = 0) -> np.ndarray:
    """Magnitudes in [0.5, 2) with random signs: never near zero, so every quotient is finite."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return np.asarray(x, dtype=dt)  # an array even for shape (), where numpy gives a scalar


def operands(x: Any, s: np.generic, position: str) -> list:
    return [s, x] if position == "a" else [x, s]


def reference(op: str, x: np.ndarray, s: np.generic, position: str) -> np.ndarray:
    ins = [np.asarray(v, dtype=np.float64) for v in operands(x, s, position)]
    return NP[op](*ins)


def check(out: np.ndarray, ref: np.ndarray, dt: Any) -> None:
    """One rounding of the exact result: within an ulp of the float64 reference, no NaN."""
    assert out.dtype == dt and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=float(np.finfo(dt).eps), atol=0)


def poisoned(shape: tuple[int, ...], dt: Any) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dt)


# ------------------------------------------------------------------------------- CPU backends


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", NUMBERS)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cpu_number_operand(backend, op, position, dt, kind, layout):
    shape, view = LAYOUTS[layout]
    x, s = view(draw(shape, dt)), number(kind, dt)
    out = poisoned(x.shape, dt)
    kernel = backends.get(backend).make_kernel(op, {}, operands(x, s, position), out)
    kernel()
    check(out, reference(op, x, s, position), dt)
    # bit for bit numpy's own result for the two operands as given (the number not widened)
    np.testing.assert_array_equal(out, NP[op](*operands(x, s, position)))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cpu_one_element_array_operand_still_works(backend, op, position, dt):
    """The array a constant was before: accepted as ever, and the same result as the number."""
    x, s = draw((129, 37), dt).T, number("ordinary", dt)
    by_number, by_array = poisoned(x.shape, dt), poisoned(x.shape, dt)
    make = backends.get(backend).make_kernel
    make(op, {}, operands(x, s, position), by_number)()
    make(op, {}, operands(x, np.full((1, 1), s, dt), position), by_array)()
    np.testing.assert_array_equal(by_array, by_number)
    check(by_array, reference(op, x, s, position), dt)


def native_call(kernel: Any, op: str, dt: Any) -> tuple[str, tuple]:
    """The native entry point a cpu_threads binary kernel calls, and its bound arguments:
    ``sc_<op>_<f32|f64>`` (both operands dense, or one a number) or its ``_rows`` form
    (broadcast or strided operands); never cpu_fallback's kernel in its place."""
    require_native()
    assert getattr(kernel, "runs_as", None) is None, kernel.runs_as
    sfx = "f32" if dt == np.float32 else "f64"
    name = kernel.func.__name__
    assert name in (f"sc_{op}_{sfx}", f"sc_{op}_{sfx}_rows"), name
    return name, tuple(arg.value for arg in kernel.args)  # bound as ctypes objects


def check_the_number_is_passed_itself(
    kernel: Any, op: str, dt: Any, s: np.generic, position: str, threads: int
) -> None:
    """Dense operand: the flat entry point with the number as its double argument, in the
    mode of its position (1: the second operand, 2: the first) and no pointer for it.  Strided
    operand: the rows entry point, the number a 0-d value broadcast with every stride 0."""
    name, args = native_call(kernel, op, dt)
    assert args[-1] == threads
    slot = 0 if position == "a" else 1
    if not name.endswith("_rows"):
        # (a, b, out, n, s, mode, most)
        assert args[slot] is None and args[1 - slot] is not None
        assert args[5] == (2 if position == "a" else 1)
        assert args[4] == float(s) and dt(args[4]) == s  # the number, not widened or rounded
        return
    # rows: (a, b, out, ndim, shape, strides a, strides b, most); arrays = (a, b, out, dims, sa, sb)
    views = kernel.arrays
    number, given = views[slot], views[4 + slot]
    ndim = args[3]
    assert list(given[:ndim]) == [0] * ndim  # broadcast: every element is the one number
    assert number.dtype == dt and np.all(number == s)


@pytest.mark.parametrize("layout", ["37x129", "transposed", "sliced"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
def test_cpu_threads_gives_every_thread_the_number_itself(
    op, position, dt, threads, layout, tiny_grain
):
    """A grain of one element, so that odd small shapes are spread over every thread as
    large ones are."""
    shape, view = LAYOUTS[layout]
    x, s = view(draw(shape, dt)), number("negative", dt)
    out = poisoned(x.shape, dt)
    kernel = cpu_threads.make_kernel(op, {}, operands(x, s, position), out, threads=threads)
    check_the_number_is_passed_itself(kernel, op, dt, s, position, threads)
    kernel()
    check(out, reference(op, x, s, position), dt)
    np.testing.assert_array_equal(out, NP[op](*operands(x, s, position)))


@pytest.fixture(scope="module")
def large() -> dict:
    """A few million elements (1237 x 2427), drawn once per dtype and layout."""
    rows, cols = 1237, 2427
    return {
        (dt, layout): draw((rows, cols), dt, seed=7)
        if layout == "contiguous"
        else draw((cols, rows), dt, seed=8).T
        for dt in DTYPES
        for layout in ("contiguous", "transposed")
    }


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
def test_cpu_threads_large_op_with_a_number(large, op, position, dt, layout):
    """Millions of elements at the kernels' own grain: every one of three threads has work."""
    x = large[(dt, layout)]
    assert x.size > 3 * 32768 * 10
    s = number("huge" if op in ("add", "sub") else "tiny", dt)
    out = poisoned(x.shape, dt)
    kernel = cpu_threads.make_kernel(op, {}, operands(x, s, position), out, threads=3)
    check_the_number_is_passed_itself(kernel, op, dt, s, position, 3)
    kernel()
    check(out, reference(op, x, s, position), dt)
    np.testing.assert_array_equal(out, NP[op](*operands(x, s, position)))


# ------------------------------------------------------------------------------- CUDA, no GPU


def source() -> str:
    return (ck._KERNEL_DIR / "elementwise.cu").read_text(encoding="utf-8")


def entry_points() -> set[str]:
    """The binary entry points elementwise.cu defines, its macros expanded by hand: every mode
    SC_BINARY lists, for every op SC_ALL_FOR lists and every type it is instantiated for."""
    text = source()
    binary = re.search(r"#define SC_BINARY\(.*?\n\n", text, re.S).group(0)
    modes = re.findall(r"SC_BIN_\w+\(NAME, OP, T, SUF, (\w+),", binary)
    if "binary_##NAME##_strided_##SUF(" in binary:
        modes.append("strided")
    every = re.search(r"#define SC_ALL_FOR\(.*?\n\n", text, re.S).group(0)
    ops = re.findall(r"SC_BINARY\((\w+),", every)
    sufs = re.findall(r"^SC_ALL_FOR\(\w+, (\w+)\)", text, re.M)
    return {f"binary_{op}_{m}_{suf}" for op in ops for m in modes for suf in sufs}


def number_slot(position: str) -> int:
    """Where the value kernels of that position take the number (``T s``) among their
    parameters."""
    define = re.search(rf"#define SC_BIN_VALUE_{position.upper()}\(.*?\n\n", source(), re.S)
    params = re.search(r"void binary_##NAME##_##MODE##_##SUF\((.*?)\)", define.group(0), re.S)
    return [p.replace("\\", "").strip() for p in params.group(1).split(",")].index("T s")


class DeviceLike:
    """What make_binary reads of a CuPy array, over a numpy array whose address is its
    pointer: the choice of entry point, without a GPU."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        for name in ("shape", "dtype", "size", "flags", "strides", "itemsize", "ndim"):
            setattr(self, name, getattr(array, name))
        self.data = SimpleNamespace(ptr=array.ctypes.data)


@pytest.fixture
def launches(monkeypatch):
    """make_binary's kernels by name, with no CuPy: the names asked for, in order."""
    names: list[str] = []
    monkeypatch.setattr(ck, "_kernel", lambda build, name: names.append(name) or name)
    monkeypatch.setattr(ck, "_sm_count", lambda: 132)
    fake = SimpleNamespace(
        full=lambda shape, value, dtype: DeviceLike(np.full(shape, value, dtype)),
        asarray=np.asarray,
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return names


def aligned(shape: tuple[int, ...], dt: Any, misalign: bool = False) -> np.ndarray:
    """A C-contiguous array at a 16-byte boundary, or one element past it."""
    n = int(np.prod(shape))
    raw = np.empty(n + 64, dt)
    start = -(raw.ctypes.data % 16) % 16 // raw.itemsize + (1 if misalign else 0)
    return raw[start : start + n].reshape(shape)


@pytest.mark.parametrize("misalign", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", [*OPS, "pow"])
def test_cuda_number_goes_to_a_value_kernel_that_exists(launches, op, position, dt, misalign):
    x, out = aligned((1001,), dt, misalign), aligned((1001,), dt)
    s = number("ordinary", dt)
    run = ck.make_binary(op, *operands(DeviceLike(x), s, position), DeviceLike(out))
    suf = "f32" if dt == np.float32 else "f64"
    want = f"binary_{op}_value_{position}{'' if misalign else '_vec'}_{suf}"
    assert launches == [want] and want in entry_points()
    args = run.keepalive
    assert len(args) == 4 and args[number_slot(position)] is s
    assert args[3] == 1001 and isinstance(args[3], np.int64)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_cuda_number_with_a_strided_operand_is_a_device_element_made_once(
    launches, position, layout
):
    shape, view = LAYOUTS[layout]
    x, s = view(draw(shape, np.float32)), number("negative", np.float32)
    out = DeviceLike(np.empty(x.shape, np.float32))
    run = ck.make_binary("sub", *operands(DeviceLike(x), s, position), out)
    assert launches == ["binary_sub_strided_f32"] and launches[0] in entry_points()
    element = run.keepalive[0 if position == "a" else 1]
    assert isinstance(element, DeviceLike) and element.shape == () and element.array == s


def test_cuda_power_passes_its_exponent_by_value(launches):
    x, out = aligned((1000,), np.float32), aligned((1000,), np.float32)
    run = ck.make_power(DeviceLike(x), 1.5, DeviceLike(out))
    assert launches == ["binary_pow_value_b_vec_f32"] and launches[0] in entry_points()
    exponent = run.keepalive[1]
    assert type(exponent) is np.float32 and exponent == 1.5


def test_cuda_two_numbers_are_refused():
    s = np.float32(2.0)
    with pytest.raises(ValueError, match="at most one operand may be a number"):
        ck.make_binary("add", s, s, np.empty((), np.float32))


# ------------------------------------------------------------------------------- CUDA, on a GPU


CUDA_LAYOUTS = {
    **LAYOUTS,
    "1001 (vectors)": ((1001,), lambda x: x),
    "misaligned": ((1002,), lambda x: x[1:]),
}


@pytest.mark.cuda
@pytest.mark.parametrize("layout", list(CUDA_LAYOUTS))
@pytest.mark.parametrize("kind", NUMBERS)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
def test_cuda_number_operand(cp, op, position, dt, kind, layout):
    shape, view = CUDA_LAYOUTS[layout]
    host, s = draw(shape, dt), number(kind, dt)
    x = view(cp.asarray(host))
    out = cp.full(x.shape, np.nan, dtype=dt)
    kernel = backends.get("cuda_elementwise").make_kernel(op, {}, operands(x, s, position), out)
    kernel()
    check(out.get(), reference(op, view(host), s, position), dt)


@pytest.mark.cuda
@pytest.mark.parametrize("position", POSITIONS)
def test_cuda_number_allocates_nothing_on_the_device(cp, position):
    """The value path holds no device copy of the number: building and running the kernel
    leaves CuPy's pool as it was, and the launch's argument is the number itself."""
    x = cp.asarray(draw((4099,), np.float32))
    out = cp.full(x.shape, np.nan, dtype=np.float32)
    s = np.float32(0.25)
    cp.cuda.Device().synchronize()
    gc.collect()  # no earlier test's garbage freed inside the window
    pool = cp.get_default_memory_pool()
    before = pool.used_bytes()
    run = backends.get("cuda_elementwise").make_kernel("mul", {}, operands(x, s, position), out)
    run()
    run()
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() == before
    assert run.keepalive[0 if position == "a" else 1] is s
    check(out.get(), reference("mul", x.get(), s, position), np.float32)


@pytest.mark.cuda
def test_cuda_number_with_a_strided_operand_is_uploaded_once_not_per_run(cp):
    x = cp.asarray(draw((129, 37), np.float64)).T
    out = cp.full(x.shape, np.nan, dtype=np.float64)
    s = np.float64(-3.0)
    gc.collect()
    pool = cp.get_default_memory_pool()
    run = backends.get("cuda_elementwise").make_kernel("div", {}, [s, x], out)
    built = pool.used_bytes()
    run()
    run()
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() == built
    check(out.get(), reference("div", x.get(), s, "a"), np.float64)


@pytest.mark.cuda
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("layout", ["1001 (vectors)", "misaligned", "transposed"])
def test_cuda_power_by_value(cp, dt, layout):
    shape, view = CUDA_LAYOUTS[layout]
    host = np.abs(draw(shape, dt))
    x = view(cp.asarray(host))
    out = cp.full(x.shape, np.nan, dtype=dt)
    backends.get("cuda_elementwise").make_kernel("pow", {"exponent": 1.5}, [x], out)()
    want = np.power(view(host).astype(np.float64), 1.5)
    np.testing.assert_allclose(out.get(), want, rtol=tolerance("pow", dt))
