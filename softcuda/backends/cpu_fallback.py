"""cpu_fallback: the reference backend — numpy ufunc loops, single-threaded, no BLAS anywhere.

Matmul is ``numpy.einsum`` with ``optimize=False``: its own sum-of-products loops, never BLAS.
Every kernel writes into the ``out`` array the plan planned for it; nothing is allocated at run
time (a blocked sum's partial sums are allocated once, with its kernel).  cpu_blas reuses these
kernels and replaces only matmul.

Sums and means: numpy adds pairwise (error growing with log n) only along the axis that is
adjacent in memory; along any other axis every output adds one term at a time, and a float32
sum of ones stops growing at 2**24.  Such sums run in blocks of ``SUM_BLOCK`` terms whose
partial sums are added in float64, so a float32 result errs by at most a block's serial
rounding, at any length.  Adding everything in float64 instead would slow the common contiguous
sums several-fold (numpy converts in buffers); the blocks leave the work to numpy's own loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..ops import OPS, ops_of

Kernel = Callable[[], Any]

# Each unary and binary op's CPU expression, read off the registry (ops.OpDef.cpu): the numpy
# function its kernel calls, as cpu(x, out) or cpu(x, y, out).
_BINARY: dict[str, Any] = {name: OPS[name].cpu for name in ops_of("binary")}
_UNARY: dict[str, Any] = {name: OPS[name].cpu for name in ops_of("unary")}
SUM_BLOCK = 256  # terms a strided sum adds serially before its partial goes to float64

SHORT_AXIS = {"max": 20, "sum": 16, "mean": 16}
"""The longest memory-adjacent axis a reduction moves outermost (``_moved``): the copy pays
for itself several times over at ten terms; a sum, which numpy's own loop does faster than a
max, stops gaining from about 20, a max from about 32."""
SHORT_AXIS_OUTPUTS = 32
"""...and the fewest outputs: below, numpy's own loop costs about as little."""
MOVED_MAX_BYTES = 16 << 20
"""The largest input ``_moved`` copies: its scratch copy is made at compile time, outside the
plan's arenas, and beyond a few MiB the copy's own memory traffic eats the gain."""
SHORT_ROWS = 16
"""The longest rows after a long reduced axis that move it innermost (``_along_short_rows``):
at 32 the transposing copy costs more than numpy's row-at-a-time loop."""
LONG_AXIS = 128
"""...and the shortest such axis worth the copy."""


def make_elementwise(op: str, attrs: dict, inputs: list, out: np.ndarray) -> Kernel:
    # ``out`` goes positionally: a partial without keywords calls measurably faster, and the
    # executor's per-node overhead is what tiny graphs pay.
    if scaled_softmax(op, attrs):
        return with_scaled_input(make_elementwise, op, attrs, inputs, out)
    if op in _BINARY:
        return partial(_BINARY[op], inputs[0], inputs[1], out)
    if op in _UNARY:
        return partial(_UNARY[op], inputs[0], out)
    if op == "pow":
        return partial(np.power, inputs[0], out.dtype.type(attrs["exponent"]), out)
    if op in ("softmax", "log_softmax"):
        return _make_softmax(inputs[0], attrs["axis"], out, op == "log_softmax")
    if op in ("max", "sum", "mean") and out.flags.c_contiguous:
        if _short_adjacent(inputs[0], attrs["axis"], op):
            return _moved(op, inputs[0], attrs["axis"], out, 0)
        if _along_short_rows(inputs[0], attrs["axis"]):
            return _moved(op, inputs[0], attrs["axis"], out, -1)
    if op == "max":
        return partial(np.max, inputs[0], axis=attrs["axis"], keepdims=attrs["keepdims"], out=out)
    if op in ("sum", "mean"):
        return _make_sum(op, inputs[0], attrs["axis"], attrs["keepdims"], out)
    raise KeyError(op)


