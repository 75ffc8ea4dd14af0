"""Whole-graph placement in compile: the placements, their predictions, their results.

The profiles here are synthetic (costs made from simple formulas, a [bus] of 50 GB/s) so that
the tests know what each placement must do; ``allocate=False`` plans need none of their
backends, so the CUDA profile's plans are placed and priced on any machine.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from softcuda_cli import main as cli

import softcuda as sc
from softcuda import backends, config, pool
from softcuda.config import Config, CostCurve, Rule, default_config, format_config
from softcuda.costs import CostModel
from softcuda.errors import PlacementError
from softcuda.ops import CONFIGURABLE_OPS, OPS
from softcuda.planner import PLACEMENTS

ELEMENT_SIZES = tuple(4**k for k in range(4, 13))  # 256 .. 2^24
MATMUL_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# (fixed seconds, seconds per unit of work) per backend: the CPU is cheap to call and slow per
# element, the GPU the other way round, cpu_threads between.
MODELS = {
    "cpu_fallback": (1e-6, 1e-9, 1e-9),
    "cpu_blas": (1.5e-6, 1.1e-9, 2e-11),
    "cpu_threads": (6e-6, 1.5e-10, 2.5e-11),
    "cuda_elementwise": (4e-6, 2e-12, None),
    "cuda_blas": (6e-6, None, 1e-13),
}


def _curve(op: str, backend: str) -> CostCurve | None:
    fixed, per_element, per_flop = MODELS[backend]
    matmul = OPS[op].kind == "matmul"
    per = per_flop if matmul else per_element
    if per is None or op not in backends.BACKENDS[backend].ops:
        return None
    sizes = MATMUL_SIZES if matmul else ELEMENT_SIZES
    power = OPS[op].work_power
    return CostCurve(op, sizes, tuple(float(fixed + per * s**power) for s in sizes))


def synthetic_profile(device_type: str = "cuda") -> Config:
    """A profile with costs for every op: CUDA ("cuda") or only the CPU backends ("cpu").

    Its per-op rules are what a sweep of isolated ops decides: the GPU from 2^17 elements (and
    n = 128), except tanh and sigmoid, left on the CPU as an unmeasured op once was."""
    cfg = dataclasses.replace(default_config(), path="synthetic.soft")
    cfg.meta = {**cfg.meta, "device_hash": "synthetic"}
    cfg.device = {"type": device_type}
    cfg.costs = {}
    for op in CONFIGURABLE_OPS:
        for backend in MODELS:
            if device_type == "cpu" and backends.BACKENDS[backend].device == "cuda":
                continue
            curve = _curve(op, backend)
            if curve is not None:
                cfg.costs.setdefault(op, {})[backend] = curve
    if device_type == "cuda":
        cfg.bus = {
            f"{d}_{k}_{w}": v
            for d in ("h2d", "d2h")
            for k, gbps in (("pinned", "50"), ("pageable", "12"))
            for w, v in (("gbps", gbps), ("latency_us", "8"))
        }
        cfg.pool = {**cfg.pool, "device": "cuda", "host_memory": "pinned"}
        cfg.rules = {}
        for op in CONFIGURABLE_OPS:
            if op in ("tanh", "sigmoid"):
                continue  # DEFAULT.soft's CPU rule
            cut = 128 if op == "matmul" else 1 << 17
            gpu = "cuda_blas" if op == "matmul" else "cuda_elementwise"
            cfg.rules[op] = [Rule(op, 0, cut, "cpu_fallback"), Rule(op, cut, None, gpu)]
    cfg._device_checked = True
    return cfg


SWITCH_US = "4096:2 65536:4.5 262144:10 1048576:20 4194304:10"
"""A [bus] switch_us line shaped like the H200's measurement (results/nvidia-h200/switch-cost.txt):
a few microseconds for small values, most around 1 MiB, less again at 4 MiB."""


def switch_profile() -> Config:
    """The synthetic CUDA profile with a hand-off cost."""
    cfg = synthetic_profile()
    cfg.bus = {**cfg.bus, "switch_us": SWITCH_US}
    return cfg


def chain(n: int, k: int = 8) -> sc.Tensor:
    x = sc.randn((n,), seed=1)
    b = sc.randn((n,), seed=2)
    y = x
    for i in range(k):
        y = [sc.relu, lambda t: t + b, lambda t: t * 0.5, sc.tanh][i % 4](y)
    return y


def random_graph(rng: np.random.Generator, n: int) -> dict[str, sc.Tensor]:
    """A DAG of elementwise ops, reductions and (on square data) matmuls, whose values are read
    by several nodes, with two outputs."""
    rows = int(rng.choice([1, 8, 64]))
    shape = (rows, max(n // rows, 1))
    values = [sc.tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(2)]
    for _ in range(int(rng.integers(3, 12))):
        a, b = (values[int(i)] for i in rng.integers(0, len(values), 2))
        pick = int(rng.integers(0, 9))
        if pick == 0:
            new = a + b
        elif pick == 1:
            new = a * b
        elif pick == 2:
            new = sc.tanh(a)
        elif pick == 3:
            new = sc.relu(a) - 0.25
        elif pick == 4:
            new = 2.0 * sc.sigmoid(a)
        elif pick == 5:
            new = a + sc.mean(b, axis=-1, keepdims=True)
        elif pick == 6:
            new = sc.softmax(a, axis=-1)
        elif pick == 7 and a.dims[0] == a.dims[1]:
            new = sc.tanh(a @ b)
        else:
            new = sc.square(sc.tanh(a)) + b
        values.append(new)
    return {"last": values[-1], "sum": sc.sum(values[len(values) // 2])}


def plans(outputs, cfg, **kwargs) -> dict[str, sc.Plan]:
    return {p: sc.compile(outputs, cfg, placement=p, **kwargs) for p in PLACEMENTS}


# ---- what each placement decides ---------------------------------------------------------------


def test_graph_placement_keeps_a_chain_on_the_gpu_where_per_op_bounces_it():
    cfg = synthetic_profile()
    found = plans(chain(1 << 20), cfg, allocate=False, fuse=False)
    moves = {p: sum(s.kind in ("h2d", "d2h") for s in plan.steps) for p, plan in found.items()}
    # per-op: every tanh goes back to the host and every next op comes over again
    assert moves["per-op"] > moves["cuda"] == moves["graph"] == 3  # x and b in, y out
    assert {s.device for s in found["graph"].steps if s.kind == "kernel"} == {"cuda"}
    assert found["graph"].predicted_s < found["per-op"].predicted_s / 5


def test_a_small_graph_stays_on_the_cpu():
    found = plans(chain(256), synthetic_profile(), allocate=False)
    assert {s.device for s in found["graph"].steps} == {"cpu"}
    assert found["graph"].predicted_s == pytest.approx(found["cpu"].predicted_s)


@pytest.mark.parametrize("seed", range(60))
def test_the_graph_plan_is_never_predicted_slower_than_any_other(seed):
    rng = np.random.default_rng(seed)
    outputs = random_graph(rng, int(rng.choice([256, 4096, 1 << 14, 1 << 16, 1 << 20])))
    for profile in (synthetic_profile(), switch_profile()):
        found = plans(outputs, profile, allocate=False)
        best = min(found[p].predicted_s for p in ("per-op", "cpu", "cuda"))
        assert found["graph"].predicted_s <= best * (1 + 1e-6) + 1e-9, profile.bus


# ids not named "cuda": a test whose id holds the word gets the cuda marker's skip
@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: f"placement={p}")
@pytest.mark.parametrize("profile", [synthetic_profile, switch_profile])
def test_the_prediction_is_the_sum_of_the_plan_s_own_steps(placement, profile):
    """Every step's predicted time, a device->host copy's with its hand-off where the plan
    pays one, adds up to the plan's: on a random graph, and on a chain that per-op bounces
    between the devices (tanh on the CPU) and the graph plan (with the hand-off) does not."""
    rng = np.random.default_rng(7)
    handed = 0
    for graph in (random_graph(rng, 1 << 16), chain(1 << 20), chain(1 << 14)):
        plan = sc.compile(graph, profile(), placement=placement, allocate=False)
        steps = [s.predicted_s for s in plan.steps if s.kind in ("kernel", "copy", "h2d", "d2h")]
        assert all(np.isfinite(steps))  # every copy the plan bakes, the model paid for
        assert plan.predicted_s == pytest.approx(sum(steps), rel=1e-9)
        handed += sum("hand-off" in s.decided_by for s in plan.steps)
    if placement == "per-op" and profile is switch_profile:
        assert handed == 2  # chain(2^20)'s two tanhs read values made on the GPU
    elif placement != "graph" or profile is synthetic_profile:
        assert handed == 0


# (seed, elements, placement, each kernel's device, predicted seconds) of random_graph under
# synthetic_profile(), as the model gave them before [bus] switch_us existed (commit 2ea1c09):
# a profile without the line must plan exactly so
# (the graph plans' host-only steps run after their GPU steps, graph.gpu_work_first: their
# device strings were recorded in the order before it, with the same devices and totals)
BEFORE_SWITCH = [
    (3, 262144, "graph", "ggc", 9.1341776e-05),
    (3, 262144, "per-op", "gcg", 0.00039382161599999996),
    (3, 262144, "cpu", "ccc", 0.00013596479999999998),
    (3, 262144, "cuda", "ggg", 0.000108487504),
    (7, 16384, "graph", "ccgggggggggggg", 9.1929936e-05),
    (7, 16384, "per-op", "cccccccccccccc", 0.0002519296),
    (7, 16384, "cpu", "cccccccccccccc", 0.0001184064),
    (7, 16384, "cuda", "gggggggggggggg", 9.2390992e-05),
    (15, 16384, "graph", "ggggggccc", 6.688020799999999e-05),
    (15, 16384, "per-op", "ccccccccc", 0.00016287120000000002),
    (15, 16384, "cpu", "ccccccccc", 7.61184e-05),
    (15, 16384, "cuda", "ggggggggg", 7.2227152e-05),
    (53, 65536, "graph", "gggggc", 7.09716e-05),
    (53, 65536, "per-op", "cccccc", 0.0004062696),
    (53, 65536, "cpu", "cccccc", 9.498240000000001e-05),
    (53, 65536, "cuda", "gggggg", 7.251515200000001e-05),
    (59, 65536, "graph", "gggc", 6.2709456e-05),
    (59, 65536, "per-op", "cccc", 0.0002802512),
    (59, 65536, "cpu", "cccc", 6.33216e-05),
    (59, 65536, "cuda", "gggg", 6.4253008e-05),
    (5, 1048576, "graph", "ggggggggggg", 0.000350726992),
    (5, 1048576, "per-op", "cggcggcgggg", 0.004256666735999999),
    (5, 1048576, "cpu", "ccccccccccc", 0.0017961504000000002),
    (5, 1048576, "cuda", "ggggggggggg", 0.000350726992),
]


def _devices(plan: sc.Plan) -> str:
    return "".join(
        s.device[0] if s.device == "cpu" else "g"
        for s in plan.steps
        if s.kind in ("kernel", "copy")
    )


@pytest.mark.parametrize("seed", sorted({case[0] for case in BEFORE_SWITCH}))
def test_a_profile_without_switch_us_plans_as_before_it_existed(seed):
    """Same devices, same totals; where the graph plan handed a value to the CPU (seeds 53, 59:
    a GPU value read by a CPU node), the hand-off's price moves it."""
    cases = [case for case in BEFORE_SWITCH if case[0] == seed]
    outputs = random_graph(np.random.default_rng(seed), cases[0][1])
    for _, _, placement, devices, predicted in cases:
        plan = sc.compile(
            outputs, synthetic_profile(), placement=placement, allocate=False, fuse=False
        )
        assert (_devices(plan), plan.predicted_s) == (devices, pytest.approx(predicted, rel=1e-12))
    graph = sc.compile(outputs, switch_profile(), placement="graph", allocate=False, fuse=False)
    before = next(c for c in cases if c[2] == "graph")
    handed_before = seed in (53, 59)
    assert (_devices(graph) != before[3]) == handed_before
    assert "hand-off" not in "".join(s.decided_by for s in graph.steps)


