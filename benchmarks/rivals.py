"""softcuda against other libraries, each library in its own process: all-CPU plans against
PyTorch's CPU ops, numpy's (one core) and numexpr's (every core); all-CUDA plans against
PyTorch's CUDA ops end to end from pinned host memory.  benchmarks/vs_torch.py and
benchmarks/cpu_threads.py are this script with their rivals chosen.

    python benchmarks/rivals.py --rivals torch[,numpy,numexpr] [--device cpu|cuda|both]
        [--min 12] [--max 26] [--step 2] [--config CONFIG.soft] [--ops add,exp,...]
        [--raw FILE.json] [--quick] [--row 1024] [--head 64]

Ops: add, mul, tanh, exp, sigmoid, sum, mean, max, softmax (rows of ``--row``, 1,024), the chain
relu(x*y + 1) and the 8-op chain sum(tanh((relu(x) + x) * 1.01 + 0.1) * y - 0.5) (``chain8``:
what one fused kernel replaces), a layer norm along rows of ``--row`` (``layernorm``) and one
attention head softmax(q kᵀ/sqrt(head)) v with q, k, v of (2^k / head, head) (``attention``;
``--head``, 64), and one Adam update of the parameters (``adam``: on CUDA the gradient comes
from pinned memory and the new parameters go back to it, the moments stay on the GPU), float32,
at 2^min ... 2^max elements, inputs drawn once in host memory as a user has them. softcuda runs
``sc.compile(graph, placement=device, host_memory="pinned")`` and times ``evaluate(copy=False)``
under the profile (``--config``, else ./CONFIG.soft where it is this machine's, else the
packaged default): its choice of CPU backend per op and size, its thread count. PyTorch CPU runs
the same expression on ``torch.from_numpy`` views with its own threads; PyTorch CUDA copies the
inputs from pinned memory (non-blocking), computes, copies the result into a pinned tensor and
synchronizes, every call. numpy runs the expression into a preallocated output on the calling
thread; numexpr evaluates it into one with all its threads (numexpr has no softmax).

Each library runs in a process of its own (a child of this script) that imports nothing of the
other: interleaved in one process, each library's spinning threads slow the other's by up to
40x.  Per (op, size) the first call (softcuda: compile included) is timed apart; then three
warm-up calls, then repetitions until 0.2 s (at least 10, at most 2,000) on the wall clock;
the table shows medians and their ratio (softcuda / PyTorch; under 1: softcuda faster), and
the raw repetitions go to ``--raw``.  ``--device kernel`` times the GPU's kernels alone, the
data already on the device: softcuda's all-CUDA plan through ``plan.profile()`` (CUDA events,
each step gated so the host's launch cost stays out), the kernel steps' times added per
repetition; PyTorch's expression on tensors already on the GPU between two CUDA events.
A rival that is not installed is left out with one line;
with none left, or with ``--device cuda`` and no usable GPU, it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial

OPS = (
    "add", "mul", "tanh", "exp", "sigmoid", "sum", "mean", "max", "softmax", "chain", "chain8",
    "layernorm", "attention", "adam",
)  # fmt: skip
LR, BETAS, EPS = 1e-3, (0.9, 0.999), 1e-8  # adam's: one update of 2^k parameters, y the gradient
HEAD = 64  # attention's head width: q, k and v are (n / HEAD, HEAD) (--head)
ATTENTION_MAX = 20  # 2^20 elements: s = 16,384, whose scores take 1 GiB; larger is left out
ROW = 1024  # softmax's and layernorm's row length (--row)
REPS, SECONDS = 10, 0.2  # at least this many repetitions, and on until this much time


def _inputs(op: str, n: int):
    import numpy as np

    rng = np.random.default_rng(n)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    if op in ("softmax", "layernorm"):  # floor(n / ROW) rows of ROW (one row where n < ROW)
        rows = n // ROW
        x = x.reshape(1, -1) if rows == 0 else x[: rows * ROW].reshape(rows, ROW)
    if op == "attention":  # q and k (y is k, then v is x again: three (s, 64) operands)
        x, y = x.reshape(-1, HEAD), y.reshape(-1, HEAD)
    return x, y


def layernorm(lib, x, eps=1e-5):
    """(x - mean) / sqrt(var + eps) along rows, in any library with mean and sqrt."""
    centred = x - lib.mean(x, axis=-1, keepdims=True)
    variance = lib.mean(centred * centred, axis=-1, keepdims=True)
    return centred / (variance + eps) ** 0.5


def attention(lib, q, k, v):
    """softmax(q kᵀ / sqrt(d)) v along rows: one head of width d."""
    return lib.softmax((q @ k.T) * float(q.shape[-1]) ** -0.5, axis=-1) @ v


def _time(fn) -> tuple[float, list[float]]:
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    for _ in range(3):
        fn()
    reps: list[float] = []
    while len(reps) < 2000 and (len(reps) < REPS or sum(reps) < SECONDS):
        t0 = time.perf_counter()
        fn()
        reps.append(round(time.perf_counter() - t0, 9))  # perf_counter's resolution
    return first, reps


def chain8(lib, x, y):
    """The 8-op chain, in any library with relu, tanh and sum (softcuda, torch): relu, add,
    mul, add, tanh, mul, sub, sum."""
    t = lib.tanh((lib.relu(x) + x) * 1.01 + 0.1)
    return lib.sum(t * y - 0.5)


def _softcuda_case(op: str, n: int, device: str, config):
    import softcuda as sc

    if op == "adam":
        return _softcuda_adam(n, device, config)
    x, y = _inputs(op, n)
    tx, ty = sc.tensor(x), sc.tensor(y)
    node = {
        "add": lambda: tx + ty,
        "mul": lambda: tx * ty,
        "tanh": lambda: sc.tanh(tx),
        "exp": lambda: sc.exp(tx),
        "sigmoid": lambda: sc.sigmoid(tx),
        "sum": lambda: sc.sum(tx),
        "mean": lambda: sc.mean(tx),
        "max": lambda: sc.max(tx),
        "softmax": lambda: sc.softmax(tx, axis=-1),
        "chain": lambda: sc.relu(tx * ty + 1.0),
        "chain8": lambda: chain8(sc, tx, ty),
        "layernorm": lambda: layernorm(sc, tx),
        "attention": lambda: attention(sc, tx, ty, tx),
    }[op]()
    memory = "pinned" if device in ("cuda", "kernel") else "pageable"
    where = "cuda" if device == "kernel" else device
    return lambda: sc.compile(node, config=config, placement=where, host_memory=memory)


def _softcuda_adam(n: int, device: str, config):
    """One Adam update of n parameters (gradient y) as a plan: its output the new parameters,
    its updates the parameters and both moments, in place."""
    import softcuda as sc

    x, y = _inputs("adam", n)
    p, g = sc.tensor(x), sc.tensor(y)
    updates = sc.optim.Adam([p], lr=LR, betas=BETAS, eps=EPS).updates([g])
    memory = "pinned" if device == "cuda" else "pageable"
    return lambda: sc.compile(
        {"p": updates[p]}, config=config, placement=device, host_memory=memory, updates=updates
    )


def _torch_fn(op: str, n: int, device: str):
    import torch

    if op == "adam":
        return _torch_adam(n, device)
    x, y = _inputs(op, n)
    hx, hy = torch.from_numpy(x), torch.from_numpy(y)
    f = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "tanh": lambda a, b: torch.tanh(a),
        "exp": lambda a, b: torch.exp(a),
        "sigmoid": lambda a, b: torch.sigmoid(a),
        "sum": lambda a, b: a.sum(),
        "mean": lambda a, b: a.mean(),
        "max": lambda a, b: a.max(),
        "softmax": lambda a, b: torch.softmax(a, dim=-1),
        "chain": lambda a, b: torch.relu(a * b + 1.0),
        "chain8": lambda a, b: chain8(torch, a, b),
        "layernorm": lambda a, b: layernorm(_TorchLib, a),
        "attention": lambda a, b: attention(_TorchLib, a, b, a),
    }[op]
    if device == "cpu":
        return lambda: f(hx, hy)
    if device == "kernel":
        return _events(partial(f, hx.to("cuda"), hy.to("cuda")))
    px, py = hx.pin_memory(), hy.pin_memory()
    reduced = op in ("sum", "mean", "max", "chain8")
    out = torch.empty(() if reduced else tuple(px.shape), pin_memory=True)

    def run():
        gx = px.to("cuda", non_blocking=True)
        gy = py.to("cuda", non_blocking=True)
        out.copy_(f(gx, gy), non_blocking=True)
        torch.cuda.synchronize()

    return run


GATE_CYCLES = 2_000_000  # about a millisecond of GPU clock: longer than any host dispatch here


def _events(fn):
    """``fn`` timed between two CUDA events on the current stream: returns a callable giving
    the seconds one call's kernels took (its data already on the GPU).  A spin kernel is queued
    first (``torch.cuda._sleep``), so the host issues the start event, every kernel of ``fn``
    and the end event while the GPU is still busy: the time between the events is the
    kernels' alone, not the host's dispatch between them, as ``plan.profile`` gates
    softcuda's steps."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed() -> float:
        torch.cuda._sleep(GATE_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    timed.kernel_time = True  # type: ignore[attr-defined]
    return timed


def _kernel_reps(timed) -> tuple[float, list[float]]:
    """(first call's seconds, repetitions) of a callable that returns its own seconds."""
    first = timed()
    for _ in range(3):
        timed()
    reps: list[float] = []
    while len(reps) < 2000 and (len(reps) < REPS or sum(reps) < SECONDS):
        reps.append(round(timed(), 9))
    return first, reps


def _softcuda_kernel_reps(plan) -> list[float]:
    """An all-CUDA plan's kernel time per repetition: ``plan.profile()``'s CUDA steps other
    than copies, added repetition by repetition."""
    repeat = REPS if REPS < 10 else 50
    rows = plan.profile(repeat=repeat, warmup=3)
    timed = [r for r in rows if r["repetitions_s"] and r["op"] not in ("h2d", "d2h")]
    on_host = [r["op"] for r in timed if r["device"] != "cuda"]
    if on_host or not timed:  # kernel time is the GPU's alone: a host step would be left out
        raise RuntimeError(
            f"--device kernel: the all-CUDA plan ran {on_host or 'no kernel'} on the host"
        )
    return [round(sum(reps), 9) for reps in zip(*(r["repetitions_s"] for r in timed))]


def _torch_adam(n: int, device: str):
    """torch.optim.Adam's step on n parameters whose gradient is y (fused on CUDA, its default
    foreach on the CPU).  On CUDA end to end from pinned memory as softcuda's plan runs it: the
    gradient copied in from a pinned tensor, the step, the new parameters copied out into a
    pinned tensor (the parameters and moments stay on the GPU in both)."""
    import torch

    x, y = _inputs("adam", n)
    p = torch.tensor(x, device=device, requires_grad=True)
    p.grad = torch.tensor(y, device=device)
    fused = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.Adam([p], lr=LR, betas=BETAS, eps=EPS, **fused)
    if device == "cpu":
        return opt.step
    grad = torch.from_numpy(y).pin_memory()
    out = torch.empty(p.shape, pin_memory=True)

    def run():
        p.grad.copy_(grad, non_blocking=True)
        opt.step()
        out.copy_(p.detach(), non_blocking=True)
        torch.cuda.synchronize()

    return run


def _jax_fn(op: str, n: int, device: str):
    """jax.jit of the same expression (XLA fuses and threads it); CPU only.  Its operands are
    put on jax's CPU device once, before the timing: called on the numpy arrays themselves,
    each call first copied them in (the 8-op chain at 2^20 took 1.34 ms that way, 0.49 ms on
    placed arrays, on this project's machine)."""
    if device != "cpu":
        return None
    import jax
    import jax.numpy as jnp
    import numpy as np

    x, y = (jax.device_put(a) for a in _inputs(op, n))

    class Lib:
        relu, tanh, sum = staticmethod(jax.nn.relu), staticmethod(jnp.tanh), staticmethod(jnp.sum)
        mean = staticmethod(lambda a, axis, keepdims: jnp.mean(a, axis=axis, keepdims=keepdims))
        softmax = staticmethod(lambda a, axis: jax.nn.softmax(a, axis=axis))

    if op == "adam":
        b1, b2 = BETAS
        m, v = (jax.device_put(np.zeros(x.shape, x.dtype)) for _ in range(2))

        def adam(p, g, m, v):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            return p - LR * (m / (1 - b1)) / (jnp.sqrt(v / (1 - b2)) + EPS), m, v

        f = jax.jit(adam)
        return lambda: jax.block_until_ready(f(x, y, m, v))
    expr = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "tanh": lambda a, b: jnp.tanh(a),
        "exp": lambda a, b: jnp.exp(a),
        "sigmoid": lambda a, b: jax.nn.sigmoid(a),
        "sum": lambda a, b: jnp.sum(a),
        "mean": lambda a, b: jnp.mean(a),
        "max": lambda a, b: jnp.max(a),
        "softmax": lambda a, b: jax.nn.softmax(a, axis=-1),
        "chain": lambda a, b: jax.nn.relu(a * b + 1.0),
        "chain8": lambda a, b: chain8(Lib, a, b),
        "layernorm": lambda a, b: layernorm(Lib, a),
        "attention": lambda a, b: attention(Lib, a, b, a),
    }[op]
    f = jax.jit(expr)
    return lambda: jax.block_until_ready(f(x, y))


