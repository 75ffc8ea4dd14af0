"""GPU benchmark of issue 3: one table, one run, every figure a ratio to its ceiling measured
in the same run (a benchmark, not a test; run it on the GPU machine).

    python benchmarks/gpu.py [--quick]

Without a usable GPU it says why in one line and exits 2.

1. matmul (float32): cuda_tiled and cuda_naive GFLOP/s at n = 512 ... 8192, as ratios to cuBLAS
   (cupy.matmul, TF32 off) — kernels launched exactly as a plan launches them (prebound);
2. cuda_elementwise add and relu at 2^20 ... 2^28 float32: bandwidth (bytes read + written) as
   ratios to a device-to-device copy of the same bytes and to CuPy's own ufunc with out=;
3. host<->device through softcuda's plans and pools (the baked transfer steps, timed with events
   by Plan.profile) vs plain CuPy copies (ndarray.set / ndarray.get), pinned and pageable;
4. the executor: a 1,000-node chain of tiny CUDA ops, Plan.evaluate vs a plain loop of the
   same CuPy calls (both synchronize once at the end);
5. cuda_blas's call: the prebound cuBLAS gemm against the same product through cupy.matmul,
   as host time per call (200 calls queued, n = 16) and end to end (pinned host arrays in and
   out, Plan.evaluate) at small n, the two plans timed in alternation.

Device work is timed with CUDA events after warm-ups; medians of repeated runs; inputs are
random (never zeros) and rotated over several buffers where they would fit in L2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")

try:  # the benchmark's subject; without it main() says why in one line
    import cupy  # noqa: E402
except ImportError:
    cupy = None

import softcuda as sc  # noqa: E402
from softcuda.backends import cuda_available, cuda_kernels  # noqa: E402
from softcuda.config import rules_config  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []


def row(section: str, case: str, value: str, ratio: str = "") -> None:
    ROWS.append((section, case, value, ratio))
    print(f"{section:<12} {case:<44} {value:>16}  {ratio}", flush=True)


def events(fn, reps: int = 15, calls: int = 1, warmup: int = 3) -> float:
    """Median seconds per call of ``fn`` over ``reps`` timings of ``calls`` back-to-back calls."""
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / calls)
    return statistics.median(times)


def matmul_section(sizes: list[int]) -> None:
    rng = cupy.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=cupy.float32)
        b = rng.standard_normal((n, n), dtype=cupy.float32)
        out = cupy.empty((n, n), cupy.float32)
        flops = 2.0 * n**3
        reps = 10 if n >= 4096 else 20
        calls = max(1, int(2**31 // n**3))
        t_blas = events(lambda: cupy.matmul(a, b, out=out), reps, calls)
        row("matmul", f"cuBLAS n={n}", f"{flops / t_blas / 1e9:,.0f} GFLOP/s", "1.00")
        for variant in ("tiled", "naive"):
            run = cuda_kernels.make_matmul(variant, a, b, out)
            t = events(run, 5 if variant == "naive" and n >= 4096 else reps, calls)
            row(
                "matmul",
                f"cuda_{variant} n={n}",
                f"{flops / t / 1e9:,.0f} GFLOP/s",
                f"{t_blas / t:.2f} of cuBLAS",
            )


def elementwise_section(exponents: list[int]) -> None:
    rng = cupy.random.default_rng(1)
    for e in exponents:
        n = 1 << e
        sets = max(1, (256 << 20) // (n * 4 * 3))  # rotate over ~256 MiB so L2 does not help
        xs = [rng.standard_normal(n, dtype=cupy.float32) for _ in range(sets)]
        ys = [rng.standard_normal(n, dtype=cupy.float32) for _ in range(sets)]
        outs = [cupy.empty(n, cupy.float32) for _ in range(sets)]
        turn = [0]

        def rotating(make):
            fns = [make(i) for i in range(sets)]

            def call():
                turn[0] = (turn[0] + 1) % sets
                fns[turn[0]]()

            return call

        t_copy = events(rotating(lambda i: lambda: cupy.copyto(outs[i], xs[i])), 20, 10)
        copy_bw = 2 * n * 4 / t_copy
        row("elementwise", f"copy 2^{e}", f"{copy_bw / 1e9:,.0f} GB/s", "1.00")
        for op, nbytes, ours, theirs in (
            (
                "add",
                3 * n * 4,
                lambda i: cuda_kernels.make_binary("add", xs[i], ys[i], outs[i]),
                lambda i: lambda: cupy.add(xs[i], ys[i], out=outs[i]),
            ),
            (
                "relu",
                2 * n * 4,
                lambda i: cuda_kernels.make_unary("relu", xs[i], outs[i]),
                lambda i: lambda: cupy.maximum(xs[i], 0, out=outs[i]),
            ),
        ):
            t_ours = events(rotating(ours), 20, 10)
            t_cupy = events(rotating(theirs), 20, 10)
            bw = nbytes / t_ours
            row(
                "elementwise",
                f"{op} 2^{e}",
                f"{bw / 1e9:,.0f} GB/s",
                f"{bw / copy_bw:.2f} of copy, {t_cupy / t_ours:.2f}x CuPy",
            )


def transfer_section(mib_sizes: list[int]) -> None:
    for mib in mib_sizes:
        n = (mib << 20) // 4
        host = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
        for kind in ("pinned", "pageable"):
            x = sc.tensor(host)
            plan = sc.compile(
                sc.neg(x), rules_config({"neg": "cuda_elementwise"}), host_memory=kind
            )
            steps = {r["op"]: r for r in plan.profile(repeat=10, warmup=2)}
            ours_h2d, ours_d2h = steps["h2d"]["median_s"], steps["d2h"]["median_s"]
            if kind == "pinned":
                mem = cupy.cuda.alloc_pinned_memory(n * 4)
                src = np.frombuffer(mem, np.float32, n)
                src[:] = host
            else:
                src = host.copy()
            dev = cupy.empty(n, cupy.float32)
            back = (
                np.empty_like(src)
                if kind == "pageable"
                else np.frombuffer(cupy.cuda.alloc_pinned_memory(n * 4), np.float32, n)
            )
            t_set = events(lambda: dev.set(src), 10)
            t_get = events(lambda: dev.get(out=back), 10)
            nbytes = n * 4
            row(
                "transfer",
                f"h2d {kind} {mib} MiB",
                f"{nbytes / ours_h2d / 1e9:.1f} GB/s",
                f"{t_set / ours_h2d:.2f} of CuPy set ({nbytes / t_set / 1e9:.1f} GB/s)",
            )
            row(
                "transfer",
                f"d2h {kind} {mib} MiB",
                f"{nbytes / ours_d2h / 1e9:.1f} GB/s",
                f"{t_get / ours_d2h:.2f} of CuPy get ({nbytes / t_get / 1e9:.1f} GB/s)",
            )
            del plan, x


def executor_section(nodes: int = 1000, width: int = 1024, reps: int = 30) -> None:
    x = sc.randn((width,), seed=3)
    y = x
    for i in range(nodes):
        y = y + x if i % 2 == 0 else sc.tanh(y)
    plan = sc.compile(y, rules_config({"add": "cuda_elementwise", "tanh": "cuda_elementwise"}))

    def wall(fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    t_plan = wall(lambda: plan.evaluate(copy=False))
    a = cupy.asarray(x.data)
    bufs = [cupy.empty_like(a), cupy.empty_like(a)]

    def plain() -> None:
        src = a
        for i in range(nodes):
            dst = bufs[i % 2]
            if i % 2 == 0:
                cupy.add(src, a, out=dst)
            else:
                cupy.tanh(src, out=dst)
            src = dst
        cupy.cuda.get_current_stream().synchronize()

    t_plain = wall(plain)
    row(
        "executor",
        f"Plan.evaluate, {nodes}-node chain",
        f"{t_plan / nodes * 1e6:.2f} us/node",
        f"{t_plan / t_plain:.2f}x the plain CuPy loop",
    )
    row("executor", "plain CuPy loop, same calls", f"{t_plain / nodes * 1e6:.2f} us/node", "1.00")


def blas_call_section(sizes: list[int], reps: int = 400) -> None:
    from softcuda.backends import cuda_blas

    def plans(n: int):
        a, b = sc.randn((n, n), seed=5), sc.randn((n, n), seed=6)
        config = rules_config({"matmul": "cuda_blas"})
        direct = sc.compile(a @ b, config, host_memory="pinned")
        keep = cuda_blas._direct_gemm
        cuda_blas._direct_gemm = lambda *args: None  # the same product through cupy.matmul
        try:
            through = sc.compile(a @ b, config, host_memory="pinned")
        finally:
            cuda_blas._direct_gemm = keep
        np.testing.assert_allclose(direct.evaluate(), through.evaluate(), rtol=1e-4, atol=1e-4)
        return direct, through

    def host_per_call(plan, calls: int = 200) -> float:
        (run,) = [step.run for step in plan.steps if step.op == "matmul"]
        times = []
        for _ in range(15):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            with plan._stream:
                for _ in range(calls):
                    run()
            times.append((time.perf_counter() - t0) / calls)
        return statistics.median(times)

    direct, through = plans(16)
    t_direct, t_through = host_per_call(direct), host_per_call(through)
    row("cuda_blas", "host time per call, prebound gemm (n=16)", f"{t_direct * 1e6:.2f} us")
    row(
        "cuda_blas",
        "host time per call, cupy.matmul (n=16)",
        f"{t_through * 1e6:.2f} us",
        f"{t_through / t_direct:.1f}x the prebound call",
    )
    for n in sizes:
        direct, through = plans(n)
        times: dict[str, list[float]] = {"direct": [], "through": []}
        for i in range(reps + 20):  # alternate, so that both see the same host
            for name, plan in (("direct", direct), ("through", through)):
                t0 = time.perf_counter()
                plan.evaluate(copy=False)
                if i >= 20:
                    times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        row("cuda_blas", f"end to end, prebound gemm (n={n})", f"{med['direct'] * 1e6:.1f} us")
        row(
            "cuda_blas",
            f"end to end, cupy.matmul (n={n})",
            f"{med['through'] * 1e6:.1f} us",
            f"{med['through'] - med['direct']:+.1e} s vs prebound",
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    args = parser.parse_args()
    ok, why = cuda_available()
    if not ok:
        print(f"gpu.py needs a usable CUDA GPU: {why}", file=sys.stderr)
        return 2
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(
        f"device {name}, CuPy {cupy.__version__}, CUDA runtime "
        f"{cupy.cuda.runtime.runtimeGetVersion()}, numpy {np.__version__}, "
        f"CUPY_TF32={os.environ.get('CUPY_TF32')}, kernels {cuda_kernels.source_hash()[:12]}"
    )
    t0 = time.perf_counter()
    matmul_section([512, 1024] if args.quick else [512, 1024, 2048, 4096, 8192])
    elementwise_section([20, 24] if args.quick else [20, 22, 24, 26, 28])
    transfer_section([16] if args.quick else [16, 256])
    executor_section()
    blas_call_section([64, 197] if args.quick else [64, 128, 197, 256, 512])
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    print("\n| section | case | value | ratio |\n|---|---|---|---|")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
