"""Compile a lazy graph into a Plan, and run it.

``compile(outputs, config)`` does every decision once:

1. an iterative post-order DFS gives the nodes in dependency order, each once (a shared
   subexpression is one node, computed once and shown once);
2. each compute node gets its device and ``backend_id``: by default the placement of the
   whole graph with the least predicted time, from the profile's costs (``softcuda.planner``),
   or each node from its own rule in CONFIG.soft by (op, size bucket) where the profile has no
   costs or ``placement="per-op"`` asks; views (transpose, reshape of contiguous data) get none
   and share their input's buffer, and a scalar constant is passed to its kernel as a number;
3. where a node runs on another device than an input's data lives, an explicit transfer step is
   baked in (host->device or device->host), once per (buffer, device); outputs come back to host;
4. buffers are planned from each one's first and last use and sub-allocated into one aligned
   arena per device, taken from a bump pool in one allocation;
5. every step is prebound: the backend's ``make_kernel`` receives the exact arrays it will read
   and write and returns a zero-argument callable.

``compile(outputs, updates={leaf: new_value})`` also writes new values into leaves in place:
after every other step of the run (so every update reads the old values) each new value is
copied into its leaf's home, which the next run reads: the leaf's own host buffer, or, where
the placement keeps the leaf on the GPU, its resident copy there (``Tensor._resident``), whose
host copy is refreshed only when read.  A training step (forward, backward, optimizer update)
is one such plan (``softcuda.optim``).

``Plan.evaluate()`` then only calls those callables in order.  It never reads the config, never
looks up a backend, never allocates (tests/test_graph.py proves it by making each of those
raise during evaluate).
"""

from __future__ import annotations

import bisect
import gc
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np

from . import backends
from . import ops as _ops
from .backends import cuda_timing, cuda_transfer
from .config import Config, as_config, packaged_default
from .costs import CostModel
from .errors import BackendUnavailable, ConfigError, PoolError, ShapeError, SoftcudaError
from .planner import (
    MissingCosts,
    Placement,
    Planner,
    is_scalar_argument,
    is_view,
    resolve_placement,
)
from .pool import (
    DEVICE_ALIGNMENT,
    HOST_ALIGNMENT,
    HOST_MEMORY_KINDS,
    DevicePool,
    PinnedHostPool,
    _round_up,
    format_bytes,
    make_pool,
)
from .tensor import Tensor, _behind, _behind_ref, _leaf_epoch, topological_order

_ALIGNMENT = {"cpu": HOST_ALIGNMENT, "cuda": DEVICE_ALIGNMENT}


@dataclass(eq=False, slots=True)
class Buffer:
    """Bytes on one device, alive from the step that writes it to the last step that reads it."""

    device: str
    nbytes: int
    last: int = -1  # index of the last step that reads it
    keep: bool = False  # outputs and leaves outlive the plan's run
    allocation: Any = None  # pool Allocation (its own for leaves, the arena's otherwise)
    offset: int = 0  # bytes into ``allocation``
    freed: bool = False  # given back to the arena during planning

    def view(self, node: Tensor):
        """``node``'s array over this buffer (made at compile time, where a stale allocation
        raises the pool's error)."""
        return self.allocation.view(node.dims, node.dtype, node.stride, self.offset)


@dataclass(slots=True)
class Step:
    """One row of the plan: a leaf, a view, a kernel, a copy or a transfer."""

    kind: str  # leaf | view | kernel | copy | h2d | d2h | update (a new value into a leaf)
    node: Tensor
    device: str
    backend_id: str
    label: str
    decided_by: str
    size: int = 0
    bucket: str = ""
    transfer_bytes: int = 0  # bytes a transfer step moves
    run: Callable[[], Any] | None = None
    # what the profile's costs predict (nan where it cannot price the plan): this step's time,
    # and for a compute node its resident time on each device and its regret (planner.Choice)
    predicted_s: float = float("nan")
    choice: Any = None
    # a transfer the host runs to its end (an updated leaf's resident values into its host
    # copy, for a result): timed on the host clock, never queued behind a timing gate
    blocking: bool = False

    @property
    def on_host(self) -> bool:
        """A kernel or copy that the CPU runs (transfers are queued on the plan's stream)."""
        return self.blocking or self.device == "cpu" and self.kind in ("kernel", "copy", "update")

    @property
    def nbytes(self) -> int:
        """Bytes the step moves: a kernel's inputs read once and output written once."""
        if self.kind == "kernel" or self.kind == "copy":
            node = self.node
            shapes = [t.dims for t in node.inputs]
            return _ops.byte_count(shapes, node.dims, node.dtype.itemsize)
        if self.kind == "leaf":
            return self.node.nbytes
        return self.transfer_bytes

    @property
    def flops(self) -> int:
        if self.kind != "kernel":
            return 0
        node = self.node
        return _ops.flop_count(node.op, [t.dims for t in node.inputs], node.dims)

    @property
    def op(self) -> str:
        if self.kind in ("h2d", "d2h", "update"):
            return self.kind
        if self.node.is_leaf:
            return "const" if "value" in self.node.attrs else "leaf"
        return self.node.op


@dataclass(frozen=True, eq=False)
class Graph:
    """Outputs with in-place updates, as one value: ``compile(Graph(outputs, updates))`` is
    ``compile(outputs, updates=updates)``, and a graph script's ``build()`` may return one, so
    that ``softcuda run`` shows a training step with its updates."""

    outputs: Any
    updates: Any = None


class _Writeback:
    """An update step: copy a new value into its leaf's own host buffer (and into the leaf's
    page-locked mirror, if a pinned plan made one, as ``Tensor.assign`` does)."""

    __slots__ = ("leaf", "home", "source")

    def __init__(self, leaf: Tensor, source: Any) -> None:
        self.leaf = leaf
        self.home = leaf._allocation.view(leaf.dims, leaf.dtype)
        self.source = source

    def __call__(self) -> None:
        self.leaf._store(self.source, self.home)