class _TorchLib:
    """torch under the names layernorm() and attention() call (mean with keepdims, softmax
    with axis)."""

    @staticmethod
    def mean(x, axis, keepdims):
        return x.mean(dim=axis, keepdim=keepdims)

    @staticmethod
    def softmax(x, axis):
        import torch

        return torch.softmax(x, dim=axis)


def _numpy_fn(op: str, n: int, device: str):
    import numpy as np

    x, y = _inputs(op, n)
    o = np.empty_like(x)
    t = np.empty_like(x)

    def softmax():
        m = x.max(axis=-1, keepdims=True)
        np.subtract(x, m, out=o)
        np.exp(o, out=o)
        np.divide(o, o.sum(axis=-1, keepdims=True), out=o)

    def chain():
        np.multiply(x, y, out=t)
        np.add(t, 1.0, out=t)
        np.maximum(t, 0.0, out=o)

    def chain8():
        np.maximum(x, 0.0, out=t)
        np.add(t, x, out=t)
        np.multiply(t, 1.01, out=t)
        np.add(t, 0.1, out=t)
        np.tanh(t, out=t)
        np.multiply(t, y, out=t)
        np.subtract(t, 0.5, out=t)
        return t.sum()

    def sigmoid():
        np.negative(x, out=o)
        np.exp(o, out=o)
        np.add(o, 1.0, out=o)
        np.divide(1.0, o, out=o)

    return {
        "add": lambda: np.add(x, y, out=o),
        "mul": lambda: np.multiply(x, y, out=o),
        "tanh": lambda: np.tanh(x, out=o),
        "exp": lambda: np.exp(x, out=o),
        "sigmoid": sigmoid,
        "sum": x.sum,
        "mean": x.mean,
        "max": x.max,
        "softmax": softmax,
        "chain": chain,
        "chain8": chain8,
    }.get(op)


