"""Measuring one point: its inputs, its one-op plans, their timings as raw CSV rows.

A point is an op at one size; ``time_point`` times it on the backends it is given, through
softcuda's own plans:

* CPU backends: ``Plan.evaluate`` on the host clock (phase ``wall``);
* CUDA backends, once per host memory kind (pageable, pinned): ``Plan.evaluate`` end to end
  (host arrays in, host result out, synchronized; phase ``end_to_end``), then each step on its own
  with CUDA events (``Plan.profile``): the baked host->device copies (``h2d``), the kernel
  (``kernel``) and the device->host copy (``d2h``).

Each plan gets fresh leaves copied from one master array per input position (``point_inputs``): its
own data, so no plan's timing depends on where another plan left it in the caches.  Above
ROTATE_MAX_BYTES, where each copy would be a large allocation, a point's plans share one set of
leaves; above the host's last-level cache (``hot_max_bytes``) they are timed cold.
``time_bus`` calibrates the bus with plain copies between a host buffer (pinned and pageable) and
device memory, both ways. What to measure, and when, is the runner's (``softcuda.sweep.runner``);
this module only measures what it is handed and returns the rows (``softcuda.timings.schema``),
one per repetition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np

import softcuda as sc

from .. import backends
from ..backends.cuda_transfer import make_transfer
from ..check import lazy_op
from ..config import Config, single_rule_config
from ..errors import SoftcudaError
from ..graph import Plan
from ..graph import compile as compile_graph
from ..ops import (
    CHAINS,
    OPS,
    VARIANTS,
    base_op,
    byte_count,
    sample_form,
    sample_graph,
    sample_members,
    sample_shape,
    variant_sample,
)
from ..pool import leaf_pool
from ..tensor import Tensor
from ..timings import schema
from .machine import Machine
from .settle import probe
from .spec import Spec
from .timers import interleaved, repeat

PROFILE_REPS = 25
"""At most this many event-timed repetitions of each copy's phases (h2d, kernel, d2h): with
every step gated they repeat closely, far more closely than the host-clock phases
(docs/findings.md, "Stability"), so more would buy little, and each gated step costs the gate's
spin."""

ROTATE_MAX_BYTES = 64 << 20
"""A point whose data (inputs and output) exceeds this is measured on one copy of each plan, not
``repetitions.buffers``: each copy would cost a large allocation (pinning GiBs takes seconds).
For the same reason its plans read one set of input leaves rather than one each: a leaf is a
fresh allocation filled from the master, and at 2^28 elements the default sweep's plans copied
8 GiB of inputs per point, 150 GiB in a sweep.  Whether it is timed hot is ``hot_max_bytes``'s."""

SYS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache(root: Path = SYS_CACHES) -> int:
    """The bytes of the host's largest cache as Linux describes it under ``root`` (cpu0's
    ``index*/size``, "307200K" on the H200's host); 0 where it says nothing readable."""
    largest = 0
    for size in root.glob("index*/size"):
        try:
            text = size.read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if scale > 1 else text
        if digits.isdigit():
            largest = max(largest, int(digits) * scale)
    return largest


@cache
def hot_max_bytes() -> int:
    """The most data (inputs and output) a point may have and still be timed hot
    (``timers.interleaved``): the host's last-level cache (``last_level_cache``), and at least
    ROTATE_MAX_BYTES.  Data that fits it stays there from one run of a plan to the next, as in
    a plan used again and again; timed cold, each call first paid for what the other backends'
    calls evicted, and a large cache made that a large error (``extra/large_cpu.py``)."""
    return max(ROTATE_MAX_BYTES, last_level_cache())


@dataclass(frozen=True)
class Point:
    """One unit of work: an op at one size on every backend ("*"), or a bus size ("bus")."""

    op: str
    size: int
    backend: str
    attempt: int = 0  # 1, 2, ...: measured again (``Sweep._retries``)


