"""Review of whole-graph placement: cases that broke it (each a bug found in review)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from softcuda_cli import main as cli
from test_placement_graph import PLACEMENTS, SCRIPT, synthetic_profile

import softcuda as sc
from softcuda.config import format_config
from softcuda.errors import PlacementError


def _steps_sum(plan: sc.Plan) -> float:
    return sum(s.predicted_s for s in plan.steps if s.kind in ("kernel", "copy", "h2d", "d2h"))


def test_run_json_is_strict_json_where_a_row_s_regret_or_cuda_time_is_infinite(tmp_path):
    # A CPU profile with costs: no node can move to CUDA, so regret and cuda_s are inf; strict
    # JSON (allow_nan=False) must get null, not a ValueError with exit 1.
    (tmp_path / "chain.py").write_text(SCRIPT)
    profile = tmp_path / "CPU.soft"
    profile.write_text(format_config(synthetic_profile("cpu")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(
            cli,
            ["run", str(tmp_path / "chain.py"), "--config", str(profile), "--dry-run", "--json"],
        )
    assert result.exit_code == 0, repr(result.exception)
    start = result.output.index("{")
    data = json.loads(result.output[start : result.output.rindex("}") + 1])
    kernels = [r for r in data["plan"] if r["op"] not in ("leaf", "const")]
    assert kernels and all(r["regret_s"] is None and r["cuda_s"] is None for r in kernels)


def test_plan_rows_hold_no_infinity():
    x = sc.randn((1 << 12,), seed=1)
    plan = sc.compile(sc.tanh(x) + 1.0, synthetic_profile("cpu"), placement="graph")
    for row in plan.rows():
        for key in ("predicted_s", "cpu_s", "cuda_s", "regret_s"):
            assert row[key] is None or math.isfinite(row[key]), (key, row)


def test_cuda_placement_on_a_profile_without_cuda_is_refused_not_run_on_the_cpu():
    # It once ran every node on the CPU under the name of a CUDA placement: a silent fallback.
    x = sc.randn((1 << 12,), seed=1)
    y = sc.tanh(x * 2.0)
    with pytest.raises(PlacementError, match="placement 'cuda' needs a profile of a machine"):
        sc.compile(y, synthetic_profile("cpu"), placement="cuda")


def test_a_constant_read_as_a_buffer_pays_its_copy_in_the_prediction():
    # A constant reaches a non-binary op (tanh) as a buffer: the plan bakes its h2d copy, so
    # the model must price it (the predicted total is the sum of the steps).
    x = sc.randn((1024, 1024), seed=1)
    constant = (x + 2.0).b
    out = sc.tanh(constant) + x
    for placement in PLACEMENTS:
        plan = sc.compile(out, synthetic_profile(), placement=placement, allocate=False)
        assert math.isclose(plan.predicted_s, _steps_sum(plan), rel_tol=1e-9), placement


def test_views_strided_reshapes_and_repeated_outputs_sum_to_the_prediction():
    x = sc.randn((1024, 1024), seed=1)
    y = sc.tanh(x.T)
    z = sc.tanh(y.T.reshape(1024 * 1024)) * y.reshape(1024 * 1024)
    outputs = (x, x.T, y, y, y.T, z, 2.0 - z, z * z)
    for placement in PLACEMENTS:
        plan = sc.compile(outputs, synthetic_profile(), placement=placement, allocate=False)
        steps = [s.predicted_s for s in plan.steps if s.kind in ("kernel", "copy", "h2d", "d2h")]
        assert all(np.isfinite(steps)), placement
        assert math.isclose(plan.predicted_s, sum(steps), rel_tol=1e-9), placement


def test_results_agree_across_placements_on_a_cpu_profile():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((256, 256))
    found = {}
    for placement in ("graph", "per-op", "cpu"):
        x = sc.tensor(data)  # float64
        small = sc.tensor(data[:4, :4].astype(np.float32))
        outputs = (
            2.0 - x.T.reshape(256 * 256),
            x - sc.mean(x, axis=-1, keepdims=True),
            (x @ x.T) * 0.5,
            x,
            3.0 / (small * small + 1.0),
        )
        found[placement] = sc.compile(outputs, synthetic_profile("cpu"), placement=placement)
        found[placement] = found[placement].evaluate()
    for placement, values in found.items():
        for got, want in zip(values, found["cpu"]):
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=placement)


def test_missing_neg_costs_for_a_strided_reshape_name_the_reshape():
    # The graph has no neg: a refusal naming only "neg" sends the user looking for one.
    import dataclasses

    import pytest

    from softcuda.planner import MissingCosts

    cfg = synthetic_profile()
    cfg = dataclasses.replace(cfg, costs={k: v for k, v in cfg.costs.items() if k != "neg"})
    x = sc.randn((64, 64), seed=2)
    with pytest.raises(MissingCosts, match="reshape of strided data"):
        sc.compile(sc.tanh(x.T.reshape(64 * 64)), cfg, placement="graph", allocate=False)


def test_per_op_does_not_price_a_backend_the_profile_has_no_costs_for_as_another():
    # A rule naming cuda_naive (no [costs] curve) was predicted at cuda_blas's time: the plan's
    # total and the step's "predicted" were another backend's.  Not priced is nan / None.
    from softcuda.config import Rule

    cfg = synthetic_profile()
    cfg.rules["matmul"] = [Rule("matmul", 0, None, "cuda_naive")]
    x = sc.randn((1024, 1024), seed=1)
    plan = sc.compile(x @ x, cfg, placement="per-op", allocate=False)
    step = next(s for s in plan.steps if s.kind == "kernel")
    assert step.backend_id == "cuda_naive"
    assert math.isnan(step.predicted_s) or plan.predicted_s is None


def test_a_binary_op_of_two_constants_passes_neither_as_a_number():
    # kernels take one number at most: 2.0 * 3.0 in a graph reads its constants as buffers
    x = sc.randn((8,), seed=1)
    two_consts = (x + 2.0).b * 3.0
    plan = sc.compile(two_consts + x, synthetic_profile(), placement="cuda", allocate=False)
    copied = {s.node.label for s in plan.steps if s.kind == "h2d"}
    consts = [t for t in two_consts.inputs]
    assert all(t.label in copied for t in consts)


def test_crossing_is_a_size_where_one_side_cannot_run_at_a_neighbour():
    from softcuda.analysis.chains import crossing

    start, _ = crossing([1, 10, 100], [1.0, 1.0, 1.0], [math.inf, 2.0, 0.5])
    assert start is not None and math.isfinite(start) and 10 <= start <= 100
    start, _ = crossing([1, 10, 100], [1.0, 1.0, 1.0], [math.inf, 0.5, 0.5])
    assert math.isclose(start, 10)


def test_the_planner_itself_refuses_a_cuda_placement_on_a_cpu_profile():
    from softcuda.costs import CostModel
    from softcuda.planner import Planner

    with pytest.raises(PlacementError, match="placement 'cuda' needs a profile of a machine"):
        Planner(CostModel(synthetic_profile("cpu")), "cuda")
