"""The backend registry: which backends exist, where they run, which ops they implement.

A backend is a module with ``make_kernel(op, attrs, inputs, out) -> run``: given the op, its
attributes and the arrays it will read and write (numpy arrays for CPU backends, CuPy arrays for
CUDA backends, fixed at compile time), it returns a zero-argument callable that computes ``out``.
One operand of a binary op (add, sub, mul, div) may instead be a numpy scalar of ``out``'s
dtype: a constant (``x * 2.0``), which the kernel takes as an argument rather than as a buffer
that a plan would copy to the device.  All choosing happens in ``make_kernel``; ``run`` only
computes.  The table below is data: the config parser checks rules against it without importing
any backend, and a CUDA backend module is imported (and CuPy with it) only when a plan asks for
it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from ..device import cuda_available
from ..errors import BackendUnavailable
from ..ops import ELEMENTWISE_OPS, REDUCTION_OPS, with_variants

_ALL = frozenset(ELEMENTWISE_OPS + REDUCTION_OPS + ("matmul",))


@dataclass(frozen=True)
class BackendInfo:
    id: str
    device: str  # "cpu" or "cuda"
    ops: frozenset[str]
    module: str
    description: str
    # Ops whose kernel is this backend's own.  cpu_blas runs cpu_fallback's code for everything
    # but matmul, so the sweep measures those ops once, as cpu_fallback (identical code timed
    # twice would only let noise pick a "winner").  None: every op in ``ops``.
    own_ops: frozenset[str] | None = None
    # (make_kernel keyword, [device] key of the profile): settings compile hands the backend
    settings: tuple[tuple[str, str], ...] = ()
    # (backend, bytes): below these bytes (inputs read plus output written) this backend runs
    # that backend's kernel, on one thread, so a timing of it there is that backend's timed
    # twice.  Selection, the profile's costs and the report read the other's timings for it
    # there (timings.stats.shared_kernels): identical code must not let noise pick a winner,
    # as it did between two sweeps for most ops' smallest bucket.
    runs_as_below: tuple[str, int] | None = None
    # Whether it runs its device's fused groups (softcuda.fuse): it alone is assigned and
    # measured the chain variants (ops.CHAINS), which a plan of it runs as one group
    fuses: bool = False

    def __post_init__(self) -> None:
        # a backend runs a variant (ops.VARIANTS) as its base op: it can be assigned, and is
        # measured on, the variants of the ops it implements and measures
        object.__setattr__(self, "ops", with_variants(self.ops, self.fuses))
        if self.own_ops is not None:
            object.__setattr__(self, "own_ops", with_variants(self.own_ops, self.fuses))

    @property
    def measured_ops(self) -> frozenset[str]:
        return self.ops if self.own_ops is None else self.own_ops


# In order of simplicity: where two backends tie, selection keeps the earlier one.
BACKENDS: dict[str, BackendInfo] = {
    b.id: b
    for b in (
        BackendInfo(
            "cpu_fallback",
            "cpu",
            _ALL,
            "cpu_fallback",
            "naive single-threaded numpy loops, no BLAS; the reference",
        ),
        BackendInfo(
            "cpu_blas",
            "cpu",
            _ALL,
            "cpu_blas",
            "numpy with its bundled BLAS",
            own_ops=frozenset({"matmul"}),
        ),
        BackendInfo(
            "cpu_threads",
            "cpu",
            _ALL,
            "cpu_threads",
            "native vectorized kernels on a pool of threads, a chunk per grain of work; matmul "
            "on BLAS threads",
            own_ops=frozenset(ELEMENTWISE_OPS + REDUCTION_OPS),
            settings=(("threads", "cpu_threads"),),
            fuses=True,
        ),
        BackendInfo(
            "cuda_elementwise",
            "cuda",
            frozenset(ELEMENTWISE_OPS + REDUCTION_OPS),
            "cuda_elementwise",
            "vectorized grid-stride elementwise and reduction kernels",
            fuses=True,
        ),
        BackendInfo(
            "cuda_naive",
            "cuda",
            frozenset({"matmul"}),
            "cuda_naive",
            "one CUDA thread per output, no tiling",
        ),
        BackendInfo(
            "cuda_tiled",
            "cuda",
            frozenset({"matmul"}),
            "cuda_tiled",
            "shared-memory tiled matmul with register blocking",
        ),
        BackendInfo(
            "cuda_blas",
            "cuda",
            frozenset({"matmul"}),
            "cuda_blas",
            "cuBLAS through CuPy (TF32 off): the ceiling",
        ),
    )
}
CPU_BACKENDS = tuple(b for b, info in BACKENDS.items() if info.device == "cpu")
CUDA_BACKENDS = tuple(b for b, info in BACKENDS.items() if info.device == "cuda")


def available(backend_id: str) -> tuple[bool, str]:
    info = BACKENDS[backend_id]
    if info.device == "cpu":
        return True, ""
    return cuda_available()


def get(backend_id: str) -> ModuleType:
    """The backend's module, imported on first use; raises BackendUnavailable with the reason."""
    if backend_id not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {backend_id!r}")
    ok, reason = available(backend_id)
    if not ok:
        raise BackendUnavailable(f"backend {backend_id} is unavailable: {reason}")
    return importlib.import_module(f"{__name__}.{BACKENDS[backend_id].module}")
