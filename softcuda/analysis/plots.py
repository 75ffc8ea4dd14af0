"""The crossover figures and the crossover table for the writeup.

Inputs are the statistics module's results (plain DataFrames and crossover objects); nothing is
recomputed here except the ratios a figure shows.  Columns expected:

- curves: device, op, dtype, backend, size, n, median_s, q25_s, q75_s, metric
- crossovers: objects with device, op, metric, size (float | None), lo, hi, cpu_backend,
  cuda_backend, status, and optionally against (the CPU side: "every CPU backend", the default,
  or "cpu_fallback" for numpy on one core)
- shares: device, op, backend, host_memory, size, h2d_s, kernel_s, d2h_s
- bus: device, direction ("h2d" | "d2h"), host_memory, nbytes, median_s, q25_s, q75_s
- model: device, op, backend, host_memory, size, model_s

Invariants:
- Devices are never pooled: every line, band and panel belongs to one device; several devices
  overlay in one figure, told apart by marker (one legend entry per device).
- A backend is CUDA when its id starts with "cuda"; everything else is a CPU backend.  CPU rows
  are the same wall-clock measurement under every metric, so a CPU backend is drawn once.
- Each ``*_figure`` function builds and returns a matplotlib ``Figure`` without touching pyplot's
  global state (no window, no backend switch: figures render through Agg, or the pdf/svg
  canvases); each ``plot_*`` function saves that figure as ``<out_dir>/<stem>.<format>`` for every
  format and returns the paths written, in the order of ``formats``.  Stems are deterministic:
  ``<op>_time``, ``<op>_speedup``, ``<op>_decomposition``, ``bus_bandwidth`` (with ``_<dtype>``
  after the op when a dtype is picked explicitly).
- A title ends with when the data were measured: ``date`` (the caller reads it from the sweeps,
  ``timings.load.sweep_date``), or "date unknown"; never the day of drawing.
- The style lives in ``STYLE`` and the colour/line tables below it, and nowhere else.
- Problems with the inputs (missing columns, nothing to draw) raise ``DataError``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from softcuda.errors import DataError
from softcuda.ops import VARIANTS
from softcuda.timings import schema
from softcuda.timings.stats import ONE_CORE, is_cuda_backend

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = ("png", "pdf", "svg")

# Sized for a paper: 8 pt text, thin lines, fonts embedded as text (TrueType in PDF, real <text>
# in SVG, so figures stay editable and searchable), a fixed hash salt so SVG ids do not change
# from run to run.
STYLE: dict[str, Any] = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "lines.linewidth": 1.2,
    "lines.markersize": 3,
    "axes.grid": True,
    "axes.grid.which": "major",
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "none",
    "svg.hashsalt": "softcuda",
}
BACKEND_COLORS = {
    "cpu_fallback": "#7f7f7f",
    "cpu_blas": "#1f77b4",
    "cuda_naive": "#ff7f0e",
    "cuda_tiled": "#2ca02c",
    "cuda_elementwise": "#d62728",
    "cuda_blas": "#9467bd",
}
_SPARE_COLORS = ("#8c564b", "#e377c2", "#bcbd22", "#17becf")
METRIC_LINESTYLES = {"e2e_pinned": "-", "e2e_pageable": "-.", "resident": ":"}
METRIC_COLORS = {"e2e_pinned": "#1f77b4", "e2e_pageable": "#ff7f0e", "resident": "#2ca02c"}
METRIC_LABELS = {
    "e2e_pinned": "end to end, pinned",
    "e2e_pageable": "end to end, pageable",
    "resident": "resident (kernel only)",
}
MODEL_LINESTYLE = "--"
DEVICE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
PHASE_COLORS = {"h2d": "#1f77b4", "kernel": "#2ca02c", "d2h": "#ff7f0e"}
DIRECTION_COLORS = {"h2d": "#1f77b4", "d2h": "#d62728"}
DIRECTION_LABELS = {"h2d": "host → device", "d2h": "device → host"}
HOST_MEMORY_LINESTYLES = {"pinned": "-", "pageable": "--"}
BAND_ALPHA = 0.15
INTERVAL_ALPHA = 0.08

CURVE_COLUMNS: tuple[str, ...] = (
    "device", "op", "dtype", "backend", "size", "n", "median_s", "q25_s", "q75_s", "metric",
)  # fmt: skip
SHARE_COLUMNS = ("device", "op", "backend", "host_memory", "size", "h2d_s", "kernel_s", "d2h_s")
BUS_COLUMNS = ("device", "direction", "host_memory", "nbytes", "median_s", "q25_s", "q75_s")
MODEL_COLUMNS = ("device", "op", "backend", "host_memory", "size", "model_s")


# --- figures -----------------------------------------------------------------------------------


def time_figure(
    curves: pd.DataFrame,
    crossovers: Iterable[Any],
    op: str,
    *,
    model: pd.DataFrame | None = None,
    dtype: str | None = None,
    date: str | None = None,
) -> Figure:
    """Median time vs size (log-log), one line per device x backend (x metric for CUDA)."""
    rows, dtype = _op_curves(curves, op, dtype)
    crossovers = _op_crossovers(crossovers, op)
    markers = _device_markers(rows["device"], (c.device for c in crossovers))
    colors = _backend_colors(rows["backend"])
    with _style():
        fig, ax = _single_axes()
        metrics: list[str] = []
        for (device, backend, metric), group in _cpu_once(rows).groupby(
            ["device", "backend", "metric"], sort=True
        ):
            cuda = is_cuda_backend(backend)
            if cuda and metric not in metrics:
                metrics.append(metric)
            label = f"{device} | {backend}" + (f" | {metric}" if cuda else "")
            _line_with_band(
                ax,
                group,
                "median_s",
                "q25_s",
                "q75_s",
                label=label,
                color=colors[backend],
                linestyle=METRIC_LINESTYLES.get(metric, "-") if cuda else "-",
                marker=markers[device],
            )
        has_model = model is not None and _draw_model(ax, model, op, colors)
        _mark_crossovers(ax, crossovers, markers)
        _pow2_axis(ax, rows["size"], _size_unit(op))
        ax.set_yscale("log")
        ax.set_xlabel(_size_label(op))
        ax.set_ylabel("median time per op (s)")
        handles = [_proxy(label=b, color=colors[b]) for b in _unique(rows["backend"])]
        handles += _metric_proxies(sorted(metrics, key=_metric_order), color="black")
        if has_model:
            handles.append(_proxy(label="model", color="grey", linestyle=MODEL_LINESTYLE))
        handles += _device_proxies(markers)
        handles += _crossover_proxies(crossovers)
        _legend(ax, handles)
        ax.set_title(_title(f"{op} ({dtype}): time vs size", markers, date))
    return fig


def speedup_figure(
    curves: pd.DataFrame,
    crossovers: Iterable[Any],
    op: str,
    *,
    dtype: str | None = None,
    date: str | None = None,
) -> Figure:
    """Best CPU time over best CUDA time per size, one line per device x metric; under the
    default metric also, in grey, numpy on one core (cpu_fallback) over the best CUDA time,
    where other CPU backends were measured.

    "Best" is the lower envelope over a family's backends at each size, so the line follows
    whichever backend wins there.  The band spans the quartile ratios (q25_cpu / q75_cuda to
    q75_cpu / q25_cuda).  Above 1 the GPU wins.
    """
    rows, dtype = _op_curves(curves, op, dtype)
    crossovers = _op_crossovers(crossovers, op)
    markers = _device_markers(rows["device"], (c.device for c in crossovers))
    drawn: list[str] = []
    one_core_drawn = False
    with _style():
        fig, ax = _single_axes()
        for device, per_device in rows.groupby("device", sort=True):
            cpu_all = per_device[~per_device["backend"].map(is_cuda_backend)]
            for metric, family in per_device.groupby("metric", sort=False):
                cpu = family[~family["backend"].map(is_cuda_backend)]
                cuda = family[family["backend"].map(is_cuda_backend)]
                # CPU rows are the same wall time under every metric; borrow them if the
                # statistics emitted them under one metric only.
                cpu = cpu if len(cpu) else cpu_all
                ratio = _speedup(cpu, cuda)
                if ratio.empty:
                    continue
                drawn.append(metric)
                _line_with_band(
                    ax,
                    ratio,
                    "speedup",
                    "lo",
                    "hi",
                    label=f"{device} | {metric}",
                    color=METRIC_COLORS.get(metric, "black"),
                    linestyle=METRIC_LINESTYLES.get(metric, "-"),
                    marker=markers[device],
                )
                one_core = cpu[cpu["backend"] == ONE_CORE]
                if metric == schema.DEFAULT_METRIC and len(one_core) and len(one_core) < len(cpu):
                    # the same GPU against numpy on one core: what a single-threaded baseline
                    # would have shown
                    single = _speedup(one_core, cuda)
                    ax.plot(single["size"], single["speedup"], color="grey", linewidth=1.0,
                            linestyle=METRIC_LINESTYLES.get(metric, "-"), marker=markers[device],
                            markersize=2, label=f"{device} | {metric} | {ONE_CORE}")  # fmt: skip
                    one_core_drawn = True
        if not drawn:
            raise DataError(
                f"curves for op {op!r} have no size with both a CPU and a CUDA backend, "
                "so there is no speedup to plot."
            )
        ax.axhline(1.0, color="black", linewidth=0.8, zorder=1)
        _mark_crossovers(ax, crossovers, markers)
        _pow2_axis(ax, rows["size"], _size_unit(op))
        ax.set_yscale("log")
        ax.set_xlabel(_size_label(op))
        ax.set_ylabel("speedup, best CUDA over best CPU (×)")
        metrics = sorted(set(drawn), key=_metric_order)
        handles = [
            _proxy(label=METRIC_LABELS.get(m, m), color=METRIC_COLORS.get(m, "black"),
                   linestyle=METRIC_LINESTYLES.get(m, "-"))
            for m in metrics
        ]  # fmt: skip
        if one_core_drawn:
            handles.append(_proxy(label=f"against {ONE_CORE} (numpy, one core)", color="grey"))
        handles.append(_proxy(label="break-even (1×)", color="black", linewidth=0.8))
        handles += _device_proxies(markers)
        handles += _crossover_proxies(crossovers)
        _legend(ax, handles)
        ax.set_title(_title(f"{op} ({dtype}): GPU speedup", markers, date))
    return fig


def decomposition_figure(
    shares: pd.DataFrame,
    op: str,
    *,
    stack: str = "share",
    date: str | None = None,
) -> Figure:
    """Stacked h2d / kernel / d2h per size: one panel per device x backend (rows) and host
    memory kind (columns).  ``stack="share"`` stacks fractions of the phases' sum (0 to 1),
    ``stack="seconds"`` stacks the median seconds themselves (linear y)."""
    if stack not in ("share", "seconds"):
        raise ValueError(f'stack must be "share" or "seconds", not {stack!r}.')
    _require(shares, SHARE_COLUMNS, "shares")
    rows = shares[shares["op"] == op]
    if rows.empty:
        raise DataError(f"shares have no rows for op {op!r}.")
    panels = sorted(set(zip(rows["device"], rows["backend"], strict=True)))
    kinds = _ordered(rows["host_memory"], ("pinned", "pageable"))
    phases = ("h2d", "kernel", "d2h")
    with _style():
        fig = _figure(2.4 * len(kinds) + 0.4, 1.7 * len(panels) + 0.6)
        axes = fig.subplots(len(panels), len(kinds), sharex=True, sharey=stack == "share",
                            squeeze=False)  # fmt: skip
        for (r, (device, backend)), (c, kind) in _grid(panels, kinds):
            ax = axes[r][c]
            part = rows[
                (rows["device"] == device)
                & (rows["backend"] == backend)
                & (rows["host_memory"] == kind)
            ].sort_values("size")
            ax.set_title(f"{device} | {backend} | {kind}")
            _pow2_axis(ax, rows["size"], _size_unit(op))
            if part.empty:
                ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center")
                continue
            seconds = [part[f"{p}_s"].to_numpy(dtype=float) for p in phases]
            if stack == "share":
                total = sum(seconds)
                seconds = [s / total for s in seconds]
                ax.set_ylim(0, 1)
            ax.stackplot(part["size"].to_numpy(dtype=float), seconds, labels=phases,
                         colors=[PHASE_COLORS[p] for p in phases], alpha=0.85)  # fmt: skip
            if c == 0:
                ax.set_ylabel("share of h2d+kernel+d2h" if stack == "share" else "time (s)")
            if r == len(panels) - 1:
                ax.set_xlabel(_size_label(op))
        _legend(axes[0][-1], [_patch(PHASE_COLORS[p], p) for p in reversed(phases)])
        devices = _unique(rows["device"])
        fig.suptitle(_title(f"{op}: where the CUDA time goes", devices, date), fontsize=8)
    return fig


def bus_figure(bus: pd.DataFrame, *, date: str | None = None) -> Figure:
    """Bandwidth (nbytes / median_s, GB/s) vs transfer size, both directions, pinned and
    pageable, one marker per device.  The band spans nbytes/q75_s to nbytes/q25_s."""
    _require(bus, BUS_COLUMNS, "bus")
    if bus.empty:
        raise DataError("bus has no rows to plot.")
    markers = _device_markers(bus["device"], ())
    with _style():
        fig, ax = _single_axes()
        bw = bus.assign(
            gbps=bus["nbytes"] / bus["median_s"] / 1e9,
            lo=bus["nbytes"] / bus["q75_s"] / 1e9,
            hi=bus["nbytes"] / bus["q25_s"] / 1e9,
            size=bus["nbytes"],
        )
        for (device, direction, kind), group in bw.groupby(
            ["device", "direction", "host_memory"], sort=True
        ):
            _line_with_band(
                ax,
                group,
                "gbps",
                "lo",
                "hi",
                label=f"{device} | {direction} | {kind}",
                color=DIRECTION_COLORS.get(direction, "black"),
                linestyle=HOST_MEMORY_LINESTYLES.get(kind, "-"),
                marker=markers[device],
            )
        _pow2_axis(ax, bw["nbytes"], "bytes")
        ax.set_yscale("log")
        ax.set_xlabel("transfer size (bytes)")
        ax.set_ylabel("bandwidth (GB/s)")
        handles = [
            _proxy(label=DIRECTION_LABELS.get(d, d), color=DIRECTION_COLORS.get(d, "black"))
            for d in _ordered(bw["direction"], ("h2d", "d2h"))
        ]
        handles += [
            _proxy(label=k, color="black", linestyle=HOST_MEMORY_LINESTYLES.get(k, "-"))
            for k in _ordered(bw["host_memory"], ("pinned", "pageable"))
        ]
        handles += _device_proxies(markers)
        _legend(ax, handles)
        ax.set_title(_title("host ↔ device bandwidth", markers, date))
    return fig


# --- files -------------------------------------------------------------------------------------


def plot_time(
    curves: pd.DataFrame,
    crossovers: Iterable[Any],
    op: str,
    out_dir: str | Path,
    formats: Sequence[str] = ("png",),
    model: pd.DataFrame | None = None,
    *,
    dtype: str | None = None,
    date: str | None = None,
) -> list[Path]:
    """Write ``time_figure`` as ``<op>_time.<fmt>``; return the paths written."""
    fig = time_figure(curves, crossovers, op, model=model, dtype=dtype, date=date)
    return save_figure(fig, out_dir, _stem(op, dtype, "time"), formats)


def plot_speedup(
    curves: pd.DataFrame,
    crossovers: Iterable[Any],
    op: str,
    out_dir: str | Path,
    formats: Sequence[str] = ("png",),
    *,
    dtype: str | None = None,
    date: str | None = None,
) -> list[Path]:
    """Write ``speedup_figure`` as ``<op>_speedup.<fmt>``; return the paths written."""
    fig = speedup_figure(curves, crossovers, op, dtype=dtype, date=date)
    return save_figure(fig, out_dir, _stem(op, dtype, "speedup"), formats)


def plot_decomposition(
    shares: pd.DataFrame,
    op: str,
    out_dir: str | Path,
    formats: Sequence[str] = ("png",),
    *,
    stack: str = "share",
    dtype: str | None = None,
    date: str | None = None,
) -> list[Path]:
    """Write ``decomposition_figure`` as ``<op>[_<dtype>]_decomposition.<fmt>`` (the dtype
    only names the file: ``shares`` is one dtype's); return the paths."""
    fig = decomposition_figure(shares, op, stack=stack, date=date)
    return save_figure(fig, out_dir, _stem(op, dtype, "decomposition"), formats)


def plot_bus(
    bus: pd.DataFrame,
    out_dir: str | Path,
    formats: Sequence[str] = ("png",),
    *,
    date: str | None = None,
) -> list[Path]:
    """Write ``bus_figure`` as ``bus_bandwidth.<fmt>``; return the paths written."""
    return save_figure(bus_figure(bus, date=date), out_dir, "bus_bandwidth", formats)


def save_figure(fig: Figure, out_dir: str | Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """Save ``fig`` as ``out_dir/stem.<fmt>`` for each format (created as needed)."""
    if isinstance(formats, str):
        formats = (formats,)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"formats must be among {', '.join(FORMATS)}, not {list(formats)!r}.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Dates left out of the files so that re-plotting the same data gives the same bytes.
    metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}
    written = []
    with _style():
        for fmt in dict.fromkeys(formats):
            path = out / f"{stem}.{fmt}"
            if fmt == "png":
                _save_png(fig, path)
            else:
                fig.savefig(path, format=fmt, metadata=metadata[fmt])
            written.append(path)
    return written


def _save_png(fig: Figure, path: Path) -> None:
    """``fig`` as a PNG of 256 colours at most: a figure of lines and a few fills loses
    nothing a reader sees, and the file is a third of the full-colour one (the H200's
    reference figures went from 7.5 to 2.5 MB).  Pillow is matplotlib's own dependency."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={})
    buffer.seek(0)
    with Image.open(buffer) as image:
        paletted = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        paletted.save(path, format="png", optimize=True)


# --- table -------------------------------------------------------------------------------------


_EVERY = "every CPU backend"


def crossover_table(crossovers: Iterable[Any]) -> str:
    """A Markdown table, one row per crossover sorted by device, op, metric.

    Sizes are rounded to integers with thousands separators; a missing size or interval bound
    (None or NaN) shows as an em dash.  The interval column is "[lo, hi]"; the last column is
    the crossover's note (several sign changes, an interval beyond the measured sizes).
    """
    header = (
        "device",
        "op",
        "metric",
        "CPU side",
        "crossover size",
        "95% interval",
        "CPU backend",
        "CUDA backend",
        "status",
        "note",
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]

    def side(c: Any) -> str:  # crossovers without the field are against every CPU backend
        return getattr(c, "against", _EVERY)

    for c in sorted(crossovers, key=lambda c: (c.device, c.op, c.metric, side(c) != _EVERY)):
        lo, hi = _fmt_size(c.lo), _fmt_size(c.hi)
        interval = "—" if lo == "—" and hi == "—" else f"[{lo}, {hi}]"
        cells = (
            c.device,
            c.op,
            c.metric,
            "all cores" if side(c) == _EVERY else f"{side(c)} (one core)",
            _fmt_size(c.size),
            interval,
            c.cpu_backend or "—",
            c.cuda_backend or "—",
            c.status,
            c.note,
        )
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


# --- helpers -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _style() -> Iterator[None]:
    import matplotlib

    # cast: matplotlib's stubs want literal rc keys; STYLE is checked by rc_context at run time.
    with matplotlib.rc_context(cast(Any, STYLE)):
        yield


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # render through Agg; never through pyplot or an interactive backend
    return fig


def _single_axes() -> tuple[Figure, Axes]:
    # 6.5 in wide: a two-column paper's text width, with the legend to the right of the axes.
    fig = _figure(6.5, 3.6)
    return fig, fig.add_subplot()


def _line_with_band(
    ax: Axes,
    group: pd.DataFrame,
    y: str,
    lo: str,
    hi: str,
    *,
    label: str,
    color: str,
    linestyle: str,
    marker: str,
) -> None:
    group = group.sort_values("size")
    x = group["size"].to_numpy(dtype=float)
    ax.plot(x, group[y].to_numpy(dtype=float), label=label, color=color, linestyle=linestyle,
            marker=marker)  # fmt: skip
    ax.fill_between(x, group[lo].to_numpy(dtype=float), group[hi].to_numpy(dtype=float),
                    color=color, alpha=BAND_ALPHA, linewidth=0)  # fmt: skip


def _draw_model(ax: Axes, model: pd.DataFrame, op: str, colors: dict[str, str]) -> bool:
    _require(model, MODEL_COLUMNS, "model")
    rows = model[model["op"] == op]
    for (device, backend, kind), group in rows.groupby(
        ["device", "backend", "host_memory"], sort=True
    ):
        group = group.sort_values("size")
        color = colors.get(backend) or BACKEND_COLORS.get(backend, "grey")
        ax.plot(group["size"].to_numpy(dtype=float), group["model_s"].to_numpy(dtype=float),
                color=color, linestyle=MODEL_LINESTYLE, linewidth=0.8,
                label=f"model | {device} | {backend} | {kind}")  # fmt: skip
    return not rows.empty


def _mark_crossovers(ax: Axes, crossovers: list[Any], markers: dict[str, str]) -> None:
    """Vertical line at each crossover size, its 95% interval shaded, the device's marker on top
    (so overlaid devices stay apart) and the line style of the crossover's metric."""
    for c in crossovers:
        if not _finite(c.size):
            continue
        style = METRIC_LINESTYLES.get(c.metric, "-")
        ax.axvline(c.size, color="black", linestyle=style, linewidth=0.8,
                   label=f"crossover | {c.device} | {c.metric}")  # fmt: skip
        if _finite(c.lo) and _finite(c.hi):
            ax.axvspan(c.lo, c.hi, color="black", alpha=INTERVAL_ALPHA, linewidth=0)
        ax.plot([c.size], [1.0], transform=ax.get_xaxis_transform(), marker=markers[c.device],
                color="black", clip_on=False, linestyle="none")  # fmt: skip


def _speedup(cpu: pd.DataFrame, cuda: pd.DataFrame) -> pd.DataFrame:
    if cpu.empty or cuda.empty:
        return pd.DataFrame(columns=["size", "speedup", "lo", "hi"])
    best_cpu, best_cuda = _envelope(cpu), _envelope(cuda)
    both = best_cpu.merge(best_cuda, left_index=True, right_index=True, suffixes=("_cpu", "_cuda"))
    return pd.DataFrame(
        {
            "size": both.index.to_numpy(dtype=float),
            "speedup": (both["median_s_cpu"] / both["median_s_cuda"]).to_numpy(),
            "lo": (both["q25_s_cpu"] / both["q75_s_cuda"]).to_numpy(),
            "hi": (both["q75_s_cpu"] / both["q25_s_cuda"]).to_numpy(),
        }
    )


def _envelope(rows: pd.DataFrame) -> pd.DataFrame:
    """Per size, the row of the backend with the lowest median (quartiles from that backend)."""
    best = rows.loc[rows.groupby("size")["median_s"].idxmin()]
    return best.set_index("size").sort_index()[["median_s", "q25_s", "q75_s"]]


def _op_curves(curves: pd.DataFrame, op: str, dtype: str | None) -> tuple[pd.DataFrame, str]:
    _require(curves, CURVE_COLUMNS, "curves")
    rows = curves[curves["op"] == op]
    if dtype is not None:
        rows = rows[rows["dtype"] == dtype]
    if rows.empty:
        which = f"op {op!r}" + (f" and dtype {dtype!r}" if dtype else "")
        raise DataError(f"curves have no rows for {which}.")
    rows = rows.reset_index(drop=True)  # the envelope and CPU filters select by index label
    dtypes = _unique(rows["dtype"])
    if len(dtypes) > 1:
        raise DataError(
            f"curves for op {op!r} mix dtypes {', '.join(dtypes)}; pass dtype= to plot one."
        )
    return rows, dtypes[0]


def _cpu_once(rows: pd.DataFrame) -> pd.DataFrame:
    """Keep a CPU backend's rows under one metric only (the default metric when present)."""
    cpu = ~rows["backend"].map(is_cuda_backend)
    keep = ~cpu
    for _, group in rows[cpu].groupby(["device", "backend"]):
        metrics = set(group["metric"])
        chosen = schema.DEFAULT_METRIC if schema.DEFAULT_METRIC in metrics else min(metrics)
        keep |= rows.index.isin(group.index[group["metric"] == chosen])
    return rows[keep]


def _op_crossovers(crossovers: Iterable[Any], op: str) -> list[Any]:
    """The crossovers a figure marks: against the whole CPU (the table also lists those
    against numpy on one core)."""
    return [c for c in crossovers if c.op == op and getattr(c, "against", _EVERY) == _EVERY]


def _require(frame: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"{what} is missing column(s) {', '.join(missing)}.")


def _unique(values: Iterable[Any]) -> list[Any]:
    return sorted(set(values), key=str)


def _ordered(values: Iterable[Any], first: tuple[str, ...]) -> list[Any]:
    """Unique values, the ones in ``first`` in that order, then the rest sorted."""
    present = set(values)
    return [v for v in first if v in present] + _unique(present - set(first))


def _metric_order(metric: str) -> tuple[int, str]:
    order = list(schema.METRICS)
    return (order.index(metric) if metric in order else len(order), metric)


def _backend_colors(backends: Iterable[str]) -> dict[str, str]:
    spare = iter(_SPARE_COLORS * 4)
    return {b: BACKEND_COLORS.get(b) or next(spare) for b in _unique(backends)}


def _device_markers(*devices: Iterable[str]) -> dict[str, str]:
    names = _unique(d for group in devices for d in group)
    return {d: DEVICE_MARKERS[i % len(DEVICE_MARKERS)] for i, d in enumerate(names)}


def _sided(op: str) -> bool:
    """Whether ``op``'s size is the side n of an n×n sample (matmul, sum_rows, the transposed
    products), not its elements (softmax's short rows, the chains): its work grows faster."""
    return op == "matmul" or (op in VARIANTS and VARIANTS[op].work_power > 1)


def _size_unit(op: str) -> str:
    return "n" if _sided(op) else "elements"


def _size_label(op: str) -> str:
    if op == "matmul":
        return "matrix size n (n×n @ n×n)"
    if _sided(op):
        return f"matrix size n ({op} of n×n)"
    return "size (elements)"


def _title(what: str, devices: Iterable[str], date: str | None) -> str:
    """The title of a figure: what it shows, of which devices, and when they were measured
    (``date``: the sweeps', never the day of drawing, which would date old data as new)."""
    date = date or "date unknown"
    rest = f"{', '.join(devices)} | {date}"
    # two devices' names and dates beside what it shows outrun a figure's width (matplotlib
    # centres a title over the axes and cuts it at the figure's edge): put them on a line of
    # their own
    return f"{what}\n{rest}" if len(what) + len(rest) > 70 else f"{what} | {rest}"


def _stem(op: str, dtype: str | None, kind: str) -> str:
    parts = [op, dtype, kind] if dtype else [op, kind]
    return "_".join("".join(ch if ch.isalnum() or ch in "-." else "-" for ch in p) for p in parts)


def _legend(ax: Axes, handles: list[Any]) -> None:
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def _proxy(**kwargs: Any) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], **kwargs)


