"""Figures and the crossover table, on small synthetic statistics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from softcuda.analysis import plots
from softcuda.errors import DataError

DEVICES = ("GPU A", "GPU B")
SIZES = (16, 32, 64, 128, 256, 512, 1024)
DATE = "2026-03-18"


@dataclass(frozen=True)
class Crossover:
    device: str
    op: str
    metric: str
    size: float | None
    lo: float | None
    hi: float | None
    cpu_backend: str | None
    cuda_backend: str | None
    status: str
    note: str = ""


def _curves(devices=DEVICES) -> pd.DataFrame:
    """CPU: pure n^3 work; CUDA: a fixed launch + transfer overhead, then faster n^3 work."""
    rows = []
    for d, device in enumerate(devices):
        for metric, overhead in (("e2e_pinned", 2e-4), ("e2e_pageable", 5e-4), ("resident", 1e-5)):
            for backend, per_flop in (
                ("cpu_fallback", 1e-9),
                ("cpu_blas", 1e-10),
                ("cuda_tiled", 2e-12),
                ("cuda_blas", 1e-12),
            ):
                for n in SIZES:
                    cuda = backend.startswith("cuda")
                    t = (overhead if cuda else 0.0) + per_flop * n**3 * (1 + d)
                    rows.append(
                        {
                            "device": device,
                            "op": "matmul",
                            "dtype": "float32",
                            "backend": backend,
                            "size": n,
                            "n": 20,
                            "median_s": t,
                            "q25_s": t * 0.95,
                            "q75_s": t * 1.05,
                            "metric": metric,
                        }
                    )
    return pd.DataFrame(rows)


def _crossovers() -> list[Crossover]:
    blas = ("cpu_blas", "cuda_blas")
    return [
        Crossover("GPU A", "matmul", "e2e_pinned", 120.0, 100.0, 140.0, *blas, "found"),
        Crossover(
            "GPU B", "matmul", "e2e_pinned", 95.5, 90.0, 101.0, *blas, "found",
            "3 sign changes, between 80 and 95; reporting the last CPU->CUDA",
        ),
        Crossover("GPU A", "matmul", "resident", None, None, None, *blas, "cuda_always"),
        Crossover(
            "GPU A", "add", "e2e_pinned", 3.2e6, 2.9e6, float("nan"),
            "cpu_blas", "cuda_elementwise", "found",
        ),
    ]  # fmt: skip


def _shares(devices=DEVICES, backends=("cuda_tiled", "cuda_blas")) -> pd.DataFrame:
    rows = []
    for device in devices:
        for backend in backends:
            for kind in ("pinned", "pageable"):
                for n in SIZES:
                    xfer = 3 * 4 * n * n / (25e9 if kind == "pinned" else 8e9)
                    rows.append(
                        dict(device=device, op="matmul", backend=backend, host_memory=kind,
                             size=n, h2d_s=xfer * 2 / 3, kernel_s=1e-12 * n**3 + 5e-6,
                             d2h_s=xfer / 3)
                    )  # fmt: skip
    return pd.DataFrame(rows)


def _bus(devices=DEVICES) -> pd.DataFrame:
    rows = []
    for device in devices:
        for direction in ("h2d", "d2h"):
            for kind, bw in (("pinned", 50e9), ("pageable", 12e9)):
                for k in range(2, 31, 2):
                    t = 8e-6 + 2**k / bw
                    rows.append(
                        dict(device=device, direction=direction, host_memory=kind, nbytes=2**k,
                             median_s=t, q25_s=t * 0.97, q75_s=t * 1.04)
                    )  # fmt: skip
    return pd.DataFrame(rows)


def _model() -> pd.DataFrame:
    return pd.DataFrame(
        dict(device="GPU A", op="matmul", backend="cuda_blas", host_memory="pinned", size=n,
             model_s=2e-4 + 1e-12 * n**3)
        for n in SIZES
    )  # fmt: skip


def _labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_time_figure_lines_legend_and_axes() -> None:
    fig = plots.time_figure(_curves(), _crossovers(), "matmul", model=_model(), date=DATE)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "(s)" in ax.get_ylabel() and "n" in ax.get_xlabel()
    title = ax.get_title()
    assert "matmul" in title and "GPU A" in title and "GPU B" in title and DATE in title
    labels = _labels(ax)
    for device in DEVICES:
        # CPU backends once; CUDA backends once per metric; never averaged across devices.
        assert labels.count(f"{device} | cpu_blas") == 1
        assert labels.count(f"{device} | cpu_fallback") == 1
        for metric in ("e2e_pinned", "e2e_pageable", "resident"):
            assert labels.count(f"{device} | cuda_tiled | {metric}") == 1
    by_metric = {
        line.get_label().rsplit(" | ", 1)[1]: line.get_linestyle()
        for line in ax.get_lines()
        if line.get_label().startswith("GPU A | cuda_blas")
    }
    assert len(set(by_metric.values())) == 3  # metrics told apart by line style
    assert "model | GPU A | cuda_blas | pinned" in labels
    # Two crossovers with a size for matmul; the one without a size is not drawn.
    assert sum(label.startswith("crossover |") for label in labels) == 2
    legend = _legend_texts(ax)
    assert legend.count("GPU A") == 1 and legend.count("GPU B") == 1
    assert {"cpu_blas", "cuda_blas", "model", "crossover"} <= set(legend)


def test_plot_files_are_written(tmp_path: Path) -> None:
    # A thinned fixture keeps the three renderings fast.
    curves = _curves().query("metric == 'e2e_pinned' and backend in ('cpu_blas', 'cuda_blas')")
    written = plots.plot_time(
        curves, _crossovers(), "matmul", tmp_path, ("png", "svg", "pdf"), date=DATE
    )
    assert [p.name for p in written] == ["matmul_time.png", "matmul_time.svg", "matmul_time.pdf"]
    assert all(p.stat().st_size > 1000 for p in written)
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written[2].read_bytes()[:5] == b"%PDF-"
    svg = written[1].read_text()
    # Text stays text in the SVG (svg.fonttype none), so labels are searchable.
    assert "median time per op (s)" in svg and "cuda_blas" in svg
    assert svg.count(">GPU A<") == 1 and svg.count(">GPU B<") == 1  # one legend entry each


def test_svg_is_reproducible(tmp_path: Path) -> None:
    bus = _bus(DEVICES[:1]).query("direction == 'h2d' and host_memory == 'pinned'")
    a = plots.plot_bus(bus, tmp_path / "a", ("svg",), date=DATE)[0].read_bytes()
    b = plots.plot_bus(bus, tmp_path / "b", ("svg",), date=DATE)[0].read_bytes()
    assert a == b


def test_speedup_figure() -> None:
    fig = plots.speedup_figure(_curves(), _crossovers(), "matmul", date=DATE)
    ax = fig.axes[0]
    labels = _labels(ax)
    for device in DEVICES:
        for metric in ("e2e_pinned", "e2e_pageable", "resident"):
            assert labels.count(f"{device} | {metric}") == 1
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "GPU A | resident")
    x, y = line.get_data()
    # Best CPU is cpu_blas (1e-10 n^3), best CUDA is cuda_blas (1e-5 + 1e-12 n^3).
    expected = 1e-10 * x**3 / (1e-5 + 1e-12 * x**3)
    assert np.allclose(y, expected)
    assert any(np.allclose(ln.get_ydata(), 1.0) for ln in ax.get_lines())  # break-even line
    assert "speedup" in ax.get_ylabel()
    assert _legend_texts(ax).count("GPU B") == 1


def test_speedup_without_cuda_is_a_data_error() -> None:
    cpu_only = _curves().query("backend.str.startswith('cpu')", engine="python")
    with pytest.raises(DataError, match="no size with both a CPU and a CUDA backend"):
        plots.speedup_figure(cpu_only, [], "matmul")


def test_decomposition_panels(tmp_path: Path) -> None:
    fig = plots.decomposition_figure(_shares(), "matmul", date=DATE)
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 2 * 2 * 2  # (device x backend) rows x host memory columns
    assert "GPU B | cuda_tiled | pageable" in titles
    ax = fig.axes[0]
    assert ax.get_ylim() == (0.0, 1.0)
    assert len(ax.collections) == 3  # h2d, kernel, d2h stacked
    # Files from a one-panel figure: eight panels would only make the test slower.
    one = _shares(DEVICES[:1], ("cuda_blas",)).query("host_memory == 'pinned'")
    written = plots.plot_decomposition(one, "matmul", tmp_path, ("png", "pdf"), stack="seconds")
    assert [p.name for p in written] == ["matmul_decomposition.png", "matmul_decomposition.pdf"]
    assert all(p.stat().st_size > 0 for p in written)


def test_bus_figure(tmp_path: Path) -> None:
    fig = plots.bus_figure(_bus(), date=DATE)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bandwidth (GB/s)" and "bytes" in ax.get_xlabel()
    assert len(ax.get_lines()) == 2 * 2 * 2  # device x direction x host memory
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "GPU A | h2d | pinned")
    x, y = line.get_data()
    assert np.isclose(y[-1], 2**30 / (8e-6 + 2**30 / 50e9) / 1e9)
    written = plots.plot_bus(_bus(DEVICES[:1]), tmp_path, ("png", "svg"), date=DATE)
    assert [p.name for p in written] == ["bus_bandwidth.png", "bus_bandwidth.svg"]
    assert "256 MiB" in written[1].read_text()  # binary tick labels


def test_input_errors() -> None:
    with pytest.raises(DataError, match="curves is missing column.*median_s"):
        plots.time_figure(_curves().drop(columns="median_s"), [], "matmul")
    with pytest.raises(DataError, match="no rows for op 'conv'"):
        plots.time_figure(_curves(), [], "conv")
    mixed = pd.concat([_curves(), _curves().assign(dtype="float64")])
    with pytest.raises(DataError, match="mix dtypes float32, float64"):
        plots.time_figure(mixed, [], "matmul")
    fig = plots.time_figure(mixed, [], "matmul", dtype="float64")
    assert "float64" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="formats"):
        plots.save_figure(fig, ".", "x", ("bmp",))


def test_crossover_table() -> None:
    table = plots.crossover_table(_crossovers())
    lines = table.strip().splitlines()
    assert lines[0].startswith(
        "| device | op | metric | CPU side | crossover size | 95% interval |"
    )
    assert len(lines) == 2 + 4
    # Sorted by device, op, metric: GPU A add, GPU A matmul e2e_pinned, ..resident, GPU B.
    assert lines[2] == (
        "| GPU A | add | e2e_pinned | all cores | 3,200,000 | [2,900,000, —] | cpu_blas "
        "| cuda_elementwise "
        "| found |  |"
    )
    assert (
        lines[3]
        == "| GPU A | matmul | e2e_pinned | all cores | 120 | [100, 140] | cpu_blas | cuda_blas "
        "| found |  |"
    )
    assert lines[4] == (
        "| GPU A | matmul | resident | all cores | — | — | cpu_blas | cuda_blas | cuda_always |  |"
    )
    assert lines[5] == (
        "| GPU B | matmul | e2e_pinned | all cores | 96 | [90, 101] | cpu_blas | cuda_blas | found "
        "| 3 sign changes, between 80 and 95; reporting the last CPU->CUDA |"
    )
    assert plots.crossover_table([]).count("\n") == 2


def test_a_figure_without_a_date_says_so_not_today() -> None:
    """The date in a title is the sweep's; without one the title says it is unknown, never
    the day the figure happened to be drawn."""
    import datetime

    fig = plots.bus_figure(_bus())
    title = fig.axes[0].get_title()
    assert title.endswith("| date unknown"), title
    assert datetime.date.today().isoformat() not in title


def test_a_long_title_puts_its_devices_on_a_second_line() -> None:
    """Two real devices' names and dates beside what a figure shows are wider than the figure,
    whose title matplotlib would cut at its edge: they go on a line of their own."""
    devices = ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    long = plots._title("add (float32): GPU speedup", devices, "2026-12-03, 2026-12-07")
    what, rest = long.split("\n")
    assert what == "add (float32): GPU speedup" and rest.startswith("NVIDIA H100 80GB HBM3, ")
    assert plots._title("add", ["GPU A"], DATE) == f"add | GPU A | {DATE}"
