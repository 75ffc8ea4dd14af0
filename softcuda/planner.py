"""Where each node of a graph runs: the placements ``compile`` offers, and the costs behind them.

``compile(outputs, config, placement=...)`` asks this module for a device and a backend per
compute node before it bakes anything:

``"per-op"``
    each node from its own ``[ops]`` rule: the winner for that op alone, its data starting and
    ending on the host.  Right for one op; in a graph it pays a round trip over the bus wherever
    two neighbours disagree.
``"graph"``
    the plan whose predicted time is least for the whole graph: each node's resident time on
    its device (its fastest backend there, from the profile's ``[costs]``) plus every copy over
    the bus (``[bus]``), paid once per value and direction.  For two devices this is an s–t
    minimum cut, solved exactly by ``softcuda.placement``.  The default where the profile has
    costs.
``"cpu"``, ``"cuda"``
    every node on one device, with its fastest backend there by ``[costs]``; without costs, the
    node's rule where it names a backend of that device, else DEFAULT.soft's rule (CPU) or the
    last CUDA backend in ``backends.BACKENDS`` that implements the op (the matmul-capable one).

Leaves start on the host, results end on the host, and a device that cannot run an op (no
backend of it implements the op, or the profile's machine has no CUDA) never gets it; a cuda
placement on a profile without CUDA is refused in one sentence.  A leaf
that the plan updates (``compile(..., updates=)``: a training step's weights and optimizer
state) is kept between runs where the placement puts it, its home: ``"graph"`` chooses it with
the rest (the new value is copied to the home once per run where it is made on the other
device, the leaf's readers on the other device copy it from there), ``"cuda"`` keeps it on the
GPU, ``"cpu"`` and ``"per-op"`` on the host.  So is a frozen leaf (one nothing may assign: the
ones a gradient of ``sum`` or ``mean`` multiplies by), which then crosses the bus once, at
compile, instead of on every run.  A scalar constant (``x * 2.0``) reaches its kernel as an
argument: it never crosses the bus.  A reshape of strided data is a copy, priced as a neg of
its size (it reads and writes each element once).

A CUDA step costs its kernel's resident time, but never less than the host's time to issue a
step (``[bus] launch_us``, measured by the sweep: ``softcuda.sweep.launch``), since a chain of
short kernels runs at the host's pace.  A value made on the GPU and read by a CPU step costs,
beyond its copy, the hand-off (``[bus] switch_us`` at the value's bytes, measured by the sweep:
``softcuda.sweep.switch``), once per value; a result's copy home and an update's copy into its
leaf are no CPU step and do not pay it.  ``explain()`` shows it in that value's device->host
copy row.  A cpu_threads step is priced with the pool's threads spinning, as the sweep times
it; after a hand-off a plan wakes them while it waits for the GPU (``bind``).  What the model
leaves out: the CPU and the GPU working
at the same time (a plan runs its steps in order, and the prediction adds them up), and memory
limits (a plan that does not fit fails at compile, naming the bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import backends
from . import groups as _groups
from . import ops as _ops
from . import placement as _solver
from .config import Config, packaged_default
from .costs import COPY_LIKE, CostModel
from .errors import PlacementError, SoftcudaError
from .groups import is_scalar_argument, is_view
from .tensor import Tensor

PLACEMENTS = ("graph", "per-op", "cpu", "cuda")
DEVICES = ("cpu", "cuda")


class MissingCosts(PlacementError):
    """The profile cannot price the graph: no [costs], or none for some of its ops."""

    def __init__(self, message: str, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing


def resolve_placement(placement: str | None, config: Config) -> str:
    """The placement ``compile`` uses: as asked, else ``graph`` where the profile has costs and
    ``per-op`` where it has none."""
    if placement is None:
        return "graph" if config.has_costs else "per-op"
    if placement not in PLACEMENTS:
        raise PlacementError(
            f"unknown placement {placement!r}; valid placements: {', '.join(PLACEMENTS)}"
        )
    _refuse_cuda_without_cuda(placement, config)
    return placement


def _refuse_cuda_without_cuda(placement: str, config: Config) -> None:
    """A cuda placement on a profile of a machine without CUDA would put every node on the CPU
    under the placement's name: refused, in one sentence, wherever a placement is made."""
    if placement == "cuda" and config.device_type != "cuda":
        raise PlacementError(
            f"placement 'cuda' needs a profile of a machine with CUDA, but {config.name} is a "
            f"{config.device_type} profile: use a CUDA machine's profile (`softcuda init` "
            "there), or placement 'cpu' or 'graph'"
        )