class Noise:
    """Standard normal values for the points' inputs, drawn once per sweep and handed out as
    views, one array per input position (a second operand never aliases the first).

    Drawing them afresh for every point and attempt was one of the largest costs of a sweep
    (a large draw pays for the values and for the page faults of a new array; docs/findings.md,
    "Where the sweep's time goes"), and the timings depend on the values' distribution, not on
    which values they are.
    Each array is drawn at ``capacity`` elements (or more where a point asks for more), so a
    sweep draws each once however its sizes come."""

    def __init__(self, rng: np.random.Generator, capacity: int = 0) -> None:
        self.rng = rng
        self.capacity = int(capacity)
        self._arrays: dict[tuple[int, str], np.ndarray] = {}

    def take(self, position: int, count: int, dtype: np.dtype) -> np.ndarray:
        """``count`` values (a read-only view) for input ``position`` of a point."""
        key = (position, np.dtype(dtype).str)
        values = self._arrays.get(key)
        if values is None or values.size < count:
            values = self.rng.standard_normal(max(count, self.capacity), dtype=dtype)
            values.flags.writeable = False
            self._arrays[key] = values
        return values[:count]


def point_shapes(op: str, size: int) -> tuple[list[tuple[int, ...]], tuple[int, ...], str]:
    """The input shapes (of the leaves), the output shape and the shape text of one point of
    ``op``; a variant's are its sample's (``ops.variant_sample``), the text of its op's kind
    (MxKxN for a product, the input's shape for a reduction)."""
    if op in VARIANTS:
        stored, shapes, out = variant_sample(op, size)
        if OPS[base_op(op)].kind == "matmul":
            text = f"{shapes[0][0]}x{shapes[0][1]}x{shapes[1][1]}"
        else:
            text = "x".join(map(str, shapes[0]))
        return stored, out, text
    kind = OPS[op].kind
    if kind == "matmul":
        return [(size, size), (size, size)], (size, size), f"{size}x{size}x{size}"
    if kind == "reduction":
        return [(size,)] * OPS[op].arity, (), str(size)
    shape = sample_shape(op, size)  # rows for an op along an axis (softmax)
    return [shape] * OPS[op].arity, shape, "x".join(map(str, shape))


def in_domain(domain: str, x: np.ndarray) -> np.ndarray:
    """Standard normal ``x`` moved into an op's input domain (softcuda.ops.OpDef.domain)."""
    if domain == "positive":  # log, pow: away from zero and its poles
        return np.abs(x) + x.dtype.type(0.1)
    if domain == "nonzero":  # div: no division by zero, either sign
        return np.copysign(np.abs(x) + x.dtype.type(0.1), x)
    return x


def point_inputs(
    op: str, size: int, dtype: np.dtype, noise: Noise
) -> tuple[list[np.ndarray], str, int]:
    """Master input arrays (read-only views of ``noise``), the shape text and the bytes
    crossing the bus for one point."""
    shapes, out_shape, shape_text = point_shapes(op, size)
    masters = []
    for position, shape in enumerate(shapes):
        x = noise.take(position, int(np.prod(shape)), dtype).reshape(shape)
        masters.append(in_domain(OPS[base_op(op)].domain, x))
    return masters, shape_text, byte_count(shapes, out_shape, dtype.itemsize)


def one_op_graph(op: str, masters: list[np.ndarray], leaves: list[Tensor] | None = None) -> Tensor:
    """``op`` applied to fresh leaves copied from ``masters`` (or to ``leaves``, made so); a
    variant is its op applied to its sample: transposed inputs read as transpose views of
    their leaves, its attributes, a chain's terms (``ops.VARIANTS``, ``ops.sample_graph``)."""
    if leaves is None:
        leaves = [sc.tensor(m) for m in masters]
    base, _, flips = sample_form(op)
    # swept along its rows (point_shapes)
    attrs = {"axis": -1} if OPS[base].sample_row else {}
    flips = flips + (False,) * len(leaves)
    leaves = [leaf.T if flip else leaf for leaf, flip in zip(leaves, flips)]
    return sample_graph(op, leaves, lazy_op, **attrs)


def compile_plan(out: Tensor, config: Config, host_memory: str) -> Plan:
    """The plan that a point times: ``out`` compiled with ``config``, its host data in
    ``host_memory``."""
    return compile_graph(out, config, host_memory=host_memory)


def rows(
    machine: Machine,
    point: Point,
    shape: str,
    dtype: str,
    host_memory: str,
    phase: str,
    reps: list[float],
    nbytes: int,
) -> list[tuple]:
    """One raw row (``schema.COLUMNS``) per repetition in ``reps``."""
    return [
        (
            schema.SCHEMA_VERSION,
            machine.device_hash,
            machine.label,
            point.op,
            point.size,
            shape,
            dtype,
            point.backend,
            host_memory,
            phase,
            i,
            schema.kept(s),
            nbytes,
            point.attempt,
        )
        for i, s in enumerate(reps)
    ]


