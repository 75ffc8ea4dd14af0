"""Where does a mixed plan's time go between its steps?

An investigation for the placement model.  Under a machine's quick profile the graph plans that
hand a value from the GPU to CPU steps mid-plan ran 1.2-1.6x their all-CUDA plans on the lent
H100 (`results/nvidia-h100/placement-quick.txt`: the MLPs at batch 256 and 1024; and
`train-vs-torch.txt`: the training steps), while the model predicted them at or below the
all-CUDA plan.  The steps timed one at a time (``Plan.profile``) do not show it: what is missing
happens between them.  This runs each plan as ``evaluate`` does, with every callable of the run
wrapped by the host clock, and prints per step the host's median time inside it (a GPU step:
its launch; a copy home: the wait for the GPU's queue to drain, then the copy; a CPU step: its
kernel, on caches and threads as the plan leaves them), beside the step's predicted time, and
the sum against the plan's own end-to-end median.

    python extra/step_trace.py --config QUICK.soft [--runs 200]

Cases: the placement benchmark's MLPs at batch 256 and 1024 and one Adam step of the
1024-1024-10 net of ``benchmarks/train_vs_torch.py``, each under the graph and cuda placements.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import softcuda as sc  # noqa: E402
from softcuda.backends import cuda_available  # noqa: E402
from softcuda.config import load_config  # noqa: E402


def _mlp(batch, widths):
    from placement import mlp

    return mlp(batch, widths), None


def _train(widths, batch):
    from train_vs_torch import training_step

    loss, updates = training_step(widths, batch)
    return {"loss": loss}, updates


CASES = {
    "mlp batch 256 784-512-10": lambda: _mlp(256, (784, 512, 10)),
    "mlp batch 1024 1024-1024-64": lambda: _mlp(1024, (1024, 1024, 64)),
    "train 1024-1024-10 batch 1024": lambda: _train((1024, 1024, 10), 1024),
}


def trace(plan, runs: int) -> tuple[list[tuple[str, float, float]], float, float]:
    """([(label, host median s, predicted s)] per callable of a run, their sum, end to end)."""
    labels = {id(s.run): s for s in plan.steps if s.run is not None}
    calls = list(plan._runs)
    spent = [[] for _ in calls]

    def timed(i, fn):
        def run():
            t0 = time.perf_counter()
            fn()
            spent[i].append(time.perf_counter() - t0)

        return run

    ends = []
    for _ in range(20):
        plan.evaluate(copy=False)
    for _ in range(runs):  # untouched runs, then the traced ones
        t0 = time.perf_counter()
        plan.evaluate(copy=False)
        ends.append(time.perf_counter() - t0)
    plan._runs[:] = [timed(i, fn) for i, fn in enumerate(calls)]
    try:
        for _ in range(runs):
            plan.evaluate(copy=False)
    finally:
        plan._runs[:] = calls
    rows = []
    for fn, times in zip(calls, spent):
        step = labels.get(id(fn))
        name = f"{step.kind} {step.label} {step.op} {step.device}" if step else repr(fn)[:40]
        predicted = step.predicted_s if step is not None else float("nan")
        rows.append((name, statistics.median(times), predicted))
    return rows, sum(r[1] for r in rows), statistics.median(ends)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a CUDA profile with [costs]")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--top", type=int, default=12, help="steps shown per plan")
    args = parser.parse_args()
    ok, reason = cuda_available()
    if not ok:
        print(f"step_trace.py: needs a GPU ({reason})")
        return 2
    config = load_config(args.config)
    for name, build in CASES.items():
        for placement in ("graph", "cuda"):
            outputs, updates = build()
            plan = sc.compile(outputs, config, placement=placement, updates=updates,
                              host_memory="pinned")  # fmt: skip
            rows, own, end = trace(plan, args.runs)
            print(f"\n{name}, {placement}: end to end {end * 1e6:.1f} us, traced callables add "
                  f"to {own * 1e6:.1f} us, predicted {plan.predicted_s * 1e6:.1f} us")  # fmt: skip
            for label, median, predicted in sorted(rows, key=lambda r: -r[1])[: args.top]:
                print(f"  {median * 1e6:9.1f} us  (predicted {predicted * 1e6:8.1f})  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
