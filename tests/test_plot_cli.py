"""softcuda plot on synthetic CSVs (tests/synthetic.py) with known crossovers.

Figures cost most of a second each to render, so the CUDA case runs the command once for the
module and the tests read what it left behind.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main
from synthetic import Cost, two_backend

# Half-octave sizes: the crossing is interpolated between measured sizes, and at whole octaves
# that interpolation alone can miss the noise-free crossover by more than the bootstrap interval.
SIZES = sorted({int(round(2**k)) for k in np.arange(4, 22.01, 0.5)})
BUS_SIZES = tuple(2**k for k in range(8, 27, 3))
GPU_A = two_backend(ops=("add",), device="GPU A", device_hash="a" * 64)
GPU_B = two_backend(
    Cost(3e-6, 2e-9), Cost(4e-6, 5e-12), ops=("add",), device="GPU B", device_hash="b" * 64
)
CUDA = "cuda_elementwise"


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """Two devices, one CSV each, drawn as png and svg with the summary on stdout and a file."""
    root = tmp_path_factory.mktemp("plot")
    csvs = []
    for i, scenario in enumerate((GPU_A, GPU_B)):
        path = root / f"sweep{i}.csv"
        scenario.frame(SIZES, seed=i, bus_sizes=BUS_SIZES).to_csv(path, index=False)
        csvs.append(path)
    out = root / "figs"
    summary = root / "summary.md"
    result = invoke(
        "plot", *csvs, "--out", out, "--format", "png,svg", "--summary", "--summary-out", summary
    )
    return result, out, summary


def test_files_written_for_png_and_svg(two_devices):
    result, out, _ = two_devices
    assert result.exit_code == 0, result.output
    stems = ("add_time", "add_speedup", "add_decomposition", "bus_bandwidth")
    expected = {f"{s}.{fmt}" for s in stems for fmt in ("png", "svg")}
    assert {p.name for p in out.iterdir()} == expected
    assert all(p.stat().st_size > 0 for p in out.iterdir())
    assert (out / "add_time.png").read_bytes().startswith(b"\x89PNG")
    written = [line for line in result.stdout.splitlines() if line.startswith("wrote ")]
    assert {line.split("/")[-1] for line in written} >= expected  # one line per file


def test_two_devices_overlay_in_one_figure(two_devices):
    _, out, _ = two_devices
    for stem in ("add_time", "add_speedup", "bus_bandwidth"):
        svg = (out / f"{stem}.svg").read_text()
        assert "GPU A" in svg and "GPU B" in svg, stem


def _table_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0].startswith("GPU") and cells[3] == "all cores":
            rows[(cells[0], cells[2])] = cells
    return rows


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_summary_crossover_inside_its_interval_and_near_the_truth(two_devices):
    result, _, summary = two_devices
    assert "| device | op | metric | CPU side | crossover size | 95% interval |" in result.stdout
    rows = _table_rows(result.stdout)
    for device, scenario in (("GPU A", GPU_A), ("GPU B", GPU_B)):
        for metric in ("e2e_pinned", "resident"):
            cells = rows[(device, metric)]
            assert cells[8] == "crossing" and cells[7] == CUDA
            size = _number(cells[4])
            lo, hi = (_number(x) for x in re.fullmatch(r"\[(.+), (.+)\]", cells[5]).groups())
            truth = scenario.crossover("add", "cpu_blas", CUDA, metric)
            assert lo <= size <= hi and lo <= truth <= hi, (device, metric, lo, truth, hi)
    assert "Where the kernel starts to outweigh the transfers" in result.stdout
    assert summary.read_text() in result.stdout


@pytest.fixture(scope="module")
def cpu_only(tmp_path_factory):
    path = tmp_path_factory.mktemp("cpu") / "cpu.csv"
    scenario = two_backend(ops=("add", "exp"), device="Some CPU")
    scenario.frame(SIZES[::4], reps=7, backends=["cpu_blas"], bus_sizes=()).to_csv(
        path, index=False
    )
    return path


def test_cpu_only_draws_time_figures_and_says_why_in_one_line(cpu_only, tmp_path):
    result = invoke("plot", cpu_only, "--out", tmp_path, "--summary")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add_time.png", "exp_time.png"]
    notes = [line for line in result.output.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "no CUDA data" in notes[0], result.output
    assert "no_data" in result.stdout  # the table still says what was (not) found


def test_op_filters(cpu_only, tmp_path):
    result = invoke("plot", cpu_only, "--out", tmp_path, "--op", "exp")
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["exp_time.png"]
    missing = invoke("plot", cpu_only, "--out", tmp_path, "--op", "matmul")
    assert missing.exit_code == 2
    assert "no rows for op matmul" in missing.stderr and "add, exp" in missing.stderr


def test_default_out_is_results_figures_in_the_current_directory(cpu_only, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("plot", cpu_only, "--op", "add", "--format", "svg")
    assert result.exit_code == 0, result.output
    assert "wrote results/figures/add_time.svg" in result.stdout
    assert (tmp_path / "results" / "figures" / "add_time.svg").stat().st_size > 0


def _bad_csvs(good: pd.DataFrame) -> dict[str, tuple[object, str]]:
    return {
        "missing_column": (good.drop(columns=["phase"]), "missing column(s) phase"),
        "older_schema": (good.assign(schema=0), "older format (schema version 0)"),
        "empty": ("", "is empty"),
        "header_only": (",".join(good.columns) + "\n", "has no data rows"),
    }


@pytest.mark.parametrize("case", ["missing_column", "older_schema", "empty", "header_only"])
def test_bad_csv_exit_2_one_sentence_naming_the_file(cpu_only, tmp_path, case):
    content, words = _bad_csvs(pd.read_csv(cpu_only))[case]
    path = tmp_path / f"{case}.csv"
    if isinstance(content, pd.DataFrame):
        content.to_csv(path, index=False)
    else:
        path.write_text(content)
    result = invoke("plot", cpu_only, path, "--out", tmp_path / "figs")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(path) in line and words in line
    assert not (tmp_path / "figs").exists()


def test_bad_usage_exit_2(cpu_only, tmp_path):
    assert invoke("plot", cpu_only, "--format", "gif").exit_code == 2
    assert invoke("plot").exit_code == 2
    assert invoke("plot", tmp_path / "nope.csv").exit_code == 2


def test_report_keeps_one_label_with_two_hashes_apart_and_dtypes_apart():
    from softcuda.analysis.report import build_report

    same_label = two_backend(ops=("add",), device="GPU", device_hash="c" * 64)
    frames = [
        same_label.frame(SIZES[::2], reps=7, bus_sizes=()),
        GPU_B.frame(SIZES[::2], reps=7, bus_sizes=()).assign(device="GPU", device_hash="d" * 64),
        two_backend(ops=("add",), dtype="float64", device="GPU", device_hash="c" * 64).frame(
            SIZES[::2], reps=7, bus_sizes=()
        ),
    ]
    report = build_report(pd.concat(frames, ignore_index=True), n_boot=50)
    assert report.devices == ("GPU [cccccccc]", "GPU [dddddddd]")
    keys = {(c.device, c.dtype, c.metric) for c in report.crossovers}
    assert ("GPU [cccccccc]", "float64", "resident") in keys
    assert ("GPU [dddddddd]", "float32", "resident") in keys
    assert len(report.crossovers) == 3 * 3  # (2 dtypes + 1 dtype) x 3 metrics
    assert report.bus.empty and report.model.empty and not report.dominance
    assert set(report.shares["host_memory"]) == {"pinned", "pageable"}


def test_the_summary_counts_the_points_flagged_unstable_and_why():
    from softcuda.analysis.report import build_report, summary_markdown

    df = GPU_A.frame([1024, 2048, 4096, 8192], reps=21, noise=0.01, seed=4)
    assert "flagged unstable" not in summary_markdown(build_report(df, n_boot=50))
    row = df.iloc[0].to_dict()
    probe = pd.DataFrame(
        [
            {**row, "size": size, "backend": "machine", "phase": "probe", "repetition": r,
             "seconds": seconds, "nbytes": 0}
            for size, seconds in ((1024, 5e-6), (2048, 5e-6), (4096, 9e-6), (8192, 5e-6))
            for r in range(5)
        ]
    )  # fmt: skip
    text = summary_markdown(build_report(pd.concat([df, probe], ignore_index=True), n_boot=50))
    assert "## Points flagged unstable" in text
    flags = text.split("## Points flagged unstable")[1]
    line = next(x for x in flags.splitlines() if x.startswith("| GPU A | add | e2e_pinned |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # 4 sizes x 2 backends; both backends at 4096 were measured with the host 1.8x slow
    assert cells[3:5] == ["8", "2"] and cells[-1] == "2"


def probe_rows(frame: pd.DataFrame, seconds: float = 5e-6) -> pd.DataFrame:
    """The rows a sweep's probe adds to each point: backend "machine", float32 whatever the
    sweep's dtype (the probe is a fixed float32 add)."""
    points = frame[frame["backend"] != "bus"].drop_duplicates(["op", "size"])
    return points.assign(
        backend="machine", phase="probe", host_memory="pageable", dtype="float32",
        shape="16384", seconds=seconds, nbytes=0, repetition=0,
    )  # fmt: skip


