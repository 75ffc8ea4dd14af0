"""How well does a small sweep price the sizes it never measured?

An investigation for the cost model (``softcuda/costs.py``, "above the largest size").  A
newcomer's profile comes from the quick sweep, which stops at 2^20 elements and 512³ products;
every larger node of a graph is priced by carrying a curve past its largest size.  A full
profile (``--config``, measured far past the quick spec's sizes) answers how well that works:
each of its curves is cut down to the sizes a smaller spec (``--spec``) would have measured,
the cut-down profile prices every larger size the full one measured, and the prediction is
divided by the full profile's median there.  Two rules are compared:

    work     the largest size's time scaled by the work ratio (the rule before this one)
    model    the cost model's own (``costs.extend_s``: the last step's marginal cost, at most
             the largest size's average cost, at least its backend's roofline)

It prints, per device and family (memory: elementwise ops and reductions; compute: products),
the median and 90th-percentile factor off (max(p/m, m/p)) and the worst case.  It measures
nothing, so it runs anywhere:

    python extra/extrapolation.py --config results/nvidia-h200/CONFIG-as-measured.soft \\
        --spec sweeps/quick.yaml [--write CUT.soft]

``--write`` keeps the cut-down profile (the full one's rules, the smaller spec's costs): with
``benchmarks/placement.py --replay``, it tells how whole graphs are placed and priced on a
profile as small as the quick sweep's without a GPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace

from softcuda.backends import BACKENDS
from softcuda.config import load_config, write_config
from softcuda.costs import CostModel, arrays_moved, curve_s
from softcuda.ops import work_power
from softcuda.sweep.spec import load_spec


def _by_work(curve, size: int) -> float:
    """The rule before the model's: the largest size's time scaled by the work ratio."""
    if size <= curve.sizes[-1]:
        return curve_s(curve, size)
    return curve.seconds[-1] * (size / curve.sizes[-1]) ** work_power(curve.op)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a full profile (its [costs] the truth)")
    parser.add_argument("--spec", default="sweeps/quick.yaml", help="the smaller sweep's spec")
    parser.add_argument("--write", default=None, help="write the cut-down profile here")
    args = parser.parse_args()
    full = load_config(args.config)
    spec = load_spec(args.spec)
    grid = {entry.op: set(entry.sizes.values()) for entry in spec.ops}
    others = grid.get("others", set())
    cut: dict = {}
    beyond: list[tuple[str, str, list[tuple[int, float]]]] = []
    for op, curves in full.costs.items():
        sizes = grid.get(op, others)
        if not sizes:
            continue
        for backend, curve in curves.items():
            kept = [(s, t) for s, t in zip(curve.sizes, curve.seconds) if s in sizes]
            if len(kept) < 1:
                continue
            largest = kept[-1][0]
            # a measured size at least a third of an octave (of work) past the cut
            past = [
                (s, t)
                for s, t in zip(curve.sizes, curve.seconds)
                if (s / largest) ** work_power(op) > 2 ** (1 / 3) and s > max(sizes)
            ]
            short = replace(
                curve, sizes=tuple(s for s, _ in kept), seconds=tuple(t for _, t in kept)
            )
            cut.setdefault(op, {})[backend] = short
            if past:
                beyond.append((op, backend, past))
    if not beyond:
        print(f"{args.config} measured nothing past {args.spec}'s sizes", file=sys.stderr)
        return 1
    model = CostModel(replace(full, costs=cut))
    if args.write:
        note = f"{args.config}'s [costs] cut to {args.spec}'s sizes (extra/extrapolation.py)"
        write_config(replace(full, costs=cut), args.write, header=(note,))
    rows: dict[tuple[str, str, str], list[tuple[float, str, str, int]]] = {}
    for op, backend, past in beyond:
        family = "compute" if arrays_moved(op) == 0 else "memory"
        for size, measured in past:
            for rule, predicted in (
                ("work", _by_work(cut[op][backend], size)),
                ("model", model.resident_s(op, backend, size)),
            ):
                key = (rule, BACKENDS[backend].device, family)
                rows.setdefault(key, []).append((predicted / measured, op, backend, size))
    print(f"# python extra/extrapolation.py --config {args.config} --spec {args.spec}")
    print(f"{args.config}'s curves cut to {args.spec}'s sizes, priced past them")
    print(f"{'rule':6} {'device':6} {'family':8} {'points':>6} {'median':>7} {'p90':>6}  worst")
    for key in sorted(rows, key=lambda k: (k[1], k[2], k[0] != "work")):
        found = rows[key]
        off = sorted(max(r[0], 1 / r[0]) for r in found)
        worst = max(found, key=lambda r: abs(math.log(r[0])))
        print(
            f"{key[0]:6} {key[1]:6} {key[2]:8} {len(found):6d} "
            f"{statistics.median(off):6.2f}x {off[int(0.9 * (len(off) - 1))]:5.2f}x  "
            f"{worst[0]:.2f} ({worst[1]} on {worst[2]} at {worst[3]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