def test_the_hand_off_is_paid_once_per_value_in_the_total_the_regret_and_explain():
    """Per-op runs chain(2^20)'s tanhs on the CPU, each reading a value made on the GPU: two
    hand-offs of 4 MiB (switch_us says 10 us there).  Moving the first tanh to the GPU saves
    one of them, which its regret says."""
    graph = chain(1 << 20)
    plain = sc.compile(graph, synthetic_profile(), placement="per-op", allocate=False, fuse=False)
    dear = sc.compile(graph, switch_profile(), placement="per-op", allocate=False, fuse=False)
    assert _devices(plain) == _devices(dear) == "gggcgggc"
    assert CostModel(switch_profile()).switch_s(4 << 20) == pytest.approx(10e-6)
    assert dear.predicted_s == pytest.approx(plain.predicted_s + 2 * 10e-6, rel=1e-12)
    tanhs = [
        (a.choice.regret_s, b.choice.regret_s)
        for a, b in zip(plain.steps, dear.steps)
        if a.kind == "kernel" and a.node.op == "tanh"
    ]
    assert tanhs[0][1] == pytest.approx(tanhs[0][0] - 10e-6, rel=1e-9)
    text = dear.explain()
    rows = [line for line in text.splitlines() if "hand-off to the cpu" in line]
    assert len(rows) == 2 and all(">cpu" in row and "10 us hand-off" in row for row in rows)
    assert "hand-off to the cpu" not in plain.explain()