def _short_adjacent(a: np.ndarray, axis: int | None, op: str = "max") -> bool:
    """A reduction along a short axis adjacent in memory, of many outputs: numpy's loop pays
    its per-output cost there (a max over the 10 logits of each of 1024 rows took 48 µs, a
    max over the same 10,240 numbers at once 3 µs); ``_moved`` does it as a few long
    vector operations instead."""
    if axis is None or a.ndim < 2 or a.size == 0 or a.nbytes > MOVED_MAX_BYTES:
        return False
    length = a.shape[axis]
    return (
        a.strides[axis] == a.itemsize
        and 2 <= length <= SHORT_AXIS[op]
        and a.size // length >= SHORT_AXIS_OUTPUTS
    )


def _along_short_rows(a: np.ndarray, axis: int | None) -> bool:
    """A reduction along a long axis of dense data whose rows after it are short (a bias's
    gradient over a batch, (1024, 10) along 0): numpy adds one short row at a time, paying
    its per-row cost 1024 times; the axis moved innermost is one long run per output."""
    if axis is None or a.ndim < 2 or a.size == 0 or a.nbytes > MOVED_MAX_BYTES:
        return False
    if not a.flags.c_contiguous:  # moving the axis of a strided view gains nothing here
        return False
    inner = a.size // math.prod(a.shape[: axis + 1])
    return 2 <= inner <= SHORT_ROWS and a.shape[axis] >= LONG_AXIS


def _moved(op: str, a: np.ndarray, axis: int, out: np.ndarray, to: int) -> Kernel:
    """The reduced axis moved to ``to`` in a scratch copy (made once, with the kernel), then
    reduced there.  Outermost (``to`` 0, for a short axis): numpy combines whole rows of
    outputs, one term of each at a time, in the order of the axis (a sum of at most 16
    terms, each rounded once).  Innermost (-1): one contiguous run per output, which numpy
    sums pairwise."""
    ufunc = np.maximum if op == "max" else np.add
    moved = np.moveaxis(a, axis, to)
    scratch = np.empty(moved.shape, a.dtype)
    kept = moved.shape[1:] if to == 0 else moved.shape[:-1]
    target = out.reshape(kept)  # a view: out is C-contiguous (make_kernel checks)
    count = a.shape[axis]

    def run() -> None:
        np.copyto(scratch, moved)
        ufunc.reduce(scratch, to, None, target)
        if op == "mean":
            np.divide(target, count, out=target)

    return run


def _make_sum(op: str, a: np.ndarray, axis: int | None, keepdims: bool, out: np.ndarray) -> Kernel:
    count = 1
    if op == "mean":
        count = a.size if axis is None else a.shape[axis]
        if count == 0:  # numpy's mean of nothing, without its warnings (ops.py)
            return partial(out.fill, np.nan)
    # Everything, a memory-adjacent axis, or a short one: numpy's own loop is accurate.  (A
    # plan's input is always dense, a buffer or a transposed view of one, which numpy walks as
    # one run when reducing everything.)
    if axis is None or a.shape[axis] <= SUM_BLOCK or a.strides[axis] == a.itemsize or a.size == 0:
        if count == 1:
            return partial(np.add.reduce, a, axis, None, out, keepdims)
        return partial(_sum_divide, a, axis, keepdims, out, count)
    return _blocked_sum(a, axis, keepdims, out, count)


def _sum_divide(a: np.ndarray, axis, keepdims: bool, out: np.ndarray, count: int) -> None:
    np.add.reduce(a, axis, None, out, keepdims)
    np.divide(out, count, out=out)  # numpy's mean divides the same way


