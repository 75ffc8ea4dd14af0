"""softcuda's all-CPU plans against jax.jit on the same data (XLA fuses the expression and
threads it; its operands put on jax's CPU device once, its fastest), each library in its own
process (benchmarks/rivals.py says how each is timed):
the fusion issue's CPU yardstick, the 8-op chain, a row softmax and one Adam update of 2^k
parameters.

    python benchmarks/vs_jax.py [--ops chain8,softmax,adam] [--min 12] [--max 22] [--step 2]
                                [--row 1024] [--config CONFIG.soft] [--raw FILE.json]

CPU only (jax runs here on its CPU backend).  Without jax it says so in one line and exits 2.
The reference output: results/<device>/vs-jax.txt.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rivals.py beside this file
import rivals  # noqa: E402


def main() -> int:
    argv = sys.argv[1:]
    if "--device" not in argv and not any(a.startswith("--device=") for a in argv):
        argv = ["--device", "cpu", *argv]
    args = rivals.parse(argv, rivals="jax", ops="chain8,softmax,adam", low=12, high=22)
    return rivals.run(args)[0]


if __name__ == "__main__":
    sys.exit(main())