def _numexpr_fn(op: str, n: int, device: str):
    import numexpr as ne
    import numpy as np

    x, y = _inputs(op, n)
    o = np.empty_like(x)
    text = {
        "add": "x + y",
        "mul": "x * y",
        "tanh": "tanh(x)",
        "exp": "exp(x)",
        "sigmoid": "1 / (1 + exp(-x))",
        "sum": "sum(x)",
        "chain": "where(x * y + 1 > 0, x * y + 1, 0)",
    }.get(op)
    if text is None:
        return None
    if op == "sum":
        return lambda: ne.evaluate(text, local_dict={"x": x})
    return lambda: ne.evaluate(text, local_dict={"x": x, "y": y}, out=o)


_MAKERS = {"torch": "_torch_fn", "numpy": "_numpy_fn", "numexpr": "_numexpr_fn", "jax": "_jax_fn"}
CPU_ONLY = ("numpy", "numexpr", "jax")


def worker(library: str, device: str, ops: list[str], sizes: list[int], config_path) -> None:
    """One library's figures, as JSON lines on stdout."""
    if library == "softcuda":
        from softcuda.config import load_config

        config = load_config(config_path) if config_path else None
        for op in ops:
            for k in sizes:
                if op == "attention" and k > ATTENTION_MAX:
                    continue
                compile_plan = _softcuda_case(op, 1 << k, device, config)
                start = time.perf_counter()  # the first call: compile and run once
                plan = compile_plan()
                plan.evaluate(copy=False)
                first = time.perf_counter() - start
                if device == "kernel":
                    reps = _softcuda_kernel_reps(plan)
                else:
                    _, reps = _time(partial(plan.evaluate, copy=False))
                _emit(library, device, op, k, first, reps)
                del plan
    else:
        if library == "torch" and device in ("cuda", "kernel"):
            import torch

            torch.ones(1, device="cuda")
        make = globals()[_MAKERS[library]]
        for op in ops:
            for k in sizes:
                if op == "attention" and k > ATTENTION_MAX:
                    continue
                fn = make(op, 1 << k, device)
                if fn is not None:
                    timing = _kernel_reps if getattr(fn, "kernel_time", False) else _time
                    first, reps = timing(fn)
                    _emit(library, device, op, k, first, reps)


