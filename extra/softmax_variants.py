"""Which kernel takes a row softmax to PyTorch's kernel time?

An investigation for the row-ops work.  On the lent H100 the production softmax of rows of 4,096
(``softmax.cu``'s held rows: 256 threads a block, 16 elements a thread, scalar loads) took 1.22
to 1.46 times PyTorch's kernel time (``results/nvidia-h100/vs-torch-kernel.txt``: 7.2 against
5.2 µs at 16 × 4096, 88.8 against 60.8 at 4096 × 4096, where ours moved its 128 MiB at 1.5 TB/s
and PyTorch at 2.2).  This times, in turns with CUDA events, the production kernel (what
``make_softmax`` launches: since this investigation's first run, the float4 kernel of 256 threads
of 4 vectors for float32 rows of 2,048 to 4,096) beside the tuning variants of ``softmax.cu``'s
``SC_TUNING`` build:

    held4 t1024      the production held kernel with 1,024 threads of 4 elements
    vec4 tT vV       T threads, V float4 vectors a thread: one 16-byte load and store per vector
                     (256 threads of 4, the fastest on rows of 2,048 and 4,096 on the H100, is
                     now the production kernel there, and left the tuning build)

each on rows of 1,024 to 8,192 where it applies, every output poisoned with NaN first and
checked against numpy's float64 softmax.  Run it on the GPU machine:

    python extra/softmax_variants.py [--reps 200]

It prints, per shape and kernel, the median kernel time, the bandwidth of reading and writing
the array once, and the time over the production kernel's.  PyTorch's times are those of
``benchmarks/vs_torch.py --device kernel`` (its own process; never in this one).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from softcuda.backends import cuda_available

SHAPES = ((16, 4096), (256, 4096), (4096, 4096), (1024, 1024), (4096, 2048), (512, 8192))
# name -> (entry point, threads a block, longest row, rows must hold whole float4 vectors)
VARIANTS = {
    "held4 t1024": ("softmax_rows_block_held4_t1024_f32", 1024, 4096, False),
    "vec4 t512 v2": ("softmax_rows_vec4_t512_v2_f32", 512, 4096, True),
    "vec4 t1024 v1": ("softmax_rows_vec4_t1024_v1_f32", 1024, 4096, True),
    "vec4 t1024 v2": ("softmax_rows_vec4_t1024_v2_f32", 1024, 8192, True),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="timed launches per kernel")
    args = parser.parse_args()
    ok, reason = cuda_available()
    if not ok:
        print(f"softmax_variants.py needs a usable CUDA GPU: {reason}", file=sys.stderr)
        return 2
    import cupy

    from softcuda.backends import cuda_kernels as ck

    ck.compile_builds(("softmax", "softmax_tuning"))
    print(f"kernel time in us, medians of {args.reps} launches (CUDA events); float32")
    print(f"{'rows x R':>12} {'kernel':>14} {'us':>9} {'GB/s':>7} {'/ prod':>7} {'rel err':>9}")
    rng = np.random.default_rng(7)
    for rows, length in SHAPES:
        host = (rng.standard_normal((rows, length)) * 8).astype(np.float32)
        x = cupy.asarray(host)
        want = host.astype(np.float64)
        want = np.exp(want - want.max(axis=1, keepdims=True))
        want /= want.sum(axis=1, keepdims=True)
        launches = {"production": _production(ck, x)}
        for name, (entry, threads, longest, whole) in VARIANTS.items():
            if length <= longest and not (whole and length % 4):
                launches[name] = _variant(ck, x, entry, threads)
        base = None
        for name, (launch, out) in launches.items():
            out.fill(np.nan)
            launch()
            got = out.get().astype(np.float64)
            err = float(np.max(np.abs(got - want) / np.maximum(want, 1e-30)))
            seconds = _time(cupy, launch, args.reps)
            base = base or seconds
            rate = 2 * host.nbytes / seconds / 1e9
            print(
                f"{rows:>5} x {length:<5} {name:>14} {seconds * 1e6:9.1f} {rate:7.0f} "
                f"{seconds / base:7.2f} {err:9.1e}",
                flush=True,
            )
    return 0


def _production(ck, x):
    import cupy

    out = cupy.empty_like(x)
    return ck.make_softmax(x, out, 1), out


def _variant(ck, x, entry: str, threads: int):
    import cupy

    out = cupy.empty_like(x)
    kernel = ck._kernel("softmax_tuning", entry)
    rows, length = x.shape
    args = (x, out, np.int64(rows), np.int64(length), np.float32(1.0))
    grid = (max(1, min(rows, 65535)),)
    return (lambda: kernel(grid, (threads,), args)), out


def _time(cupy, launch, reps: int) -> float:
    """Median kernel time of ``launch``, each repetition queued behind the process's gate
    (``cuda_timing``, as ``plan.profile()`` times a step), so that the events time the kernel
    and not the host's wait to queue it: without it, 16 rows of 4,096 read 14 us on the H100
    where ``plan.profile()`` read 7."""
    from softcuda.backends import cuda_timing

    for _ in range(20):
        launch()
    gate = cuda_timing.shared_gate()
    stream = cupy.cuda.get_current_stream()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        while True:
            gate.hold(stream)
            start.record(stream)
            launch()
            stop.record(stream)
            if gate.held():
                break
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


if __name__ == "__main__":
    sys.exit(main())
