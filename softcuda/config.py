"""CONFIG.soft: the frozen device profile — model, parser, writer, bucket lookup, resolution.

The format is the original design's (docs/design.md, "CONFIG.soft"), and its example parses
verbatim::

    [meta]              soft_version, device_hash, generated_at
    [device]            type (cpu|cuda), compute_capability, vram_mb, and descriptive fields
    [ops]               op | bucket = backend        bucket: any | size < N | size >= N
                                                             | N <= size < M
    [pool]              device (cpu|cuda), block_size, host_memory (pageable|pinned)
    [costs]             op | backend = size:seconds size:seconds ...
    [bus], [sweep]      measurements and provenance written by ``softcuda init``

Rules: every line belongs to a section; sections and keys are known (anything else is an error);
the buckets of one op tile [0, inf) with no gap or overlap; each backend implements its op.
Every error is a ``ConfigError`` naming the file and line.  Comment lines directly above a rule
(no blank line between) are that rule's note — ``softcuda init`` writes the measured times and the
crossover there — and are written back, so ``parse(write(c)) == c``.

``[costs]`` is what a whole-graph planner needs beside the isolated-op rules: per (op, backend)
the measured *resident* median (``timings.schema``: a CPU backend's wall time, a CUDA backend's
kernel alone, the data already where the backend runs) at each swept size, in the op's size
metric, to three significant digits.  Each line is one ``CostCurve``: its op must be one [ops]
could name and its backend must implement it; sizes are positive integers in increasing order,
seconds positive (at most an hour) and finite, at least one point; one line per (op, backend).
A profile without [costs] (DEFAULT.soft, profiles written before it) is valid; ``has_costs``
says which.  This module only reads and writes the figures: ``softcuda.costs`` prices with them.

Wherever [ops] and [costs] name an op they may name one of its variants (``ops.VARIANTS``:
``sum_rows``, ``matmul_tn``, ``matmul_nt``), in the variant's own size metric; a backend
implements a variant iff it implements its op.  A profile without a variant's lines is valid:
the variant is then decided and priced as its op (DEFAULT.soft has none).

[bus] holds the copy fits (``{h2d,d2h}_{pinned,pageable}_{gbps,latency_us}``), the host's time
to issue one GPU step (``launch_us``) and the optional ``switch_us = BYTES:MICROSECONDS ...``
line: what handing a value of that many bytes from the GPU to a CPU step costs beyond its copy
(``softcuda.sweep.switch``), bytes positive integers in increasing order, microseconds finite and
>= 0, at least one pair.

``device_hash = portable`` marks a profile that fits any machine; it is allowed only when every
rule and every cost uses a CPU backend (DEFAULT.soft).  Any other profile is checked against this
machine's hash the first time it is used (``check_device``), and a mismatch warns: no silent
stale configs.

Resolution order (``load_config(None)``): ``$SOFTCUDA_CONFIG``, ``./CONFIG.soft``,
``$XDG_CONFIG_HOME/softcuda/CONFIG.soft`` (``~/.config`` by default), then the packaged
DEFAULT.soft.  A profile that is only *found* (the working directory's or the user's) and was
made on another device is skipped, with one log line on the ``softcuda`` logger naming it: a
repository that carries its reference machine's profile must still run on a laptop.  A profile
that was asked for (a path, ``$SOFTCUDA_CONFIG``) is used as asked; ``check_device`` warns that
it is stale, and a backend it names that this machine lacks fails at compile.  A found profile
that cannot be parsed is an error, never skipped: skipping is for valid profiles of elsewhere.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import secrets
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .backends import BACKENDS
from .device import current_hash
from .errors import ConfigError
from .ops import CHAINS, PROFILE_OPS, VARIANTS, sample_ops
from .pool import DEFAULT_BLOCK_SIZE, HOST_MEMORY_KINDS

log = logging.getLogger(__name__)

PORTABLE_HASH = "portable"
DEFAULT_NAME = "DEFAULT.soft"
SECTION_ORDER = ("meta", "device", "ops", "pool", "costs", "bus", "sweep")
"""The order sections are written in: the design's four first, then the planner's model (node
costs, then copy costs) side by side, then where the profile came from."""
FORMAT_COMMENT = "format: op_name | size_bucket -> backend"
COSTS_COMMENT = (
    "format: op | backend = size:seconds ...  resident medians: CPU backends' wall time, CUDA",
    "backends' kernel alone (their pinned and pageable runs pooled: the kernel never sees",
    "host memory); sizes in the op's size metric",
)
MAX_COST_SIZE = (1 << 63) - 1
"""The largest size a [costs] point may have: the raw CSV's sizes are int64."""
MAX_COST_S = 3600.0
"""The longest a [costs] point may say one op takes: a sweep times ops of at most seconds, and
beyond an hour a figure is a mistake (a unit or an exponent), not a measurement."""
UNMEASURED_NOTE = "not measured by sweep"
"""How a profile's note marks rules copied from DEFAULT.soft for an op its sweep left out."""