class _DeviceWriteback:
    """An update step of a leaf kept on the GPU: a device copy of the new value into the
    leaf's resident copy, queued on the plan's stream; the host copy is now behind.  The leaf
    is marked behind by a weak reference made here, once: a run allocates nothing, and the mark
    goes with the leaf."""

    __slots__ = ("key", "ref", "copy")

    def __init__(self, leaf: Tensor, copy: Callable[[], Any]) -> None:
        self.key, self.ref = id(leaf), _behind_ref(leaf)
        self.copy = copy

    def __call__(self) -> None:
        self.copy()
        _behind[self.key] = self.ref
        _leaf_epoch[0] += 1


@dataclass
class PlanStats:
    host_arena_bytes: int
    device_arena_bytes: int
    planned_bytes: int  # what the buffers would take without reuse
    leaf_bytes: int


class Plan:
    """A compiled graph.  ``evaluate()`` runs it; ``explain()`` shows every decision."""

    def __init__(self, config: Config, host_memory: str) -> None:
        self.config = config
        self.host_memory = host_memory
        self.steps: list[Step] = []  # every row, in order (leaves and views included)
        self._runs: list[Callable[[], Any]] = []  # what evaluate calls, in order
        self._nodes: list[Tensor] = []
        self._out_names: list[str] | None = None
        self._out_kind = "single"
        self._out_views: list[Any] = []
        self._arenas: dict[str, Any] = {}  # device -> the Allocation holding every buffer
        self._leaves: list[tuple[Tensor, Any]] = []  # (leaf, the allocation it was bound to)
        self._host_leaves: list[Tensor] = []  # leaves it reads from the host (see evaluate)
        self._watch: list[tuple[Any, int]] = []  # (pool, generation) of every pool used above
        self._marked = False  # the nodes' evaluated bits are set (after the first good run)
        self._stream: Any = None
        self.stats: PlanStats | None = None
        self.last_outputs: list[np.ndarray] = []
        self.allocated = False  # compile(..., allocate=False) plans only describe
        self.placement = "per-op"  # how its devices were chosen (softcuda.planner)
        self.placement_note = ""  # why the default graph placement was not used, if it was not
        self.predicted_s: float | None = None  # the whole plan by the profile's costs
        # A run writes the plan's one set of buffers: two at once would overwrite each other's
        # values, so runs (and profiling) from several threads take turns.
        self._running = threading.Lock()

    # -- running --------------------------------------------------------------------------------

    def _check_fresh(self) -> None:
        """Refuse to run on memory that is no longer the plan's.  Per run this compares the
        generations of the few pools the plan uses; only when one changed are the allocations
        looked at one by one, to name what happened."""
        if not self.allocated:
            raise SoftcudaError(
                "this plan was compiled with allocate=False, to be explained: it has no memory "
                "and no kernels; compile the graph again to run it"
            )
        if all(pool.generation == generation for pool, generation in self._watch):
            return
        for arena in self._arenas.values():
            if not arena.valid:
                raise PoolError(
                    f"this plan's {arena.pool.kind} pool was reset after compile (generation "
                    f"{arena.generation} -> {arena.pool.generation}); compile the graph again"
                )
        for leaf, allocation in self._leaves:
            if not allocation.valid:
                raise PoolError(
                    f"leaf {leaf.label} {leaf.dims} belongs to a pool that was reset after "
                    "compile; create it again and compile the graph again"
                )

    def evaluate(self, copy: bool = True) -> Any:
        """Run every step; return the outputs as numpy arrays (shaped like the compile call).

        With ``copy=False`` the arrays are the plan's own host buffers, overwritten by the next
        run (the sweep uses this to time end to end without an extra host copy).

        Runs of one plan from several threads take turns; with ``copy=False`` another thread's
        run may overwrite the arrays returned, so share a plan across threads with copies.
        """
        with self._running:
            return self._evaluate(copy)

    def _evaluate(self, copy: bool) -> Any:
        self._check_fresh()
        if _behind:  # a leaf this plan reads on the host may have been updated on the GPU since
            for leaf in self._host_leaves:
                leaf._refresh_host()
        try:
            if self._stream is None:
                for run in self._runs:
                    run()
            else:
                with self._stream:
                    for run in self._runs:
                        run()
                self._stream.synchronize()
        except BaseException:
            for node in self._nodes:
                node.evaluated = False
            self._marked = False
            raise
        if not self._marked:  # once, not per run: every run computes every node again
            for node in self._nodes:
                node.evaluated = True
            self._marked = True
        values = [np.array(v) for v in self._out_views] if copy else list(self._out_views)
        self.last_outputs = values
        if self._out_kind == "single":
            return values[0]
        if self._out_kind == "dict":
            return dict(zip(self._out_names or (), values))
        return tuple(values)

    def poison(self) -> None:
        """Fill every planned buffer (not the leaves) with 0xFF bytes — NaN in float32 and
        float64 — so that an element a kernel fails to write shows up in the result."""
        for allocation in self._arenas.values():
            allocation.view((allocation.nbytes,), np.uint8).fill(0xFF)

    def profile(self, repeat: int = 5, warmup: int = 1) -> list[dict[str, Any]]:
        """Time every step on its own ``repeat`` times (after ``warmup`` full runs).

        CPU steps use the host clock; CUDA steps and transfers use CUDA events on the plan's
        stream, each queued behind a gate so that the host's launch cost stays out of the GPU's
        time (``softcuda.backends.cuda_timing``; copies from or to pageable memory, which the
        host stages, are timed as they come).  Returns one dict per row of ``explain()`` with
        the median and all repetitions.
        """
        for _ in range(warmup):
            self.evaluate(copy=False)
        times: dict[int, list[float]] = {i: [] for i, s in enumerate(self.steps) if s.run}
        with self._running:
            for _ in range(repeat):
                self._check_fresh()
                if self._stream is None:
                    for i in times:
                        t0 = time.perf_counter()
                        self.steps[i].run()  # type: ignore[misc]
                        times[i].append(time.perf_counter() - t0)
                else:
                    self._profile_cuda(times)
        rows = []
        for i, step in enumerate(self.steps):
            reps = times.get(i, [])
            rows.append(
                {
                    "index": i,
                    "label": step.label,
                    "op": step.op,
                    "backend": step.backend_id,
                    "device": step.device,
                    "median_s": float(np.median(reps)) if reps else 0.0,
                    "repetitions_s": reps,
                }
            )
        return rows

    def _profile_cuda(self, times: dict[int, list[float]]) -> None:
        import cupy

        gate = cuda_timing.shared_gate()
        with self._stream:
            marks: list[tuple[int, Any]] = []
            for i in times:
                step = self.steps[i]
                if step.on_host:
                    self._stream.synchronize()
                    t0 = time.perf_counter()
                    step.run()  # type: ignore[misc]
                    marks.append((i, time.perf_counter() - t0))
                    continue
                # A copy from or to pageable memory is staged by the host: its time is the
                # host's, so it is not gated (a gate would only make the host wait).
                gated = not (step.kind in ("h2d", "d2h") and self.host_memory == "pageable")
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                while True:
                    if gated:
                        gate.hold(self._stream)
                    start.record(self._stream)
                    step.run()  # type: ignore[misc]
                    end.record(self._stream)
                    if not gated or gate.held():
                        break
                marks.append((i, (start, end)))
            self._stream.synchronize()
        for i, mark in marks:
            if isinstance(mark, tuple):
                mark = cupy.cuda.get_elapsed_time(mark[0], mark[1]) / 1e3
            times[i].append(mark)

    # -- describing -----------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "index": i,
                "label": s.label,
                "op": s.op,
                "shape": list(s.node.dims),
                "size": s.size,
                "bucket": s.bucket,
                "backend": s.backend_id,
                "device": s.device,
                "bytes": s.nbytes,
                "flops": s.flops,
                "decided_by": s.decided_by,
                "predicted_s": _number(s.predicted_s),
                "cpu_s": _number(s.choice.cpu_s) if s.choice is not None else None,
                "cuda_s": _number(s.choice.cuda_s) if s.choice is not None else None,
                "regret_s": _number(s.choice.regret_s) if s.choice is not None else None,
            }
            for i, s in enumerate(self.steps)
        ]

    def explain(self) -> str:
        """One row per node (and per baked transfer): what runs where, and which line said so.

        Where the profile prices the plan (its ``[costs]`` and ``[bus]``), each row also shows
        the predicted time of the step; a compute node its resident time on each device (its
        fastest backend there) and its regret: how much slower the whole plan would be with
        this node alone on the other device (negative: moving it would help).
        """
        priced = self.predicted_s is not None
        head = ["#", "node", "op", "shape", "size", "bucket", "backend", "device", "bytes"]
        if priced:
            head += ["predicted", "cpu", "cuda", "regret"]
        head.append("decided by")
        body = []
        for r, step in zip(self.rows(), self.steps):
            row = [
                str(r["index"]),
                r["label"],
                r["op"],
                "x".join(map(str, r["shape"])) or "()",
                str(r["size"]) if r["size"] else "",
                r["bucket"],
                r["backend"],
                r["device"],
                format_bytes(r["bytes"]),
            ]
            if priced:  # the step's own figures: rows() leaves out what JSON cannot hold
                choice = step.choice
                row.append(format_seconds(step.predicted_s))
                if choice is None:
                    row += ["", "", ""]
                else:
                    row += [
                        format_seconds(choice.cpu_s),
                        format_seconds(choice.cuda_s),
                        format_seconds(choice.regret_s, signed=True),
                    ]
            row.append(r["decided_by"])
            body.append(tuple(row))
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.stats is not None:
            s = self.stats
            lines.append(
                f"config: {self.config.path}   host memory: {self.host_memory}   arenas: host "
                f"{format_bytes(s.host_arena_bytes)}, device {format_bytes(s.device_arena_bytes)} "
                f"(buffers {format_bytes(s.planned_bytes)} before reuse; leaves "
                f"{format_bytes(s.leaf_bytes)})"
            )
        if priced:
            lines.append(
                f"placement: {self.placement}   predicted total: "
                f"{format_seconds(self.predicted_s)} (resident times from [costs], copies and "
                "hand-offs from [bus], added in order)"
            )
        else:
            lines.append(f"placement: {self.placement}")
        if self.placement_note:
            lines[-1] += f" ({self.placement_note})"
        return "\n".join(lines)

    def __repr__(self) -> str:
        kernels = sum(1 for s in self.steps if s.kind == "kernel")
        moves = sum(1 for s in self.steps if s.kind in ("h2d", "d2h"))
        return f"<Plan {kernels} kernels, {moves} transfers, config {self.config.path}>"