def test_regret_in_the_graph_plan_is_never_negative_and_names_the_cost_of_a_move():
    plan = sc.compile(chain(1 << 20), synthetic_profile(), placement="graph", allocate=False)
    regrets = [s.choice.regret_s for s in plan.steps if s.kind == "kernel"]
    assert min(regrets) >= -1e-9 and max(regrets) > 0
    text = plan.explain()
    for column in ("predicted", "cpu", "cuda", "regret", "placement: graph"):
        assert column in text


def test_scalars_are_kernel_arguments_never_copied():
    x = sc.randn((1 << 20,), seed=3)
    y = sc.tanh(2.0 * x - 1.0)
    plan = sc.compile(y, synthetic_profile(), placement="cuda", allocate=False)
    moved = [s.node for s in plan.steps if s.kind == "h2d"]
    assert moved == [x]  # the two constants never cross the bus


def test_a_strided_reshape_is_placed_and_priced_like_any_copy():
    x = sc.randn((512, 1024), seed=4)
    y = sc.sum(sc.tanh(x.T.reshape(1024 * 512)) * 3.0)
    for p, plan in plans(y, synthetic_profile(), allocate=False).items():
        copy = next(s for s in plan.steps if s.kind == "copy")
        assert np.isfinite(copy.predicted_s), p


