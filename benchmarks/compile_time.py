"""How long does a cold process spend compiling softcuda's CUDA kernels?

On a machine whose CuPy kernel cache is empty (a fresh GPU machine, a new kernel_hash), the
first plan of each kind compiles its ``.cu`` source with NVRTC.  This script times those
compiles cold: each one gets a source that differs from every earlier one by a comment (a
nonce), so no cache answers it.  It times

* ``everything, one module``: the three sources and matmul.cu's tuning variants as one module
  (how softcuda compiled before each source became its own build);
* each build of ``cuda_kernels._BUILDS`` alone;
* the three production builds compiled in three threads at once (does NVRTC overlap?);
* a warm load: the production builds again with their nonces unchanged (served by the cache).

Each cold figure is the median of ``--rounds`` compiles.  Output on the H200:
``results/nvidia-h200/compile-time.txt``.

    python benchmarks/compile_time.py [--rounds 2]

Without a usable GPU it says why in one line and exits 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid

from softcuda.backends import cuda_available
from softcuda.backends import cuda_kernels as ck

PRODUCTION = ("elementwise", "reduce", "matmul")


def source(build: str) -> tuple[str, tuple[str, ...]]:
    name, defines = ck._BUILDS[build]
    return (ck._KERNEL_DIR / name).read_text(encoding="utf-8"), defines


def everything() -> str:
    """All three sources as one text, matmul.cu with both of its builds' kernels."""
    parts = []
    for name in ck._SOURCES:
        text = (ck._KERNEL_DIR / name).read_text(encoding="utf-8")
        lines = [
            ln
            for ln in text.splitlines()
            if not ln.startswith(("#ifndef SC_TUNING", "#else", "#endif  // SC_TUNING"))
        ]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def compile_seconds(code: str, defines: tuple[str, ...], nonce: str) -> float:
    import cupy

    started = time.perf_counter()
    cupy.RawModule(code=f"// {nonce}\n{code}", options=("-std=c++17", *defines)).compile()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="cold compiles per figure")
    args = parser.parse_args()
    ok, why = cuda_available()
    if not ok:
        print(f"compile_time.py needs a usable CUDA GPU: {why}", file=sys.stderr)
        return 2
    import cupy

    cupy.cuda.Device().synchronize()  # the context exists before any timing
    rows: dict[str, list[float]] = {}
    warm_nonce = uuid.uuid4().hex
    for _ in range(args.rounds):
        rows.setdefault("everything, one module", []).append(
            compile_seconds(everything(), (), uuid.uuid4().hex)
        )
        for build in ck._BUILDS:
            code, defines = source(build)
            rows.setdefault(f"{build} alone", []).append(
                compile_seconds(code, defines, uuid.uuid4().hex)
            )
        nonce = uuid.uuid4().hex
        if "threads" not in rows:
            nonce = warm_nonce  # the first threaded round fills the cache for the warm load
        threads = [
            threading.Thread(target=compile_seconds, args=(*source(b), nonce)) for b in PRODUCTION
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows.setdefault("threads", []).append(time.perf_counter() - started)
    warm = [
        sum(compile_seconds(*source(b), warm_nonce) for b in PRODUCTION) for _ in range(args.rounds)
    ]
    production = sum(statistics.median(rows[f"{b} alone"]) for b in PRODUCTION)
    print(f"cold NVRTC compiles, median of {args.rounds} (seconds; every compile listed):")
    for name, secs in rows.items():
        label = "production builds in 3 threads" if name == "threads" else name
        each = ", ".join(f"{s:.1f}" for s in secs)
        print(f"  {label:<34} {statistics.median(secs):7.1f}   ({each})")
    print(f"  {'production builds one after another':<34} {production:7.1f}   (sum of medians)")
    print(f"  {'production builds, warm cache':<34} {statistics.median(warm):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
