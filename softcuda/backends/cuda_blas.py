"""cuda_blas: cuBLAS — the ceiling the other matmul backends are measured against.

A 2-D float32 or float64 product whose operands are each row-major or transposed (one unit
stride) and whose output is row-major is bound straight to ``cublas<S|D>gemm`` when the plan is
compiled: pointers, sizes and leading dimensions are fixed then, and a call looks up CuPy's
handle (kept per thread and device), sets its pointer and math modes and calls the gemm.  The
prebound call spends much less host time than ``cupy.matmul``, which does its checks and
dispatch on every call.  That host time is noise as well as overhead: it overlaps the input
copies when the host is fast and outlasts them when it is slow, so through ``cupy.matmul`` a
small product's end-to-end time moved from sweep to sweep while its transfers and kernel did
not, and matmul's bucket assignments did not always repeat (docs/findings.md, "Stability"; the
two calls side by side in "The kernels against cuBLAS and CuPy").  Every other case (batches,
general strides, other dtypes, empty dimensions) goes through ``cupy.matmul``, which runs
cuBLAS as well.  CuPy is imported inside the functions, so ``gemm_arguments`` (layout
arithmetic) imports and is tested without it.

TF32 stays off: CuPy enables it only when CUPY_TF32=1, and ``make_kernel`` refuses to run with it
on, since the comparison would then be float32 against tf32; the direct call also sets the
handle's math mode to the default (no TF32) before each gemm.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..errors import BackendUnavailable

_GEMM = {np.dtype(np.float32): "sgemm", np.dtype(np.float64): "dgemm"}
_OP_N, _OP_T = 0, 1  # cublasOperation_t
_POINTER_MODE_HOST = 0
_DEFAULT_MATH = 0  # cublasMath_t CUBLAS_DEFAULT_MATH: no TF32, no reduced-precision reductions
_INT_MAX = 2**31  # cuBLAS's sizes and leading dimensions are C ints


def make_kernel(op: str, attrs: dict, inputs: list, out):
    import cupy

    if os.environ.get("CUPY_TF32", "0") != "0":
        raise BackendUnavailable(
            "cuda_blas: CUPY_TF32 is set; unset it so that cuBLAS computes "
            "in float32, as every other backend does"
        )
    direct = _direct_gemm(inputs[0], inputs[1], out)
    if direct is not None:
        return direct
    return partial(cupy.matmul, inputs[0], inputs[1], out=out)


def _layout(x, rows: int, cols: int) -> tuple[int, int] | None:
    """(cuBLAS op, leading dimension) that reads the row-major matrix ``x`` (rows x cols) as its
    column-major transpose, or None when neither of its strides is one element."""
    item = x.itemsize
    s_row, s_col = x.strides
    if s_row % item or s_col % item:
        return None
    s_row, s_col = s_row // item, s_col // item
    # A stride along a dimension of length 1 is never used: take the smallest legal one.
    if cols == 1 or s_col == 1:
        ld = cols if rows == 1 else s_row
        return (_OP_N, ld) if ld >= max(1, cols) else None
    if rows == 1 or s_row == 1:
        ld = rows if cols == 1 else s_col
        return (_OP_T, ld) if ld >= max(1, rows) else None
    return None


def gemm_arguments(a, b, out, address: Callable[[Any], int] = lambda x: x.data.ptr):
    """The arguments of the column-major gemm computing the row-major out = a @ b, after the
    handle and around alpha and beta: (transa, transb, m, n, k, A, lda, B, ldb, C, ldc), the
    matrices as ``address(array)``; or None where only ``cupy.matmul`` can compute it.

    cuBLAS is column-major; a row-major (m x n) C is the column-major (n x m) C^T = B^T A^T, so
    the gemm's first matrix is b, its second a, and m and n swap.
    """
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2:
        return None
    m, k = a.shape
    n = b.shape[1]
    if 0 in (m, k, n) or max(m, k, n) >= _INT_MAX:
        return None
    la, lb, lc = _layout(a, m, k), _layout(b, k, n), _layout(out, m, n)
    if la is None or lb is None or lc is None or lc[0] != _OP_N:
        return None
    if max(la[1], lb[1], lc[1]) >= _INT_MAX:
        return None
    return lb[0], la[0], n, m, k, address(b), lb[1], address(a), la[1], address(out), lc[1]


def _direct_gemm(a, b, out):
    """A prebound cuBLAS call computing out = a @ b, or None where ``cupy.matmul`` must do it."""
    name = _GEMM.get(a.dtype)
    if name is None or b.dtype != a.dtype or out.dtype != a.dtype:
        return None
    args = gemm_arguments(a, b, out)
    if args is None:
        return None
    import cupy
    from cupy_backends.cuda.libs import cublas

    get_handle = cupy.cuda.device.get_cublas_handle  # per thread and device, as CuPy keeps them
    gemm, set_mode = getattr(cublas, name), cublas.setPointerMode
    set_math = getattr(cublas, "setMathMode", lambda handle, mode: None)
    # alpha and beta are read through host pointers; the closure keeps them, and the arrays
    # whose addresses are bound, alive as long as the call.
    scalars = np.array([1.0, 0.0], dtype=a.dtype)
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + a.itemsize
    trans_1, trans_2, m, n, k, first, ld_1, second, ld_2, c, ldc = args
    keep = (scalars, a, b, out)

    def run() -> None:
        _ = keep
        handle = get_handle()
        # CuPy switches both modes in some routines (its float16 matmul leaves tensor-op math)
        set_mode(handle, _POINTER_MODE_HOST)
        set_math(handle, _DEFAULT_MATH)
        # on CuPy's current stream: the plan's, which evaluate makes current
        gemm(handle, trans_1, trans_2, m, n, k, alpha, first, ld_1, second, ld_2, beta, c, ldc)

    return run
