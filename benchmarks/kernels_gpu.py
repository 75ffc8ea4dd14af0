"""Check and time softcuda's CUDA kernels on the GPU; print one table at the end.

    python benchmarks/kernels_gpu.py [--only matmul]

Exit status 0 when every check passes, 1 when one fails, 2 without a usable GPU (said in one
line).  Besides the production configurations it times matmul.cu's tuning variants (the
"matmul_tuning" build) beside them: the run that chose ``cuda_kernels._MM_KN_BIG``.

Correctness: every entry point against a float64 numpy (or CuPy float64) reference on fresh
random inputs, outputs poisoned with NaN before each launch; error = ||out - ref|| / ||ref||.
Timing: CUDA events around a captured CUDA graph of many launches (so host launch overhead is
not measured), warm-ups first, medians of 15 repetitions; small inputs rotate over several
buffer sets so that together they exceed the 50 MB L2.  Everything is compared in this same run:
matmul to cuBLAS (TF32 off), elementwise to a device-to-device copy and to CuPy's own ufuncs.
"""

from __future__ import annotations

import os

os.environ["CUPY_TF32"] = "0"  # cuBLAS SGEMM in full float32; must be set before CuPy loads

import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from softcuda.backends import cuda_available
from softcuda.backends import cuda_kernels as ck
from softcuda.ops import OPS

ROWS: list[tuple[str, str, str, str, str]] = []  # section, case, value, ratio, status
# Tuning variants timed beside the default on row-major a @ b.  _t<BK>_<warp layout>_<min
# blocks per SM> (the default "_big" is _t16_1_2); _u1/_u2: row-fastest k-vector loads;
# _sw/_pf/_pfsw/_pfkt/_pf8: the A-load candidates of cuda_kernels._MM_KN_ONLY; "_big" (the old
# default) is listed so that it is timed beside them at every size.
TUNE_CFGS = [
    "_big",
    "_t8_0_2",
    "_t16_0_2",
    "_t8_1_2",
    "_t16_1_1",
    "_t16_0_1",
    "_u1",
    "_u2",
    "_sw",
    "_pf",
    "_pfsw",
    "_pfkt",
    "_pf8",
]


def row(section: str, case: str, value: str, ratio: str = "", status: str = "") -> None:
    ROWS.append((section, case, value, ratio, status))


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("nan")
    # Differences below float32's smallest normal count as zero: a subnormal result
    # (sigmoid(-100) in float32) has too few bits for a relative comparison.
    tiny = float(np.finfo(np.float32).tiny)
    diff = (out - ref).ravel()
    diff[np.abs(diff) < tiny] = 0.0
    return float(np.linalg.norm(diff)) / max(float(np.linalg.norm(ref.ravel())), tiny)


class Checker:
    """Collects worst error and failures per entry-point family."""

    def __init__(self) -> None:
        self.worst: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self.fails: list[str] = []

    def check(self, family: str, case: str, err: float, tol: float) -> None:
        self.count[family] = self.count.get(family, 0) + 1
        prev = self.worst.get(family, 0.0)
        self.worst[family] = err if (err != err or prev != prev) else max(prev, err)
        if not err < tol:  # NaN fails too
            self.fails.append(f"{family} {case}: err={err:.3g} tol={tol:g}")


