"""Synthetic raw-timings frames with known curves, for tests of anything that reads sweep CSVs.

A ``Scenario`` says how long each backend takes as a function of size (CPU backends: the whole op;
CUDA backends: the kernel alone) and what the bus costs per host memory kind.  ``frame`` draws
schema-conforming rows from it (log-normal noise, one row per repetition): ``wall`` rows for CPU
backends; ``h2d``, ``kernel``, ``d2h`` and ``end_to_end`` rows for CUDA backends, in every host
memory kind; and bus calibration rows.  ``expected`` gives the noise-free times, and
``crossover`` the exact size where two backends' noise-free curves meet, so tests can compare
what the statistics find against the truth.

Conventions (the same the sweep uses): elementwise sizes are element counts with shape "n";
matmul size n means an n x n by n x n product, shape "nxnxn"; nbytes = inputs + output; the noise
is multiplicative, exp(noise * N(0, 1)), so the median of a point is its noise-free time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from softcuda.timings import schema

BINARY_OPS = frozenset({"add", "sub", "mul", "div", "pow", "maximum", "minimum"})
REDUCTION_OPS = frozenset({"sum", "mean", "max", "min"})
DEFAULT_SIZES = tuple(2**k for k in range(4, 23))
DEFAULT_BUS_SIZES = tuple(2**k for k in range(8, 27, 2))
CUDA_PHASES = ("h2d", "kernel", "d2h", "end_to_end")


@dataclass(frozen=True)
class Cost:
    """t(size) = fixed_s + per_unit_s * size**power, in seconds."""

    fixed_s: float
    per_unit_s: float
    power: float = 1.0

    def seconds(self, size: np.ndarray | float) -> np.ndarray:
        return self.fixed_s + self.per_unit_s * np.asarray(size, dtype=float) ** self.power


@dataclass(frozen=True)
class Link:
    """One direction of the bus: t(nbytes) = latency_s + nbytes / bandwidth_Bps."""

    latency_s: float
    bandwidth_Bps: float

    def seconds(self, nbytes: np.ndarray | float) -> np.ndarray:
        return self.latency_s + np.asarray(nbytes, dtype=float) / self.bandwidth_Bps


PINNED = (Link(8e-6, 25e9), Link(8e-6, 25e9))  # (h2d, d2h)
PAGEABLE = (Link(15e-6, 8e9), Link(15e-6, 8e9))


def io_bytes(op: str, size: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(input bytes, output bytes) of one call of ``op`` at ``size`` (ints stay ints).

    Non-integer sizes are allowed so that the noise-free curves are continuous (``crossover``).
    """
    n = np.asarray(size)
    if op == "matmul":
        return 2 * n * n * itemsize, n * n * itemsize
    if op in REDUCTION_OPS:
        return n * itemsize, np.full_like(n, itemsize)
    arity = 2 if op in BINARY_OPS else 1
    return arity * n * itemsize, n * itemsize


def shape_of(op: str, size: int) -> str:
    return f"{size}x{size}x{size}" if op == "matmul" else str(size)


