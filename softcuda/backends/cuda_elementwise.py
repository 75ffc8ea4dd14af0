"""cuda_elementwise: softcuda's own vectorized grid-stride kernels for every elementwise op
(numpy broadcasting included) and the reductions sum / mean / max.

Fused groups (softcuda.fuse) run here too, as generated kernels (``cuda_fused``).

The kernels live in ``kernels/elementwise.cu`` and ``kernels/reduce.cu``; ``cuda_kernels``
compiles them once per process and prebinds each launch.
"""

from __future__ import annotations

from ..ops import OPS
from . import cuda_fused, cuda_kernels


def make_kernel(op: str, attrs: dict, inputs: list, out):
    family = OPS[op].family
    if family == "reduce":
        return cuda_kernels.make_reduce(op, inputs[0], out, attrs["axis"], attrs["keepdims"])
    if family == "binary":
        return cuda_kernels.make_binary(op, inputs[0], inputs[1], out)
    if family == "power":
        return cuda_kernels.make_power(inputs[0], attrs["exponent"], out)
    if family == "softmax":
        return cuda_kernels.make_softmax(
            inputs[0], out, attrs["axis"], op == "log_softmax", attrs.get("scale", 1.0)
        )
    return cuda_kernels.make_unary(op, inputs[0], out)


def prepare_fused(found: list) -> None:
    """Compile a plan's fused groups at once ((group, inputs, out) each)."""
    cuda_fused.prepare_fused(found)


def make_fused(group, inputs: list, out, extras: list = ()):
    """One fused group as one generated kernel (two where it reduces every element)."""
    return cuda_fused.make_fused(group, inputs, out, extras)