@dataclass(slots=True)
class Choice:
    """The planner's decision for one compute node, and what it predicted."""

    device: str
    backend_id: str  # "" for per-op: the compiler looks the rule up itself
    decided_by: str
    predicted_s: float  # resident time with the chosen backend (nan: not priced)
    cpu_s: float  # resident time on each device with its fastest backend there (nan: unpriced)
    cuda_s: float
    regret_s: float  # the plan's predicted time with this node alone moved, less (nan: unpriced)


@dataclass
class Placement:
    """The decision for a whole graph."""

    name: str
    choices: dict[int, Choice]  # id(node) -> Choice, for every compute node
    predicted_s: float | None  # the whole plan as the model adds it up (None: not priced)
    # id(leaf) -> "cpu" | "cuda" for each leaf kept where the placement chose: updated, frozen
    homes: dict[int, str] = field(default_factory=dict)
    # id(leaf) -> the predicted time of copying its new value into it (an updated leaf, priced)
    updates_s: dict[int, float] = field(default_factory=dict)
    # id(node) -> what handing its value from the GPU to a CPU step costs beyond the copy, for
    # each value (and each view of it) whose hand-off the plan pays ([bus] switch_us, not 0)
    switch_s: dict[int, float] = field(default_factory=dict)


class RuleBook:
    """Each node's own ``[ops]`` rule, looked up once per (name, size): the one place that
    reads the profile's rules for a node (per-op placement, the one-device placements where
    the costs cannot price a node, and lowering all ask it)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._found: dict[tuple[str, int], tuple[str, str, str, int]] = {}

    def of(self, node: Tensor) -> tuple[str, str, str, int]:
        """(backend, bucket, decided_by, size) for ``node``: by its variant's rules where the
        profile has them (``ops.variant_of``), in the variant's size metric, else by its op's,
        else by DEFAULT.soft's (and decided_by says so)."""
        config = self.config
        name = _ops.profile_name(node, config.rules)
        size = _ops.node_size(name, node)
        found = self._found.get((name, size))
        if found is not None:
            return found
        rule = config.lookup(name, size)
        if rule is not None:
            decided_by = f"{config.name}:{rule.line}" if rule.line else config.name
            if name != node.op:
                decided_by += f" ({name} rule)"
        else:
            rule = packaged_default().lookup(node.op, size)
            if rule is None:  # DEFAULT.soft covers every op; a test keeps it so
                raise SoftcudaError(f"no rule for {node.op} in {config.path} or DEFAULT.soft")
            decided_by = f"DEFAULT.soft:{rule.line} ({node.op} not in {config.name})"
        found = self._found[name, size] = (rule.backend, rule.bucket, decided_by, size)
        return found

    def decision(self, node: Tensor) -> tuple[str, str]:
        """The per-op decision for ``node``: (backend, the line that made it)."""
        backend_id, _, decided_by, _ = self.of(node)
        return backend_id, decided_by

    def on_device(self, node: Tensor, device: str) -> tuple[str, str]:
        """(backend, why) for ``node`` on ``device`` when the costs cannot price it: its rule
        where that names a backend of ``device``; else, on the CPU, DEFAULT.soft's rule for its
        op, and on the GPU the last CUDA backend that implements it (the matmul-capable one)."""
        backend_id, _, decided_by, _ = self.of(node)
        if backends.BACKENDS[backend_id].device == device:
            return backend_id, f"{device} placement; {decided_by}"
        op, size = node.op, _ops.node_size(node.op, node)
        if device == "cpu":
            rule = packaged_default().lookup(op, size)
            if rule is None:  # DEFAULT.soft covers every op; a test keeps it so
                raise SoftcudaError(f"no rule for {op} in DEFAULT.soft")
            return rule.backend, f"cpu placement; DEFAULT.soft:{rule.line}"
        able = [b for b, i in backends.BACKENDS.items() if i.device == device and op in i.ops]
        return able[-1], f"{device} placement; {able[-1]} runs {op} there (no costs)"


