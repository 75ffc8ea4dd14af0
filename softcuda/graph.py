"""Compile a lazy graph into a Plan: the stages, in order, and the graph they start from.

``compile(outputs, config)`` does every decision once, in named stages, each a function from
one plain structure to the next: place (``planner.place``) -> fuse (``fuse.fuse``) -> lower
(``lower.Lowering``) -> plan memory (``memory.plan_memory``) -> bind (``bind.bind``).  What they do:

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

``Plan.evaluate()`` (``softcuda.plan``) then only calls those callables in order.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import backends
from .bind import bind
from .config import Config, as_config
from .costs import CostModel
from .errors import BackendUnavailable, PoolError, ShapeError, SoftcudaError
from .fuse import fuse as fuse_stage
from .fuse import fusing_devices
from .lower import Lowering, in_place_saving
from .memory import plan_memory
from .plan import Buffer, Plan, PlanStats, Step, format_seconds
from .planner import RuleBook, place, resolve_placement
from .pool import HOST_MEMORY_KINDS
from .tensor import Tensor, _behind, _leaf_epoch, topological_order

__all__ = ["Buffer", "Graph", "Plan", "PlanStats", "Step", "compile", "format_seconds"]


@dataclass(frozen=True, eq=False)
class Graph:
    """Outputs with in-place updates, as one value: ``compile(Graph(outputs, updates))`` is
    ``compile(outputs, updates=updates)``, and a graph script's ``build()`` may return one, so
    that ``softcuda run`` shows a training step with its updates."""

    outputs: Any
    updates: Any = None


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


def compile(  # noqa: A001 - the design's name
    outputs: Any,
    config: Config | str | None = None,
    *,
    host_memory: str | None = None,
    allocate: bool = True,
    placement: str | None = None,
    updates: Any = None,
    fuse: bool = True,
    tune: bool = False,
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
    ``fuse`` (default True) runs each group of elementwise ops (with at most one reduction at
    its end) on one device as one generated kernel, where the profile prices that below the ops
    one by one (softcuda.fuse); False keeps one kernel per node, for comparison.
    ``tune=True`` measures the plan the placement chose against its rivals (the one-device
    plans and per-op) and keeps the fastest, caching the choice for the next process
    (softcuda.tuning); leaves the plan updates are restored after the timed runs, so each
    ``evaluate()`` the user makes is one step.
    """
    if isinstance(outputs, Graph):
        if updates is not None:
            raise SoftcudaError("compile: updates are given twice, in the Graph and as updates=")
        outputs, updates = outputs.outputs, outputs.updates
    cfg = as_config(config)
    here = cfg.check_device()
    roots, names, kind = _normalize_outputs(outputs)
    writes = _normalize_updates(updates)
    if tune:
        kwargs = {"host_memory": host_memory, "allocate": allocate, "fuse": fuse}
        kwargs["updates"] = updates
        return _tuned(outputs, cfg, roots, writes, placement, kwargs)
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
        plan = Plan(cfg, host_memory)
        plan._out_names, plan._out_kind = names, kind
        costs = CostModel(cfg, host_memory)
        rules = RuleBook(cfg)
        fusing = fusing_devices(cfg) if fuse else ()
        placed = place(costs, placement, asked, order, roots, rules, writes, fusing)
        placed = fuse_stage(placed, order, roots, writes, costs, fuse, rules)
        if placed.name == "graph" and fusing and len(order) <= CHECKED_NODES:
            placed = _no_worse_than_one_device(placed, costs, order, roots, rules, writes, fusing)
        plan.placement, plan.placement_note = placed.name, placed.note
        if placed.placement is not None:
            plan.predicted_s = placed.placement.predicted_s
            order = gpu_work_first(order, placed)
        lowering = Lowering(cfg, costs, allocate, plan, rules)
        lowered = lowering.lower(order, roots, writes, placed.placement, placed.groups)
        plan_memory(lowered, cfg.block_size)
        return bind(lowered, cfg) if allocate else plan
    finally:
        if collecting:
            gc.enable()