# ---- compile ------------------------------------------------------------------------------------


def _normalize_outputs(outputs: Any) -> tuple[list[Tensor], list[str] | None, str]:
    if isinstance(outputs, Tensor):
        return [outputs], None, "single"
    if isinstance(outputs, dict):
        names = list(outputs)
        nodes = list(outputs.values())
        kind = "dict"
    elif isinstance(outputs, (tuple, list)):
        names, nodes, kind = None, list(outputs), "tuple"
    else:
        raise SoftcudaError(
            f"compile expects a Tensor, a tuple or a dict of Tensors, got {type(outputs).__name__}"
        )
    for i, node in enumerate(nodes):
        if not isinstance(node, Tensor):
            where = f"output {names[i]!r}" if names is not None else f"output {i}"
            raise SoftcudaError(
                f"compile: every output must be a Tensor, but {where} is a {type(node).__name__}"
            )
    if not nodes:
        raise SoftcudaError(f"compile: no outputs given: the {type(outputs).__name__} is empty")
    return nodes, names, kind


def _normalize_updates(updates: Any) -> list[tuple[Tensor, Tensor]]:
    """``updates`` as (leaf, new value) pairs, or one sentence saying what is wrong."""
    if updates is None:
        return []
    if not isinstance(updates, dict):
        raise SoftcudaError(
            f"compile: updates must be a dict of leaf -> new value, got {type(updates).__name__}"
        )
    pairs = []
    for leaf, value in updates.items():
        if not isinstance(leaf, Tensor):
            what = f"a {type(leaf).__name__}"
        elif (why := leaf._not_writable()) is not None:
            what = f"{leaf.label}, {why}"
        else:
            what = None
        if what is not None:
            raise SoftcudaError(
                f"compile: updates write into leaves (made with sc.tensor, sc.zeros, ...), "
                f"but one key is {what}"
            )
        if not isinstance(value, Tensor):
            raise SoftcudaError(
                f"compile: the new value of leaf {leaf.label} must be a Tensor, got "
                f"{type(value).__name__}"
            )
        if value.dims != leaf.dims or value.dtype != leaf.dtype:
            raise ShapeError(
                f"compile: the new value of leaf {leaf.label} ({value.dims}, {value.dtype}) "
                f"must match the leaf ({leaf.dims}, {leaf.dtype})"
            )
        pairs.append((leaf, value))
    return pairs


