"""Training-step time: a whole step compiled as one plan against hand-written numpy and CuPy loops
of the same arithmetic (a benchmark, not a test; prints figures).

Two cases, float32, random data of fixed shapes (no data set needed):

* ``digits``  the 64-32-10 network of examples/digits.py, batch 64;
* ``large``   1024-1024-10, batch 1024.

The step is examples/digits.py's: a relu hidden layer, softmax cross-entropy through
log-sum-exp (the batch's mean; one-hot labels), an L2 penalty of 1e-3 on the weights, and Adam
(lr 5e-3, betas 0.9 and 0.999, eps 1e-8, bias-corrected); each step returns the cross-entropy to
the host, as a loop that logs it does.  Three contestants:

* ``softcuda``  the step (forward, ``opt.minimize``, Adam's updates) compiled once with
  ``sc.compile(..., updates=)``; a step is one ``plan.evaluate()``.  Timed under the profile's
  default placement (``graph`` where it has [costs], else ``per-op``), ``cpu``, and ``cuda``
  where the profile is a CUDA one and CUDA is usable here;
* ``numpy``     a hand-written loop on preallocated arrays (``out=``, updates in place), the
  gradients written by hand, numpy's BLAS on all its threads: the competitor at its best;
* ``cupy``      the same loop, the same code, on preallocated device arrays; skipped, with a
  note, where CuPy or a GPU is absent.

The batch is the same data every step (nothing is assigned between steps): what is timed is
the step, not the feeding of data.  A plan that copies a leaf to the GPU on every run still
pays for the batch's copy, which the CuPy loop, holding it on the device, does not.

Correctness first: every contestant takes 3 steps from the same parameters and batch, and its
losses and parameters are compared with a float64 numpy reference; a disagreement beyond
float32 rounding ends the run (exit 1) before anything is timed.  These steps are the warm-up
too: plans compiled, kernels built, cuBLAS handles and memory pools made.

Timing: each contestant runs in blocks of consecutive steps, the contestants taking turns
block by block, so that a slow spell of the host falls on all of them alike, in a
carryover-balanced order (``softcuda.sweep.timers.balanced_orders``): over a cycle of rounds
each contestant runs right after each other one equally often, so none always pays for the
same neighbour's leftovers (with 5 contestants a cycle is 10 rounds, 50 steps each).  Before
each block the parameters and Adam's state go back to their initial values (untimed) and one
step runs untimed (the caches held the previous contestant's data): every block times the same
early stretch of training, and no contestant drifts, on a batch it has learnt by heart, into
the tiny numbers of a saturated softmax.  Each step is timed alone on
the host clock, after the GPU is synchronised (a plan synchronises its stream; the CuPy loop
reads its loss back).  Printed per case: the median milliseconds per step, the spread (the
interquartile range over the median), and each softcuda placement's time over the
hand-written loop on its device (``cpu`` against numpy, ``cuda`` against CuPy, the default
placement against the faster of the two), the step's time as the profile predicts it for
that plan (``predicted``: the placement model's total, docs/design.md), and the sum of its
steps timed each on its own (``alone``: ``Plan.profile``, CUDA steps by events), which tells a
model that misprices nodes from one that misses how they run together; then the two targets,
where they apply:

* at 1024-1024-10 on the GPU machine, softcuda (its default placement) at least as fast as the
  better hand-written loop;
* at the digits size on the CPU, softcuda (``cpu`` placement) within 1.5x of the numpy loop.

    python benchmarks/training.py [--cases digits,large] [--reps 200] [--config CONFIG.soft]
                                  [--csv training.csv] [--nodes nodes.csv]
    python benchmarks/training.py --quick      # a few repetitions (a smoke run, CI)
    python benchmarks/training.py --predict    # each placement's plan priced, nothing run
                                               # (no GPU needed: a laptop reads the H200's)

``--config`` defaults to the profile the library resolves (``softcuda.config.load_config``:
$SOFTCUDA_CONFIG, ./CONFIG.soft where it is this machine's, ..., the packaged DEFAULT.soft).
The raw repetitions go to ``--csv``; each softcuda plan's steps, timed alone beside what the
profile predicts for them, to ``--nodes``.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import softcuda as sc
from softcuda.backends import cuda_available
from softcuda.config import Config, StaleConfigWarning, load_config
from softcuda.device import blas_info, cpu_model, usable_cores
from softcuda.errors import SoftcudaError
from softcuda.planner import resolve_placement
from softcuda.sweep.timers import balanced_orders

LR, WEIGHT_DECAY = 5e-3, 1e-3  # examples/digits.py's
BETAS, EPS = (0.9, 0.999), 1e-8  # Adam's defaults
CHECK_STEPS = 3
BLOCK = 5  # timed steps per block, between resets: short, so the turns come often
PROFILE_REPS = 20  # runs of each plan whose steps are timed alone (Plan.profile)
# float32 against float64 after a few steps: the losses agree to a relative 1e-3, and each
# parameter's change from its start to a relative 1e-2 in norm.  In norm, and that loosely,
# because a few elements may rightly differ by up to the learning rate: Adam's first steps are
# nearly lr * sign(gradient), and a pre-activation within float32 rounding of zero can land on
# the other side of the relu, changing a whole column of the first layer's gradient (seen:
# 1.7e-3 at 1024-1024-10 on the CPU, where the numpy loop and softcuda sum in other orders).
# The loss follows those elements: the CuPy loop's third loss at 1024-1024-10 on the H200 was
# 2.5e-4 from float64's.  A wrong gradient or update is off by far more (a step 5% too long
# moves every parameter's change by 5%).
LOSS_RTOL, CHANGE_RTOL = 1e-3, 1e-2


class Case(NamedTuple):
    name: str
    batch: int
    widths: tuple[int, int, int]  # inputs, hidden, classes

    @property
    def label(self) -> str:
        return f"{'-'.join(map(str, self.widths))}, batch {self.batch}"


CASES = {
    "digits": Case("digits", 64, (64, 32, 10)),
    "large": Case("large", 1024, (1024, 1024, 10)),
}


class Start(NamedTuple):
    """One case's batch and initial parameters (float32), shared by every contestant."""

    x: np.ndarray
    target: np.ndarray  # one-hot rows
    params: list[np.ndarray]  # w1, b1, w2, b2