def time_point(
    point: Point,
    todo: list[str],
    spec: Spec,
    machine: Machine,
    noise: Noise,
    probing: bool,
) -> tuple[list[tuple], dict[str, float]]:
    """Time the backends ``todo`` at one (op, size), repetitions interleaved; with ``probing``,
    the host's speed too.  Returns the rows and, per backend, its median call in its slowest
    host memory kind (what ``max_point_s`` is held against).

    All the point's plans are built first (``buffers`` copies of each, with their own
    inputs and buffers, while the point's data is under ROTATE_MAX_BYTES; above it one plan
    of each, on one set of input leaves); each round then
    runs every plan once, in an order that rotates from round to round, until each has its
    repetitions.  Drift (clocks, a busy neighbour) then lands on every backend alike instead
    of on whichever was measured last — the comparison is what the profile is made of — and
    where a copy's data happens to sit in memory averages out over the copies.  Under
    ``hot_max_bytes`` (the last-level cache) each timed call follows an untimed call of the
    same plan, so its data is as hot in the caches as it will go: a state every run
    reproduces.  One more group,
    ``settle.probe``, times a fixed workload in the same rounds: its rows (backend
    "machine", phase "probe") record how fast the host ran while the point was measured.
    """
    dtype = np.dtype(spec.dtype)
    masters, shape, nbytes = point_inputs(point.op, point.size, dtype, noise)
    reps_policy = spec.repetitions
    small = nbytes <= ROTATE_MAX_BYTES
    copies = reps_policy.buffers if small else 1
    out: list[tuple] = []
    slowest: dict[str, float] = {}
    try:
        shared = None if small else [sc.tensor(m) for m in masters]  # (see ROTATE_MAX_BYTES)
        plans = _point_plans(point.op, todo, spec, masters, shared, copies)
        groups = [[partial(plan.evaluate, copy=False) for plan in p[3]] for p in plans]
        if probing:
            groups.append([probe])  # the host's speed, timed in the same rounds
        # hot while the data fits the last-level cache; above it, it streams either way
        hot = nbytes <= hot_max_bytes()
        elements = max(m.size for m in masters)
        settle = [_settle(p[0], point.op, elements) for p in plans] + [None] * int(probing)
        times = interleaved(
            groups,
            reps_policy,
            hot=hot,
            riders=int(probing),
            settle=settle,
            block_s=reps_policy.block_s,
        )
        if probing:
            host_speed = times.pop()[0]
            host = Point(point.op, point.size, schema.PROBE_BACKEND, point.attempt)
            out += rows(
                machine, host, "16384", "float32", "pageable", schema.PROBE_PHASE, host_speed, 0
            )
        for (backend, kind, phase, group), series in zip(plans, times):
            reps = _rounds(series)
            p = Point(point.op, point.size, backend, point.attempt)
            out += rows(machine, p, shape, dtype.name, kind, phase, reps, nbytes)
            kept = [schema.kept(r) for r in reps]  # as the rows keep them
            slowest[backend] = max(slowest.get(backend, 0.0), float(np.median(kept)))
            if phase == "end_to_end":
                for name, summed in _step_phases(group, series):
                    out += rows(machine, p, shape, dtype.name, kind, name, summed, nbytes)
        del plans
    finally:
        leaf_pool().reset()  # this point's leaves are done with: release them at once
    return out, slowest


def _settle(backend: str, op: str, elements: int):
    """What runs before each timed call of ``backend``'s plans of ``op`` over ``elements``:
    for a cpu_threads kernel that spreads over the pool's threads, the pool woken and waited
    for (``native.ready``), so that a timed call runs on spinning threads as a plan's
    back-to-back steps do; None for any other.  A kernel too small for a second thread (and
    cpu_threads' matmul, which is numpy's) runs alone in a plan: waking the pool for it timed
    it beside fifteen spinning threads, and on the H100 host's 16 vCPUs an add of 1024
    elements read 4.1 to 4.4 us where it takes 2.4 in a plan."""
    if backend != "cpu_threads" or OPS[base_op(op)].kind == "matmul":
        return None
    from ..backends import native
    from ..backends.cpu_threads import default_threads

    threads = default_threads()
    if native.team(elements * _weight(op), elements, threads) <= 1:
        return None
    return partial(native.ready, threads)


