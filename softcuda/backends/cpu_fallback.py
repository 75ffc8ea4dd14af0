"""cpu_fallback: the reference backend — numpy ufunc loops, single-threaded, no BLAS anywhere.

Matmul is ``numpy.einsum`` with ``optimize=False``: its own sum-of-products loops, never BLAS.
Every kernel writes into the ``out`` array the plan planned for it; nothing is allocated at run
time.  cpu_blas reuses these kernels and replaces only matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

Kernel = Callable[[], Any]

_BINARY: dict[str, Any] = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_UNARY: dict[str, Any] = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "square": np.square,
}
_REDUCE: dict[str, Any] = {"sum": np.sum, "mean": np.mean, "max": np.max}


def _sigmoid(a: np.ndarray, out: np.ndarray) -> None:
    # 1/(1+exp(-x)) overflows exp for large negative x; 0.5*tanh(x/2)+0.5 is the same function
    # and never overflows.
    np.multiply(a, 0.5, out=out)
    np.tanh(out, out=out)
    np.multiply(out, 0.5, out=out)
    np.add(out, 0.5, out=out)


def make_elementwise(op: str, attrs: dict, inputs: list, out: np.ndarray) -> Kernel:
    # ``out`` goes positionally: a partial without keywords calls measurably faster, and the
    # executor's per-node overhead is what tiny graphs pay.
    if op in _BINARY:
        return partial(_BINARY[op], inputs[0], inputs[1], out)
    if op in _UNARY:
        return partial(_UNARY[op], inputs[0], out)
    if op == "relu":
        return partial(np.maximum, inputs[0], 0.0, out=out)  # numpy wants maximum's out by name
    if op == "sigmoid":
        return partial(_sigmoid, inputs[0], out)
    if op in _REDUCE:
        return partial(
            _REDUCE[op], inputs[0], axis=attrs["axis"], keepdims=attrs["keepdims"], out=out
        )
    raise KeyError(op)


def _einsum_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.einsum("...ij,...jk->...ik", a, b, out=out, optimize=False)


def make_kernel(op: str, attrs: dict, inputs: list, out: np.ndarray) -> Kernel:
    if op == "matmul":
        return partial(_einsum_matmul, inputs[0], inputs[1], out)
    return make_elementwise(op, attrs, inputs, out)