def gpu_work_first(order: list[Tensor], placed) -> list[Tensor]:
    """``order`` with the host-only tail last: every node from which no GPU node can be
    reached (a loss's mean on the CPU, a metric, the copies home they need) runs after every
    node that is on the GPU or leads to one, each part in its own order (still topological: a
    node that leads to the GPU never reads one that does not).

    Why: the host issues GPU steps without waiting and waits only where a CPU step needs a
    GPU value; a plan whose loss went to the CPU mid-step waited there for the forward pass,
    then issued the whole backward pass to an idle GPU.  The 1024-1024-10 training step's
    graph plan (its mean on the CPU) ran 1.10 times its all-CUDA plan on the H100 so
    (results/nvidia-h100/train-vs-torch.txt); with the tail last, its one wait is the end of
    the step's GPU work, as the all-CUDA plan's is."""
    placement = placed.placement
    group_device = {id(m): g.device for g in placed.groups for m in g.members}

    def on_gpu(node: Tensor) -> bool:
        device = group_device.get(id(node))
        if device is None:
            choice = placement.choices.get(id(node))
            device = choice.device if choice is not None else placement.homes.get(id(node))
        return device == "cuda"

    if not any(on_gpu(node) for node in order):
        return order
    leads: set[int] = set()  # id() of nodes on the GPU or with a GPU node among their readers
    for node in reversed(order):
        if id(node) in leads or on_gpu(node):
            leads.add(id(node))
            for source in node.inputs:
                leads.add(id(source))
    head = [node for node in order if id(node) in leads]
    if len(head) == len(order):
        return order
    return head + [node for node in order if id(node) not in leads]


CHECKED_NODES = 20_000
"""The largest graph whose fused graph plan is also checked against the fused one-device plans:
the check places the graph twice more, which on a 100,000-node chain tripled what placement
adds to compile (benchmarks/executor_cpu.py)."""


def _no_worse_than_one_device(placed, costs, order, roots, rules, writes, fusing):
    """The graph plan, or a one-device plan where that, fused, is predicted faster.  The cut
    weighs fusion by scaling each member's cost (planner.Planner._weigh_fusion), which is exact
    only where a group lands whole on one device; so the fused one-device plans are priced too,
    and the least predicted total as lowered (``lower.in_place_saving``) is the plan (its
    explain() says which)."""
    found = placed.placement.predicted_s if placed.placement is not None else None
    if found is None:
        return placed
    found -= in_place_saving(placed, gpu_work_first(order, placed), roots, writes)
    devices = ("cpu", "cuda") if costs.cuda_machine else ("cpu",)
    for device in devices:
        other = place(costs, device, True, order, roots, rules, writes, fusing)
        other = fuse_stage(other, order, roots, writes, costs, True, rules)
        seconds = other.placement.predicted_s if other.placement is not None else None
        if seconds is not None:  # as lowered: on the order lowering takes
            seconds -= in_place_saving(other, gpu_work_first(order, other), roots, writes)
        if seconds is not None and seconds < found * (1 - 1e-9):
            found = seconds
            other.name = "graph"
            other.note = f"the all-{device} plan, fused, is predicted below the cut's"
            placed = other
    return placed


TUNE_REPEAT = 7
"""Timed runs of each candidate plan per round, in five rounds taken in turns."""


