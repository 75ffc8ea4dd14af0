"""Whole-graph placement: a device per node that minimises the plan's predicted time.

The model, in seconds, everything summed as if it ran one thing at a time:

* node i costs ``run[i, CPU]`` on the CPU or ``run[i, CUDA]`` on the device (inf: cannot run
  there); a node may be fixed to one device (leaves live on the host);
* a value computed on one device and read by at least one node on the other is copied across
  the bus once per value and direction, however many nodes read it there: ``move[i, 0]``
  host->device, ``move[i, 1]`` device->host.  A node that reads one value twice (``x * x``) is
  one reader of it;
* an output must end on the host, so an output computed on CUDA pays its device->host copy:
  the same copy a CPU reader of it would pay, paid once;
* a value on CUDA that at least one node on the CPU reads also pays ``switch[i]`` once, beyond
  its copy: what handing it to the CPU adds to the plan (measured, ``softcuda.sweep.switch``;
  likely the CPU reading data that the copy, not the CPU, last wrote).  An output pays it only
  where a CPU node reads it too: the host's copy home is no CPU node;
* a value written back into a node at the end of every run (a training step's new weights into
  their leaf, ``writes``) is read by that node: the node's device is where the value is kept
  between runs (its home), and a value computed on the other side pays its copy there, once.
  The write closes a loop (the leaf is read early in the run, its new value made late), which
  changes nothing below: a cut does not care about order.  A write is a copy, not CPU work: it
  never pays ``switch``.

What the model leaves out: the CPU, the device and the bus work at the same time in a real plan
(copies can overlap kernels, the host can run while the device does), so the sum is an upper
bound on a plan's time and the placement it minimises is the one that is cheapest done serially;
device memory is not modelled, so a placement may keep more on CUDA than fits.

Why a minimum cut solves it exactly (Stone, 1977).  Build a flow network with a source s (the
CPU side) and a sink t (the CUDA side); a cut (S, T) with s in S, t in T is a placement, node v
on the CPU iff v in S, and the cut's capacity is the sum of the edges it crosses from S to T:

* s -> v with capacity ``run[v, CUDA]``: crossed iff v is on CUDA;
* v -> t with capacity ``run[v, CPU]``: crossed iff v is on the CPU;
* host->device copy of value u read by w_1..w_k: an auxiliary node a_u, edge u -> a_u with
  capacity ``move[u, 0]`` and edges a_u -> w_j of infinite capacity.  If any reader is on CUDA,
  a_u must be on the CUDA side too (else an infinite edge is crossed), and u -> a_u is crossed iff
  u is on the CPU; if no reader is on CUDA, the minimum puts a_u on the CPU side and pays nothing.
  Minimised over a_u, the crossed capacity is ``move[u, 0]`` iff u is on the CPU and some reader
  on CUDA: the copy, paid once;
* device->host copy of u: b_u with edge b_u -> u of capacity ``move[u, 1] + switch[u]`` and
  infinite edges w_j -> b_u; by the mirror argument it costs that iff u is on CUDA and some
  reader is on the CPU, which is when both the copy and the hand-off are paid, each once.  Where
  some of u's readers only receive a write-back (a home, which pays the copy but no hand-off),
  the two conditions differ, and u gets two such nodes: b_u with ``move[u, 1]`` over all its
  readers, b'_u with ``switch[u]`` over those that read u as an input;
* a node that cannot run on a device, or is fixed to the other, gets an infinite s -> v or
  v -> t edge, so no finite cut puts it there.

For every placement, the cheapest choice of the auxiliary nodes gives a cut whose capacity is
that placement's total; every finite cut is such a placement with some auxiliary choice, so
costing at least that.  The minimum cut is therefore an optimal placement, found by a maximum
flow.  Smaller networks give the same minimum: a value with one reader needs no auxiliary node
(u -> w for its host->device copy, w -> u for the way back); an output on CUDA pays its copy home
whatever its readers do (the host is a reader always on the CPU), so that copy joins s -> u and
its b_u carries ``switch[u]`` alone (a CPU node reading it is still a hand-off); an auxiliary
node of capacity 0 is left out; a read that cannot cause a copy (the value or the reader cannot
be on the side it would need) gets no edge; and taking min(s -> v, v -> t) off both of a node's
edges lowers every cut by the same amount.

Capacities are integers: SciPy's max-flow works in int32 and silently returns a wrong flow for
larger values, so every cost (``run``, ``move`` and ``switch`` alike) is rounded to whole units
of ``resolution(problem)``.  Its scale is ``ceiling(problem)``, the total of one placement that
can always be made (each node on its cheaper device, every copy and hand-off paid): no cost
above it is in an optimal cut, so such a cost is infinite to the solver, and one absurd figure
cannot make the unit coarse enough to round every ordinary cost to nothing.  The unit is a power
of two in which the ceiling is at most 2**29 units (and never finer than 2**-33 s); "infinite"
is 2**30 units, beyond any finite cut, and a flow added to it stays below 2**31.  Rounding moves
each cost by at most half a unit, so the placement ``solve`` returns is within (number of finite
costs) x unit of the optimum, and exactly optimal where every cost is a whole number of units.
Among placements that tie, ``solve`` keeps nodes on the CPU.

This module knows nothing of tensors or graphs: the graph compiler builds the ``Problem`` from a
profile's costs and reads the devices back.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from .errors import PlacementError

CPU, CUDA = 0, 1
FREE = -1
DEVICE_NAMES = ("cpu", "cuda")

FINITE_UNITS = 2**29
"""A problem's ceiling is at most this many units (before rounding)."""
INFINITE_UNITS = 2**30
"""The capacity of an edge no cut may cross: above every finite cut, and with a flow of at most
FINITE_UNITS (plus rounding) on top of it still inside int32."""
FINEST_UNIT_S = 2.0**-33
"""About 0.12 ns: a resolution finer than any timing the costs come from."""


