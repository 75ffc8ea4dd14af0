"""The placement solver against an exhaustive search, hand-built cases with known answers, the
brute-force regret, infeasible problems, and a long chain against a dynamic programme.  The
random problems carry hand-off (``switch``) costs: zeros among them, on outputs that CPU nodes
read, and on values with several readers.

The exhaustive search and the chain's dynamic programme price an assignment from the problem's
raw fields, not through ``placement.total``, so a mistake in the model's code shows as a
disagreement rather than being shared by both sides.
"""

from __future__ import annotations

import numpy as np
import pytest

from softcuda.errors import PlacementError
from softcuda.placement import (
    CPU,
    CUDA,
    FREE,
    Problem,
    copies,
    hand_offs,
    one_device,
    regret,
    resolution,
    solve,
    total,
)

INF = np.inf


def problem(run, move, inputs, outputs=(), fixed=None, writes=(), switch=None) -> Problem:
    run = np.asarray(run, dtype=float)
    n = len(run)
    fixed = np.full(n, FREE, np.int8) if fixed is None else np.asarray(fixed, np.int8)
    move = np.asarray(move, dtype=float)
    return Problem(run, move, tuple(inputs), tuple(outputs), fixed, tuple(writes), switch)


def random_problem(
    rng: np.random.Generator, n: int, whole_units: float | None = None, homes: bool = False
) -> Problem:
    """A random DAG of n nodes: fan-in 0-3 drawn with repeats (x * x), so values have several
    readers; costs over orders of magnitude, or whole multiples of ``whole_units`` seconds; a few
    inf run costs; leaves mostly fixed to the host at no cost, a few other nodes fixed; outputs,
    often nodes that others read; hand-off costs, a third of them 0.  With ``homes``, some
    leaves are instead free at no cost on either device, each the home of a value written back
    into it (a weight and its update), which is often read elsewhere too."""
    if whole_units is None:
        run = 10.0 ** rng.uniform(-7, 0, (n, 2))
        move = 10.0 ** rng.uniform(-7, 0, (n, 2))
        switch = 10.0 ** rng.uniform(-7, 0, n)
    else:
        run = rng.integers(0, 1000, (n, 2)) * whole_units
        move = rng.integers(0, 1000, (n, 2)) * whole_units
        switch = rng.integers(0, 1000, n) * whole_units
    switch[rng.random(n) < 1 / 3] = 0.0
    inputs = [tuple(rng.integers(0, i, rng.integers(0, 4)).tolist()) if i else () for i in range(n)]
    cannot = rng.random((n, 2)) < 0.1
    cannot[cannot.all(axis=1), rng.integers(0, 2)] = False  # every node can run somewhere
    run[cannot] = INF
    fixed = np.full(n, FREE, np.int8)
    pinned = rng.random(n) < 0.1
    fixed[pinned] = np.where(np.isfinite(run[pinned, CPU]), CPU, CUDA)
    leaves = np.array([not x for x in inputs]) & (rng.random(n) < 0.8)
    fixed[leaves] = CPU
    run[leaves] = (0.0, INF)
    outputs = rng.choice(n, rng.integers(0, min(n, 3) + 1), replace=False)
    read = sorted({u for reads in inputs for u in reads})
    if read and rng.random() < 0.5:  # an output that nodes read too: the hand-off's own case
        outputs = np.union1d(outputs, rng.choice(read, 1))
    writes = []
    if homes:
        for leaf in np.flatnonzero(leaves & (rng.random(n) < 0.6)):
            fixed[leaf], run[leaf] = FREE, (0.0, 0.0)
            writes.append((int(rng.integers(0, n)), int(leaf)))  # any node, earlier or later
    return problem(run, move, inputs, outputs.tolist(), fixed, writes, switch)


