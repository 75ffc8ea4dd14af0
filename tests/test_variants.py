"""Variants (softcuda.ops.VARIANTS): the backward pass's shapes of an op, measured and priced
under their own names.  Which nodes they are, CONFIG.soft lines that name them, the lookup that
uses them (and falls back to the op without them), the planner's prices, the sweep that
measures them, verify's numerical check, and a training step's explain()."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from softcuda_cli import main

import softcuda as sc
from softcuda import check, fuse, graph
from softcuda.backends import BACKENDS
from softcuda.check import check_op, shapes_for
from softcuda.config import (
    UNMEASURED_NOTE,
    Config,
    CostCurve,
    Rule,
    default_config,
    format_config,
    load_config,
    parse_config,
    rules_config,
)
from softcuda.costs import CostModel, curve_s
from softcuda.errors import ConfigError, SoftcudaError, SpecError
from softcuda.ops import (
    CHAIN_LENGTH,
    CHAIN_SCALES,
    CHAINS,
    PROFILE_OPS,
    VARIANTS,
    variant_of,
)
from softcuda.sweep.measure import one_op_graph, point_shapes
from softcuda.sweep.spec import spec_from_dict
from tests.profiles import short_profile
from tests.sweep_helpers import TINY

TINY_SIZES = {"sizes": {"start": 1024, "stop": 2048, "per_octave": 1}}

# ---- which nodes are variants ------------------------------------------------------------------


def _nodes() -> dict[str, sc.Tensor]:
    x = sc.randn((6, 4), seed=1)
    w = sc.randn((4, 5), seed=2)
    batch = sc.randn((3, 6, 4), seed=3)
    return {
        "sum axis 0": x.sum(axis=0),
        "sum axis 0 keepdims": x.sum(axis=0, keepdims=True),
        "sum axis -2": x.sum(axis=-2),  # the same axis, written from the end
        "sum axis 1": x.sum(axis=1),
        "full sum": x.sum(),
        "sum axis 0 of 3-D": batch.sum(axis=0),
        "mean axis 0": x.mean(axis=0),
        "max axis 0": x.max(axis=0),
        "x.T @ x": x.T @ x,
        "x @ x.T": x @ x.T,
        "x @ w": x @ w,
        "x.T @ w.T": x.T @ sc.randn((5, 6), seed=4).T,
        "batched transposed @ w": batch.transpose(0, 2, 1) @ sc.randn((6, 2), seed=5),
        "x.T @ batched": x.T @ batch,
        "batched @ w.T": batch @ sc.randn((5, 4), seed=6).T,
        "reshaped @ w": x.reshape((4, 6)).T @ sc.randn((4, 2), seed=7),
        "log_softmax rows of 4": sc.log_softmax(x),
        "softmax rows of 4, axis -1": sc.softmax(x, axis=-1),
        "softmax of one row of 4": sc.softmax(sc.randn((1, 4), seed=8)),
        "softmax over axis 0": sc.softmax(x, axis=0),
        "softmax over everything": sc.softmax(x, axis=None),
        "softmax rows of 40": sc.softmax(sc.randn((3, 40), seed=9)),
    }


WANT = {
    "sum axis 0": "sum_rows",
    "sum axis 0 keepdims": "sum_rows",
    "sum axis -2": "sum_rows",
    "x.T @ x": "matmul_tn",
    "x @ x.T": "matmul_nt",
    "reshaped @ w": "matmul_tn",  # a transpose of a reshape view is still a transpose view
    "log_softmax rows of 4": "log_softmax_short",
    "softmax rows of 4, axis -1": "softmax_short",
}


def test_variant_of_names_exactly_the_backward_shapes_and_short_softmax_rows():
    found = {name: variant_of(node) for name, node in _nodes().items()}
    assert found == {name: WANT.get(name) for name in found}
    short = {"softmax_short", "log_softmax_short"}
    chains = {f"{op}_chain" for op in ("exp", "log", "tanh", "sigmoid", "pow")}
    assert set(VARIANTS) == {"sum_rows", "matmul_tn", "matmul_nt"} | short | chains
    assert set(CHAINS) == chains  # a chain variant is no node's shape: it matches none above
    shaped = {v.base for v in VARIANTS.values() if not v.chain}
    assert shaped == {"sum", "matmul", "softmax", "log_softmax"}
    assert all(v.doc and "\n" not in v.doc for v in VARIANTS.values())


def test_a_variant_node_keeps_its_op_and_its_value():
    x = sc.randn((6, 4), seed=1)
    node = x.T @ x
    assert node.op == "matmul" and variant_of(node) == "matmul_tn"
    ref = x.numpy().T.astype(np.float64) @ x.numpy()
    assert np.allclose(node.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_the_sweep_s_sample_of_a_variant_is_that_variant():
    for name in set(VARIANTS) - set(CHAINS):
        sided = VARIANTS[name].work_power > 1  # sized by n of an n x n sample, or by elements
        shapes, out, text = point_shapes(name, 8 if sided else 40)
        masters = [np.ones(shape, np.float32) for shape in shapes]
        node = one_op_graph(name, masters)
        assert variant_of(node) == name, name
        assert node.dims == out and (all(d == 8 for d in out) if sided else out == (4, 10))
    assert point_shapes("sum_rows", 8)[2] == "8x8" and point_shapes("matmul_nt", 8)[2] == "8x8x8"


# ---- CONFIG.soft -------------------------------------------------------------------------------

PROFILE = """\
[meta]
soft_version = 0.1.0
device_hash  = portable

