"""Lowering, compile's middle stage: a placed graph becomes the steps a plan runs.

Each node in dependency order becomes a step: a leaf at its home (the host leaf pool, or its
resident copy where the placement keeps an updated leaf on the GPU), a view over its source's
buffer, a kernel on its device with the backend the placement (or, per-op, the profile's rule)
chose.  Where a node reads data that lives on the other device, an explicit transfer step is
baked in, once per (buffer, device); outputs come back to the host.  Then the updates (each new
value into its leaf's home, after every other step) and the copies home of updated leaves that
are results.  Each step writes one new buffer, whose last reader is recorded for memory
planning.  The result is a ``Lowered``: the plan with its rows, and what the next stages
(``memory``, ``bind``) need.  Nothing is allocated or bound here, except each leaf's pinned
mirror or resident copy, which leaves share between plans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from . import backends
from . import ops as _ops
from .config import Config
from .costs import CostModel
from .errors import BackendUnavailable, PoolError, SoftcudaError
from .plan import IN_PLACE, Buffer, Plan, Step, format_seconds
from .planner import Placement, RuleBook, is_scalar_argument, is_view
from .pool import DevicePool, PinnedHostPool, format_bytes
from .tensor import Tensor

Pending = tuple[Step, list[tuple[Tensor, Buffer]], Buffer, Any]
"""An executed step: the step, the (node, buffer) pairs it reads (None for a number), the
buffer it writes, and its backend module."""


@dataclass
class Lowered:
    """What lowering hands the memory and binding stages."""

    plan: Plan
    allocate: bool  # False: plan and describe, take no memory, bind nothing
    order: list[Tensor]
    roots: list[Tensor]
    pending: list[Pending] = field(default_factory=list)  # the executed steps, in order
    home: dict[int, Buffer] = field(default_factory=dict)  # id(node) -> its buffer
    leaf_of: dict[int, Tensor] = field(default_factory=dict)  # id(buffer) -> its leaf
    host_results: list[tuple[Tensor, Buffer]] = field(default_factory=list)
    # (leaf, new value, its buffer at the leaf's home, the update's row)
    sources: list[tuple[Tensor, Tensor, Buffer, Step]] = field(default_factory=list)
    refreshes: list[tuple[Tensor, Step]] = field(default_factory=list)  # (leaf, its d2h row)
    updates: list[tuple[Tensor, Tensor]] = field(default_factory=list)


class Lowering:
    """The state of one lowering: buffers, copies made, rule lookups, in one compile."""

    def __init__(
        self, config: Config, costs: CostModel, allocate: bool, plan: Plan, rules: RuleBook
    ) -> None:
        self.config = config
        self.rules = rules  # each node's own rule (the planner reads the same book)
        self.costs = costs  # what copy rows are priced by
        self.allocate = allocate
        self.plan = plan
        self.placed: Placement | None = None  # the planner's decision (None: per-op, unpriced)
        self.home: dict[int, Buffer] = {}  # id(node) -> buffer holding it on node.device
        self.moved: dict[tuple[int, str], Buffer] = {}  # (id(buffer), device) -> copy there
        self.pending: list[Pending] = []
        self.mirrors: PinnedHostPool | None = None  # pinned copies of leaves made here
        self.leaf_of: dict[int, Tensor] = {}  # id(buffer) -> the leaf whose data it is
        self.refresh: dict[int, Tensor] = {}  # updated leaves kept on the GPU that are outputs
        self.lowered: Lowered | None = None
        self.group_of: dict[int, Any] = {}  # id(member) -> its fused group
        self.in_place: dict[int, Tensor] = {}  # id(new value) -> the leaf it may be written into
        self.written_in_place: set[int] = set()  # id(leaf) of those whose kernel writes it

    def lower(
        self,
        order: list[Tensor],
        roots: list[Tensor],
        updates: list[tuple[Tensor, Tensor]],
        placed: Placement | None,
        groups: list | None = None,
    ) -> Lowered:
        """Every step of the plan, from the nodes in order, the placement (or None) and the
        fused groups (one step each, at its root; its other members make none)."""
        self.placed = placed
        self.group_of = {id(m): g for g in groups or () for m in g.members}
        self.lowered = Lowered(
            self.plan, self.allocate, order, roots, self.pending, self.home, self.leaf_of
        )
        self.lowered.updates = updates
        updated = {id(leaf) for leaf, _ in updates}
        self.in_place = in_place_candidates(order, roots, updates, self.group_of, self._device_of)
        self._lower_nodes(order)
        self._results(roots, updated)
        self._updates(updates, updated)
        self._refreshes()
        self.plan.steps += [step for *_, step in self.lowered.sources]
        self.plan.steps += [step for _, step in self.lowered.refreshes]
        self.plan._nodes = order
        return self.lowered

    def _lower_nodes(self, order: list[Tensor]) -> None:
        """A step per node in order: leaves at home, views over their source, every compute
        node on its device with its inputs brought there."""
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
            group = self.group_of.get(id(node))
            if group is not None:
                self._lower_member(node, group, choice)
                continue
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
            out = self._output(node, device)
            node.device, node.backend_id = device, backend_id
            home[id(node)] = out
            step = Step(kind, node, device, backend_id, node.label, decided_by, size, bucket)
            if choice is not None:
                step.predicted_s, step.choice = choice.predicted_s, choice
            step.writes_leaf = id(out) in self.leaf_of
            self._add(step, inputs, out, module)

    def _lower_member(self, node: Tensor, group: Any, choice: Any) -> None:
        """A member of a fused group: the group's one step at its root (inputs brought to its
        device once, the root's buffer its one output); nothing for the other members, whose
        values live in the kernel's registers."""
        device = group.device
        backend_id = self.costs.FUSING[device]
        node.device, node.backend_id = device, backend_id
        if node is not group.root:
            return
        inputs = [(t, self._on(t, device)) for t in group.inputs]
        out = self._output(node, device)
        self.home[id(node)] = out
        extra = [(m, self._output(m, device)) for m in group.extras]
        for m, buf in extra:
            self.home[id(m)] = buf
        size = group.size
        why = f"fused: {len(group.members)} ops, one kernel"
        if choice is not None:
            why += f" ({self.plan.placement} placement)"
        step = Step("kernel", node, device, backend_id, node.label, why, size)
        step.group, step.choice, step.extra_out = group, choice, extra
        step.predicted_s, step.unfused_s = group.predicted_s, group.unfused_s
        step.writes_leaf = any(id(b) in self.leaf_of for b in [out] + [b for _, b in extra])
        module = self._module(node, size, backend_id, why)
        self._add(step, inputs, out, module)

    def _device_of(self, node: Tensor) -> str:
        """The device ``node``'s kernel will run on, before lowering reaches it
        (``kernel_device``; per-op, its rule's backend's)."""
        priced = self.placed is not None and self.plan.placement != "per-op"
        return kernel_device(
            node,
            self.group_of,
            self.placed.choices if priced else {},  # type: ignore[union-attr]
            lambda n: backends.BACKENDS[self.rules.of(n)[0]].device,
        )

    def _output(self, node: Tensor, device: str) -> Buffer:
        """The buffer a kernel writes ``node`` into: a new one, or, for the new value of a
        leaf that may take it in place (``in_place_candidates``), the leaf's own where it lives
        on the kernel's device (its host buffer, or the copy kept on the GPU between runs)."""
        leaf = self.in_place.get(id(node))
        if leaf is not None:
            buf = self.home.get(id(leaf))
            if buf is not None and buf.device == device and self.leaf_of.get(id(buf)) is leaf:
                self.written_in_place.add(id(leaf))
                return buf
        return Buffer(device, node.nbytes)

    def _results(self, roots: list[Tensor], updated: set[int]) -> None:
        """Each output's buffer on the host, kept; an updated leaf kept on the GPU that is an
        output is returned from its host copy, refreshed after the writebacks."""
        for node in roots:
            buf = self.home[id(node)]
            leaf = self.leaf_of.get(id(buf))
            if buf.device == "cuda" and leaf is not None and id(leaf) in updated:
                # returned with its new values: its host copy, refreshed after the writebacks
                buf = Buffer("cpu", leaf.nbytes, keep=True, allocation=leaf._allocation)
                self.leaf_of[id(buf)] = leaf
                self.refresh[id(leaf)] = leaf  # one copy home per leaf, for it and its views
            else:
                buf = self._on(node, "cpu")
                buf.keep = True
            self.lowered.host_results.append((node, buf))

    def _updates(self, updates: list[tuple[Tensor, Tensor]], updated: set[int]) -> None:
        """An update step per (leaf, new value), after every other step."""
        # A new value reaches its leaf's home (the host, or the leaf's resident copy on the
        # GPU) and is kept to the end of the run: the writebacks come after every other step,
        # so every new value is computed from the old values before any leaf is overwritten.
        for leaf, value in updates:
            where = self.home[id(leaf)].device if id(leaf) in self.home else "cpu"
            if id(leaf) in self.written_in_place:
                step = Step(
                    "update",
                    leaf,
                    where,
                    IN_PLACE,
                    f"{leaf.label}<-{value.label}",
                    f"update: {value.label} written into leaf {leaf.label} by its kernel (no "
                    "reader of the old value follows it); "
                    + (
                        "its mirrors follow after every step"
                        if where == "cpu"
                        else "its host copy is behind until read"
                    ),
                )
                if self.placed is not None and self.placed.predicted_s is not None:
                    # no copy runs: the placement's price of one comes off the plan's total
                    copy_s = self.placed.updates_s.get(id(leaf), float("nan"))
                    if copy_s == copy_s and self.plan.predicted_s is not None:
                        self.plan.predicted_s -= copy_s
                    step.predicted_s = 0.0
                self.lowered.sources.append((leaf, value, self.home[id(value)], step))
                continue
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
            self.lowered.sources.append((leaf, value, buf, step))

    def _refreshes(self) -> None:
        """A device->host row per updated leaf kept on the GPU and returned as a result."""
        # A result that is such a leaf comes home by its own copy, after the writebacks: a row
        # of its own, priced as the model priced that result's copy home.
        for leaf in self.refresh.values():
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
            self.lowered.refreshes.append((leaf, step))

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
        """(backend_id, bucket, decided_by, module, size) for ``node``: its rule
        (``planner.RuleBook``) and the backend module that runs it."""
        backend_id, bucket, decided_by, size = self.rules.of(node)
        module = self._module(node, size, backend_id, decided_by)
        return backend_id, bucket, decided_by, module, size

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