def main() -> int:
    # --only matmul: the matmul checks and timings alone (a short device run).
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    if only not in (None, "matmul"):
        print(f"--only takes 'matmul', not {only!r}")
        return 2
    ok, why = cuda_available()
    if not ok:
        print(f"kernels_gpu.py needs a usable CUDA GPU: {why}", file=sys.stderr)
        return 2
    import cupy

    rng = np.random.default_rng(12345)
    dev = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    print(f"device {name}, CuPy {cupy.__version__}, CUPY_TF32={os.environ.get('CUPY_TF32')}")
    t0 = time.perf_counter()
    ck.compile_builds((*ck.PRODUCTION_BUILDS, "matmul_tuning"))
    print(f"compiled kernels in {time.perf_counter() - t0:.1f} s, sources {ck.source_hash()[:12]}")

    def dev_arr(
        shape: tuple[int, ...], dtype: type = np.float32, lo: float = -1.0, hi: float = 1.0
    ) -> object:
        return cupy.asarray(rng.uniform(lo, hi, size=shape).astype(dtype))

    def poisoned(shape: tuple[int, ...], dtype: type) -> object:
        return cupy.full(shape, np.nan, dtype=dtype)

    chk = Checker()
    tol_ew = {np.float32: 1e-5, np.float64: 1e-12}
    tol_mm = {np.float32: 1e-4, np.float64: 1e-11}

    # ---------------------------------------------------------------- binary
    np_bin = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    for dt in (np.float32, np.float64) if only is None else ():
        d = partial(dev_arr, dtype=dt)
        for op in ck.BINARY_OPS:
            cases = [(f"contig n={n}", d((n,)), d((n,))) for n in (1, 3, 127, 129, 1000, 1 << 20)]
            cases += [
                ("misaligned", d((1001,))[1:], d((1001,))[1:]),
                ("scalar a", d(()), d((1000,))),
                ("scalar b", d((1000,)), d(())),
                ("scalar b (1,1)", d((37, 129)), d((1, 1))),
                ("row bcast", d((127, 129)), d((129,))),
                ("col bcast", d((127, 129)), d((127, 1))),
                ("a.T", d((129, 127)).T, d((127, 129))),
                ("b strided", d((64, 43)), d((128, 129))[::2, ::3]),
                ("outer bcast", d((5, 1, 7)), d((1, 6, 1))),
                ("neg stride", d((999,))[::-1], d((999,))),
            ]
            for case, a, b in cases:
                if op == "div":
                    b = cupy.abs(b) + 0.5  # keep divisors away from zero
                shape = np.broadcast_shapes(a.shape, b.shape)
                out = poisoned(shape, dt)
                ck.make_binary(op, a, b, out)()
                ref = np_bin[op](a.get().astype(np.float64), b.get().astype(np.float64))
                chk.check(f"binary {op} {dt.__name__}", case, rel_err(out.get(), ref), tol_ew[dt])

    # ---------------------------------------------------------------- unary and copy
    for dt in (np.float32, np.float64) if only is None else ():
        for op in ck.UNARY_OPS:
            lo, hi = (0.01, 10.0) if op == "log" else (-5.0, 5.0)
            if op == "sigmoid":
                lo, hi = -120.0, 120.0  # exp(120) overflows float32: the stable form must hold
            u = partial(dev_arr, dtype=dt, lo=lo, hi=hi)
            cases = [(f"n={n}", u((n,))) for n in (1, 3, 127, 1000, 1 << 20)]
            cases += [
                ("misaligned", u((1001,))[1:]),
                ("x.T", u((129, 127)).T),
                ("strided", u((64, 90))[::3, ::2]),
            ]
            for case, a in cases:
                out = poisoned(a.shape, dt)
                ck.make_unary(op, a, out)()
                ref = OPS[op].reference([a.get().astype(np.float64)], {})  # the registry's
                chk.check(f"unary {op} {dt.__name__}", case, rel_err(out.get(), ref), tol_ew[dt])
        for case, a in [
            ("x.T", dev_arr((129, 127), dt).T),
            ("permuted 3-d", dev_arr((5, 7, 9), dt).transpose(2, 0, 1)),
            ("slice", dev_arr((100, 100), dt)[3:50:2, ::-3]),
            ("contig", dev_arr((1000,), dt)),
        ]:
            out = poisoned(a.shape, dt)
            ck.make_copy(a, out)()
            chk.check(f"copy {dt.__name__}", case, rel_err(out.get(), a.get()), 1e-300)

    # ---------------------------------------------------------------- reductions
    np_red = {"sum": np.sum, "mean": np.mean, "max": np.max}
    for dt in (np.float32, np.float64) if only is None else ():
        for op in ck.REDUCE_OPS:
            specs = [
                ((1,), None),
                ((3,), None),
                ((1000,), None),
                ((1 << 24) + 3, None),
                ((127, 129), 0),
                ((127, 129), 1),
                ((127, 129), -1),
                ((4, 33, 65), 1),
                ((4, 33, 65), 2),
                ((4, 33, 65), 0),
                ((3, 5000), 1),
                ((5000, 3), 0),
            ]
            for shape, axis in specs:
                shape = shape if isinstance(shape, tuple) else (shape,)
                for keep in (False, True):
                    for layout in ("contig", "transposed"):
                        x = dev_arr(shape, dt, 0.0, 2.0)
                        if layout == "transposed":
                            if len(shape) < 2:
                                continue
                            x = cupy.ascontiguousarray(x.T).T  # same values, F-order
                        ref = np_red[op](x.get().astype(np.float64), axis=axis, keepdims=keep)
                        out = poisoned(np.shape(ref), dt)
                        ck.make_reduce(op, x, out, axis, keep)()
                        case = f"{shape} axis={axis} keep={keep} {layout}"
                        chk.check(
                            f"reduce {op} {dt.__name__}", case, rel_err(out.get(), ref), tol_ew[dt]
                        )

    # ---------------------------------------------------------------- matmul correctness
    def mm_cases(dt: type) -> list[tuple[str, object, object]]:
        d = lambda *s: dev_arr(s, dt)  # noqa: E731
        cases = [
            (f"{m}x{k}x{n}", d(m, k), d(k, n))
            for m, k, n in [
                (1, 1, 1),
                (3, 5, 7),
                (127, 129, 131),
                (129, 127, 1000),
                (1000, 3, 129),
                (256, 256, 256),
                (128, 2000, 64),
            ]
        ]
        cases += [
            ("a.T (m-vec)", d(132, 100).T, d(132, 260)),
            ("a.T odd", d(129, 127).T, d(129, 131)),
            ("b.T (k-vec)", d(100, 132), d(260, 132).T),
            ("b.T odd", d(127, 129), d(131, 129).T),
            ("a.T b.T", d(132, 100).T, d(260, 132).T),
            ("a strided", d(200, 129)[::2, 1:], d(128, 96)),
            ("b strided", d(64, 128), d(128, 300)[:, ::3]),
            ("misaligned a", d(64 * 128 + 1)[1:].reshape(64, 128), d(128, 64)),
            ("batched", d(4, 65, 33), d(4, 33, 129)),
            ("batch bcast a", d(1, 65, 36), d(3, 36, 129)),
            ("2d @ 3d", d(65, 36), d(3, 36, 129)),
            ("3d @ 2d", d(3, 65, 36), d(36, 129)),
            ("batched a.T", d(2, 64, 65).transpose(0, 2, 1), d(2, 64, 40)),
        ]
        return cases

    for dt in (np.float32, np.float64):
        tiled_cfgs = ("_big", "_u1", "_u2", "_sw", "_pf", "_pfsw", "_pfkt", "_pf8")
        for variant in ("naive", "tiled", *(f"tiled {c}" for c in tiled_cfgs)):
            for case, a, b in mm_cases(dt):
                shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
                out = poisoned(shape, dt)
                cfg = {"_cfg": variant.split()[1]} if " " in variant else {}
                try:
                    run = ck.make_matmul(variant.split()[0], a, b, out, **cfg)
                except ValueError:  # _u1/_u2 exist only for layouts with a k-contiguous operand
                    continue
                run()
                ref = np.matmul(a.get().astype(np.float64), b.get().astype(np.float64))
                chk.check(
                    f"matmul {variant} {dt.__name__}", case, rel_err(out.get(), ref), tol_mm[dt]
                )

    # Large matmul against a float64 product on the GPU (also measures cuBLAS's own error).
    n = 4096
    a32, b32 = dev_arr((n, n), np.float32), dev_arr((n, n), np.float32)
    ref = cupy.matmul(a32.astype(np.float64), b32.astype(np.float64))
    refn = float(cupy.linalg.norm(ref))
    a32t = cupy.ascontiguousarray(a32.T).T  # same values, transposed layout
    for label in ("tiled", "tiled a.T", "naive", "cuBLAS"):
        out = poisoned((n, n), np.float32)
        if label == "cuBLAS":
            cupy.matmul(a32, b32, out=out)
        else:
            lhs = a32t if label == "tiled a.T" else a32
            ck.make_matmul(label.split()[0], lhs, b32, out)()
        err = float(cupy.linalg.norm(out.astype(np.float64) - ref)) / refn
        chk.check(f"matmul large f32 ({label})", f"{n}^2", err, 1e-4)

    for fam in chk.worst:
        bad = [f for f in chk.fails if f.startswith(fam + " ")]
        row(
            "correct",
            f"{fam} ({chk.count[fam]} cases)",
            f"max err {chk.worst[fam]:.2e}",
            "",
            "FAIL" if bad else "ok",
        )
    for f in chk.fails:
        print("FAIL", f)
    print(f"correctness done at {time.perf_counter() - t0:.0f} s, {len(chk.fails)} failures")

    # ---------------------------------------------------------------- timing helpers
    stream = cupy.cuda.Stream(non_blocking=True)

    def time_calls(fns: list[Callable[[], None]], calls: int, reps: int = 15) -> float:
        """Median seconds per call of `fns` (cycled), graph-captured when CuPy allows."""
        with stream:
            for f in fns:  # warm-up, outside any capture
                f()
            stream.synchronize()
            launch: Callable[[], None]
            try:
                stream.begin_capture()
                for i in range(calls):
                    fns[i % len(fns)]()
                graph = stream.end_capture()
                launch = lambda: graph.launch(stream)  # noqa: E731
            except Exception:
                if stream.is_capturing():
                    stream.end_capture()

                def launch() -> None:
                    for i in range(calls):
                        fns[i % len(fns)]()

            launch()
            stream.synchronize()
            times = []
            for _ in range(reps):
                e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
                e0.record(stream)
                launch()
                e1.record(stream)
                e1.synchronize()
                times.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e-3 / calls)
        return float(np.median(times))

    # ---------------------------------------------------------------- matmul timing
    print("timing matmul ...")
    for n in (512, 1024, 2048, 4096, 8192):
        a = dev_arr((n, n), np.float32)
        b = dev_arr((n, n), np.float32)
        out = cupy.empty((n, n), np.float32)
        flop = 2.0 * n**3
        calls = max(1, int(2e11 // flop))  # about 0.2 TFLOP per timed repetition
        t_cublas = time_calls([partial(cupy.matmul, a, b, out=out)], calls)
        variants = [("tiled", ck.make_matmul("tiled", a, b, out))]
        # Both production tile sizes, then the tuning variants (_t<BK>_<warp layout>_<min
        # blocks per SM>) at the sizes where they matter.
        cfgs = ["_big", "_small"] if n <= 2048 else []
        cfgs += [c for c in TUNE_CFGS if c not in cfgs] if n >= 2048 else []
        variants += [(f"tiled {c}", ck.make_matmul("tiled", a, b, out, _cfg=c)) for c in cfgs]
        variants.append(("naive", ck.make_matmul("naive", a, b, out)))
        if n == 4096:
            at = cupy.ascontiguousarray(a.T).T
            bt = cupy.ascontiguousarray(b.T).T
            variants += [
                ("tiled a.T", ck.make_matmul("tiled", at, b, out)),
                ("tiled b.T", ck.make_matmul("tiled", a, bt, out)),
                ("tiled b.T _u1", ck.make_matmul("tiled", a, bt, out, _cfg="_u1")),
            ]
        row("matmul f32", f"cuBLAS n={n}", f"{flop / t_cublas / 1e9:9.0f} GFLOP/s", "1.00")
        for label, run in variants:
            reps = 10 if label == "naive" and n >= 4096 else 15
            t = time_calls([run], calls if label != "naive" else max(1, calls // 8), reps)
            row(
                "matmul f32",
                f"{label} n={n}",
                f"{flop / t / 1e9:9.0f} GFLOP/s",
                f"{t_cublas / t:.2f}",
            )

    # ---------------------------------------------------------------- elementwise timing
    print("timing elementwise ...")
    for p in (20, 22, 24, 26, 28) if only is None else ():
        n = 1 << p
        nbytes = n * 4
        sets = max(1, min(16, (256 << 20) // (3 * nbytes)))  # rotate past the L2
        xs = [dev_arr((n,), np.float32) for _ in range(sets)]
        ys = [dev_arr((n,), np.float32) for _ in range(sets)]
        zs = [cupy.empty(n, np.float32) for _ in range(sets)]
        calls = max(sets, int(2**28 // n) * 2)
        r = range(sets)
        # cudaMemcpyAsync device-to-device of the same bytes: the bandwidth ceiling.
        copies = [partial(zs[i].data.copy_from_device_async, xs[i].data, nbytes, stream) for i in r]
        kcopies = [partial(cupy.copyto, zs[i], xs[i]) for i in r]
        # The fastest of cudaMemcpyAsync, CuPy's copy and our copy kernel is the strictest ceiling.
        ocopies = [ck.make_copy(xs[i], zs[i]) for i in r]  # softcuda's own vectorized copy
        t_copy = min(
            time_calls(copies, calls), time_calls(kcopies, calls), time_calls(ocopies, calls)
        )
        t_add = time_calls([ck.make_binary("add", xs[i], ys[i], zs[i]) for i in r], calls)
        t_cadd = time_calls([partial(cupy.add, xs[i], ys[i], out=zs[i]) for i in r], calls)
        t_relu = time_calls([ck.make_unary("relu", xs[i], zs[i]) for i in r], calls)
        t_cmax = time_calls([partial(cupy.maximum, xs[i], 0, out=zs[i]) for i in r], calls)
        bw_copy = 2 * nbytes / t_copy
        row("bandwidth", f"copy 2^{p}", f"{bw_copy / 1e9:9.0f} GB/s", "1.00")
        for label, t, tc, k in [("add", t_add, t_cadd, 3), ("relu", t_relu, t_cmax, 2)]:
            bw = k * nbytes / t
            row(
                "bandwidth",
                f"{label} 2^{p}",
                f"{bw / 1e9:9.0f} GB/s",
                f"{bw / bw_copy:.2f} of copy, {tc / t:.2f}x cupy",
            )

    # ---------------------------------------------------------------- reduction timing
    if only is None:
        n = 1 << 28
        x = dev_arr((n,), np.float32)
        out = cupy.empty((), np.float32)
        t_sum = time_calls([ck.make_reduce("sum", x, out, None, False)], 4)
        t_csum = time_calls([partial(cupy.sum, x, out=out)], 4)
        ref = float(cupy.sum(x.astype(np.float64)))
        ck.make_reduce("sum", x, out, None, False)()
        err = abs(float(out) - ref) / abs(ref)
        row(
            "reduce",
            "sum 2^28 f32",
            f"{4 * n / t_sum / 1e9:9.0f} GB/s",
            f"{t_csum / t_sum:.2f}x cupy.sum",
            f"rel err {err:.1e}",
        )

    print(f"total {time.perf_counter() - t0:.0f} s\n")
    widths = [
        max(len(r[i]) for r in ROWS + [("section", "case", "value", "ratio", "")]) for i in range(5)
    ]
    header = ("section", "case", "value", "ratio", "status")
    for r in [header, tuple("-" * w for w in widths), *ROWS]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 1 if chk.fails else 0


if __name__ == "__main__":
    sys.exit(main())
