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

    python extra/finding_table.py --torch results/nvidia-h100/vs-torch.json.gz [NEWER.json.gz]

reads benchmarks/vs_torch.py's raw figures instead (each library timed in its own process)
and prints, per op, the sizes where the faster CUDA plan end to end from pinned memory
(softcuda's or PyTorch's) beats the faster CPU side (softcuda's all-CPU plan or PyTorch's CPU
op), medians against medians, and the range of that ratio: the crossover against a CPU side
as fast as PyTorch's.
"""

from __future__ import annotations

import gzip
import json
import statistics
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
            kept = rows[keep.to_numpy(bool)]
            # an op no CPU backend of this side measured (a chain: cpu_threads only) has no cell
            timed = set(kept.loc[kept["backend"].map(is_cpu_backend).to_numpy(bool), "op"])
            for op, buckets in decide(kept, metric).items():
                cells[op, where, side] = bands(buckets) if op in timed else "—"
            print(f"decided {where}, {side}", file=sys.stderr)
    ops = [op for op in ORDER if any(k[0] == op for k in cells)]
    ops += sorted({k[0] for k in cells} - set(ops))
    head = [f"{w}: all cores" if i % 2 == 0 else "one core" for w in LOCATIONS for i in (0, 1)]
    print("| op | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for op in ops:
        line = [cells.get((op, w, s), "—") for w in LOCATIONS for s in ("all cores", "one core")]
        print(f"| {op} | " + " | ".join(line) + " |")


def against_torch(*paths: str) -> None:
    """Per op, where the best CUDA plan from pinned memory beats the best CPU side; from one
    or more raw files, a later file's figure replacing an earlier one's for the same library,
    device, op and size (a newer CPU-only run over an older run of both devices)."""
    median = {}
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            rows = json.load(f)
        median.update(
            {
                (r["library"], r["device"], r["op"], r["log2"]): statistics.median(r["reps_s"])
                for r in rows
                if r["reps_s"]
            }
        )
    ops = sorted({k[2] for k in median})
    print("| op | sizes measured | GPU (pinned) wins at | best GPU / best CPU |")
    print("|---|---|---|---|")
    for op in ops:
        ratio = {}
        for k in sorted({k[3] for k in median if k[2] == op}):
            cpu = [median[key] for key in median if key[1:] == ("cpu", op, k)]
            gpu = [median[key] for key in median if key[1:] == ("cuda", op, k)]
            if cpu and gpu:
                ratio[k] = min(gpu) / min(cpu)
        if not ratio:
            continue
        wins = [k for k, r in ratio.items() if r < 1.0]
        where = ", ".join(f"2^{k}" for k in wins) if wins else "never"
        span = f"2^{min(ratio)} – 2^{max(ratio)}"
        print(
            f"| {op} | {span} | {where} | {min(ratio.values()):.2f} – {max(ratio.values()):.2f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--torch":
        against_torch(*sys.argv[2:])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        main(sys.argv[1])
    else:
        sys.exit(
            "usage: python extra/finding_table.py SWEEP.csv[.gz] | --torch VS_TORCH.json[.gz]..."
        )
