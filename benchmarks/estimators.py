"""Would a low quantile repeat between two sweeps where the median does not?

The stability requirement reads medians.  On the H200 what keeps them from repeating is the
host: slow spells of its CPUs, and small CUDA calls that take one of two times depending on the
CPU the timing thread runs on (README, "Two speeds of a small CUDA call"), so a point's median
is whatever mix of fast and slow calls it met.  A low quantile of the same repetitions follows
the fast state.  This script pairs the two sweeps of each committed stability check and prints,
for the 10th and 25th percentiles and the median, the share of points whose statistic agrees
within 10% between the two sweeps, each measured series counted once (a CPU backend's wall
series stands in all three metrics; as ``stability.py`` counts), for CPU and CUDA backends
apart.  Each point's chosen attempt is read (``stats.current_rows``), as the sweep's analysis
does.  It changes nothing in the instrument: the median stays the statistic that selects.

    python benchmarks/estimators.py RUN1.csv.gz RUN2.csv.gz [RUN1.csv.gz RUN2.csv.gz ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from softcuda.timings import schema, stats
from softcuda.timings.load import load_csvs

QUANTILES = (0.10, 0.25, 0.50)
TOLERANCE = 0.10
KEYS = ["op", "dtype", "backend", "size"]


def statistics(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per measured series (CPU: its wall rows once; CUDA: per metric), with a column
    per quantile; index KEYS + ["series"]."""
    parts = []
    for metric, (cpu_phase, cuda_phase, memory) in schema.METRICS.items():
        rows = stats.metric_rows(frame, metric)
        cpu = rows["backend"].astype(str).str.startswith(stats.CPU_PREFIX)
        series = pd.Series(f"{cuda_phase}/{memory or 'device'}", index=rows.index)
        series[cpu] = cpu_phase
        grouped = rows.assign(series=series).groupby([*KEYS, "series"])["seconds"]
        parts.append(pd.concat({q: grouped.quantile(q) for q in QUANTILES}, axis=1))
    table = pd.concat(parts)
    return table[~table.index.duplicated()]  # a CPU series once, under the first metric


def agreement(paths: list[str]) -> pd.DataFrame:
    """Per quantile and family (CPU, CUDA): points within TOLERANCE, of points in both runs."""
    one, two = (statistics(stats.current_rows(load_csvs([p], attempts="all"))) for p in paths)
    both = pd.concat({1: one, 2: two}, axis=1, join="inner")
    cpu = both.index.get_level_values("backend").str.startswith(stats.CPU_PREFIX)
    family = pd.Series(["CPU" if c else "CUDA" for c in cpu], index=both.index)
    rows = []
    for q in QUANTILES:
        ok = ((both[2, q] / both[1, q]) - 1).abs() <= TOLERANCE
        for name, part in [("all", ok), *ok.groupby(family)]:
            rows.append((q, name, int(part.sum()), len(part)))
    return pd.DataFrame(rows, columns=["quantile", "family", "within", "of"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="pairs of stability CSVs, run 1 then run 2")
    args = parser.parse_args()
    if len(args.csv) % 2:
        parser.error("give the CSVs in pairs (run 1, run 2)")
    print(f"share of series within {TOLERANCE:.0%} between the two sweeps, each counted once")
    for i in range(0, len(args.csv), 2):
        pair = args.csv[i : i + 2]
        print(" vs ".join(Path(p).name for p in pair), flush=True)
        table = agreement(pair)
        for q, part in table.groupby("quantile", sort=True):
            cells = "  ".join(
                f"{r.family} {r.within}/{r.of} ({r.within / r.of:.1%})" for r in part.itertuples()
            )
            label = "median" if q == 0.5 else f"p{round(q * 100)}"
            print(f"  {label:<7} {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