def exhaustive(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Every assignment of the free nodes, one per row, and its total, from the raw fields:
    vectorised over assignments, one Python step per node."""
    n = len(p.inputs)
    free = np.flatnonzero(p.fixed == FREE)
    grid = (np.arange(2**free.size)[:, None] >> np.arange(free.size)) & 1
    device = np.tile(np.where(p.fixed == FREE, CPU, p.fixed), (grid.shape[0], 1))
    device[:, free] = grid
    seconds = p.run[np.arange(n), device].sum(axis=1)
    for u in range(n):
        computing = sorted({w for w in range(n) if u in p.inputs[w]})
        readers = sorted(set(computing) | {h for v, h in p.writes if v == u})
        cuda_reads = (device[:, readers] == CUDA).any(axis=1)
        host_reads = (device[:, readers] == CPU).any(axis=1) | (u in p.outputs)
        # the hand-off: a node on the CPU computes with u (not the host's copy home of an
        # output, not a write-back into a leaf)
        handed = (device[:, u] == CUDA) & (device[:, computing] == CPU).any(axis=1)
        seconds += np.where((device[:, u] == CPU) & cuda_reads, p.move[u, 0], 0.0)
        seconds += np.where((device[:, u] == CUDA) & host_reads, p.move[u, 1], 0.0)
        seconds += np.where(handed, p.switch[u], 0.0)
    return device, seconds


def rounding_bound(p: Problem) -> float:
    """(number of finite costs) x unit: how far rounding may take solve from the optimum."""
    return (np.isfinite(p.run).sum() + p.move.size + p.switch.size) * resolution(p)


def check_against_exhaustive(p: Problem, exact: bool) -> np.ndarray:
    """solve(p) against every assignment; returns solve's placement."""
    device = solve(p)
    assert device.dtype == np.int8 and device.shape == (p.n,)
    assignments, totals = exhaustive(p)
    best = totals.min()
    (row,) = np.flatnonzero((assignments == device).all(axis=1))  # the solver obeys fixed
    assert total(p, device) == pytest.approx(totals[row], rel=1e-12, abs=0)
    if exact:
        assert totals[row] == best
    else:
        assert best <= totals[row] <= best * (1 + 1e-12) + rounding_bound(p)
    for side in (CPU, CUDA):
        assert totals[row] <= total(p, one_device(p, side)) * (1 + 1e-12)
    paid = sum(p.move[node, direction] for node, direction in copies(p, device))
    paid += sum(p.switch[node] for node in hand_offs(p, device))
    assert total(p, device) == pytest.approx(p.run[np.arange(p.n), device].sum() + paid)
    return device


class HandOffs:
    """What the random problems' placements exercised of the hand-off term, so that a test of
    it can say it was tested: the optimum paying it on an output, on a value with several
    readers, and a value it is not paid for with a CPU reader."""

    def __init__(self) -> None:
        self.output = self.several = self.free = 0

    def count(self, p: Problem, device: np.ndarray) -> None:
        for u in hand_offs(p, device):
            if p.switch[u] > 0 and p.is_output[u]:
                self.output += 1
            if p.switch[u] > 0 and p.readers[u] >= 2:
                self.several += 1
            if p.switch[u] == 0:
                self.free += 1


@pytest.mark.parametrize("seed", range(4))
def test_solve_matches_exhaustive_search_within_the_rounding_bound(seed):
    rng = np.random.default_rng(seed)
    seen = HandOffs()
    for trial in range(250):
        p = random_problem(rng, int(rng.integers(1, 13)))
        try:
            seen.count(p, check_against_exhaustive(p, exact=False))
        except AssertionError as failure:
            raise AssertionError(f"seed {seed} trial {trial}: {p}") from failure
    assert min(seen.output, seen.several, seen.free) >= 3, vars(seen)


@pytest.mark.parametrize("seed", range(2))
def test_solve_matches_exhaustive_search_with_values_written_home(seed):
    # A training step's weights: a free leaf read early, its new value written into it at the
    # end of the run, a loop that the cut prices as one more read.
    rng = np.random.default_rng(300 + seed)
    seen = HandOffs()
    for trial in range(250):
        p = random_problem(rng, int(rng.integers(1, 13)), homes=True)
        try:
            seen.count(p, check_against_exhaustive(p, exact=False))
        except AssertionError as failure:
            raise AssertionError(f"seed {seed} trial {trial}: {p}") from failure
    assert min(seen.output, seen.several, seen.free) >= 3, vars(seen)


def test_a_weight_stays_where_its_update_is_made():
    # w (0) is read by a GPU-only matmul (1), whose result makes the new w (2) on the GPU too:
    # keeping w on the host would cost a copy each way per run; on the GPU, none.
    p = problem(
        [[0, 0], [INF, 1], [INF, 1]], [[5, 5], [5, 5], [5, 5]], [(), (0,), (1,)], writes=[(2, 0)]
    )
    assert solve(p).tolist() == [CUDA, CUDA, CUDA]
    assert copies(p, solve(p)) == []
    assert total(p, np.array([CPU, CUDA, CUDA])) == 2 + 5 + 5


@pytest.mark.parametrize("seed", range(2))
def test_solve_matches_exhaustive_search_exactly_on_whole_units(seed):
    rng = np.random.default_rng(100 + seed)
    seen = HandOffs()
    for trial in range(250):
        p = random_problem(rng, int(rng.integers(1, 13)), whole_units=2.0**-10)
        finite = np.concatenate([p.run[np.isfinite(p.run)], p.move.ravel(), p.switch])
        assert np.all(finite / resolution(p) % 1 == 0)  # the premise: nothing is rounded
        try:
            seen.count(p, check_against_exhaustive(p, exact=True))
        except AssertionError as failure:
            raise AssertionError(f"seed {seed} trial {trial}: {p}") from failure
    assert min(seen.output, seen.several, seen.free) >= 3, vars(seen)


def test_a_value_read_by_three_cuda_nodes_pays_one_copy():
    # Each reader alone would stay on the CPU (0.125 + 2 > 1); the three together share one
    # copy (3 x 0.125 + 2 < 3 x 1), which is what makes CUDA the answer.
    run = [(0, INF), (1, 0.125), (1, 0.125), (1, 0.125)]
    move = [(2, 0)] + [(0, 0)] * 3
    p = problem(run, move, [(), (0,), (0,), (0,)], fixed=[CPU, FREE, FREE, FREE])
    device = solve(p)
    assert device.tolist() == [CPU, CUDA, CUDA, CUDA]
    assert copies(p, device) == [(0, 0)]
    assert total(p, device) == 2.375


def test_an_output_on_cuda_read_by_a_cpu_node_pays_one_copy_home():
    # y is cheap on CUDA, z runs only on the CPU; y is also an output: one d2h serves both.
    run = [(0, INF), (5, 1), (1, INF)]
    move = [(0.5, 0), (0, 0.5), (0, 0.25)]
    p = problem(run, move, [(), (0,), (1,)], outputs=[1, 2], fixed=[CPU, FREE, FREE])
    device = solve(p)
    assert device.tolist() == [CPU, CUDA, CPU]
    assert copies(p, device) == [(0, 0), (1, 1)]
    assert total(p, device) == 0 + 1 + 1 + 0.5 + 0.5


def test_a_hand_off_is_paid_once_where_a_cpu_node_reads_and_never_for_the_copy_home():
    # y (1) is cheap on CUDA; z (2) and q (3) run only on the CPU and read y.  y pays its copy
    # and its hand-off once, whether it is an output or not.
    run = [(0, INF), (5, 1), (1, INF), (1, INF)]
    move = [(0.5, 0), (0, 0.5), (0, 0), (0, 0)]
    switch = [0, 0.25, 0, 0]
    for outputs in ([2, 3], [1, 2, 3]):
        p = problem(run, move, [(), (0,), (1,), (1,)], outputs, [CPU, FREE, FREE, FREE], (), switch)
        device = solve(p)
        assert device.tolist() == [CPU, CUDA, CPU, CPU]
        assert copies(p, device) == [(0, 0), (1, 1)] and hand_offs(p, device) == [1]
        assert total(p, device) == 1 + 2 + 0.5 + 0.5 + 0.25
    # read by nobody on the CPU, an output on CUDA pays its copy home and no hand-off ...
    p = problem(run[:2], move[:2], [(), (0,)], [1], [CPU, FREE], (), switch[:2])
    assert solve(p).tolist() == [CPU, CUDA] and hand_offs(p, solve(p)) == []
    assert total(p, solve(p)) == 1 + 0.5 + 0.5
    # ... and a hand-off dear enough keeps y on the CPU with its readers
    p = problem(
        run, move, [(), (0,), (1,), (1,)], [1, 2, 3], [CPU, FREE, FREE, FREE], (), [0, 4, 0, 0]
    )
    assert solve(p).tolist() == [CPU] * 4


def test_a_value_written_home_pays_its_copy_but_no_hand_off():
    # w (0) is a weight homed on the CPU (fixed there); the new w (2) is made on CUDA-only
    # matmul (1)'s side and written into w: a copy home, which is no CPU node's work.
    p = problem(
        [[0, INF], [INF, 1], [INF, 1]],
        [[5, 5], [5, 5], [5, 5]],
        [(), (0,), (1,)],
        fixed=[CPU, FREE, FREE],
        writes=[(2, 0)],
        switch=[7, 7, 7],
    )
    device = solve(p)
    assert device.tolist() == [CPU, CUDA, CUDA]
    assert copies(p, device) == [(0, 0), (2, 1)] and hand_offs(p, device) == []
    assert total(p, device) == 2 + 5 + 5


def test_a_node_reading_one_value_twice_pays_one_copy_each_way():
    run = [(0, INF), (3, 1)]
    p = problem(run, [(1, 0), (0, 0.5)], [(), (0, 0)], outputs=[1], fixed=[CPU, FREE])
    device = solve(p)
    assert device.tolist() == [CPU, CUDA]
    assert copies(p, device) == [(0, 0), (1, 1)]
    assert total(p, device) == 1 + 1 + 0.5
    assert regret(p, device)[1] == 3 - 2.5


def short_chain(copy_s: float, scale: float = 1.0) -> Problem:
    """x -> a -> b -> c, c the output: each 1 s on the CPU, 0.125 s on CUDA."""
    run = np.array([(0, INF)] + [(1, 0.125)] * 3) * scale
    move = np.full((4, 2), copy_s * scale)
    return problem(run, move, [(), (0,), (1,), (2,)], outputs=[3], fixed=[CPU] + [FREE] * 3)


def test_a_chain_moves_to_cuda_when_the_copies_are_cheaper_than_the_cpu():
    p = short_chain(0.25)
    device = solve(p)
    assert device.tolist() == [CPU, CUDA, CUDA, CUDA]
    assert copies(p, device) == [(0, 0), (3, 1)]
    assert total(p, device) == 3 * 0.125 + 0.25 + 0.25


def test_a_chain_stays_on_the_cpu_when_the_copies_cost_more_than_cuda_saves():
    p = short_chain(2.0)
    device = solve(p)
    assert device.tolist() == [CPU] * 4
    assert copies(p, device) == []
    assert total(p, device) == 3.0
    assert total(p, one_device(p, CUDA)) == 3 * 0.125 + 4


def test_ties_stay_on_the_cpu():
    p = problem([(0, INF), (1, 1), (0, 0)], [(0, 0)] * 3, [(), (0,), (1,)], [2], [CPU, -1, -1])
    assert solve(p).tolist() == [CPU, CPU, CPU]
    # y on CUDA saves 1 s and pays its copy and hand-off to the CPU-only z, 0.5 s each: a tie
    run, move = [(0, INF), (2, 1), (1, INF)], [(0, 0), (0, 0.5), (0, 0)]
    p = problem(run, move, [(), (0,), (1,)], [2], [CPU, -1, -1], (), [0, 0.5, 0])
    assert total(p, np.array([CPU, CUDA, CPU])) == total(p, np.array([CPU, CPU, CPU])) == 3
    assert solve(p).tolist() == [CPU, CPU, CPU]


@pytest.mark.parametrize("scale", [2.0**-30, 1.0, 2.0**40])
def test_costs_far_from_int32_give_the_same_placement(scale):
    """Capacities beyond int32 made SciPy's max-flow silently wrong: the solver must scale."""
    p = short_chain(0.25, scale)
    assert solve(p).tolist() == [CPU, CUDA, CUDA, CUDA]


def test_solve_is_never_worse_than_one_device_on_larger_graphs():
    rng = np.random.default_rng(7)
    for _ in range(20):
        p = random_problem(rng, 300)
        got = total(p, solve(p))
        for side in (CPU, CUDA):
            assert got <= total(p, one_device(p, side)) + rounding_bound(p)
        assert regret(p, solve(p)).min() >= -rounding_bound(p)  # no single move helps


def test_one_device_keeps_fixed_nodes_and_may_be_infeasible():
    p = problem([(0, INF), (INF, 1)], [(0, 0)] * 2, [(), (0,)], fixed=[CPU, FREE])
    assert one_device(p, CUDA).tolist() == [CPU, CUDA]
    assert one_device(p, CPU).tolist() == [CPU, CPU]
    assert total(p, one_device(p, CPU)) == INF
    assert total(p, np.array([CUDA, CUDA])) == INF  # against fixed


@pytest.mark.parametrize("seed", range(3))
def test_regret_is_the_change_in_total_when_one_node_flips(seed):
    rng = np.random.default_rng(200 + seed)
    for _ in range(40):
        p = random_problem(rng, int(rng.integers(1, 30)), homes=bool(rng.random() < 0.5))
        # a random assignment that every node can run in
        may = np.isfinite(p.run) & ((p.fixed == FREE)[:, None] | (p.fixed[:, None] == [CPU, CUDA]))
        device = np.where(may[:, CUDA] & (~may[:, CPU] | (rng.random(p.n) < 0.5)), CUDA, CPU)
        base = total(p, device)
        assert np.isfinite(base)
        want = np.empty(p.n)
        for i in range(p.n):
            flipped = device.copy()
            flipped[i] = 1 - flipped[i]
            want[i] = total(p, flipped) - base
        got = regret(p, device)
        assert np.array_equal(np.isinf(got), np.isinf(want))
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12 * max(base, 1e-300))


