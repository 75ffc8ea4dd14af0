"""cuda_elementwise: softcuda's own vectorized grid-stride kernels for every elementwise op
(numpy broadcasting included) and the reductions sum / mean / max.

The kernels live in ``kernels/elementwise.cu`` and ``kernels/reduce.cu``; ``cuda_kernels``
compiles them once per process and prebinds each launch.
"""

from __future__ import annotations

from ..ops import REDUCTION_OPS
from . import cuda_kernels


def make_kernel(op: str, attrs: dict, inputs: list, out):
    if op in REDUCTION_OPS:
        return cuda_kernels.make_reduce(op, inputs[0], out, attrs["axis"], attrs["keepdims"])
    if len(inputs) == 2:
        return cuda_kernels.make_binary(op, inputs[0], inputs[1], out)
    return cuda_kernels.make_unary(op, inputs[0], out)
