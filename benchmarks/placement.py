"""Whole-graph placement against per-op, all-CPU and all-CUDA plans, end to end (prints figures).

Every case is compiled four times, once per placement (``softcuda.planner``), with its host data
in pinned memory.  A run is ``plan.evaluate(copy=False)``: the leaves' values go from pinned host
memory to wherever the plan needs them, the results come back to the host, and the stream is
synchronised; timed with the host clock.

How the four plans are timed (docs/method.md, "Whole graphs in turns"): a sample is a *block* of
back-to-back runs of one plan, as a plan in use runs again and again.  The block's length is
chosen once per case from the warm-up runs, so that the fastest placement's block lasts at least
``BLOCK_S``, and every placement of the case runs as many calls (1 to ``MAX_CALLS``; both in
``softcuda.sweep.timers``, whose ``in_turns`` times them); the first call after another
plan's work pays for that work's leftovers, and a block spreads it over many
calls instead of counting it whole.  The placements take turns block by block, round after
round, in a carryover-balanced order (``softcuda.sweep.timers.balanced_orders``): over every 4
rounds each placement runs first once and right after each other placement once, so that no
placement always follows the same one, and a slow spell of the host falls on all of them alike.

Cases: chains of k = 1, 2, 4, 8, 16 elementwise ops at 2^10 ... 2^24 elements, unary, binary
and mixed (``softcuda.analysis.chains``; ``softcuda plot --chains`` draws their crossover
against k from this benchmark's CSV); MLP forward passes
at four widths; one large matmul with a small elementwise tail; a diamond of shared
subexpressions.  For each it prints the median time per call under each placement, the graph
plan against the fastest of the four, the predicted total against the measured one, and the
calls per block; then how far apart placements that compiled to one plan, step for step, read
(the measurement's own noise: a gap between different plans smaller than that is not the
placement's); then the targets:

* the graph plan within 10% of the fastest placement on every case, and within 3% at the median;
* the graph plan at least 10x faster than per-op on the mixed 8-op chain (relu, add, mul, tanh)
  at 2^20;
* the median error of predicted against measured total time at most 25%.

    python benchmarks/placement.py [--config CONFIG.soft] [--rounds 16] [--csv placement.csv]
    python benchmarks/placement.py --quick      # a few small cases, 4 rounds (a smoke run)
    python benchmarks/placement.py --replay placement.csv.gz --config CONFIG.soft  # no GPU

``--replay`` runs nothing: it compiles every case under the four placements with ``--config``
(``allocate=False``, on any machine) and reads the times a GPU run measured from its raw CSV.
The one-device and per-op plans do not depend on the placement model, so their measured times
stand; where the graph plan a changed model makes is step for step one of theirs, its time is
known too, and the graph plan against the fastest is told without a GPU.  Where it is a plan
no placement of that run made, it says so.  It also gives the model's error on the measured
plans it prices.  A model change is checked this way before a GPU session spends time on it.

It needs a CUDA profile with costs of this machine (``softcuda init``); without CUDA it says so in
one line and exits 2.  The raw repetitions go to ``--csv``, one row per block: ``seconds`` is
the block's time per call (its seconds over its ``calls``), ``calls`` the runs in the block,
``plan`` what the plan does (``plan_id``).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np

import softcuda as sc
from softcuda.analysis.chains import FAMILIES, KS, chain_graph
from softcuda.backends import cuda_available
from softcuda.config import load_config
from softcuda.errors import SoftcudaError
from softcuda.graph import format_seconds
from softcuda.planner import PLACEMENTS
from softcuda.sweep.timers import BLOCK_S, in_turns

COLUMNS = [
    "case", "placement", "round", "seconds", "calls", "predicted_s", "family", "k", "n", "plan"
]  # fmt: skip
"""The raw CSV's columns, one row per block (``softcuda plot --chains`` reads it)."""


def mlp(batch: int, widths: tuple[int, ...]) -> dict[str, sc.Tensor]:
    """A forward pass: relu between the layers, softmax at the end."""
    h = sc.randn((batch, widths[0]), seed=3)
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        rng = np.random.default_rng(10 + i)
        w = sc.tensor((rng.standard_normal((fan_in, fan_out)) / fan_in**0.5).astype(np.float32))
        b = sc.tensor(np.zeros((1, fan_out), np.float32))
        h = h @ w + b
        h = sc.relu(h) if i < len(widths) - 2 else sc.softmax(h, axis=-1)
    return {"probs": h}