def _weight(op: str) -> int:
    """Simple ops an element of ``op``'s sample counts as (``native.weight``): a chain's, its
    fused group's, every member's (as the group's kernel counts them)."""
    from ..backends import native

    return sum(native.weight(name) for name in sample_members(op))


def _point_plans(
    op: str,
    todo: list[str],
    spec: Spec,
    masters: list[np.ndarray],
    shared: list | None,
    copies: int,
) -> list[tuple[str, str, str, list]]:
    """(backend, host memory kind, phase, [plan per copy]) of each plan of one point: a CPU
    backend's from pageable memory, timed on the wall clock; a CUDA backend's from each of the
    spec's host memory kinds, timed end to end."""
    plans = []
    for backend in todo:
        config = single_rule_config(op, backend)
        kinds: tuple[str, ...]
        if backends.BACKENDS[backend].device == "cpu":
            kinds, phase = ("pageable",), "wall"
        else:
            kinds, phase = spec.host_memory, "end_to_end"
        for kind in kinds:
            group = [
                compile_plan(one_op_graph(op, masters, shared), config, kind) for _ in range(copies)
            ]
            if op in CHAINS:
                _one_group(op, backend, group[0])
            plans.append((backend, kind, phase, group))
    return plans


def _one_group(op: str, backend: str, plan: Plan) -> None:
    """Raise unless ``plan``, a chain's sample, runs it as one fused group: a chain's curve
    prices one more heavy member of a group, and measured as separate kernels it would not."""
    groups = [step for step in plan.steps if step.group is not None]
    members = len(sample_members(op))
    if len(groups) != 1 or len(groups[0].group.members) != members:
        raise SoftcudaError(
            f"{op} on {backend}: its sample did not fuse into one group of {members} ops "
            f"(found {[len(g.group.members) for g in groups]}), so it cannot be measured"
        )


def _step_phases(group: list, series: list) -> list[tuple[str, list[float]]]:
    """(phase, seconds) of a CUDA plan's copies in and out and its kernel: each copy of the
    plan profiled as many times as it was timed (PROFILE_REPS at most), a repetition's steps of
    one phase summed."""
    profiles = [
        plan.profile(repeat=min(len(s), PROFILE_REPS), warmup=0) for plan, s in zip(group, series)
    ]
    phases = []
    for name in ("h2d", "kernel", "d2h"):
        per_copy = [
            [st["repetitions_s"] for st in steps if _phase(st) == name] for steps in profiles
        ]
        if per_copy[0]:
            # profiled one copy after the other, so listed in that order
            phases.append((name, [x for parts in per_copy for x in np.sum(parts, axis=0)]))
    return phases


def time_bus(nbytes: int, spec: Spec, machine: Machine) -> list[tuple]:
    """Plain copies of ``nbytes`` between host memory of each kind and the device, both
    ways, made the way a plan's baked transfers are (``cuda_transfer.make_transfer``)."""
    import cupy  # the bus exists only on a CUDA machine: CuPy stays unimported elsewhere

    device = cupy.empty(nbytes, dtype=np.uint8)
    device.fill(7)
    stream = cupy.cuda.get_current_stream()
    out: list[tuple] = []
    for kind in spec.host_memory:
        if kind == "pinned":
            memory = cupy.cuda.alloc_pinned_memory(nbytes)
            host = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
        else:
            host = np.empty(nbytes, dtype=np.uint8)
        host[:] = 3
        for direction in ("h2d", "d2h"):
            src, dst = (host, device) if direction == "h2d" else (device, host)
            transfer = make_transfer(direction, src, dst, stream)

            def copy(transfer=transfer) -> None:
                transfer()
                stream.synchronize()

            reps = repeat(copy, spec.repetitions)
            point = Point(f"copy_{direction}", nbytes, "bus")
            out += rows(machine, point, str(nbytes), "uint8", kind, "transfer", reps, nbytes)
    return out


def _rounds(series: list[list[float]]) -> list[float]:
    """The repetitions of several copies in the order they were taken: round by round."""
    return [s[r] for r in range(max(map(len, series))) for s in series if r < len(s)]


def _phase(step: dict[str, Any]) -> str | None:
    if step["op"] in ("h2d", "d2h"):
        return step["op"]
    if step["repetitions_s"] and step["backend"] not in ("copy", "view", "leaf"):
        return "kernel"
    return None