def _tuned(outputs: Any, cfg: Config, roots, writes, placement: str | None, kwargs: dict) -> Plan:
    """compile(..., tune=True): the fastest measured of the candidate placements, or the one a
    cached entry names (softcuda.tuning)."""
    from . import tuning

    if not kwargs["allocate"]:
        raise SoftcudaError("compile: tune=True times the plans, so it needs allocate=True")
    model = resolve_placement(placement, cfg)
    candidates = [model] + [
        p
        for p in ("cpu", "cuda", "per-op")
        if p != model and (p != "cuda" or cfg.device_type == "cuda")
    ]
    order = topological_order(roots + [value for _, value in writes])
    memory = kwargs["host_memory"] or cfg.host_memory
    fusing = fusing_devices(cfg) if kwargs["fuse"] else ()
    key = tuning.signature(
        order, roots, writes, memory, fusing, tuple(candidates), tuning.profile_hash(cfg)
    )
    entry = tuning.load(key, cfg)
    if entry is not None and entry["choice"] in candidates:
        plan = compile(outputs, cfg, placement=entry["choice"], **kwargs)
        plan.tuned = {**entry, "source": tuning.source(key)}
        return plan
    measured: dict[str, Any] = {}
    # A plan that keeps a leaf on the GPU gives it a copy there for good, and from then on
    # every host update of the leaf is written through to it: the host-only candidates are
    # timed first, before any such copy exists, and copies made here are dropped at the end
    # (a 64-32-10 training step's host plan read 5x slower timed after the cuda plan's compile).
    keeps: dict[str, bool] = {}
    for name in candidates:
        try:
            dry = compile(outputs, cfg, placement=name, **{**kwargs, "allocate": False})
        except SoftcudaError as exc:  # a placement this profile or machine cannot make
            measured[name] = f"cannot: {str(exc).splitlines()[0]}"
            continue
        keeps[name] = any(st.kind == "leaf" and st.device == "cuda" for st in dry.steps)
    leaves = [n for n in order if n.is_leaf]
    had = {id(leaf) for leaf in leaves if leaf._resident is not None}
    saved = [(leaf, np.array(leaf.data, copy=True)) for leaf, _ in writes]
    try:
        for phase in (False, True):  # host-only candidates, then those keeping leaves on the GPU
            names = [n for n in candidates if keeps.get(n) is phase]
            plans = {}
            for name in names:
                try:
                    plans[name] = compile(outputs, cfg, placement=name, **kwargs)
                except SoftcudaError as exc:
                    measured[name] = f"cannot: {str(exc).splitlines()[0]}"
            times: dict[str, list[float]] = {name: [] for name in plans}
            for _ in range(5):  # rounds in turns: a drift of the host's speed touches each plan
                for name, plan in plans.items():
                    plan.evaluate(copy=False)  # a warm-up per round
                    for _ in range(TUNE_REPEAT):
                        t0 = time.perf_counter()
                        plan.evaluate(copy=False)
                        times[name].append(time.perf_counter() - t0)
            for name, reps in times.items():
                measured[name] = float(np.median(reps))
            plans.clear()
    finally:
        for leaf, values in saved:  # the timed runs' updates undone: no step the user made
            leaf.assign(values)
        for leaf in leaves:  # the GPU copies the candidates made go with them
            if id(leaf) not in had and leaf._resident is not None:
                leaf._resident = None
                _behind.pop(id(leaf), None)
    timed = {n: s for n, s in measured.items() if isinstance(s, float)}
    if not timed:  # unreachable in practice: the cpu placement compiles wherever compile does
        raise SoftcudaError(f"compile: tune=True could compile no plan: {measured}")
    choice = min(timed, key=timed.get)
    entry = {"choice": choice, "model": model, "measured": measured}
    where = tuning.store(key, cfg, entry)
    plan = compile(outputs, cfg, placement=choice, **kwargs)  # its arrays handed out last
    plan.tuned = {**entry, "source": "measured", "path": str(where) if where else ""}
    return plan


def _evaluate_tensor(node: Tensor) -> np.ndarray:
    """``Tensor.numpy()`` of a computed node: compile it with the resolved default config once,
    and run the plan again only when a leaf has changed since (cached on the node)."""
    cache = node._cache  # one read: another thread may replace it meanwhile
    if cache is None or cache[0] != _leaf_epoch[0]:
        epoch = _leaf_epoch[0]
        plan = cache[1] if cache is not None else compile(node)
        # The value is kept as the run returned it (a copy), not as the plan's buffer, which
        # another thread's run of the plan may overwrite; so a miss copies twice, a hit once.
        try:
            value = plan.evaluate()
        except PoolError:  # a pool was reset since: compile afresh
            plan = compile(node)
            value = plan.evaluate()
        cache = node._cache = (epoch, plan, value)
    return cache[2].copy()


Tensor.numpy_hook = _evaluate_tensor