class _Compiler:
    def __init__(
        self,
        config: Config,
        host_memory: str,
        allocate: bool = True,
        placement: str = "per-op",
        asked: bool = False,
    ) -> None:
        self.config = config
        self.costs = CostModel(config, host_memory)  # what every step is priced by
        self.allocate = allocate  # False: plan and describe, take no memory, bind nothing
        self.plan = Plan(config, host_memory)
        self.plan.placement = placement
        self.asked = asked  # the placement was named by the caller, not the default
        self.placed: Placement | None = None  # the planner's decision (None: per-op, unpriced)
        self.home: dict[int, Buffer] = {}  # id(node) -> buffer holding it on node.device
        self.moved: dict[tuple[int, str], Buffer] = {}  # (id(buffer), device) -> copy there
        self.decisions: dict[tuple[str, int], tuple[str, str, str, Any, int]] = {}
        # the executed steps in order: (step, (node, buffer) read, buffer written, backend module)
        self.pending: list[tuple[Step, list[tuple[Tensor, Buffer]], Buffer, Any]] = []
        self.mirrors: PinnedHostPool | None = None  # pinned copies of leaves made here
        self.leaf_of: dict[int, Tensor] = {}  # id(buffer) -> the leaf whose data it is

    def _add(
        self, step: Step, inputs: list[tuple[Tensor, Buffer]], out: Buffer, module: Any = None
    ) -> None:
        """Append an executed step; a buffer's last use is the index of the last step reading it.

        Each executed step writes exactly one new buffer, so a buffer is born at its writer's
        index in ``pending``.
        """
        index = len(self.pending)
        for _, buf in inputs:
            if buf is not None:  # None: a scalar constant, passed to the kernel as a number
                buf.last = index
        self.pending.append((step, inputs, out, module))
        self.plan.steps.append(step)

    def _on(self, node: Tensor, device: str) -> Buffer:
        """The buffer holding ``node``'s data on ``device``, baking a transfer if needed."""
        buf = self.home[id(node)]
        if buf.device == device:
            return buf
        key = (id(buf), device)
        if key not in self.moved:
            src = buf
            leaf = self.leaf_of.get(id(buf))  # the node itself, or a view of it
            if device == "cuda" and leaf is not None and self.plan.host_memory == "pinned":
                mirror = self._mirror(leaf) if self.allocate else None
                src = Buffer("cpu", buf.nbytes, keep=True, allocation=mirror)
            dst = Buffer(device, buf.nbytes)
            kind = "h2d" if device == "cuda" else "d2h"
            why = f"baked: {node.label} lives on {buf.device}"
            switch_s = self._switch_s(node) if kind == "d2h" else 0.0
            if switch_s:
                why += f"; + {format_seconds(switch_s)} hand-off to the cpu ([bus] switch_us)"
            step = Step(
                kind,
                node,
                device,
                "copy",
                f"{node.label}>{device}",
                why,
                transfer_bytes=buf.nbytes,
            )
            self._price_transfer(step, switch_s)
            self._add(step, [(node, src)], dst)
            self.moved[key] = dst
        return self.moved[key]

    def _switch_s(self, node: Tensor) -> float:
        """The hand-off the placement model charges ``node``'s copy home (0 where it charges
        none): the copy's row shows it, so that explain()'s rows add up to the total."""
        return 0.0 if self.placed is None else self.placed.switch_s.get(id(node), 0.0)

    def _price_transfer(self, step: Step, switch_s: float = 0.0) -> None:
        """A transfer step's predicted time where the plan is priced: the [bus] copy model at
        its bytes, plus the hand-off it carries (nan where [bus] does not price the copy)."""
        if self.placed is None or self.placed.predicted_s is None:
            return
        seconds = self.costs.transfer_s(step.kind, step.transfer_bytes)
        step.predicted_s = float("nan") if seconds is None else seconds + switch_s

    def _mirror(self, node: Tensor) -> Any:
        """The leaf's page-locked copy, made once per leaf and shared by every pinned plan.

        The baked host->device copy reads it directly (no staging copy at run time), while the
        leaf itself stays where it was made, so a pageable plan of the same graph keeps copying
        from pageable memory: each plan measures the host memory it names.  ``assign`` writes
        both.
        """
        if node._mirror is None:
            if self.mirrors is None:
                self.mirrors = PinnedHostPool(self.config.block_size)
            allocation = self.mirrors.alloc(node.nbytes)
            np.copyto(allocation.view(node.dims, node.dtype), node.data)
            node._mirror = allocation
        return node._mirror

    def _resident(self, leaf: Tensor) -> Buffer:
        """The buffer of ``leaf``'s copy on the GPU, made (and filled from the host) by the
        first plan that keeps the leaf there and shared by every later one, so that all of
        them update and read the same values."""
        allocation = leaf._resident
        if allocation is None and self.allocate:
            try:  # a block of its own, exactly its size, freed with the leaf
                allocation = DevicePool(block_size=1).alloc(leaf.nbytes)
            except PoolError as exc:
                raise PoolError(
                    f"compile: leaf {leaf.label} {leaf.dims} is kept on the GPU by this plan's "
                    f"placement, which needs {format_bytes(leaf.nbytes)} of device memory: {exc}"
                ) from None
            leaf._keep_on_device(allocation)
        return Buffer("cuda", leaf.nbytes, keep=True, allocation=allocation)

    def _decide(self, node: Tensor) -> tuple[str, str, str, Any, int]:
        """(backend_id, bucket, decided_by, module, size) for ``node``: by its variant's rules
        where the profile has them (``ops.variant_of``), in the variant's size metric, else by
        its op's; cached per (name, size)."""
        name = _ops.profile_name(node, self.config.rules)
        size = _ops.node_size(name, node)
        key = (name, size)
        if key in self.decisions:
            return self.decisions[key]
        rule = self.config.lookup(name, size)
        if rule is not None:
            decided_by = f"{self.config.name}:{rule.line}" if rule.line else self.config.name
            if name != node.op:
                decided_by += f" ({name} rule)"
        else:
            rule = packaged_default().lookup(node.op, size)
            if rule is None:  # DEFAULT.soft covers every op; a test keeps it so
                raise SoftcudaError(f"no rule for {node.op} in {self.config.path} or DEFAULT.soft")
            decided_by = f"DEFAULT.soft:{rule.line} ({node.op} not in {self.config.name})"
        module = self._module(node, size, rule.backend, decided_by)
        self.decisions[key] = (rule.backend, rule.bucket, decided_by, module, size)
        return self.decisions[key]

    def _module(self, node: Tensor, size: int, backend_id: str, decided_by: str) -> Any:
        """The backend module that runs ``node`` (None when nothing is bound)."""
        try:
            return backends.get(backend_id) if self.allocate else None
        except BackendUnavailable as exc:
            raise BackendUnavailable(
                f"{node.op} node {node.label} (size {size}) is assigned to {backend_id} by "
                f"{decided_by}, but {str(exc).split(': ', 1)[-1]}; profile this machine with "
                f"`softcuda init`, or use `--config DEFAULT.soft`"
            ) from None

    def _rule(self, node: Tensor) -> tuple[str, str]:
        """The per-op decision for ``node``: (backend, the line that made it)."""
        backend_id, _, decided_by, _, _ = self._decide(node)
        return backend_id, decided_by

    def place(
        self, order: list[Tensor], roots: list[Tensor], updates: list[tuple[Tensor, Tensor]]
    ) -> None:
        """Ask the planner for every node's device and backend, and updated leaves' homes,
        unless the plan is per-op and the profile cannot price it (then ``_decide`` alone
        decides, as it always has, and every leaf stays on the host)."""
        name = self.plan.placement
        if name == "per-op" and not self.config.has_costs:
            return
        try:
            self.placed = Planner(self.costs, name).place(order, roots, self._rule, updates)
        except MissingCosts as exc:
            if self.asked:  # graph placement was asked for by name: the caller hears why not
                raise
            # the default, on a profile whose costs cannot price this graph: each node's rule,
            # exactly as for a profile without costs, and explain() says why
            self.plan.placement = "per-op"
            self.plan.placement_note = "graph placement not possible: no costs for " + ", ".join(
                exc.missing
            )
            return
        self.plan.predicted_s = self.placed.predicted_s

    def compile_nodes(self, order: list[Tensor]) -> None:
        home, steps = self.home, self.plan.steps
        for node in order:
            if node.op == "none":
                alloc = node._allocation
                if alloc is None or not alloc.valid:
                    raise PoolError(
                        f"leaf {node.label} {node.dims} belongs to a pool that was "
                        "reset; create it again"
                    )
                if self.placed is not None and self.placed.homes.get(id(node)) == "cuda":
                    home[id(node)] = self._resident(node)
                    self.leaf_of[id(home[id(node)])] = node
                    node.device, node.backend_id = "cuda", "leaf"
                    why = f"leaf kept on cuda between runs ({self.plan.placement} placement)"
                    steps.append(Step("leaf", node, "cuda", "leaf", node.label, why))
                    continue
                # a leaf's data starts its own allocation in the leaf pool
                home[id(node)] = Buffer("cpu", node.nbytes, keep=True, allocation=alloc)
                self.leaf_of[id(home[id(node)])] = node
                node.device, node.backend_id = "cpu", "leaf"
                steps.append(Step("leaf", node, "cpu", "leaf", node.label, "leaf"))
                continue
            src = cast(Tensor, node.a)  # every op node has a first input
            if is_view(node):
                node.device, node.backend_id = src.device, "view"
                home[id(node)] = home[id(src)]
                steps.append(
                    Step("view", node, node.device, "view", node.label, "view of " + src.label)
                )
                continue
            choice = self.placed.choices[id(node)] if self.placed is not None else None
            if node.op == "reshape":  # non-contiguous data: a contiguous copy
                device, backend_id, kind = src.device, "copy", "copy"
                size, bucket, decided_by, module = node.size, "", "reshape of strided data", None
                if choice is not None:
                    device = choice.device
            else:
                if choice is None or self.plan.placement == "per-op":
                    backend_id, bucket, decided_by, module, size = self._decide(node)
                else:  # priced by its variant's costs where the profile has them
                    size = _ops.node_size(self.costs.priced_name(node), node)
                    backend_id, bucket, decided_by = choice.backend_id, "", choice.decided_by
                    module = self._module(node, size, backend_id, decided_by)
                device, kind = backends.BACKENDS[backend_id].device, "kernel"
            inputs = [
                (t, None if is_scalar_argument(t, node) else self._on(t, device))
                for t in node.inputs
            ]
            out = Buffer(device, node.nbytes)
            node.device, node.backend_id = device, backend_id
            home[id(node)] = out
            step = Step(kind, node, device, backend_id, node.label, decided_by, size, bucket)
            if choice is not None:
                step.predicted_s, step.choice = choice.predicted_s, choice
            self._add(step, inputs, out, module)

    def finish(
        self, roots: list[Tensor], order: list[Tensor], updates: list[tuple[Tensor, Tensor]]
    ) -> Plan:
        plan = self.plan
        updated = {id(leaf) for leaf, _ in updates}
        host_results = []
        refresh: dict[int, Tensor] = {}  # updated leaves kept on the GPU that are also outputs
        for node in roots:
            buf = self.home[id(node)]
            leaf = self.leaf_of.get(id(buf))
            if buf.device == "cuda" and leaf is not None and id(leaf) in updated:
                # returned with its new values: its host copy, refreshed after the writebacks
                buf = Buffer("cpu", leaf.nbytes, keep=True, allocation=leaf._allocation)
                self.leaf_of[id(buf)] = leaf
                refresh[id(leaf)] = leaf  # one copy home per leaf, for it and its views
            else:
                buf = self._on(node, "cpu")
                buf.keep = True
            host_results.append((node, buf))
        # A new value reaches its leaf's home (the host, or the leaf's resident copy on the
        # GPU) and is kept to the end of the run: the writebacks come after every other step,
        # so every new value is computed from the old values before any leaf is overwritten.
        sources = []
        for leaf, value in updates:
            where = self.home[id(leaf)].device if id(leaf) in self.home else "cpu"
            buf = self._on(value, where)
            buf.keep = True
            owner = self.leaf_of.get(id(buf))
            if owner is not None and id(owner) in updated:
                raise SoftcudaError(
                    f"compile: the new value of leaf {leaf.label} is the data of leaf "
                    f"{owner.label}, which is updated too; write the value as an expression "
                    f"({owner.label} * 1.0) so that it is computed before the updates"
                )
            step = Step(
                "update",
                leaf,
                where,
                "copy",
                f"{leaf.label}<-{value.label}",
                f"update: {value.label} into leaf {leaf.label}, after every other step",
                transfer_bytes=leaf.nbytes,
            )
            if self.placed is not None and self.placed.predicted_s is not None:
                step.predicted_s = self.placed.updates_s.get(id(leaf), float("nan"))
            sources.append((leaf, value, buf, step))
        # A result that is such a leaf comes home by its own copy, after the writebacks: a row
        # of its own, priced as the model priced that result's copy home.
        refreshes = []
        for leaf in refresh.values():
            step = Step(
                "d2h",
                leaf,
                "cpu",
                "copy",
                f"{leaf.label}>cpu",
                f"result: leaf {leaf.label} lives on cuda; its host copy refreshed after the "
                "writebacks",
                transfer_bytes=leaf.nbytes,
                blocking=True,
            )
            self._price_transfer(step, self._switch_s(leaf))
            refreshes.append((leaf, step))
        self._plan_memory(order)
        plan.steps += [step for *_, step in sources]
        plan.steps += [step for _, step in refreshes]
        plan._nodes = order
        if not self.allocate:
            return plan
        on_gpu = "cuda" in plan._arenas or any(b.device == "cuda" for b in self.home.values())
        if on_gpu:  # kernels and transfers run on the plan's own stream (leaves kept there too)
            import cupy

            plan._stream = cupy.cuda.Stream(non_blocking=True)
        views: dict[int, Any] = {}  # id(node) -> its array over its home buffer
        home = self.home

        def view(node: Tensor, buf: Buffer) -> Any:
            if buf is not home[id(node)]:  # a copy on another device: made once, used rarely
                return buf.view(node)
            found = views.get(id(node))
            if found is None:
                found = views[id(node)] = buf.view(node)
            return found

        device_busy = False  # work queued on the stream since the last synchronize
        for step, inputs, out, module in self.pending:
            on_host = step.on_host
            if on_host and device_busy:
                # Transfers are asynchronous (truly so from pinned memory): a host step must
                # not read a device->host result, nor overwrite arena bytes a host->device copy
                # is still reading, before the stream has caught up.  Baked here, once per
                # boundary; a pure CPU or pure CUDA chain gets none.
                plan._runs.append(plan._stream.synchronize)
            device_busy = not on_host
            if step.kind in ("h2d", "d2h"):  # transfers move whole buffers, as bytes
                in_arrays = [_bytes_view(buf) for _, buf in inputs]
                out_array = _bytes_view(out)
            else:
                in_arrays = [
                    t.dtype.type(t.attrs["value"]) if buf is None else view(t, buf)
                    for t, buf in inputs
                ]
                out_array = view(step.node, out)
            step.run = self._prebind(step, module, in_arrays, out_array)
            plan._runs.append(step.run)
        for leaf, value, buf, step in sources:
            if step.device == "cuda":  # queued on the stream after every other step
                target = self.home[id(leaf)].view(leaf)
                copy = cuda_transfer.make_copy(view(value, buf), target)
                step.run = _DeviceWriteback(leaf, copy)
                plan._runs.append(step.run)
                device_busy = True
        on_host = [source for source in sources if source[3].device == "cpu"]
        if (on_host or refresh) and device_busy:  # device->host copies and writes have landed
            plan._runs.append(plan._stream.synchronize)
        for leaf, value, buf, step in on_host:
            step.run = _Writeback(leaf, view(value, buf))
            plan._runs.append(step.run)
        for leaf, step in refreshes:
            step.run = leaf._sync_host
            plan._runs.append(step.run)

        # Intermediate buffers are reused once dead, so only outputs (and leaves) keep ``data``.
        # A leaf's data (an output that is a leaf, or a view of one) stays read-only, also
        # where a plan hands it out: new values go through assign, which the mirrors follow.
        def handed_out(node: Tensor, buf: Buffer) -> Any:
            data = view(node, buf)
            leafs = id(buf) in self.leaf_of and buf.device == "cpu"  # (a device array has no flag)
            return _read_only(data) if leafs else data

        for node in roots:
            if not node.is_leaf:
                node.data = handed_out(node, self.home[id(node)])
        plan._out_views = [handed_out(node, buf) for node, buf in host_results]
        plan.allocated = True
        leaves = {id(node): node for node in order if node.is_leaf}
        leaves.update((id(leaf), leaf) for leaf, _ in updates)  # updated but never read, too
        plan._leaves = [(node, node._allocation) for node in leaves.values()]
        plan._host_leaves = [
            node for node in order if node.is_leaf and self.home[id(node)].device == "cpu"
        ]
        used = [*plan._arenas.values(), *(allocation for _, allocation in plan._leaves)]
        plan._watch = list({id(a.pool): (a.pool, a.generation) for a in used}.values())
        return plan

    def _prebind(self, step: Step, module: Any, ins: list, out: Any) -> Callable[[], Any]:
        node = step.node
        if step.kind == "kernel":
            return module.make_kernel(node.op, node.attrs, ins, out, **self._settings(step, module))
        if step.kind == "copy":
            if step.device == "cuda":
                return cuda_transfer.make_copy(ins[0], out)
            target = out.reshape(ins[0].shape)
            return partial(np.copyto, target, ins[0])
        return cuda_transfer.make_transfer(step.kind, ins[0], out, self.plan._stream)

    def _settings(self, step: Step, module: Any) -> dict[str, int]:
        """The profile's [device] settings a backend declares, checked by the backend (a thread
        count this machine cannot run is the profile's error, named by its line)."""
        config, found = self.config, {}
        for keyword, key in backends.BACKENDS[step.backend_id].settings:
            if key in config.device:
                value = int(config.device[key])
                problem = module.check_setting(keyword, value)
                if problem:
                    raise ConfigError(config.path, config.lines.get(f"device.{key}"), problem)
                found[keyword] = value
        return found

    def _plan_memory(self, order: list[Tensor]) -> None:
        """Give every non-leaf buffer an offset in its device's arena, reusing dead space.

        Walk the executed steps in order: place the buffer a step writes, then give back the
        buffers whose last reader it is (after placing, so that a step's output never shares
        memory with its inputs).  Outputs and leaves are never given back.
        """
        plan = self.plan
        arenas: dict[str, _Arena] = {}
        placed: list[Buffer] = []
        for index, (_, inputs, out, _) in enumerate(self.pending):
            arena = arenas.get(out.device)
            if arena is None:
                arena = arenas[out.device] = _Arena(_ALIGNMENT[out.device])
            out.offset = arena.take(_round_up(max(out.nbytes, 1), arena.alignment))
            placed.append(out)
            for _, buf in inputs:
                if buf is not None and buf.last == index and not buf.keep and not buf.freed:
                    buf.freed = True
                    arena = arenas[buf.device]
                    arena.give(buf.offset, _round_up(max(buf.nbytes, 1), arena.alignment))
        plan.stats = PlanStats(
            host_arena_bytes=arenas["cpu"].end if "cpu" in arenas else 0,
            device_arena_bytes=arenas["cuda"].end if "cuda" in arenas else 0,
            planned_bytes=sum(a.taken for a in arenas.values()),
            leaf_bytes=sum(n.nbytes for n in order if n.op == "none"),
        )
        if not self.allocate:
            return
        allocations = plan._arenas
        for device, arena in arenas.items():
            pool = make_pool(device, self.config.block_size, plan.host_memory)
            try:
                allocations[device] = pool.alloc(arena.end)
            except PoolError as exc:
                raise PoolError(
                    f"compile: the plan needs one {pool.kind} arena of "
                    f"{format_bytes(arena.end)} ({arena.end} bytes): {exc}"
                ) from None
        for buf in placed:
            buf.allocation = allocations[buf.device]


