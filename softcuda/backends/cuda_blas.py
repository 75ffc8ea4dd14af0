"""cuda_blas: cuBLAS through CuPy — the ceiling the other matmul backends are measured against.

TF32 stays off (CuPy enables it only when CUPY_TF32=1; ``make_kernel`` refuses to run with it on,
since the comparison would then be float32 against tf32).
"""

from __future__ import annotations

import os
from functools import partial

from ..errors import BackendUnavailable


def make_kernel(op: str, attrs: dict, inputs: list, out):
    import cupy

    if os.environ.get("CUPY_TF32", "0") != "0":
        raise BackendUnavailable(
            "cuda_blas: CUPY_TF32 is set; unset it so that cuBLAS computes "
            "in float32, as every other backend does"
        )
    return partial(cupy.matmul, inputs[0], inputs[1], out=out)
