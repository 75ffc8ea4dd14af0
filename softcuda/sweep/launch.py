"""The host's time to issue one GPU step of a plan, for the placement model.

A plan runs its steps in order from one Python thread; a CUDA step is queued on the plan's
stream and returns before the GPU runs it.  The GPU then keeps up only while each kernel takes
longer than the host needs to issue the next: a chain of kernels of a few microseconds runs at
the host's pace, not the GPU's, and a model that prices each step at its kernel alone (the
sweep's resident time, events around the kernel) underprices it.  ``issue_time`` measures that
pace through the executor itself: two plans of ``relu`` on ``ELEMENTS`` elements in pinned host
memory, one with 1 step on the GPU and one with 1 + ``CHAIN``, timed in alternation, each
sample a block of back-to-back runs; the difference per extra step is the time a GPU step
costs when the GPU waits for the host.  The planner prices a CUDA step at the larger of its
kernel's resident time and this (``[bus] launch_us``).

The sweep measures it once, at its end, and keeps every round's figure in the metadata
(``launch``); ``softcuda init --from`` reads it from there.  ``python -m softcuda.sweep.launch
PROFILE`` measures it on this machine and writes it into PROFILE's ``[bus]`` (a profile made
before the sweep measured it).
"""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

import numpy as np

from .calibrate import into_profile
from .timers import per_call

CHAIN = 16
"""Extra GPU steps in the longer plan."""
ELEMENTS = 256
"""Each step's size: a kernel far shorter than the host's time to issue it."""
ROUNDS = 15
CALLS = 50
"""Back-to-back runs per sample (each plan's run takes tens of microseconds)."""


def _plan(steps: int):
    import softcuda as sc
    from softcuda.config import rules_config

    x = sc.tensor(np.linspace(-1.0, 1.0, ELEMENTS, dtype=np.float32))
    y = x
    for _ in range(steps):
        y = sc.relu(y)
    config = rules_config({"relu": "cuda_elementwise"})
    return sc.compile(y, config=config, host_memory="pinned", placement="per-op")


def issue_time(rounds: int = ROUNDS) -> dict[str, Any]:
    """Seconds per extra GPU step (median over ``rounds``), with every round's figure."""
    short, long = _plan(1), _plan(1 + CHAIN)
    for plan in (short, long):  # kernels compiled, pools touched
        per_call(plan, CALLS)
    per_step = []
    for r in range(rounds):
        # alternate which plan goes first, so neither always runs after the other
        first, second = (short, long) if r % 2 == 0 else (long, short)
        a, b = per_call(first, CALLS), per_call(second, CALLS)
        t_short, t_long = (a, b) if first is short else (b, a)
        per_step.append((t_long - t_short) / CHAIN)
    return {
        "seconds": max(float(statistics.median(per_step)), 0.0),  # noise can dip below 0
        "repetitions_s": [float(f"{s:.4g}") for s in per_step],
        "chain": CHAIN,
        "elements": ELEMENTS,
        "calls": CALLS,
    }


def launch_line(found: Any) -> str | None:
    """The ``[bus] launch_us`` value of ``issue_time``'s figure (or of the sweep metadata's
    copy of it), to 0.01 µs; None where it is not a measured time (missing, not a number,
    negative or infinite)."""
    seconds = found.get("seconds") if isinstance(found, dict) else None
    numeric = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not (numeric and math.isfinite(seconds) and seconds >= 0):
        return None
    return f"{seconds * 1e6:.2f}"


def _report(found: dict[str, Any]) -> str:
    reps = [r * 1e6 for r in found["repetitions_s"]]
    return f"median of {len(reps)} rounds, {min(reps):.2f} to {max(reps):.2f} µs"


def main(argv: list[str]) -> int:
    return into_profile(argv, "launch", "launch_us", issue_time, launch_line, _report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
