"""What a sweep tells its caller: progress as events, and its outcome as a result.

``softcuda.sweep.run`` prints nothing; it hands each event to the caller's callback as it
happens (the command line renders them) and returns a ``SweepResult``.  Plain data, no pandas:
the command line imports this module for ``softcuda --help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from .machine import Machine
from .spec import Spec


@dataclass(frozen=True)
class SweepStarted:
    """The sweep is ready to run: the machine, what it measures, and where its rows go."""

    spec: Spec
    spec_path: str
    machine: Machine
    backends: tuple[str, ...]
    load_average: float | None
    """The host's 1-minute load average at the start (None where it cannot be read)."""
    csv_path: Path
    points: int
    """The planned points; refinement, retries and the scan add more as the sweep goes."""


@dataclass(frozen=True)
class KernelsCompiled:
    """softcuda's CUDA kernels were compiled, before settling (a CUDA sweep only)."""

    seconds: float


@dataclass(frozen=True)
class SettlingStarted:
    """The sweep waits, at most ``limit_s``, for the machine to run at a steady speed."""

    limit_s: float


@dataclass(frozen=True)
class SettlingDone:
    """What settling saw, in one line."""

    summary: str


@dataclass(frozen=True)
class MeasuringStarted:
    points: int


@dataclass(frozen=True)
class PointStarted:
    """One point is about to be measured: every backend of an (op, size) together, or one bus
    size (op ``bus``, size in bytes); ``attempt`` above 0 measures it again."""

    op: str
    size: int
    backends: tuple[str, ...]
    attempt: int
    index: int
    total: int


@dataclass(frozen=True)
class MeasuringDone:
    """Every point is measured (the calibrations and the profile come next)."""


Event = (
    SweepStarted
    | KernelsCompiled
    | SettlingStarted
    | SettlingDone
    | MeasuringStarted
    | PointStarted
    | MeasuringDone
)


@dataclass(frozen=True)
class Stopped:
    """Why a sweep ended before its profile was written.

    ``why``: ``interrupted`` (Ctrl-C), ``compile`` (the CUDA kernels did not compile; nothing
    was measured), ``budget`` (the time budget ran out before every op's sizes were measured),
    ``disk`` (the rows or the metadata could not be written), ``memory`` (the machine ran out
    of memory), or ``unwritten`` (the sweep is complete, its profile could not be decided or
    written).  ``message`` says what happened in one sentence."""

    why: str
    message: str
    started: bool
    """Whether the sweep's CSV was started (else nothing was written)."""
    complete: bool
    """Whether the sweep's metadata says it is complete (then only the profile is missing)."""


@dataclass(frozen=True)
class Skipped:
    """A backend not timed at an op's sizes above ``above``: its median call there,
    ``median_s``, exceeded the spec's ``max_point_s``."""

    op: str
    backend: str
    median_s: float
    above: int


@dataclass(frozen=True)
class Written:
    """A profile decided from a sweep's rows and written."""

    profile: Config
    target: Path
    archived: Path | None
    """Where the profile it replaced went (one of another device, or one that could not be
    read), or None."""
    archived_unreadable: bool
    metric: str
    unstable: dict[str, int]
    """Per measured op, its unstable points under ``metric``."""
    rows: int
    """The raw rows it was decided from."""


@dataclass(frozen=True)
class SweepResult:
    """What ``run`` did: where the rows and the metadata are, how it ended (``stopped`` None:
    finished, its profile ``written``), and what the notes of a finished sweep rest on."""

    spec: Spec
    machine: Machine
    csv_path: Path
    meta_path: Path
    rows: int
    elapsed_s: float | None
    stopped: Stopped | None = None
    written: Written | None = None
    launch: dict[str, Any] | None = None
    launch_error: str | None = None
    """Why the launch calibration failed, where it did (the profile then lacks launch_us)."""
    switch: dict[str, Any] | None = None
    switch_error: str | None = None
    skipped: tuple[Skipped, ...] = ()
    cut: int = 0
    """Points the time budget left out (not measured again, or not scanned)."""
    unrefined: tuple[str, ...] = ()
    """Ops with a boundary still not bracketed within 10% by measured sizes."""
    measured_again: int = 0
    """Points measured again because the host ran off its best speed."""
    attempts_again: int = 0
    waited_s: float = 0.0
    """Spent waiting for the host's best speed before retries."""
