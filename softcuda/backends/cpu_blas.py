"""cpu_blas: numpy with its bundled BLAS (OpenBLAS in the wheels) — matmul through GEMM.

Elementwise ops and reductions are numpy's own loops, shared with cpu_fallback.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .cpu_fallback import Kernel, make_elementwise


def make_kernel(op: str, attrs: dict, inputs: list, out: np.ndarray) -> Kernel:
    if op == "matmul":
        return partial(np.matmul, inputs[0], inputs[1], out)
    return make_elementwise(op, attrs, inputs, out)