@dataclass(frozen=True, eq=False)
class Problem:
    """One placement problem: n nodes in topological order, their costs and where they must go.

    ``run`` and ``move`` are float64 (n, 2) seconds (see the module docstring); ``inputs[i]``
    names the nodes node i reads, all earlier than i; ``outputs`` the nodes whose values must end
    on the host; ``fixed[i]`` is FREE (-1), CPU or CUDA; ``writes`` (value, home) pairs: the
    value is copied into node ``home`` at the end of every run, a read of it by ``home`` in any
    order.  ``switch``: float64 (n,) seconds, what value i adds beyond its copy where it is on
    CUDA and a node on the CPU reads it (None: zeros; a write-back's home is no such reader).
    The arrays are copied and made read-only.  Equality is identity: two problems are never
    compared element by element.
    """

    run: np.ndarray
    move: np.ndarray
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]
    fixed: np.ndarray
    writes: tuple[tuple[int, int], ...] = ()
    switch: np.ndarray | None = None
    # Derived from the above, once: the distinct (value, reader) pairs sorted by reader
    # (``producer[j]`` is read by ``reader[j]``; ``computes[j]``: as an input, not only as a
    # write-back), each value's number of distinct readers, and which values are outputs.
    producer: np.ndarray = field(init=False, repr=False)
    reader: np.ndarray = field(init=False, repr=False)
    computes: np.ndarray = field(init=False, repr=False)
    readers: np.ndarray = field(init=False, repr=False)
    is_output: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        run = _seconds(self.run, "run")
        n = run.shape[0]
        move = _seconds(self.move, "move", n)
        if not np.isfinite(move).all():
            node = int(np.argmin(np.isfinite(move).all(axis=1)))
            raise PlacementError(f"node {node} has an infinite copy cost; copies must be finite")
        switch = np.zeros(n) if self.switch is None else np.array(self.switch, dtype=np.float64)
        if switch.shape != (n,):
            raise PlacementError(f"switch must have shape ({n},), got {switch.shape}")
        bad = ~(np.isfinite(switch) & (switch >= 0))
        if bad.any():
            node = int(np.argmax(bad))
            raise PlacementError(
                f"node {node} has switch cost {switch[node]}: it must be finite and >= 0"
            )
        fixed = np.array(self.fixed)
        if fixed.shape != (n,) or (fixed.size and fixed.dtype.kind not in "iu"):
            raise PlacementError(f"fixed must be {n} integers, got {fixed.dtype} {fixed.shape}")
        if not np.isin(fixed, (FREE, CPU, CUDA)).all():
            node = int(np.argmin(np.isin(fixed, (FREE, CPU, CUDA))))
            raise PlacementError(f"node {node} is fixed to {fixed[node]}: not -1, 0 or 1")
        if len(self.inputs) != n:
            raise PlacementError(f"inputs names {len(self.inputs)} nodes' inputs, for {n} nodes")
        fan_in = np.fromiter(map(len, self.inputs), np.int64, n)
        read = np.fromiter(itertools.chain.from_iterable(self.inputs), np.int64, fan_in.sum())
        by = np.repeat(np.arange(n, dtype=np.int64), fan_in)
        late = (read < 0) | (read >= by)
        if late.any():
            j = int(np.argmax(late))
            raise PlacementError(
                f"node {by[j]} reads node {read[j]}, which is not an earlier node "
                "(inputs must be in topological order)"
            )
        written = np.array(self.writes, dtype=np.int64).reshape(-1, 2)
        if ((written < 0) | (written >= n)).any():
            bad = written[((written < 0) | (written >= n)).any(axis=1)][0].tolist()
            raise PlacementError(f"write {tuple(bad)} names a node that is not one of the {n}")
        written = written[written[:, 0] != written[:, 1]]  # into itself: never a copy
        computing = np.unique(by * n + read)
        read = np.concatenate([read, written[:, 0]])
        by = np.concatenate([by, written[:, 1]])
        pair = np.unique(by * n + read)  # x * x reads x once
        outputs = np.fromiter(self.outputs, np.int64)
        if ((outputs < 0) | (outputs >= n)).any():
            bad = int(outputs[(outputs < 0) | (outputs >= n)][0])
            raise PlacementError(f"output {bad} is not a node (there are {n})")
        is_output = np.zeros(n, bool)
        is_output[outputs] = True
        derived = {
            "run": run,
            "move": move,
            "switch": switch,
            "fixed": fixed.astype(np.int8),
            "producer": pair % max(n, 1),
            "reader": pair // max(n, 1),
            "computes": np.isin(pair, computing),
            "is_output": is_output,
        }
        derived["readers"] = np.bincount(derived["producer"], minlength=n)
        for name, value in derived.items():
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def n(self) -> int:
        return self.run.shape[0]


