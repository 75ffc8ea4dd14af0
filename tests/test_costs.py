"""[costs] in CONFIG.soft: the format and its errors (file and line), the parse/write identity,
reading a curve at any size, the [bus] copy model, which ops have no costs; the costs init
writes from a sweep (and from its CSV with --from), and what verify says of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from softcuda_cli import main

import softcuda as sc
from softcuda import config as C
from softcuda.costs import CostModel, Roofline, curve_s
from softcuda.errors import ConfigError
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from softcuda.timings.load import load_csvs
from tests.profiles import short_profile
from tests.sweep_helpers import TINY
from tests.synthetic import DEFAULT_BUS_SIZES, Cost, Scenario

PROFILE = """\
[meta]
soft_version = 0.1.0
device_hash  = 0123abcd
generated_at = 2026-03-18T09:00:00Z

[device]
type = cuda

[ops]
add    | size < 4096  = cpu_fallback
add    | size >= 4096 = cuda_elementwise
matmul | any          = cuda_blas

[pool]
device     = cuda
block_size = 2097152

[costs]
# any comment
add     | cpu_fallback     = 256:1.00e-06 1024:4.00e-06 4096:1.60e-05
add     | cuda_elementwise = 256:4.00e-06 1024:4.00e-06 4096:5.00e-06 16384:1.00e-05
matmul  | cuda_blas        = 64:2.00e-05 256:4.00e-05

[bus]
h2d_pinned_gbps         = 50.00
h2d_pinned_latency_us   = 8.00
d2h_pageable_gbps       = 10.00
d2h_pageable_latency_us = 12.00
"""
COSTS_LINE = 20  # the line of "add | cpu_fallback = ..."
# The H200 reference profile, with costs: the copy under results/, which `softcuda init` never
# writes over (the root CONFIG.soft is the same file as committed, but a newcomer's first
# command, a quick sweep of their own machine, replaces it).
COMMITTED = (
    Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "CONFIG-as-measured.soft"
)


def test_costs_are_read_as_curves_with_their_lines():
    cfg = C.parse_config(PROFILE, "p.soft")
    assert cfg.has_costs
    assert set(cfg.costs) == {"add", "matmul"}
    curve = cfg.costs["add"]["cpu_fallback"]
    assert curve == C.CostCurve("add", (256, 1024, 4096), (1e-6, 4e-6, 1.6e-5))
    assert curve.line == COSTS_LINE
    assert cfg.costs["matmul"]["cuda_blas"].line == COSTS_LINE + 2


def _without_costs(text: str) -> str:
    """A profile's text with its [costs] section cut out (the sections that follow it kept)."""
    start = text.index("[costs]")
    end = text.find("\n[", start)
    return text[:start] + (text[end + 1 :] if end >= 0 else "")


def test_a_profile_without_costs_is_what_it_was():
    stripped = C.parse_config(_without_costs(COMMITTED.read_text()), "stripped.soft")
    for cfg in (C.default_config(), stripped):
        assert not cfg.has_costs and cfg.costs == {}
        assert CostModel(cfg).resident_s("add", "cpu_blas", 1000) is None
        assert "[costs]" not in C.format_config(cfg)
        assert C.parse_config(C.format_config(cfg)) == cfg


def test_the_committed_profile_prices_every_op_it_decides():
    """The reference profile carries a cost curve for every op of its [ops] rules, on both
    devices, so a graph of any registry op can be placed from it."""
    cfg = C.load_config(COMMITTED)
    assert cfg.has_costs
    assert CostModel(cfg).missing(sorted(cfg.rules)) == []
    for op in cfg.rules:
        devices = {backend.split("_")[0] for backend in cfg.costs[op]}
        assert devices == {"cpu", "cuda"}, (op, sorted(cfg.costs[op]))
    assert C.parse_config(C.format_config(cfg), str(COMMITTED)) == cfg


def test_parse_of_write_is_identity_with_costs():
    cfg = C.parse_config(PROFILE, "p.soft")
    text = C.format_config(cfg)
    again = C.parse_config(text, "q.soft")
    assert again == cfg and C.format_config(again) == text
    # what a profile holds is what it says: a changed time is a different profile
    changed = C.parse_config(PROFILE.replace("16384:1.00e-05", "16384:1.10e-05"), "r.soft")
    assert changed != cfg


def test_costs_are_written_after_pool_one_aligned_line_per_pair():
    text = C.format_config(C.parse_config(PROFILE, "p.soft"))
    sections = [line for line in text.splitlines() if line.startswith("[")]
    assert sections == ["[meta]", "[device]", "[ops]", "[pool]", "[costs]", "[bus]"]
    lines = [line for line in text.splitlines() if "= 256:" in line or "= 64:" in line]
    # as wide as the longest name [costs] may hold: the variant log_softmax_short's
    pad = " " * (len("log_softmax_short") + 1)
    assert lines == [
        ("add" + pad)[:18] + "| cpu_fallback     = 256:1.00e-06 1024:4.00e-06 4096:1.60e-05",
        ("add" + pad)[:18]
        + "| cuda_elementwise = 256:4.00e-06 1024:4.00e-06 4096:5.00e-06 16384:1.00e-05",
        ("matmul" + pad)[:18] + "| cuda_blas        = 64:2.00e-05 256:4.00e-05",
    ]
    assert "pinned and pageable runs pooled" in text  # says where the CUDA kernel times come from


