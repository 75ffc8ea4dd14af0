"""cuda_blas: cuBLAS — the ceiling the other matmul backends are measured against.

A 2-D float32 or float64 product whose operands are each row-major or transposed (one unit
stride) and whose output is row-major is bound straight to ``cublas<S|D>gemm`` when the plan is
compiled: pointers, leading dimensions and the handle are fixed then, so a call costs one C call.
Through ``cupy.matmul`` the same product spends tens of microseconds of Python on every call,
and on the H200 that time showed in end-to-end timings as the host's speed varied (cuda_blas at
n = 197: 42 us in one sweep, 62 us in the next, with identical transfers and kernel times).
Every other case (batches, general strides, other dtypes, empty dimensions) goes through
``cupy.matmul``, which runs cuBLAS as well.

TF32 stays off (CuPy enables it only when CUPY_TF32=1; ``make_kernel`` refuses to run with it on,
since the comparison would then be float32 against tf32).
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np

from ..errors import BackendUnavailable

_GEMM = {np.dtype(np.float32): "sgemm", np.dtype(np.float64): "dgemm"}
_OP_N, _OP_T = 0, 1  # cublasOperation_t
_POINTER_MODE_HOST = 0


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


def gemm_layout(a, b, out) -> tuple[int, int, int, int, int, int, int, int] | None:
    """The arguments of a column-major gemm computing the row-major out = a @ b, as
    (transa, transb, m, n, k, lda, ldb, ldc), or None where only ``cupy.matmul`` can.

    cuBLAS is column-major; a row-major (m x n) C is the column-major (n x m) C^T = B^T A^T, so
    the gemm's first matrix is b, its second a, and m and n swap.
    """
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2:
        return None
    m, k = a.shape
    n = b.shape[1]
    if 0 in (m, k, n) or max(m, k, n) >= 2**31:
        return None
    la, lb, lc = _layout(a, m, k), _layout(b, k, n), _layout(out, m, n)
    if la is None or lb is None or lc is None or lc[0] != _OP_N:
        return None
    return lb[0], la[0], n, m, k, lb[1], la[1], lc[1]


def _direct_gemm(a, b, out):
    """A prebound cuBLAS call computing out = a @ b, or None where ``cupy.matmul`` must do it."""
    name = _GEMM.get(a.dtype)
    if name is None or b.dtype != a.dtype or out.dtype != a.dtype:
        return None
    layout = gemm_layout(a, b, out)
    if layout is None:
        return None
    import cupy
    from cupy_backends.cuda.libs import cublas

    trans_1, trans_2, m, n, k, ld_1, ld_2, ldc = layout
    handle = cupy.cuda.device.get_cublas_handle()
    gemm, set_mode = getattr(cublas, name), cublas.setPointerMode
    # alpha and beta are read through host pointers: keep the array alive in the closure.
    scalars = np.array([1.0, 0.0], dtype=a.dtype)
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + a.itemsize
    args = (
        handle, trans_1, trans_2, m, n, k,
        alpha, b.data.ptr, ld_1, a.data.ptr, ld_2, beta, out.data.ptr, ldc,
    )  # fmt: skip

    def run() -> None:
        _ = scalars
        set_mode(handle, _POINTER_MODE_HOST)  # CuPy switches modes in some routines
        gemm(*args)  # on CuPy's current stream: the plan's, which evaluate makes current

    return run
