"""Sweep specs: the YAML file that says what the soft_init experiment measures.

A spec is read with ``yaml.safe_load`` and validated into frozen dataclasses.  Every error is a
``SpecError`` whose message is one sentence ``<file>: <key path>: <problem>`` (for YAML syntax
errors and duplicate keys ``<file>:<line>: ...``).  Unknown keys are errors at every level, so
a typo never silently falls back to a default.

Schema (keys marked * are required; the others show their default)::

    name: <str>*                   # label of the sweep, recorded in the metadata
    dtype: float32                 # float32 | float64
    backends: all                  # "all" (every backend available on the machine) or a list of
                                   # backend ids: those of softcuda.backends.BACKENDS
    host_memory: [pinned, pageable]   # non-empty list of schema.HOST_MEMORY_KINDS (CUDA rows)
    metric: e2e_pinned             # selection metric, one of schema.METRICS
    time_budget_s: null            # > 0 seconds the whole sweep should fit in, resumed or
                                   # not, or null (none); past it nothing is measured again
    settle_s: 30                   # >= 0: before measuring, wait at most this long for the
                                   # machine to run fixed workloads at a steady speed
                                   # (sweep/settle.py); 0 measures at once
    scan: 0                        # int 0..8: once the boundaries are refined, measure this many
                                   # sizes on each side of every boundary, select.SCAN_STEP
                                   # (6%) apart, to find where the winners alternate; the
                                   # boundary's interval then covers them (0: don't scan)
    repetitions:
      warmup: 2                    # int >= 0, untimed runs before each measured point
      min_time_s: 0.02             # >= 0, repeat until the measured repetitions sum to this...
      min_reps: 5                  # int >= 1, ...and at least this many repetitions...
      max_reps: 1000               # int >= min_reps, ...but never more than this many
      max_point_s: null            # > 0 or null: once a backend's median repetition of an op
                                   # exceeds this, its larger sizes of that op are skipped
      buffers: 1                   # int 1..8: spread the repetitions of a point over this many
                                   # copies of each plan (own inputs and buffers), so that where
                                   # the data happens to sit in memory averages out; a backend's
                                   # turn then times every copy once.  Points whose data
                                   # exceeds measure.ROTATE_MAX_BYTES use one copy.
      retries: 2                   # int 0..5: measure a point again, at most this many times,
                                   # while its probe read the host off its best speed
                                   # (timings.stats.attempt_parts); points up to
                                   # measure.ROTATE_MAX_BYTES only.  Every attempt's rows are
                                   # kept (column ``attempt``); the steadiest one is read
      retry_wait_s: 30             # >= 0: seconds the sweep may spend in all, before points
                                   # are measured again, waiting for the host's probe to come
                                   # back within 10% of its best time (settle.wait_for_host);
                                   # a point it stays slow for waits for a later pass
      block_s: 5.0e-5              # 0 .. 0.01: a call shorter than this is timed in blocks of
                                   # back-to-back calls lasting about this long, a repetition
                                   # being the block's mean (timers.TIMED_BLOCK_S: the clock's
                                   # own cost paid once a block); 0 times every call alone
    ops:*                          # non-empty mapping, op name -> its sizes; op names from
      matmul:                      # softcuda.ops.PROFILE_OPS, or ``others``: every
        sizes:                     # elementwise op and reduction the spec does not name, in
                                   # the registry's order, at that key's place and sizes.
                                   # The names (ops, then variants, ops.VARIANTS):
{names}
          start: 16                # int >= 1
          stop: 8192               # int >= start
          per_octave: 2            # int >= 1
    bus: false                     # false/absent (no bus calibration) or
                                   # {start_bytes: int >= 1, stop_bytes: int >= start_bytes,
                                   #  per_octave: int >= 1}

Sizes are the ops' size metric (``softcuda.timings.schema``): elementwise ops and reductions count
elements, matmul is the square size n (an n x n by n x n product); a variant's is its own
(``ops.VARIANTS``: n for an n x n sample, matmul_tn's, matmul_nt's and sum_rows' alike).  A
range ``{start, stop, per_octave}`` expands to ``round(start * 2**(k / per_octave))`` for k =
0, 1, ... up to stop, plus stop itself (both ends are inclusive), deduplicated and sorted
ascending.  Integers may be
written with underscores (``268_435_456``), which YAML 1.1 reads as plain ints.

``load_spec(path)`` reads and validates a file; ``spec_from_dict(data, source)`` validates an
already-parsed mapping; ``Spec.to_dict()`` returns the fully resolved plain-data form (JSON
serialisable), and ``spec_from_dict(spec.to_dict()) == spec`` always holds.
"""