@st.composite
def costed_configs(draw):
    costs: dict[str, dict[str, C.CostCurve]] = {}
    for op, backend in draw(
        st.lists(
            st.sampled_from(
                [
                    ("add", "cpu_fallback"),
                    ("add", "cuda_elementwise"),
                    ("matmul", "cuda_tiled"),
                    ("sum", "cpu_threads"),
                ]
            ),
            unique=True,
        )
    ):
        sizes = sorted(draw(st.sets(st.integers(1, 2**40), min_size=1, max_size=6)))
        # what a profile can hold: three significant digits
        times = [
            float(f"{t:.2e}")
            for t in draw(st.lists(st.floats(1e-9, 1e3), min_size=len(sizes), max_size=len(sizes)))
        ]
        costs.setdefault(op, {})[backend] = C.CostCurve(op, tuple(sizes), tuple(times))
    return C.Config(
        path="gen.soft",
        meta={"soft_version": "0.1.0", "device_hash": "feed"},
        device={"type": "cuda"},
        pool={"device": "cuda", "block_size": "1024"},
        costs=costs,
    )


@settings(max_examples=60, deadline=None)
@given(costed_configs())
def test_identity_on_generated_costs(cfg):
    assert C.parse_config(C.format_config(cfg), "gen.soft") == cfg


def _with(old: str, new: str) -> str:
    assert PROFILE.count(old) == 1, old
    return PROFILE.replace(old, new)


FALLBACK = "add     | cpu_fallback     = 256:1.00e-06 1024:4.00e-06 4096:1.60e-05"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (_with(FALLBACK, "add cpu_fallback = 256:1e-6"), "expected 'op | backend = size:seconds"),
        (_with(FALLBACK, "add | cpu_fallback 256:1e-6"), "expected 'op | backend = size:seconds"),
        (_with(FALLBACK, "gelu | cpu_fallback = 256:1e-6"), "unknown op 'gelu'"),
        (_with(FALLBACK, "transpose | cpu_fallback = 256:1e-6"), "unknown op 'transpose'"),
        (_with(FALLBACK, "add | cpu_magic = 256:1e-6"), "unknown backend 'cpu_magic'"),
        (_with(FALLBACK, "add | cuda_blas = 256:1e-6"), "backend cuda_blas does not implement add"),
        (_with(FALLBACK, "add | cpu_fallback ="), "needs at least one size:seconds point"),
        (_with(FALLBACK, "add | cpu_fallback = 256"), "point '256' is not size:seconds"),
        (_with(FALLBACK, "add | cpu_fallback = 256=1e-6"), "is not size:seconds"),
        (_with(FALLBACK, "add | cpu_fallback = 2.5:1e-6"), "size '2.5' of point"),
        (_with(FALLBACK, "add | cpu_fallback = -4:1e-6"), "size '-4' of point"),
        (_with(FALLBACK, "add | cpu_fallback = 0:1e-6"), "size 0 is not a positive integer"),
        (_with(FALLBACK, "add | cpu_fallback = " + "9" * 30 + ":1e-6"), "larger than"),
        (_with(FALLBACK, "add | cpu_fallback = 9223372036854775808:1e-6"), "larger than"),
        (_with(FALLBACK, "add | cpu_fallback = 256:fast"), "seconds 'fast' of point"),
        (_with(FALLBACK, "add | cpu_fallback = 256:0"), "seconds 0.0 is not a positive"),
        (_with(FALLBACK, "add | cpu_fallback = 256:-1e-6"), "is not a positive finite"),
        (_with(FALLBACK, "add | cpu_fallback = 256:inf"), "is not a positive finite"),
        (_with(FALLBACK, "add | cpu_fallback = 256:nan"), "is not a positive finite"),
        (_with(FALLBACK, "add | cpu_fallback = 256:1e6"), "more than an hour"),
        (_with(FALLBACK, "add | cpu_fallback = 256:1e-6 1024:1e300"), "more than an hour"),
        (_with(FALLBACK, "add | cpu_fallback = 256:1e-6 128:2e-6"), "128 follows 256"),
        (_with(FALLBACK, "add | cpu_fallback = 256:1e-6 256:2e-6"), "256 follows 256"),
        (
            _with(FALLBACK, "add | cuda_elementwise = 256:1e-6"),
            "add on cuda_elementwise appears twice (first at line 20)",
        ),
    ],
)
def test_every_malformed_cost_line_names_file_and_line(text, words):
    with pytest.raises(ConfigError) as info:
        C.parse_config(text, "profile.soft")
    message = str(info.value)
    assert info.value.line == COSTS_LINE + ("twice" in words), message
    assert message.startswith(f"profile.soft:{info.value.line}: "), message
    assert words in message


def test_a_duplicated_pair_is_named_at_its_second_line():
    text = _with(FALLBACK, FALLBACK + "\n" + FALLBACK)
    with pytest.raises(ConfigError, match=r"^p.soft:21: .*cpu_fallback appears twice .*line 20"):
        C.parse_config(text, "p.soft")