def kernel_device(
    node: Tensor, group_of: dict[int, Any], choices: dict[int, Any], otherwise: Callable
) -> str:
    """The device ``node``'s kernel runs on, before lowering: its fused group's, its placement
    choice's, its input's for a reshape (a copy of strided data, where its input lives), else
    ``otherwise(node)``."""
    group = group_of.get(id(node))
    if group is not None:
        return group.device
    choice = choices.get(id(node))
    if choice is not None:
        return choice.device
    if node.op == "reshape":
        return kernel_device(cast(Tensor, node.a), group_of, choices, otherwise)
    return otherwise(node)


def in_place_saving(placed: Any, order: list[Tensor], roots: list[Tensor], updates) -> float:
    """The seconds a priced placement (``planner.Placed`` after the fuse stage) loses once
    lowered: each update whose new value its kernel writes into the leaf (``in_place_candidates``,
    the kernel on the device the leaf lives on, as ``Lowering._output`` takes it) runs no copy,
    and lowering takes that copy's price off the plan's total.  Compile weighs placements by
    their totals as lowered: before, the all-CUDA training step of a 1024-1024-10 MLP kept
    more of its copies (every parameter and moment on the GPU) than the graph plan, and the
    graph plan was kept though predicted 2% slower once both were lowered."""
    placement = placed.placement
    if placement is None or placement.predicted_s is None or not updates:
        return 0.0
    group_of = {id(m): g for g in placed.groups for m in g.members}

    def device_of(node: Tensor) -> str:
        return kernel_device(node, group_of, placement.choices, lambda n: "cpu")

    saved = 0.0
    for value_id, leaf in in_place_candidates(order, roots, updates, group_of, device_of).items():
        value = next(v for lf, v in updates if lf is leaf and id(v) == value_id)
        home = "cuda" if placement.homes.get(id(leaf)) == "cuda" else "cpu"
        copy_s = placement.updates_s.get(id(leaf), float("nan"))
        if device_of(value) == home and copy_s == copy_s:
            saved += copy_s
    return saved