def _text(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


def _nonneg_int(value: str) -> int:
    if not re.fullmatch(r"\d+", value):
        raise ValueError(f"must be a non-negative integer, got {value!r}")
    return int(value)


def _positive_int(value: str) -> int:
    if not re.fullmatch(r"\d+", value) or int(value) == 0:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return int(value)


def _block_size(value: str) -> int:
    n = _positive_int(value)
    if n > 1 << 40:
        raise ValueError(f"must be at most {1 << 40} bytes (1 TiB), got {n}")
    return n


def _number(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"must be a number, got {value!r}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"must be a finite number, got {value!r}")
    return x


def _positive_number(value: str) -> float:
    x = _number(value)
    if x <= 0:
        raise ValueError(f"must be a number > 0, got {value!r}")
    return x


def _nonneg_number(value: str) -> float:
    x = _number(value)
    if x < 0:
        raise ValueError(f"must be a number >= 0, got {value!r}")
    return x


@functools.lru_cache(maxsize=16)  # the planner reads the line once per value of a graph
def switch_points(value: str) -> tuple[tuple[int, float], ...]:
    """``[bus] switch_us``: ``BYTES:MICROSECONDS`` pairs, bytes positive integers in increasing
    order, microseconds finite and >= 0, at least one pair."""
    points: list[tuple[int, float]] = []
    for point in value.split():
        nbytes, colon, micro = point.partition(":")
        if not colon or not re.fullmatch(r"\d+", nbytes) or not nbytes.strip("0"):
            raise ValueError(
                f"point {point!r} is not BYTES:MICROSECONDS with BYTES a positive integer"
            )
        if len(nbytes.lstrip("0")) > 19:  # int() refuses thousands of digits
            raise ValueError(f"bytes {nbytes} of point {point!r} are more than any value holds")
        try:
            us = float(micro)
        except ValueError:
            raise ValueError(f"microseconds {micro!r} of point {point!r} is not a number") from None
        if not 0.0 <= us < math.inf:
            raise ValueError(f"microseconds {micro!r} of point {point!r} must be finite and >= 0")
        if points and int(nbytes) <= points[-1][0]:
            raise ValueError(f"bytes must increase, but {point!r} follows {points[-1][0]} bytes")
        points.append((int(nbytes), us))
    if not points:
        raise ValueError("needs at least one BYTES:MICROSECONDS point")
    return tuple(points)


def _version(value: str) -> str:
    if not re.fullmatch(r"\d+\.\d+\.\d+", value):
        raise ValueError(f"must be a version such as 0.1.0, got {value!r}")
    return value


def _utc_time(value: str) -> str:
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value):
        raise ValueError(f"must be a UTC time such as 2026-03-18T09:00:00Z, got {value!r}")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return check


# section -> key -> value parser.  Values are kept as the text written (so that writing gives the
# same bytes back); the parser only validates them.  Typed access goes through properties.
KEYS: dict[str, dict[str, Callable[[str], object]]] = {
    "meta": {
        "soft_version": _version,
        "device_hash": _text,
        "generated_at": _utc_time,
        "hash_string": _text,
    },
    "device": {
        "type": _choice("cpu", "cuda"),
        "name": _text,
        "compute_capability": _number,
        "vram_mb": _nonneg_int,
        "driver_version": _text,
        "cuda_runtime": _text,
        "pcie": _text,
        "device_index": _nonneg_int,
        "cpu_model": _text,
        "cpu_cores": _positive_int,
        "blas": _text,
        "blas_threads": _positive_int,
        "cpu_threads": _positive_int,
        "numpy": _text,
        "cupy": _text,
        "softcuda": _text,
        "kernel_hash": _text,
    },
    "pool": {
        "device": _choice("cpu", "cuda"),
        "block_size": _block_size,
        "host_memory": _choice(*HOST_MEMORY_KINDS),
    },
    "bus": {
        **{
            f"{direction}_{kind}_{what}": check
            for direction in ("h2d", "d2h")
            for kind in ("pinned", "pageable")
            for what, check in (("gbps", _positive_number), ("latency_us", _nonneg_number))
        },
        "launch_us": _nonneg_number,  # the host's time to issue one GPU step (sweep/launch.py)
        # what a GPU->CPU hand-off adds beyond its copy, by the value's bytes (sweep/switch.py)
        "switch_us": switch_points,
    },
    "sweep": {
        "spec": _text,
        "metric": _choice("e2e_pinned", "e2e_pageable", "resident"),
        "dtype": _choice("float32", "float64"),
        "csv": _text,
        "points": _nonneg_int,
        "elapsed_s": _nonneg_number,
    },
}
REQUIRED = {
    "meta": ("soft_version", "device_hash"),
    "device": ("type",),
    "pool": ("device", "block_size"),
}


@dataclass(frozen=True)
class Rule:
    """``op | bucket = backend``: sizes in [lo, hi) go to ``backend`` (hi None = infinity)."""

    op: str
    lo: int
    hi: int | None
    backend: str
    line: int = 0  # where it was read (0 for rules built in code)
    note: tuple[str, ...] = ()  # comment lines written above the rule, without the "# "

    @property
    def bucket(self) -> str:
        if self.lo == 0 and self.hi is None:
            return "any"
        if self.lo == 0:
            return f"size < {self.hi}"
        if self.hi is None:
            return f"size >= {self.lo}"
        return f"{self.lo} <= size < {self.hi}"

    def contains(self, size: int) -> bool:
        return self.lo <= size and (self.hi is None or size < self.hi)

    def __eq__(self, other: object) -> bool:  # where a rule was read is not part of its meaning
        if not isinstance(other, Rule):
            return NotImplemented
        return (self.op, self.lo, self.hi, self.backend, self.note) == (
            other.op,
            other.lo,
            other.hi,
            other.backend,
            other.note,
        )

    def __hash__(self) -> int:
        return hash((self.op, self.lo, self.hi, self.backend, self.note))


@dataclass(frozen=True)
class CostCurve:
    """The resident median seconds of one op on one backend at its measured sizes, readable at
    any size with ``at`` (the interpolation rule is the module docstring's)."""

    op: str
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    line: int = field(default=0, compare=False)  # where it was read (0 for curves built in code)

    def __post_init__(self) -> None:
        if self.op not in PROFILE_OPS:
            raise ValueError(f"unknown op {self.op!r}; known: {', '.join(PROFILE_OPS)}")
        if not self.sizes:
            raise ValueError("needs at least one size:seconds point")
        if len(self.sizes) != len(self.seconds):
            raise ValueError(f"{len(self.sizes)} sizes but {len(self.seconds)} times")
        for size in self.sizes:
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"size {size!r} is not a positive integer")
            if size > MAX_COST_SIZE:
                raise ValueError(f"size {size} is larger than {MAX_COST_SIZE}")
        for before, after in zip(self.sizes, self.sizes[1:]):
            if after <= before:
                raise ValueError(f"sizes must increase, but {after} follows {before}")
        for t in self.seconds:
            if not (isinstance(t, float) and 0.0 < t < math.inf):
                raise ValueError(f"seconds {t!r} is not a positive finite number")
            if t > MAX_COST_S:
                raise ValueError(
                    f"seconds {t!r} is more than an hour for one op; a profile's costs are "
                    "the seconds one op takes"
                )

    @property
    def points(self) -> str:
        """The curve as [costs] writes it: ``size:seconds`` to three significant digits."""
        return " ".join(f"{z}:{t:.2e}" for z, t in zip(self.sizes, self.seconds))