def test_regret_is_infinite_for_fixed_nodes_and_impossible_moves():
    p = problem([(0, INF), (1, INF), (1, 1)], [(0, 0)] * 3, [(), (0,), (1,)], [2], [CPU, -1, -1])
    got = regret(p, np.array([CPU, CPU, CPU]))
    assert got[0] == INF and got[1] == INF and got[2] == 0


@pytest.mark.parametrize(
    ("run", "fixed", "says"),
    [
        ([(0, INF), (INF, INF)], [CPU, FREE], "node 1 can run on no device: its run cost is inf"),
        ([(0, INF), (1, INF)], [CPU, CUDA], "node 1 can run on no device: it is fixed to cuda"),
        ([(INF, 0), (1, 1)], [CPU, FREE], "node 0 can run on no device: it is fixed to cpu"),
    ],
)
def test_a_node_no_device_may_run_is_named(run, fixed, says):
    p = problem(run, [(0, 0)] * 2, [(), (0,)], [1], fixed)
    with pytest.raises(PlacementError, match=says):
        solve(p)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"inputs": [(), (1,)]}, "node 1 reads node 1, which is not an earlier node"),
        ({"outputs": [2]}, "output 2 is not a node"),
        ({"move": [(0, 0), (INF, 0)]}, "node 1 has an infinite copy cost"),
        ({"run": [(0, 0), (-1, 0)]}, "node 1 has run cost"),
        ({"fixed": [CPU, 2]}, "node 1 is fixed to 2"),
        ({"switch": [0, -1]}, "node 1 has switch cost -1.0: it must be finite and >= 0"),
        ({"switch": [0, np.nan]}, "node 1 has switch cost nan"),
        ({"switch": [0, INF]}, "node 1 has switch cost inf"),
        ({"switch": [0, 0, 0]}, r"switch must have shape \(2,\), got \(3,\)"),
    ],
)
def test_a_malformed_problem_is_refused(change, says):
    fields = {"run": [(0, 1), (1, 1)], "move": [(0, 0)] * 2, "inputs": [(), (0,)], "outputs": []}
    fields.update(change)
    with pytest.raises(PlacementError, match=says):
        problem(**fields)