[device]
type = cpu

[ops]
# measured: sum_rows' own crossover
sum_rows  | size < 64  = cpu_fallback
sum_rows  | size >= 64 = cpu_threads
matmul_tn | any        = cpu_fallback
sum       | any        = cpu_blas

[pool]
device     = cpu
block_size = 2097152

[costs]
sum_rows  | cpu_fallback = 16:1.00e-06 64:4.00e-06
sum_rows  | cpu_threads  = 16:8.00e-06 64:9.00e-06
matmul_tn | cpu_blas     = 16:2.00e-06 256:4.00e-05
sum       | cpu_blas     = 256:1.00e-06
"""


def test_a_profile_with_variant_lines_is_written_as_it_is_read():
    cfg = parse_config(PROFILE, "v.soft")
    assert [r.backend for r in cfg.rules["sum_rows"]] == ["cpu_fallback", "cpu_threads"]
    assert cfg.rules["sum_rows"][0].note == ("measured: sum_rows' own crossover",)
    assert set(cfg.costs) == {"sum_rows", "matmul_tn", "sum"}
    text = format_config(cfg)
    assert re.search(r"\nmatmul_tn +\| cpu_blas +\= 16:2\.00e-06 256:4\.00e-05\n", text)
    again = parse_config(text, "w.soft")
    assert again == cfg and format_config(again) == text
    assert again != parse_config(PROFILE.replace("64:9.00e-06", "64:9.10e-06"), "x.soft")


def test_a_variant_s_curve_is_carried_beyond_its_sizes_by_its_own_work():
    cfg = parse_config(PROFILE, "v.soft")
    rows = cfg.costs["sum_rows"]["cpu_fallback"]  # n x n elements: work grows as n^2
    per_element = 3e-6 / (64**2 - 16**2)
    assert curve_s(rows, 128) == pytest.approx(4e-6 + per_element * (128**2 - 64**2))
    product = cfg.costs["matmul_tn"]["cpu_blas"]  # n^3 multiply-adds
    per_product = 3.8e-5 / (256**3 - 16**3)
    assert curve_s(product, 512) == pytest.approx(4e-5 + per_product * (512**3 - 256**3))


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("matmul_tn | any        = cpu_fallback", "matmul_tt | any = cpu_fallback", "matmul_tt"),
        ("matmul_tn | cpu_blas     =", "matmul_xy | cpu_blas =", "matmul_xy"),
    ],
)
def test_an_unknown_variant_is_refused_naming_the_line_and_the_valid_names(old, new, words):
    with pytest.raises(ConfigError) as err:
        parse_config(PROFILE.replace(old, new), "v.soft")
    message = str(err.value)
    assert f"unknown op '{words}'" in message and re.search(r"v\.soft:\d+", message)
    assert "sum_rows, matmul_tn, matmul_nt" in message  # the valid names, variants included


def test_a_variant_needs_a_backend_that_runs_its_op():
    bad = PROFILE.replace("[pool]", "[pool]").replace(
        "sum       | any        = cpu_blas", "sum       | any        = cpu_blas\n"
    )
    bad = bad.replace("matmul_tn | any        = cpu_fallback", "matmul_tn | any = cuda_elementwise")
    with pytest.raises(ConfigError, match="backend cuda_elementwise does not implement matmul_tn"):
        parse_config(bad.replace("device_hash  = portable", "device_hash  = abc"), "v.soft")


def test_default_soft_has_no_variant_lines_and_reports_none_unmeasured():
    default = default_config()
    assert not set(default.rules) & set(VARIANTS)
    assert not set(default.unmeasured_ops()) & set(VARIANTS)
    cfg = parse_config(PROFILE, "v.soft")
    assert not set(cfg.unmeasured_ops()) & set(VARIANTS)  # measured, or absent (as its op)
    # a variant line copied from elsewhere and marked unmeasured is reported like an op's
    cfg.rules["matmul_nt"] = [Rule("matmul_nt", 0, None, "cpu_blas", note=(UNMEASURED_NOTE,))]
    assert "matmul_nt" in cfg.unmeasured_ops()


def test_a_spec_names_variants_like_ops_and_refuses_unknown_ones():
    ops = {"sum_rows": {"sizes": {"start": 16, "stop": 64, "per_octave": 1}}}
    spec = spec_from_dict({"name": "t", "ops": ops}, "t.yaml")
    assert list(spec.points()) == [("sum_rows", 16), ("sum_rows", 32), ("sum_rows", 64)]
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "t", "ops": {"sum_cols": ops["sum_rows"]}}, "t.yaml")
    assert "ops.sum_cols: unknown op" in str(err.value) and "matmul_nt" in str(err.value)
    big = {"matmul_tn": {"sizes": {"start": 16, "stop": 1 << 17, "per_octave": 1}}}
    with pytest.raises(SpecError, match="must be at most 65536"):
        spec_from_dict({"name": "t", "ops": big}, "t.yaml")
    big = {"sum_rows": {"sizes": {"start": 16, "stop": 1 << 18, "per_octave": 1}}}
    with pytest.raises(SpecError, match="must be at most 131072"):  # 2^34 elements
        spec_from_dict({"name": "t", "ops": big}, "t.yaml")


# ---- lookup: the variant's rules where the profile has them, else the op's ---------------------


def _step(plan: sc.Plan, node: sc.Tensor) -> graph.Step:
    (step,) = [s for s in plan.steps if s.node is node]
    return step


def test_without_variant_lines_a_variant_node_is_decided_as_its_op():
    x = sc.randn((96, 96), seed=1)
    bias_grad = x.sum(axis=0)
    cfg = rules_config({"sum": "cpu_threads"})
    step = _step(sc.compile(bias_grad, cfg), bias_grad)
    assert (step.backend_id, step.size, step.decided_by) == ("cpu_threads", 96 * 96, cfg.name)
    default = _step(sc.compile(bias_grad, default_config()), bias_grad)
    assert "sum_rows" not in default.decided_by and default.size == 96 * 96


def test_with_variant_lines_a_variant_node_is_decided_by_them_in_its_own_metric():
    cfg = parse_config(PROFILE, "v.soft")
    x = sc.randn((96, 96), seed=1)
    small, large = sc.randn((40, 40), seed=2).sum(axis=0), x.sum(axis=0, keepdims=True)
    full = x.sum()
    plan = sc.compile((small, large, full), cfg, placement="per-op")
    lines = {r.backend: r.line for r in cfg.rules["sum_rows"]}
    s, big, f = _step(plan, small), _step(plan, large), _step(plan, full)
    assert (s.backend_id, s.size, s.bucket) == ("cpu_fallback", 40, "size < 64")
    assert (big.backend_id, big.size, big.bucket) == ("cpu_threads", 96, "size >= 64")
    assert big.decided_by == f"v.soft:{lines['cpu_threads']} (sum_rows rule)"
    assert (f.backend_id, f.size) == ("cpu_blas", 96 * 96)  # a full sum: the op's own rule
    assert "sum_rows rule" in plan.explain()
    values = plan.evaluate()
    assert np.allclose(values[1], x.numpy().astype(np.float64).sum(0, keepdims=True), rtol=1e-4)


# ---- the planner's prices ----------------------------------------------------------------------


def _costed(variant_curves: bool) -> Config:
    """A CPU profile pricing matmul: cpu_blas far ahead of cpu_fallback; with
    ``variant_curves``, matmul_tn the other way round."""
    cfg = dataclasses.replace(default_config(), path="priced.soft")
    cfg.meta = {**cfg.meta, "device_hash": "synthetic"}
    sizes = (16, 64, 256)
    cfg.costs = {
        "matmul": {
            "cpu_fallback": CostCurve("matmul", sizes, (1e-5, 1e-4, 1e-3)),
            "cpu_blas": CostCurve("matmul", sizes, (1e-6, 1e-5, 1e-4)),
        }
    }
    if variant_curves:
        cfg.costs["matmul_tn"] = {
            "cpu_fallback": CostCurve("matmul_tn", sizes, (2e-7, 2e-6, 2e-5)),
            "cpu_blas": CostCurve("matmul_tn", sizes, (3e-6, 3e-5, 3e-4)),
        }
    cfg._device_checked = True
    return cfg


def test_the_planner_prices_a_variant_node_from_its_curve():
    a, b = sc.randn((64, 64), seed=1), sc.randn((64, 64), seed=2)
    weight_grad, forward = a.T @ b, a @ b
    for with_variant in (False, True):
        cfg = _costed(with_variant)
        plan = sc.compile((weight_grad, forward), cfg, placement="cpu")
        tn, plain = _step(plan, weight_grad), _step(plan, forward)
        assert plain.backend_id == "cpu_blas" and plain.predicted_s == pytest.approx(1e-5)
        if with_variant:
            assert tn.backend_id == "cpu_fallback" and tn.predicted_s == pytest.approx(2e-6)
            assert tn.decided_by.endswith("[costs] of matmul_tn")
        else:
            assert tn.backend_id == "cpu_blas" and tn.predicted_s == pytest.approx(1e-5)
            assert "matmul_tn" not in tn.decided_by
        assert plan.predicted_s == pytest.approx(tn.predicted_s + plain.predicted_s)
        assert np.allclose(plan.evaluate()[0], a.numpy().T @ b.numpy(), rtol=1e-4, atol=1e-4)


# ---- the sweep measures variants and writes their rules and costs ------------------------------


def test_a_cpu_sweep_measures_variants_and_writes_their_rules_and_costs(
    tmp_path, monkeypatch, modelled_timings
):
    # cpu_fallback cheap to call and slow per unit of work; cpu_blas and cpu_threads the other
    # way round: each variant gets a crossover of its own
    modelled_timings(
        {
            "cpu_fallback": lambda n: 1e-6 + 1e-9 * n**2,
            "cpu_blas": lambda n: 2e-5 + 1e-12 * n**2,
            "cpu_threads": lambda n: 4e-5 + 1e-12 * n**2,
        }
    )
    monkeypatch.chdir(tmp_path)
    sizes = {"sizes": {"start": 16, "stop": 1024, "per_octave": 1}}
    spec = {
        **TINY,
        "backends": ["cpu_fallback", "cpu_blas", "cpu_threads"],
        "ops": {"sum_rows": sizes, "matmul_tn": sizes, "matmul_nt": sizes, "add": sizes},
    }
    (tmp_path / "v.yaml").write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["init", "--spec", "v.yaml", "--out", "v.soft"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^  matmul_tn +size < \d+ ", result.output, re.M)  # the decision table
    cfg = load_config("v.soft")
    # matmul_tn: cpu_fallback cheap to call, BLAS fast per unit of work: a crossover of its own
    first, second = cfg.rules["matmul_tn"]
    assert (first.backend, second.backend) == ("cpu_fallback", "cpu_blas")
    assert "vs" in first.note[0] and not first.note[0].startswith(UNMEASURED_NOTE)
    # the crossover in the variant's own metric: n where 1e-9 n^2 pays the call overhead
    assert 100 < second.lo < 200
    # sum_rows: cpu_fallback cheap to call, cpu_threads fast per unit of work: a crossover of
    # its own, as the products'
    assert [r.backend for r in cfg.rules["sum_rows"]] == ["cpu_fallback", "cpu_threads"]
    # the contest is the backends that time the op: sum_rows on cpu_threads, not cpu_blas (its
    # code is cpu_fallback's); matmul_tn on cpu_blas, not cpu_threads (BLAS's)
    assert set(cfg.costs["sum_rows"]) == {"cpu_fallback", "cpu_threads"}
    products = {"cpu_fallback", "cpu_blas"}
    assert set(cfg.costs["matmul_tn"]) == set(cfg.costs["matmul_nt"]) == products
    curve = cfg.costs["matmul_nt"]["cpu_fallback"]
    assert curve.sizes[0] == 16 and curve_s(curve, 64) == pytest.approx(
        1e-6 + 1e-9 * 64**2, rel=0.01
    )
    # an op the spec left out keeps DEFAULT.soft's rules, marked; the variants are measured
    assert cfg.rules["sum"][0].note[0].startswith(UNMEASURED_NOTE) and "sum" not in cfg.costs
    assert not set(cfg.unmeasured_ops()) & set(VARIANTS)
    (csv,) = (tmp_path / "results").rglob("sweep-tiny-*.csv")
    figures = CliRunner().invoke(main, ["plot", str(csv), "--out", "figs"])
    assert figures.exit_code == 0, figures.output
    assert (tmp_path / "figs" / "sum-rows_time.png").exists()
    assert (tmp_path / "figs" / "matmul-tn_time.png").exists()


def test_a_sweep_without_variants_writes_no_variant_lines(tmp_path, modelled_timings):
    from softcuda.sweep.machine import detect
    from softcuda.sweep.profile import build_profile
    from softcuda.sweep.runner import Sweep

    modelled_timings({"cpu_fallback": lambda n: 1e-6 * n, "cpu_blas": lambda n: 2e-6 * n})
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    cfg = build_profile(sweep.run(), detect(), spec, "tiny.yaml", sweep.csv_path)
    assert not (set(cfg.rules) | set(cfg.costs)) & set(VARIANTS)
    assert not set(cfg.unmeasured_ops()) & set(VARIANTS)  # decided as their ops: not missing
    assert "sum" in cfg.unmeasured_ops()  # an op it left out still is


# ---- verify checks a variant on its own shape --------------------------------------------------


def test_verify_checks_a_variant_rule_numerically_on_its_own_sample(tmp_path, monkeypatch):
    path = tmp_path / "v.soft"
    path.write_text(PROFILE)
    result = CliRunner().invoke(main, ["verify", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    checks = {(c["op"], c["backend"]): c for c in json.loads(result.output)["checks"]}
    assert {"sum_rows", "matmul_tn"} <= {op for op, _ in checks}
    row = checks[("sum_rows", "cpu_threads")]
    assert row["ok"] and row["size"] == 724  # n x n: cpu_threads' 2^19 elements, as n
    assert checks[("matmul_tn", "cpu_fallback")]["size"] == 67

    # a backend that gets the variant's shape wrong fails verify, though the op passes
    from softcuda.backends import cpu_fallback

    real = cpu_fallback.make_kernel

    def wrong_for_transposed(op, attrs, inputs, out, **kwargs):
        run = real(op, attrs, inputs, out, **kwargs)
        if op == "matmul" and not inputs[0].flags.c_contiguous:

            def broken():
                run()
                out[0, 0] += 1.0

            return broken
        return run

    monkeypatch.setattr(cpu_fallback, "make_kernel", wrong_for_transposed)
    assert check_op("matmul", "cpu_fallback", shapes_for("matmul", 67), seed=1).ok
    failed = CliRunner().invoke(main, ["verify", "--config", str(path), "--json"])
    assert failed.exit_code == 1
    bad = [c for c in json.loads(failed.output)["checks"] if not c["ok"]]
    assert [(c["op"], c["backend"]) for c in bad] == [("matmul_tn", "cpu_fallback")]


def test_check_op_runs_a_variant_as_its_op_in_its_shape_under_its_rule(monkeypatch):
    seen = []
    compile_ = graph.compile

    def spy(out, config, **kwargs):
        seen.append((variant_of(out), sorted(config.rules)))
        return compile_(out, config, **kwargs)

    monkeypatch.setattr(graph, "compile", spy)
    shaped = [name for name in VARIANTS if name not in CHAINS]
    for name in shaped:
        result = check_op(name, "cpu_blas", shapes_for(name, 9), seed=3)
        assert result.ok and result.op == name
    assert seen == [(name, [name]) for name in shaped]


# ---- chain variants: a fused group of heavy terms ------------------------------------------------


def _members(out) -> list[str]:
    """The ops of the nodes ``out`` is computed from (leaves and constants left out)."""
    found, stack, seen = [], [out], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or not node.inputs:
            continue
        seen.add(id(node))
        found.append(node.op)
        stack.extend(node.inputs)
    return found


@pytest.mark.parametrize("name", CHAINS)
def test_a_chain_s_sample_sums_its_op_over_scaled_inputs_and_is_no_node_s_variant(name):
    base = VARIANTS[name].base
    shapes, out, text = point_shapes(name, 40)
    assert shapes == [(40,)] and out == (40,) and text == "40"
    x = np.abs(np.random.default_rng(2).standard_normal(40)).astype(np.float32) + 0.1
    node = one_op_graph(name, [x])
    members = _members(node)
    assert members.count(base) == CHAIN_LENGTH == members.count("mul")
    assert members.count("add") == CHAIN_LENGTH - 1 and len(members) == 3 * CHAIN_LENGTH - 1
    assert variant_of(node) is None and all(variant_of(n) is None for n in _all(node))
    attrs = dict(sc.ops.OPS[base].sample_attrs)
    want = sum(check.reference(base, attrs, [x.astype(np.float64) * s]) for s in CHAIN_SCALES)
    assert np.allclose(node.numpy(), want, rtol=1e-5)
    assert len(set(CHAIN_SCALES)) == CHAIN_LENGTH  # no two terms alike: none folds away


def _all(out):
    stack, seen = [out], {}
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.inputs)
    return list(seen.values())


def test_only_the_fusing_backends_run_and_measure_the_chains():
    for backend, info in BACKENDS.items():
        has = {name for name in CHAINS if name in info.ops}
        assert has == (set(CHAINS) if info.fuses else set()), backend
        assert has == {name for name in CHAINS if name in info.measured_ops}
    assert {info.device for info in BACKENDS.values() if info.fuses} == {"cpu", "cuda"}


@pytest.mark.parametrize("name", CHAINS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_op_runs_a_chain_as_one_fused_group_under_its_rules(name, dtype, monkeypatch):
    plans = []
    compile_ = graph.compile

    def spy(out, config, **kwargs):
        plans.append((compile_(out, config, **kwargs), sorted(config.rules)))
        return plans[-1][0]

    monkeypatch.setattr(graph, "compile", spy)
    result = check_op(name, "cpu_threads", shapes_for(name, 1001), dtype=dtype, seed=4)
    assert result.ok and result.op == name and result.shapes == ((1002,),)
    ((plan, rules),) = plans
    assert rules == sorted({name, VARIANTS[name].base, "mul", "add"})
    if fuse.cpu_fusable():  # one kernel of all 23 members
        assert f"fused({3 * CHAIN_LENGTH - 1})" in plan.explain()


def test_a_wrong_chain_is_caught_by_its_check(monkeypatch):
    # the reference sums every term: a plan that computed one term would fail verify
    real = sc.ops.sample_graph
    calls = []

    def short(name, inputs, apply, **attrs):
        calls.append(name)
        if len(calls) == 1:  # the plan's side only
            return apply(VARIANTS[name].base, apply("mul", inputs[0], 1.0), **attrs)
        return real(name, inputs, apply, **attrs)

    monkeypatch.setattr(check, "sample_graph", short)
    result = check_op("tanh_chain", "cpu_threads", shapes_for("tanh_chain", 64), seed=5)
    assert not result.ok


# ---- a training step is placed from the variants' lines ----------------------------------------


def test_the_gradient_of_an_mlp_is_placed_by_variant_lines_where_the_profile_has_them():
    x = sc.randn((64, 32), seed=1)
    w1 = sc.randn((32, 16), seed=2, requires_grad=True)
    b1 = sc.zeros((16,), requires_grad=True)
    w2 = sc.randn((16, 10), seed=3, requires_grad=True)
    loss = (sc.relu(x @ w1 + b1) @ w2).square().mean()
    grads = sc.grad(loss, [w1, b1, w2])
    cfg = rules_config(
        {op: "cpu_blas" for op in PROFILE_OPS if op not in VARIANTS}
        | {"sum_rows": "cpu_threads", "matmul_tn": "cpu_fallback", "matmul_nt": "cpu_fallback"}
    )
    plan = sc.compile(grads, cfg, placement="per-op")
    text = plan.explain()
    assert "(sum_rows rule)" in text and "(matmul_tn rule)" in text and "(matmul_nt rule)" in text
    kernels = {(s.op, s.backend_id) for s in plan.steps if s.kind == "kernel"}
    assert ("sum", "cpu_threads") in kernels and ("matmul", "cpu_fallback") in kernels
    assert ("matmul", "cpu_blas") in kernels  # the forward product: matmul's own rule
    without = sc.compile(grads, rules_config({op: "cpu_blas" for op in ("sum", "matmul")}))
    assert "rule)" not in without.explain()
    for got, want in zip(plan.evaluate(), without.evaluate()):
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_transpose_that_leaves_the_data_contiguous_is_no_variant():
    # the layout decides, not the op: x.T.T is x, and an n x 1 matrix transposed is contiguous
    x, y = sc.randn((64, 32), seed=0), sc.randn((32, 16), seed=1)
    column = sc.randn((32, 1), seed=2)
    assert variant_of(x.T.T @ y) is None
    assert variant_of(column.T @ y) is None  # (1, 32), read contiguously
    assert variant_of(x @ sc.randn((1, 32), seed=5).T) is None  # (32, 1), contiguous
    assert variant_of(x.T.T.T @ sc.randn((64, 8), seed=4)) == "matmul_tn"


def test_a_variant_priced_on_fewer_devices_than_its_op_is_priced_as_its_op():
    # [costs] of matmul_tn on the CPU only, of matmul on both devices: the variant's would keep
    # x.T @ g off the GPU (or refuse graph placement), so the node is priced as a matmul
    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    a, b = sc.randn((512, 512), seed=1), sc.randn((512, 512), seed=2)
    node = a.T @ b
    assert CostModel(cfg).priced_name(node) == "matmul"
    cpu_only = {k: v for k, v in cfg.costs["matmul"].items() if not k.startswith("cuda")}
    cfg.costs["matmul_tn"] = {
        k: dataclasses.replace(v, op="matmul_tn") for k, v in cpu_only.items()
    }
    assert CostModel(cfg).priced_name(node) == "matmul"
    plan = sc.compile(node, cfg, placement="graph", allocate=False)
    assert plan.predicted_s is not None
    both = {k: dataclasses.replace(v, op="matmul_tn") for k, v in cfg.costs["matmul"].items()}
    cfg.costs["matmul_tn"] = both
    assert CostModel(cfg).priced_name(node) == "matmul_tn"


def test_a_chain_on_the_gpu_is_compiled_under_a_cuda_profile_so_that_it_fuses_there():
    from softcuda.config import single_rule_config

    gpu = single_rule_config("tanh_chain", "cuda_elementwise")
    assert gpu.device_type == "cuda" and "cuda" in fuse.fusing_devices(gpu)
    assert set(gpu.rules) == {"tanh_chain", "tanh", "mul", "add"}
    # a single op's sample, and a chain on the CPU, keep the CPU's [device]
    assert single_rule_config("tanh", "cuda_elementwise").device_type == "cpu"
    assert single_rule_config("tanh_chain", "cpu_threads").device_type == "cpu"


def test_a_chain_that_would_not_fuse_is_neither_measured_nor_timed_as_separate_kernels(
    tmp_path, monkeypatch
):
    from softcuda.sweep import measure, runner
    from softcuda.sweep.runner import Sweep

    spec = spec_from_dict(
        {**TINY, "backends": ["cpu_fallback", "cpu_threads"], "ops": {"tanh_chain": TINY_SIZES}},
        "tiny",
    )
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    assert sweep.op_backends("tanh_chain") == ["cpu_threads"]  # the fusing backend alone
    monkeypatch.setattr(runner, "cpu_fusable", lambda: False)  # no C++ compiler here
    assert sweep.op_backends("tanh_chain") == [] and sweep.op_backends("tanh") != []
    # and a chain whose plan came out unfused is refused, not timed
    x = np.ones(64, np.float32)
    unfused = graph.compile(
        one_op_graph("tanh_chain", [x]), rules_config({"tanh": "cpu_threads"}), fuse=False
    )
    with pytest.raises(SoftcudaError, match="did not fuse into one group of 23 ops"):
        measure._one_group("tanh_chain", "cpu_threads", unfused)


def test_the_sweep_wakes_the_threads_for_a_chain_by_its_whole_group_s_work(monkeypatch):
    from softcuda.backends import cpu_threads, native
    from softcuda.sweep import measure

    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 16)
    weight = CHAIN_LENGTH * native.weight("tanh") + 2 * CHAIN_LENGTH - 1
    assert measure._weight("tanh_chain") == weight and measure._weight("tanh") == 8
    for elements in (1024, 4096):
        chunks = native.chunks(elements * weight, elements, 16)
        woken = measure._settle("cpu_threads", "tanh_chain", elements) is not None
        assert woken == (chunks > 1)
    assert measure._settle("cpu_threads", "tanh_chain", 1024) is not None
    assert measure._settle("cpu_threads", "tanh", 1024) is None  # one chunk: runs alone


def test_below_a_chain_s_first_size_a_further_member_adds_in_proportion_to_the_elements():
    text = short_profile(
        "add | any = cpu_threads\ntanh | any = cpu_threads",
        costs="add        | cpu_threads = 1024:2.00e-06 4096:3.00e-06\n"
        "tanh       | cpu_threads = 1024:2.50e-06 4096:4.50e-06\n"
        "tanh_chain | cpu_threads = 1024:9.50e-06 4096:2.55e-05\n",
    )
    model = CostModel(parse_config(text, "s.soft"))
    at_first = (9.5e-6 - 2.5e-6) / (CHAIN_LENGTH - 1)
    assert model._cpu_member_s("tanh", 1024) == pytest.approx(at_first)
    assert model._cpu_member_s("tanh", 256) == pytest.approx(at_first / 4)
    assert model._cpu_member_s("tanh", 16) == pytest.approx(at_first / 64)
    assert model.group_s(["tanh"] * 3, 16, 2.0, "cpu") == pytest.approx(2.5e-6 + at_first / 32)


def test_a_chain_is_sized_by_its_elements_in_plots_and_left_out_of_the_recheck():
    from softcuda.analysis.plots import _size_label, _size_unit
    from softcuda.sweep.recheck import boundaries

    assert _size_label("tanh_chain") == "size (elements)" and _size_unit("tanh_chain") == "elements"
    assert _size_unit("softmax_short") == "elements" and _size_unit("sum_rows") == "n"
    cfg = parse_config(PROFILE, "r.soft")
    cfg.rules["tanh_chain"] = [
        Rule("tanh_chain", 0, 4096, "cpu_threads"),
        Rule("tanh_chain", 4096, None, "cuda_elementwise"),
    ]
    assert [b[0] for b in boundaries(cfg)] == ["sum_rows"]  # no node is decided by a chain's