@dataclass
class _Rows:
    """The placement problem of one graph as the planner builds it: one row per value."""

    row_of: dict[int, int] = field(default_factory=dict)  # id(node) -> its value's row
    nodes: list[Tensor] = field(default_factory=list)  # row -> the node that holds the value
    sizes: list[int] = field(default_factory=list)  # in the metric of the name priced under
    names: list[str] = field(default_factory=list)  # that name: its op, or its variant's
    reads: list[tuple[int, ...]] = field(default_factory=list)
    updated: set[int] = field(default_factory=set)  # rows of leaves the plan updates
    priced: bool = False  # the profile prices every op (and copy) of the graph
    homed: set[int] = field(default_factory=set)  # id(leaf) of leaves whose home is chosen
    fastest: list[tuple[str, str]] = field(default_factory=list)  # (cpu, cuda) backends
    run: np.ndarray | None = None
    switch: np.ndarray | None = None
    fixed: np.ndarray | None = None
    outputs: tuple[int, ...] = ()
    writes: tuple[tuple[int, int], ...] = ()
    problem: _solver.Problem | None = None  # None where the rows are not priced
    order: list[Tensor] = field(default_factory=list)  # every node, views included


class Planner:
    """Builds the placement problem of one graph from a profile's cost model, and decides it."""

    def __init__(
        self,
        costs: CostModel,
        placement: str,
        rules: RuleBook | None = None,
        fusing: tuple[str, ...] = (),
    ) -> None:
        self.costs = costs  # every figure the plan is priced by
        # the devices whose groups the fuse stage will fuse: the cut weighs them as fused
        self.fusing = fusing
        self.config = costs.config
        self.rules = rules or RuleBook(costs.config)  # each node's own [ops] rule
        self.host_memory = costs.host_memory
        self.placement = placement
        self.cuda_machine = costs.cuda_machine
        _refuse_cuda_without_cuda(placement, self.config)

    def _refuse(self, unpriced: list[str]) -> None:
        need = "graph placement needs the profile's [costs] (resident time per op and backend)"
        if not self.config.has_costs:
            raise MissingCosts(
                f"{self.config.path} has no [costs]: {need}; add them from the profile's sweep "
                "with `softcuda init --from CSV`, measure with `softcuda init`, or compile with "
                "placement='per-op'",
                unpriced,
            )
        raise MissingCosts(
            f"{self.config.path} has no costs for {', '.join(unpriced)}: {need}; measure them "
            "with `softcuda init` (a sweep of every op), or compile with placement='per-op'",
            unpriced,
        )

    # -- deciding -------------------------------------------------------------------------------

    def place(
        self,
        order: list[Tensor],
        roots: list[Tensor],
        updates: list[tuple[Tensor, Tensor]] = (),  # type: ignore[assignment]
    ) -> Placement:
        """A Choice for every compute node of ``order`` (leaves and views get none), and a
        home for every leaf that ``updates`` (leaf, new value) writes.

        ``self.rules`` gives each node's own rule, the one lookup lowering uses too, so that a
        per-op plan is exactly the rules' plan.

        A node is priced under its variant's name (``ops.variant_of``), in the variant's size
        metric, where the profile's [costs] hold the variant, else under its op's.
        """
        rows = self._rows(order, updates)
        self._price(rows, roots, updates)
        if self.placement == "graph":
            device = _solver.solve(rows.problem)
        else:
            device = np.where(rows.fixed == _solver.CUDA, _solver.CUDA, _solver.CPU)
            device = device.astype(np.int8)
        chosen = self._choose(rows, device)
        return self._decision(rows, device, chosen)

    def _rows(self, order: list[Tensor], updates: list[tuple[Tensor, Tensor]]) -> _Rows:
        """One row per value (a view shares its source's), with its priced name, its size in
        that name's metric and the rows it reads; and whether the profile prices them all."""
        rows = _Rows(order=order)
        for node in order:
            if not node.is_leaf and is_view(node):
                rows.row_of[id(node)] = rows.row_of[id(node.inputs[0])]
                continue
            rows.row_of[id(node)] = len(rows.nodes)
            rows.nodes.append(node)
            if node.is_leaf:
                rows.sizes.append(0)
                rows.names.append(node.op)
                rows.reads.append(())
                continue
            name = self.costs.priced_name(node)
            rows.names.append(name)
            rows.sizes.append(_ops.node_size(name, node))
            found = [rows.row_of[id(t)] for t in node.inputs if not is_scalar_argument(t, node)]
            rows.reads.append(tuple(dict.fromkeys(found)))
        nodes, names = rows.nodes, rows.names
        ops = {names[r] for r, n in enumerate(nodes) if not n.is_leaf and n.op != "reshape"}
        copies_only = COPY_LIKE not in ops  # neg priced only for copies: reshapes, updates
        # an updated leaf's new value is copied into its buffer where the leaf lives, each run
        rows.updated = {rows.row_of[id(leaf)] for leaf, _ in updates if id(leaf) in rows.row_of}
        if rows.updated or any(n.op == "reshape" for n in nodes if not n.is_leaf):
            ops.add(COPY_LIKE)
        unpriced = self.costs.unpriced(ops)
        if copies_only and COPY_LIKE in unpriced:
            where = unpriced.index(COPY_LIKE)
            unpriced[where] = (
                f"{COPY_LIKE} (the price of a copy: a reshape of strided data, an update)"
            )
        if self.placement == "graph" and unpriced:
            self._refuse(unpriced)
        rows.priced = not unpriced
        return rows

    def _price(
        self, rows: _Rows, roots: list[Tensor], updates: list[tuple[Tensor, Tensor]]
    ) -> None:
        """Each row's time on each device, copies and hand-off, and where it may go: the
        placement problem (where the rows are priced)."""
        count, priced = len(rows.nodes), rows.priced
        run, move = np.zeros((count, 2)), np.zeros((count, 2))
        switch = np.zeros(count)  # the hand-off to a CPU step, where the value is on the GPU
        fixed = np.full(count, -1, dtype=np.int8)
        rows.fastest = [("", "")] * count
        # leaves with a home the placement chooses: those the plan updates, and those no one may
        # assign (a gradient's ones); every other leaf lives on the host
        rows.homed = {id(leaf) for leaf, _ in updates}
        rows.homed |= {id(n) for n in rows.nodes if n.is_leaf and n.attrs.get("frozen")}
        home = _solver.CPU  # per-op, cpu, and any placement on a machine without CUDA
        if self.cuda_machine and self.placement in ("graph", "cuda"):
            home = _solver.FREE if self.placement == "graph" else _solver.CUDA
        for row, node in enumerate(rows.nodes):
            if node.is_leaf:
                fixed[row] = home if id(node) in rows.homed else _solver.CPU
                if priced and row in rows.updated:  # the update's copy, on the leaf's home
                    run[row] = self.costs.update_s(node.size)
                if fixed[row] == _solver.CPU:
                    run[row, 1] = np.inf
            elif priced:
                op = COPY_LIKE if node.op == "reshape" else rows.names[row]
                cpu_b, cpu_s = self.costs.best(op, rows.sizes[row], "cpu")
                cuda_b, cuda_s = self.costs.best(op, rows.sizes[row], "cuda")
                run[row] = (cpu_s, self.costs.issued_s(cuda_s))
                rows.fastest[row] = (cpu_b, cuda_b)
        if priced:  # a scalar argument is no read (see reads), so it never pays this
            nbytes = np.fromiter((n.nbytes for n in rows.nodes), dtype=float, count=count)
            move[:, 0] = self.costs.transfers_s("h2d", nbytes)
            move[:, 1] = self.costs.transfers_s("d2h", nbytes)
            # a value that may be on the GPU pays the hand-off to a CPU step
            switch[:] = np.where(fixed != _solver.CPU, self.costs.switches_s(nbytes), 0.0)
        row_of = rows.row_of
        rows.outputs = tuple(dict.fromkeys(row_of[id(r)] for r in roots))
        # a leaf no node reads has no row: it stays home on the host, where compile writes it
        rows.writes = tuple(
            (row_of[id(value)], row_of[id(leaf)]) for leaf, value in updates if id(leaf) in row_of
        )
        rows.run, rows.switch, rows.fixed = run, switch, fixed
        if priced and self.fusing and self.placement == "graph":
            self._weigh_fusion(rows, roots, updates)
        if priced:
            reads = tuple(rows.reads)
            rows.problem = _solver.Problem(
                run, move, reads, rows.outputs, fixed, rows.writes, switch
            )

    def _weigh_fusion(
        self, rows: _Rows, roots: list[Tensor], updates: list[tuple[Tensor, Tensor]]
    ) -> None:
        """Each row of a group that would fuse if its members shared a device costs, on each
        fusing device, its share of the fused group's time (its own time scaled by fused over
        unfused): the cut then weighs a chain that fuses on the GPU as fused.  The groups the
        fuse stage makes after the cut are priced exactly (softcuda.fuse)."""
        kept = {id(r) for r in roots} | {id(v) for _, v in updates}
        run = rows.run
        readers = _groups.consumers(rows.order)  # views read values too: from the full order
        for group in _groups.form(rows.nodes, kept, lambda node: "any", readers):
            members = [rows.row_of[id(m)] for m in group.members]
            for d, device in enumerate(DEVICES):
                if device not in self.fusing:
                    continue
                unfused = float(run[members, d].sum())
                fused = self.costs.group_s(group.ops, group.size, group.arrays, device)
                if fused is None or not np.isfinite(unfused) or unfused <= 0:
                    continue
                if device == "cuda":
                    fused = self.costs.issued_s(fused)
                if fused < unfused:
                    run[members, d] *= fused / unfused

    def _choose(self, rows: _Rows, device: np.ndarray) -> list[tuple[str, str]]:
        """(backend, decided_by) per row, by the placement's policy (``_POLICIES``), which also
        sets each compute row's device where the placement is not the graph's (the solver's
        cut already holds those)."""
        policy = _POLICIES[self.placement]
        chosen: list[tuple[str, str]] = [("", "")] * len(rows.nodes)
        for row, node in enumerate(rows.nodes):
            if node.is_leaf:
                continue
            if node.op == "reshape":  # a strided copy: graph placement prices it; else it
                if self.placement != "graph":  # stays with its data, as it always has
                    device[row] = device[rows.reads[row][0]]
                chosen[row] = ("copy", "reshape of strided data")
                continue
            chosen[row] = policy(self, rows, row, device)
        return chosen

    def _as_built(
        self, rows: _Rows, device: np.ndarray, chosen: list[tuple[str, str]]
    ) -> tuple[_solver.Problem, np.ndarray, bool]:
        """The problem with each node at its chosen backend's time (per-op rules may not name
        the fastest backend of their device), each compute row's own time, and whether a rule
        names a backend the costs have no curve for."""
        problem = rows.problem
        actual, own = problem.run.copy(), np.full(len(rows.nodes), np.nan)
        unpriced_backend = False
        for row, node in enumerate(rows.nodes):
            if not node.is_leaf and node.op != "reshape":
                seconds = self.costs.resident_s(rows.names[row], chosen[row][0], rows.sizes[row])
                if seconds is None:
                    unpriced_backend = True  # own stays nan: not another backend's time
                    continue
                if device[row] == _solver.CUDA:
                    seconds = self.costs.issued_s(seconds)
                actual[row, device[row]] = seconds
                own[row] = seconds
            elif node.op == "reshape":
                own[row] = actual[row, device[row]]
        built = _solver.Problem(
            actual,
            problem.move,
            problem.inputs,
            rows.outputs,
            rows.fixed,
            rows.writes,
            problem.switch,
        )
        return built, own, unpriced_backend

    def _decision(
        self, rows: _Rows, device: np.ndarray, chosen: list[tuple[str, str]]
    ) -> Placement:
        """The Placement: each compute node's Choice with the model's figures, the homes, the
        updates' copies and the hand-offs paid, and the whole plan's predicted total."""
        count, priced, run, nodes = len(rows.nodes), rows.priced, rows.run, rows.nodes
        predicted, regret, own = None, np.full(count, np.nan), np.full(count, np.nan)
        switch_s: dict[int, float] = {}
        if rows.problem is not None:
            built, own, unpriced_backend = self._as_built(rows, device, chosen)
            # regret still compares devices at their fastest backends; the plan's own total is
            # only given where every node it runs is priced
            predicted = None if unpriced_backend else _solver.total(built, device)
            regret = _solver.regret(built, device)
            handed = {r for r in _solver.hand_offs(built, device) if rows.switch[r] > 0}
            # the compiler bakes one device->host copy per value, reached by the value or any
            # view of it: each of them names the hand-off
            switch_s = {key: float(rows.switch[r]) for key, r in rows.row_of.items() if r in handed}
        nan = float("nan")
        choices = {
            id(node): Choice(
                DEVICES[device[row]],
                *chosen[row],
                float(own[row]),
                float(run[row, 0]) if priced else nan,
                float(run[row, 1]) if priced else nan,
                float(regret[row]),
            )
            for row, node in enumerate(nodes)
            if not node.is_leaf
        }
        homes = {
            id(node): DEVICES[device[row]]
            for row, node in enumerate(nodes)
            if id(node) in rows.homed
        }
        # each update's copy as the total counts it: the leaf's own row, on its home device
        updates_s = {}
        if priced:
            updates_s = {id(nodes[row]): float(run[row, device[row]]) for row in rows.updated}
        return Placement(self.placement, choices, predicted, homes, updates_s, switch_s)

    @property
    def _why(self) -> str:
        return f"fastest there by {self.config.name} [costs]"

    @staticmethod
    def _as(node: Tensor, name: str) -> str:
        """What explain() adds where a node was priced as its variant."""
        return "" if name == node.op else f" of {name}"