def test_a_float64_sweep_plots_although_its_probe_rows_are_float32(tmp_path):
    frame = two_backend(ops=("add",), dtype="float64").frame(SIZES[::4], reps=7, bus_sizes=())
    path = tmp_path / "f64.csv"
    pd.concat([frame, probe_rows(frame)], ignore_index=True).to_csv(path, index=False)
    result = invoke("plot", path, "--out", tmp_path / "figs", "--summary")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "figs" / "add_time.png").exists()  # one dtype: no dtype in the name
    # one crossover per metric, of float64: the probe's float32 rows make no group of their own
    table = [line for line in result.stdout.splitlines() if line.startswith("| Synthetic GPU")]
    assert len(table) == 3 and all("no_data" not in line for line in table), result.stdout


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda f: f[f["backend"] == "machine"], "only probe rows"),
        (lambda f: f.assign(size=f["size"].where(f.index > 3, 0)), "line 2: size 0 is below 1"),
        (
            lambda f: f.assign(backend=f["backend"].replace("cpu_blas", "gpu_magic")),
            "backend 'gpu_magic' has phase 'wall', but a CUDA backend records",
        ),
    ],
    ids=["probes_only", "size_0", "unknown_backend"],
)
def test_a_csv_with_nothing_drawable_is_one_sentence(cpu_only, tmp_path, damage, words):
    frame = pd.read_csv(cpu_only, dtype={"shape": str})
    frame = pd.concat([probe_rows(frame), frame], ignore_index=True)
    path = tmp_path / "bad.csv"
    damage(frame).to_csv(path, index=False)
    result = invoke("plot", path, "--out", tmp_path / "figs")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and words in line
    assert not (tmp_path / "figs").exists()