def _blocked_sum(a: np.ndarray, axis: int, keepdims: bool, out: np.ndarray, count: int) -> Kernel:
    """Sum along a strided ``axis`` longer than a block: each run of SUM_BLOCK terms in the
    input's dtype (numpy's loop), the partial sums in float64, then ``/ count`` into ``out``."""
    length, stride = a.shape[axis], a.strides[axis]
    whole = length // SUM_BLOCK
    before, after = a.shape[:axis], a.shape[axis + 1 :]
    # The axis split into (whole, SUM_BLOCK): a view for any strides.
    blocks = as_strided(
        a,
        (*before, whole, SUM_BLOCK, *after),
        (*a.strides[:axis], SUM_BLOCK * stride, stride, *a.strides[axis + 1 :]),
        writeable=False,
    )
    partials = np.empty((*before, whole + (length > whole * SUM_BLOCK), *after), a.dtype)
    total = np.empty(out.shape, np.float64)
    lead = (slice(None),) * axis
    steps = [partial(np.add.reduce, blocks, axis + 1, None, partials[(*lead, slice(0, whole))])]
    if length > whole * SUM_BLOCK:  # the last, short block
        tail = a[(*lead, slice(whole * SUM_BLOCK, None))]
        steps.append(
            partial(np.add.reduce, tail, axis, None, partials[(*lead, slice(whole, None))], True)
        )
    steps.append(partial(np.add.reduce, partials, axis, np.float64, total, keepdims))
    steps.append(partial(np.divide, total, count, out))

    def run() -> None:
        for call in steps:
            call()

    return run


def _make_softmax(a: np.ndarray, axis: int | None, out: np.ndarray, log: bool = False) -> Kernel:
    """exp(a - max) / sum(exp(a - max)) along ``axis``, in ``out``: the shift keeps exp from
    overflowing, and the sum is cpu_fallback's own (blocked where it must be).  ``log``:
    log_softmax, (a - max) - log(sum(exp(a - max)))."""
    if out.size == 0:
        return partial(_nothing)
    kept = tuple(1 if axis is None or i == axis else d for i, d in enumerate(a.shape))
    peak = np.empty(kept, out.dtype)  # made once, with the kernel
    total = np.empty(kept, out.dtype)
    attrs = {"axis": axis, "keepdims": True}
    steps = [
        make_elementwise("max", attrs, [a], peak),
        partial(np.subtract, a, peak, out),
        partial(np.exp, out, out),
        make_elementwise("sum", attrs, [out], total),
    ]
    if log:
        steps += [
            partial(np.log, total, total),
            partial(np.subtract, a, peak, out),
            partial(np.subtract, out, total, out),
        ]
    else:
        steps.append(partial(np.divide, out, total, out))

    def run() -> None:
        for step in steps:
            step()

    return run


def _nothing() -> None:
    pass


def _einsum_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.einsum("...ij,...jk->...ik", a, b, out=out, optimize=False)


def make_kernel(op: str, attrs: dict, inputs: list, out: np.ndarray) -> Kernel:
    if op == "matmul":
        return partial(_einsum_matmul, inputs[0], inputs[1], out)
    return make_elementwise(op, attrs, inputs, out)


def scaled_softmax(op: str, attrs: dict) -> bool:
    """A softmax or log_softmax of its input times a number (tensor._scaled_row_input)."""
    return op in ("softmax", "log_softmax") and attrs.get("scale", 1.0) != 1.0


def with_scaled_input(make, op: str, attrs: dict, inputs: list, out: np.ndarray, *extra) -> Kernel:
    """A CPU softmax of ``inputs[0] * scale``: the product into a scratch array made here
    (``make``'s mul kernel, so it is the mul's own values), then ``make``'s softmax of it.  On
    the CPU this saves nothing over the two ops; the GPU's kernels multiply as they read."""
    x = inputs[0]
    scratch = np.empty(np.shape(x), out.dtype)
    by = out.dtype.type(attrs["scale"])
    plain = {k: v for k, v in attrs.items() if k != "scale"}
    first = make("mul", {}, [x, by], scratch, *extra)
    second = make(op, plain, [scratch], out, *extra)

    def run() -> None:
        first()
        second()

    marks = [getattr(k, "runs_as", None) for k in (first, second)]
    if any(marks):
        run.runs_as = next(m for m in marks if m)  # type: ignore[attr-defined]
    run.arrays = (scratch, first, second)  # type: ignore[attr-defined]
    return run