@dataclass(frozen=True)
class Scenario:
    """Noise-free timing model of one device; see the module docstring.

    ``costs`` maps a backend id (or an (op, backend) pair, which wins over the plain id) to its
    Cost: the wall time for ``cpu_*`` backends, the kernel time for the others.  A backend with
    only pair keys implements only those ops.  ``links`` maps a host memory kind to its
    (h2d, d2h) Links.  ``e2e_overhead_s`` is what an end-to-end CUDA
    call costs beyond its three phases (allocation, synchronisation).
    """

    costs: Mapping[str | tuple[str, str], Cost]
    ops: Sequence[str] = ("add",)
    dtype: str = "float32"
    links: Mapping[str, tuple[Link, Link]] = field(
        default_factory=lambda: {"pinned": PINNED, "pageable": PAGEABLE}
    )
    e2e_overhead_s: float = 0.0
    device: str = "Synthetic GPU"
    device_hash: str = "5" * 64

    @property
    def backends(self) -> list[str]:
        names = {k[1] if isinstance(k, tuple) else k for k in self.costs}
        return sorted(names)

    def implements(self, op: str, backend: str) -> bool:
        return (op, backend) in self.costs or backend in self.costs

    def cost(self, op: str, backend: str) -> Cost:
        return self.costs.get((op, backend)) or self.costs[backend]

    def expected(
        self, op: str, backend: str, size: np.ndarray | float, phase: str, host_memory: str
    ) -> np.ndarray:
        """Noise-free seconds of one phase (which is also the median of the drawn rows)."""
        size = np.asarray(size, dtype=float)
        if backend.startswith("cpu_"):
            if phase != "wall":
                raise ValueError(f"CPU backend {backend} has only wall rows, not {phase}")
            return self.cost(op, backend).seconds(size)
        in_b, out_b = io_bytes(op, size, np.dtype(self.dtype).itemsize)
        h2d, d2h = self.links[host_memory]
        parts = {
            "h2d": h2d.seconds(in_b),
            "kernel": self.cost(op, backend).seconds(size),
            "d2h": d2h.seconds(out_b),
        }
        if phase == "end_to_end":
            return parts["h2d"] + parts["kernel"] + parts["d2h"] + self.e2e_overhead_s
        return parts[phase]

    def expected_metric(
        self, op: str, backend: str, size: np.ndarray | float, metric: str
    ) -> np.ndarray:
        """Noise-free seconds of ``backend`` under a schema metric."""
        cpu_phase, cuda_phase, memory = schema.METRICS[metric]
        if backend.startswith("cpu_"):
            return self.expected(op, backend, size, cpu_phase, "pageable")
        return self.expected(op, backend, size, cuda_phase, memory or "pinned")

    def crossover(
        self, op: str, a: str, b: str, metric: str, lo: float = 1.0, hi: float = 1e12
    ) -> float:
        """The size in [lo, hi] where a's and b's noise-free curves meet (bisection in log size).

        Raises ValueError if they do not change order between lo and hi.
        """

        def gap(s: float) -> float:
            ta = self.expected_metric(op, a, s, metric)
            tb = self.expected_metric(op, b, s, metric)
            return float(np.log(ta / tb))

        g_lo, g_hi = gap(lo), gap(hi)
        if g_lo * g_hi > 0:
            raise ValueError(f"{a} and {b} do not cross between {lo} and {hi}")
        x, y = math.log(lo), math.log(hi)
        for _ in range(200):
            mid = (x + y) / 2
            if (gap(math.exp(mid)) > 0) == (g_lo > 0):
                x = mid
            else:
                y = mid
        return math.exp((x + y) / 2)

    def frame(
        self,
        sizes: Iterable[int] = DEFAULT_SIZES,
        *,
        reps: int = 20,
        noise: float = 0.05,
        seed: int = 0,
        backends: Iterable[str] | None = None,
        host_memories: Iterable[str] | None = None,
        bus_sizes: Iterable[int] = DEFAULT_BUS_SIZES,
    ) -> pd.DataFrame:
        """Schema-conforming raw rows (columns schema.COLUMNS) drawn from the scenario."""
        rng = np.random.default_rng(seed)
        sizes = np.array(sorted({int(s) for s in sizes}), dtype=np.int64)
        memories = list(self.links) if host_memories is None else list(host_memories)
        itemsize = np.dtype(self.dtype).itemsize
        parts: list[pd.DataFrame] = []

        def block(op, backend, memory, phase, size, mean, nbytes, shapes, dtype):
            k = len(size)
            seconds = np.repeat(mean, reps) * np.exp(noise * rng.standard_normal(k * reps))
            return pd.DataFrame(
                {
                    "schema": schema.SCHEMA_VERSION,
                    "device_hash": self.device_hash,
                    "device": self.device,
                    "op": op,
                    "size": np.repeat(size, reps),
                    "shape": np.repeat(shapes, reps),
                    "dtype": dtype,
                    "backend": backend,
                    "host_memory": memory,
                    "phase": phase,
                    "repetition": np.tile(np.arange(reps), k),
                    "seconds": seconds,
                    "nbytes": np.repeat(nbytes, reps),
                    "attempt": 0,
                }
            )

        for op in self.ops:
            in_b, out_b = io_bytes(op, sizes, itemsize)
            shapes = np.array([shape_of(op, int(s)) for s in sizes])
            for backend in self.backends if backends is None else backends:
                if not self.implements(op, backend):
                    continue  # like a real backend that lacks this op
                if backend.startswith("cpu_"):
                    combos = [("pageable", "wall")]
                else:
                    combos = [(m, p) for m in memories for p in CUDA_PHASES]
                for memory, phase in combos:
                    mean = self.expected(op, backend, sizes, phase, memory)
                    parts.append(
                        block(
                            op,
                            backend,
                            memory,
                            phase,
                            sizes,
                            mean,
                            in_b + out_b,
                            shapes,
                            self.dtype,
                        )
                    )
        bus = np.array(sorted({int(s) for s in bus_sizes}), dtype=np.int64)
        if len(bus):
            for memory in memories:
                for op, link in zip(schema.BUS_OPS, self.links[memory], strict=True):
                    parts.append(
                        block(
                            op,
                            "bus",
                            memory,
                            "transfer",
                            bus,
                            link.seconds(bus),
                            bus,
                            bus.astype(str),
                            "uint8",
                        )
                    )
        if not parts:
            return pd.DataFrame(columns=list(schema.COLUMNS))
        return pd.concat(parts, ignore_index=True)[list(schema.COLUMNS)]


