"""Statistics of raw sweep timings: per-size curves, crossovers, phase shares, the bus model.

Input is always the tidy raw-timings frame of ``softcuda.timings.schema`` (one row per repetition);
nothing here reads files, plots or prints.  Which rows make up a curve is the schema's METRICS
table: CPU backends (ids starting with ``cpu_``) contribute their ``wall`` rows, CUDA backends the
phase (and host memory kind) that the metric names.

Invariants
- One device at a time.  ``curves`` keys every row by device; every other function refuses a
  frame that holds several devices (or device hashes) with a ``DataError`` naming them, because a
  crossover between two machines' curves means nothing.
- Every summary is a median over repetitions, with a distribution-free interval (order statistics
  for one median, a bootstrap over repetitions for anything derived from several medians).
  No mean, no normality assumption: GPU timings have long right tails.
- Sizes are the schema's size metric (elements, equivalent square size for matmul, bytes for bus
  rows); crossings are interpolated linearly in log(size), where the curves are close to straight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from softcuda.backends import BACKENDS
from softcuda.errors import DataError
from softcuda.ops import OPS, VARIANTS, base_op, numel, variant_sample
from softcuda.timings import schema

CI_LEVEL = 0.95
"""Coverage of every interval reported here (median CIs and bootstrap crossover intervals)."""

UNSTABLE_REL_SPREAD = 0.20
"""IQR / median above which a point is flagged unstable.  For normal noise this is a standard
deviation of about 15% of the median; pyperf already warns at 10%, timings on a shared GPU are
noisier, so we flag only what would visibly move a crossover."""

HOST_DRIFT = 0.10
"""A point whose probe (the fixed workload timed in its rounds: the host's speed while it was
measured) took more than this much longer or shorter than the host's best time (``best_probe``)
is flagged: a host's own speed can move by far more than this within tens of seconds (the
reference machine's, a virtual machine, does with nothing else running: docs/findings.md, "How
far to trust the numbers"), and a point's CPU-side times move with it."""

HOST_BEST_Q = 0.10
"""The host's best time is this quantile of the points' first-attempt probe medians.  The
reference machine's host switches between a fast state and slower ones that last seconds to
tens of seconds; its fast state stayed the same from sweep to sweep, while the median over a
sweep's points moved with how long the slow states happened to last.  A low quantile is
therefore a reference two sweeps share: judged against it, the points flagged stable in both
repeated far more often than judged against each sweep's own median (docs/method.md, "Probe
rows")."""

MIN_WALL_S = 1e-6
"""Medians below this (seconds) from a host clock are flagged too short: perf_counter and the
Python call around the op cost a good fraction of a microsecond themselves."""

MIN_EVENT_S = 2e-6
"""Medians below this (seconds) from CUDA events are flagged too short: events resolve about
0.5 us, so below 2 us the quantisation alone is a quarter of the value."""

WALL_CLOCK_PHASES = ("wall", "end_to_end")
"""Phases read from a host clock; the others (h2d, kernel, d2h, transfer) come from CUDA events."""

CPU_PREFIX = "cpu_"
CURVE_KEYS = ["device", "op", "dtype", "backend", "size"]
CURVE_COLUMNS = [
    *CURVE_KEYS,
    "n",
    "median_s",
    "q25_s",
    "q75_s",
    "ci_lo_s",
    "ci_hi_s",
    "rel_spread",
    "unstable",
    "reason",
]
_NEEDED = ("device", "op", "size", "shape", "dtype", "backend", "host_memory", "phase", "seconds")


# --------------------------------------------------------------------------------------------
# Row selection


def is_cpu_backend(backend: str) -> bool:
    """True for backends that run on the host (their rows are wall-clock ``wall`` rows)."""
    return str(backend).startswith(CPU_PREFIX)


def is_cuda_backend(backend: str) -> bool:
    """Every backend that is not a CPU one."""
    return not is_cpu_backend(backend)


def check_columns(df: pd.DataFrame) -> None:
    """Raise DataError if ``df`` lacks a column the statistics need or has another schema."""
    missing = [c for c in _NEEDED if c not in df.columns]
    if missing:
        raise DataError(f"the timings frame lacks the column(s) {', '.join(missing)}")
    if "schema" in df.columns and len(df):
        versions = sorted({int(v) for v in df["schema"].unique()})
        if not set(versions) <= set(schema.READABLE_VERSIONS):
            readable = " and ".join(map(str, schema.READABLE_VERSIONS))
            raise DataError(
                f"the timings frame has schema version(s) {versions}, "
                f"this softcuda reads versions {readable}"
            )


SOURCES = "softcuda_sources"
"""attrs key: the files a frame was read from, each with the [device, device hash] pairs of its
rows (``load_csvs`` sets it), so that a refusal names the file that holds the rows."""


def single_device(df: pd.DataFrame) -> str | None:
    """The one device label of ``df`` (None if empty); DataError naming them if several.

    Several device hashes under one label (a driver update, another card of the same model) are
    refused too: their timings need not agree.  A frame read by ``load_csvs`` is refused by the
    name of the file (or files) that hold the rows, so the refusal says which CSV to split.
    """
    devices = sorted(str(d) for d in df["device"].unique())
    if len(devices) > 1:
        files = _files_holding(df, lambda device, _: device in devices)
        what = f"the timings of {len(devices)} devices ({', '.join(devices)})"
        raise DataError(_several(files, what, "device"))
    if "device_hash" in df.columns:
        hashes = sorted(str(h) for h in df["device_hash"].unique())
        if len(hashes) > 1:
            files = _files_holding(df, lambda device, h: device == devices[0] and h in hashes)
            short = ", ".join(h[:12] for h in hashes)
            what = (
                f"the rows of {len(hashes)} device hashes under device {devices[0]!r} ({short}), "
                "so of more than one machine or driver"
            )
            raise DataError(_several(files, what, "device_hash"))
    return devices[0] if devices else None


def _files_holding(df: pd.DataFrame, holds: Callable[[str, str], bool]) -> list[str]:
    """The files of ``df.attrs[SOURCES]`` with a (device, device hash) pair that ``holds``."""
    sources = df.attrs.get(SOURCES) or {}
    return [path for path, pairs in sources.items() if any(holds(d, h) for d, h in pairs)]