def test_a_portable_profile_holds_no_gpu_costs():
    cpu = C.default_config_path().read_text() + "\n[costs]\nadd | cpu_blas = 8:1e-6\n"
    assert CostModel(C.parse_config(cpu, "d.soft")).resident_s("add", "cpu_blas", 8) == 1e-6
    gpu = cpu + "add | cuda_elementwise = 8:1e-6\n"
    last = gpu.count("\n")
    with pytest.raises(ConfigError, match=rf"^d.soft:{last}: device_hash = portable .*\[costs\]"):
        C.parse_config(gpu, "d.soft")


def test_a_curve_built_in_code_is_checked_as_a_parsed_one():
    with pytest.raises(ValueError, match="unknown op 'reshape'"):
        C.CostCurve("reshape", (1,), (1e-6,))
    with pytest.raises(ValueError, match="2 sizes but 1 times"):
        C.CostCurve("add", (1, 2), (1e-6,))
    with pytest.raises(ValueError, match="at least one"):
        C.CostCurve("add", (), ())
    with pytest.raises(ValueError, match="not a positive integer"):
        C.CostCurve("add", (1.5,), (1e-6,))  # type: ignore[arg-type]


# ---- reading a curve ----------------------------------------------------------------------------

CURVE = C.CostCurve("add", (100, 1000, 10000), (2e-6, 8e-6, 5e-5))


def test_at_a_measured_size_is_its_median():
    for size, t in zip(CURVE.sizes, CURVE.seconds):
        assert curve_s(CURVE, size) == t


def test_between_measured_sizes_is_straight_in_log_log():
    # the log-midpoint of 100 and 1000 gets the geometric mean of their times
    assert curve_s(CURVE, 316) == pytest.approx(math.sqrt(2e-6 * 8e-6), rel=2e-3)
    # a quarter of the way in log(size) is a quarter of the way in log(time)
    size = round(1000 * 10**0.25)
    expected = math.exp(math.log(8e-6) + 0.25 * math.log(5e-5 / 8e-6))
    assert curve_s(CURVE, size) == pytest.approx(expected, rel=1e-3)
    # not linear in size: halfway in size is well past halfway in log terms
    assert curve_s(CURVE, 5500) != pytest.approx((8e-6 + 5e-5) / 2, rel=0.05)
    # monotone where the medians are
    times = [curve_s(CURVE, s) for s in range(100, 10001, 37)]
    assert times == sorted(times)


def test_below_the_smallest_size_is_the_smallest_size_s_time():
    assert curve_s(CURVE, 99) == curve_s(CURVE, 1) == curve_s(CURVE, 0) == 2e-6
    with pytest.raises(ValueError, match="size must be >= 0"):
        curve_s(CURVE, -1)


def test_above_the_largest_size_adds_the_extra_work_at_the_last_step_s_marginal_cost():
    # CURVE's last step: 4.2e-5 s over 9000 elements; its average at 10000 is 5e-9 s each
    marginal = (5e-5 - 8e-6) / 9000
    assert curve_s(CURVE, 40000) == pytest.approx(5e-5 + marginal * 30000)
    assert curve_s(CURVE, 10**9) == pytest.approx(5e-5 + marginal * (10**9 - 10**4))
    # not the work ratio from the largest size, which carries its fixed part along
    assert curve_s(CURVE, 10**9) < 0.95 * 10**5 * 5e-5
    # continuous at the largest size, and rising past it
    assert curve_s(CURVE, 10001) == pytest.approx(5e-5, rel=1e-3)
    times = [curve_s(CURVE, s) for s in range(10000, 10**6, 9973)]
    assert times == sorted(times)


def test_the_roofline_floors_a_last_step_that_makes_more_work_look_free():
    flat = C.CostCurve("sum", (1024, 2048), (1e-5, 1e-5))  # a noisy last step: no rise at all
    assert curve_s(flat, 4096) == 1e-5
    assert curve_s(flat, 4096, floor_s=1e-9) == pytest.approx(1e-5 + 2048e-9)
    # the largest size's average caps a last step that jumps, and a roofline measured no
    # further than the curve itself
    jump = C.CostCurve("relu", (1024, 2048), (1e-6, 1e-4))
    assert curve_s(jump, 4096) == pytest.approx(1e-4 * 2)
    assert curve_s(jump, 4096, floor_s=1e-9) == pytest.approx(1e-4 * 2)
    assert curve_s(jump, 4096, floor_s=1e-7) == pytest.approx(1e-4 * 2)
    # but not a roofline measured past the curve's sizes: memory past the caches is slower
    # than a curve's average inside them (the quick sweep's add at 2^25, its other ops at 2^22)
    assert curve_s(jump, 4096, floor_s=1e-7, capped=False) == pytest.approx(1e-4 + 2048 * 1e-7)