@dataclass
class Placed:
    """What the place stage hands on: the decision (None where each node's own rule decides,
    the placement per-op and unpriced), the placement used, and why it is not the one asked
    for, if it is not."""

    placement: Placement | None
    name: str
    note: str = ""
    # the fused groups (softcuda.groups.Group), each with its predicted time and its members'
    # own, unfused (nan where unpriced); the fuse stage fills it
    groups: list = field(default_factory=list)


def place(
    costs: CostModel,
    name: str,
    asked: bool,
    order: list[Tensor],
    roots: list[Tensor],
    rules: RuleBook,
    updates: list[tuple[Tensor, Tensor]],
    fusing: tuple[str, ...] = (),
) -> Placed:
    """Compile's first stage: every node's device and backend, and updated leaves' homes,
    unless the plan is per-op and the profile cannot price it (then each node's rule alone
    decides, and every leaf stays on the host).  The default graph placement, on a profile
    whose costs cannot price the graph, falls back to per-op and says why; asked for by name,
    it raises.  ``fusing`` names the devices whose groups the fuse stage will fuse, which the
    graph placement weighs as fused."""
    if name == "per-op" and not costs.config.has_costs:
        return Placed(None, name)
    try:
        return Placed(Planner(costs, name, rules, fusing).place(order, roots, updates), name)
    except MissingCosts as exc:
        if asked:
            raise
        return Placed(
            None, "per-op", "graph placement not possible: no costs for " + ", ".join(exc.missing)
        )