def test_a_cpu_profile_with_costs_places_everything_on_its_fastest_cpu_backends():
    cfg = synthetic_profile("cpu")
    plan = sc.compile(chain(1 << 20), cfg, placement="graph", allocate=False, fuse=False)
    assert {s.backend_id for s in plan.steps if s.kind == "kernel"} == {"cpu_threads"}
    plan = sc.compile(chain(256), cfg, placement="graph", allocate=False, fuse=False)
    assert {s.backend_id for s in plan.steps if s.kind == "kernel"} == {"cpu_fallback"}
    # explain says a node cannot move to a GPU the profile's machine lacks; JSON rows say null
    assert "cannot" in plan.explain()
    assert all(r["regret_s"] is None for r in plan.rows() if r["op"] == "relu")


def test_the_default_placement_is_graph_with_costs_and_per_op_without():
    y = chain(1 << 20)
    assert sc.compile(y, synthetic_profile(), allocate=False).placement == "graph"
    plan = sc.compile(y, default_config(), allocate=False)
    assert plan.placement == "per-op" and plan.predicted_s is None
    assert "predicted" not in plan.explain()


# ---- the same values under every placement ----------------------------------------------------


def _outputs_under(cfg, names, seed):
    rng = np.random.default_rng(seed)
    outputs = random_graph(rng, int(rng.choice([64, 4096, 1 << 15])))
    return {p: sc.compile(outputs, cfg, placement=p).evaluate() for p in names}