def test_a_backend_s_roofline_is_the_median_marginal_cost_of_its_family_at_its_largest_work():
    curves = [
        C.CostCurve("add", (1000, 2000), (1e-6, 1e-6 + 3000e-12 * 2)),  # 3 arrays: 2e-12 s each
        C.CostCurve("neg", (1000, 2000), (1e-6, 1e-6 + 2000e-12 * 3)),  # 2 arrays: 3e-12
        C.CostCurve("sum", (1000, 2000), (1e-6, 1e-6 + 1000e-12 * 4)),  # 1 array: 4e-12
        C.CostCurve("relu", (1000, 2000), (1e-6, 1e-6)),  # no rise: not counted
        C.CostCurve("matmul", (10, 20), (1e-6, 1e-6 + 7000e-13)),  # 1e-13 s a multiply-add
    ]
    roof = Roofline(curves)
    assert roof.per_unit["memory"] == pytest.approx(3e-12)  # the median of 2, 3 and 4e-12
    assert roof.per_unit["compute"] == pytest.approx(1e-13)
    assert roof.floor_s("mul") == pytest.approx(9e-12)  # three arrays
    assert roof.floor_s("exp") == pytest.approx(6e-12)
    assert roof.floor_s("max") == pytest.approx(3e-12)
    assert roof.floor_s("sum_rows") == pytest.approx(3e-12)  # per element of its n x n
    assert roof.floor_s("matmul_nt") == pytest.approx(1e-13)
    assert Roofline(curves[:1]).floor_s("matmul") == 0.0  # no product measured
    assert not roof.beyond(curves[1])  # measured as far as the rest: capped by their averages
    # a curve carried further than the rest (past the caches) alone sets the memory figure,
    # slower or not than the rest's, and holds past the others' sizes uncapped
    far = C.CostCurve("add", (2000, 8000), (1e-6, 1e-6 + 6000e-11 * 3))  # 1e-11 s an element
    roof = Roofline([*curves, far])
    assert roof.per_unit["memory"] == pytest.approx(1e-11)
    assert roof.beyond(curves[1]) and not roof.beyond(far)
    # sum_rows' work is its n x n elements: at n = 4096 (2^24) it is the furthest
    rows = C.CostCurve("sum_rows", (2048, 4096), (1e-3, 1e-3 + 3 * 2**22 * 5e-12))
    assert Roofline([*curves, far, rows]).per_unit["memory"] == pytest.approx(5e-12)


def test_past_its_curve_an_op_streams_its_arrays_at_least_as_slowly_as_the_furthest_curve():
    # tanh measured to 2^22, where its arrays sat in the caches; add measured past them, to
    # 2^25: at 2^24 tanh's two arrays take at least add's time there per array, whatever its
    # own curve's margin says (the H100 host's quick profile: 0.93 ms carried, 1.8 measured)
    add = C.CostCurve("add", (2**22, 2**23, 2**24, 2**25), (2.1e-4, 3.7e-4, 2.04e-3, 3.62e-3))
    tanh = C.CostCurve("tanh", (2**20, 2**21, 2**22), (3.7e-5, 7.2e-5, 1.37e-4))
    cfg = C.parse_config(PROFILE, "r.soft")
    cfg.costs = {"add": {"cpu_threads": add}, "tanh": {"cpu_threads": tanh}}
    model = CostModel(cfg)
    roof = model.roofline["cpu_threads"]
    assert roof.beyond(tanh) and not roof.beyond(add)
    for size in (2**23, 2**24, 2**25, 2**26):
        stream = curve_s(add, size, roof.floor_s("add")) * 2 / 3
        assert roof.stream_s("tanh", size) == pytest.approx(stream)
        carried = curve_s(tanh, size, roof.floor_s("tanh"), capped=False)
        assert model.resident_s("tanh", "cpu_threads", size) == pytest.approx(max(carried, stream))
    assert model.resident_s("tanh", "cpu_threads", 2**24) == pytest.approx(2.04e-3 * 2 / 3)
    # inside its own sizes the curve is the measurement; a product has no stream bound
    assert model.resident_s("tanh", "cpu_threads", 2**21) == pytest.approx(7.2e-5)
    assert roof.stream_s("matmul", 4096) == 0.0
    # add is the furthest: its own time, nothing added
    assert model.resident_s("add", "cpu_threads", 2**24) == pytest.approx(2.04e-3)
    # the furthest curve is read as every curve is, monotone: one slow point at 2^23 does not
    # price tanh dearer there than at 2^24
    noisy = C.CostCurve("add", add.sizes, (2.1e-4, 3.0e-3, 2.04e-3, 3.62e-3))
    cfg.costs = {"add": {"cpu_threads": noisy}, "tanh": {"cpu_threads": tanh}}
    model = CostModel(cfg)
    prices = [model.resident_s("tanh", "cpu_threads", 2**e) for e in (23, 24, 25)]
    assert prices == sorted(prices) and prices[0] <= 2.04e-3 * 2 / 3 + 1e-12
    # sum_rows' size is n (its input n x n): it neither sets the bound in other units nor is
    # bounded by its n alone
    rows = C.CostCurve("sum_rows", (1024, 2048, 8192), (5e-5, 2e-4, 3.2e-3))  # to 2^26 elements
    cfg.costs = {
        "add": {"cpu_threads": add},
        "tanh": {"cpu_threads": tanh},
        "sum_rows": {"cpu_threads": rows},
    }
    model = CostModel(cfg)
    roof = model.roofline["cpu_threads"]
    assert roof.streams == []  # the furthest is sum_rows': no bound rather than a wrong one
    assert model.resident_s("tanh", "cpu_threads", 2**23) < 1e-2
    short = C.CostCurve("sum_rows", (512, 1024), (2e-5, 5e-5))  # to 2^20 elements
    cfg.costs = {"add": {"cpu_threads": add}, "sum_rows": {"cpu_threads": short}}
    model = CostModel(cfg)
    roof = model.roofline["cpu_threads"]
    assert roof.stream_s("sum_rows", 4096) == pytest.approx(2.04e-3 / 3)  # 2^24 elements, 1 array
    assert model.resident_s("sum_rows", "cpu_threads", 4096) >= 2.04e-3 / 3 * (1 - 1e-9)