def start(case: Case, seed: int = 0) -> Start:
    rng = np.random.default_rng(seed)
    n_in, hidden, classes = case.widths
    x = rng.standard_normal((case.batch, n_in), dtype=np.float32)
    target = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, case.batch)]

    def weights(fan_in: int, fan_out: int) -> np.ndarray:
        return (rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)).astype(np.float32)

    def biases(n: int) -> np.ndarray:  # small, not zero: nothing is timed on zeros
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    params = [weights(n_in, hidden), biases(hidden), weights(hidden, classes), biases(classes)]
    return Start(x, target, params)


def reference(s: Start, steps: int) -> tuple[list[float], list[np.ndarray]]:
    """Each step's loss and the parameters after ``steps`` steps, in float64, written plainly."""
    x, t = s.x.astype(np.float64), s.target.astype(np.float64)
    params = [p.astype(np.float64) for p in s.params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    (b1, b2), batch, losses = BETAS, len(x), []
    for k in range(1, steps + 1):
        w1, c1, w2, c2 = params
        pre = x @ w1 + c1
        h = np.maximum(pre, 0.0)
        z = h @ w2 + c2
        top = z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(z - top).sum(axis=1, keepdims=True)) + top
        losses.append(float(-np.mean(np.sum(t * (z - lse), axis=1))))
        dz = (np.exp(z - lse) - t) / batch  # rows of t sum to 1
        dh = (dz @ w2.T) * (pre > 0)
        grads = [
            x.T @ dh + 2 * WEIGHT_DECAY * w1,
            dh.sum(axis=0),
            h.T @ dz + 2 * WEIGHT_DECAY * w2,
            dz.sum(axis=0),
        ]
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1**k), v[i] / (1 - b2**k)
            params[i] = params[i] - LR * m_hat / (np.sqrt(v_hat) + EPS)
    return losses, params