def test_an_unknown_cpu_backend_is_drawn_as_one(cpu_only, tmp_path):
    """A backend this softcuda does not know, whose rows are those of its family (a newer
    softcuda's), is drawn: the figures need no registry."""
    frame = pd.read_csv(cpu_only, dtype={"shape": str})
    path = tmp_path / "new.csv"
    frame.assign(backend="cpu_newer").to_csv(path, index=False)
    result = invoke("plot", path, "--out", tmp_path / "figs", "--op", "add")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "figs" / "add_time.png").exists()


def test_the_crossover_against_all_cores_reads_cpu_threads_small_sizes_as_one_core(monkeypatch):
    # Where a backend runs another's kernel below some size (``runs_as_below``, made so here:
    # no backend declares it now), the report reads it so, and the crossover against all
    # cores is the one against one core, not one shifted by which of two timings of the same
    # kernel read faster (here cpu_threads' 20% below 2 MiB).
    import dataclasses

    from synthetic import from_medians

    from softcuda.backends import BACKENDS

    made = dataclasses.replace(BACKENDS["cpu_threads"], runs_as_below=("cpu_fallback", 2 << 20))
    monkeypatch.setitem(BACKENDS, "cpu_threads", made)

    from softcuda.analysis.report import build_report

    sizes = [2**10, 2**12, 2**14, 2**16, 2**17]  # add: all under 2 MiB
    medians = {
        "cpu_fallback": {n: 1e-6 + 1e-9 * n for n in sizes},
        "cpu_threads": {n: 0.8 * (1e-6 + 1e-9 * n) for n in sizes},
        "cuda_elementwise": {n: 3e-5 + 2e-10 * n for n in sizes},
    }
    report = build_report(from_medians(medians), n_boot=50)
    found = {
        c.against: c.size for c in report.crossovers if c.metric == "e2e_pinned" and c.op == "add"
    }
    assert len(found) == 2 and None not in found.values()
    assert len(set(found.values())) == 1, found


def test_figures_are_titled_with_the_sweeps_dates_not_todays(tmp_path):
    """The date in a title is when the sweep ran: its metadata's started_at, else the time
    stamp in the sweep's file name; a CSV with neither says "date unknown"."""
    import datetime
    import json

    frame = two_backend(ops=("add",), device="Some CPU").frame(
        SIZES[::4], reps=7, backends=["cpu_blas"], bus_sizes=()
    )
    dated = tmp_path / "sweep-quick-20261203T113331Z.csv"  # started before midnight, named after
    (tmp_path / "sweep-quick-20261203T113331Z.meta.json").write_text(
        json.dumps({"started_at": "2026-12-02T23:59:58Z"})
    )
    named = tmp_path / "sweep-quick-20261205T000102Z-2.csv"
    plain = tmp_path / "mine.csv"
    for path in (dated, named, plain):
        frame.to_csv(path, index=False)

    def title(*csvs) -> str:
        out = tmp_path / f"figs{len(list(tmp_path.iterdir()))}"
        result = invoke("plot", *csvs, "--out", out, "--format", "svg")
        assert result.exit_code == 0, result.output
        svg = (out / "add_time.svg").read_text()
        (line,) = re.findall(r">add \(float32\): time vs size[^<]*<", svg)
        return line[1:-1]

    assert title(dated).endswith("| Some CPU | 2026-12-02")
    assert title(dated, named).endswith("| Some CPU | 2026-12-02, 2026-12-05")
    assert title(plain).endswith("| Some CPU | date unknown")
    # two devices: each date in its device's place, not the dates sorted apart
    later = tmp_path / "sweep-quick-20261207T000000Z.csv"
    two_backend(ops=("add",), device="A GPU").frame(
        SIZES[::4], reps=7, backends=["cpu_blas"], bus_sizes=()
    ).to_csv(later, index=False)
    assert title(later, dated).endswith("| A GPU, Some CPU | 2026-12-07, 2026-12-02")
    assert datetime.date.today().isoformat() not in title(plain)