@pytest.mark.parametrize("seed", range(12))
def test_every_cpu_placement_computes_the_same_values(seed):
    found = _outputs_under(synthetic_profile("cpu"), ("graph", "per-op", "cpu"), seed)
    for name, values in found.items():
        for key in values:
            np.testing.assert_allclose(
                values[key], found["per-op"][key], rtol=2e-5, atol=2e-5, err_msg=name
            )


@pytest.mark.cuda
@pytest.mark.parametrize("seed", range(12))
def test_every_placement_computes_the_same_values_on_the_gpu(seed):
    found = _outputs_under(synthetic_profile("cuda"), PLACEMENTS, seed)
    for name, values in found.items():
        for key in values:
            np.testing.assert_allclose(
                values[key], found["cpu"][key], rtol=2e-5, atol=2e-5, err_msg=name
            )


def test_a_graph_plan_s_evaluate_reads_no_config_and_allocates_nothing(monkeypatch):
    x = sc.randn((64, 64), seed=0)
    out = {"y": sc.tanh(x @ x.T + 1.0), "s": sc.mean(x * 2.0, axis=0)}
    plan = sc.compile(out, synthetic_profile("cpu"), placement="graph")
    expected = plan.evaluate()

    def forbidden(*args, **kwargs):
        raise AssertionError("decided at run time")

    for target, name in (
        (config.Config, "lookup"),
        (CostModel, "resident_s"),
        (CostModel, "transfer_s"),
        (config, "load_config"),
        (backends, "get"),
        (pool.BumpPool, "alloc"),
        (pool.BumpPool, "_new_block"),
    ):
        monkeypatch.setattr(target, name, forbidden)
    again = plan.evaluate()
    np.testing.assert_array_equal(again["y"], expected["y"])
    with pytest.raises(AssertionError, match="run time"):  # the monkeypatches do bite
        sc.compile(x + 1.0, synthetic_profile("cpu"), placement="graph")


# ---- refusals ------------------------------------------------------------------------------------


def test_graph_placement_without_costs_says_what_is_missing_and_what_to_run():
    with pytest.raises(PlacementError, match=r"has no \[costs\].*softcuda init --from"):
        sc.compile(chain(256), default_config(), placement="graph")


def test_graph_placement_names_the_ops_the_costs_lack():
    cfg = synthetic_profile()
    del cfg.costs["tanh"]
    with pytest.raises(PlacementError, match=r"no costs for tanh\b"):
        sc.compile(chain(256), cfg, placement="graph", allocate=False)
    cfg = synthetic_profile()
    del cfg.costs["relu"]["cuda_elementwise"]  # priced on the CPU only
    with pytest.raises(PlacementError, match=r"no costs for relu\b"):
        sc.compile(chain(256), cfg, placement="graph", allocate=False)


def test_by_default_a_graph_the_costs_cannot_price_is_placed_per_op_and_says_why():
    cfg = synthetic_profile()
    del cfg.costs["tanh"]
    plan = sc.compile(chain(1 << 20), cfg, allocate=False)
    assert plan.placement == "per-op"
    assert "graph placement not possible: no costs for tanh" in plan.explain()
    kernels = [s for s in plan.steps if s.kind == "kernel"]
    per_op = sc.compile(chain(1 << 20), cfg, allocate=False, placement="per-op")
    assert [s.backend_id for s in kernels] == [
        s.backend_id for s in per_op.steps if s.kind == "kernel"
    ]


def test_an_unknown_placement_lists_the_valid_ones():
    with pytest.raises(PlacementError, match="graph, per-op, cpu, cuda"):
        sc.compile(chain(256), synthetic_profile(), placement="gpu", allocate=False)


# ---- the command line ----------------------------------------------------------------------------

