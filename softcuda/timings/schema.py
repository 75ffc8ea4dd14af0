"""The tidy raw-timings CSV: one row per repetition of one measured phase.

Written by the sweep runner, read by selection and by ``softcuda.analysis``.  The schema carries
a version (column ``schema``) so that a CSV from an older format is refused by name.

Columns
-------
schema       int    SCHEMA_VERSION of the writer
device_hash  str    sha256 device hash of the profiled machine (``softcuda.device``)
device       str    human label of the machine, e.g. "NVIDIA H200" or the CPU model
op           str    op name ("matmul", "add", ...) or a bus calibration pseudo-op
                    ("copy_h2d", "copy_d2h")
size         int    the op's size metric: element count for elementwise ops and reductions,
                    round(cbrt(m*k*n)) (times batch) for matmul, bytes for bus rows
shape        str    the concrete shapes, e.g. "1024" or "512x512x512" (m x k x n)
dtype        str    "float32" / "float64" ("uint8" for bus rows)
backend      str    backend id ("cpu_blas", "cuda_tiled", ...; "bus" for bus rows; "machine" for
                    probe rows)
host_memory  str    "pageable" or "pinned": where the host-side data lived
phase        str    "wall"  (CPU backends: whole op, wall clock)
                    "h2d", "kernel", "d2h"  (CUDA backends, each phase on its own)
                    "end_to_end" (CUDA: host arrays in -> host result out, wall clock)
                    "transfer" (bus rows)
                    "probe" (backend "machine": a fixed 16 K-element numpy add timed in the
                    same rounds as the point's backends, so that each point carries the host
                    CPU's speed while it was measured; see softcuda.sweep.settle)
repetition   int    0-based index of the repetition within this (op, size, backend, kind, phase)
seconds      float  the measured time of that one repetition
nbytes       int    bytes that cross the bus end to end for this point (inputs + output);
                    for bus rows the bytes copied
attempt      int    0 for a point's first measurement; 1, 2, ... for each time the sweep measured
                    it again because the host was off its best speed or the timings spread
                    (``repetitions.retries``).  Every attempt's rows are kept; the analysis
                    reads one attempt per point, the steadiest (``timings.stats.current_rows``).
                    Version 1 files have no such column: every row is attempt 0.

Metrics (how rows combine into one curve per backend):
  e2e_pinned    CPU rows phase "wall"; CUDA rows phase "end_to_end", host_memory "pinned"
  e2e_pageable  CPU rows phase "wall"; CUDA rows phase "end_to_end", host_memory "pageable"
  resident      CPU rows phase "wall"; CUDA rows phase "kernel" (data already on the device)
"""

from __future__ import annotations

from softcuda.pool import HOST_MEMORY_KINDS as HOST_MEMORY_KINDS  # one list: the pools'

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions the loader accepts; a version 1 file (no ``attempt`` column) reads as attempt 0."""

COLUMNS: tuple[str, ...] = (
    "schema",
    "device_hash",
    "device",
    "op",
    "size",
    "shape",
    "dtype",
    "backend",
    "host_memory",
    "phase",
    "repetition",
    "seconds",
    "nbytes",
    "attempt",
)

PHASES = ("wall", "h2d", "kernel", "d2h", "end_to_end", "transfer", "probe")

PROBE_BACKEND = "machine"
PROBE_PHASE = "probe"

BUS_OPS = ("copy_h2d", "copy_d2h")

# metric name -> (phase used for CPU backends, phase used for CUDA backends, host_memory for CUDA
# rows or None for "any")
METRICS: dict[str, tuple[str, str, str | None]] = {
    "e2e_pinned": ("wall", "end_to_end", "pinned"),
    "e2e_pageable": ("wall", "end_to_end", "pageable"),
    "resident": ("wall", "kernel", None),
}
DEFAULT_METRIC = "e2e_pinned"


def kept(seconds: float) -> float:
    """A repetition's time as a sweep keeps it, in its CSV and in memory alike: four
    significant digits (within 5 parts in 10^4, below any point's spread from one repetition
    to the next).  That halves a reference sweep's gzipped CSV (15.5 to 7.6 MB for the H200's),
    so that two devices' references fit in the repository beside each other, and a sweep
    decides (profile, points too slow to go on) from the values a resumed sweep or
    ``init --from`` reads back."""
    return float(f"{seconds:.4g}")