def _several(files: list[str], what: str, column: str) -> str:
    """The refusal of ``single_device``: what the rows mix, where they came from, what to do."""
    if len(files) == 1:
        return f"{files[0]}: holds {what}; split the CSV by {column}, or pass one device's rows"
    if files:
        return f"{', '.join(files)}: hold {what}; pass one device's rows"
    return f"the frame holds {what}; split it by {column}, or pass one device's rows"


def metric_rows(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The raw rows that make up ``metric``'s curves (see schema.METRICS), each point's chosen
    attempt only (``current_rows``); bus and probe rows excluded."""
    if metric not in schema.METRICS:
        raise DataError(f"unknown metric {metric!r}; known: {', '.join(schema.METRICS)}")
    check_columns(df)
    df = current_rows(df)
    cpu_phase, cuda_phase, cuda_memory = schema.METRICS[metric]
    backend = df["backend"].astype(str)
    cpu = backend.str.startswith(CPU_PREFIX)
    bus = df["op"].isin(schema.BUS_OPS) | backend.isin(("bus", schema.PROBE_BACKEND))
    keep_cuda = ~cpu & (df["phase"] == cuda_phase)
    if cuda_memory is not None:
        keep_cuda &= df["host_memory"] == cuda_memory
    return df[((cpu & (df["phase"] == cpu_phase)) | keep_cuda) & ~bus]


def pick_dtype(
    rows: pd.DataFrame, what: str, dtype: str | None, prefer: str | None = None
) -> str | None:
    """``dtype`` if given, else the only dtype in ``rows``, else ``prefer`` if it is among
    several; DataError if there are several without it."""
    if dtype is not None:
        return dtype
    dtypes = sorted(str(d) for d in rows["dtype"].unique())
    if len(dtypes) > 1 and prefer in dtypes:
        return prefer
    if len(dtypes) > 1:
        raise DataError(f"{what} was measured in several dtypes ({', '.join(dtypes)}); pass dtype=")
    return dtypes[0] if dtypes else None


# --------------------------------------------------------------------------------------------
# One median and its interval


@cache
def _ci_rank(n: int) -> int:
    """The largest 0-based k with P(x[k] <= median <= x[n-1-k]) >= CI_LEVEL for sorted x.

    That probability is 1 - 2 P(Binomial(n, 1/2) <= k), whatever the distribution of x.
    Returns 0 (min and max) when even those do not reach CI_LEVEL, i.e. for n < 6.
    """
    if n < 2:
        return 0
    i = np.arange(n + 1)
    lg = np.array([math.lgamma(v + 1) for v in range(n + 1)])
    cdf = np.cumsum(np.exp(lg[n] - lg[i] - lg[n - i] - n * math.log(2.0)))
    ok = np.nonzero(cdf <= (1.0 - CI_LEVEL) / 2.0)[0]
    return int(ok[-1]) if ok.size else 0


def min_reps_for_ci() -> int:
    """Fewest repetitions whose (min, max) already covers the median with CI_LEVEL."""
    n = 2
    while 1.0 - 2.0 * 0.5**n < CI_LEVEL:
        n += 1
    return n


def median_ci(values: np.ndarray) -> tuple[float, float]:
    """Distribution-free CI_LEVEL interval of the median from order statistics."""
    x = np.sort(np.asarray(values, dtype=float))
    k = _ci_rank(len(x))
    return float(x[k]), float(x[len(x) - 1 - k])


def bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_boot`` resamples (with replacement, same size) of ``values``."""
    x = np.asarray(values, dtype=float)
    return np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)


def curves(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per (device, op, dtype, backend, size) of ``metric``: median and spread.

    Columns CURVE_COLUMNS.  ``ci_lo_s``/``ci_hi_s`` is the order-statistic CI_LEVEL interval of
    the median (ci_lo_s <= median_s <= ci_hi_s).  ``unstable`` is True when the IQR exceeds
    UNSTABLE_REL_SPREAD of the median, when the median is below the clock's floor (MIN_WALL_S
    for host-clock phases, MIN_EVENT_S for CUDA events), when there are too few repetitions
    for the interval to reach CI_LEVEL, or when the point's probe rows (if the sweep took any)
    say the host ran more than HOST_DRIFT off its best speed; ``reason`` says which ("" when
    stable).  Rows are sorted by the keys.  Devices are never pooled.
    """
    df = current_rows(df)  # once: metric_rows and the host-speed flag both read it
    rows = metric_rows(df, metric)[[*CURVE_KEYS, "seconds"]]
    # Sorted by key, then by time: each group is one contiguous, sorted run of ``x``, so order
    # statistics are plain index arithmetic (no Python loop over groups: sweeps are large).
    rows = rows.sort_values([*CURVE_KEYS, "seconds"], kind="stable")
    x = rows["seconds"].to_numpy(dtype=float)
    counts = rows.groupby(CURVE_KEYS, sort=True).size()
    n = counts.to_numpy()
    start = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)

    def quantile(q: float) -> np.ndarray:  # numpy's default (linear) definition
        pos = q * (n - 1)
        low = np.floor(pos).astype(np.int64)
        high = np.minimum(low + 1, n - 1)
        return x[start + low] + (x[start + high] - x[start + low]) * (pos - low)

    q25, med, q75 = quantile(0.25), quantile(0.5), quantile(0.75)
    k = np.array([_ci_rank(int(v)) for v in n], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(med > 0, (q75 - q25) / med, np.inf)
    keys = counts.index.to_frame(index=False)
    cpu_phase, cuda_phase, _ = schema.METRICS[metric]
    cpu = keys["backend"].astype(str).str.startswith(CPU_PREFIX).to_numpy()
    floor_s = np.where(
        cpu,
        MIN_WALL_S if cpu_phase in WALL_CLOCK_PHASES else MIN_EVENT_S,
        MIN_WALL_S if cuda_phase in WALL_CLOCK_PHASES else MIN_EVENT_S,
    )
    few = min_reps_for_ci()
    host = _host_drift(df, keys)
    reasons = []
    for i in range(len(n)):
        why = []
        if spread[i] > UNSTABLE_REL_SPREAD:
            why.append(f"IQR {spread[i]:.0%} of median")
        if med[i] < floor_s[i]:
            why.append(f"median below {floor_s[i]:.0e} s")
        if n[i] < few:
            why.append(f"only {n[i]} repetitions")
        if abs(host[i] - 1) > HOST_DRIFT:
            why.append(f"host at {host[i]:.2f}x its best time (probe)")
        reasons.append("; ".join(why))
    out = keys.assign(
        n=n,
        median_s=med,
        q25_s=q25,
        q75_s=q75,
        ci_lo_s=x[start + k],
        ci_hi_s=x[start + n - 1 - k],
        rel_spread=spread,
        unstable=[bool(r) for r in reasons],
        reason=reasons,
    )
    result = out[CURVE_COLUMNS] if len(out) else pd.DataFrame(columns=CURVE_COLUMNS)
    return result.astype({"size": "int64", "n": "int64", "unstable": "bool"})


def probe_medians(df: pd.DataFrame) -> pd.Series:
    """Median seconds of each point's probe rows (the host's speed while it was measured), of
    its chosen attempt (``current_rows``), indexed by (device, op, size); empty when the sweep
    took none."""
    rows = current_rows(df)
    probe = rows[rows["phase"] == schema.PROBE_PHASE]
    return probe.groupby(["device", "op", "size"])["seconds"].median().rename("probe_s")


def best_probe(df: pd.DataFrame) -> pd.Series:
    """The host's best time per device: the HOST_BEST_Q quantile, over points, of their first
    attempt's probe median (first attempts sample the host across the whole sweep, before any
    re-measuring chose the faster moments); empty when the sweep took no probe rows.

    A frame from ``current_rows`` (or rows taken from one) carries the value computed over
    the whole frame it came from, so one op's rows are judged against the same host as all."""
    if _BEST in df.attrs:
        best = pd.Series(df.attrs[_BEST], dtype=float, name="best_s")
        return best.rename_axis("device")
    probe = df[df["phase"] == schema.PROBE_PHASE]
    first = probe[_attempt(probe) == 0]
    per_point = first.groupby(["device", "op", "size"])["seconds"].median()
    return per_point.groupby(level="device").quantile(HOST_BEST_Q).rename("best_s")


