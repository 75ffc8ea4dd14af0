"""How long the whole-graph placement solver takes per node (a benchmark, not a test).

For a chain (each node reads the one before) and a random DAG (each node reads 0-2 earlier
nodes), at each size: making the ``Problem`` from cost arrays and input tuples, ``solve`` (the
minimum cut), and ``regret`` for every node, each the median of --repeat runs after a warm-up,
in microseconds per node.  Costs are random over three orders of magnitude, leaves fixed to the
host, the last node an output.  Targets: solve well under 10 us per node, Problem plus solve
under 20 us.

    python benchmarks/placement_solver.py [--sizes 1000 10000 100000] [--repeat 5]
    python benchmarks/placement_solver.py --quick     # up to 10,000 nodes: seconds (CI)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import scipy

from softcuda.placement import CPU, FREE, Problem, regret, solve


def graph(n: int, kind: str, rng: np.random.Generator) -> tuple:
    """Problem arguments for a chain or a random DAG of n nodes."""
    if kind == "chain":
        inputs = ((),) + tuple((i - 1,) for i in range(1, n))
    else:
        fan_in = rng.integers(0, 3, n)
        fan_in[0] = 0
        earlier = (rng.random((n, 2)) * np.arange(n)[:, None]).astype(np.int64).tolist()
        inputs = tuple(tuple(earlier[i][: fan_in[i]]) for i in range(n))
    run = 10.0 ** rng.uniform(-6, -3, (n, 2))
    move = 10.0 ** rng.uniform(-6, -3, (n, 2))
    fixed = np.full(n, FREE, np.int8)
    leaves = np.array([not x for x in inputs])
    fixed[leaves] = CPU
    run[leaves] = (0.0, np.inf)
    return run, move, inputs, (n - 1,), fixed


def median_s(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="1,000 and 10,000 nodes, 3 repeats (a smoke run)"
    )
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat = [1_000, 10_000], 3
    rng = np.random.default_rng(args.seed)

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, scipy {scipy.__version__}")
    print(f"{'graph':<7} {'nodes':>8}  {'Problem':>9}  {'solve':>9}  {'regret':>9}  (us/node)")
    for n in args.sizes:
        for kind in ("chain", "dag"):
            fields = graph(n, kind, rng)
            problem = Problem(*fields)
            device = solve(problem)
            build = median_s(lambda: Problem(*fields), args.repeat)
            cut = median_s(lambda: solve(problem), args.repeat)
            local = median_s(lambda: regret(problem, device), args.repeat)
            per_node = [f"{seconds / n * 1e6:>9.3f}" for seconds in (build, cut, local)]
            print(f"{kind:<7} {n:>8,}  " + "  ".join(per_node))
    return 0


if __name__ == "__main__":
    sys.exit(main())
