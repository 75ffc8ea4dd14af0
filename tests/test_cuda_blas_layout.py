"""cuda_blas's direct cuBLAS call: the column-major gemm arguments it derives from row-major
operands, checked on the CPU by running that gemm over the arrays' own memory in numpy.

The GPU tests (test_cuda_graph.py) run the call itself; this one can fail on any machine when
an operation flag, a leading dimension or the order of the operands is wrong.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from softcuda.backends.cuda_blas import gemm_arguments

_T = 1


def _stored(x: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major rows x cols matrix with leading dimension ld at x's first element."""
    return as_strided(x, shape=(rows, cols), strides=(x.itemsize, ld * x.itemsize))


def _address(x: np.ndarray) -> int:
    return x.ctypes.data


def _column_major_gemm(args, memory: dict[int, np.ndarray]) -> None:
    """C = op(A) op(B), as cuBLAS reads and writes memory: each matrix is the array found at
    its address in ``memory``."""
    trans_a, trans_b, m, n, k, a_at, lda, b_at, ldb, c_at, ldc = args
    a = _stored(memory[a_at], *((k, m) if trans_a == _T else (m, k)), lda)
    b = _stored(memory[b_at], *((n, k) if trans_b == _T else (k, n)), ldb)
    a = a.T if trans_a == _T else a
    b = b.T if trans_b == _T else b
    _stored(memory[c_at], m, n, ldc)[...] = a.astype(np.float64) @ b.astype(np.float64)


def _operand(rng, shape, how: str) -> np.ndarray:
    rows, cols = shape
    if how == "row":
        return rng.standard_normal((rows, cols))
    if how == "transposed":
        return rng.standard_normal((cols, rows)).T
    if how == "padded":  # row-major with a leading dimension larger than its width
        return rng.standard_normal((rows, cols + 3))[:, :cols]
    raise ValueError(how)


SHAPES = [(1, 1, 1), (3, 5, 7), (1, 4, 6), (5, 1, 3), (4, 6, 1), (7, 3, 2), (33, 17, 65)]
LAYOUTS = ["row", "transposed", "padded"]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("a_how,b_how", list(itertools.product(LAYOUTS, LAYOUTS)))
@pytest.mark.parametrize("out_how", ["row", "padded"])
def test_gemm_arguments_compute_a_at_b(m, k, n, a_how, b_how, out_how):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a, b = _operand(rng, (m, k), a_how), _operand(rng, (k, n), b_how)
    out = _operand(rng, (m, n), out_how)
    out[...] = np.nan  # poison: an element the gemm does not write stays NaN
    args = gemm_arguments(a, b, out, _address)
    assert args is not None, (a.strides, b.strides, out.strides)
    memory = {_address(x): x for x in (a, b, out)}
    assert len(memory) == 3
    _column_major_gemm(args, memory)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_layouts_cublas_cannot_read_are_refused():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 8)), rng.standard_normal((8, 5))
    out = np.empty((6, 5))
    assert gemm_arguments(a[:, ::2], b[:4], out) is None  # no unit stride in a
    assert gemm_arguments(a, b, out.T.copy().T) is None  # column-major output
    assert gemm_arguments(a[None], b, out) is None  # batched: left to cupy.matmul
    assert gemm_arguments(a[:0], b, out[:0]) is None  # an empty dimension
    broadcast = np.broadcast_to(rng.standard_normal(8), (6, 8))  # a zero stride
    assert gemm_arguments(broadcast, b, out) is None
    assert gemm_arguments(a, b, out, _address) is not None
