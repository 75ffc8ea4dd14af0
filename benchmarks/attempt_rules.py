"""Would another rule for choosing a point's attempt make two sweeps agree more often?

The analysis reads, of each point measured more than once, its steadiest attempt
(``stats.current_rows``).  This re-runs the stability comparison (``stability.compare``) on
pairs of committed stability CSVs under three rules and prints one line per pair:

- ``steadiest``: the rule in use (lowest ``stats.attempt_scores`` score);
- ``fastest``: the attempt with the lowest geometric mean of its series' medians;
- ``fastest_steady``: the fastest among the attempts whose score is at most 1, else the fastest.

    python benchmarks/attempt_rules.py RUN1.csv.gz RUN2.csv.gz [RUN1.csv.gz RUN2.csv.gz ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import softcuda.timings.stats as stats
from softcuda.timings import schema
from softcuda.timings.load import load_csvs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stability  # noqa: E402  (the script beside this one)

RULES = ("steadiest", "fastest", "fastest_steady")


def chooser(rule: str):
    """A replacement for ``stats.current_rows`` that keeps each retried point's attempt by
    ``rule`` ("fastest" or "fastest_steady"); everything else as ``current_rows`` does."""

    def current_rows(df: pd.DataFrame) -> pd.DataFrame:
        if df.attrs.get(stats._CURRENT):
            return df
        best = stats.best_probe(df)
        attempt = stats._attempt(df)
        if not attempt.any():
            return stats.mark_reduced(df.copy(deep=False), best)
        scores = stats.attempt_scores(df, best).reset_index()
        series = stats.attempt_series(df.assign(attempt=attempt)).median()
        speed = np.log(series).groupby(level=stats.POINT_KEYS).mean().rename("log_s")
        scores = scores.merge(speed.reset_index(), on=stats.POINT_KEYS, how="left")
        order = ["log_s", "attempt"]
        if rule == "fastest_steady":
            scores["unsteady"] = scores["score"] > 1
            order = ["unsteady", *order]
        chosen = scores.sort_values(order, ascending=[True] * (len(order) - 1) + [False])
        return stats.keep_attempts(df, chosen.drop_duplicates(["device", "op", "size"]), best)

    return current_rows


def summary(paths: list[str], rule: str, metric: str) -> str:
    """One rule's verdict on one pair: 'identical 92.0% (per metric 89 / 86 / 92)'."""
    original = stats.current_rows
    stats.current_rows = original if rule == "steadiest" else chooser(rule)
    try:
        frames = [load_csvs([p], attempts="all") for p in paths]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            stability.compare(frames, metric, None)
    finally:
        stats.current_rows = original
    text = out.getvalue()
    verdict = re.search(r"assignments (\w+); ([\d.]+%) of medians", text)
    per_metric = re.findall(
        r"^  (?:e2e_pinned|e2e_pageable|resident)\s+\d+ of \d+\s+\((\d+)%\)", text, re.M
    )
    return f"{verdict.group(1)} {verdict.group(2)} (per metric {' / '.join(per_metric)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="pairs of stability CSVs, run 1 then run 2")
    parser.add_argument("--metric", default=schema.DEFAULT_METRIC)
    args = parser.parse_args()
    if len(args.csv) % 2:
        parser.error("give the CSVs in pairs (run 1, run 2)")
    for i in range(0, len(args.csv), 2):
        pair = args.csv[i : i + 2]
        print(" vs ".join(Path(p).name for p in pair), flush=True)
        for rule in RULES:
            print(f"  {rule:<15} {summary(pair, rule, args.metric)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