def _seconds(values: np.ndarray, name: str, n: int | None = None) -> np.ndarray:
    """A private float64 (n, 2) copy of a cost array, refused with NaN or negative entries."""
    array = np.array(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 2 or (n is not None and array.shape[0] != n):
        want = f"({n}, 2)" if n is not None else "(n, 2)"
        raise PlacementError(f"{name} must have shape {want}, got {array.shape}")
    bad = np.isnan(array) | (array < 0)
    if bad.any():
        node = int(np.argmax(bad.any(axis=1)))
        raise PlacementError(f"node {node} has {name} cost {array[node].tolist()}: NaN or < 0")
    return array


def ceiling(problem: Problem) -> float:
    """Seconds that an optimal placement never exceeds: every node on the cheaper of the
    devices it may use, plus every copy and hand-off (each is paid at most once)."""
    allowed = np.isfinite(problem.run)
    allowed[:, CPU] &= problem.fixed != CUDA
    allowed[:, CUDA] &= problem.fixed != CPU
    cheapest = np.where(allowed, problem.run, np.inf).min(axis=1)
    cheapest = np.where(np.isfinite(cheapest), cheapest, 0.0)  # a node no device may run
    ceiling_s = float(cheapest.sum() + problem.move.sum() + problem.switch.sum())
    if not math.isfinite(ceiling_s):
        raise PlacementError("the costs sum beyond float64; costs must be in seconds")
    return ceiling_s


def resolution(problem: Problem, ceiling_s: float | None = None) -> float:
    """The unit, in seconds, that ``solve`` rounds every cost to: the smallest power of two
    (at least FINEST_UNIT_S) in which ``ceiling(problem)`` (or ``ceiling_s``, where the caller
    has it) is at most FINITE_UNITS units."""
    ceiling_s = ceiling(problem) if ceiling_s is None else ceiling_s
    mantissa, exponent = math.frexp(max(ceiling_s / FINITE_UNITS, FINEST_UNIT_S))
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def solve(problem: Problem) -> np.ndarray:
    """The device of every node (int8, CPU or CUDA) in a placement of least total, ties kept on
    the CPU; within ``resolution`` rounding of the optimum as the module docstring bounds it.

    Raises PlacementError naming a node that no device may run.
    """
    n, run, fixed = problem.n, problem.run, problem.fixed
    may_cpu = (fixed != CUDA) & np.isfinite(run[:, CPU])
    may_cuda = (fixed != CPU) & np.isfinite(run[:, CUDA])
    stuck = ~(may_cpu | may_cuda)
    if stuck.any():
        raise PlacementError(_stuck(problem, int(np.argmax(stuck)), int(stuck.sum())))
    bound = ceiling(problem)
    unit = resolution(problem, bound)
    # a device whose time for a node is above the ceiling is one no optimal placement uses
    # (the node's other device is within it)
    may_cpu &= run[:, CPU] <= bound
    may_cuda &= run[:, CUDA] <= bound
    edges = _node_edges(problem, may_cpu, may_cuda, unit)
    read_edges, vertices = _read_edges(problem, may_cpu, may_cuda, unit)
    return _cuda_side(edges + read_edges, vertices, n)


def _units(seconds: np.ndarray, unit: float) -> np.ndarray:
    """Seconds as whole units of ``unit``: the max-flow works in int32 (module docstring).
    Every copy and hand-off is within the ceiling, so fits; a run time may not, and its caller
    masks it."""
    return np.rint(seconds / unit).astype(np.int64)


Edges = list[tuple[np.ndarray, np.ndarray, np.ndarray]]
"""A flow network as (from, to, capacity) arrays, aligned; node n is the source, n + 1 the sink,
and auxiliary nodes follow."""


def _node_edges(problem: Problem, may_cpu: np.ndarray, may_cuda: np.ndarray, unit: float) -> Edges:
    """s -> v and v -> t for every node: the cut crosses exactly one of them, so they carry the
    node's own choice (its run time on each device, an output's copy home), kept apart from the
    copies its reads cause so that each term of the reduction has one place in the code."""
    n, run = problem.n, problem.run
    source, sink = n, n + 1
    nodes = np.arange(n, dtype=np.int64)
    d2h = _units(problem.move[:, 1], unit)
    # s -> v is crossed when v runs on CUDA: its time there, and an output's copy home
    on_cuda = _units(np.where(may_cuda, run[:, CUDA], 0.0), unit)
    on_cuda += np.where(problem.is_output, d2h, 0)
    on_cuda[~may_cuda] = INFINITE_UNITS
    on_cpu = _units(np.where(may_cpu, run[:, CPU], 0.0), unit)
    on_cpu[~may_cpu] = INFINITE_UNITS

    # Reducing every node's two edges by what they share changes every cut by one constant.
    both = may_cpu & may_cuda
    common = np.minimum(on_cuda, on_cpu)[both]
    on_cuda[both] -= common
    on_cpu[both] -= common
    return [(np.full(n, source), nodes, on_cuda), (nodes, np.full(n, sink), on_cpu)]


def _read_edges(
    problem: Problem, may_cpu: np.ndarray, may_cuda: np.ndarray, unit: float
) -> tuple[Edges, int]:
    """The edges of every copy and hand-off a read may cause, and the number of vertices of the
    whole network (nodes, source, sink, auxiliary nodes): the three kinds of term the module
    docstring reduces (a_u, b_u, b'_u) differ only in direction and cost, so one builder
    (``_aux_edges``) serves them all."""
    n, is_output = problem.n, problem.is_output
    h2d, d2h = _units(problem.move[:, 0], unit), _units(problem.move[:, 1], unit)
    u, w, computes = problem.producer, problem.reader, problem.computes
    # Where every reader of a value reads it as an input, its copy home and its hand-off are
    # paid on the same condition, and one b_u carries both (an output's copy home is already on
    # s -> u); where some reader only receives a write-back, the hand-off has a b'_u of its own
    # over the readers that compute with it.
    switch = _units(problem.switch, unit)
    together = np.bincount(u[computes], minlength=n) == problem.readers
    d2h_paid = np.where(is_output, 0, d2h) + np.where(together, switch, 0)
    terms = [
        (0, u, w, h2d),
        (1, u, w, np.minimum(d2h_paid, INFINITE_UNITS)),
        (1, u[computes], w[computes], np.where(together, 0, switch)),
    ]
    edges: Edges = []
    next_id = n + 2
    for direction, made, read_by, cost in terms:
        # The reads that can make this cost be paid: the value where it is made, the reader
        # where it is read.  A reader that cannot be on the other side never crosses its
        # infinite edge, so it needs none.
        if direction == 0:
            can = may_cpu[made] & may_cuda[read_by] & (cost[made] > 0)
        else:
            can = may_cuda[made] & may_cpu[read_by] & (cost[made] > 0)
        next_id = _aux_edges(edges, direction, made[can], read_by[can], cost, next_id)
    return edges, next_id


def _aux_edges(
    edges: Edges, direction: int, value: np.ndarray, by: np.ndarray, cost: np.ndarray, next_id: int
) -> int:
    """Append one term's edges for the reads ``value[j]`` by ``by[j]`` (each able to cost
    ``cost[value[j]]``), numbering its auxiliary nodes from ``next_id``; returns the next free
    id.  A value read once needs no auxiliary node: the read's own edge carries the cost."""
    readers = np.bincount(value, minlength=cost.size)  # cost is per value: n entries
    alone = readers[value] == 1
    shared = ~alone
    values = np.flatnonzero(readers >= 2)
    aux = np.zeros(cost.size, np.int64)
    aux[values] = np.arange(next_id, next_id + values.size)
    forced = np.full(int(shared.sum()), INFINITE_UNITS, np.int64)
    if direction == 0:  # u -> w for one reader; u -> a_u -> every reader for several
        edges += [
            (value[alone], by[alone], cost[value[alone]]),
            (values, aux[values], cost[values]),
            (aux[value[shared]], by[shared], forced),
        ]
    else:  # w -> u for one reader; every reader -> b_u -> u for several
        edges += [
            (by[alone], value[alone], cost[value[alone]]),
            (aux[values], values, cost[values]),
            (by[shared], aux[value[shared]], forced),
        ]
    return next_id + values.size


def _cuda_side(edges: Edges, vertices: int, n: int) -> np.ndarray:
    """Run the maximum flow from the source (node n) to the sink (n + 1) and read the placement
    off the minimum cut: kept apart because it is the one step that depends on SciPy's
    conventions (int32 capacities, an antisymmetric flow)."""
    source, sink = n, n + 1
    rows, cols, caps = (np.concatenate(parts) for parts in zip(*edges))
    keep = caps > 0
    rows, cols, caps = rows[keep], cols[keep], caps[keep].astype(np.int32)
    shape = (vertices, vertices)
    flow = maximum_flow(csr_array((caps, (rows, cols)), shape=shape), source, sink, method="dinic")
    # The CUDA side is every node that can still reach the sink in the residual network
    # (r = capacity - flow): the sink side of a minimum cut, the smallest one, so ties stay on
    # the CPU.  Search backwards from the sink, over r transposed = capacity transposed + flow
    # (the flow SciPy returns is antisymmetric).
    backwards = csr_array((caps, (cols, rows)), shape=shape) + flow.flow
    backwards.data = (backwards.data > 0).astype(np.int8)
    backwards.eliminate_zeros()
    reach = breadth_first_order(backwards, sink, directed=True, return_predecessors=False)
    device = np.full(n, CPU, np.int8)
    device[reach[reach < n]] = CUDA
    return device


def _stuck(problem: Problem, node: int, count: int) -> str:
    fixed, costs = int(problem.fixed[node]), problem.run[node].tolist()
    if fixed != FREE:
        why = f"it is fixed to {DEVICE_NAMES[fixed]}, where its run cost is inf"
    else:
        why = f"its run cost is inf on both cpu and cuda ({costs})"
    more = f" ({count - 1} more nodes likewise)" if count > 1 else ""
    return f"node {node} can run on no device: {why}{more}"


def _device(problem: Problem, device: np.ndarray) -> np.ndarray:
    array = np.asarray(device)
    if array.shape != (problem.n,) or not np.isin(array, (CPU, CUDA)).all():
        raise PlacementError(f"a placement is {problem.n} devices, each 0 (cpu) or 1 (cuda)")
    return array.astype(np.intp)


def _readers_on(problem: Problem, device: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per value: how many distinct readers run on CUDA, how many on the CPU, and how many of
    those on the CPU read it as an input (a write-back's home only receives it)."""
    on_cpu = device[problem.reader] == CPU
    cuda = np.bincount(problem.producer[~on_cpu], minlength=problem.n)
    computing = np.bincount(problem.producer[on_cpu & problem.computes], minlength=problem.n)
    return cuda, problem.readers - cuda, computing


def _paid(
    device: np.ndarray,
    cuda_readers: np.ndarray,
    cpu_readers: np.ndarray,
    cpu_computing: np.ndarray,
    is_output: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per value (arrays aligned): whether it pays its host->device copy, its device->host
    copy, and its hand-off to the CPU (``switch``)."""
    h2d = (device == CPU) & (cuda_readers > 0)
    d2h = (device == CUDA) & ((cpu_readers > 0) | is_output)
    hand_off = (device == CUDA) & (cpu_computing > 0)
    return h2d, d2h, hand_off


def _paid_s(move: np.ndarray, switch: np.ndarray, paid: tuple[np.ndarray, ...]) -> np.ndarray:
    h2d, d2h, hand_off = paid
    return (
        np.where(h2d, move[:, 0], 0.0)
        + np.where(d2h, move[:, 1], 0.0)
        + np.where(hand_off, switch, 0.0)
    )


def total(problem: Problem, device: np.ndarray) -> float:
    """Predicted seconds of a placement: run times plus copies and hand-offs; inf where a node
    runs on a device that cannot run it or that it is not fixed to."""
    device = _device(problem, device)
    fixed = problem.fixed
    if ((fixed != FREE) & (device != fixed)).any():
        return math.inf
    run_s = problem.run[np.arange(problem.n), device].sum()
    paid = _paid(device, *_readers_on(problem, device), problem.is_output)
    return float(run_s + _paid_s(problem.move, problem.switch, paid).sum())


def copies(problem: Problem, device: np.ndarray) -> list[tuple[int, int]]:
    """The copies a placement pays, as (node, direction) pairs in node order; direction 0 is
    host->device, 1 device->host."""
    device = _device(problem, device)
    h2d, d2h, _ = _paid(device, *_readers_on(problem, device), problem.is_output)
    node, direction = np.nonzero(np.stack([h2d, d2h], axis=1))
    return list(zip(node.tolist(), direction.tolist()))


def hand_offs(problem: Problem, device: np.ndarray) -> list[int]:
    """The values a placement hands from CUDA to a node on the CPU, in node order: each pays
    its ``switch`` once (beyond its device->host copy, which ``copies`` lists)."""
    device = _device(problem, device)
    *_, hand_off = _paid(device, *_readers_on(problem, device), problem.is_output)
    return np.flatnonzero(hand_off).tolist()


def regret(problem: Problem, device: np.ndarray) -> np.ndarray:
    """Per node, the total with that node alone on the other device minus the total; inf where
    the node is fixed or cannot run on the other device.  Never below zero in an optimal
    placement (in ``solve``'s, never below minus the rounding bound): what explain() shows as
    how firmly each node's device was chosen.

    Only terms that touch the node change: its run time, its own value's copies and hand-off,
    and those of the values it reads (one reader moves from one device to the other).  So each
    node costs O(its degree) and the whole array O(n + edges).  For a placement whose total is
    already inf the figure is still that local change (-inf where the node leaves a device it
    cannot run on).
    """
    device = _device(problem, device)
    n, run, move, out = problem.n, problem.run, problem.move, problem.is_output
    switch = problem.switch
    nodes = np.arange(n)
    other = 1 - device
    cuda, cpu, computing = _readers_on(problem, device)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: blocked below
        change = run[nodes, other] - run[nodes, device]
    change += _paid_s(move, switch, _paid(other, cuda, cpu, computing, out))
    change -= _paid_s(move, switch, _paid(device, cuda, cpu, computing, out))
    # each value u that node w reads: w's move takes one reader from one device to the other
    # (and, where w reads u as an input, one computing reader on or off the CPU)
    u, w = problem.producer, problem.reader
    step = np.where(device[w] == CUDA, -1, 1)
    hands = np.where(problem.computes, -step, 0)
    was = _paid(device[u], cuda[u], cpu[u], computing[u], out[u])
    now = _paid(device[u], cuda[u] + step, cpu[u] - step, computing[u] + hands, out[u])
    moved = _paid_s(move[u], switch[u], now) - _paid_s(move[u], switch[u], was)
    change += np.bincount(w, weights=moved, minlength=n)
    change[(problem.fixed != FREE) | np.isinf(run[nodes, other])] = math.inf
    return change


def one_device(problem: Problem, device: int) -> np.ndarray:
    """Every free node on ``device`` (fixed nodes where they are fixed), whether or not the
    device can run them: ``total`` then says inf."""
    if device not in (CPU, CUDA):
        raise PlacementError(f"device must be 0 (cpu) or 1 (cuda), got {device!r}")
    return np.where(problem.fixed != FREE, problem.fixed, device).astype(np.int8)