# ---- the placements' policies: (backend, decided_by) for one compute row --------------------


def _graph_policy(planner: Planner, rows: _Rows, row: int, device: np.ndarray):
    """The cut's device, its fastest backend there."""
    why = f"graph placement; {planner._why}{planner._as(rows.nodes[row], rows.names[row])}"
    return rows.fastest[row][device[row]], why


def _per_op_policy(planner: Planner, rows: _Rows, row: int, device: np.ndarray):
    """The node's own [ops] rule, and the device of the backend it names."""
    backend_id, why = planner.rules.decision(rows.nodes[row])
    device[row] = DEVICES.index(backends.BACKENDS[backend_id].device)
    return backend_id, why


def _one_device_policy(planner: Planner, rows: _Rows, row: int, device: np.ndarray):
    """The placement's device (the CPU where no backend there runs the op), its fastest backend
    there by the costs, else the rule ``RuleBook.on_device`` finds."""
    node, where = rows.nodes[row], planner.placement
    if not any(i.device == where and node.op in i.ops for i in backends.BACKENDS.values()):
        where = "cpu"
    device[row] = DEVICES.index(where)
    if rows.priced and rows.fastest[row][device[row]]:
        why = f"{planner.placement} placement; {planner._why}{planner._as(node, rows.names[row])}"
        return rows.fastest[row][device[row]], why
    return planner.rules.on_device(node, where)


_POLICIES = {
    "graph": _graph_policy,
    "per-op": _per_op_policy,
    "cpu": _one_device_policy,
    "cuda": _one_device_policy,
}
"""How each placement (``PLACEMENTS``) decides a compute row's backend, beside the graph's."""
