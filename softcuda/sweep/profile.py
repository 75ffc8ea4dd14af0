"""From raw timings to CONFIG.soft: decisions, the [costs] curves, the [bus] fit (with the
sweep's launch and hand-off figures: ``launch_us``, ``switch_us``), provenance; archiving old
profiles.

Every rule carries, as comment lines above it, the contenders' medians at the bucket's edge and
the crossover with its interval (``select.Bucket.note``), so a reader of CONFIG.soft sees why.
Ops the sweep did not measure keep DEFAULT.soft's choice and say so; a variant the sweep did not
measure (``ops.VARIANTS``) gets no lines, and is decided and priced as its op.  [costs] holds every
measured (op, backend)'s resident medians (``resident_costs``), read from the same attempts.
Timings of a backend or an op this softcuda does not know, or none of any op at all, are refused
(DataError): a profile decided without them would not be what the sweep measured.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

import pandas as pd

from ..backends import BACKENDS
from ..config import (
    UNMEASURED_NOTE,
    Config,
    ConfigError,
    CostCurve,
    Rule,
    default_config,
    load_config,
)
from ..device import slug
from ..errors import DataError
from ..ops import CONFIGURABLE_OPS, PROFILE_OPS
from ..pool import DEFAULT_BLOCK_SIZE
from ..timings import schema
from ..timings.select import PREFERRED_DTYPE, decide
from ..timings.stats import (
    bus_fit,
    curves,
    fastest_rows,
    pick_dtype,
    shared_kernels,
)
from ..version import __version__
from . import storage
from .launch import launch_line
from .machine import Machine
from .profile_file import HEADER as HEADER
from .profile_file import write_profile as write_profile
from .spec import Spec
from .switch import switch_line


def build_profile(
    frame: pd.DataFrame,
    machine: Machine,
    spec: Spec,
    spec_path: str,
    csv_path: Path,
    elapsed_s: float | None = None,
    launch: dict | None = None,
    switch: dict | None = None,
) -> Config:
    """The profile of a sweep's rows: its rules, [costs], [bus] (with the sweep's launch and
    hand-off figures, each only where it is a measurement the line can hold), [sweep] and
    provenance; DataError where the rows are not one sweep's timings of what softcuda knows."""
    refuse_foreign(frame, csv_path)
    cuda = machine.device_type == "cuda"
    measured = frame[frame["backend"] != schema.PROBE_BACKEND]
    sweep = {
        "spec": spec_path,
        "metric": spec.metric,
        "dtype": spec.dtype,
        "csv": str(csv_path),
        "points": str(len(measured.groupby(["op", "size", "backend"]))),
    }
    if elapsed_s is not None:
        sweep["elapsed_s"] = f"{elapsed_s:.1f}"
    return Config(
        path="CONFIG.soft",
        meta={
            "soft_version": __version__,
            "device_hash": machine.device_hash,
            "generated_at": storage.now(),
            "hash_string": machine.hash_string,
        },
        device=dict(machine.fields),
        rules=decided_rules(frame, spec, csv_path),
        costs=resident_costs(frame),
        pool={
            "device": "cuda" if cuda else "cpu",
            "block_size": str(DEFAULT_BLOCK_SIZE),
            "host_memory": "pinned" if cuda and spec.metric == "e2e_pinned" else "pageable",
        },
        bus=bus_lines(frame, spec, launch, switch),
        sweep=sweep,
    )


def refuse_foreign(frame: pd.DataFrame, csv_path: Path) -> None:
    """DataError where ``frame`` holds timings of a backend or an op this softcuda does not
    know, or of more than one dtype."""
    # A profile names only backends this softcuda has: deciding without a backend the sweep
    # timed would hand its sizes to the runner-up and call that the measurement.
    known = {*BACKENDS, "bus", schema.PROBE_BACKEND}
    unknown = sorted({str(b) for b in frame["backend"].unique()} - known)
    if unknown:
        raise DataError(
            f"{csv_path}: holds timings of backend(s) {', '.join(unknown)}, which this "
            f"softcuda does not know (it knows {', '.join(BACKENDS)}); no profile is decided "
            "without them"
        )
    strange = sorted({str(op) for op in frame["op"].unique()} - {*PROFILE_OPS, *schema.BUS_OPS})
    if strange:  # a rule for it would be refused as the profile's line, not as this CSV's
        raise DataError(
            f"{csv_path}: holds timings of op(s) {', '.join(strange)}, which this softcuda "
            f"does not know (it knows {', '.join(PROFILE_OPS)})"
        )
    # one sweep measures one dtype; selection and the costs would pick float32's rows of a CSV
    # of several and write them as the profile of all (probe rows are float32 whatever the
    # sweep's dtype, bus rows bytes: neither is a dtype of the timings)
    measured = ~frame["op"].isin(schema.BUS_OPS) & ~frame["backend"].isin(
        ("bus", schema.PROBE_BACKEND)
    )
    timings = frame[measured]
    per_dtype = timings["dtype"].astype(str).value_counts().sort_index()
    if len(per_dtype) > 1:
        counts = ", ".join(f"{dtype}: {n:,} rows" for dtype, n in per_dtype.items())
        raise DataError(
            f"{csv_path}: holds timings in {len(per_dtype)} dtypes ({counts}), and a profile "
            "is decided from one; split the CSV by dtype and decide from one dtype's rows"
        )