def _patch(color: str, label: str, alpha: float = 1.0) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=color, label=label, alpha=alpha, linewidth=0)


def _metric_proxies(metrics: list[str], color: str) -> list[Any]:
    return [
        _proxy(label=METRIC_LABELS.get(m, m), color=color, linestyle=METRIC_LINESTYLES.get(m, "-"))
        for m in metrics
    ]


def _device_proxies(markers: dict[str, str]) -> list[Any]:
    return [
        _proxy(label=d, color="black", marker=m, linestyle="none", markersize=4)
        for d, m in markers.items()
    ]


def _crossover_proxies(crossovers: list[Any]) -> list[Any]:
    if not any(_finite(c.size) for c in crossovers):
        return []
    return [
        _proxy(label="crossover", color="black", linewidth=0.8),
        _patch("black", "95% interval", alpha=INTERVAL_ALPHA),
    ]


def _pow2_axis(ax: Axes, sizes: Iterable[float], unit: str) -> None:
    """Log-2 x axis with a labelled tick every 1, 2, 4, ... octaves (at most ~8 labels) and a
    minor tick at every power of two.  ``unit``: "bytes" (binary prefixes), "n" (plain integers)
    or "elements" (2^k, since element counts run over many octaves)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    values = [float(v) for v in sizes if v > 0]
    lo, hi = math.floor(math.log2(min(values))), math.ceil(math.log2(max(values)))
    step = next(s for s in (1, 2, 4, 8, 16) if (hi - lo) / s <= 8)
    first, last = math.floor(lo / step) * step, math.ceil(hi / step) * step
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0**k for k in range(first, last + 1, step)]))
    ax.xaxis.set_minor_locator(FixedLocator([2.0**k for k in range(first, last + 1)]))
    ax.xaxis.set_minor_formatter(NullFormatter())

    def label(x: float, _pos: int) -> str:
        if unit == "bytes":
            return _binary(x)
        if unit == "n":
            return f"{x:,.0f}"
        return f"$2^{{{round(math.log2(x))}}}$"

    ax.xaxis.set_major_formatter(FuncFormatter(label))


def _binary(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def _grid(rows: list[Any], cols: list[Any]) -> Iterator[tuple[tuple[int, Any], tuple[int, Any]]]:
    for r, row in enumerate(rows):
        for c, col in enumerate(cols):
            yield (r, row), (c, col)


def _finite(x: Any) -> bool:
    # numbers.Real covers numpy scalars too; bool is excluded because True is not a size.
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _fmt_size(x: Any) -> str:
    if not _finite(x):
        return "—"
    return f"{round(x):,}" if abs(x) >= 10 else f"{x:.3g}"


def _cell(x: Any) -> str:
    # A pipe inside a cell would end it early in Markdown.
    return str(x).replace("|", "\\|")