def test_one_slow_point_at_the_top_does_not_set_the_roofline():
    # a quick sweep measures each point once: add's last point read 1.5 times its time, its
    # last step 2.5 times the one before; the lesser of the two steps is the rate
    steady = C.CostCurve("add", (2**23, 2**24, 2**25), (3e-3, 6e-3, 12e-3))
    slow = C.CostCurve("add", (2**23, 2**24, 2**25), (3e-3, 6e-3, 18e-3))
    per = 3e-3 / 2**23 / 3  # seconds per element moved (three arrays)
    assert Roofline([steady]).per_unit["memory"] == pytest.approx(per)
    assert Roofline([slow]).per_unit["memory"] == pytest.approx(per)


def test_the_cost_model_carries_each_curve_with_its_own_backend_s_roofline():
    text = PROFILE.replace(
        "4096:5.00e-06 16384:1.00e-05\n",
        "4096:5.00e-06 16384:1.00e-05\nneg     | cuda_elementwise = 1024:4.00e-06 4096:4.00e-06\n",
    )
    assert text != PROFILE
    model = CostModel(C.parse_config(text, "r.soft"))
    # add's is the backend's only rising curve: the lesser of its last two steps, 1e-6 s over
    # 3072 elements (5e-6 s over 12288 after it), per element of its three arrays
    per_element = 1e-6 / 3072 / 3
    roof = model.roofline["cuda_elementwise"]
    assert roof.per_unit["memory"] == pytest.approx(per_element)
    # neg's flat last step is floored by it: two arrays moved per element
    assert model.resident_s("neg", "cuda_elementwise", 8192) == pytest.approx(
        4e-6 + 2 * per_element * 4096
    )


def test_reductions_and_products_carry_their_curves_by_their_own_work():
    total = C.CostCurve("sum", (1024,), (1e-5,))  # one size: its average cost per element
    assert curve_s(total, 4096) == pytest.approx(4e-5)


def test_one_point_is_a_curve():
    curve = C.CostCurve("relu", (4096,), (3e-6,))
    assert curve_s(curve, 1) == curve_s(curve, 4096) == 3e-6
    assert curve_s(curve, 8192) == pytest.approx(6e-6)


def test_resident_s_reads_the_pair_s_curve_or_says_none():
    cfg = C.parse_config(PROFILE, "p.soft")
    assert CostModel(cfg).resident_s("add", "cuda_elementwise", 16384) == 1e-5
    assert CostModel(cfg).resident_s("add", "cuda_elementwise", 2048) == pytest.approx(
        math.sqrt(4e-6 * 5e-6), rel=1e-9
    )
    marginal = 2e-5 / (256**3 - 64**3)  # its last step, cuda_blas's only product
    assert CostModel(cfg).resident_s("matmul", "cuda_blas", 512) == pytest.approx(
        4e-5 + marginal * (512**3 - 256**3)
    )
    assert CostModel(cfg).resident_s("add", "cpu_threads", 256) is None
    assert CostModel(cfg).resident_s("relu", "cuda_elementwise", 256) is None


# ---- the copy model and what is missing -------------------------------------------------------


def test_transfer_s_is_latency_plus_bytes_over_bandwidth():
    cfg = C.parse_config(PROFILE, "p.soft")
    assert CostModel(cfg, "pinned").transfer_s("h2d", 0) == pytest.approx(8e-6)
    assert CostModel(cfg, "pinned").transfer_s("h2d", 50_000_000) == pytest.approx(8e-6 + 1e-3)
    assert CostModel(cfg, "pageable").transfer_s("d2h", 10**9) == pytest.approx(12e-6 + 0.1)
    # a direction or kind [bus] does not hold, and a profile without [bus]
    assert CostModel(cfg, "pinned").transfer_s("d2h", 1024) is None
    assert CostModel(C.default_config(), "pinned").transfer_s("h2d", 1024) is None
    with pytest.raises(ValueError, match="direction"):
        CostModel(cfg, "pinned").transfer_s("up", 1)
    with pytest.raises(ValueError, match="host_memory"):
        CostModel(cfg, "managed")


def test_transfer_s_reads_the_committed_profile_s_bus():
    cfg = C.load_config(COMMITTED)
    gbps, latency_us = float(cfg.bus["h2d_pinned_gbps"]), float(cfg.bus["h2d_pinned_latency_us"])
    assert CostModel(cfg, "pinned").transfer_s("h2d", 1 << 20) == pytest.approx(
        latency_us * 1e-6 + (1 << 20) / (gbps * 1e9)
    )


def test_missing_costs_names_the_ops_with_no_curve_on_any_backend():
    cfg = C.parse_config(PROFILE, "p.soft")
    asked = ["relu", "add", "reshape", "none", "matmul", "exp", "relu", "transpose"]
    assert CostModel(cfg).missing(asked) == ["relu", "exp"]  # views and leaves need none
    assert CostModel(cfg).missing([]) == []
    assert CostModel(C.default_config()).missing(["add", "matmul"]) == ["add", "matmul"]


# ---- init: the costs of a finished sweep -------------------------------------------------------

