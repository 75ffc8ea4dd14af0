"""The README's finding table, from a reference sweep's raw CSV.

Where does the best CUDA backend beat the CPU, per op, for each data location (pinned,
pageable, on the device) and each CPU side (every CPU backend, or numpy on one core)?  Each
cell is decided the way CONFIG.soft's buckets are (``timings.select.decide``: bootstrap
intervals, ties kept on the simpler backend), on the sweep's rows with the other CPU side's
backends left out, so the pinned all-cores column is the profile's own [ops] lines.

    python extra/finding_table.py results/nvidia-h200/sweep-default-*.csv.gz

prints a Markdown table: "A" means the GPU wins from A on; "A – B" from A up to B, the CPU
again above; "below B" from the smallest size up to B; "never" the CPU wins at every size
measured; "always" the GPU does; several stretches are listed with commas.  Sizes are
elements, or n for the n x n matmuls and sum_rows' n x n matrix.  The one-core side is
cpu_fallback: numpy on one thread, and for the matmuls a BLAS-free einsum.
"""

from __future__ import annotations

import sys

from softcuda.timings.load import load_csvs
from softcuda.timings.select import decide
from softcuda.timings.stats import ONE_CORE, is_cpu_backend

LOCATIONS = {"pinned": "e2e_pinned", "pageable": "e2e_pageable", "on the device": "resident"}
ORDER = (
    "matmul matmul_tn matmul_nt add sub mul div neg square relu step exp log tanh sigmoid pow "
    "softmax sum sum_rows mean max"
).split()


def size(n: int) -> str:
    """A size as the table writes it: 177, 9.6 K, 374 K, 2.6 M (rounded, 999,600 is 1.0 M)."""
    if n < 1_000:
        return str(n)
    if n < 9_950:
        return f"{n / 1e3:.1f} K"
    if n < 999_500:
        return f"{n / 1e3:.0f} K"
    return f"{n / 1e6:.1f} M"


def bands(buckets) -> str:
    """The stretches of sizes a CUDA backend wins, adjacent buckets merged."""
    spans: list[list] = []
    for b in buckets:
        if is_cpu_backend(b.backend):
            continue
        if spans and spans[-1][1] == b.lo:
            spans[-1][1] = b.hi
        else:
            spans.append([b.lo, b.hi])
    if not spans:
        return "never"
    if spans == [[0, None]]:
        return "always"
    out = []
    for lo, hi in spans:
        start = "below" if lo == 0 else size(lo)
        if hi is None:
            out.append(start)
        elif lo == 0:
            out.append(f"below {size(hi)}")
        else:
            out.append(f"{start} – {size(hi)}")
    return ", ".join(out)


def main(path: str) -> None:
    rows = load_csvs([path])
    cells: dict[tuple[str, str, str], str] = {}
    for where, metric in LOCATIONS.items():
        for side in ("all cores", "one core"):
            keep = rows["backend"].map(
                lambda b: not is_cpu_backend(b) or side == "all cores" or b == ONE_CORE
            )
            for op, buckets in decide(rows[keep.to_numpy(bool)], metric).items():
                cells[op, where, side] = bands(buckets)
            print(f"decided {where}, {side}", file=sys.stderr)
    ops = [op for op in ORDER if any(k[0] == op for k in cells)]
    ops += sorted({k[0] for k in cells} - set(ops))
    head = [f"{w}: all cores" if i % 2 == 0 else "one core" for w in LOCATIONS for i in (0, 1)]
    print("| op | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for op in ops:
        line = [cells.get((op, w, s), "—") for w in LOCATIONS for s in ("all cores", "one core")]
        print(f"| {op} | " + " | ".join(line) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python extra/finding_table.py SWEEP.csv[.gz]")
    main(sys.argv[1])