def _attempt(df: pd.DataFrame) -> np.ndarray:
    """The ``attempt`` column (0 for frames written before it existed)."""
    if "attempt" not in df.columns:
        return np.zeros(len(df), dtype=np.int64)
    return df["attempt"].to_numpy(dtype=np.int64)


POINT_KEYS = ["device", "op", "size", "attempt"]
_CURRENT = "softcuda_current_rows"  # attrs key: the frame holds one attempt per point
_BEST = "softcuda_best_probe"  # attrs key: best_probe of the whole frame, {device: seconds}


def attempt_scores(df: pd.DataFrame, best: pd.Series | None = None) -> pd.Series:
    """How far each attempt at each point was from a steady measurement, indexed by
    (device, op, size, attempt); bus rows have none.

    The score is the worse of the two parts of ``attempt_parts``: the probe's distance from
    the host's best time over HOST_DRIFT, and the largest spread among the point's host-clock
    series over UNSTABLE_REL_SPREAD.  At most 1 means neither flag of ``curves`` is raised by
    either cause: the host ran at its best speed and no series spread.  The analysis reads the
    attempt with the lowest (``current_rows``); the sweep measures a point again by the host's
    part alone (``Sweep._retries``).  ``best`` is the host's best time per device (default:
    ``best_probe(df)``).
    """
    return attempt_parts(df, best).max(axis=1).rename("score")


def attempt_parts(df: pd.DataFrame, best: pd.Series | None = None) -> pd.DataFrame:
    """The two parts of each attempt's score (``attempt_scores``), indexed by (device, op,
    size, attempt), each a ratio to its limit:

    * ``spread``: the largest IQR / median among the point's host-clock series (CPU ``wall``
      and CUDA ``end_to_end`` rows, per backend and host memory) over UNSTABLE_REL_SPREAD;
      infinity for an attempt that lacks a series its point's first attempt has (a sweep
      stopped while writing it);
    * ``host``: the distance of the attempt's probe median from the host's best time
      (``best_probe``) over HOST_DRIFT; NaN where the attempt has no probe rows.
    """
    check_columns(df)
    rows = df.assign(attempt=_attempt(df))
    q = attempt_series(rows).quantile([0.25, 0.5, 0.75]).unstack()
    q = q.reindex(columns=[0.25, 0.5, 0.75])  # (no series at all: unstack makes no columns)
    per_series = (q[0.75] - q[0.25]) / q[0.5]
    spread = (per_series.groupby(level=POINT_KEYS).max() / UNSTABLE_REL_SPREAD).rename("spread")
    if len(spread):
        count = per_series.groupby(level=POINT_KEYS).size()
        first = count[count.index.get_level_values("attempt") == 0].droplevel("attempt")
        expected = first.reindex(count.index.droplevel("attempt")).to_numpy()
        spread[count.to_numpy() < np.nan_to_num(expected)] = np.inf  # a torn attempt
    parts = [spread]
    probe = rows[rows["phase"] == schema.PROBE_PHASE]
    if len(probe):
        per_attempt = probe.groupby(POINT_KEYS)["seconds"].median()
        best = best_probe(df) if best is None else best
        best = best.reindex(per_attempt.index.get_level_values("device")).to_numpy()
        parts.append(((per_attempt / best - 1).abs() / HOST_DRIFT).rename("host"))
    out = pd.concat(parts, axis=1).reindex(columns=["spread", "host"])
    return out.astype(float).sort_index()