def matmul_tail(n: int, cols: int) -> dict[str, sc.Tensor]:
    """One large matmul (n x n by n x cols), then a few elementwise ops on its small result."""
    a = sc.randn((n, n), seed=4)
    b = sc.randn((n, cols), seed=5)
    y = sc.tanh(a @ b * (1.0 / n**0.5))
    return {"y": sc.relu(y - 0.1) * 2.0}


def diamond(n: int) -> dict[str, sc.Tensor]:
    """Shared subexpressions: one value read by several consumers, two outputs."""
    x = sc.randn((n,), seed=6)
    a = sc.exp(sc.tanh(x))
    b = sc.sigmoid(a)
    c = sc.square(a)
    d = b * c + a
    return {"d": d, "total": sc.sum(d - b)}


def cases(quick: bool) -> list[tuple[str, dict, Callable[[], dict[str, sc.Tensor]]]]:
    """(name, what the chain crossover reads: family, k, n, or nothing; the graph's builder)."""
    found: list[tuple[str, dict, Callable[[], dict[str, sc.Tensor]]]] = []
    ks = (1, 8) if quick else KS
    exps = (12, 20) if quick else (10, 12, 14, 16, 18, 20, 22, 24)
    for family in FAMILIES:
        for k in ks:
            for e in exps:
                n = 1 << e
                found.append(
                    (
                        f"{family} chain k={k} n=2^{e}",
                        {"family": family, "k": k, "n": n},
                        lambda f=family, k=k, n=n: {"y": chain_graph(f, k, n)},
                    )
                )
    shapes = [(64, (784, 256, 10)), (4096, (2048, 2048, 256))]
    if not quick:
        shapes[1:1] = [(256, (784, 512, 10)), (1024, (1024, 1024, 64))]
    for batch, widths in shapes:
        name = f"mlp batch {batch} {'-'.join(map(str, widths))}"
        found.append((name, {}, lambda batch=batch, widths=widths: mlp(batch, widths)))
    found.append(("matmul 2048 + tail", {}, lambda: matmul_tail(2048, 16)))
    for e in (16,) if quick else (16, 22):
        found.append((f"diamond n=2^{e}", {}, lambda e=e: diamond(1 << e)))
    return found


def time_case(
    build, config, rounds: int, writer, name: str, chain: dict
) -> tuple[dict[str, dict], int]:
    """Each placement's median per call and what its plan does, and the calls per block."""
    plans = {}
    for placement in PLACEMENTS:
        t0 = time.perf_counter()
        plans[placement] = sc.compile(
            build(), config=config, host_memory="pinned", placement=placement
        )
        plans[placement].compile_s = time.perf_counter() - t0
    calls, taken = in_turns(plans, rounds)
    reps: dict[str, list[float]] = {p: [] for p in plans}
    for placement, r, seconds in taken:
        reps[placement].append(seconds)
        writer.writerow(
            [
                name,
                placement,
                r,
                f"{seconds:.9g}",
                calls,
                plans[placement].predicted_s,
                chain.get("family", ""),
                chain.get("k", ""),
                chain.get("n", ""),
                plan_id(plans[placement]),
            ]
        )
    found = {
        p: {
            "median_s": statistics.median(reps[p]),
            "predicted_s": plans[p].predicted_s,
            "devices": _devices(plans[p]),
            "steps": _steps(plans[p]),
        }
        for p in plans
    }
    return found, calls


def identical_spreads(name: str, found: dict[str, dict]) -> list[tuple[float, str, list[str]]]:
    """For each set of a case's placements that compiled to one plan, step for step: how far
    apart their medians read (the slowest over the fastest, minus 1), the case, the set."""
    sets: dict[tuple, list[str]] = {}
    for placement, what in found.items():
        sets.setdefault(what["steps"], []).append(placement)
    spreads = []
    for same in sets.values():
        if len(same) > 1:
            times = [found[p]["median_s"] for p in same]
            spreads.append((max(times) / min(times) - 1, name, same))
    return spreads


def _steps(plan) -> tuple:
    """What a plan does, step by step, without its nodes' identities: two placements with the
    same steps are one plan, and any gap between their times is measurement, not placement."""
    return tuple((s.kind, s.device, s.backend_id, s.node.op) for s in plan.steps)


def plan_id(plan) -> str:
    """A short name for what a plan does, step for step (``_steps``): two placements, or two
    runs, with the same one ran one plan.  --replay matches a recompiled plan against it."""
    import hashlib

    return hashlib.sha256(repr(_steps(plan)).encode()).hexdigest()[:12]