class HandLoop:
    """The step written by hand on preallocated arrays of ``xp`` (numpy or CuPy): every op
    writes into a buffer made once, the updates are in place, and nothing is allocated per step
    but the loss's Python float."""

    def __init__(self, xp: Any, s: Start) -> None:
        self.xp = xp
        batch, (hidden, classes) = s.x.shape[0], s.params[2].shape
        f32 = np.float32

        def empty(*shape: int) -> Any:
            return xp.empty(shape, f32)

        self.x, self.t = xp.asarray(s.x), xp.asarray(s.target)
        self.params = [xp.asarray(p).copy() for p in s.params]
        self.grads = [xp.empty_like(p) for p in self.params]
        self.m = [xp.zeros_like(p) for p in self.params]
        self.v = [xp.zeros_like(p) for p in self.params]
        self.tmp = [xp.empty_like(p) for p in self.params]  # Adam's scratch, one per parameter
        self.h, self.dh = empty(batch, hidden), empty(batch, hidden)
        self.mask = xp.empty((batch, hidden), bool)
        self.z, self.e, self.dz = (
            empty(batch, classes),
            empty(batch, classes),
            empty(batch, classes),
        )
        self.top, self.sum_e = empty(batch, 1), empty(batch, 1)
        self.total = xp.empty((), f32)
        self.batch = batch
        self.powers = [1.0, 1.0]  # beta1^t, beta2^t
        self.start = s

    def reset(self) -> None:
        """The initial parameters and a fresh Adam state, as before the first step."""
        for p, value, m, v in zip(self.params, self.start.params, self.m, self.v):
            p[...] = self.xp.asarray(value)
            m.fill(0)
            v.fill(0)
        self.powers = [1.0, 1.0]

    def step(self) -> float:
        xp, (w1, b1, w2, b2) = self.xp, self.params
        gw1, gb1, gw2, gb2 = self.grads
        h, z, e, dz, dh, top, sum_e = self.h, self.z, self.e, self.dz, self.dh, self.top, self.sum_e
        # forward: h = relu(x w1 + b1), z = h w2 + b2, log-sum-exp shifted by the row's max
        xp.matmul(self.x, w1, out=h)
        h += b1
        xp.maximum(h, 0, out=h)
        xp.matmul(h, w2, out=z)
        z += b2
        xp.amax(z, axis=1, keepdims=True, out=top)
        xp.subtract(z, top, out=e)
        xp.exp(e, out=e)
        xp.sum(e, axis=1, keepdims=True, out=sum_e)
        xp.log(sum_e, out=sum_e)
        sum_e += top  # now log-sum-exp
        xp.subtract(z, sum_e, out=e)  # log softmax
        xp.multiply(e, self.t, out=dz)
        xp.sum(dz, out=self.total)
        # backward: dz = (softmax - t) / batch, through the relu's mask
        xp.exp(e, out=dz)
        dz -= self.t
        dz *= 1.0 / self.batch
        xp.matmul(h.T, dz, out=gw2)
        xp.sum(dz, axis=0, out=gb2)
        xp.matmul(dz, w2.T, out=dh)
        xp.greater(h, 0, out=self.mask)
        dh *= self.mask
        xp.matmul(self.x.T, dh, out=gw1)
        xp.sum(dh, axis=0, out=gb1)
        for w, g, tmp in ((w1, gw1, self.tmp[0]), (w2, gw2, self.tmp[2])):  # the L2 penalty
            xp.multiply(w, 2 * WEIGHT_DECAY, out=tmp)
            g += tmp
        # Adam
        (beta1, beta2), powers = BETAS, self.powers
        powers[0] *= beta1
        powers[1] *= beta2
        step, unbias = LR / (1 - powers[0]), (1 - powers[1]) ** -0.5
        for p, g, m, v, tmp in zip(self.params, self.grads, self.m, self.v, self.tmp):
            m *= beta1
            xp.multiply(g, 1 - beta1, out=tmp)
            m += tmp
            v *= beta2
            xp.square(g, out=tmp)
            tmp *= 1 - beta2
            v += tmp
            xp.sqrt(v, out=tmp)
            tmp *= unbias
            tmp += EPS
            xp.divide(m, tmp, out=tmp)
            tmp *= step
            p -= tmp
        return -float(self.total) / self.batch  # CuPy: a copy to the host, which synchronises

    def parameters(self) -> list[np.ndarray]:
        return [np.asarray(p) if self.xp is np else p.get() for p in self.params]


