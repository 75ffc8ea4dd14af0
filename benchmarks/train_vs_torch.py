"""One training step of a relu MLP, softcuda against PyTorch eager, each library in its own
process: softcuda's plan under every placement with its predicted time beside the measured one,
PyTorch on the CPU and on CUDA.

    python benchmarks/train_vs_torch.py [--nets 1024-1024-10:1024,...] [--steps 100]
        [--config CONFIG.soft] [--device cpu|cuda|both] [--raw FILE.json] [--quick] [--profile]

A net is ``WIDTHS:BATCH``: ``784-2048-2048-10:512`` is 784 inputs, two hidden relu layers of
2048 and 10 classes, at batch 512.  The step: the forward pass, the cross-entropy of its logits
against class indices (one batch, the same every step), its gradients and one Adam update (lr
1e-3, betas 0.9 and 0.999, eps 1e-8) of every weight and bias; each step returns its loss to the
host, as a loop that logs it does.  The batch starts in pinned host memory (pageable where there
is no GPU) and is copied each step (softcuda: a leaf of the plan; PyTorch CUDA:
``x.to("cuda", non_blocking=True)``); the class indices are on the step's device once.
Parameters start from the same numpy draws in both processes.

softcuda: ``sc.compile({"loss": loss}, placement=P, updates=Adam.minimize(loss),
host_memory="pinned")`` under each of ``graph`` (the profile's whole-graph placement),
``tuned`` (the same with ``tune=True``: the plan measured against its rivals at compile, its
first step), ``per-op``, ``cpu`` and, where the profile is a CUDA one and CUDA is usable,
``cuda``; a step is ``plan.evaluate(copy=False)``.  ``predicted`` is the plan's total as the
profile's costs price it (``Plan.predicted_s``).  PyTorch: ``torch.nn.functional.cross_entropy``,
``loss.backward()``, ``torch.optim.Adam`` at its fastest per device (``fused=True`` on CUDA, its
default ``foreach`` on the CPU), ``zero_grad(set_to_none=True)``, ``loss.item()``; torch's own
thread count.

Per (net, contestant): the first step apart (softcuda: compile included), three warm-up steps,
then ``--steps`` steps timed one by one on the host clock (each ends on the loss on the host);
the table shows medians.  The first three losses of every contestant are compared with the
first's (float32 training from the same start agrees to about 1e-4; a wrong gradient does
not): a disagreement beyond 1e-3 is printed and makes the exit status 1.  Without PyTorch it
says so in one line and exits 2.  Output: the graph plan against the fastest of softcuda's
placements, the model's predicted/measured per placement, and softcuda's graph plan against
PyTorch's best device (under 1: softcuda faster).  ``--profile`` also times the graph and
cuda plans' steps one at a time (``Plan.profile``) and prints their sum beside the end-to-end
time: the gap is what a plan spends between its steps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import warnings
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rivals.py beside this file
import rivals  # noqa: E402

NETS = "64-32-10:64,1024-1024-10:1024,784-2048-2048-10:512,2048-1024-10:2048"
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8
CHECK_STEPS, CHECK_RTOL = 3, 1e-3


def parse_net(text: str) -> tuple[tuple[int, ...], int]:
    """``784-2048-10:512`` -> ((784, 2048, 10), 512); ValueError naming the text otherwise."""
    try:
        widths_text, batch_text = text.split(":")
        widths = tuple(int(w) for w in widths_text.split("-"))
        batch = int(batch_text)
    except ValueError:
        raise ValueError(f"net {text!r} is not WIDTHS:BATCH, such as 784-2048-10:512") from None
    if len(widths) < 2 or min(widths) < 1 or batch < 1:
        raise ValueError(f"net {text!r} needs at least two widths and all of them >= 1")
    return widths, batch


def start(widths: tuple[int, ...], batch: int):
    """The batch, its class indices and the initial weights and biases (float32), from one
    seed: the same in every process."""
    import numpy as np

    rng = np.random.default_rng(sum(widths) * 7919 + batch)
    x = rng.standard_normal((batch, widths[0]), dtype=np.float32)
    labels = rng.integers(0, widths[-1], batch)
    params = []
    for fan_in, fan_out in zip(widths, widths[1:]):
        w = rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)
        params += [w.astype(np.float32), (0.1 * rng.standard_normal(fan_out)).astype(np.float32)]
    return x, labels, params


def training_step(widths: tuple[int, ...], batch: int):
    """softcuda's step, from ``start``: (the cross-entropy loss, Adam's updates of every weight
    and bias)."""
    import softcuda as sc

    x, labels, values = start(widths, batch)
    params = [sc.tensor(v) for v in values]
    h = sc.tensor(x)
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = sc.relu(h)
    loss = sc.cross_entropy(h, labels)
    return loss, sc.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS).minimize(loss)


def _time(step, steps: int) -> tuple[float, list[float], list[float]]:
    """(first step's seconds, the first CHECK_STEPS losses, the timed steps' seconds)."""
    t0 = time.perf_counter()
    losses = [step()]
    first = time.perf_counter() - t0
    losses += [step() for _ in range(CHECK_STEPS - 1)]
    for _ in range(3):
        step()
    reps = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        reps.append(round(time.perf_counter() - t0, 9))
    return first, losses, reps


def _softcuda(widths, batch, config_path, steps, devices, profile=False) -> None:
    import softcuda as sc
    from softcuda.config import load_config
    from softcuda.device import cuda_available

    config = load_config(config_path) if config_path else sc.config.default_config()
    placements = ["graph", "tuned", "per-op"] if config.has_costs else ["per-op"]
    if "cpu" in devices:
        placements.append("cpu")
    gpu = config.device_type == "cuda" and cuda_available()[0]
    if "cuda" in devices and gpu:
        placements.append("cuda")
    memory = "pinned" if gpu else "pageable"  # page-locked memory needs CUDA
    for placement in placements:
        loss, updates = training_step(widths, batch)
        t0 = time.perf_counter()
        tuned = placement == "tuned"  # the graph plan, measured against its rivals at compile
        plan = sc.compile(
            {"loss": loss},
            config,
            placement="graph" if tuned else placement,
            updates=updates,
            host_memory=memory,
            tune=tuned,
        )
        compile_s = time.perf_counter() - t0
        first, losses, reps = _time(partial(_loss, plan), steps)
        found = _steps(plan) if profile and placement in ("graph", "cuda") else None
        _emit("softcuda", placement, widths, batch, first + compile_s, losses, reps,
              predicted=plan.predicted_s, steps=found, plan=_plan_id(plan))  # fmt: skip
        del plan


def _plan_id(plan) -> str:
    """What the plan does, step for step (each step's kind, device, backend and op), hashed:
    two placements with one id ran one plan, and a gap between their times is the
    measurement's, not the placement's."""
    import hashlib

    steps = tuple((s.kind, s.device, s.backend_id, s.node.op) for s in plan.steps)
    return hashlib.sha256(repr(steps).encode()).hexdigest()[:12]


def _steps(plan) -> list[dict]:
    """Each step of the plan timed on its own (``Plan.profile``), beside its predicted time:
    where a plan's end-to-end time departs from its steps' sum, the difference is what runs
    between them (waits on the GPU, hand-offs), not the steps."""
    rows = plan.profile(repeat=5)
    return [
        {"label": r["label"], "op": r["op"], "device": r["device"], "backend": r["backend"],
         "median_s": r["median_s"], "predicted_s": plan.steps[r["index"]].predicted_s}
        for r in rows if r["median_s"] or plan.steps[r["index"]].predicted_s
    ]  # fmt: skip


def _loss(plan) -> float:
    return float(plan.evaluate(copy=False)["loss"])


def _torch(widths, batch, steps, devices) -> None:
    import torch

    for device in [d for d in ("cpu", "cuda") if d in devices]:
        if device == "cuda" and not torch.cuda.is_available():
            continue
        x, labels, values = start(widths, batch)
        params = [torch.tensor(v, device=device, requires_grad=True) for v in values]
        host = torch.from_numpy(x)
        if device == "cuda":
            host = host.pin_memory()
        target = torch.from_numpy(labels).to(device)
        fused = {"fused": True} if device == "cuda" else {}
        opt = torch.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS, **fused)

        def step() -> float:
            h = host.to(device, non_blocking=True)
            for i in range(0, len(params), 2):
                h = h @ params[i] + params[i + 1]
                if i + 2 < len(params):
                    h = torch.relu(h)
            loss = torch.nn.functional.cross_entropy(h, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.item()

        first, losses, reps = _time(step, steps)
        _emit("torch", device, widths, batch, first, losses, reps)


def _emit(library, placement, widths, batch, first, losses, reps, predicted=None,
          steps=None, plan=None) -> None:  # fmt: skip
    row = {"library": library, "placement": placement, "net": _label(widths, batch),
           "first_s": first, "losses": losses, "reps_s": reps,
           "predicted_s": predicted, "plan": plan}  # fmt: skip
    if steps is not None:
        row["steps"] = steps
    print(json.dumps(row), flush=True)


def _label(widths, batch) -> str:
    return f"{'-'.join(map(str, widths))}:{batch}"


def _child(library: str, args) -> list[dict]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", library, "--nets", args.nets,
           "--steps", str(args.steps), "--device", args.device]  # fmt: skip
    if args.profile:
        cmd.append("--profile")
    if args.config:
        cmd += ["--config", args.config]
    return rivals.run_child(cmd, library)


def _same(plans: dict, name: str, best: str) -> str:
    """Where ``name``'s plan is ``best``'s step for step, say so: the ratio is then the
    benchmark's spread between two readings of one plan."""
    if name == best or plans.get(name) is None or plans.get(name) != plans.get(best):
        return ""
    return f" (one plan with {best}, step for step: the ratio is the measurement's spread)"


def report(rows: list[dict]) -> int:
    """Print the table and the summaries; 1 where the losses disagree, else 0."""
    status = 0
    for net in dict.fromkeys(r["net"] for r in rows):
        mine = [r for r in rows if r["net"] == net]
        print(f"\n{net.replace(':', ', batch ')}, float32: ms per step (median), first step apart")
        print(f"{'contestant':<18}{'median':>9}{'predicted':>10}{'pred/meas':>10}{'first':>10}")
        for r in mine:
            r["median"] = statistics.median(r["reps_s"])
            pred = r["predicted_s"]
            cells = f"{pred * 1e3:10.3f}{pred / r['median']:10.2f}" if pred else f"{'':20}"
            label = f"{r['library']} {r['placement']}"
            print(f"{label:<18}{r['median'] * 1e3:9.3f}{cells}{r['first_s'] * 1e3:10.1f}")
        for r in mine:
            if "steps" in r:
                own = sum(x["median_s"] for x in r["steps"])
                pred = sum(
                    x["predicted_s"] for x in r["steps"] if x["predicted_s"] == x["predicted_s"]
                )
                end = r["median"] * 1e3
                print(f"  {r['placement']}: its steps timed alone add to {own * 1e3:.3f} ms "
                      f"(predicted {pred * 1e3:.3f}); end to end {end:.3f} ms")  # fmt: skip
        want = mine[0]["losses"]
        for r in mine[1:]:
            off = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(r["losses"], want))
            if not off <= CHECK_RTOL:
                status = 1
                print(f"DISAGREE: {r['library']} {r['placement']}'s first losses {r['losses']} "
                      f"against {want} (relative {off:.2e})")  # fmt: skip
        sc = {r["placement"]: r["median"] for r in mine if r["library"] == "softcuda"}
        torch = {r["placement"]: r["median"] for r in mine if r["library"] == "torch"}
        if "graph" in sc:
            placed = {k: v for k, v in sc.items() if k != "tuned"}
            best = min(placed, key=placed.get)
            plans = {r["placement"]: r.get("plan") for r in mine if r["library"] == "softcuda"}
            for name, label in (("graph", "graph plan"), ("tuned", "tuned graph plan")):
                if name not in sc:
                    continue
                print(f"{label} / fastest softcuda placement ({best}): "
                      f"{sc[name] / sc[best]:.2f}{_same(plans, name, best)}")  # fmt: skip
        if sc and torch:
            mine_best = sc.get("graph", min(sc.values()))
            dev = min(torch, key=torch.get)
            print(f"softcuda graph / torch {dev} (torch's faster): {mine_best / torch[dev]:.2f}")
            if "cuda" in torch:
                print(f"softcuda graph / torch cuda: {mine_best / torch['cuda']:.2f}")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=NETS)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--device", choices=("cpu", "cuda", "both"), default="both")
    parser.add_argument("--config", default=None)
    parser.add_argument("--raw", default=None, help="write every step's time here (JSON)")
    parser.add_argument("--quick", action="store_true", help="a few steps (CI)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time the graph and cuda plans' steps one by one (kept in --raw)",
    )
    parser.add_argument("--worker", choices=("softcuda", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        nets = [parse_net(n) for n in args.nets.split(",") if n]
    except ValueError as exc:
        print(f"train_vs_torch.py: {exc}", file=sys.stderr)
        return 2
    if args.quick:
        args.steps = 5
    devices = ("cpu", "cuda") if args.device == "both" else (args.device,)
    if args.worker:
        warnings.filterwarnings("ignore")
        for widths, batch in nets:
            if args.worker == "softcuda":
                _softcuda(widths, batch, args.config, args.steps, devices, args.profile)
            else:
                _torch(widths, batch, args.steps, devices)
        return 0
    if importlib.util.find_spec("torch") is None:
        print("train_vs_torch.py: PyTorch is not installed, so there is nothing to compare")
        return 2
    print(f"config: {args.config or 'packaged default'}   steps: {args.steps}   cores: "
          f"{os.cpu_count()}   devices: {', '.join(devices)}")  # fmt: skip
    rows: list[dict] = []
    stopped = 0
    try:
        for library in ("softcuda", "torch"):
            rows += _child(library, args)
    except rivals.Interrupted as stop:
        rows, stopped = rows + stop.rows, stop.status
        kept = f"; the {len(rows)} rows measured so far are printed and kept" if rows else ""
        print(stop.said + kept, file=sys.stderr)
    status = report(rows)
    status = stopped or status
    if args.raw:
        with open(args.raw, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, separators=(",", ":"))
    return status


if __name__ == "__main__":
    sys.exit(main())
