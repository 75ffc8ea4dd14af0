"""Baked transfers and device copies for plans that use CUDA backends.

A transfer moves a whole buffer as bytes with ``cudaMemcpyAsync`` on the plan's stream; the
pointers, byte count, direction and stream are fixed at compile time.  From pinned host memory
the copy is truly asynchronous; from pageable memory the driver stages it (and it is slower —
that difference is one of the things the sweep measures).  CuPy is imported inside the
functions: ``softcuda.bind`` imports this module on every machine.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from . import cuda_kernels


def host_pointer(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def make_transfer(kind: str, src, dst, stream):
    """A zero-argument callable copying ``src`` to ``dst`` (1-D uint8 views of equal length)."""
    import cupy

    runtime = cupy.cuda.runtime
    if kind == "h2d":
        args = (int(dst.data.ptr), host_pointer(src), src.nbytes, runtime.memcpyHostToDevice)
    else:
        args = (host_pointer(dst), int(src.data.ptr), src.nbytes, runtime.memcpyDeviceToHost)
    return partial(runtime.memcpyAsync, *args, stream.ptr)


def make_copy(src, out):
    """Strided device array -> contiguous device array of the same elements (a reshape copy)."""
    return cuda_kernels.make_copy(src, out.reshape(src.shape))