GPU_FIELDS = {"type": "cuda", "name": "Synthetic GPU"}
SCENARIO = Scenario(
    costs={
        ("add", "cpu_fallback"): Cost(1e-6, 1e-9),
        ("add", "cuda_elementwise"): Cost(4e-6, 1e-11),
        ("matmul", "cpu_blas"): Cost(2e-6, 1e-10, 3.0),
        ("matmul", "cuda_blas"): Cost(8e-6, 1e-12, 3.0),
    },
    ops=("add", "matmul"),
)
ADD_SIZES = (256, 1024, 4096, 16384, 65536)
MATMUL_SIZES = (16, 32, 64, 128)


def _gpu_sweep(seed: int = 0) -> pd.DataFrame:
    """A CUDA sweep of add and matmul (every phase, both host memory kinds, the bus)."""
    parts = [
        Scenario(costs=SCENARIO.costs, ops=(op,)).frame(
            sizes, reps=21, noise=0.02, seed=seed + k, bus_sizes=() if k else DEFAULT_BUS_SIZES
        )
        for k, (op, sizes) in enumerate((("add", ADD_SIZES), ("matmul", MATMUL_SIZES)))
    ]
    return pd.concat(parts, ignore_index=True)


def _rounded(seconds: float) -> float:
    return float(f"{seconds:.2e}")


def test_resident_costs_are_each_pair_s_resident_medians():
    from softcuda.sweep.profile import resident_costs

    frame = _gpu_sweep()
    costs = resident_costs(frame)
    assert {op: sorted(c) for op, c in costs.items()} == {
        "add": ["cpu_fallback", "cuda_elementwise"],
        "matmul": ["cpu_blas", "cuda_blas"],
    }
    resident = frame[frame["phase"].isin(["wall", "kernel"])]
    for op, by_backend in costs.items():
        for backend, curve in by_backend.items():
            rows = resident[(resident["op"] == op) & (resident["backend"] == backend)]
            medians = rows.groupby("size")["seconds"].median()
            assert curve.sizes == tuple(medians.index)
            assert curve.seconds == tuple(_rounded(t) for t in medians)
            truth = SCENARIO.cost(op, backend).seconds(np.array(curve.sizes))
            assert np.allclose(curve.seconds, truth, rtol=0.03)  # the kernel, not end to end


def test_a_cuda_kernel_s_cost_pools_its_pinned_and_pageable_runs():
    """The kernel never sees host memory: both runs time it, and the cost's median stands on
    both.  Made to differ here (pageable 1.5 times slower), the median lies between them."""
    from softcuda.sweep.profile import resident_costs

    frame = _gpu_sweep()
    slower = (frame["phase"] == "kernel") & (frame["host_memory"] == "pageable")
    frame.loc[slower, "seconds"] *= 1.5
    curve = resident_costs(frame)["add"]["cuda_elementwise"]
    kernel = frame[(frame["op"] == "add") & (frame["phase"] == "kernel")]
    by_kind = kernel.groupby(["host_memory", "size"])["seconds"].median()
    for size, t in zip(curve.sizes, curve.seconds):
        assert by_kind["pinned", size] < t < by_kind["pageable", size]


def test_costs_read_each_series_fastest_attempt_and_the_rules_the_steadiest():
    """A point measured again: each backend's cost is its faster attempt's, noise only adding
    time (a retry read steady at twice the first's median), while the rules keep comparing
    backends within the one steadiest attempt."""
    from softcuda.sweep.profile import resident_costs
    from softcuda.timings.stats import current_rows

    cpu = Scenario(
        costs={"cpu_fallback": Cost(1e-6, 1e-9), "cpu_threads": Cost(2e-6, 0.5e-9)}, ops=("add",)
    )
    frame = cpu.frame(ADD_SIZES, reps=21, noise=0.5, bus_sizes=())
    again = frame[frame["size"] == 4096].assign(attempt=1)
    rng = np.random.default_rng(1)
    # the retry: steady (little spread), cpu_fallback at twice its cost, cpu_threads at half
    scale = again["backend"].map({"cpu_fallback": 2.0, "cpu_threads": 0.5}).fillna(1.0)
    steady = [float(cpu.cost("add", b).seconds(4096)) for b in again["backend"]]
    noise = np.exp(0.01 * rng.standard_normal(len(again)))
    again = again.assign(seconds=np.asarray(steady) * scale.to_numpy() * noise)
    frame = pd.concat([frame, again], ignore_index=True)
    costs = resident_costs(frame)

    def median(backend, attempt):
        rows = frame[
            (frame["size"] == 4096) & (frame["attempt"] == attempt) & (frame["backend"] == backend)
        ]
        return _rounded(rows[rows["phase"] == "wall"]["seconds"].median())

    at = {b: dict(zip(c.sizes, c.seconds))[4096] for b, c in costs["add"].items()}
    assert at["cpu_fallback"] == median("cpu_fallback", 0) < median("cpu_fallback", 1)
    assert at["cpu_threads"] == median("cpu_threads", 1) < median("cpu_threads", 0)
    # selection still reads one attempt for the whole point: the steady retry
    chosen = current_rows(frame)
    assert set(chosen[chosen["size"] == 4096]["attempt"]) == {1}