def attempt_series(df: pd.DataFrame):
    """The host-clock timings (CPU ``wall`` and CUDA ``end_to_end`` rows; no bus or probe rows)
    of ``df``, grouped per (device, op, size, attempt, backend, host memory): the series that
    ``attempt_scores`` judges each attempt by.  ``df`` needs an ``attempt`` column."""
    backend = df["backend"].astype(str)
    timed = df[
        df["phase"].isin(WALL_CLOCK_PHASES)
        & ~df["op"].isin(schema.BUS_OPS)
        & (backend != "bus")
        & (backend != schema.PROBE_BACKEND)
    ]
    return timed.groupby([*POINT_KEYS, "backend", "host_memory"])["seconds"]


def keep_attempts(df: pd.DataFrame, chosen: pd.DataFrame, best: pd.Series) -> pd.DataFrame:
    """``df`` reduced to one attempt per retried point: ``chosen`` holds the POINT_KEYS of the
    attempt to keep, one row per point; points measured once, and points ``chosen`` does not
    name, keep all their rows.  The result is marked (``mark_reduced``) against ``best``."""
    points = df[["device", "op", "size"]].assign(attempt=_attempt(df))
    retried = points.groupby(["device", "op", "size"])["attempt"].transform("max").to_numpy() > 0
    keys = pd.MultiIndex.from_frame(points[POINT_KEYS])
    named = keys.droplevel("attempt").isin(pd.MultiIndex.from_frame(chosen[POINT_KEYS[:3]]))
    kept = keys.isin(pd.MultiIndex.from_frame(chosen[POINT_KEYS]))
    return mark_reduced(df[~retried | ~named | kept], best)