SCRIPT = """\
import softcuda as sc


def build():
    x = sc.randn((1 << 20,), seed=1)
    b = sc.randn((1 << 20,), seed=2)
    y = x
    for i in range(8):
        y = [sc.relu, lambda t: t + b, lambda t: t * 0.5, sc.tanh][i % 4](y)
    return y
"""


def _files(tmp_path, cfg):
    (tmp_path / "chain.py").write_text(SCRIPT)
    profile = tmp_path / "GPU.soft"
    profile.write_text(format_config(cfg))
    return str(tmp_path / "chain.py"), str(profile)


def test_dry_run_places_and_predicts_a_gpu_profile_s_plan_on_any_machine(tmp_path):
    script, profile = _files(tmp_path, synthetic_profile())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(
            cli, ["run", script, "--config", profile, "--dry-run", "--no-fuse"]
        )
    assert result.exit_code == 0, result.output
    assert "placement: graph" in result.output and "predicted total" in result.output
    assert "cuda_elementwise" in result.output
    per_op = CliRunner().invoke(
        cli, ["run", script, "--config", profile, "--dry-run", "--placement", "per-op"]
    )
    assert per_op.exit_code == 0 and "placement: per-op" in per_op.output
    # a profile with [bus] switch_us: the hand-offs show in the copy rows that pay them
    script, profile = _files(tmp_path, switch_profile())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_op = CliRunner().invoke(
            cli, ["run", script, "--config", profile, "--dry-run", "--placement", "per-op"]
        )
    assert per_op.exit_code == 0, per_op.output
    assert per_op.output.count("hand-off to the cpu ([bus] switch_us)") == 2