from __future__ import annotations

import math
import re
import sys
import textwrap
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from softcuda.backends import BACKENDS
from softcuda.errors import SpecError, cut, excerpt
from softcuda.ops import (
    ELEMENTWISE_OPS,
    PROFILE_OPS,
    REDUCTION_OPS,
    VARIANTS,
    base_op,
)
from softcuda.sweep.timers import TIMED_BLOCK_S
from softcuda.timings import schema

DTYPES = ("float32", "float64")
SCAN_MAX = 8
KNOWN_BACKENDS = tuple(BACKENDS)
SWEEP_OPS: tuple[str, ...] = PROFILE_OPS
OTHERS = "others"
"""The key of a spec's ops that stands for every elementwise op and reduction it does not name
(their sizes all count elements), so that a spec measures an op added to the registry without
naming it."""
ELEMENT_OPS: tuple[str, ...] = ELEMENTWISE_OPS + REDUCTION_OPS

# The schema's op list is the registry's, written in when the module loads.
__doc__ = __doc__.replace(
    "{names}",
    "\n".join(" " * 35 + "# " + line for line in textwrap.wrap(" ".join(PROFILE_OPS), 100 - 37)),
)


@dataclass(frozen=True)
class SizeRange:
    """A geometric range with inclusive ends: ``1 <= start <= stop``, ``per_octave >= 1``."""

    start: int
    stop: int
    per_octave: int

    def values(self) -> tuple[int, ...]:
        """The sizes, ascending and unique; always contains ``start`` and ``stop``."""
        # The step count is computed once with a small tolerance so that a stop that lies on the
        # grid (e.g. 2**28 from 2**8) is not lost to floating-point error.
        steps = math.floor(math.log2(self.stop / self.start) * self.per_octave + 1e-9)
        sizes = {round(self.start * 2.0 ** (k / self.per_octave)) for k in range(steps + 1)}
        sizes.add(self.stop)
        return tuple(sorted(s for s in sizes if s <= self.stop))


BLOCK_S_MAX = 0.01
"""The longest ``repetitions.block_s``: a block is there to share one clock read among calls of a
few microseconds, and a typo of 0.5 would repeat every call shorter than that 64 times."""


def recorded_repetitions(repetitions: Any) -> Any:
    """A sweep's ``repetitions`` as its metadata records them, with what older metadata leaves
    out filled in as those sweeps measured: ``block_s`` 0, every call timed alone.  Anything but
    a mapping is returned as given, for validation to name."""
    return {"block_s": 0.0, **repetitions} if isinstance(repetitions, dict) else repetitions


@dataclass(frozen=True)
class Repetitions:
    """How often one point is run: ``warmup`` untimed, then timed runs until ``min_time_s`` is
    reached and at least ``min_reps`` were taken, never more than ``max_reps``; spread over
    ``buffers`` copies of the point's plans; measured again up to ``retries`` times while
    unsteady, after waiting (``retry_wait_s`` in all) for the host's best speed; a call shorter
    than ``block_s`` timed in blocks of back-to-back calls (``timers.interleaved``)."""

    warmup: int = 2
    min_time_s: float = 0.02
    min_reps: int = 5
    max_reps: int = 1000
    max_point_s: float | None = None
    buffers: int = 1
    retries: int = 2
    retry_wait_s: float = 30.0
    block_s: float = TIMED_BLOCK_S


@dataclass(frozen=True)
class OpSweep:
    """The sizes measured for one op, in its size metric."""

    op: str
    sizes: SizeRange


@dataclass(frozen=True)
class BusSweep:
    """Transfer sizes in bytes for the host<->device bus calibration."""

    bytes: SizeRange