@dataclass
class Config:
    path: str
    meta: dict[str, str] = field(default_factory=dict)
    device: dict[str, str] = field(default_factory=dict)
    rules: dict[str, list[Rule]] = field(default_factory=dict)
    pool: dict[str, str] = field(default_factory=dict)
    costs: dict[str, dict[str, CostCurve]] = field(default_factory=dict)  # op -> backend -> curve
    bus: dict[str, str] = field(default_factory=dict)
    sweep: dict[str, str] = field(default_factory=dict)
    # where the resolution order found it: "given", "$SOFTCUDA_CONFIG", "./CONFIG.soft",
    # "user config" or "packaged default"
    source: str = field(default="given", compare=False)
    # "section.key" -> the line it was read from (for errors found after parsing)
    lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # set by check_device(): the first use compares hashes once, and keeps the answer
    _device_checked: bool = field(default=False, compare=False, repr=False)
    _fits: bool = field(default=True, compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return (
            all(getattr(self, s) == getattr(other, s) for s in SECTION_ORDER if s != "ops")
            and self.rules == other.rules
        )

    # -- typed access --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def device_hash(self) -> str:
        return self.meta.get("device_hash", "")

    @property
    def device_type(self) -> str:
        return self.device.get("type", "cpu")

    @property
    def block_size(self) -> int:
        return int(self.pool.get("block_size", DEFAULT_BLOCK_SIZE))

    @property
    def host_memory(self) -> str:
        return self.pool.get("host_memory", "pageable")

    def unmeasured_ops(self) -> list[str]:
        """The ops whose rules are not this profile's measurement: absent (DEFAULT.soft decides)
        or copied from DEFAULT.soft by ``softcuda init`` (marked with UNMEASURED_NOTE).  A
        variant is listed only where its own rules carry that mark: without lines it is
        decided as its op, which this list already reports if unmeasured."""
        return [
            op
            for op in PROFILE_OPS
            if (op not in self.rules and op not in VARIANTS)
            or any(
                line.startswith(UNMEASURED_NOTE) for r in self.rules.get(op, ()) for line in r.note
            )
        ]

    @property
    def has_costs(self) -> bool:
        """Whether the profile carries [costs] (DEFAULT.soft and older profiles do not)."""
        return bool(self.costs)

    def lookup(self, op: str, size: int) -> Rule | None:
        """The rule whose bucket holds ``size`` for ``op``, or None if the op has no rules."""
        for rule in self.rules.get(op, ()):
            if rule.contains(size):
                return rule
        return None

    def fits_here(self) -> tuple[bool, str]:
        """Whether this profile was made on this machine (a portable one fits anywhere), and
        what this machine is."""
        if self.device_hash == PORTABLE_HASH:
            return True, "portable profile"
        here, why = current_hash(self.device_type, int(self.device.get("device_index", 0)))
        return here == self.device_hash, why

    def check_device(self) -> bool:
        """Compare the recorded device hash with this machine's, once; warn on a mismatch."""
        if self._device_checked:
            return self._fits
        self._device_checked = True
        fits, why = self.fits_here()
        self._fits = fits
        if fits:
            return True
        warnings.warn(
            f"{self.path}: device_hash does not match this machine ({why}); the profile was "
            f"made on another device — re-run `softcuda init`",
            StaleConfigWarning,
            stacklevel=2,
        )
        return False

    @property
    def made_on(self) -> str:
        """The device a profile describes, in a few words."""
        return self.device.get("name") or self.device.get("cpu_model") or self.device_type


class StaleConfigWarning(UserWarning):
    """A CONFIG.soft whose device hash is not this machine's."""


# ---- parsing ------------------------------------------------------------------------------------

_BUCKET_PATTERNS = (
    (re.compile(r"any"), lambda m: (0, None)),
    (re.compile(r"size\s*<\s*(\d+)"), lambda m: (0, int(m[1]))),
    (re.compile(r"size\s*>=\s*(\d+)"), lambda m: (int(m[1]), None)),
    (re.compile(r"(\d+)\s*<=\s*size\s*<\s*(\d+)"), lambda m: (int(m[1]), int(m[2]))),
)


def _parse_bucket(text: str) -> tuple[int, int | None]:
    for pattern, bounds in _BUCKET_PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            lo, hi = bounds(match)
            if hi is not None and hi <= lo:
                raise ValueError(f"bucket {text!r} is empty or inverted ({lo} >= {hi})")
            return lo, hi
    raise ValueError(f"bucket {text!r} is not one of: any, size < N, size >= N, N <= size < M")


def parse_config(text: str, path: str = "<string>") -> Config:
    """Parse CONFIG.soft text; every problem raises ConfigError(path, line, ...)."""
    config = Config(path=str(path))
    section: str | None = None
    pending_note: list[str] = []
    section_lines: dict[str, int] = {}  # section -> its header's line, in the order seen
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if "\x00" in raw or any(ord(c) < 32 and c not in "\t\r" for c in raw):
            raise ConfigError(path, lineno, "binary data where text was expected")
        line = raw.strip()
        if not line:
            pending_note = []
            continue
        if line.startswith("#"):
            # the format reminder is the writer's own header, never a rule's note
            if section == "ops" and line[1:].strip() != FORMAT_COMMENT:
                pending_note.append(line[1:].strip())
            continue
        if line.startswith("["):
            section = _parse_header(path, lineno, line, section_lines)
            pending_note = []
            continue
        if section is None:
            raise ConfigError(path, lineno, f"line {line!r} is outside any section")
        if section == "ops":
            rule = _parse_rule(path, lineno, line, tuple(pending_note), BACKENDS)
            config.rules.setdefault(rule.op, []).append(rule)
            pending_note = []
        elif section == "costs":
            _add_cost(config, path, lineno, line)
        else:
            _add_key(config, path, lineno, line, section)
    _check_tiling(config)
    _check_required(config, path, text, section_lines)
    if config.device_hash == PORTABLE_HASH:
        _check_portable(config, path)
    return config


def _parse_header(path: str, lineno: int, line: str, section_lines: dict[str, int]) -> str:
    """A ``[section]`` line -> the section's name, recorded in ``section_lines`` with its line
    (where a missing key is reported).  Only known sections, each once: a misspelt or repeated
    header would otherwise file its lines silently under the wrong section."""
    match = re.fullmatch(r"\[\s*([A-Za-z_]+)\s*\]", line)
    if not match:
        raise ConfigError(path, lineno, f"malformed section header {line!r}")
    section = match[1]
    if section not in SECTION_ORDER:
        raise ConfigError(
            path,
            lineno,
            f"unknown section [{section}]; known: " + ", ".join(f"[{s}]" for s in SECTION_ORDER),
        )
    if section in section_lines:
        raise ConfigError(path, lineno, f"section [{section}] appears twice")
    section_lines[section] = lineno
    return section


def _add_cost(config: Config, path: str, lineno: int, line: str) -> None:
    """A [costs] line into ``config.costs``: one curve per (op, backend), since a second would
    silently replace the first's figures."""
    curve, backend = _parse_cost(path, lineno, line, BACKENDS)
    earlier = config.costs.get(curve.op, {}).get(backend)
    if earlier is not None:
        raise ConfigError(
            path,
            lineno,
            f"[costs] {curve.op} on {backend} appears twice (first at line {earlier.line})",
        )
    config.costs.setdefault(curve.op, {})[backend] = curve


def _add_key(config: Config, path: str, lineno: int, line: str, section: str) -> None:
    """A ``key = value`` line of a plain section ([meta], [device], [pool], [bus], [sweep]):
    the key known and new, the value valid (``KEYS``) but kept as written, so that writing the
    profile gives the same bytes back; its line is kept for errors found after parsing."""
    key, sep, value = line.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise ConfigError(path, lineno, f"expected 'key = value' in [{section}], got {line!r}")
    if key not in KEYS[section]:
        raise ConfigError(
            path,
            lineno,
            f"unknown key {key!r} in [{section}]; known: " + ", ".join(KEYS[section]),
        )
    values: dict[str, str] = getattr(config, section)
    if key in values:
        raise ConfigError(path, lineno, f"key {key!r} appears twice in [{section}]")
    try:
        KEYS[section][key](value)
    except ValueError as exc:
        raise ConfigError(path, lineno, f"[{section}] {key}: {exc}") from None
    values[key] = value
    config.lines[f"{section}.{key}"] = lineno


def _check_required(config: Config, path: str, text: str, section_lines: dict[str, int]) -> None:
    """Every ``REQUIRED`` section and key present: checked after the whole text, since a section
    may come anywhere.  A missing section is reported at the last line (where it could be
    added), a missing key at its section's header."""
    last_line = text.count("\n") + (0 if text.endswith("\n") else 1)
    for name, keys in REQUIRED.items():
        if name not in section_lines:
            raise ConfigError(
                path,
                max(last_line, 1),
                f"the required section [{name}] is missing (it needs {', '.join(keys)})",
            )
        for key in keys:
            if key not in getattr(config, name):
                raise ConfigError(
                    path, section_lines[name], f"[{name}] is missing the required key {key!r}"
                )


def _check_portable(config: Config, path: str) -> None:
    """A ``device_hash = portable`` profile names CPU backends only (module docstring): it is
    never checked against a machine's hash, so nothing else would warn that one lacks a GPU."""
    for rules in config.rules.values():
        for rule in rules:
            if BACKENDS[rule.backend].device != "cpu":
                raise ConfigError(
                    path,
                    rule.line,
                    f"device_hash = {PORTABLE_HASH} is only "
                    f"allowed for CPU backends, but {rule.op} uses "
                    f"{rule.backend}",
                )
    for op, curves in config.costs.items():
        for backend, curve in curves.items():
            if BACKENDS[backend].device != "cpu":
                raise ConfigError(
                    path,
                    curve.line,
                    f"device_hash = {PORTABLE_HASH} is only allowed for CPU backends, but "
                    f"[costs] has {op} on {backend}",
                )


def _parse_rule(path: str, lineno: int, line: str, note: tuple[str, ...], backends) -> Rule:
    left, sep, backend = line.rpartition("=")
    op, bar, bucket = left.partition("|")
    op, bucket, backend = op.strip(), bucket.strip(), backend.strip()
    if not sep or not bar or not op or not backend:
        raise ConfigError(path, lineno, f"expected 'op | bucket = backend', got {line!r}")
    _check_pair(path, lineno, op, backend, backends)
    try:
        lo, hi = _parse_bucket(bucket)
    except ValueError as exc:
        raise ConfigError(path, lineno, str(exc)) from None
    return Rule(op, lo, hi, backend, lineno, note)


def _check_pair(path: str, lineno: int, op: str, backend: str, backends) -> None:
    """An [ops] rule's or a [costs] line's op and backend: both known, the op implemented."""
    if op not in PROFILE_OPS:
        raise ConfigError(path, lineno, f"unknown op {op!r}; known: {', '.join(PROFILE_OPS)}")
    if backend not in backends:
        raise ConfigError(
            path, lineno, f"unknown backend {backend!r}; known: " + ", ".join(backends)
        )
    if op not in backends[backend].ops:
        raise ConfigError(path, lineno, f"backend {backend} does not implement {op}")


def _parse_cost(path: str, lineno: int, line: str, backends) -> tuple[CostCurve, str]:
    """``op | backend = size:seconds ...`` -> (its curve, the backend)."""
    left, sep, points = line.partition("=")
    op, bar, backend = left.partition("|")
    op, backend = op.strip(), backend.strip()
    if not sep or not bar or not op or not backend:
        raise ConfigError(
            path, lineno, f"expected 'op | backend = size:seconds ...' in [costs], got {line!r}"
        )
    _check_pair(path, lineno, op, backend, backends)
    where = f"[costs] {op} on {backend}"
    sizes: list[int] = []
    seconds: list[float] = []
    for point in points.split():
        size, colon, time = point.partition(":")
        if not colon:
            raise ConfigError(path, lineno, f"{where}: point {point!r} is not size:seconds")
        if not re.fullmatch(r"\d+", size):
            raise ConfigError(
                path, lineno, f"{where}: size {size!r} of point {point!r} is not a positive integer"
            )
        if len(size.lstrip("0")) > len(str(MAX_COST_SIZE)):  # int() refuses thousands of digits
            raise ConfigError(path, lineno, f"{where}: size {size} is larger than {MAX_COST_SIZE}")
        try:
            t = float(time)
        except ValueError:
            raise ConfigError(
                path, lineno, f"{where}: seconds {time!r} of point {point!r} is not a number"
            ) from None
        sizes.append(int(size))
        seconds.append(t)
    try:
        return CostCurve(op, tuple(sizes), tuple(seconds), lineno), backend
    except ValueError as exc:
        raise ConfigError(path, lineno, f"{where}: {exc}") from None


def _check_tiling(config: Config) -> None:
    """Each op's buckets must cover [0, inf) exactly once."""
    for op, rules in config.rules.items():
        ordered = sorted(rules, key=lambda r: r.lo)
        expected = 0
        for rule in ordered:
            if rule.lo > expected:
                raise ConfigError(
                    config.path,
                    rule.line,
                    f"{op}: sizes {expected} <= size < "
                    f"{rule.lo} have no bucket (gap before '{rule.bucket}')",
                )
            if rule.lo < expected:
                raise ConfigError(
                    config.path,
                    rule.line,
                    f"{op}: bucket '{rule.bucket}' overlaps sizes below {expected}",
                )
            if rule.hi is None:
                if rule is not ordered[-1]:
                    nxt = ordered[ordered.index(rule) + 1]
                    raise ConfigError(
                        config.path,
                        nxt.line,
                        f"{op}: bucket '{nxt.bucket}' overlaps '{rule.bucket}'",
                    )
                expected = -1
                break
            expected = rule.hi
        if expected != -1:
            raise ConfigError(
                config.path, ordered[-1].line, f"{op}: sizes >= {expected} have no bucket"
            )
        config.rules[op] = ordered


def load_config(path: str | os.PathLike[str] | None = None, *, announce: bool = False) -> Config:
    """Read and validate a CONFIG.soft; ``None`` follows the resolution order (module
    docstring), skipping a found profile of another device.  A skip is logged once per process
    (a library user compiling in a loop hears it once), or every time with ``announce``."""
    if path is not None:
        return _read(Path(path), "given")
    env = os.environ.get("SOFTCUDA_CONFIG")
    if env:
        return _read(Path(env), "$SOFTCUDA_CONFIG")
    skipped: list[tuple[Config, str]] = []
    for candidate, source in (
        (Path("CONFIG.soft"), "./CONFIG.soft"),
        (user_config_path(), "user config"),
    ):
        if not candidate.is_file():
            continue
        config = _read(candidate, source)
        fits, why = config.fits_here()
        if fits:
            config._device_checked = True
            return _skipped(skipped, config, announce)
        skipped.append((config, why))
    return _skipped(skipped, default_config(), announce)


def _skipped(skipped: list[tuple[Config, str]], used: Config, announce: bool) -> Config:
    """Log each skipped profile, naming the one used instead."""
    for config, why in skipped:
        key = (os.path.abspath(config.path), config.device_hash, used.path)
        if key in _SKIP_NOTICES and not announce:
            continue
        _SKIP_NOTICES.add(key)
        instead = "the packaged DEFAULT.soft" if used.source == "packaged default" else used.path
        log.warning(
            "%s: skipped, a profile of another device (%s; %s); using %s",
            config.path,
            config.made_on,
            why,
            instead,
        )
    return used


_SKIP_NOTICES: set[tuple[str, str, str]] = set()  # (profile, its hash, used instead) logged


MAX_CONFIG_BYTES = 4 << 20
"""A profile with a note above every rule is tens of kilobytes; anything past this is not one."""


def _read(path: Path, source: str) -> Config:
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would hang, /dev/zero never end
            raise ConfigError(str(path), None, "is not a regular file")
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read the file ({exc.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            str(path), None, f"is larger than {MAX_CONFIG_BYTES} bytes: not a CONFIG.soft"
        )
    try:
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is not content
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        what = "binary data" if b"\0" in data else "text that is not UTF-8"
        raise ConfigError(str(path), line, f"{what} where UTF-8 text was expected") from None
    config = parse_config(text, str(path))
    config.source = source
    return config


def default_config_path() -> Path:
    return Path(str(resources.files("softcuda").joinpath(DEFAULT_NAME)))


def default_config() -> Config:
    """The packaged DEFAULT.soft: every op on a CPU backend; fits any machine."""
    return _read(default_config_path(), "packaged default")


@functools.lru_cache(maxsize=1)
def packaged_default() -> Config:
    """DEFAULT.soft read once, shared (not to be changed): the rule of an op that a profile
    leaves out, looked up while compiling."""
    return default_config()


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "softcuda" / "CONFIG.soft"


def as_config(config: Config | str | os.PathLike[str] | None) -> Config:
    if config is None or isinstance(config, (str, os.PathLike)):
        return load_config(config)
    if isinstance(config, Config):
        return config
    raise ConfigError(
        "config", None, f"expected a path, a Config or None, got {type(config).__name__}"
    )


# ---- writing ------------------------------------------------------------------------------------


def format_config(config: Config, header: tuple[str, ...] = ()) -> str:
    """The text of ``config``; ``parse_config(format_config(c)) == c``."""
    out: list[str] = [f"# {line}" for line in header]
    if header:
        out.append("")
    for section in SECTION_ORDER:
        if section == "ops":
            out.append("[ops]")
            out.append(f"# {FORMAT_COMMENT}")
            out.append("")
            for op in sorted(config.rules):
                for rule in config.rules[op]:
                    out.extend(f"# {line}".rstrip() for line in rule.note)
                    out.append(f"{op} | {rule.bucket} = {rule.backend}")
            out.append("")
            continue
        if section == "costs":
            out.extend(_format_costs(config.costs))
            continue
        values: dict[str, str] = getattr(config, section)
        if not values and section not in REQUIRED:
            continue
        out.append(f"[{section}]")
        width = max((len(k) for k in values), default=0)
        out.extend(f"{key.ljust(width)} = {value}" for key, value in values.items())
        out.append("")
    return "\n".join(out)


OP_WIDTH = max(len(op) for op in PROFILE_OPS)
BACKEND_WIDTH = max(len(b) for b in BACKENDS)


def _format_costs(costs: dict[str, dict[str, CostCurve]]) -> list[str]:
    """[costs], one line per (op, backend): ops by name, backends in the registry's order.
    The columns are as wide as the longest names the registries hold, not this profile's, so
    that a profile that gains a backend changes its own lines only."""
    if not costs:
        return []
    out = ["[costs]", *(f"# {line}" for line in COSTS_COMMENT), ""]
    for op in sorted(costs):
        for backend in sorted(costs[op], key=list(BACKENDS).index):
            curve = costs[op][backend]
            out.append(f"{op.ljust(OP_WIDTH)} | {backend.ljust(BACKEND_WIDTH)} = {curve.points}")
    out.append("")
    return out


def write_config(
    config: Config, path: str | os.PathLike[str], header: tuple[str, ...] = ()
) -> None:
    """Write atomically: a temporary file beside the target, then a rename."""
    text = format_config(config, header)
    parse_config(text, str(path))  # never write what we could not read back
    target = Path(path)
    tmp = str(target.parent / f".CONFIG.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # made as an ordinary file is (0666 less the umask; mkstemp's 0600 would make the profile
    # private), then given the mode of the file it replaces
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if target.exists():
            os.fchmod(fd, stat.S_IMODE(target.stat().st_mode))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def rules_config(assignments: dict[str, str]) -> Config:
    """An in-memory profile sending every size of each op to one backend (checks, sweeps,
    benchmarks).  Ops not named fall back to DEFAULT.soft, as for any profile."""
    for op, backend in assignments.items():
        if backend not in BACKENDS or op not in BACKENDS[backend].ops:
            where = f"<{op} on {backend}>"
            raise ConfigError(where, None, f"backend {backend} does not implement {op}")
    config = Config(
        path="<" + ", ".join(f"{op} on {b}" for op, b in assignments.items()) + ">",
        meta={"soft_version": "0.1.0", "device_hash": PORTABLE_HASH},
        device={"type": "cpu"},
        rules={op: [Rule(op, 0, None, backend)] for op, backend in assignments.items()},
        pool={"device": "cpu", "block_size": str(DEFAULT_BLOCK_SIZE)},
    )
    config._device_checked = True  # made for this machine, by this process
    return config


def single_rule_config(op: str, backend: str) -> Config:
    """``rules_config`` sending ``op`` (or a variant) to ``backend``, with every op its sample
    is built of (``ops.sample_ops``: a chain variant's).  A chain on a CUDA backend gets a
    CUDA machine's [device], since a plan fuses the GPU's groups only under one
    (``fuse.fusing_devices``): a single op's sample keeps the CPU's, which fuses nothing."""
    config = rules_config(dict.fromkeys(sample_ops(op), backend))
    if op in CHAINS and BACKENDS[backend].device == "cuda":
        config.device["type"] = "cuda"
    return config