def test_run_with_graph_placement_and_no_costs_is_exit_2_in_one_sentence(tmp_path):
    script, _ = _files(tmp_path, synthetic_profile())
    result = CliRunner().invoke(
        cli, ["run", script, "--config", str(config.default_config_path()), "--placement", "graph"]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "softcuda init --from" in lines[0]
    assert "Traceback" not in result.output


def test_run_measures_beside_the_prediction(tmp_path):
    cfg = synthetic_profile("cpu")
    script, profile = _files(tmp_path, cfg)
    result = CliRunner().invoke(cli, ["run", script, "--config", profile, "--repeat", "2"])
    assert result.exit_code == 0, result.output
    assert "predicted" in result.output and "measured/predicted" in result.output


def test_a_cuda_step_costs_at_least_the_host_s_time_to_issue_it():
    """[bus] launch_us is the floor of every CUDA step: a chain of kernels shorter than that
    runs at the host's pace.  With it, a chain of tiny ops that the kernels' times alone would
    put on the GPU stays on the CPU, and each plan's prediction adds the floor per GPU step;
    a kernel longer than the floor keeps its own time."""
    cfg = synthetic_profile()
    x = sc.tensor(np.linspace(-1, 1, 4096, dtype=np.float32))
    y = x
    for _ in range(16):
        y = sc.relu(y)
    bare = sc.compile(y, cfg, placement="cuda", allocate=False, fuse=False)
    kernel = CostModel(cfg).resident_s("relu", "cuda_elementwise", 4096)
    floored = dataclasses.replace(cfg, bus={**cfg.bus, "launch_us": "20"})
    assert CostModel(floored).launch_s == pytest.approx(20e-6) and CostModel(cfg).launch_s == 0.0
    assert kernel < 20e-6
    slow = sc.compile(y, floored, placement="cuda", allocate=False, fuse=False)
    assert slow.predicted_s == pytest.approx(bare.predicted_s + 16 * (20e-6 - kernel), rel=1e-9)
    on_gpu = {
        s.device
        for s in sc.compile(y, cfg, placement="graph", allocate=False, fuse=False).steps
        if s.kind == "kernel"
    }
    on_floor = {
        s.device
        for s in sc.compile(y, floored, placement="graph", allocate=False, fuse=False).steps
        if s.kind == "kernel"
    }
    assert on_gpu == {"cuda"} and on_floor == {"cpu"}  # the floor is what moves it
    # a large kernel is above the floor: its price is its own
    big = 1 << 24
    assert CostModel(cfg).resident_s("relu", "cuda_elementwise", big) > 20e-6
    z = sc.relu(sc.tensor(np.zeros(big, np.float32)))
    a = sc.compile(z, cfg, placement="cuda", allocate=False).predicted_s
    b = sc.compile(z, floored, placement="cuda", allocate=False).predicted_s
    assert a == pytest.approx(b, rel=1e-12)


def test_the_launch_floor_is_a_profile_line_with_its_error():
    from softcuda.config import parse_config
    from softcuda.errors import ConfigError

    # the synthetic CUDA profile's text: the repository's CONFIG.soft is this machine's once
    # `softcuda init` has run (a CPU profile has no [bus])
    text = format_config(synthetic_profile())
    assert "[bus]\n" in text and "launch_us" not in text
    good = text.replace("[bus]\n", "[bus]\nlaunch_us = 7.25\n", 1)
    parsed = parse_config(good, "c.soft")
    assert CostModel(parsed).launch_s == pytest.approx(7.25e-6)
    assert parse_config(format_config(parsed), "c.soft").bus == parsed.bus  # parse . write
    with pytest.raises(ConfigError, match=r"c\.soft:\d+: \[bus\] launch_us"):
        parse_config(text.replace("[bus]\n", "[bus]\nlaunch_us = -1\n", 1), "c.soft")


def test_cuda_placement_on_a_profile_without_cuda_is_refused():
    # every node would otherwise run on the CPU under the name of a CUDA placement
    y = sc.relu(sc.randn((8, 4), seed=0) @ sc.randn((4, 3), seed=1)).sum()
    with pytest.raises(PlacementError, match=r"placement 'cuda' needs .*DEFAULT\.soft"):
        sc.compile(y, default_config(), placement="cuda")
    with pytest.raises(PlacementError, match="placement 'cuda'"):
        sc.compile(y, default_config(), placement="cuda", allocate=False)
    assert sc.compile(y, default_config(), placement="cpu").evaluate() >= 0


def test_run_with_cuda_placement_on_a_cpu_profile_exits_2_in_one_line(tmp_path):
    script = tmp_path / "g.py"
    script.write_text(
        "import softcuda as sc\n\ndef build():\n    return sc.randn((4, 4), seed=0).exp()\n"
    )
    default = str(config.default_config_path())
    result = CliRunner().invoke(
        cli, ["run", str(script), "--config", default, "--placement", "cuda"]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "placement 'cuda'" in lines[0], result.output


def test_every_placement_has_a_policy():
    from softcuda.planner import _POLICIES

    assert set(_POLICIES) == set(PLACEMENTS)


@pytest.mark.parametrize("seed", range(40))
def test_host_only_steps_run_after_every_gpu_step(seed):
    # a CPU step from which no GPU step can be reached (a loss's mean, a metric) waits for the
    # GPU's values: issued after the last GPU step, it waits once, at the end, instead of
    # leaving the GPU idle while the host waits mid-plan and then issues the rest
    rng = np.random.default_rng(seed)
    outputs = random_graph(rng, int(rng.choice([4096, 65536, 1 << 20])))
    plan = sc.compile(outputs, switch_profile(), placement="graph", allocate=False, fuse=False)
    steps = [s for s in plan.steps if s.kind in ("kernel", "copy", "h2d", "d2h")]
    readers: dict[int, list] = {}
    for node in plan._nodes:
        for source in node.inputs:
            readers.setdefault(id(source), []).append(node)
    device = {id(s.node): s.device for s in steps if s.kind == "kernel"}

    def leads_to_gpu(node, seen=None) -> bool:
        seen = set() if seen is None else seen
        for r in readers.get(id(node), []):
            if id(r) in seen:
                continue
            seen.add(id(r))
            if device.get(id(r)) == "cuda" or leads_to_gpu(r, seen):
                return True
        return False

    last_gpu = max((i for i, s in enumerate(steps) if s.device == "cuda"), default=-1)
    for i, s in enumerate(steps):
        if s.kind == "kernel" and s.device == "cpu" and not leads_to_gpu(s.node):
            assert i > last_gpu, (i, last_gpu, s.label)