def _emit(library, device, op, k, first, reps) -> None:
    print(json.dumps({"library": library, "device": device, "op": op, "log2": k,
                      "first_s": first, "reps_s": reps}), flush=True)  # fmt: skip


def _child(library: str, device: str, args) -> list[dict]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", library, "--device", device,
           "--min", str(args.min), "--max", str(args.max), "--step", str(args.step),
           "--ops", ",".join(args.ops), "--row", str(args.row),
           "--head", str(args.head)]  # fmt: skip
    if args.config:
        cmd += ["--config", args.config]
    if args.quick:
        cmd.append("--quick")
    return run_child(cmd, f"{library} on {device}")


class Interrupted(Exception):
    """A library's process stopped before its end: Ctrl-C (or a time limit's SIGINT), status
    130, or the process failed, status 1 and ``said`` its last error line.  ``rows`` holds
    every row measured so far, that process's included, so that the caller can print and keep
    them."""

    def __init__(self, rows: list[dict], status: int = 130, said: str = "interrupted"):
        super().__init__(said)
        self.rows, self.status, self.said = rows, status, said


def run_child(cmd: list[str], what: str) -> list[dict]:
    """One library's process: its JSON lines, read as it prints them.  On Ctrl-C the process
    is stopped, and where it fails (its last error line naming ``what``), ``Interrupted``
    carries the rows it had finished."""
    print(f"  {what} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryFile("w+") as err:  # a file: a pipe left unread could fill and stall
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            for line in proc.stdout:
                if line.startswith("{"):
                    rows.append(json.loads(line))
            status = proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            raise Interrupted(rows) from None
        err.seek(0)
        said = err.read().strip().splitlines()
    if status in (130, -signal.SIGINT):  # Ctrl-C (or timeout's SIGINT) reached it first
        raise Interrupted(rows)
    if status != 0:
        raise Interrupted(rows, 1, f"the {what} process failed: {said[-1] if said else ''}")
    print(f"    {len(rows)} rows in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return rows


def median_us(row: dict) -> float:
    return statistics.median(row["reps_s"]) * 1e6


def table(device: str, rows: list[dict], rivals: list[str]) -> list[float]:
    """Print one device's table; return softcuda / best rival per (op, size)."""
    by = {(r["library"], r["op"], r["log2"]): r for r in rows if r["device"] == device}
    libs = ["softcuda"] + [r for r in rivals if any(k[0] == r for k in by)]
    print(f"\n{device}: median us per call (first call apart); ratio = softcuda / best rival")
    print(f"{'op':8} {'size':>5} " + " ".join(f"{lib:>9}" for lib in libs)
          + f" {'ratio':>6} {'sc first':>10}")  # fmt: skip
    ratios = []
    keys = sorted({(op, k) for (lib, op, k) in by}, key=lambda i: (OPS.index(i[0]), i[1]))
    for op, k in keys:
        if ("softcuda", op, k) not in by:
            continue
        mine = median_us(by[("softcuda", op, k)])
        theirs = [median_us(by[(lib, op, k)]) for lib in libs[1:] if (lib, op, k) in by]
        cells = [f"{median_us(by[(lib, op, k)]):9.1f}" if (lib, op, k) in by else f"{'-':>9}"
                 for lib in libs]  # fmt: skip
        ratio = mine / min(theirs) if theirs else float("nan")
        if theirs:
            ratios.append(ratio)
        first = by[("softcuda", op, k)]["first_s"] * 1e6
        print(f"{op:8} {'2^' + str(k):>5} " + " ".join(cells) + f" {ratio:6.2f} {first:10.0f}")
    if ratios:
        mid, worst, best = statistics.median(ratios), max(ratios), min(ratios)
        print(f"{device}: softcuda / best rival: median {mid:.2f}, worst {worst:.2f}, "
              f"best {best:.2f} over {len(ratios)} (op, size)")  # fmt: skip
    return ratios


def parse(argv=None, rivals: str = "torch", ops: str = ",".join(OPS), low: int = 12,
          high: int = 26):  # fmt: skip
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rivals", default=rivals)
    parser.add_argument("--device", choices=("cpu", "cuda", "both", "kernel"), default="both")
    parser.add_argument("--min", type=int, default=low)
    parser.add_argument("--max", type=int, default=high)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--ops", default=ops)
    parser.add_argument("--config", default=None)
    parser.add_argument("--raw", default=None, help="write every repetition here (JSON)")
    parser.add_argument("--quick", action="store_true", help="few repetitions (CI)")
    parser.add_argument("--row", type=int, default=ROW, help="softmax's and layernorm's rows")
    parser.add_argument("--head", type=int, default=HEAD, help="attention's head width")
    parser.add_argument("--worker", choices=("softcuda", *_MAKERS), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run(args) -> tuple[int, list[dict], dict[str, list[float]]]:
    """Every process's figures and the tables; (exit status, rows, ratios per device)."""
    global REPS, SECONDS, ROW, HEAD
    if args.row < 1 or args.head < 1:
        print("rivals.py: --row and --head must be at least 1", file=sys.stderr)
        return 2, [], {}
    ROW, HEAD = args.row, args.head
    if args.quick:
        REPS, SECONDS = 3, 0.02
    args.ops = [o for o in args.ops.split(",") if o] if isinstance(args.ops, str) else args.ops
    unknown = sorted(set(args.ops) - set(OPS))
    if unknown:
        print(f"rivals.py: unknown op {unknown[0]!r}; expected some of {', '.join(OPS)}",
              file=sys.stderr)  # fmt: skip
        return 2, [], {}
    sizes = list(range(args.min, args.max + 1, args.step))
    if args.worker:
        from softcuda.errors import SoftcudaError

        try:
            worker(args.worker, args.device, args.ops, sizes, args.config)
        except SoftcudaError as e:
            print(e, file=sys.stderr)
            return 2, [], {}
        return 0, [], {}
    asked = [r for r in args.rivals.split(",") if r]
    rivals = [r for r in asked if importlib.util.find_spec(r) is not None]
    missing = [r for r in asked if r not in rivals]
    if not rivals:  # one line, as the CI check of GPU-less scripts asks of every benchmark
        print(f"this comparison needs {' or '.join(asked)}, not installed here "
              f"(pip install {' '.join(asked)})", file=sys.stderr)  # fmt: skip
        return 2, [], {}
    for rival in missing:
        print(f"{rival} is not installed (pip install {rival}): left out", file=sys.stderr)
    if args.config is None and os.path.exists("CONFIG.soft"):
        from softcuda.config import load_config

        fits, why = load_config("CONFIG.soft").fits_here()
        if fits:
            args.config = "CONFIG.soft"
        else:  # another machine's profile (the committed reference): its thread count, its rules
            print(f"./CONFIG.soft is not this machine's ({why}): the packaged default is used; "
                  "`softcuda init` makes this machine's", file=sys.stderr)  # fmt: skip
    devices = ["cpu", "cuda"] if args.device == "both" else [args.device]
    if "cuda" in devices or "kernel" in devices:
        from softcuda.backends import cuda_available

        ok, why = cuda_available()
        if not ok and args.device in ("cuda", "kernel"):
            print(f"--device {args.device} needs a usable GPU: {why}", file=sys.stderr)
            return 2, [], {}
        if not ok:
            devices.remove("cuda")
    if "kernel" in devices and "adam" in args.ops:
        print("--device kernel: adam updates its leaves in place and is left out",
              file=sys.stderr)  # fmt: skip
        args.ops = [o for o in args.ops if o != "adam"]
    cores = len(os.sched_getaffinity(0))
    print(f"config: {args.config or 'packaged default'}   float32   sizes 2^{args.min}.."
          f"2^{args.max}   cores: {cores}   rivals: {', '.join(rivals)}   rows of {ROW}   "
          f"head {HEAD}")  # fmt: skip
    rows: list[dict] = []
    status = 0
    try:
        for device in devices:
            for library in ["softcuda", *rivals]:
                if device in ("cuda", "kernel") and library in CPU_ONLY:
                    continue
                rows += _child(library, device, args)
    except Interrupted as stop:
        rows += stop.rows
        status = stop.status
        kept = f"; the {len(rows)} rows measured so far are printed and kept" if rows else ""
        print(stop.said + kept, file=sys.stderr)
    ratios = {device: table(device, rows, rivals) for device in devices if rows}
    if args.raw:
        with open(args.raw, "w", encoding="utf-8") as f:
            json.dump(rows, f, separators=(",", ":"))
    return status, rows, ratios


def main() -> int:
    return run(parse())[0]


if __name__ == "__main__":
    sys.exit(main())