def _number(x: float | None) -> float | None:
    """A float for a plan's rows, None where there is none or it is not finite (strict JSON
    has no NaN or infinity: a regret or a resident time of inf means "cannot run there")."""
    return None if x is None or not math.isfinite(x) else float(x)


def format_seconds(x: float | None, signed: bool = False) -> str:
    """A time as softcuda prints it: 3 significant digits in s, ms or us; "" for none; an
    infinite time (a device that cannot run the node) as "-", or "cannot" for a regret."""
    if x is None or x != x:
        return ""
    if x == float("inf"):
        return "-" if not signed else "cannot"
    sign = ("+" if x >= 0 else "-") if signed else ("-" if x < 0 else "")
    x = abs(x)
    if x >= 1:
        return f"{sign}{x:.3g} s"
    if x >= 1e-3:
        return f"{sign}{x * 1e3:.3g} ms"
    return f"{sign}{x * 1e6:.3g} us"


def _read_only(array: np.ndarray) -> np.ndarray:
    array = array.view()
    array.flags.writeable = False
    return array


def _bytes_view(buf: Buffer):
    return buf.allocation.view((buf.nbytes,), np.uint8, None, buf.offset)


class _Arena:
    """First-fit offsets inside one growing arena; freed ranges merge with their neighbours."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.end = 0
        self.taken = 0  # bytes handed out in all, as if nothing were reused
        self.free: list[list[int]] = []  # [offset, size], sorted by offset, never adjacent

    def take(self, size: int) -> int:
        """An offset for ``size`` bytes (already a multiple of the alignment)."""
        self.taken += size
        for i, span in enumerate(self.free):
            if span[1] >= size:
                offset = span[0]
                if span[1] == size:
                    del self.free[i]
                else:
                    span[0] += size
                    span[1] -= size
                return offset
        offset = self.end
        self.end += size
        return offset

    def give(self, offset: int, size: int) -> None:
        i = bisect.bisect_left(self.free, [offset, 0])
        self.free.insert(i, [offset, size])
        if i + 1 < len(self.free) and offset + size == self.free[i + 1][0]:
            self.free[i][1] += self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == offset:
            self.free[i - 1][1] += self.free.pop(i)[1]


def compile(  # noqa: A001 - the design's name
    outputs: Any,
    config: Config | str | None = None,
    *,
    host_memory: str | None = None,
    allocate: bool = True,
    placement: str | None = None,
    updates: Any = None,
) -> Plan:
    """Compile ``outputs`` (a Tensor, tuple or dict of Tensors, or a ``Graph`` of outputs and
    updates) against ``config``.

    ``updates`` maps leaves to Tensors of their shape and dtype: at the end of every run each
    new value is written into its leaf in place (every new value is computed before any leaf
    is overwritten), so the next run, ``leaf.data`` and every plan reading the leaf see it.  An
    output that is an updated leaf is returned with its new values.

    ``config`` is a path, a Config, or None for the resolved default (see softcuda.config).
    ``host_memory`` ("pageable" or "pinned") overrides the config's ``[pool] host_memory``.
    With ``allocate=False`` the plan is made and sized but takes no memory, binds no kernel
    and needs none of its backends here: it can be explained, not run.
    ``placement`` chooses each node's device: "graph" (the least predicted time for the whole
    plan; the default where the profile has [costs]), "per-op" (each node's own rule; the
    default without costs), "cpu" or "cuda" (everything on one device).  softcuda.planner says
    how each decides.
    """
    if isinstance(outputs, Graph):
        if updates is not None:
            raise SoftcudaError("compile: updates are given twice, in the Graph and as updates=")
        outputs, updates = outputs.outputs, outputs.updates
    cfg = as_config(config)
    here = cfg.check_device()
    roots, names, kind = _normalize_outputs(outputs)
    writes = _normalize_updates(updates)
    asked = placement is not None
    placement = resolve_placement(placement, cfg)
    source = "the host_memory argument" if host_memory else f"[pool] of {cfg.name}"
    if host_memory is not None and host_memory not in HOST_MEMORY_KINDS:
        raise SoftcudaError(
            f"compile: host_memory must be one of {', '.join(HOST_MEMORY_KINDS)}, got "
            f"{host_memory!r}"
        )
    host_memory = host_memory or cfg.host_memory
    if host_memory == "pinned" and allocate:
        ok, reason = backends.cuda_available()
        if not ok:
            advice = (
                "use pageable host memory"
                if here
                else f"{cfg.name} is a profile of {cfg.made_on}: profile this machine with "
                "`softcuda init`, or use DEFAULT.soft"
            )
            raise BackendUnavailable(
                f"host_memory = pinned (from {source}) needs CUDA for page-locked memory, but "
                f"{reason}; {advice}"
            )
    # Compile makes a few long-lived objects per node; the cyclic collector would rescan the
    # whole growing graph many times over, finding nothing to free; on a long chain that is a
    # large share of compile time (benchmarks/executor_cpu.py times a 100,000-node compile).
    collecting = gc.isenabled()
    gc.disable()
    try:
        # new values are computed like outputs; each then goes to its leaf's home
        order = topological_order(roots + [value for _, value in writes])
        compiler = _Compiler(cfg, host_memory, allocate, placement, asked)
        compiler.plan._out_names, compiler.plan._out_kind = names, kind
        compiler.place(order, roots, writes)
        compiler.compile_nodes(order)
        return compiler.finish(roots, order, writes)
    finally:
        if collecting:
            gc.enable()


def _evaluate_tensor(node: Tensor) -> np.ndarray:
    """``Tensor.numpy()`` of a computed node: compile it with the resolved default config once,
    and run the plan again only when a leaf has changed since (cached on the node)."""
    cache = node._cache  # one read: another thread may replace it meanwhile
    if cache is None or cache[0] != _leaf_epoch[0]:
        epoch = _leaf_epoch[0]
        plan = cache[1] if cache is not None else compile(node)
        try:  # the value is kept as the run returned it, not as the plan's buffer, which
            value = plan.evaluate()  # another thread's run of the plan may overwrite
        except PoolError:  # a pool was reset since: compile afresh
            plan = compile(node)
            value = plan.evaluate()
        cache = node._cache = (epoch, plan, value)
    return cache[2].copy()


Tensor.numpy_hook = _evaluate_tensor