def test_build_profile_writes_the_costs_and_reads_them_back(tmp_path):
    from softcuda.sweep.machine import Machine
    from softcuda.sweep.profile import build_profile, resident_costs, write_profile

    frame = _gpu_sweep()
    gpu = Machine("cuda", 0, GPU_FIELDS, "5" * 64, "gpu_name=Synthetic GPU", ("cpu_fallback",))
    spec = spec_from_dict(TINY, "tiny")
    profile = build_profile(frame, gpu, spec, "tiny.yaml", tmp_path / "sweep.csv")
    assert profile.costs == resident_costs(frame) and profile.has_costs
    write_profile(profile, tmp_path / "CONFIG.soft")
    again = C.load_config(tmp_path / "CONFIG.soft")
    assert again == profile and again.costs == profile.costs
    text = (tmp_path / "CONFIG.soft").read_text()
    assert text.index("[pool]") < text.index("[costs]") < text.index("[bus]")
    # the planner's questions have answers, in the profile's own units
    assert CostModel(again).resident_s("matmul", "cuda_blas", 128) == curve_s(
        profile.costs["matmul"]["cuda_blas"], 128
    )
    assert CostModel(again, "pinned").transfer_s("h2d", 10**6) == pytest.approx(
        8e-6 + 10**6 / 25e9, rel=0.05
    )
    assert CostModel(again).missing(["add", "matmul", "relu"]) == ["relu"]


def _finished_gpu_sweep(folder: Path) -> Path:
    """A finished sweep's CSV and metadata as `softcuda init` leaves them, of a GPU that
    answers from the synthetic scenario."""
    folder.mkdir(parents=True)
    csv = folder / "sweep-tiny-20300101T000000Z.csv"
    _gpu_sweep().to_csv(csv, index=False)
    meta = {
        "schema": schema.SCHEMA_VERSION,
        "complete": True,
        "device": "Synthetic GPU",
        "device_hash": "5" * 64,
        "hash_string": "gpu_name=Synthetic GPU",
        "machine": GPU_FIELDS,
        "backends": ["cpu_fallback", "cpu_blas", "cuda_elementwise", "cuda_blas"],
        "spec_path": "tiny.yaml",
        "spec": spec_from_dict(TINY, "tiny").to_dict(),
        "elapsed_s": 12.5,
    }
    csv.with_name(csv.name.replace(".csv", ".meta.json")).write_text(json.dumps(meta))
    return csv


def test_init_from_a_finished_sweep_adds_the_costs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    csv = _finished_gpu_sweep(tmp_path / "results" / "synthetic-gpu")
    result = CliRunner().invoke(main, ["init", "--from", str(csv), "--out", "again.soft"])
    assert result.exit_code == 0, result.output
    assert "costs: resident medians of 4 (op, backend) curves of 2 ops" in result.output
    profile = C.load_config("again.soft")
    frame = load_csvs([csv])
    from softcuda.sweep.profile import resident_costs

    assert profile.costs == resident_costs(frame)
    assert set(profile.costs["matmul"]) == {"cpu_blas", "cuda_blas"}
    assert profile.costs["add"]["cuda_elementwise"].sizes == ADD_SIZES