@dataclass(frozen=True)
class Spec:
    """A validated sweep spec.  ``ops`` keeps the file's order; ``backends`` is None for "all"."""

    name: str
    ops: tuple[OpSweep, ...]
    dtype: str = "float32"
    backends: tuple[str, ...] | None = None
    host_memory: tuple[str, ...] = ("pinned", "pageable")
    metric: str = schema.DEFAULT_METRIC
    time_budget_s: float | None = None
    repetitions: Repetitions = Repetitions()
    bus: BusSweep | None = None
    settle_s: float = 30.0
    scan: int = 0

    def points(self) -> Iterator[tuple[str, int]]:
        """Yield (op, size): ops in the spec's order, the matmuls (and their variants) last,
        each op's sizes ascending.

        Op-major order keeps one op's kernels warm across its sizes; ascending sizes let the
        runner apply ``max_point_s`` (skip the rest once a backend gets too slow).  The matmuls
        come last because numpy's BLAS leaves its threads spinning for about 0.1 s after each
        call: measured first, they held the cores while the first elementwise points ran, and
        cpu_threads there read at one core's speed (docs/findings.md, "The CPU side, rebuilt").
        """
        last = [e for e in self.ops if base_op(e.op) == "matmul"]
        for entry in [e for e in self.ops if base_op(e.op) != "matmul"] + last:
            for size in entry.sizes.values():
                yield entry.op, size

    def select_backends(self, available: Iterable[str]) -> tuple[str, ...]:
        """The backends to measure on a machine offering ``available``, in a stable order.

        For "all" that is every available backend; otherwise the listed ones that are available
        (the caller compares with ``self.backends`` to report the ones it had to skip).
        """
        available = tuple(available)
        if self.backends is None:
            return available
        return tuple(b for b in self.backends if b in available)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable form with every default resolved (for the metadata file)."""

        def rng(r: SizeRange, unit: str = "") -> dict[str, int]:
            return {f"start{unit}": r.start, f"stop{unit}": r.stop, "per_octave": r.per_octave}

        reps = self.repetitions
        return {
            "name": self.name,
            "dtype": self.dtype,
            "backends": "all" if self.backends is None else list(self.backends),
            "host_memory": list(self.host_memory),
            "metric": self.metric,
            "time_budget_s": self.time_budget_s,
            "settle_s": self.settle_s,
            "scan": self.scan,
            "repetitions": {
                "warmup": reps.warmup,
                "min_time_s": reps.min_time_s,
                "min_reps": reps.min_reps,
                "max_reps": reps.max_reps,
                "max_point_s": reps.max_point_s,
                "buffers": reps.buffers,
                "retries": reps.retries,
                "retry_wait_s": reps.retry_wait_s,
                "block_s": reps.block_s,
            },
            "ops": {o.op: {"sizes": rng(o.sizes)} for o in self.ops},
            "bus": False if self.bus is None else rng(self.bus.bytes, "_bytes"),
        }


def load_spec(path: str | Path) -> Spec:
    """Read and validate the sweep spec at ``path`` (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: sweep spec does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read ({exc}).") from exc
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise SpecError(f"{path}:{exc.problem_mark.line + 1}: {exc.problem}.") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}{line}: invalid YAML ({exc.problem or exc.context}).") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: invalid YAML ({exc}).") from exc
    except RecursionError:  # PyYAML composes nested collections recursively
        raise SpecError(f"{path}: nests collections too deeply to be read as a spec.") from None
    return spec_from_dict(data, str(path))