def _devices(plan) -> str:
    """What the plan runs where, in a few characters: C per CPU kernel, G per CUDA kernel."""
    kernels = [s for s in plan.steps if s.kind in ("kernel", "copy")]
    moves = sum(1 for s in plan.steps if s.kind in ("h2d", "d2h"))
    text = "".join("G" if s.device == "cuda" else "C" for s in kernels)
    if len(text) > 12:
        text = f"{text.count('C')}C {text.count('G')}G"
    return f"{text} {moves}x"


def cuda_profile(path: str | None, who: str):
    """The CUDA profile with [costs] at ``path`` (resolved as softcuda resolves one), or None
    once one line has said why not."""
    try:
        config = load_config(path)
    except SoftcudaError as exc:
        print(f"{who}: {exc}")
        return None
    if config.device_type != "cuda" or not config.has_costs:
        print(
            f"{who}: {config.path} is not a CUDA profile with [costs]; make one with `softcuda "
            "init` (or add costs with `softcuda init --from CSV`)"
        )
        return None
    return config


def replay(config, csv_path: str, quick: bool) -> int:
    """What --replay prints (module docstring); 0, or 2 for a CSV it cannot read."""
    import pandas as pd

    try:
        raw = pd.read_csv(csv_path)
    except (OSError, ValueError) as exc:
        print(f"placement replay: {csv_path}: {exc}")
        return 2
    need = {"case", "placement", "seconds"}
    if not need <= set(raw.columns):
        missing = ", ".join(sorted(need - set(raw.columns)))
        print(f"placement replay: {csv_path} lacks column(s) {missing}")
        return 2
    measured = raw.groupby(["case", "placement"])["seconds"].median()
    ran = {}  # (case, plan_id) -> a placement that ran that plan, in runs that kept the column
    run_plan = {}  # (case, placement) -> the plan_id it ran
    named = "plan" in raw.columns
    if named:
        for (case, placement), ids in raw.groupby(["case", "placement"])["plan"]:
            ran.setdefault((case, str(ids.iloc[0])), placement)
            run_plan[case, placement] = str(ids.iloc[0])
    print(f"config: {config.path}   measured: {csv_path}   (nothing is run)")
    if not named:
        print(
            "note: this run's CSV names no plans (no `plan` column): each placement's recompiled "
            "plan is taken as the one it ran, right only where the profile's rules and costs "
            "are the run's"
        )
    print(
        f"{'case':<34}{'graph plan':>14}{'measured as':>13}{'graph/best':>11}  predicted/measured"
    )
    ratios, unknown, errors = [], [], []
    for name, _chain, build in cases(quick):
        if (name, "cpu") not in measured.index:
            continue  # a case the run did not have
        plans = {
            p: sc.compile(build(), config=config, host_memory="pinned", placement=p, allocate=False)
            for p in PLACEMENTS
        }
        steps = {p: _steps(plan) for p, plan in plans.items()}
        times = {p: float(measured[name, p]) for p in PLACEMENTS if (name, p) in measured.index}
        best = min(times.values())  # the fastest plan the run measured for the case
        if named:  # plans matched by what they do, as the run recorded it
            found = ran.get((name, plan_id(plans["graph"])))
            priced = [p for p in PLACEMENTS[1:] if run_plan.get((name, p)) == plan_id(plans[p])]
        else:
            found = next((p for p in PLACEMENTS[1:] if steps[p] == steps["graph"]), None)
            priced = [p for p in PLACEMENTS[1:] if p in times]
        for p in priced:
            if plans[p].predicted_s:
                errors.append(abs(plans[p].predicted_s / times[p] - 1))
        same = [found] if found in times else []
        if same:
            ratio = times[same[0]] / best
            ratios.append(ratio)
            cells = f"{same[0]:>13}{ratio:>11.3f}"
        else:
            unknown.append(name)
            cells = f"{'(new plan)':>13}{'?':>11}"
        guesses = "  ".join(
            f"{p} {plans[p].predicted_s / times[p]:.2f}" for p in priced if plans[p].predicted_s
        )
        print(f"{name:<34}{_devices(plans['graph']):>14}{cells}  {guesses}")
        sys.stdout.flush()
    if ratios:
        within = sum(r <= 1.10 for r in ratios)
        print(
            f"graph plan against the fastest, where its time is known ({len(ratios)} cases): "
            f"median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}, within 10% at "
            f"{within}"
        )
    if unknown:
        print(f"a plan no placement of that run made, its time unknown: {len(unknown)} case(s)")
    if errors:
        print(
            f"the model on the measured one-device and per-op plans: median |predicted/measured "
            f"- 1| {100 * statistics.median(errors):.1f}%"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="a CUDA profile with [costs]")
    parser.add_argument(
        "--rounds", type=int, default=16, help="a multiple of 4 keeps the order balanced"
    )
    parser.add_argument("--csv", default="placement.csv", help="raw repetitions")
    parser.add_argument("--quick", action="store_true", help="a few small cases, 4 rounds")
    parser.add_argument(
        "--replay", metavar="CSV", default=None, help="run nothing: price a GPU run's cases"
    )
    args = parser.parse_args()
    if args.replay is not None:
        config = cuda_profile(args.config, "placement replay")
        if config is None:
            return 2
        warnings.simplefilter("ignore")  # a profile of another machine, read as given
        return replay(config, args.replay, args.quick)
    ok, why = cuda_available()
    if not ok:
        print(f"placement benchmark: needs CUDA, but {why}")
        return 2
    config = cuda_profile(args.config, "placement benchmark")
    if config is None:
        return 2
    rounds = 4 if args.quick else args.rounds
    warnings.simplefilter("ignore")  # a profile given by path is checked and used as given
    print(
        f"config: {config.path}   rounds: {rounds}   host memory: pinned; times are medians per "
        f"call, from blocks of calls lasting at least {BLOCK_S * 1e3:g} ms for the fastest "
        "placement"
    )
    head = f"{'case':<34}" + "".join(f"{p:>12}" for p in PLACEMENTS)
    print(head + f"{'graph/best':>11}{'pred/meas':>10}{'calls':>6}  graph plan")
    ratios, errors, per_op_8_20, distinct, same_plans = [], [], None, [], []
    with open(args.csv, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for name, chain, build in cases(args.quick):
            found, calls = time_case(build, config, rounds, writer, name, chain)
            same_plans += identical_spreads(name, found)
            best = min(v["median_s"] for v in found.values())
            graph = found["graph"]
            ratio = graph["median_s"] / best
            ratios.append(ratio)
            fastest = min(found, key=lambda p: found[p]["median_s"])
            same = [p for p in PLACEMENTS[1:] if found[p]["steps"] == graph["steps"]]
            if found[fastest]["steps"] != graph["steps"]:
                distinct.append(ratio)
            predicted = graph["predicted_s"]
            error = predicted / graph["median_s"] if predicted else float("nan")
            if predicted:
                errors.append(abs(error - 1))
            if chain == {"family": "mixed", "k": 8, "n": 1 << 20}:
                per_op_8_20 = found["per-op"]["median_s"] / graph["median_s"]
            print(
                f"{name:<34}"
                + "".join(f"{format_seconds(found[p]['median_s']):>12}" for p in PLACEMENTS)
                + f"{ratio:>11.3f}{error:>10.2f}{calls:>6}  {graph['devices']}"
                + (f"  = {', '.join(same)}" if same else "")
            )
            sys.stdout.flush()
    worst, median = max(ratios), statistics.median(ratios)
    print(f"graph plan against the fastest of the four: median {median:.3f}, worst {worst:.3f}")
    verdict = "met" if worst <= 1.10 and median <= 1.03 else "NOT met"
    if distinct:
        print(
            f"  where the fastest placement's plan differs from the graph plan ({len(distinct)} of "
            f"{len(ratios)} cases): median {statistics.median(distinct):.3f}, worst "
            f"{max(distinct):.3f}; elsewhere the two are one plan, step for step"
        )
    if same_plans:
        spread, case, same = max(same_plans)
        print(
            f"  identical plans ({len(same_plans)} sets of placements that compiled to one plan, "
            f"step for step) read within {statistics.median([x[0] for x in same_plans]):.1%} of "
            f"each other at the median, worst {spread:.1%} ({case}: {', '.join(same)}): a gap "
            "no larger than that is the measurement's, not the placement's"
        )
    print(f"target: within 10% on every case, 3% at the median: {verdict}")
    if per_op_8_20 is not None:
        verdict = "met" if per_op_8_20 >= 10 else "NOT met"
        print(
            f"target: per-op / graph on the 8-op chain at 2^20 >= 10: {per_op_8_20:.1f}, {verdict}"
        )
    if errors:
        med = statistics.median(errors)
        verdict = "met" if med <= 0.25 else "NOT met"
        print(f"target: median |predicted/measured - 1| <= 25%: {med:.1%}, {verdict}")
    print(f"raw repetitions: {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