def test_init_on_the_clock_writes_costs_that_verify_accepts(tmp_path, monkeypatch):
    """A CPU sweep measured here: its profile carries the costs of every backend it timed, and
    `init --from` its CSV writes the same."""
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY))
    result = CliRunner().invoke(main, ["init", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    profile = C.load_config("CONFIG.soft")
    assert {op: set(c) for op, c in profile.costs.items()} == {
        "add": {"cpu_fallback"},  # cpu_blas's elementwise code is cpu_fallback's: timed once
        "matmul": {"cpu_fallback", "cpu_blas"},
    }
    assert profile.costs["matmul"]["cpu_blas"].sizes == (8, 16, 32, 64)
    (csv,) = Path("results").rglob("sweep-tiny-*.csv")
    again = CliRunner().invoke(main, ["init", "--from", str(csv), "--out", "again.soft"])
    assert again.exit_code == 0, again.output
    assert C.load_config("again.soft").costs == profile.costs
    verify = CliRunner().invoke(main, ["verify", "--config", "CONFIG.soft"])
    assert verify.exit_code == 0, verify.output
    assert "costs:        3 (op, backend) curves of 2 ops" in verify.output


# ---- verify ------------------------------------------------------------------------------------


def _cpu_profile(tmp_path: Path, costs: str) -> Path:
    path = tmp_path / "cpu.soft"
    path.write_text(
        short_profile("add | any = cpu_fallback\nexp | any = cpu_fallback", costs=costs)
    )
    return path


def test_verify_checks_every_backend_the_costs_name(tmp_path):
    costs = (
        "add | cpu_fallback = 256:1e-6\nadd | cpu_threads = 256:9e-6\n"
        "exp | cpu_fallback = 256:2e-6\n"
    )
    result = CliRunner().invoke(main, ["verify", "--config", str(_cpu_profile(tmp_path, costs))])
    assert result.exit_code == 0, result.output
    assert "costs:        3 (op, backend) curves of 2 ops" in result.output
    report = json.loads(
        CliRunner()
        .invoke(main, ["verify", "--json", "--config", str(tmp_path / "cpu.soft")])
        .output
    )
    assert report["costs"] == {
        "present": True,
        "curves": 3,
        "ops": 2,
        "missing": [],
        "note": "",
        "ok": True,
    }
    # cpu_threads has no rule: a whole-graph planner may still run it, so it is checked
    (threads,) = [c for c in report["checks"] if c["backend"] == "cpu_threads"]
    assert threads["op"] == "add" and threads["line"] == 18 and threads["ok"]


def test_verify_fails_a_profile_whose_costs_miss_an_op_its_rules_measured(tmp_path):
    path = _cpu_profile(tmp_path, "add | cpu_fallback = 256:1e-6\n")
    result = CliRunner().invoke(main, ["verify", "--config", str(path)])
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("costs:")]
    assert line.startswith("costs:        FAILED: exp measured in [ops] but without costs")
    assert "verify: FAILED" in result.output


def test_verify_says_how_a_measured_gpu_profile_without_costs_gets_them(tmp_path):
    """A measured GPU profile written before [costs] (the committed reference without them)
    stays valid, and verify says in one line what whole-graph placement will need."""
    text = _without_costs(COMMITTED.read_text())
    path = tmp_path / "CONFIG.soft"
    path.write_text(text)
    result = CliRunner().invoke(main, ["verify", "--config", str(path)])
    (line,) = [x for x in result.output.splitlines() if x.startswith("costs:")]
    csv = C.load_config(COMMITTED).sweep["csv"]
    assert line == (
        "costs:        none: whole-graph placement needs them; "
        f"`softcuda init --from {csv} --out {path}` adds them from the sweep's raw CSV "
        "without measuring"
    )
    report = json.loads(
        CliRunner().invoke(main, ["verify", "--json", "--config", str(path)]).output
    )
    assert report["costs"]["ok"] and not report["costs"]["present"]
    # a profile of DEFAULT.soft's rules, or a CPU one, is not told to add any
    assert "costs:" not in CliRunner().invoke(main, ["verify"]).output
    rules_only = text.replace("type               = cuda", "type               = cpu")
    path.write_text(rules_only)
    assert "costs:" not in CliRunner().invoke(main, ["verify", "--config", str(path)]).output


def test_a_pow_by_a_half_or_two_is_priced_as_square_where_the_profile_prices_square():
    text = PROFILE.replace(
        "4096:5.00e-06 16384:1.00e-05\n",
        "4096:5.00e-06 16384:1.00e-05\nsquare  | cuda_elementwise = 1024:4.00e-06\n"
        "pow     | cuda_elementwise = 1024:9.00e-06\n",
    )
    model = CostModel(C.parse_config(text, "q.soft"))
    x = sc.tensor(np.ones(1024, np.float32))
    assert model.priced_name(x**0.5) == model.priced_name(x**2.0) == "square"
    assert model.priced_name(x**3.0) == "pow"
    assert model.priced_name(x**1.5) == "pow"
    # without a square curve, its own op's
    assert CostModel(C.parse_config(PROFILE, "p.soft")).priced_name(x**0.5) == "pow"


def test_a_size_dearer_than_a_larger_one_is_priced_at_the_larger_ones_time():
    """The model reads each curve as its monotone envelope from above: a noisy point (here
    88,791 elements at 4x the time of 131,072) is priced at the larger size's time, and
    the sizes around it interpolate between what is left; a clean curve is read as written."""
    from softcuda.costs import monotone

    text = short_profile(
        "add | any = cpu_threads",
        costs="add | cpu_threads = 1024:2.00e-06 65536:1.40e-05 88791:6.40e-05 "
        "131072:1.70e-05 262144:3.90e-05\n",
    )
    cfg = sc.config.parse_config(text, "noisy.soft")
    model = CostModel(cfg)
    assert model.resident_s("add", "cpu_threads", 88791) == pytest.approx(1.7e-5)
    assert model.resident_s("add", "cpu_threads", 131072) == pytest.approx(1.7e-5)
    assert model.resident_s("add", "cpu_threads", 65536) == pytest.approx(1.4e-5)
    assert 1.4e-5 < model.resident_s("add", "cpu_threads", 80000) < 1.7e-5
    curve = cfg.costs["add"]["cpu_threads"]
    assert curve.seconds[2] == pytest.approx(6.4e-5)  # the profile itself is left as measured
    clean = monotone(model.curve("add", "cpu_threads"))
    assert clean is monotone(clean)  # nothing to change: the same curve back


def test_the_vectorized_copy_and_hand_off_prices_equal_the_scalar_ones():
    """The planner prices every value's copies and hand-off in one pass (transfers_s,
    switches_s): the same figures as one call per value, at 0 bytes, below, between and
    above the switch points, in both host memory kinds."""
    text = PROFILE.replace("[bus]\n", "[bus]\nswitch_us = 4096:2.50 65536:4.40 1048576:32.6\n", 1)
    cfg = C.parse_config(text, "bus.soft")  # pinned h2d and pageable d2h: the others are None
    sizes = np.array([0, 1, 100, 4096, 5000, 65536, 300_000, 1048576, 1 << 30], dtype=float)
    for memory in ("pinned", "pageable"):
        model = CostModel(cfg, memory)
        assert model._switch, "the profile's switch points were read"
        for direction in ("h2d", "d2h"):
            want = [model.transfer_s(direction, int(n)) or 0.0 for n in sizes]
            np.testing.assert_allclose(model.transfers_s(direction, sizes), want, rtol=1e-12)
        want = [model.switch_s(int(n)) for n in sizes]
        np.testing.assert_allclose(model.switches_s(sizes), want, rtol=1e-12)
