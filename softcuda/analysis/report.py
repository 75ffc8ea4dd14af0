"""From a raw-timings frame to everything the figures and the crossover table need.

``build_report(df)`` runs the statistics (``softcuda.timings.stats``) once per device and
returns a ``Report`` whose frames have the columns ``softcuda.analysis.plots`` expects;
``write_figures(report, out_dir)`` draws them, and ``summary_markdown(report)`` writes the tables.
No printing and no click: ``softcuda plot`` and the sweep both sit on top of this.

Invariants
- Devices are never pooled.  The frame is split by device label before any statistic; a label
  that carries several device hashes (a driver update, a second card of one model) is split
  further and relabelled ``"<label> [<hash prefix>]"``, so every curve belongs to one machine.
- Crossovers are computed per device, op, dtype and metric (every metric of
  ``schema.METRICS``), with bootstrap intervals.
- The "best CUDA backend" of an (op, dtype) on a device is the one that is fastest at the most
  sizes under the default metric (ties: the faster at the largest size); the phase shares and
  the transfer model are drawn for it alone, to keep the figures readable.
- The transfer model and the dominance size need bus calibration rows for the host memory kind;
  where they are missing (or too few to fit) those parts are left out, not an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from softcuda.analysis import plots
from softcuda.errors import DataError
from softcuda.timings import schema, stats

HOST_MEMORY_ORDER = ("pinned", "pageable")


@dataclass(frozen=True)
class Dominance:
    """From ``size`` on, the kernel outweighs the modelled transfers (None: never measured)."""

    device: str
    op: str
    dtype: str
    backend: str
    host_memory: str
    size: int | None


@dataclass(frozen=True, eq=False)
class Report:
    """Statistics of one set of CSVs, shaped for ``plots`` (see the module docstring).

    curves: plots.CURVE_COLUMNS (plus the statistics' spread columns), one row per device, op,
    dtype, backend, size and metric.  shares: plots.SHARE_COLUMNS plus dtype.  bus:
    plots.BUS_COLUMNS.  model: plots.MODEL_COLUMNS plus dtype.  best_cuda: (device, op, dtype)
    -> backend id.
    """

    ops: tuple[str, ...]
    devices: tuple[str, ...]
    curves: pd.DataFrame
    crossovers: tuple[stats.Crossover, ...]
    shares: pd.DataFrame
    bus: pd.DataFrame
    model: pd.DataFrame
    dominance: tuple[Dominance, ...]
    best_cuda: dict[tuple[str, str, str], str]

    @property
    def has_cuda(self) -> bool:
        return bool(self.curves["backend"].map(stats.is_cuda_backend).any())


def build_report(
    df: pd.DataFrame, *, ops: Iterable[str] | None = None, n_boot: int = 1000, seed: int = 0
) -> Report:
    """Curves, crossovers, phase shares, bus medians and transfer model of ``df``.

    ``ops`` restricts the report to those ops (DataError naming the ops present if one has no
    rows).  ``n_boot`` and ``seed`` go to ``stats.crossover``.
    """
    stats.check_columns(df)
    df = _label_devices(df)
    df = stats.current_rows(df)  # each point's steadiest attempt, chosen once for all below
    df = stats.shared_kernels(df)  # cpu_threads' small sizes are cpu_fallback's kernel's
    bus_mask = df["op"].isin(schema.BUS_OPS) | (df["backend"] == "bus")
    # the probe's rows ride along every point in float32 whatever the sweep's dtype: they
    # judge the host (stats.curves reads them) but make no op or dtype of their own
    probe = df["backend"] == schema.PROBE_BACKEND
    present = _report_ops(df, bus_mask, probe, ops)
    keep = bus_mask | df["op"].isin(present)
    df = df[keep]

    parts = _Parts()
    devices = sorted(str(d) for d in df["device"].unique())
    for device in devices:
        dev = df[df["device"] == device]
        is_bus, is_probe = bus_mask.loc[dev.index], probe.loc[dev.index]
        _add_device(parts, device, dev, is_bus, is_probe, present, n_boot, seed)
    return Report(
        ops=tuple(present),
        devices=tuple(devices),
        curves=_concat(parts.curves, plots.CURVE_COLUMNS),
        crossovers=tuple(parts.crossovers),
        shares=_concat(parts.shares, (*plots.SHARE_COLUMNS, "dtype")),
        bus=_concat(parts.bus, plots.BUS_COLUMNS),
        model=_concat(parts.model, (*plots.MODEL_COLUMNS, "dtype")),
        dominance=tuple(parts.dominance),
        best_cuda=parts.best_cuda,
    )


@dataclass
class _Parts:
    """What ``build_report`` gathers device by device, before it concatenates each kind into
    one frame of the ``Report``."""

    curves: list[pd.DataFrame] = field(default_factory=list)
    crossovers: list[stats.Crossover] = field(default_factory=list)
    shares: list[pd.DataFrame] = field(default_factory=list)
    bus: list[pd.DataFrame] = field(default_factory=list)
    model: list[pd.DataFrame] = field(default_factory=list)
    dominance: list[Dominance] = field(default_factory=list)
    best_cuda: dict[tuple[str, str, str], str] = field(default_factory=dict)


def _report_ops(
    df: pd.DataFrame, bus_mask: pd.Series, probe: pd.Series, ops: Iterable[str] | None
) -> list[str]:
    """The ops to report: every op with timings (sorted), or ``ops`` in the caller's order.
    DataError when the frame holds nothing to draw, or an asked-for op has no rows, so that a
    misspelt op is named rather than drawn as an empty figure."""
    present = sorted(str(o) for o in df.loc[~bus_mask & ~probe, "op"].unique())
    if not present and not bus_mask.any():
        raise DataError(
            "the CSVs hold only probe rows (the host's speed beside each point), no timings "
            "of any backend to draw"
        )
    if ops is not None:
        wanted = list(dict.fromkeys(ops))
        missing = [o for o in wanted if o not in present]
        if missing:
            held = ", ".join(present) if present else "none (bus rows only)"
            raise DataError(f"the CSVs hold no rows for op {', '.join(missing)}; ops: {held}")
        present = wanted
    return present


def _add_device(
    parts: _Parts,
    device: str,
    dev: pd.DataFrame,
    is_bus: pd.Series,
    is_probe: pd.Series,
    present: list[str],
    n_boot: int,
    seed: int,
) -> None:
    """Add one device's curves, bus medians and, per (op, dtype), its crossovers, best CUDA
    backend, phase shares and transfer model to ``parts``.  Only this device's rows are read:
    devices are never pooled."""
    dev_bus = dev[is_bus]
    dev_curves_all = _device_curves(dev[~is_bus])
    parts.curves.append(dev_curves_all)
    parts.bus.append(_bus_medians(dev_bus, device))
    for op in present:
        op_rows = dev[(dev["op"] == op) & ~is_probe]
        for dtype in sorted(str(d) for d in op_rows["dtype"].unique()):
            rows = op_rows[op_rows["dtype"] == dtype]
            parts.crossovers.extend(_crossovers(rows, op, dtype, n_boot, seed))
            best = _best_cuda(dev_curves_all, op, dtype)
            if best is None:
                continue
            parts.best_cuda[(device, op, dtype)] = best
            _add_best_cuda(parts, rows, dev_bus, device, op, dtype, best)


def _device_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """One device's curves under every metric, stacked with a ``metric`` column: the figures
    draw each metric from one frame."""
    dev_curves = []
    for metric in schema.METRICS:
        c = stats.curves(rows, metric)
        dev_curves.append(c.assign(metric=metric))
    return pd.concat(dev_curves, ignore_index=True)


def _crossovers(
    rows: pd.DataFrame, op: str, dtype: str, n_boot: int, seed: int
) -> list[stats.Crossover]:
    """The crossovers of one (op, dtype) under every metric: against the whole CPU and, where
    it has more than numpy on one core, against that core alone too (what a single-threaded
    baseline would have concluded)."""
    cpu_sides: list[tuple[str, ...] | None] = [None]
    present_cpu = {b for b in rows["backend"].unique() if stats.is_cpu_backend(b)}
    if stats.ONE_CORE in present_cpu and len(present_cpu) > 1:
        cpu_sides.append((stats.ONE_CORE,))
    return [
        stats.crossover(rows, op, metric, dtype=dtype, n_boot=n_boot, seed=seed, cpu_backends=side)
        for metric in schema.METRICS
        for side in cpu_sides
    ]


def _add_best_cuda(
    parts: _Parts,
    rows: pd.DataFrame,
    dev_bus: pd.DataFrame,
    device: str,
    op: str,
    dtype: str,
    best: str,
) -> None:
    """Add the phase shares, transfer model and dominance size of the best CUDA backend of one
    (op, dtype) to ``parts``, per host memory kind.  The model needs bus rows of that kind and
    enough of them to fit; without, it is left out (not an error)."""
    bus_kinds = set(dev_bus["host_memory"])
    keys = dict(device=device, op=op, dtype=dtype, backend=best)
    for kind in _ordered_kinds(rows.loc[rows["backend"] == best, "host_memory"]):
        part = stats.phase_shares(rows, op, best, kind, dtype=dtype)
        if len(part):
            parts.shares.append(part.assign(**keys, host_memory=kind))
        if kind not in bus_kinds:
            continue
        with_bus = pd.concat([rows, dev_bus])
        try:
            m = stats.transfer_model(with_bus, op, best, kind, dtype=dtype)
            size = stats.dominance_size(m)
        except DataError:
            continue  # too few bus sizes to fit, or no kernel rows: no model
        if len(m):
            parts.model.append(m.assign(**keys, host_memory=kind))
            parts.dominance.append(Dominance(device, op, dtype, best, kind, size))


def write_figures(
    report: Report,
    out_dir: str | Path,
    formats: Sequence[str] = ("png",),
    *,
    date: str | None = None,
) -> Iterator[Path | str]:
    """Draw every figure of ``report``; yield each path as it is written, and a note (str) for
    each figure that cannot be drawn and why.

    Per op (and dtype, when an op was measured in several): time; speedup where some device has
    both CPU and CUDA rows at a common size; decomposition where CUDA phases exist.  Then the
    bus figure once, when bus rows exist.
    """
    if not report.has_cuda and report.ops:
        yield "no CUDA data in the CSVs: time figures only (no speedup, no decomposition)"
    for op in report.ops:
        op_curves = report.curves[report.curves["op"] == op]
        dtypes = sorted(str(d) for d in op_curves["dtype"].unique())
        for dtype in dtypes:
            pick = dtype if len(dtypes) > 1 else None  # plots add the dtype to the file name
            what = op if pick is None else f"{op} ({dtype})"
            rows = op_curves[op_curves["dtype"] == dtype]
            cross = [c for c in report.crossovers if c.op == op and c.dtype == dtype]
            model = report.model[(report.model["op"] == op) & (report.model["dtype"] == dtype)]
            yield from plots.plot_time(
                rows,
                cross,
                op,
                out_dir,
                formats,
                model if len(model) else None,
                dtype=pick,
                date=date,
            )
            if not report.has_cuda:
                continue
            cuda = rows["backend"].map(stats.is_cuda_backend)
            if any(c.status != "no_data" for c in cross):
                yield from plots.plot_speedup(
                    rows, cross, op, out_dir, formats, dtype=pick, date=date
                )
            elif not cuda.any():
                yield f"{what}: no CUDA data, so no speedup or decomposition figure"
            else:
                side = "CPU" if cuda.all() else "both CPU and CUDA at one size"
                yield f"{what}: no {side} data, so no speedup figure"
            shares = report.shares[(report.shares["op"] == op) & (report.shares["dtype"] == dtype)]
            if len(shares):
                yield from plots.plot_decomposition(
                    shares, op, out_dir, formats, dtype=pick, date=date
                )
            elif cuda.any():
                yield f"{what}: no h2d/kernel/d2h rows, so no decomposition figure"
    if len(report.bus):
        yield from plots.plot_bus(report.bus, out_dir, formats, date=date)


_FLAG_KINDS = (  # the start of each reason stats.curves gives, and its column here
    ("IQR", "large spread"),
    ("median below", "too short"),
    ("only", "too few repetitions"),
    ("host", "host off its best speed"),
)


def summary_markdown(report: Report) -> str:
    """The crossover table, then where the transfers stop dominating (when bus rows exist),
    then how many points of each op and metric are flagged unstable, and why."""
    out = [
        "## Crossovers: best CPU vs best CUDA backend",
        "",
        plots.crossover_table(report.crossovers),
    ]
    if report.dominance:
        out += [
            "## Where the kernel starts to outweigh the transfers (transfer model)",
            "",
            "| device | op | dtype | CUDA backend | host memory | from size |",
            "|---|---|---|---|---|---|",
        ]
        for d in report.dominance:
            size = "beyond the largest size measured" if d.size is None else f"{d.size:,}"
            out.append(
                f"| {d.device} | {d.op} | {d.dtype} | {d.backend} | {d.host_memory} | {size} |"
            )
        out.append("")
    out += _flag_table(report.curves)
    return "\n".join(out)


def _flag_table(curves: pd.DataFrame) -> list[str]:
    """Markdown lines: per device, op and metric, the (backend, size) points flagged unstable
    and how many for each reason (a point can have several); none when nothing is flagged."""
    if "unstable" not in curves.columns or not curves["unstable"].any():
        return []
    lines = [
        "## Points flagged unstable (listed here, never dropped)",
        "",
        "| device | op | metric | points | flagged | "
        + " | ".join(name for _, name in _FLAG_KINDS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(_FLAG_KINDS),
    ]
    for (device, op, metric), group in curves.groupby(["device", "op", "metric"], sort=True):
        flagged = group[group["unstable"]]
        if flagged.empty:
            continue
        reasons = "; " + flagged["reason"]  # each reason then starts after "; "
        counts = [int(reasons.str.contains("; " + k, regex=False).sum()) for k, _ in _FLAG_KINDS]
        lines.append(
            f"| {device} | {op} | {metric} | {len(group)} | {len(flagged)} | "
            + " | ".join(str(c) for c in counts)
            + " |"
        )
    return [*lines, ""]


# --- helpers -------------------------------------------------------------------------------------


def _label_devices(df: pd.DataFrame) -> pd.DataFrame:
    """Relabel devices whose label covers several device hashes (see the module docstring)."""
    if "device_hash" not in df.columns:
        return df
    hashes = df.groupby("device")["device_hash"].nunique()
    shared = set(hashes[hashes > 1].index)
    if not shared:
        return df
    label = df["device"].astype(str)
    split = df["device"].isin(shared)
    label[split] = label[split] + " [" + df.loc[split, "device_hash"].astype(str).str[:8] + "]"
    return df.assign(device=label)


def _bus_medians(rows: pd.DataFrame, device: str) -> pd.DataFrame:
    rows = rows[(rows["phase"] == "transfer") & rows["op"].isin(schema.BUS_OPS)]
    if rows.empty:
        return pd.DataFrame(columns=list(plots.BUS_COLUMNS))
    seconds = rows.groupby(["op", "host_memory", "size"])["seconds"]
    out = pd.DataFrame(
        {
            "median_s": seconds.median(),
            "q25_s": seconds.quantile(0.25),
            "q75_s": seconds.quantile(0.75),
        }
    ).reset_index()
    return out.assign(
        device=device,
        direction=out["op"].str.removeprefix("copy_"),
        nbytes=out["size"].astype("int64"),
    )[list(plots.BUS_COLUMNS)]


def _best_cuda(curves: pd.DataFrame, op: str, dtype: str) -> str | None:
    """The CUDA backend fastest at the most sizes under the default metric (or, without those
    rows, the first metric that has CUDA rows); None when the op has no CUDA rows."""
    rows = curves[(curves["op"] == op) & (curves["dtype"] == dtype)]
    rows = rows[rows["backend"].map(stats.is_cuda_backend).astype(bool)]  # (an empty map is
    # of dtype object, which pandas would read as a list of column names)
    for metric in (schema.DEFAULT_METRIC, *schema.METRICS):
        part = rows[rows["metric"] == metric]
        if part.empty:
            continue
        winners = part.loc[part.groupby("size")["median_s"].idxmin()]
        wins = winners["backend"].value_counts()
        top = wins[wins == wins.max()].index
        largest = part[part["backend"].isin(top)].sort_values(
            ["size", "median_s"], ascending=[False, True]
        )
        return str(largest["backend"].iloc[0])
    return None


def _ordered_kinds(values: Iterable[str]) -> list[str]:
    present = set(values)
    return [k for k in HOST_MEMORY_ORDER if k in present]


def _concat(frames: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(frames, ignore_index=True)