class SoftcudaStep:
    """The step as one softcuda plan, compiled once under ``placement``."""

    def __init__(self, s: Start, config: Config, placement: str, allocate: bool = True) -> None:
        self.start = s
        self.params = [sc.tensor(p) for p in s.params]
        x, target = sc.tensor(s.x), sc.tensor(s.target)
        w1, b1, w2, b2 = self.params
        logits = sc.relu(x @ w1 + b1) @ w2 + b2
        top = sc.max(logits, axis=1, keepdims=True)
        log_sum = sc.log(sc.sum(sc.exp(logits - top), axis=1, keepdims=True)) + top
        loss = -sc.mean(sc.sum(target * (logits - log_sum), axis=1))
        penalized = loss + (sc.sum(sc.square(w1)) + sc.sum(sc.square(w2))) * WEIGHT_DECAY
        self.opt = sc.optim.Adam(self.params, lr=LR, betas=BETAS, eps=EPS)
        updates = self.opt.minimize(penalized)
        self.plan = sc.compile(
            {"loss": loss}, config, placement=placement, updates=updates, allocate=allocate
        )

    @property
    def predicted_s(self) -> float | None:
        """The plan's total as the profile's costs price it; None without [costs]."""
        return self.plan.predicted_s

    def reset(self) -> None:
        for p, value in zip(self.params, self.start.params):
            p.assign(value)
        for state in self.opt.state:  # Adam's moments and bias corrections all start at 0
            state.assign(np.zeros(state.dims, state.dtype))

    def step(self) -> float:
        return float(self.plan.evaluate(copy=False)["loss"])

    def parameters(self) -> list[np.ndarray]:
        return [p.numpy() for p in self.params]


class Contestant(NamedTuple):
    name: str  # softcuda, numpy, cupy
    placement: str  # softcuda's; "" for a hand-written loop
    runner: Any  # HandLoop or SoftcudaStep
    device: str  # where its time is compared: cpu, cuda, or "" (the faster loop)
    sync: Callable[[], None]

    @property
    def label(self) -> str:
        return f"{self.name} {self.placement}".strip()


def disagreement(c: Contestant, s: Start, want: tuple[list[float], list[np.ndarray]]) -> str | None:
    """Why ``c``'s first CHECK_STEPS steps disagree with ``want``, the float64 reference's
    losses and parameters, or None."""
    c.runner.reset()
    losses = [c.runner.step() for _ in range(CHECK_STEPS)]
    want_losses, want_params = want
    for k, (got, want) in enumerate(zip(losses, want_losses), 1):
        if not abs(got - want) <= LOSS_RTOL * abs(want):
            return f"step {k}'s loss is {got:.7g}, the float64 reference's {want:.7g}"
    names = ("w1", "b1", "w2", "b2")
    for name, got, want, first in zip(names, c.runner.parameters(), want_params, s.params):
        change = want - first.astype(np.float64)
        error = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(change)
        if not error <= CHANGE_RTOL:
            return (
                f"after {CHECK_STEPS} steps {name}'s change from its start is {error:.2g} "
                "away from the float64 reference's (relative, in norm)"
            )
    return None


def contestants(s: Start, config: Config, placements: list[str], cupy: Any) -> list[Contestant]:
    """softcuda under each placement, the numpy loop, and the CuPy loop where ``cupy`` is
    given."""
    found = [
        Contestant(
            "softcuda",
            p,
            SoftcudaStep(s, config, p),
            p if p in ("cpu", "cuda") else "",
            _no_sync,
        )
        for p in placements
    ]
    found.append(Contestant("numpy", "", HandLoop(np, s), "cpu", _no_sync))
    if cupy is not None:
        sync = cupy.cuda.Device().synchronize
        found.append(Contestant("cupy", "", HandLoop(cupy, s), "cuda", sync))
    return found


def _no_sync() -> None:
    pass