def current_rows(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each point's chosen attempt only: the attempt with the lowest
    ``attempt_scores`` score (a tie goes to the later one).  Points measured once, bus rows and
    frames without an ``attempt`` column come back as they are; nothing is averaged.

    The result is marked (``DataFrame.attrs``, which pandas carries over to slices of it) with
    the host's best time over the whole frame (``best_probe``), so that calling this again on
    it, or on rows taken from it (one op's), costs nothing and judges the same.  Call it on a
    whole sweep, before narrowing to an op: the best time is a quantile over every point.
    A frame pooling several sweeps must be reduced sweep by sweep (``load_csvs`` does that):
    here a point is (device, op, size), whichever file it came from."""
    if df.attrs.get(_CURRENT):
        return df
    best = best_probe(df)
    if not _attempt(df).any():
        return mark_reduced(df.copy(deep=False), best)
    scores = attempt_scores(df, best).reset_index()
    steadiest = scores.sort_values(
        ["score", "attempt"], ascending=[True, False], kind="stable"
    ).drop_duplicates(["device", "op", "size"])
    return keep_attempts(df, steadiest, best)


def fastest_rows(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with, for each (device, op, size, backend, host memory) measured more than once,
    the rows of its attempt whose host-clock median (``wall``, ``end_to_end``) is the least:
    what a cost is read from.  Noise only adds time, and an attempt is retried as a whole
    while the slowdown that made it a retry may have touched one backend's series and not
    another's: on the H100's reference sweep the steadiest attempt of add at 2^22
    (``current_rows``, which the rules keep, a comparison being fair only within one attempt)
    read cpu_threads at 616 us, the first attempt 215 us, which a graph of it took.  Rows of a
    series measured once, bus and probe rows come back as they are."""
    if not _attempt(df).any():
        return df
    rows = df.assign(attempt=_attempt(df))
    series = ["device", "op", "size", "backend", "host_memory"]
    timed = rows[rows["phase"].isin(WALL_CLOCK_PHASES)]
    medians = timed.groupby([*series, "attempt"])["seconds"].median().reset_index()
    fastest = medians.sort_values(["seconds", "attempt"], kind="stable").drop_duplicates(series)
    keys = pd.MultiIndex.from_frame(rows[[*series, "attempt"]])
    chosen = keys.isin(pd.MultiIndex.from_frame(fastest[[*series, "attempt"]]))
    judged = pd.MultiIndex.from_frame(rows[series]).isin(pd.MultiIndex.from_frame(fastest[series]))
    # one attempt per series: current_rows and curves read it as it is
    return mark_reduced(df[chosen | ~judged], best_probe(df))


def shared_kernels(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each backend's timings as its kernels ran: where a backend runs another's kernel
    (``BackendInfo.runs_as_below``: the first cpu_threads, below two chunks of 1 MiB, ran
    cpu_fallback's on the calling thread; no backend declares it now) and that other backend was
    timed at the same point, the backend's rows there are the other's, relabelled. One kernel
    timed twice otherwise lets noise pick a winner between the two: two sweeps of one machine
    gave the smallest bucket of eight ops to one and then the other.  With identical rows the
    two tie exactly, the simpler is kept, and a boundary to the backend's own kernel still has
    both curves on each side of it.  Only (device, op, dtype)s the backend was timed for get
    rows; call it on a frame already reduced to one attempt per point (``current_rows``): its
    mark is kept.
    """
    if df.empty or "nbytes" not in df.columns:
        return df
    point = ["device", "op", "dtype", "size"]
    drop = np.zeros(len(df), dtype=bool)
    copies = []
    for backend, info in BACKENDS.items():
        if info.runs_as_below is None:
            continue
        other, below = info.runs_as_below
        mine = (df["backend"] == backend).to_numpy()
        if not mine.any():
            continue
        timed_for = pd.MultiIndex.from_frame(df.loc[mine, point[:3]].drop_duplicates())
        small = (df["nbytes"] < below).to_numpy()
        theirs = (df["backend"] == other).to_numpy() & small
        theirs[theirs] = pd.MultiIndex.from_frame(df.loc[theirs, point[:3]]).isin(timed_for)
        if not theirs.any():
            continue
        at = pd.MultiIndex.from_frame(df.loc[theirs, point].drop_duplicates())
        replaced = mine & small
        replaced[replaced] = pd.MultiIndex.from_frame(df.loc[replaced, point]).isin(at)
        drop |= replaced
        copies.append(df[theirs].assign(backend=backend))
    if not copies:
        return df
    out = pd.concat([df[~drop], *copies], ignore_index=True)
    out.attrs = dict(df.attrs)  # the one-attempt mark: the copies are attempts already chosen
    return out


def mark_reduced(df: pd.DataFrame, best: pd.Series) -> pd.DataFrame:
    """Mark ``df`` (in place; returned) as holding one attempt per point, chosen against the
    host's best time ``best`` (per device): ``current_rows`` and ``best_probe`` then read it
    as it is."""
    df.attrs.update({_CURRENT: True, _BEST: {str(k): float(v) for k, v in best.items()}})
    return df


def judged_against(df: pd.DataFrame, best: pd.Series) -> pd.DataFrame:
    """Mark ``df`` (in place; returned), rows taken from a larger sweep, with that sweep's best
    host time ``best`` (per device, ``best_probe`` of the whole): ``best_probe``, and so
    ``attempt_scores`` and ``current_rows``, then read it instead of a quantile over ``df``
    alone.  A sweep judges one op's rows this way while it runs, without a frame of every
    row."""
    df.attrs[_BEST] = {str(k): float(v) for k, v in best.items()}
    return df


def _host_drift(df: pd.DataFrame, keys: pd.DataFrame) -> np.ndarray:
    """For each curve row (``keys``: device, op, ..., size), its point's probe median (chosen
    attempt) over the host's best time (``best_probe``); 1 where there are no probe rows."""
    per_point = probe_medians(df)
    if per_point.empty or keys.empty:
        return np.ones(len(keys))
    best = best_probe(df).reindex(per_point.index.get_level_values("device")).to_numpy()
    ratio = (per_point / best).rename("host").reset_index()
    ratio["size"] = ratio["size"].astype("int64")
    joined = (
        keys[["device", "op", "size"]]
        .astype({"size": "int64"})
        .merge(ratio, on=["device", "op", "size"], how="left")
    )
    return joined["host"].fillna(1.0).to_numpy(dtype=float)


# --------------------------------------------------------------------------------------------
# Crossings


def interp_crossing(
    log_s1: np.ndarray | float,
    log_s2: np.ndarray | float,
    r1: np.ndarray | float,
    r2: np.ndarray | float,
) -> np.ndarray | float:
    """log(size) where r (a log time ratio) reaches 0, linear in log(size) between two sizes.

    Callers pass pairs where r changes sign (r1 != r2), so the fraction lies in [0, 1].
    """
    return log_s1 + (log_s2 - log_s1) * (r1 / (r1 - r2))


def last_crossing(log_sizes: np.ndarray, r: np.ndarray, downward: bool) -> np.ndarray:
    """Log-size of the last sign change of ``r`` (shape (..., k)) in one direction, per row.

    r = log(t_cuda / t_cpu); CUDA wins where r <= 0.  ``downward`` looks for CPU -> CUDA
    (r > 0 then r <= 0), otherwise CUDA -> CPU.  A row without such a change gets +inf when it
    ends on the side the change starts from (the crossing lies beyond the largest size) and
    -inf when it ends on the side the change leads to (it lies below the smallest size).
    """
    cuda_wins = r <= 0
    start, end = (~cuda_wins, cuda_wins) if downward else (cuda_wins, ~cuda_wins)
    change = start[..., :-1] & end[..., 1:]
    k = r.shape[-1]
    # Index of the last True along the axis (argmax on the reversed array finds the first).
    idx = np.clip(k - 2 - np.argmax(change[..., ::-1], axis=-1), 0, max(k - 2, 0))
    found = change.any(axis=-1)
    if k >= 2:
        r1 = np.take_along_axis(r, idx[..., None], axis=-1)[..., 0]
        r2 = np.take_along_axis(r, idx[..., None] + 1, axis=-1)[..., 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            at = interp_crossing(log_sizes[idx], log_sizes[idx + 1], r1, r2)
    else:
        at = np.zeros(found.shape)
    beyond = np.where(start[..., -1], np.inf, -np.inf)
    return np.where(found, at, beyond)


@dataclass(frozen=True)
class Crossover:
    """Where the best CUDA backend starts to beat the best CPU backend, for one op on one device.

    ``size`` is the interpolated crossing (None unless status == "crossing"); ``lo``/``hi`` its
    bootstrap CI_LEVEL interval, always lo <= size <= hi; lo = 0.0 or hi = inf when a share of
    the resamples put the crossing outside the measured sizes.  ``cpu_backend``/``cuda_backend``
    are the best of each family at the crossing (at the largest measured size for
    "cpu_everywhere", the smallest for "cuda_everywhere").
    """

    device: str | None
    op: str
    dtype: str | None
    metric: str
    cpu_backend: str | None
    cuda_backend: str | None
    size: float | None
    lo: float | None
    hi: float | None
    status: str
    note: str
    # which CPU backends the CPU side is the best of: every one measured, or numpy on one core
    # (cpu_fallback) for the comparison a single-threaded baseline gives
    against: str = "every CPU backend"


ONE_CORE = "cpu_fallback"
"""The CPU side of the single-threaded comparison: numpy on one core, no BLAS."""


def _samples(rows: pd.DataFrame) -> dict[tuple[str, int], np.ndarray]:
    """Raw seconds per (backend, size), in sorted key order (so bootstraps are reproducible)."""
    return {
        (str(b), int(s)): g.to_numpy(dtype=float)
        for (b, s), g in rows.groupby(["backend", "size"], sort=True)["seconds"]
    }


def _envelope(medians: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Lowest median over the backends in ``members`` (axis -2), NaN where none was measured."""
    sub = medians[..., members, :]
    low = np.min(np.where(np.isnan(sub), np.inf, sub), axis=-2)
    return np.where(np.isinf(low), np.nan, low)


def _best_at(
    medians: np.ndarray, names: list[str], members: np.ndarray, i: int, j: int, frac: float
) -> str:
    """Backend of one family with the lowest log-interpolated median between size columns i, j."""
    best, best_t = None, math.inf
    for b in np.nonzero(members)[0]:
        t1, t2 = medians[b, i], medians[b, j]
        if np.isnan(t1) or np.isnan(t2):
            continue
        t = math.exp(math.log(t1) + frac * (math.log(t2) - math.log(t1)))
        if t < best_t:
            best, best_t = names[b], t
    if best is None:  # nobody measured at both ends: take the winner at the nearer one
        col = i if frac < 0.5 else j
        sub = np.where(members, medians[:, col], np.nan)
        best = names[int(np.nanargmin(sub))]
    return best


def _op_rows(
    df: pd.DataFrame,
    op: str,
    metric: str,
    dtype: str | None,
    cpu_backends: Collection[str] | None,
) -> tuple[pd.DataFrame, str]:
    """The rows of ``op`` in one dtype under ``metric``, the CPU side cut to ``cpu_backends``,
    and that dtype: every later step of ``crossover`` reads only these."""
    rows = metric_rows(df, metric)
    rows = rows[rows["op"] == op]
    dtype = pick_dtype(rows, f"op {op!r}", dtype)
    rows = rows[rows["dtype"] == dtype]
    if cpu_backends is not None:
        keep = rows["backend"].map(lambda b: not is_cpu_backend(b) or b in cpu_backends)
        rows = rows[keep.astype(bool)]
    return rows, dtype


def _positions(names: list[str], sizes: np.ndarray) -> tuple[dict[str, int], dict[Any, int]]:
    """Row of each backend and column of each size in a (backend, size) grid, so that the
    medians and their bootstrap resamples sit at the same places."""
    return {b: i for i, b in enumerate(names)}, {s: j for j, s in enumerate(sizes)}


def _median_grid(
    samples: dict[tuple[str, int], np.ndarray], names: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The measured sizes (ascending) and the (backend, size) grid of medians over them, NaN
    where a backend was not measured at a size: the envelopes compare families column by
    column."""
    sizes = np.array(sorted({s for _, s in samples}), dtype=float)
    row, col = _positions(names, sizes)
    medians = np.full((len(names), len(sizes)), np.nan)
    for (b, s), x in samples.items():
        medians[row[b], col[s]] = np.median(x)
    return sizes, medians


def _one_side_ahead(
    medians: np.ndarray,
    names: list[str],
    cpu: np.ndarray,
    sizes: np.ndarray,
    cols: np.ndarray,
    cuda_first: bool,
) -> tuple[str, str, dict[str, Any]]:
    """Status, note and backends when one family wins at every size measured by both: there is
    no crossing, so the backends are named where the other family comes closest to winning
    (the smallest size when CUDA wins everywhere, the largest when the CPU does)."""
    j = cols[0] if cuda_first else cols[-1]
    status = "cuda_everywhere" if cuda_first else "cpu_everywhere"
    where = "smallest" if cuda_first else "largest"
    note = (
        f"{status.replace('_', ' ')} over {len(cols)} sizes "
        f"{int(sizes[cols[0]])}..{int(sizes[cols[-1]])}; backends named at the {where}"
    )
    backends = dict(
        cpu_backend=names[int(np.nanargmin(np.where(cpu, medians[:, j], np.nan)))],
        cuda_backend=names[int(np.nanargmin(np.where(~cpu, medians[:, j], np.nan)))],
    )
    return status, note, backends


def _sign_change_notes(
    log_s: np.ndarray, r: np.ndarray, wins: np.ndarray, changes: int, downward: bool
) -> list[str]:
    """Notes on a crossing that is not the only one, or that runs CUDA -> CPU: a reader of the
    single reported size must know the families take turns, or that CUDA leads below it."""
    notes = []
    if changes > 1:
        # the stretch where the families take turns: from the first change to the last
        i = np.flatnonzero(wins[:-1] != wins[1:])
        turns = np.exp(interp_crossing(log_s[i], log_s[i + 1], r[i], r[i + 1]))
        notes.append(
            f"{changes} sign changes, between {turns.min():,.0f} and {turns.max():,.0f}; "
            "reporting the last CPU->CUDA"
        )
    if not downward:
        notes.append("CUDA ahead below, CPU ahead above")
    return notes


def _best_at_crossing(
    medians: np.ndarray,
    names: list[str],
    cpu: np.ndarray,
    cols: np.ndarray,
    log_s: np.ndarray,
    at: float,
) -> tuple[str, str]:
    """The best CPU and the best CUDA backend at log-size ``at``, interpolated between the two
    measured sizes around it: the envelope's winner may change between sizes."""
    k = int(np.searchsorted(log_s, at, side="left"))
    below, above = max(k - 1, 0), min(k, len(cols) - 1)
    span = log_s[above] - log_s[below]
    frac = (at - log_s[below]) / span if span > 0 else 0.0
    i, j = cols[below], cols[above]
    return _best_at(medians, names, cpu, i, j, frac), _best_at(medians, names, ~cpu, i, j, frac)


def _crossing_interval(
    samples: dict[tuple[str, int], np.ndarray],
    names: list[str],
    sizes: np.ndarray,
    cpu: np.ndarray,
    cols: np.ndarray,
    downward: bool,
    size: float,
    n_boot: int,
    seed: int,
) -> tuple[float, float]:
    """CI_LEVEL bootstrap interval of the crossing size: resample every (backend, size) group's
    repetitions, recompute both envelopes and the crossing in the same direction, take
    percentiles.  0.0 or inf where resamples put the crossing outside the measured sizes."""
    rng = np.random.default_rng(seed)
    row, col = _positions(names, sizes)
    boot = np.full((n_boot, len(names), len(sizes)), np.nan)
    for (b, s), x in samples.items():
        boot[:, row[b], col[s]] = bootstrap_medians(x, n_boot, rng)
    rb = np.log(_envelope(boot, ~cpu)[:, cols] / _envelope(boot, cpu)[:, cols])
    log_s = np.log(sizes[cols])
    vals = np.exp(last_crossing(log_s, rb, downward))  # -inf -> 0.0, +inf stays inf
    alpha = (1.0 - CI_LEVEL) / 2.0
    lo = float(np.quantile(vals, alpha, method="lower"))
    hi = float(np.quantile(vals, 1.0 - alpha, method="higher"))
    # A percentile interval of a discrete statistic (medians of resamples) can miss the point
    # estimate by a hair; widen it so that lo <= size <= hi always holds.
    return min(lo, size), max(hi, size)


def crossover(
    df: pd.DataFrame,
    op: str,
    metric: str,
    *,
    dtype: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    cpu_backends: Collection[str] | None = None,
) -> Crossover:
    """The size at which the best CUDA backend overtakes the best CPU backend for ``op``.

    ``cpu_backends`` limits the CPU side to those backends (``(ONE_CORE,)``: against numpy on
    one core); None takes every CPU backend measured.

    Best = lower envelope of each family's medians per size (any backend of the family may be
    the best at any size).  r(size) = log(t_cuda / t_cpu) over the sizes where both families
    were measured; the crossing is where r changes sign, interpolated linearly in log(size).
    With several sign changes the last CPU -> CUDA one is reported (the size from which on CUDA
    stays ahead), and the note says so and where the first and last changes lie (the stretch
    where the families take turns); if r only changes CUDA -> CPU, that change is reported.
    The interval resamples the repetitions of every (backend, size) group ``n_boot`` times,
    recomputes both envelopes and the crossing in the same direction, and takes percentiles.
    ``dtype`` may be omitted when the op was measured in one dtype only.
    Raises DataError for a frame holding several devices.
    """
    device = single_device(df)
    rows, dtype = _op_rows(df, op, metric, dtype, cpu_backends)
    against = "every CPU backend" if cpu_backends is None else ", ".join(sorted(cpu_backends))

    def result(status: str, note: str, **kw: Any) -> Crossover:
        fields: dict[str, Any] = dict(cpu_backend=None, cuda_backend=None, size=None)
        fields.update(lo=None, hi=None)
        fields.update(kw)
        return Crossover(
            device, op, dtype, metric, status=status, note=note, against=against, **fields
        )

    samples = _samples(rows)
    names = sorted({b for b, _ in samples})
    cpu = np.array([is_cpu_backend(b) for b in names], dtype=bool)
    if not cpu.any() or cpu.all():
        missing = "CPU" if not cpu.any() else "CUDA"
        return result("no_data", f"no {missing} rows for {op} under {metric}")
    sizes, medians = _median_grid(samples, names)
    both = ~np.isnan(_envelope(medians, cpu)) & ~np.isnan(_envelope(medians, ~cpu))
    if not both.any():
        return result("no_data", f"no size of {op} measured on both CPU and CUDA")
    cols = np.nonzero(both)[0]
    log_s = np.log(sizes[cols])
    r = np.log(_envelope(medians, ~cpu)[cols] / _envelope(medians, cpu)[cols])

    wins = r <= 0
    downs = int(np.sum(~wins[:-1] & wins[1:]))
    ups = int(np.sum(wins[:-1] & ~wins[1:]))
    if downs == 0 and ups == 0:
        status, note, backends = _one_side_ahead(medians, names, cpu, sizes, cols, bool(wins[0]))
        return result(status, note, **backends)
    downward = downs > 0
    at = float(last_crossing(log_s, r, downward))
    notes = _sign_change_notes(log_s, r, wins, downs + ups, downward)
    best_cpu, best_cuda = _best_at_crossing(medians, names, cpu, cols, log_s, at)
    size = math.exp(at)
    lo, hi = _crossing_interval(samples, names, sizes, cpu, cols, downward, size, n_boot, seed)
    if lo == 0.0 or math.isinf(hi):
        notes.append("interval reaches beyond the measured sizes")
    return result(
        "crossing",
        "; ".join(notes),
        cpu_backend=best_cpu,
        cuda_backend=best_cuda,
        size=size,
        lo=lo,
        hi=hi,
    )


# --------------------------------------------------------------------------------------------
# Where the time of a CUDA call goes


def _one_point_rows(
    df: pd.DataFrame, op: str, backend: str, host_memory: str, dtype: str | None
) -> pd.DataFrame:
    """Rows of one (op, backend, host memory, dtype) on one device; DataError if there are none."""
    check_columns(df)
    single_device(df)
    df = current_rows(df)
    rows = df[(df["op"] == op) & (df["backend"] == backend) & (df["host_memory"] == host_memory)]
    dtype = pick_dtype(rows, f"op {op!r} on {backend}", dtype)
    rows = rows[rows["dtype"] == dtype]
    if rows.empty:
        raise DataError(f"no rows for op {op!r} on {backend} with {host_memory} host memory")
    return rows


def _phase_medians(rows: pd.DataFrame, phases: tuple[str, ...]) -> pd.DataFrame:
    """Median seconds per size (index) and phase (columns ``<phase>_s``); NaN where missing."""
    sub = rows[rows["phase"].isin(phases)]
    wide = sub.groupby(["size", "phase"])["seconds"].median().unstack("phase")
    wide = wide.reindex(columns=list(phases))
    wide.columns = [f"{p}_s" for p in phases]
    wide.index = wide.index.astype("int64")
    return wide.sort_index()


def phase_shares(
    df: pd.DataFrame, op: str, backend: str, host_memory: str, *, dtype: str | None = None
) -> pd.DataFrame:
    """Median h2d, kernel and d2h seconds per size of one CUDA backend, and their shares.

    Columns: size, h2d_s, kernel_s, d2h_s, h2d_share, kernel_share, d2h_share.  The shares are
    of the sum of the three medians (so they add up to 1; the end-to-end wall time also holds
    host overhead that no phase sees).  Only sizes with all three phases measured are kept.
    """
    phases = ("h2d", "kernel", "d2h")
    wide = _phase_medians(_one_point_rows(df, op, backend, host_memory, dtype), phases).dropna()
    total = wide.sum(axis=1)
    for p in phases:
        wide[f"{p}_share"] = wide[f"{p}_s"] / total
    return wide.rename_axis("size").reset_index()


@dataclass(frozen=True)
class BusFit:
    """One direction of the bus: t(nbytes) = latency_s + nbytes / bandwidth_Bps."""

    latency_s: float
    bandwidth_Bps: float
    direction: str
    host_memory: str

    def seconds(self, nbytes: np.ndarray | float) -> np.ndarray:
        return self.latency_s + np.asarray(nbytes, dtype=float) / self.bandwidth_Bps


def bus_fit(df: pd.DataFrame, direction: str, host_memory: str) -> BusFit:
    """Fit t = latency + bytes / bandwidth to the medians of the bus rows of one direction.

    Bus rows: op "copy_h2d" / "copy_d2h", phase "transfer", size = bytes copied.  The fit is a
    least-squares fit of the *relative* error, sum(((latency + s / bw) - t) / t)^2, which is a
    linear problem in (latency, 1 / bw) with rows weighted by 1 / t.  Absolute least squares
    would let the largest copies (milliseconds) decide everything and leave the latency (a few
    microseconds) to noise; in relative error the small copies pin the latency and the large
    ones the bandwidth.  A negative latency is clamped to 0 and the bandwidth refitted.
    Raises DataError with fewer than two sizes or when the times do not grow with size.
    """
    if direction not in ("h2d", "d2h"):
        raise DataError(f"bus direction must be 'h2d' or 'd2h', not {direction!r}")
    check_columns(df)
    single_device(df)
    op = f"copy_{direction}"
    rows = df[(df["op"] == op) & (df["phase"] == "transfer") & (df["host_memory"] == host_memory)]
    med = rows.groupby("size")["seconds"].median()
    if len(med) < 2:
        raise DataError(
            f"bus fit {direction} ({host_memory}) needs at least two copy sizes, has {len(med)}"
        )
    s = med.index.to_numpy(dtype=float)
    t = med.to_numpy(dtype=float)
    design = np.column_stack([1.0 / t, s / t])
    (latency, inv_bw), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if latency < 0:
        latency = 0.0
        inv_bw = float(np.sum(s / t) / np.sum((s / t) ** 2))
    if not inv_bw > 0:
        raise DataError(
            f"bus times {direction} ({host_memory}) do not grow with size; no bandwidth to fit"
        )
    return BusFit(float(latency), float(1.0 / inv_bw), direction, host_memory)


def io_bytes(
    op: str, shape: str, nbytes: int, dtype: str, size: int | None = None
) -> tuple[int, int]:
    """(input bytes, output bytes) of one call, from the row's ``nbytes`` (inputs + output).

    matmul and its variants: output m*n*itemsize from the shape "MxKxN" (or "BxMxKxN" with a
    batch); another variant (ops.VARIANTS): its sample's output at the row's ``size``;
    reductions (the sweep's are full ones): one element out;
    elementwise ops: inputs of the output's size, so output = nbytes / (arity + 1), the arity
    from the op registry (1 for an op it does not know).
    """
    itemsize = np.dtype(dtype).itemsize
    if op in VARIANTS and base_op(op) != "matmul" and size is not None:
        out = numel(variant_sample(op, int(size))[2]) * itemsize
    elif base_op(op) == "matmul":
        dims = [int(d) for d in str(shape).split("x")]
        if len(dims) not in (3, 4):
            raise DataError(f"matmul shape {shape!r} is not MxKxN or BxMxKxN")
        batch = dims[0] if len(dims) == 4 else 1
        m, _, n = dims[-3:]
        out = batch * m * n * itemsize
    elif op in OPS and OPS[op].kind == "reduction":
        out = itemsize
    else:
        out = nbytes // ((OPS[op].arity if op in OPS else 1) + 1)
    return int(nbytes) - out, out


def transfer_model(
    df: pd.DataFrame, op: str, backend: str, host_memory: str, *, dtype: str | None = None
) -> pd.DataFrame:
    """The transfer model of one CUDA backend against what its end-to-end rows measured.

    Columns: size, model_s, transfer_s, kernel_s, measured_s, with
    transfer_s = latency_h2d + in_bytes / bw_h2d + latency_d2h + out_bytes / bw_d2h (bus_fit of
    each direction for ``host_memory``; bytes from io_bytes), kernel_s the measured kernel
    median, model_s = transfer_s + kernel_s and measured_s the end-to-end median (NaN if that
    phase was not measured).  One shape per size is required (DataError otherwise).
    """
    rows = _one_point_rows(df, op, backend, host_memory, dtype)
    h2d, d2h = bus_fit(df, "h2d", host_memory), bus_fit(df, "d2h", host_memory)
    wide = _phase_medians(rows, ("kernel", "end_to_end")).dropna(subset=["kernel_s"])
    points = rows.drop_duplicates(["size", "shape", "nbytes"]).set_index("size")
    if not points.index.is_unique:
        dup = points.index[points.index.duplicated()][0]
        raise DataError(f"op {op!r} on {backend} has several shapes at size {dup}")
    transfer = []
    for size in wide.index:
        p = points.loc[size]
        in_b, out_b = io_bytes(op, p["shape"], int(p["nbytes"]), str(p["dtype"]), int(size))
        transfer.append(float(h2d.seconds(in_b) + d2h.seconds(out_b)))
    out = pd.DataFrame(
        {
            "size": wide.index.to_numpy(dtype="int64"),
            "transfer_s": transfer,
            "kernel_s": wide["kernel_s"].to_numpy(),
            "measured_s": wide["end_to_end_s"].to_numpy(),
        }
    )
    out.insert(1, "model_s", out["transfer_s"] + out["kernel_s"])
    return out


def transfer_dominance_size(
    df: pd.DataFrame, op: str, backend: str, host_memory: str, *, dtype: str | None = None
) -> int | None:
    """The smallest measured size from which on the kernel outweighs the modelled transfer
    (``dominance_size`` of ``transfer_model``)."""
    return dominance_size(transfer_model(df, op, backend, host_memory, dtype=dtype))


def dominance_size(model: pd.DataFrame) -> int | None:
    """The smallest size s of a ``transfer_model`` frame with kernel_s > transfer_s at s and at
    every larger size (so a tiny size where the launch cost happens to beat a short copy does
    not count).  None if the transfer still dominates at the largest size.
    """
    kernel_wins = (model["kernel_s"] > model["transfer_s"]).to_numpy()
    if not len(kernel_wins) or not kernel_wins[-1]:
        return None
    # Walk back from the largest size while the kernel still dominates.
    first = len(kernel_wins) - 1
    while first > 0 and kernel_wins[first - 1]:
        first -= 1
    return int(model["size"].iloc[first])
