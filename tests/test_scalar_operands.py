"""Constants as kernel arguments: a binary op's operand handed to ``make_kernel`` as a number.

A plan passes a constant (``x * 2.0``, ``2.0 - x``) to the backend as a numpy scalar of the
output's dtype, in place of that operand's array, in either position.  Every backend computes
with that number into the ``out`` it was given: checked here against a float64 numpy reference
on odd sizes, empty, transposed and sliced operands and numbers near both ends of the dtype's
range, ``out`` poisoned with NaN first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from softcuda import backends
from softcuda.backends import CPU_BACKENDS, cpu_threads
from softcuda.ops import ops_of

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


def pieces(kernel: Any) -> list:
    """The per-piece kernels of a cpu_threads elementwise kernel that was cut (``pool.share``
    over prebound cpu_fallback calls)."""
    assert kernel.func.__name__ == "share", "the op was not cut into pieces"
    assert isinstance(kernel.func.__self__, cpu_threads.Workers)
    return kernel.args[0]


@pytest.mark.parametrize("layout", ["37x129", "transposed", "sliced"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
def test_cpu_threads_gives_every_piece_the_number_itself(
    monkeypatch, op, position, dt, threads, layout
):
    """Chunks of a few bytes, so that odd small shapes are cut as large ones are."""
    monkeypatch.setattr(cpu_threads, "MIN_CHUNK_BYTES", 16)
    shape, view = LAYOUTS[layout]
    x, s = view(draw(shape, dt)), number("negative", dt)
    out = poisoned(x.shape, dt)
    kernel = cpu_threads.make_kernel(op, {}, operands(x, s, position), out, threads=threads)
    cut = pieces(kernel)
    assert len(cut) >= threads
    slot = 0 if position == "a" else 1
    assert all(piece.args[slot] is s for piece in cut)  # no view, no array: the number
    kernel()
    check(out, reference(op, x, s, position), dt)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("op", OPS)
def test_cpu_threads_large_op_with_a_number(op, position, dt, layout):
    """Large enough, at the module's own thresholds, for several pieces on three threads."""
    rows = 1237
    itemsize = np.dtype(dt).itemsize
    # the array read and out written: at least three pieces' worth of bytes
    cols = -(-3 * cpu_threads.PIECE_BYTES // (2 * itemsize * rows)) | 1
    x = draw((rows, cols), dt, seed=7) if layout == "contiguous" else draw((cols, rows), dt).T
    s = number("huge" if op in ("add", "sub") else "tiny", dt)
    out = poisoned(x.shape, dt)
    kernel = cpu_threads.make_kernel(op, {}, operands(x, s, position), out, threads=3)
    cut = pieces(kernel)
    assert len(cut) >= 3
    slot = 0 if position == "a" else 1
    assert all(piece.args[slot] is s for piece in cut)
    kernel()
    check(out, reference(op, x, s, position), dt)