def from_medians(
    medians: Mapping[str, Mapping[int, float]],
    *,
    op: str = "add",
    metric: str = schema.DEFAULT_METRIC,
    reps: int = 9,
    noise: float = 0.01,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "Synthetic GPU",
    device_hash: str = "5" * 64,
) -> pd.DataFrame:
    """Rows of one op whose medians under ``metric`` are exactly ``medians[backend][size]``.

    For hand-made winner patterns.  Each point gets ``reps`` (odd) repetitions spread by
    log-normal noise and shifted so that their median is the given value; only the phase the
    metric reads is written (``wall`` for CPU backends, the metric's CUDA phase otherwise).
    """
    if reps % 2 == 0:
        raise ValueError("reps must be odd so that the median is one of the values")
    rng = np.random.default_rng(seed)
    cpu_phase, cuda_phase, memory = schema.METRICS[metric]
    points = [(b, int(s), float(m)) for b, pts in medians.items() for s, m in pts.items()]
    backend = np.array([p[0] for p in points], dtype=object)
    size = np.array([p[1] for p in points], dtype=np.int64)
    z = rng.standard_normal((len(points), reps))
    seconds = np.array([p[2] for p in points])[:, None] * np.exp(
        noise * (z - np.median(z, axis=1, keepdims=True))
    )
    cpu = np.array([b.startswith("cpu_") for b in backend], dtype=bool)
    in_b, out_b = io_bytes(op, size, np.dtype(dtype).itemsize)
    frame = pd.DataFrame(
        {
            "schema": schema.SCHEMA_VERSION,
            "device_hash": device_hash,
            "device": device,
            "op": op,
            "size": np.repeat(size, reps),
            "shape": np.repeat([shape_of(op, int(s)) for s in size], reps),
            "dtype": dtype,
            "backend": np.repeat(backend, reps),
            "host_memory": np.repeat(np.where(cpu, "pageable", memory or "pinned"), reps),
            "phase": np.repeat(np.where(cpu, cpu_phase, cuda_phase), reps),
            "repetition": np.tile(np.arange(reps), len(points)),
            "seconds": seconds.ravel(),
            "nbytes": np.repeat(in_b + out_b, reps),
            "attempt": 0,
        }
    )
    return frame[list(schema.COLUMNS)]


def two_backend(
    cpu: Cost = Cost(2e-6, 1e-9),
    cuda: Cost = Cost(5e-6, 1e-11),
    *,
    cpu_backend: str = "cpu_blas",
    cuda_backend: str = "cuda_elementwise",
    **kw: object,
) -> Scenario:
    """The classic case: a CPU backend linear in n, a CUDA backend with a fixed launch cost."""
    return Scenario(costs={cpu_backend: cpu, cuda_backend: cuda}, **kw)  # type: ignore[arg-type]
