"""The chain crossover: a chain of k ops, all-CPU against all-CUDA, as the model predicts it and
as the placement benchmark measured it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main as cli
from test_placement_graph import synthetic_profile

import softcuda as sc
from softcuda.analysis import chains
from softcuda.config import default_config_path, format_config
from softcuda.costs import CostModel


@pytest.mark.parametrize("family", list(chains.FAMILIES))
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("n", [300, 70_000, 1 << 20])
def test_the_model_adds_up_what_compile_predicts_for_the_chain(family, k, n):
    cfg = synthetic_profile()
    cpu_s, cuda_s = chains.chain_times(CostModel(cfg, "pinned"), family, k, n)
    graph = chains.chain_graph(family, k, n)
    for placement, expected in (("cpu", cpu_s), ("cuda", cuda_s)):
        plan = sc.compile(
            graph, cfg, placement=placement, host_memory="pinned", allocate=False, fuse=False
        )
        assert plan.predicted_s == pytest.approx(expected, rel=1e-9), placement


def test_crossing_finds_where_the_gpu_starts_and_stops_winning():
    sizes = [2**e for e in range(8, 29)]
    cpu = [1e-6 + 1e-9 * n for n in sizes]
    gpu = [2e-5 + 1e-10 * n for n in sizes]
    start, until = chains.crossing(sizes, cpu, gpu)
    expected = (2e-5 - 1e-6) / (1e-9 - 1e-10)  # where the two lines meet
    assert until is None and start == pytest.approx(expected, rel=0.1)
    # the whole CPU streaming faster than the bus: the GPU wins a band only
    cpu_threads = [min(c, 5e-6 + 1e-11 * n) + 1e-9 * min(n, 3e5) for c, n in zip(cpu, sizes)]
    start, until = chains.crossing(sizes, cpu_threads, gpu)
    assert start is not None and until is not None and until > start
    assert chains.crossing(sizes, cpu, [c * 2 for c in cpu]) == (None, None)


def test_the_k_chain_crossover_falls_as_the_chain_grows():
    model = chains.model_crossovers(synthetic_profile())
    for family, part in model.groupby("family"):
        found = part.sort_values("k")["from"].dropna().to_numpy()
        assert len(found) >= 3 and np.all(np.diff(found) < 0), family


def _measured(tmp_path) -> str:
    rows = []
    for family in ("unary", "binary"):
        for k in (1, 4):
            for e in range(10, 21, 2):
                n = 1 << e
                cpu = k * (1e-6 + 1e-9 * n)
                cuda = 3e-5 + k * 4e-6 + 3e-10 * n
                for placement, seconds in (("cpu", cpu), ("cuda", cuda), ("graph", min(cpu, cuda))):
                    for r in range(3):
                        rows.append(
                            [
                                f"{family} k={k}",
                                placement,
                                r,
                                seconds * (1 + r / 100),
                                seconds,
                                family,
                                k,
                                n,
                            ]
                        )
    rows.append(["mlp", "cpu", 0, 1e-3, 1e-3, "", "", ""])
    frame = pd.DataFrame(
        rows, columns=[*chains.MEASURED_COLUMNS[:4], "predicted_s", "family", "k", "n"]
    )
    path = tmp_path / "placement.csv"
    frame.to_csv(path, index=False)
    return str(path)


def test_measured_crossovers_read_the_benchmark_s_chains(tmp_path):
    found = chains.measured_crossovers(pd.read_csv(_measured(tmp_path)))
    assert set(found["family"]) == {"unary", "binary"}
    one = found[(found["family"] == "unary") & (found["k"] == 1)]["from"].iloc[0]
    four = found[(found["family"] == "unary") & (found["k"] == 4)]["from"].iloc[0]
    assert four < one  # cpu k(1 us + 1 ns n) against 30 us + 4k us + 0.3 ns n
    assert one == pytest.approx((3e-5 + 4e-6 - 1e-6) / (1e-9 - 3e-10), rel=0.15)


def test_plot_draws_the_chain_figure_from_a_model_and_a_measurement(tmp_path):
    profile = tmp_path / "GPU.soft"
    profile.write_text(format_config(synthetic_profile()))
    out = tmp_path / "figures"
    result = CliRunner().invoke(
        cli,
        ["plot", "--config", str(profile), "--chains", _measured(tmp_path), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert (out / "chain-crossover.png").stat().st_size > 10_000
    assert "chain crossover, model" in result.output
    assert "chain crossover, measured" in result.output


def test_plot_refuses_a_profile_without_costs_and_a_csv_that_is_not_the_benchmark_s(tmp_path):
    result = CliRunner().invoke(cli, ["plot", "--config", str(default_config_path())])
    assert result.exit_code == 2 and "needs a CUDA profile with [costs]" in result.output
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(cli, ["plot", "--chains", str(bad), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "not a placement benchmark CSV" in result.output
    assert "Traceback" not in result.output
    assert CliRunner().invoke(cli, ["plot"]).exit_code == 2
