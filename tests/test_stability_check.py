"""softcuda.analysis.compare: how two runs' medians are paired, counted and judged."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from softcuda.analysis.compare import agreement, compare_sweeps, format_comparison
from softcuda.timings import schema
from tests.synthetic import DEFAULT_SIZES, Cost, Scenario, two_backend


def verdict(frames) -> tuple[int, str]:
    """0 when the two runs count as stable, else 1 (the exit status of the comparison), and
    the report."""
    comparison = compare_sweeps(frames, schema.DEFAULT_METRIC)
    return (0 if comparison.stable else 1), format_comparison(comparison)


def runs(slower_cpu_sizes=(), factor=1.3):
    """Two runs of one scenario (different noise draws); in run 2 the CPU backend's rows at
    ``slower_cpu_sizes`` take ``factor`` times as long."""
    scenario = two_backend(Cost(2e-6, 1e-9), Cost(5e-6, 1e-11))
    one = scenario.frame(reps=15, noise=0.01, seed=1, bus_sizes=())
    two = scenario.frame(reps=15, noise=0.01, seed=2, bus_sizes=())
    slow = two["backend"].eq("cpu_blas") & two["size"].isin(list(slower_cpu_sizes))
    two.loc[slow, "seconds"] *= factor
    return [one, two]


def test_agreement_counts_a_cpu_median_once_and_a_cuda_median_per_metric():
    table = agreement(runs())
    sizes = len(DEFAULT_SIZES)
    metrics = len(schema.METRICS)
    cpu = table["backend"] == "cpu_blas"
    assert len(table) == 2 * sizes * metrics  # every metric pairs both backends at every size
    assert int(table.loc[cpu, "first"].sum()) == sizes
    assert int(table.loc[~cpu, "first"].sum()) == sizes * metrics
    # The CPU rows of one size are the same median under every metric.
    per_size = table[cpu].groupby("size")["median_s_1"].nunique()
    assert (per_size == 1).all()
    assert table["ok"].all()
    assert table["ratio"].between(0.97, 1.03).all()


def test_agreement_marks_medians_that_moved_more_than_the_tolerance():
    moved = DEFAULT_SIZES[2:5]
    table = agreement(runs(moved, factor=1.2))
    off = table[~table["ok"]]
    assert set(off["backend"]) == {"cpu_blas"}
    assert set(off["size"]) == set(moved)
    assert off["ratio"].between(1.15, 1.25).all()
    assert int(off["first"].sum()) == len(moved)


def test_verdict_counts_each_measurement_once():
    # 5 of 19 CPU sizes 30% slower in run 2: 5 of 4 x 19 medians counted once (93% agree),
    # 15 of 6 x 19 counted per metric (87%).
    moved = DEFAULT_SIZES[-5:]
    code, out = verdict(runs(moved))
    assert code == 0
    n = len(DEFAULT_SIZES)
    assert f"{4 * n - 5} of {4 * n} within 10%" in out
    assert f"CPU backends {n - 5} of {n}, CUDA backends {3 * n} of {3 * n}" in out
    assert f"{6 * n - 15} of {6 * n}, 87%" in out
    assert "-> STABLE" in out


def test_verdict_fails_when_too_many_medians_move():
    moved = DEFAULT_SIZES[-9:]  # 9 of 76 medians counted once: 88% agree
    code, out = verdict(runs(moved))
    assert code == 1
    assert "88.2% of medians within 10% -> NOT STABLE" in out


def test_verdict_fails_when_assignments_differ():
    one, two = runs()
    cpu = two["backend"] == "cpu_blas"
    two.loc[cpu, "seconds"] *= 1e3  # run 2: the CPU backend never wins
    code, out = verdict([one, two])
    assert code == 1
    assert "DIFFERENT" in out
    assert "assignments DIFFER" in out


def test_agreement_of_runs_without_common_points_is_empty():
    one, two = runs()
    two = two.assign(op="mul")
    table = agreement([one, two])
    assert isinstance(table, pd.DataFrame)
    assert table.empty
    code, out = verdict([one, two])
    assert code == 1
    assert "nothing to compare" in out


def test_a_median_that_got_faster_counts_as_moved():
    one, two = runs()
    kernel = two["backend"].eq("cuda_elementwise") & two["phase"].eq("kernel")
    two.loc[kernel & two["size"].eq(DEFAULT_SIZES[12]), "seconds"] *= 0.8
    table = agreement([one, two])
    off = table[~table["ok"]]
    assert list(off["metric"]) == ["resident"]
    assert off["ratio"].iloc[0] == pytest.approx(0.8, rel=0.03)


def test_assignments_that_differ_fail_even_when_every_paired_median_agrees():
    one, two = runs()
    two["backend"] = two["backend"].replace("cuda_elementwise", "cuda_naive")
    table = agreement([one, two])
    assert table["ok"].all() and set(table["backend"]) == {"cpu_blas"}
    code, out = verdict([one, two])
    assert code == 1
    assert "assignments DIFFER; 100.0% of medians within 10% -> NOT STABLE" in out


def with_probe(frame, seed, slower=(), factor=1.07):
    """``frame`` with probe rows (the host's fixed add, 15 per point) at about 3 us, ``factor``
    times that at the sizes ``slower``."""
    rng = np.random.default_rng(seed)
    points = frame.loc[frame["backend"] != "bus", ["device_hash", "device", "op", "size"]]
    rows = []
    for point in points.drop_duplicates().itertuples(index=False):
        base = 3e-6 * (factor if point.size in slower else 1.0)
        for rep in range(15):
            rows.append(
                {
                    **point._asdict(),
                    "schema": schema.SCHEMA_VERSION,
                    "shape": "16384",
                    "dtype": "float32",
                    "backend": schema.PROBE_BACKEND,
                    "host_memory": "pageable",
                    "phase": schema.PROBE_PHASE,
                    "repetition": rep,
                    "seconds": base * np.exp(0.003 * rng.standard_normal()),
                    "nbytes": 0,
                    "attempt": 0,
                }
            )
    return pd.concat([frame, pd.DataFrame(rows)[frame.columns]], ignore_index=True)


def test_summary_lines_count_each_median_once_over_their_own_points():
    sizes = DEFAULT_SIZES
    host_moved = sizes[3:6]  # the probe 7% slower in run 2: not the same host, still steady
    few_reps = sizes[8:10]  # run 1's CUDA rows: 2 per host memory (4 kernel), flagged unstable
    faster = sizes[12]  # run 2's kernel 20% faster: the resident median moves
    retried = sizes[14]  # run 1 measured the point twice; its first attempt's CPU 50% slower
    cpu_slower = sizes[15:]  # run 2's CPU 30% slower
    one, two = runs(cpu_slower)
    one, two = with_probe(one, 3), with_probe(two, 4, slower=host_moved)
    cut = one["backend"].eq("cuda_elementwise") & one["size"].isin(few_reps)
    one = one[~cut | (one["repetition"] < 2)]
    kernel = two["backend"].eq("cuda_elementwise") & two["phase"].eq("kernel")
    two.loc[kernel & two["size"].eq(faster), "seconds"] *= 0.8
    again = one[one["size"].eq(retried)].assign(attempt=1)
    first_cpu = one["size"].eq(retried) & one["backend"].eq("cpu_blas")
    one.loc[first_cpu, "seconds"] *= 1.5
    one = pd.concat([one, again], ignore_index=True)

    code, out = verdict([one, two])
    assert code == 0
    n = len(sizes)
    misses = len(cpu_slower) + 1  # and the faster kernel
    assert f"{4 * n - misses} of {4 * n} within 10%" in out
    same = 4 * (n - len(host_moved))
    assert f"(probe within 5%): {round(100 * (same - misses) / same)}% of {same} medians" in out
    steady = 4 * n - 3 * len(few_reps)
    assert f"{round(100 * (steady - misses) / steady)}% of {steady} medians within 10%" in out
    first = 4 * n - misses - 1  # the retried point's first attempt is off too
    assert f"{round(100 * first / (4 * n))}% of {4 * n} medians within 10%" in out


def test_restated_criterion_holds_for_two_runs_that_differ_only_by_noise():
    comparison = compare_sweeps(runs(), schema.DEFAULT_METRIC)
    restated = comparison.restated
    assert restated.stable and restated.same_assignments
    assert restated.boundaries and all(b.ok for b in restated.boundaries)
    assert restated.kernels[0] == restated.kernels[1] > 0
    assert "-> STABLE (restated)" in format_comparison(comparison)


def test_restated_criterion_fails_on_one_kernel_median_off_by_more_than_5_percent():
    """The old bar (90% of medians within 10%) passes; one kernel-only median 8% slower fails
    the restated one, and the count says which share held."""
    one, two = runs()
    kernel = two["backend"].eq("cuda_elementwise") & two["phase"].eq("kernel")
    two.loc[kernel & two["size"].eq(DEFAULT_SIZES[12]), "seconds"] *= 1.08
    comparison = compare_sweeps([one, two], schema.DEFAULT_METRIC)
    assert comparison.stable
    restated = comparison.restated
    assert not restated.stable
    assert restated.kernels == (restated.kernels[1] - 1, restated.kernels[1])
    out = format_comparison(comparison)
    assert f"kernel-only medians within 5%: {restated.kernels[0]} of {restated.kernels[1]}" in out
    assert "-> NOT STABLE (restated)" in out


def test_restated_criterion_fails_on_a_boundary_that_moved_beyond_15_percent_and_its_interval():
    one, two = runs()
    cpu = two["backend"].eq("cpu_blas")
    two.loc[cpu, "seconds"] *= 1.5  # the crossover moves down by about half
    comparison = compare_sweeps([one, two], schema.DEFAULT_METRIC)
    assert comparison.same_assignments
    (boundary,) = comparison.restated.boundaries
    assert boundary.run_2 < 0.8 * boundary.run_1
    assert boundary.interval is not None
    assert not boundary.ok and not comparison.restated.stable
    assert ", OUT)" in format_comparison(comparison)


def test_a_boundary_inside_its_own_interval_holds_even_past_15_percent():
    from softcuda.analysis.compare import Boundary

    assert Boundary("add", 1000, 1300, (900, 1400)).ok
    assert not Boundary("add", 1000, 1300, (900, 1200)).ok
    assert Boundary("add", 1000, 1140, None).ok
    assert not Boundary("add", 1000, 1160, None).ok


def cpu_runs():
    """Two runs of a CPU-only scenario (a machine without a GPU: two CPU backends that cross,
    no CUDA rows), different noise draws."""
    scenario = Scenario(costs={"cpu_blas": Cost(2e-6, 1e-9), "cpu_threads": Cost(2e-5, 1e-10)})
    return [scenario.frame(reps=15, noise=0.01, seed=s, bus_sizes=()) for s in (1, 2)]


def test_restated_criterion_is_not_applicable_without_cuda_kernel_medians():
    """A CPU-only pair has no kernel-only median to hold within 5%: the report said STABLE and
    NOT STABLE (restated) for one sweep against itself.  Nothing to judge is "not applicable",
    in the report and in the plain data (stable None, applicable False)."""
    one, _ = cpu_runs()
    comparison = compare_sweeps([one, one], schema.DEFAULT_METRIC)
    assert comparison.stable
    restated = comparison.restated
    assert restated.kernels == (0, 0)
    assert restated.applicable is False and restated.stable is None
    out = format_comparison(comparison)
    assert "-> STABLE\n" in out and "NOT STABLE" not in out
    assert "  -> not applicable (restated: no CUDA kernel-only medians to compare)\n" in out
    data = comparison.to_dict()["restated"]
    assert data["applicable"] is False and data["stable"] is None
    assert compare_sweeps(runs()).to_dict()["restated"]["applicable"] is True


def fake_sweeps(monkeypatch, frames):
    """benchmarks/stability.py with its sweeps replaced by ``frames`` (one per run) and its
    fixed workloads by constants: its comparison and exit status, without measuring."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "stability.py"
    spec = importlib.util.spec_from_file_location("script_stability_exit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    frames = iter(frames)

    class Sweep:
        elapsed_s = waited_s = 0.0

        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self) -> pd.DataFrame:
            return next(frames)

        def settle(self) -> SimpleNamespace:
            return SimpleNamespace(summary=lambda: "off")

    monkeypatch.setattr(module, "Sweep", Sweep)
    monkeypatch.setattr(module, "canary", lambda cuda: {"cpu add": 1.0})
    machine = SimpleNamespace(label="CPU-only test machine", device_type="cpu")
    spec = SimpleNamespace(metric=schema.DEFAULT_METRIC)
    return lambda: module.compare_two_runs(spec, "smoke.yaml", "/nowhere", machine)


def test_stability_exit_follows_the_first_verdict_where_the_restated_one_does_not_apply(
    monkeypatch, capsys
):
    """A CPU-only pair (CI's smoke sweep) exited 1, by a restated verdict it could never pass;
    where that verdict is not applicable, the exit status is the first verdict's."""
    one, two = cpu_runs()
    assert fake_sweeps(monkeypatch, [one, two])() == 0
    out = capsys.readouterr().out
    assert "-> STABLE\n" in out and "-> not applicable (restated" in out
    moved = two.copy()
    moved.loc[moved["backend"].eq("cpu_blas"), "seconds"] *= 1e3  # cpu_threads always wins
    assert fake_sweeps(monkeypatch, [one, moved])() == 1
    assert "-> NOT STABLE\n" in capsys.readouterr().out
    # with CUDA rows the restated verdict decides: one kernel-only median 8% off fails it
    one, two = runs()
    kernel = two["backend"].eq("cuda_elementwise") & two["phase"].eq("kernel")
    two.loc[kernel & two["size"].eq(DEFAULT_SIZES[12]), "seconds"] *= 1.08
    assert fake_sweeps(monkeypatch, [one, two])() == 1
    out = capsys.readouterr().out
    assert "-> STABLE\n" in out and "-> NOT STABLE (restated)" in out
