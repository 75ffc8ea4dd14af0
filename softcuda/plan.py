"""A compiled plan: its rows, its prebound steps, and running them.

``Plan.evaluate()`` only calls the callables compile bound, in order.  It never reads the
config, never looks up a backend, never allocates (tests/test_graph.py proves it by making each
of those raise during evaluate).  Runs of one plan from several threads take turns: a run
writes the plan's one set of buffers.  ``profile()`` times each step on its own; ``explain()``
and ``rows()`` show every decision that made the plan.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops as _ops
from . import pool as _pool
from .backends import cuda_timing
from .config import Config
from .errors import PoolError, SoftcudaError
from .pool import format_bytes
from .tensor import Tensor, _behind, _behind_ref, _leaf_epoch


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


IN_PLACE = "in place"
"""The backend an update step names where its new value's kernel wrote the leaf itself."""


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
    # (backend, why) where the kernel bound is another backend's in this one's place (cpu_threads
    # without its native kernels runs cpu_fallback's): explain() names it
    runs_as: tuple[str, str] | None = None
    # the fused group this kernel runs (softcuda.groups.Group; its root is ``node``), or None
    group: Any = None
    # a fused group's predicted time unfused: its members' own steps, added (nan: unpriced)
    unfused_s: float = float("nan")
    # a fused group's extra outputs: (member, its Buffer), written by the same kernel
    extra_out: Any = None
    # its kernel writes an updated leaf in place: running it twice applies the update twice
    writes_leaf: bool = False

    @property
    def on_host(self) -> bool:
        """A kernel or copy that the CPU runs (transfers are queued on the plan's stream)."""
        return self.blocking or self.device == "cpu" and self.kind in ("kernel", "copy", "update")

    @property
    def nbytes(self) -> int:
        """Bytes the step moves: a kernel's inputs read once and output written once."""
        if self.group is not None:  # its inputs read once, its root written once
            g = self.group
            written = self.node.size + sum(m.size for m in g.extras)
            return g.dtype.itemsize * (sum(t.size for t in g.inputs) + written)
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
        if self.group is not None:
            return sum(
                _ops.flop_count(m.op, [t.dims for t in m.inputs], m.dims)
                for m in self.group.members
            )
        node = self.node
        return _ops.flop_count(node.op, [t.dims for t in node.inputs], node.dims)

    @property
    def op(self) -> str:
        if self.kind in ("h2d", "d2h", "update"):
            return self.kind
        if self.node.is_leaf:
            return "const" if "value" in self.node.attrs else "leaf"
        if self.group is not None:
            return f"fused({len(self.group.members)})"
        scale = self.node.attrs.get("scale")  # a softmax of x * scale, read as x
        return self.node.op if scale is None else f"{self.node.op}(x*{scale:g})"


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
    leaf's resident copy, queued on the plan's stream (None where the value's kernel wrote it
    there in place); the host copy is now behind.  The leaf is marked behind by a weak
    reference made here, once: a run allocates nothing, and the mark goes with the leaf."""

    __slots__ = ("key", "ref", "copy")

    def __init__(self, leaf: Tensor, copy: Callable[[], Any] | None) -> None:
        self.key, self.ref = id(leaf), _behind_ref(leaf)
        self.copy = copy

    def __call__(self) -> None:
        if self.copy is not None:
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
        self._resets = -1  # pool.RESETS when the pools were last found as bound (-1: not yet)
        self._marked = False  # the nodes' evaluated bits are set (after the first good run)
        self._stream: Any = None
        self.stats: PlanStats | None = None
        self.last_outputs: list[np.ndarray] = []
        self.allocated = False  # compile(..., allocate=False) plans only describe
        self.placement = "per-op"  # how its devices were chosen (softcuda.planner)
        self.placement_note = ""  # why the default graph placement was not used, if it was not
        # compile(..., tune=True): the choice, the model's pick, the measured seconds per
        # placement and where it came from ("measured", or the cache file's path)
        self.tuned: dict | None = None
        self.predicted_s: float | None = None  # the whole plan by the profile's costs
        # the last profile()'s median seconds per step (by index), shown by explain()
        self.measured: dict[int, float] = {}
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
        if _pool.RESETS[0] == self._resets:  # no pool reset since bind: nothing to look at
            return
        if all(pool.generation == generation for pool, generation in self._watch):
            self._resets = _pool.RESETS[0]
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
            # a leaf written in place may hold its new values already: its copies follow it
            # (a GPU leaf's host copy marked behind), so every reader sees one set of values
            for step in self.steps:  # what follows an in-place write: mirrors, marks
                if step.backend_id != IN_PLACE or step.run is None:
                    continue
                try:
                    step.run()
                except Exception:  # noqa: BLE001 - the run's own error is the one to raise
                    pass
            for node in self._nodes:
                node.evaluated = False
            self._marked = False
            raise
        if not self._marked:  # once, not per run: every run computes every node again
            for node in self._nodes:
                node.evaluated = True
            self._marked = True
        values = [v.copy() for v in self._out_views] if copy else list(self._out_views)
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
        self.measured = {i: float(np.median(reps)) for i, reps in times.items() if reps}
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
                    "median_s": self.measured.get(i, 0.0),
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
                    # a kernel that updates a leaf in place runs once: timed as it came
                    if not gated or gate.held() or step.writes_leaf:
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
                "runs_as": s.runs_as[0] if s.runs_as else None,
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
        if self.measured:
            head.append("measured")
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
                r["backend"] + (f" (as {r['runs_as']})" if r["runs_as"] else ""),
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
            if self.measured:
                mine = self.measured.get(r["index"])
                row.append(format_seconds(mine) if mine is not None else "")
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
        for i, step in enumerate(self.steps):
            if step.group is not None:
                lines.append(_group_line(step, self.measured.get(i)))
        if self.tuned is not None:
            lines.append(_tuned_line(self.tuned))
        for backend, why in sorted({(s.runs_as[0], s.runs_as[1]) for s in self.steps if s.runs_as}):
            lines.append(f"runs as {backend}: {why}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        kernels = sum(1 for s in self.steps if s.kind == "kernel")
        moves = sum(1 for s in self.steps if s.kind in ("h2d", "d2h"))
        return f"<Plan {kernels} kernels, {moves} transfers, config {self.config.path}>"


# ---- how a plan shows its figures and hands out its arrays ---------------------------------


def _tuned_line(tuned: dict) -> str:
    """explain()'s line for a tuned plan: what was measured, what was kept, and by how much it
    beat the model's pick."""
    times = tuned.get("measured", {})
    shown = ", ".join(
        f"{name} {format_seconds(s) if isinstance(s, float) else s}" for name, s in times.items()
    )
    line = f"tuned: kept {tuned['choice']} (measured {shown})"
    model, choice = tuned.get("model"), tuned["choice"]
    if model != choice and isinstance(times.get(model), float) and times.get(choice):
        line += f"; the model's pick, {model}, took {times[model] / times[choice]:.2f}x as long"
    source = tuned.get("source", "")
    line += "; from the tuning cache " + source if source != "measured" else ""
    return line


def _group_line(step: Step, measured: float | None = None) -> str:
    """explain()'s line for one fused group: its members, its predicted time beside the
    members' own, unfused, and its time as the last ``profile()`` measured it."""
    g = step.group
    members = ", ".join(f"{m.label} {m.op}" for m in g.members)
    line = f"fused {step.label} on {step.device} ({step.backend_id}): {members}"
    if g.extras:
        line += "; also writes " + ", ".join(m.label for m in g.extras)
    if step.predicted_s == step.predicted_s:
        line += f"; predicted {format_seconds(step.predicted_s)}"
        if step.unfused_s == step.unfused_s:
            line += f" against {format_seconds(step.unfused_s)} unfused"
    if measured is not None:
        line += f"; measured {format_seconds(measured)}"
    return line


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
