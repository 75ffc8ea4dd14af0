"""The cost model: the one place that prices anything, built once from a profile.

A ``CostModel`` reads what a profile measured (``[costs]``: each op's resident time per backend
at its swept sizes; ``[bus]``: the copy fits, the host's time to issue a GPU step and the
GPU->CPU hand-off) and answers, in seconds, what a step of a plan costs: an op on a backend at a
size, the fastest backend of a device, a copy over the bus, a CUDA step as the host issues it, a
hand-off, the copy of an updated leaf's new value.  The planner builds its placement problem
from these figures, compile prices the copy steps it bakes with them, and the chain analysis
adds them up; none of them prices anything itself.  Fused groups are priced here too
(``group_s``).

Reading a ``[costs]`` curve at any size (``curve_s``):

- at a measured size, its median;
- between two measured sizes, linear in log(size) and log(seconds), as selection interpolates
  crossings (the curves are close to straight there);
- below the smallest, the smallest size's time: launch and call overhead dominate down there,
  and a smaller op does not get cheaper than an empty call;
- above the largest size S (time T), T plus the extra work at a marginal cost per unit of work
  (``extend_s``): work is the size for elementwise ops and reductions, its square for
  ``sum_rows`` (n x n elements), its cube for matmul and its variants (multiply-adds;
  ``ops.work_power``).  The marginal cost is the curve's own between its last two sizes, at
  most T's own average cost per unit (a last step would carry its jump to any size), but never
  below its backend's roofline (``Roofline``: the median marginal rate, per element moved for
  elementwise ops and reductions or per multiply-add for products, at the top of its curves of
  that family that reach furthest), where a noisy last step would make more work look nearly
  free, and where a curve that stops inside the last-level cache would carry cache speed on to
  sizes that stream from memory (the quick sweep carries ``add`` past the caches for this; a
  roofline from past a curve's sizes is not held under the curve's average).  Where such
  a further curve exists, an elementwise op or reduction past its own sizes takes at least
  that curve's time at the size per array moved, times its own arrays
  (``Roofline.stream_s``): its own last point was cache speed, and carrying it on at the
  margin kept that start.  A
  sweep's largest sizes are where launch and call overheads still weigh (a GPU add at 2^20
  elements is half launch): scaling T by the work ratio, as the profile did before, carried
  that overhead along and priced large GPU ops 2x too high (docs/investigations.md,
  "Past the largest measured size"; a backend the sweep stopped timing as too slow has a curve
  that ends early).

A copy is the [bus] fit, latency + nbytes / bandwidth, per direction and host memory kind.  A
CUDA step costs its kernel's resident time, but never less than the host's time to issue a step
(``launch_us``).  The hand-off (``switch_us = BYTES:MICROSECONDS ...``) is linear in log(bytes)
between two measured points (a point may be 0, so not log-log), the nearest point's value
outside them, and 0 without the line.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from . import ops as _ops
from .backends import BACKENDS
from .backends.native import weight as native_weight
from .config import HOST_MEMORY_KINDS, Config, CostCurve, switch_points

COPY_LIKE = "neg"
"""The op whose cost prices a plain copy of a buffer (a reshape of strided data, an update's
write into its leaf): it reads and writes each element once."""


def arrays_moved(op: str) -> int:
    """How many elements of its dtype ``op`` (or a variant) moves per unit of its work, for
    the bandwidth roofline: an elementwise op reads its inputs and writes its output, a
    reduction reads its input; 0 for products, whose roofline is their multiply-adds."""
    definition = _ops.OPS[_ops.base_op(op)]
    if definition.kind == "matmul":
        return 0
    return 1 if definition.kind == "reduction" else definition.arity + 1


def _last_step(curve: CostCurve) -> tuple[float, float] | None:
    """(marginal seconds per unit of work between the curve's last two sizes, average
    seconds per unit at its largest), or None for a curve of one size."""
    if len(curve.sizes) < 2:
        return None
    power = _ops.work_power(curve.op)
    (s0, s1), (t0, t1) = curve.sizes[-2:], curve.seconds[-2:]
    return (t1 - t0) / (s1**power - s0**power), t1 / s1**power


def _steady_step(curve: CostCurve) -> float | None:
    """The curve's marginal seconds per unit of work at its top: the lesser of its last two
    steps where it has three sizes (one slow repetition at the largest size, in a sweep that
    measures each point once, must not set a rate every larger op is carried at), else its
    last step; None for a curve of one size."""
    step = _last_step(curve)
    if step is None:
        return None
    if len(curve.sizes) < 3:
        return step[0]
    before = _last_step(replace(curve, sizes=curve.sizes[:-1], seconds=curve.seconds[:-1]))
    return min(step[0], before[0]) if before is not None and before[0] > 0 else step[0]


class Roofline:
    """What a backend's work costs at the margin past the sizes its curves reach, by family:
    seconds per element moved (elementwise ops and reductions) and per multiply-add
    (products).  Each is the median marginal cost at the top (``_steady_step``, per element
    moved or per multiply-add) of the backend's curves of that family that reach its largest
    work.  Where the sweep carries one op further than the rest (the quick sweep's ``add``,
    past the caches), that op alone sets it: the bandwidth measured where the data streams
    from memory, so that an op whose curve stops in the last-level cache is carried on at
    memory speed (``beyond``).  A family without a rising step has none."""

    def __init__(self, curves: Iterable[CostCurve]) -> None:
        steps: dict[str, list[tuple[float, float]]] = {"memory": [], "compute": []}
        for curve in curves:
            if curve.op in _ops.CHAINS:  # a fused group of heavy ops: neither family's rate
                continue
            step = _steady_step(curve)
            if step is None or step <= 0:
                continue
            moved = max(arrays_moved(curve.op), 1)
            steps[_family(curve.op)].append((_work(curve), step / moved, curve))
        self.per_unit: dict[str, float] = {}
        """family -> seconds per element moved ("memory") or per multiply-add ("compute")."""
        self.reach: dict[str, float] = {}
        """family -> the largest work its curves measured (the rate's own)."""
        self.streams: list[CostCurve] = []
        """The memory family's curves that reach furthest, of ops whose size is their elements
        (``stream_s``)."""
        for family, found in steps.items():
            if found:
                self.reach[family] = max(work for work, *_ in found)
                top = [(rate, curve) for work, rate, curve in found if work == self.reach[family]]
                self.per_unit[family] = statistics.median(rate for rate, _ in top)
                if family == "memory":  # read as the model reads any curve: monotone
                    self.streams = [
                        monotone(curve) for _, curve in top if _ops.work_power(curve.op) == 1
                    ]

    def floor_s(self, op: str) -> float:
        """The least marginal seconds per unit of ``op``'s work; 0 where unknown."""
        moved = arrays_moved(op)
        per = self.per_unit.get(_family(op), 0.0)
        return per * max(moved, 1)

    def stream_s(self, op: str, size: int) -> float:
        """The least time ``op``'s arrays at ``size`` take to move: the memory family's
        furthest curves' time at ``size`` (the median, per array they move), times the arrays
        ``op`` moves; 0 for a product or where unknown.  Where those curves were measured,
        this is what the caches and memory gave at that size, not a rate from elsewhere.  A
        curve that stops inside the last-level cache, carried on from there at the margin,
        keeps its cache-speed start, and a fused group of such ops (priced by the furthest
        curve) would look dearer than its members apart (design.md, "The planner's costs")."""
        if _family(op) != "memory" or not self.streams:
            return 0.0
        elements = int(size ** _ops.work_power(op))  # sum_rows' size is n: n x n elements
        per_array = statistics.median(
            curve_s(c, elements, self.floor_s(c.op)) / max(arrays_moved(c.op), 1)
            for c in self.streams
        )
        return per_array * max(arrays_moved(op), 1)

    def beyond(self, curve: CostCurve) -> bool:
        """Whether the rate was measured past ``curve``'s largest size (then it holds there
        even above the curve's own average cost, which is its caches')."""
        return self.reach.get(_family(curve.op), 0.0) > _work(curve)


def _family(op: str) -> str:
    return "compute" if arrays_moved(op) == 0 else "memory"


def _work(curve: CostCurve) -> float:
    """The work at a curve's largest size (its size to ``ops.work_power``)."""
    return float(curve.sizes[-1]) ** _ops.work_power(curve.op)


def extend_s(curve: CostCurve, size: int, floor_s: float = 0.0, capped: bool = True) -> float:
    """Seconds of ``curve``'s op at ``size`` past its largest size: the module docstring's rule,
    with ``floor_s`` the least marginal seconds per unit of work (its backend's roofline),
    itself held under the curve's average cost per unit unless ``capped`` is False (a roofline
    measured past the curve's sizes: ``Roofline.beyond``)."""
    power = _ops.work_power(curve.op)
    largest, seconds = curve.sizes[-1], curve.seconds[-1]
    step = _last_step(curve)
    average = seconds / largest**power
    if capped:
        marginal = average if step is None else min(average, max(step[0], floor_s))
    else:
        marginal = max(average if step is None else min(average, step[0]), floor_s)
    return seconds + marginal * (size**power - largest**power)


def curve_s(curve: CostCurve, size: int, floor_s: float = 0.0, capped: bool = True) -> float:
    """Predicted seconds of ``curve``'s op at ``size`` (>= 0), by the module docstring's rule;
    ``floor_s``: its backend's roofline past the largest size (``Roofline.floor_s``), and
    ``capped`` as ``extend_s`` takes it."""
    if size < 0:
        raise ValueError(f"{curve.op}: size must be >= 0, got {size}")
    sizes, seconds = curve.sizes, curve.seconds
    if size <= sizes[0]:
        return seconds[0]
    if size >= sizes[-1]:
        return extend_s(curve, size, floor_s, capped)
    i = bisect.bisect_right(sizes, size)  # sizes[i - 1] <= size < sizes[i]
    s0, s1, t0, t1 = sizes[i - 1], sizes[i], seconds[i - 1], seconds[i]
    if size == s0:
        return t0
    frac = math.log(size / s0) / math.log(s1 / s0)
    return t0 * (t1 / t0) ** frac


def monotone(curve: CostCurve) -> CostCurve:
    """``curve`` with each size's time at most any larger size's: more of the same work never
    takes less time, so a point dearer than a larger one is the host's noise while it was
    timed, not the op's cost (a quick sweep on the H100 host priced a cpu_threads add at
    88,791 elements at 3.7 times its time at 131,072).  The upper side is where a curve's
    repetitions agree best (longer calls), so it is the one kept."""
    seconds = list(curve.seconds)
    for i in range(len(seconds) - 2, -1, -1):
        seconds[i] = min(seconds[i], seconds[i + 1])
    if seconds == list(curve.seconds):
        return curve
    return replace(curve, seconds=tuple(seconds))


def compute_s(work_s: float, memory_s: float) -> float:
    """An op's arithmetic time, from its work (its time beyond its fixed part) and the time
    its arrays take to move (``add``'s, per array): the op's time is the larger of the two,
    overlapped, so its arithmetic is hidden where the work is no more than the memory time
    (taken as none), is the whole work from twice the memory time on (a compute-bound op),
    and in between rises linearly.  A fused GPU group pays it once per member."""
    if memory_s <= 0.0:
        return max(0.0, work_s)
    share = min(1.0, max(0.0, (work_s - memory_s) / memory_s))
    return max(0.0, work_s) * share


class CostModel:
    """What one profile predicts, for plans in one kind of host memory."""

    def __init__(self, config: Config, host_memory: str | None = None) -> None:
        self.config = config
        self.host_memory = host_memory or config.host_memory
        if self.host_memory not in HOST_MEMORY_KINDS:
            raise ValueError(
                f"host_memory must be one of {', '.join(HOST_MEMORY_KINDS)}, got "
                f"{self.host_memory!r}"
            )
        self.cuda_machine = config.device_type == "cuda"
        launch_us = config.bus.get("launch_us")
        self.launch_s = 0.0 if launch_us is None else float(launch_us) * 1e-6
        """The host's time to issue one GPU step ([bus] launch_us); 0 where not measured."""
        switch = config.bus.get("switch_us")
        self._switch = switch_points(switch) if switch is not None else ()
        self._best: dict[tuple[str, int, str], tuple[str, float]] = {}
        # resident_s per (op, backend, size): a graph of 100,000 nodes asks about a handful of
        # sizes, each many times (every group prices its members), and the curve walk costs
        # about 7 us a time
        self._resident: dict[tuple[str, str, int], float | None] = {}
        self._curves: dict[tuple[str, str], CostCurve | None] = {}
        by_backend: dict[str, list[CostCurve]] = {}
        for curves in config.costs.values():
            for backend_id, curve in curves.items():
                by_backend.setdefault(backend_id, []).append(curve)
        self.roofline = {b: Roofline(curves) for b, curves in by_backend.items()}
        """Each backend's marginal costs, what its curves are carried past their sizes with."""

    # -- one op, one copy ----------------------------------------------------------------------

    def resident_s(self, op: str, backend: str, size: int) -> float | None:
        """Seconds of ``op`` on ``backend`` at ``size`` with its data already on the backend's
        device; None where [costs] has no curve for the pair."""
        key = (op, backend, size)
        if key in self._resident:
            return self._resident[key]
        curve = self.curve(op, backend)
        seconds = None
        if curve is not None:
            roof = self.roofline[backend]
            beyond = roof.beyond(curve)
            seconds = curve_s(curve, size, roof.floor_s(curve.op), not beyond)
            if beyond and size > curve.sizes[-1]:  # its arrays stream from memory there
                seconds = max(seconds, roof.stream_s(curve.op, size))
        self._resident[key] = seconds
        return seconds

    def curve(self, op: str, backend: str) -> CostCurve | None:
        """[costs]' curve of ``op`` on ``backend`` as the model reads it: no size dearer than a
        larger size of the same curve (``monotone``), or None where there is none."""
        key = (op, backend)
        if key not in self._curves:
            found = self.config.costs.get(op, {}).get(backend)
            self._curves[key] = None if found is None else monotone(found)
        return self._curves[key]

    def transfer_s(
        self, direction: str, nbytes: int, host_memory: str | None = None
    ) -> float | None:
        """Seconds to copy ``nbytes`` one way ("h2d" or "d2h") from or to the plans' host
        memory (or ``host_memory``); None where [bus] lacks that direction and kind (a CPU
        profile has no [bus])."""
        if direction not in ("h2d", "d2h"):
            raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
        memory = host_memory or self.host_memory
        if memory not in HOST_MEMORY_KINDS:
            raise ValueError(
                f"host_memory must be one of {', '.join(HOST_MEMORY_KINDS)}, got {memory!r}"
            )
        gbps = self.config.bus.get(f"{direction}_{memory}_gbps")
        latency_us = self.config.bus.get(f"{direction}_{memory}_latency_us")
        if gbps is None or latency_us is None:
            return None
        return float(latency_us) * 1e-6 + nbytes / (float(gbps) * 1e9)

    def transfers_s(self, direction: str, nbytes: np.ndarray) -> np.ndarray:
        """``transfer_s`` of many sizes at once (0 where [bus] lacks the direction): a graph's
        every value priced in one pass, not one call per node."""
        one = self.transfer_s(direction, 0)
        if one is None:
            return np.zeros(len(nbytes))
        gbps = float(self.config.bus[f"{direction}_{self.host_memory}_gbps"])
        return one + np.asarray(nbytes, dtype=float) / (gbps * 1e9)

    def switches_s(self, nbytes: np.ndarray) -> np.ndarray:
        """``switch_s`` of many sizes at once (the planner's every value in one pass)."""
        points = self._switch
        if not points:
            return np.zeros(len(nbytes))
        sizes = np.log([float(b) for b, _ in points])
        us = np.array([u for _, u in points], dtype=float)
        with np.errstate(divide="ignore"):
            at = np.log(np.asarray(nbytes, dtype=float))
        return np.interp(at, sizes, us) * 1e-6

    def switch_s(self, nbytes: int) -> float:
        """What handing a value of ``nbytes`` from the GPU to a CPU step costs beyond its copy:
        linear in log(bytes) between the profile's points, their end values outside them; 0
        where the profile does not say (``switches_s`` for one value)."""
        return float(self.switches_s(np.array([nbytes]))[0])

    def issued_s(self, kernel_s: float) -> float:
        """A CUDA step's cost: its kernel's resident time, but never less than the host's time
        to issue a step: a chain of kernels shorter than that runs at the host's pace.  Each
        node's cost stays its own, so the placement's cut stays exact."""
        return max(kernel_s, self.launch_s)

    # -- a node's figures ----------------------------------------------------------------------

    def best(self, op: str, size: int, device: str) -> tuple[str, float]:
        """(backend, resident seconds) of the fastest backend on ``device`` for ``op`` at
        ``size``; ("", inf) where none is priced (or the profile's machine has no CUDA)."""
        key = (op, size, device)
        found = self._best.get(key)
        if found is None:
            found = ("", math.inf)
            if device == "cpu" or self.cuda_machine:
                for backend_id, info in BACKENDS.items():
                    if info.device == device and op in info.ops:
                        seconds = self.resident_s(op, backend_id, size)
                        if seconds is not None and seconds < found[1]:
                            found = (backend_id, seconds)
            self._best[key] = found
        return found

    FUSING = {info.device: b for b, info in BACKENDS.items() if info.fuses}
    """The backend that runs fused groups on each device (its own curves price them)."""

    def group_s(self, ops: list[str], size: int, arrays: float, device: str) -> float | None:
        """A fused group's resident time on ``device``: one kernel that reads its inputs and
        writes its output once (``arrays``: their elements over ``size``) and does each member's
        arithmetic, the two overlapped.  From the fusing backend's own curves: its memory time
        is ``add``'s time with ``add``'s work (what the size adds to its time at its smallest
        size, three arrays moved) scaled by the arrays the group moves.  On the GPU, ``add``'s
        fixed part (one launch) and the larger of that work and the members' arithmetic
        (``compute_s`` each); on the CPU, ``_cpu_group_s``.  A member's own fixed part is not
        paid again: one kernel is called once.  None where the curves are missing (the group
        is then priced as its members)."""
        backend = self.FUSING[device]
        if device == "cuda" and not self.cuda_machine:
            return None
        base = self.resident_s("add", backend, size)
        if base is None:
            return None
        fixed = self.resident_s("add", backend, 0)
        per_array = (base - fixed) / 3.0
        memory = fixed + per_array * max(3.0, arrays)
        if device == "cpu":
            return self._cpu_group_s(ops, size, memory)
        compute = 0.0
        for op in ops:
            seconds = self.resident_s(op, backend, size)
            if seconds is None:
                return None
            work = seconds - self.resident_s(op, backend, 0)
            compute += compute_s(work, per_array * arrays_moved(op))
        return fixed + max(memory - fixed, compute)

    def _cpu_group_s(self, ops: list[str], size: int, memory: float) -> float | None:
        """A fused CPU group: its costliest part alone, as measured at ``size`` (the memory
        time of its arrays, or its slowest heavy member's own time: either pays the call and
        the threads' start once), plus what every other heavy member adds (``_cpu_member_s``).
        A cheap member is one instruction an element, hidden by the memory time; a heavy one
        (exp, tanh, log, pow: ``ops.heavy``) is compute-bound.  A heavy member's own time at a
        mid size is mostly the call and the threads' start, which one kernel pays once: adding
        each member's whole time priced a 2^14 chain of four tanh and sigmoid at twice its
        time and sent it to the GPU."""
        backend = self.FUSING["cpu"]
        members = []
        for op in ops:
            if native_weight(op) <= 1:
                if self.resident_s(op, backend, size) is None:
                    return None
                continue
            seconds = self.resident_s(op, backend, size)
            extra = self._cpu_member_s(op, size)
            if seconds is None or extra is None:
                return None
            members.append((seconds, extra))
        if not members:
            return memory
        slowest = max(members, key=lambda m: m[0])
        return max(memory, slowest[0]) + sum(extra for _, extra in members) - slowest[1]

    def _cpu_member_s(self, op: str, size: int) -> float | None:
        """What one more heavy ``op`` adds to a fused CPU group of ``size`` elements.  From its
        chain variant where the profile has it (``ops.CHAINS``: a group of CHAIN_LENGTH such
        terms, measured): the chain's time less the op's own, over the terms past the first.
        Else from the op's own curve: its rate per element where the threads are busy (the
        slope over the top two octaves of its sizes), which is memory-bound there and so
        prices the member's arithmetic high, as if it streamed its arrays again (mixed chains
        of 8 and 16 ops priced at 1.9 to 3.4 times their time on the H100's host)."""
        backend = self.FUSING["cpu"]
        chain = f"{op}_chain"
        variant = _ops.VARIANTS.get(chain)
        curve = self.curve(chain, backend)
        if variant is not None and curve is not None:
            # below the chain's smallest size, its arithmetic shrinks with the elements (a curve
            # holds its first time there, which is mostly the call)
            at = max(size, curve.sizes[0])
            alone = self.resident_s(op, backend, at)
            if alone is None:
                return None
            step = (self.resident_s(chain, backend, at) - alone) / (variant.chain - 1)
            return max(0.0, step) * min(1.0, size / at)
        curve = self.curve(op, backend)
        if curve is None:
            return None
        top = curve.sizes[-1]
        low = max(curve.sizes[0], top // 4)
        if low < top:
            rate = (curve_s(curve, top) - curve_s(curve, low)) / (top - low)
        else:  # one size: its average, call and all (an upper bound)
            rate = curve.seconds[-1] / top
        return max(rate, 0.0) * size

    def update_s(self, numel: int) -> tuple[float, float]:
        """(cpu, cuda) seconds of copying an updated leaf's new value into its buffer: a copy of
        its size, on the host single-threaded (cpu_fallback's, as the host copy runs: one numpy
        copy) where the profile prices that, on the GPU the fastest there, as issued."""
        cpu = self.resident_s(COPY_LIKE, "cpu_fallback", numel)
        if cpu is None:
            cpu = self.best(COPY_LIKE, numel, "cpu")[1]
        return cpu, self.issued_s(self.best(COPY_LIKE, numel, "cuda")[1])

    def priced_name(self, node: Any) -> str:
        """The name ``node`` is priced under: its variant's (``ops.variant_of``) where [costs]
        price the variant on every device they price its op on, else ``ops.priced_op``'s where
        [costs] has it (square for a pow by 0.5 or 2), else its op's.  A variant
        priced on fewer devices (a sweep of the CPU backends only) would otherwise keep the node
        off a device its op could run well on, or refuse graph placement outright."""
        costs = self.config.costs
        name = _ops.profile_name(node, costs)
        if name == node.op:
            cheaper = _ops.priced_op(node)  # a pow by 0.5 or 2 costs what square costs
            return cheaper if cheaper in costs else name

        def devices(curves: dict[str, CostCurve]) -> set[str]:
            return {BACKENDS[b].device for b in curves if b in BACKENDS}

        covered = devices(costs[name]) >= devices(costs.get(node.op, {}))
        return name if covered else node.op

    # -- what the profile cannot price ---------------------------------------------------------

    def missing(self, ops: Iterable[str]) -> list[str]:
        """Those of ``ops`` (in the order given, once each) with no [costs] curve on any
        backend.  Views and leaves run on no backend and are never missing."""
        return [
            op
            for op in dict.fromkeys(ops)
            if not self.config.costs.get(op) and (op in _ops.PROFILE_OPS or op not in _ops.OPS)
        ]

    def unpriced(self, ops: Iterable[str]) -> list[str]:
        """The ops of a graph that the profile cannot price on every device it has (and, on a
        CUDA profile, the [bus] copy lines it lacks), sorted."""
        ops = set(ops)
        if not self.config.has_costs:
            return sorted(ops)
        missing = set(self.missing(sorted(ops)))
        if self.cuda_machine:  # each op priced on the GPU too, and the copies between
            cuda = [b for b, i in BACKENDS.items() if i.device == "cuda"]
            for op in ops - missing:
                if any(op in BACKENDS[b].ops for b in cuda) and not any(
                    b in self.config.costs.get(op, {}) for b in cuda
                ):
                    missing.add(op)
            for direction in ("h2d", "d2h"):
                if self.transfer_s(direction, 1) is None:
                    missing.add(f"[bus] {direction}_{self.host_memory}")
        return sorted(missing)