def time_case(
    case: Case, found: list[Contestant], reps: int, writer: Any
) -> dict[str, list[float]]:
    """Each contestant's ``reps`` step times (seconds), in blocks taken in turns."""
    block = min(BLOCK, reps)
    rounds = -(-reps // block)
    times: dict[str, list[float]] = {c.label: [] for c in found}
    orders = balanced_orders(len(found))
    for r in range(rounds):
        for c in [found[i] for i in orders[r % len(orders)]]:
            c.runner.reset()
            c.runner.step()  # untimed: the caches held the previous contestant's data
            c.sync()
            for _ in range(min(block, reps - len(times[c.label]))):
                t0 = time.perf_counter()
                c.runner.step()
                c.sync()
                seconds = time.perf_counter() - t0
                writer.writerow(
                    [case.name, c.name, c.placement, len(times[c.label]), f"{seconds:.9g}"]
                )
                times[c.label].append(seconds)
    return times


def spread(values: list[float]) -> float:
    """The interquartile range over the median (NaN for a single value)."""
    if len(values) < 2:
        return math.nan
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / statistics.median(values)


def load_cupy() -> tuple[Any, str]:
    """(cupy, "") where CuPy and a GPU are usable, else (None, why not)."""
    ok, why = cuda_available()
    if not ok:
        return None, why
    import cupy

    return cupy, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        default="digits,large",
        help="comma-separated, of: " + ", ".join(CASES),
    )
    parser.add_argument("--reps", type=int, default=200, help="timed steps per contestant")
    parser.add_argument("--config", default=None, help="the profile (see the module docstring)")
    parser.add_argument("--csv", default="training.csv", help="raw repetitions")
    parser.add_argument(
        "--nodes", default=None, help="each plan's steps timed alone, with their predictions"
    )
    parser.add_argument("--quick", action="store_true", help="6 timed steps each (a smoke run)")
    parser.add_argument(
        "--predict",
        action="store_true",
        help="price each placement's plan from the profile and run nothing (no GPU needed)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        what = ", ".join(unknown) or "none given"
        parser.error(f"--cases: unknown case {what}; known: {', '.join(CASES)}")
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    reps = 6 if args.quick else args.reps
    try:
        config = load_config(args.config)  # the library's resolution order without one
    except SoftcudaError as exc:
        print(f"training benchmark: {exc}")
        return 2
    if args.predict:
        return predict(config, names)
    cupy, no_cupy = load_cupy()
    placements = [resolve_placement(None, config), "cpu"]
    if config.device_type == "cuda" and cupy is not None:
        placements.append("cuda")
    blas = blas_info()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; {cpu_model()}")
    print(
        f"numpy's BLAS: {blas['name']} {blas['version']} on {blas['threads']} threads, of "
        f"{usable_cores()} usable cores (the numpy loop's matmuls on all of them)"
    )
    print(
        f"config: {config.path} ({config.source}); softcuda placements: {', '.join(placements)}"
        f"; host memory: {config.host_memory}"
    )
    print(f"cupy: {cupy.__version__ if cupy is not None else 'skipped, ' + no_cupy}")
    print(
        f"{reps} timed steps per contestant in blocks of {min(BLOCK, reps)}; the same batch "
        "every step; each step returns its loss to the host; spread = interquartile range / "
        "median"
    )
    medians: dict[str, dict[str, float]] = {}
    nodes: list[dict[str, Any]] = []
    with open(args.csv, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["case", "contestant", "placement", "repetition", "seconds"])
        for name in names:
            case = CASES[name]
            s = start(case)
            try:
                found = contestants(s, config, placements, cupy)
            except SoftcudaError as exc:
                print(f"training benchmark: {exc}")
                return 2
            want = reference(s, CHECK_STEPS)
            for c in found:
                why = disagreement(c, s, want)
                if why is not None:
                    print(f"training benchmark: {case.name}: {c.label} disagrees: {why}")
                    return 1
            times = time_case(case, found, reps, writer)
            alone = steps_alone(case, found, nodes)
            medians[name] = table(case, found, times, alone)
    targets(medians, placements[0])
    print(f"raw repetitions: {args.csv}")
    if args.nodes:
        with open(args.nodes, "w", newline="") as fh:
            out = csv.DictWriter(fh, fieldnames=list(nodes[0]) if nodes else ["case"])
            out.writeheader()
            out.writerows(nodes)
        print(f"steps timed alone: {args.nodes}")
    return 0


def predict(config: Config, names: list[str]) -> int:
    """Each placement's plan of each case compiled without allocating (``allocate=False``) and
    priced by the profile: what the model expects, readable where the profile's GPU is not."""
    if not config.has_costs:
        print(f"training benchmark: {config.path} has no [costs], so nothing can be predicted")
        return 2
    print(f"config: {config.path} ({config.source}); predicted by its [costs] and [bus]")
    # another machine's profile is the point here: its plans are priced as they run there
    warnings.filterwarnings("ignore", category=StaleConfigWarning)
    placements = ["graph", "per-op", "cpu"] + (["cuda"] if config.device_type == "cuda" else [])
    print(f"{'case':<8}" + "".join(f"{p:>12}" for p in placements) + "   (predicted ms per step)")
    for name in names:
        s = start(CASES[name])
        try:
            steps = [SoftcudaStep(s, config, p, allocate=False) for p in placements]
        except SoftcudaError as exc:
            print(f"training benchmark: {exc}")
            return 2
        cells = [step.predicted_s for step in steps]  # None: a node the costs do not price
        print(f"{name:<8}" + "".join(f"{c * 1e3:>12.3f}" if c else f"{'—':>12}" for c in cells))
    return 0


def steps_alone(
    case: Case, found: list[Contestant], nodes: list[dict[str, Any]]
) -> dict[str, float]:
    """Each softcuda plan's steps timed each on its own (``Plan.profile``, after the timed
    steps: it runs the plan, updates included), summed per plan; every step's row, with the
    profile's prediction for it, appended to ``nodes``."""
    sums = {}
    for c in found:
        if not c.placement:
            continue
        c.runner.reset()
        rows = c.runner.plan.profile(repeat=PROFILE_REPS, warmup=1)
        sums[c.label] = sum(r["median_s"] for r in rows)
        for r, step in zip(rows, c.runner.plan.steps):
            if r["repetitions_s"]:
                guess = step.predicted_s
                nodes.append(
                    {
                        "case": case.name,
                        "placement": c.placement,
                        "index": r["index"],
                        "label": r["label"],
                        "op": r["op"],
                        "backend": r["backend"],
                        "device": r["device"],
                        "median_s": r["median_s"],
                        "predicted_s": "" if guess is None or math.isnan(guess) else guess,
                    }
                )
    return sums


def table(
    case: Case, found: list[Contestant], times: dict[str, list[float]], alone: dict[str, float]
) -> dict[str, float]:
    med = {label: statistics.median(t) for label, t in times.items()}
    loops = {c.device: med[c.label] for c in found if c.placement == ""}
    best_loop = min(loops, key=loops.get)
    print(f"\n{case.name}: {case.label}, float32; checked against float64 over {CHECK_STEPS} steps")
    print(
        f"{'contestant':<18}{'median ms':>11}{'spread':>9}{'predicted':>11}{'alone':>9}   against"
    )
    for c in found:
        line = f"{c.label:<18}{med[c.label] * 1e3:>11.3f}{spread(times[c.label]):>9.1%}"
        guess = c.runner.predicted_s if c.placement else None
        line += f"{guess * 1e3:>11.3f}" if guess is not None else f"{'':>11}"
        line += f"{alone[c.label] * 1e3:>9.3f}" if c.label in alone else f"{'':>9}"
        if c.placement:
            device = c.device if c.device in loops else best_loop
            other = "numpy" if device == "cpu" else "cupy"
            line += f"   {med[c.label] / loops[device]:.2f}x {other}"
        print(line)
    if "cuda" not in loops:
        print(f"{'cupy':<18}{'skipped: no usable CuPy/GPU':>30}")
    return med


def targets(medians: dict[str, dict[str, float]], default: str) -> None:
    """The issue's two targets, from the medians, where this run can evaluate them."""
    print()
    goal = "at 1024-1024-10 on the GPU, softcuda at least as fast as the better hand-written loop"
    large = medians.get("large")
    if large is None:
        print(f"target: {goal}: not evaluated (the large case was not run)")
    elif "cupy" not in large:
        print(f"target: {goal}: not evaluated (no GPU here: the CuPy loop did not run)")
    else:
        best = min(("numpy", "cupy"), key=large.get)
        ratio = large[f"softcuda {default}"] / large[best]
        verdict = "met" if ratio <= 1.0 else "NOT met"
        print(f"target: {goal}: softcuda {default} / {best} = {ratio:.2f}, {verdict}")
    goal = "at the digits size on the CPU, softcuda within 1.5x of the numpy loop"
    digits = medians.get("digits")
    if digits is None:
        print(f"target: {goal}: not evaluated (the digits case was not run)")
    else:
        ratio = digits["softcuda cpu"] / digits["numpy"]
        verdict = "met" if ratio <= 1.5 else "NOT met"
        print(f"target: {goal}: softcuda cpu / numpy = {ratio:.2f}, {verdict}")


if __name__ == "__main__":
    raise SystemExit(main())
