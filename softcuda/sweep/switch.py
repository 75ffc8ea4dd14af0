"""What handing a value from the GPU to a CPU step costs a plan beyond its copy, for the
placement model.

A plan that computes a value on the GPU, copies it home and runs a CPU step on it takes longer
than the copy and its two halves timed apart.  A likely reason, which the measurement does not
isolate: the CPU step reads data that the copy, not the CPU, wrote last (outside the core's
caches), where the tail timed alone reads data it left there itself.
The placement model prices that once per value handed over (``[bus] switch_us``, read by
``costs.CostModel.switch_s``), and its size depends on the value's bytes in no simple way
(``results/nvidia-h200/switch-cost.txt``).  ``hand_off`` measures it through the executor
itself, at each of ``SIZES`` float32 elements, with four plans in pinned host memory timed in
turns (``timers.in_turns``: blocks of back-to-back runs, the plans' order balanced per round):

    gpu     a relu and a neg on CUDA, the result copied home
    mixed   the relu on CUDA, its result copied home, then the neg on the CPU (cpu_fallback)
    head    the relu on CUDA, its result copied home (mixed without its CPU step)
    tail    the neg on the CPU alone, on host data the CPU itself last touched

and takes, per round, ``mixed - head - tail``: the hand-off's own time.  Its median over the
rounds (never below 0: noise can take a round there) is the figure at that size; every round's
is kept.  ``gpu`` is timed beside them, as ``extra/switch_cost.py`` does, so that one more GPU
step's time (``gpu - head``) can be set against the hand-off.

The sweep measures it once, at its end, after the launch calibration (``softcuda.sweep.launch``)
and keeps the figures in the metadata (``switch``); ``softcuda init --from`` writes them into
``[bus]`` (``switch_line``).  ``python -m softcuda.sweep.switch PROFILE`` measures them on this
machine and writes them into PROFILE's ``[bus]`` (a profile made before the sweep measured it).
"""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

from ..config import switch_points
from .calibrate import into_profile
from .timers import in_turns

SIZES = tuple(1 << p for p in range(10, 23, 2))
"""Float32 elements of the value handed over: 2^10 (4 KiB) to 2^22 (16 MiB), two octaves apart."""
ROUNDS = 16
"""Rounds of turns per size: four whole cycles of the balanced order of four plans."""
ITEMSIZE = 4  # float32


def chain(n: int, k: int, tail: bool):
    """k relus of n random elements, then a neg where ``tail``."""
    import softcuda as sc

    y = sc.randn((n,), seed=1)
    for _ in range(k):
        y = sc.relu(y)
    return sc.neg(y) if tail else y


def plans(n: int, k: int = 1) -> dict[str, Any]:
    """The four plans of the module docstring at n elements with k relus, compiled per-op from
    profiles that name each step's backend, in pinned host memory."""
    import softcuda as sc
    from softcuda.config import rules_config

    on_gpu = rules_config({"relu": "cuda_elementwise", "neg": "cuda_elementwise"})
    mixed = rules_config({"relu": "cuda_elementwise", "neg": "cpu_fallback"})
    alone = rules_config({"neg": "cpu_fallback"})

    def make(graph, config) -> Any:
        return sc.compile(graph, config=config, host_memory="pinned", placement="per-op")

    return {
        "gpu": make(chain(n, k, True), on_gpu),
        "mixed": make(chain(n, k, True), mixed),
        "head": make(chain(n, k, False), on_gpu),
        "tail": make(sc.neg(sc.randn((n,), seed=1)), alone),
    }


def per_round(taken: list[tuple[str, int, float]]) -> list[float]:
    """``mixed - head - tail`` of each round of ``in_turns``' (name, round, seconds per call),
    in round order."""
    rounds: dict[int, dict[str, float]] = {}
    for name, r, seconds in taken:
        rounds.setdefault(r, {})[name] = seconds
    return [t["mixed"] - t["head"] - t["tail"] for _, t in sorted(rounds.items())]


def hand_off(sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS, k: int = 1) -> dict[str, Any]:
    """Seconds a hand-off adds at each size (median over ``rounds``, at least 0), with every
    round's figure, each plan's median seconds per call, and the calls per block; the GPU side
    a chain of ``k`` relus (the profile's figure: k = 1)."""
    seconds, repetitions, calls = [], [], []
    medians: dict[str, list[float]] = {}
    for n in sizes:
        block, taken = in_turns(plans(n, k), rounds)
        figures = per_round(taken)
        seconds.append(max(float(statistics.median(figures)), 0.0))
        repetitions.append([float(f"{s:.4g}") for s in figures])
        calls.append(block)
        for name in ("gpu", "mixed", "head", "tail"):
            median = statistics.median(s for p, _, s in taken if p == name)
            medians.setdefault(name, []).append(float(f"{median:.4g}"))
    return {
        "elements": list(sizes),
        "bytes": [n * ITEMSIZE for n in sizes],
        "seconds": seconds,
        "repetitions_s": repetitions,
        "medians_s": medians,
        "calls": calls,
        "rounds": rounds,
        "dtype": "float32",
        "host_memory": "pinned",
    }


def switch_line(found: Any) -> str | None:
    """The ``[bus] switch_us`` value of ``hand_off``'s figures (or of the sweep metadata's copy
    of them): ``BYTES:MICROSECONDS`` per size, to 0.01 µs; None where they are not a
    measurement the line can hold (missing, not numbers, negative, sizes not increasing)."""
    if not isinstance(found, dict):
        return None
    nbytes, seconds = found.get("bytes"), found.get("seconds")
    if not (isinstance(nbytes, list) and isinstance(seconds, list) and len(nbytes) == len(seconds)):
        return None
    points = []
    for size, s in zip(nbytes, seconds):
        if isinstance(size, bool) or not isinstance(size, int):
            return None
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            return None
        points.append(f"{size}:{s * 1e6:.2f}")
    text = " ".join(points)
    try:
        switch_points(text)  # the parser's own rules: a point at least, bytes > 0 increasing
    except ValueError:
        return None
    return text


def _report(found: dict[str, Any]) -> str:
    lines = [f"hand-off beyond the copy, µs: median (and range) of {found['rounds']} rounds"]
    for n, nbytes, s, reps in zip(
        found["elements"], found["bytes"], found["seconds"], found["repetitions_s"]
    ):
        low, high = min(reps) * 1e6, max(reps) * 1e6
        lines.append(f"{n:>9} elements {nbytes:>10} B {s * 1e6:8.2f} ({low:.2f} to {high:.2f})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return into_profile(argv, "switch", "switch_us", hand_off, switch_line, _report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