def decided_rules(frame: pd.DataFrame, spec: Spec, csv_path: Path) -> dict[str, list[Rule]]:
    """Each measured op's rules as selection decides them, every other configurable op's as
    DEFAULT.soft has them (and saying so); DataError where no op was measured."""
    decisions = decide(frame, spec.metric) if len(frame) else {}  # bus rows drop out
    if not decisions:  # a profile of DEFAULT.soft's rules alone would pass for a measurement
        raise DataError(
            f"{csv_path}: holds no timings of any op under metric {spec.metric} (only "
            "probe or bus rows), so there is nothing to decide a profile from"
        )
    rules: dict[str, list[Rule]] = {}
    for op, buckets in decisions.items():
        rules[op] = [Rule(op, b.lo, b.hi, b.backend, note=(b.note,)) for b in buckets]
    fallback = default_config()
    unmeasured = (f"{UNMEASURED_NOTE} '{spec.name}': DEFAULT.soft's choice",)
    for op in CONFIGURABLE_OPS:
        if op not in rules:
            rules[op] = [
                Rule(op, r.lo, r.hi, r.backend, note=unmeasured) for r in fallback.rules[op]
            ]
    return rules


def bus_lines(
    frame: pd.DataFrame, spec: Spec, launch: dict | None, switch: dict | None
) -> dict[str, str]:
    """The [bus] section: the copy model fitted per direction and host memory kind, then the
    host's time to issue a GPU step and a GPU->CPU hand-off beyond its copy by bytes, each only
    where the sweep's figures are a measurement the line can hold."""
    bus: dict[str, str] = {}
    for direction in ("h2d", "d2h"):
        for kind in spec.host_memory:
            try:
                fit = bus_fit(frame, direction, kind)
            except DataError:
                continue
            bus[f"{direction}_{kind}_gbps"] = f"{fit.bandwidth_Bps / 1e9:.2f}"
            bus[f"{direction}_{kind}_latency_us"] = f"{fit.latency_s * 1e6:.2f}"
    for key, line in (("launch_us", launch_line(launch)), ("switch_us", switch_line(switch))):
        if line is not None:
            bus[key] = line
    return bus


def resident_costs(frame: pd.DataFrame) -> dict[str, dict[str, CostCurve]]:
    """Each measured (op, backend)'s curve of resident medians, op -> backend -> curve.

    The medians are ``stats.curves`` under the ``resident`` metric: each series' fastest
    attempt (``stats.fastest_rows``; selection reads each point's steadiest), CPU backends'
    ``wall`` rows, CUDA backends' ``kernel`` rows.  A CUDA kernel is timed once from pinned
    and once from pageable
    host memory, and the metric pools the two: the kernel runs on data already on the device
    and never sees where the host's copy lives, so both runs measure the same thing and the
    median stands on twice the repetitions.  One dtype per op, the one selection decides by.
    Times are kept to the three significant digits the profile writes, so that the profile in
    memory is the one on disk; a median that is not above zero (a CSV from elsewhere) has no
    place on a log-log curve and is left out, as is a curve left with no point."""
    costs: dict[str, dict[str, CostCurve]] = {}
    if not len(frame):
        return costs
    # bus and probe rows drop out; a backend's timings read as its kernels ran, as selection
    # reads them (cpu_threads' small sizes are cpu_fallback's: the planner keeps the simpler)
    medians = curves(shared_kernels(fastest_rows(frame)), "resident")
    for op, rows in medians.groupby("op", sort=True):
        dtype = pick_dtype(rows, f"op {op!r}", None, prefer=PREFERRED_DTYPE)
        rows = rows[(rows["dtype"] == dtype) & (rows["size"] >= 1) & (rows["median_s"] > 0)]
        for backend, points in rows.groupby("backend", sort=True):
            points = points.sort_values("size")
            costs.setdefault(str(op), {})[str(backend)] = CostCurve(
                str(op),
                tuple(int(z) for z in points["size"]),
                tuple(float(f"{t:.2e}") for t in points["median_s"]),
            )
    return costs


def unstable_points(frame: pd.DataFrame, metric: str) -> dict[str, int]:
    """Per op measured, how many of its points ``curves`` flags unstable under ``metric``
    (large spread, too short, or measured while the host was off its best speed)."""
    unstable: dict[str, int] = {}
    if len(frame):
        for op, flags in curves(frame, metric).groupby("op")["unstable"]:  # bus rows drop out
            unstable[str(op)] = int(flags.sum())
    return unstable


UNREADABLE = "unreadable"
"""The folder under results/ that a profile which could not be read is archived in."""


def archive_if_foreign(target: Path, new_hash: str, results_dir: Path) -> Path | None:
    """Copy ``target`` under results/<its device>/ when it profiles another device.

    A profile that cannot be read is archived too (never destroy what we cannot judge).
    Returns where it went, or None when nothing needed archiving.
    """
    if not target.exists():
        return None
    try:
        old = load_config(target)
        if old.device_hash == new_hash:
            return None
        label = old.device.get("name") or old.device.get("cpu_model") or old.device_hash[:12]
        stamp = old.meta.get("generated_at", "")
    except ConfigError:
        label, stamp = UNREADABLE, ""
    stamp = "".join(c for c in stamp if c.isalnum()) or _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    folder = results_dir / slug(label)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"CONFIG-{stamp}.soft"
    n = 1
    while dest.exists():
        if dest.read_bytes() == target.read_bytes():
            return dest
        dest = folder / f"CONFIG-{stamp}-{n}.soft"
        n += 1
    shutil.copy2(target, dest)
    return dest
