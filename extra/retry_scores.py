"""Why did a sweep measure its points again, and did measuring again help?  Reads one sweep's raw
CSV (every attempt) and prints, from the two parts of each attempt's score
(``stats.attempt_parts``: the probe's distance from the host's fast state, the widest host-clock
series' spread):

* how many first attempts were over the limit by the host, by spread, by both;
* per backend and host memory kind, the share of first-attempt series that spread beyond the
  limit, and of those measured again, the share that spread again (the backend's own spread
  comes back; a disturbance does not);
* cpu_threads' share of spread series per octave of size;
* the probe's median over the host's fast state, by attempt (a retry in a slow spell reads it
  again).

docs/method.md, "Measuring again", gives the answer on the H200.

    python extra/retry_scores.py results/<device>/sweep-default-<time>.csv.gz
"""

from __future__ import annotations

import argparse

import numpy as np

from softcuda.timings import schema, stats
from softcuda.timings.load import load_csvs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="one sweep's raw CSV (.csv or .csv.gz)")
    args = parser.parse_args()
    df = load_csvs([args.csv], attempts="all")
    df = df[df["backend"] != "bus"]
    parts = stats.attempt_parts(df).droplevel("device")
    first = parts.xs(0, level="attempt")
    host, spread = first["host"] > 1, first["spread"] > 1
    attempts = parts.groupby(level=["op", "size"]).size()
    print(f"{len(first)} points; measured again: {int((attempts > 1).sum())}; attempts:")
    print("  " + str(attempts.value_counts().sort_index().to_dict()))
    print(
        f"first attempts over the limit: {int((host | spread).sum())} "
        f"(host {int(host.sum())}, spread {int(spread.sum())}, both {int((host & spread).sum())})"
    )

    q = stats.attempt_series(df.assign(attempt=df["attempt"])).quantile([0.25, 0.5, 0.75])
    q = q.unstack()
    wide = ((q[0.75] - q[0.25]) / q[0.5] > stats.UNSTABLE_REL_SPREAD).droplevel("device")
    table = wide.unstack("attempt")
    print("\nseries spread beyond the limit, first attempt / again when measured again:")
    for (backend, memory), group in table.groupby(level=["backend", "host_memory"]):
        again = group.dropna(subset=[1]) if 1 in group else group.iloc[:0]
        spread0 = again[0].astype(bool)
        back = again.loc[spread0, 1].astype(bool).mean() if spread0.any() else np.nan
        print(
            f"  {backend:17} {memory:9} {group[0].mean():5.0%} of {len(group):4}"
            f"   again {back:5.0%} of {int(spread0.sum()):3}"
        )
    threads = table.xs("cpu_threads", level="backend", drop_level=False)[0] if len(table) else None
    if threads is not None and len(threads):
        octave = np.floor(np.log2(threads.index.get_level_values("size"))).astype(int)
        share = threads.astype(float).groupby(octave).mean()
        print("\ncpu_threads, spread beyond the limit by octave (first attempts):")
        print("  " + "  ".join(f"2^{k}: {v:.0%}" for k, v in share.items()))

    probe = df[df["phase"] == schema.PROBE_PHASE]
    medians = probe.groupby(["op", "size", "attempt"])["seconds"].median()
    ratio = medians / stats.best_probe(df).iloc[0]
    print("\nprobe over the host's fast state, by attempt (quartiles):")
    for attempt, r in ratio.groupby(level="attempt"):
        quartiles = ", ".join(f"{v:.2f}" for v in r.quantile([0.25, 0.5, 0.75]))
        print(f"  attempt {attempt}: {quartiles}   more than 10% off: {(r > 1.1).mean():.0%}")


if __name__ == "__main__":
    main()