def chain_optimum(run: np.ndarray, move: np.ndarray, switch: np.ndarray) -> float:
    """The least total of a chain whose last node is the output, node 0 fixed to the host: a
    dynamic programme over (node, device), one step per node."""
    best = np.array([run[0, CPU], INF])
    for i in range(1, len(run)):
        stay = best + run[i]
        # node i-1 on one device, node i on the other: i-1's value crosses once (and is handed
        # to the CPU where it goes there)
        cross = best[::-1] + [move[i - 1, 1] + switch[i - 1], move[i - 1, 0]] + run[i]
        best = np.minimum(stay, cross)
    return float(min(best[CPU], best[CUDA] + move[-1, 1]))


def test_a_long_chain_solves_to_the_dynamic_programme_optimum():
    n = 20_000
    rng = np.random.default_rng(3)
    run = 10.0 ** rng.uniform(-6, -3, (n, 2))
    run[0] = (0, INF)
    move = 10.0 ** rng.uniform(-6, -3, (n, 2))
    switch = np.where(rng.random(n) < 0.5, 10.0 ** rng.uniform(-6, -3, n), 0.0)
    inputs = [()] + [(i - 1,) for i in range(1, n)]
    p = problem(run, move, inputs, [n - 1], [CPU] + [FREE] * (n - 1), (), switch)
    device = solve(p)
    optimum = chain_optimum(run, move, switch)
    assert total(p, device) <= optimum * (1 + 1e-9) + rounding_bound(p)
    assert 0 < np.count_nonzero(device) < n  # the costs make it mix the two devices


@pytest.mark.parametrize("absurd", [1e6, 1e300])
def test_one_absurd_cost_does_not_coarsen_every_other(absurd):
    # The unit follows what an optimal placement can cost, not the largest cost: a cost beyond
    # any placement's total can never be paid, so it is as good as infinite and rounds nothing.
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(200):
        p = random_problem(rng, int(rng.integers(2, 11)), whole_units=2.0**-20)
        run = p.run.copy()
        finite = np.argwhere(np.isfinite(run) & (run > 0))
        if len(finite) < 2:
            continue
        node, device = finite[rng.integers(len(finite))]
        if not np.isfinite(run[node, 1 - device]) or p.fixed[node] == device:
            continue  # only where the node has another device to go to
        run[node, device] = absurd
        q = Problem(run, p.move, p.inputs, p.outputs, p.fixed, p.writes, p.switch)
        check_against_exhaustive(q, exact=True)
        checked += 1
    assert checked >= 50