def spec_from_dict(data: Any, source: str = "<spec>") -> Spec:
    """Validate an already-parsed spec; ``source`` names it in error messages."""
    v = _Validator(source)
    top = v.mapping(data, "", required=("name", "ops"), optional=_TOP_OPTIONAL)
    name = v.string(top["name"], "name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        # the name becomes part of the raw CSV's file name
        raise v.error("name", f"must be letters, digits, '_', '.' or '-', not {excerpt(name)}")
    dtype = v.choice(top.get("dtype", "float32"), "dtype", DTYPES)
    backends = _backends(v, top.get("backends", "all"))
    host_memory = v.choice_list(
        top.get("host_memory", ["pinned", "pageable"]), "host_memory", schema.HOST_MEMORY_KINDS
    )
    metric = v.choice(top.get("metric", schema.DEFAULT_METRIC), "metric", tuple(schema.METRICS))
    budget = top.get("time_budget_s")
    budget = None if budget is None else v.number(budget, "time_budget_s", positive=True)
    settle = v.number(top.get("settle_s", Spec.settle_s), "settle_s")
    scan = v.integer(top.get("scan", Spec.scan), "scan", 0, maximum=SCAN_MAX)
    reps = _repetitions(v, top.get("repetitions", {}))
    ops = _ops(v, top["ops"])
    bus = _bus(v, top.get("bus", False))
    return Spec(name, ops, dtype, backends, host_memory, metric, budget, reps, bus, settle, scan)


_TOP_OPTIONAL: tuple[str, ...] = (
    "dtype", "backends", "host_memory", "metric", "time_budget_s", "settle_s", "scan",
    "repetitions", "bus",
)  # fmt: skip


def _backends(v: _Validator, value: Any) -> tuple[str, ...] | None:
    if value == "all":
        return None
    if isinstance(value, str):
        raise v.error("backends", f'must be "all" or a list of backend ids, not {excerpt(value)}')
    return v.choice_list(value, "backends", KNOWN_BACKENDS)


def _repetitions(v: _Validator, value: Any) -> Repetitions:
    d = Repetitions()
    m = v.mapping(value, "repetitions", optional=tuple(f.name for f in fields(Repetitions)))
    warmup = v.integer(m.get("warmup", d.warmup), "repetitions.warmup", minimum=0)
    min_time = v.number(m.get("min_time_s", d.min_time_s), "repetitions.min_time_s")
    min_reps = v.integer(m.get("min_reps", d.min_reps), "repetitions.min_reps", minimum=1)
    max_reps = v.integer(m.get("max_reps", d.max_reps), "repetitions.max_reps", minimum=min_reps)
    cap = m.get("max_point_s")
    cap = None if cap is None else v.number(cap, "repetitions.max_point_s", positive=True)
    buffers = v.integer(m.get("buffers", d.buffers), "repetitions.buffers", minimum=1, maximum=8)
    retries = v.integer(m.get("retries", d.retries), "repetitions.retries", minimum=0, maximum=5)
    wait = v.number(m.get("retry_wait_s", d.retry_wait_s), "repetitions.retry_wait_s")
    block = v.number(m.get("block_s", d.block_s), "repetitions.block_s")
    if block > BLOCK_S_MAX:  # (every shorter call would be repeated up to 64 times a repetition)
        raise v.error("repetitions.block_s", f"must be at most {BLOCK_S_MAX:g}, not {block:g}")
    return Repetitions(warmup, min_time, min_reps, max_reps, cap, buffers, retries, wait, block)


def _ops(v: _Validator, value: Any) -> tuple[OpSweep, ...]:
    ops = v.mapping(value, "ops", optional=None)
    if not ops:
        raise v.error("ops", "must name at least one op")
    out = []
    for op, entry in ops.items():
        if op not in SWEEP_OPS and op != OTHERS:
            known = ", ".join((*SWEEP_OPS, OTHERS))
            raise v.error(f"ops.{cut(op)}", f"unknown op (expected one of {known})")
        body = v.mapping(entry, f"ops.{op}", required=("sizes",))
        sizes = _range(v, body["sizes"], f"ops.{op}.sizes", "", op)
        if op != OTHERS:
            out.append(OpSweep(op, sizes))
            continue
        out.extend(OpSweep(other, sizes) for other in ELEMENT_OPS if other not in ops)
    return tuple(out)


def _bus(v: _Validator, value: Any) -> BusSweep | None:
    if value is False or value is None:
        return None
    if not isinstance(value, Mapping):
        raise v.error("bus", "must be false or a mapping {start_bytes, stop_bytes, per_octave}")
    return BusSweep(_range(v, value, "bus", "_bytes"))


# Upper ends that still fit a machine: 2^34 elements (64 GiB of float32 per tensor), matmul
# n = 65536 (16 GiB per operand), 2^36 bytes on the bus; more points per octave than 64 would
# only measure noise.  A variant of matmul takes matmul's; another variant sized by a side (n of
# an n x n sample) the n whose sample's inputs hold at most 2^34 elements each, one sized by its
# elements (softmax's short rows) the elements' (``max_stop``).
MAX_STOP = {"": 1 << 34, "matmul": 1 << 16, "_bytes": 1 << 36}
MAX_PER_OCTAVE = 64


def max_stop(op: str, unit: str = "") -> int:
    """The largest stop a range of `op` (or the bus, `unit` "_bytes") may have."""
    if op in VARIANTS and base_op(op) not in MAX_STOP and VARIANTS[op].work_power > 1:
        dims = max(len(shape) for shape in VARIANTS[op].shapes(1))
        return 1 << (34 // dims)
    return MAX_STOP.get(base_op(op) or unit, MAX_STOP[""])


def _range(v: _Validator, value: Any, where: str, unit: str, op: str = "") -> SizeRange:
    start_key, stop_key = f"start{unit}", f"stop{unit}"
    m = v.mapping(value, where, required=(start_key, stop_key, "per_octave"))
    start = v.integer(m[start_key], f"{where}.{start_key}", minimum=1)
    stop = v.integer(m[stop_key], f"{where}.{stop_key}", minimum=start, floor_name=start_key)
    limit = max_stop(op, unit)
    if stop > limit:
        raise v.error(f"{where}.{stop_key}", f"must be at most {limit}, not {stop}")
    per_octave = v.integer(m["per_octave"], f"{where}.per_octave", minimum=1)
    if per_octave > MAX_PER_OCTAVE:
        raise v.error(f"{where}.per_octave", f"must be at most {MAX_PER_OCTAVE}, not {per_octave}")
    return SizeRange(start, stop, per_octave)


class _Validator:
    """Type checks that raise one-sentence SpecErrors naming ``source`` and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, key: str, problem: str) -> SpecError:
        where = f"{self.source}: {key}" if key else self.source
        return SpecError(f"{where}: {problem}.")

    def mapping(
        self,
        value: Any,
        key: str,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] | None = (),
    ) -> Mapping[str, Any]:
        """A mapping with string keys; ``optional=None`` allows any key (checked by the caller)."""
        if not isinstance(value, Mapping):
            what = "must be a mapping" if key else "the top level must be a mapping"
            raise self.error(key, f"{what}, not {_kind(value)}")
        prefix = f"{key}." if key else ""
        for k in value:
            if not isinstance(k, str):
                raise self.error(f"{prefix}{excerpt(k)}", "keys must be strings")
            if optional is not None and k not in required and k not in optional:
                allowed = ", ".join((*required, *optional))
                raise self.error(f"{prefix}{cut(k)}", f"unknown key (allowed: {allowed})")
        for k in required:
            if k not in value:
                raise self.error(f"{prefix}{k}", "required key is missing")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string, not {_kind(value)}")
        return value

    def choice(self, value: Any, key: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed or not isinstance(value, str):
            raise self.error(key, f"must be one of {', '.join(allowed)}, not {excerpt(value)}")
        return value

    def choice_list(self, value: Any, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.error(key, f"must be a non-empty list, not {_kind(value)}")
        items = tuple(self.choice(x, f"{key}[{i}]", allowed) for i, x in enumerate(value))
        if len(set(items)) != len(items):
            raise self.error(key, "lists an entry twice")
        return items

    def integer(
        self,
        value: Any,
        key: str,
        minimum: int,
        floor_name: str | None = None,
        maximum: int | None = None,
    ) -> int:
        # bool is an int subclass in Python; "true" for a count is a mistake, not 1.
        bound = f"{floor_name} ({minimum})" if floor_name else str(minimum)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"must be an integer >= {bound}, not {excerpt(value)}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be an integer <= {maximum}, not {excerpt(value)}")
        return value

    def number(self, value: Any, key: str, positive: bool = False) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and abs(value) > sys.float_info.max:  # an int, 1 and 400 zeros: no float holds it
            raise self.error(key, f"must be a number of at most 1.8e308, not {excerpt(value)}")
        ok = ok and math.isfinite(value) and (value > 0 if positive else value >= 0)
        if not ok:
            hint = ""
            if isinstance(value, str) and re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", value):
                hint = " (YAML reads an exponent without a dot as text: write 1.0e3 or 1000)"
            raise self.error(
                key, f"must be a number {'>' if positive else '>='} 0, not {excerpt(value)}{hint}"
            )
        return float(value)


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {excerpt(value)}"


MAX_VALUES = 10_000
"""The most values (scalars, lists and mappings) a spec may hold once its aliases are expanded.
A spec holds a few hundred; nested aliases (a "billion laughs") fit in a few hundred bytes on
disk and expand to billions, which any message quoting them, or code walking them, expands
too."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which plain YAML silently resolves to the last,
    aliases that expand beyond MAX_VALUES or refer to themselves, and integers too long for
    Python to read from text."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader's own check reports unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {excerpt(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:  # Python reads at most sys.get_int_max_str_digits() digits
        digits = sum(c.isdigit() for c in node.value)
        raise _Refused(f"an integer of {digits:,} digits is more than a spec needs", node) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _check_expansion(root: yaml.Node) -> None:
    """Count the values of the document at ``root`` as its aliases expand them, each node once
    (an alias is the node it names, so the count is memoised per node, and walked without
    recursion); refuse at the first node whose expansion exceeds MAX_VALUES, or at an alias
    that contains itself."""
    size: dict[int, int] = {}
    walking: set[int] = set()  # the nodes on the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        if counted:
            walking.discard(id(node))
            size[id(node)] = 1 + sum(size[id(n)] for n in _children(node))
            if size[id(node)] > MAX_VALUES:
                raise _Refused(f"aliases expand this to more than {MAX_VALUES:,} values", node)
        elif id(node) in walking:
            raise _Refused("an alias here contains itself", node)
        elif id(node) not in size:
            walking.add(id(node))
            stack.append((node, True))
            stack.extend((n, False) for n in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that no spec needs: reported with its line, not as invalid."""

    def __init__(self, problem: str, node: yaml.Node) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)
