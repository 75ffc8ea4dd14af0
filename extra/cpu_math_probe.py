"""Why does a native float32 op run at numpy's one-core speed on one host and not another?

An investigation for the native CPU kernels (``softcuda/backends/kernels/cpu_math.hpp``): on
the lent H100 machine's Xeon, the quick profile priced cpu_threads ``log`` at 4 ns an element
from 2^10 up (numpy's ``log`` there: 0.8 ns), while ``exp`` and ``tanh`` ran at a tenth of
that; on this project's AMD machine the three cost the same.  This script prints, for each
transcendental op, the native kernel's time per element on one thread (2^12 elements) and on
every core (2^22), numpy's beside it, then asks the compiler which of the kernel library's
loops it vectorized with the flags the library is built with (``native._FLAGS``): each op's
one-op loop compiled alone, so that a loop left scalar on one host shows by the op's name.

    python extra/cpu_math_probe.py [--ops log,exp,tanh,sigmoid]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from softcuda.backends import native


def per_element_ns(run, n: int, seconds: float = 0.05) -> float:
    run()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or reps < 5:
        run()
        reps += 1
    return (time.perf_counter() - start) / reps / n * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="log,exp,tanh,sigmoid")
    args = parser.parse_args()
    known = ("log", "exp", "tanh", "sigmoid")  # the heavy one-input ops, each with numpy's beside
    unknown = [op for op in args.ops.split(",") if op not in known]
    if unknown:
        print(f"--ops: {unknown[0]!r} is not one of {', '.join(known)}", file=sys.stderr)
        return 2
    lib = native.library()
    if lib is None:
        print(f"the native kernels are unavailable: {native.unavailable()}", file=sys.stderr)
        return 2
    cores = len(os.sched_getaffinity(0))
    print(f"compiler: {native._identity(native.compiler()).splitlines()[0]}")
    print(f"flags: {' '.join(native._FLAGS)}   cores: {cores}")
    print(f"{'op':8} {'1 thread 2^12':>14} {'numpy 2^12':>11} {'all 2^22':>10} {'numpy 2^22':>11}"
          "   ns per element")  # fmt: skip
    rng = np.random.default_rng(0)
    for op in args.ops.split(","):
        cells = []
        for n, threads in ((1 << 12, 1), (1 << 22, cores)):
            x = (np.abs(rng.standard_normal(n)) + 0.1).astype(np.float32)
            out = np.empty_like(x)
            # bound once, as a plan binds it: converting x.ctypes.data and the rest on every
            # call costs about 4 us, as much as the 2^12 loop itself
            mine = per_element_ns(native.kernel(op, {}, [x], out, threads), n)
            ref = getattr(np, op, None)
            if op == "sigmoid":
                ref = lambda a, out: np.divide(1.0, 1.0 + np.exp(-a), out=out)  # noqa: E731
            theirs = per_element_ns(lambda: ref(x, out=out), n)
            cells += [mine, theirs]
        print(f"{op:8} {cells[0]:14.3f} {cells[1]:11.3f} {cells[2]:10.3f} {cells[3]:11.3f}")
    # which ops' loops the compiler vectorizes: one small file per op, the one-op loop over
    # that op's math alone as the library writes it (omp simd), compiled with its flags
    header = os.path.join(os.path.dirname(native.__file__), "kernels", "cpu_math.hpp")
    flags = [f for f in native._FLAGS if f not in ("-shared", "-fPIC")]
    print("\nthe one-op loop of each op, as the compiler reports it (its first line on that loop):")
    with tempfile.TemporaryDirectory() as work:
        for op in args.ops.split(","):
            src = os.path.join(work, f"{op}.cpp")
            loop = f"    for (long i = 0; i < n; ++i) o[i] = sc_{op}(a[i]);"
            with open(src, "w", encoding="utf-8") as f:
                f.write(f'#include "{header}"\nextern "C" void run(const float* __restrict a, ')
                f.write(f"float* __restrict o, long n) {{\n#pragma omp simd\n{loop}\n}}\n")
            done = subprocess.run(
                [native.compiler(), *flags, "-c", src, "-o", src + ".o", "-fopt-info-vec-all"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            said = [
                re.sub(r"^.*?\.cpp:\d+:\d+: ", "", m)
                for m in done.stderr.splitlines()
                if re.search(rf"{op}\.cpp:4:", m)
                and ("vectorized" in m or "not vectorized" in m or "couldn't" in m)
            ]
            verdict = next((m for m in said if m.startswith("optimized")), None)
            print(
                f"  {op:8} {verdict or (said[0] if said else 'no report: ' + done.stderr[-200:])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
