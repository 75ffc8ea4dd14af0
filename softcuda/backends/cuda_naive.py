"""cuda_naive: matmul with one CUDA thread per output element, no tiling (``kernels/matmul.cu``)."""

from __future__ import annotations

from . import cuda_kernels


def make_kernel(op: str, attrs: dict, inputs: list, out):
    return cuda_kernels.make_matmul("naive", inputs[0], inputs[1], out)