def in_place_candidates(
    order: list[Tensor],
    roots: list[Tensor],
    updates: list[tuple[Tensor, Tensor]],
    group_of: dict[int, Any],
    device_of: Callable[[Tensor], str] | None = None,
) -> dict[int, Tensor]:
    """id(new value) -> leaf, for the updates whose new value its kernel may write straight
    into the leaf's buffer instead of a copy after every step (an optimizer's update: a copy of
    every parameter and both of Adam's moments, each run).  That is safe where the kernel reads
    the leaf, if at all, element for element (an elementwise op, or a fused group without a
    reduction, of the leaf's own shape, and no view of the leaf among its inputs), no node
    after it reads the leaf's old value (directly or through a view), and neither the leaf nor
    a view of it is a result; a reader in a fused group reads when its group's kernel runs.
    The kernels take the leaf's buffer as both an input and the output (their pointers are
    declared ``restrict``): sound only because every element is read and written at the same
    index, once, by the same thread, which is what the conditions above guarantee.  A value that
    another update takes through a view keeps its own buffer, and so does one that a step on
    another device reads (``device_of``: where each node's kernel runs), directly or through a
    view: that step's copy would be of the leaf's buffer, and would read the old value (a host
    leaf's copy to the GPU comes from its pinned mirror, brought up to date only at the run's
    end; a GPU leaf's copy home may be one made earlier in the run for a reader of the leaf,
    copies being shared by buffer).  Lowering takes it only where the kernel runs on the device
    the leaf lives on (the host, or the GPU for a leaf kept there between runs), so the copy it
    saves never crosses the bus."""

    def base(node: Tensor) -> Tensor:
        """The node a chain of views reads (the node itself where it is no view)."""
        while is_view(node) and node.a is not None:
            node = node.a
        return node

    def runs_at(node: Tensor) -> int:
        """Where ``node``'s reads happen: a fused group's member reads when its group's one
        kernel runs, at the group's root."""
        group = group_of.get(id(node))
        return pos[id(group.root if group is not None else node)]

    pos = {id(n): i for i, n in enumerate(order)}
    views: dict[int, set[int]] = {}  # id(leaf) -> id() of the views reaching it
    readers: dict[int, list[Tensor]] = {}  # id(leaf or view) -> compute nodes reading it
    for n in order:
        if is_view(n):
            views.setdefault(id(base(n)), set()).add(id(n))
        elif not n.is_leaf:
            for t in n.inputs:
                readers.setdefault(id(t), []).append(n)
    results = {id(r) for r in roots}
    taken = Counter(id(v) for _, v in updates)
    # a value another update takes through a view: its leaf's copy would read the buffer this
    # leaf's own update would now be (the copy path takes it from the value's own buffer)
    viewed = {id(base(v)) for _, v in updates if is_view(v)}
    found: dict[int, Tensor] = {}
    for leaf, value in updates:
        if value.is_leaf or is_view(value) or taken[id(value)] > 1 or id(value) in viewed:
            continue
        if value.dims != leaf.dims or value.dtype != leaf.dtype or id(leaf) not in pos:
            continue
        leaf_views = views.get(id(leaf), set())
        aliases = {id(leaf)} | leaf_views
        if aliases & results:
            continue
        group = group_of.get(id(value))
        if group is not None:
            if group.reduce is not None or tuple(group.shape) != tuple(leaf.dims):
                continue
            members, inputs = {id(m) for m in group.members}, group.inputs
        else:
            definition = _ops.OPS.get(value.op)
            if definition is None or definition.kind != "elementwise":
                continue
            if value.op in ("softmax", "log_softmax"):  # a row's every element, not its own
                continue
            members, inputs = {id(value)}, value.inputs
        if any(id(t) in leaf_views for t in inputs):
            continue
        writer = runs_at(value)
        late = any(
            id(r) not in members and runs_at(r) > writer
            for a in aliases
            for r in readers.get(a, ())
        )
        if late:
            continue
        if device_of is not None:
            where = device_of(value)
            if any(
                id(r) not in members and device_of(r) != where
                for a in {id(value)} | views.get(id(value), set())
                for r in readers.get(a, ())
            ):
                continue
        found[id(value)] = leaf
    return found
