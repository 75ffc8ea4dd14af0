"""softcuda's all-CPU plans of add, tanh, exp and sum against numpy on one core and numexpr on
every core, each library in its own process (benchmarks/rivals.py says how each is timed).

The targets, on any machine (a 2-core one included) with a profile made there: every (op, size)
from 2^16 to 2^24 within 1.25x of the better of numpy and numexpr, and exp at 2^22 at least
1.6x faster than numpy's one core.  The last lines say whether they hold.

    python benchmarks/cpu_threads.py [--min 12] [--max 24] [--config CONFIG.soft]
    python benchmarks/cpu_threads.py --quick     # 2^12 .. 2^18, a few repetitions (CI)
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rivals.py beside this file
import rivals  # noqa: E402


def main() -> int:
    args = rivals.parse(rivals="numpy,numexpr", ops="add,tanh,exp,sum", low=12, high=24)
    args.device = "cpu"
    if args.quick:
        args.max = min(args.max, 18)
    status, rows, ratios = rivals.run(args)
    if status or args.worker:
        return status
    by = {(r["library"], r["op"], r["log2"]): statistics.median(r["reps_s"]) for r in rows}
    worst = [
        (by[("softcuda", op, k)] / min(by[(lib, op, k)] for lib in ("numpy", "numexpr")
                                       if (lib, op, k) in by), op, k)
        for (lib0, op, k) in by
        if lib0 == "softcuda" and 16 <= k <= 24 and (("numpy", op, k) in by)
    ]  # fmt: skip
    if worst:
        ratio, op, k = max(worst)
        print(f"2^16..2^24: worst softcuda / best of numpy and numexpr {ratio:.2f} ({op} at 2^{k}; "
              f"target 1.25): {'met' if ratio <= 1.25 else 'NOT met'}")  # fmt: skip
    if ("softcuda", "exp", 22) in by and ("numpy", "exp", 22) in by:
        gain = by[("numpy", "exp", 22)] / by[("softcuda", "exp", 22)]
        print(f"exp at 2^22: {gain:.2f}x faster than numpy's one core (target 1.6): "
              f"{'met' if gain >= 1.6 else 'NOT met'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
