"""The calibrations that end a CUDA sweep (softcuda.sweep.launch, switch) and its bus: kept in
the metadata and written to the profile's [bus] section."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import load_config
from softcuda.costs import CostModel
from softcuda.sweep.machine import detect
from softcuda.sweep.measurer import Measurer
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from tests.sweep_helpers import TINY


def _bus_sweep(tmp_path, monkeypatch, calls: list[int], **changes):
    """A sweep with a bus on a machine taken for a CUDA one, its bus timed by a stand-in."""
    import dataclasses

    machine = dataclasses.replace(detect(), device_type="cuda")
    bus = {"start_bytes": 64, "stop_bytes": 256, "per_octave": 1}
    spec = spec_from_dict({**TINY, "bus": bus, **changes}, "tiny")

    def fake_bus(self, nbytes):
        calls.append(nbytes)
        return [
            (schema.SCHEMA_VERSION, machine.device_hash, machine.label, f"copy_{way}", nbytes,
             str(nbytes), "uint8", "bus", kind, "transfer", i, 1e-6, nbytes, 0)
            for kind in spec.host_memory for way in ("h2d", "d2h") for i in range(3)
        ]  # fmt: skip

    monkeypatch.setattr(Measurer, "bus", fake_bus)
    monkeypatch.setattr(Measurer, "launch", lambda self: dict(LAUNCH))
    monkeypatch.setattr(Measurer, "switch", lambda self: dict(SWITCH))
    return spec, machine


LAUNCH = {"seconds": 7.25e-6, "repetitions_s": [7.2e-6, 7.25e-6, 7.3e-6], "chain": 16}


SWITCH = {  # softcuda.sweep.switch.hand_off's figures, shortened (one of them clipped to 0)
    "elements": [1024, 16384, 262144],
    "bytes": [4096, 65536, 1048576],
    "seconds": [1.9e-6, 4.6e-6, 0.0],
    "repetitions_s": [[1.8e-6, 1.9e-6, 2.0e-6], [4.5e-6, 4.6e-6, 4.7e-6], [-1e-6, -2e-7, 3e-7]],
    "rounds": 3,
}


def test_a_cuda_sweep_ends_with_the_host_s_time_to_issue_a_step_kept_and_in_the_profile(
    tmp_path, monkeypatch
):
    """Measured once, at the end of a finished sweep: kept in the metadata with every round's
    figure, written as [bus] launch_us, and read back by `init --from` (nothing measured)."""
    from softcuda.sweep.profile import build_profile

    spec, machine = _bus_sweep(tmp_path, monkeypatch, [])
    asked = []
    monkeypatch.setattr(Measurer, "launch", lambda self: asked.append(1) or dict(LAUNCH))
    sweep = Sweep(spec, "tiny.yaml", tmp_path, machine=machine)
    frame = sweep.run()
    assert asked == [1]
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["launch"] == LAUNCH
    profile = build_profile(frame, machine, spec, "tiny.yaml", sweep.csv_path, 1.0, meta["launch"])
    assert profile.bus["launch_us"] == "7.25" and CostModel(profile).launch_s == pytest.approx(
        7.25e-6
    )
    for broken in (
        None,
        {},
        {"seconds": float("nan")},
        {"seconds": -1.0},
        {"seconds": "7"},
        {"seconds": True},
    ):
        bare = build_profile(frame, machine, spec, "tiny.yaml", sweep.csv_path, 1.0, broken)
        assert "launch_us" not in bare.bus and CostModel(bare).launch_s == 0.0
    out = tmp_path / "FROM.soft"
    result = CliRunner().invoke(
        main, ["init", "--from", str(sweep.csv_path), "--out", str(out), "--results", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert load_config(out).bus["launch_us"] == "7.25"
    # a CPU machine's sweep has no GPU step to issue
    cpu = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path / "cpu")
    cpu.run()
    assert asked == [1] and "launch" not in json.loads(cpu.meta_path.read_text())


def test_a_cuda_sweep_ends_with_the_hand_off_s_cost_kept_and_in_the_profile(tmp_path, monkeypatch):
    """Measured once, after the launch calibration: kept in the metadata with every round's
    figure, written as [bus] switch_us (bytes:microseconds), and read back by `init --from`;
    figures the line cannot hold write no line, and neither does a sweep without them."""
    from softcuda.sweep.profile import build_profile
    from softcuda.sweep.switch import switch_line

    spec, machine = _bus_sweep(tmp_path, monkeypatch, [])
    asked = []
    monkeypatch.setattr(Measurer, "launch", lambda self: asked.append("launch") or LAUNCH)
    monkeypatch.setattr(Measurer, "switch", lambda self: asked.append("switch") or SWITCH)
    sweep = Sweep(spec, "tiny.yaml", tmp_path, machine=machine)
    frame = sweep.run()
    assert asked == ["launch", "switch"]
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["switch"] == SWITCH
    line = "4096:1.90 65536:4.60 1048576:0.00"
    assert switch_line(meta["switch"]) == line
    profile = build_profile(
        frame, machine, spec, "tiny.yaml", sweep.csv_path, 1.0, meta["launch"], meta["switch"]
    )
    assert profile.bus["switch_us"] == line and profile.bus["launch_us"] == "7.25"
    assert (
        CostModel(profile).switch_s(65536) == pytest.approx(4.6e-6)
        and CostModel(profile).switch_s(1 << 30) == 0
    )
    for broken in (
        None,
        {},
        [],
        {"bytes": [], "seconds": []},
        {"bytes": [4096], "seconds": []},
        {"bytes": [4096, 1024], "seconds": [1e-6, 2e-6]},  # not increasing
        {"bytes": [0], "seconds": [1e-6]},
        {"bytes": [4096.0], "seconds": [1e-6]},
        {"bytes": [True], "seconds": [1e-6]},
        {"bytes": [4096], "seconds": [-1e-6]},
        {"bytes": [4096], "seconds": [float("nan")]},
        {"bytes": [4096], "seconds": ["2"]},
        {"bytes": "4096", "seconds": [1e-6]},
    ):
        assert switch_line(broken) is None, broken
        bare = build_profile(frame, machine, spec, "tiny.yaml", sweep.csv_path, 1.0, None, broken)
        assert "switch_us" not in bare.bus and CostModel(bare).switch_s(4096) == 0.0
    out = tmp_path / "FROM.soft"
    result = CliRunner().invoke(
        main, ["init", "--from", str(sweep.csv_path), "--out", str(out), "--results", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert load_config(out).bus["switch_us"] == line
    # a sweep whose metadata has no figures (one from before, or a failed calibration): no line
    del meta["switch"]
    sweep.meta_path.write_text(json.dumps(meta))
    result = CliRunner().invoke(
        main, ["init", "--from", str(sweep.csv_path), "--out", str(out), "--results", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "switch_us" not in load_config(out).bus
    # a CPU machine's sweep hands nothing over
    cpu = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path / "cpu")
    cpu.run()
    assert asked == ["launch", "switch"] and "switch" not in json.loads(cpu.meta_path.read_text())


def test_the_hand_off_is_the_median_of_each_round_s_mixed_less_head_and_tail(monkeypatch):
    """hand_off's arithmetic, its plans' timing stood in for: per round mixed - head - tail,
    the median over the rounds clipped at 0, every round kept, each plan's median beside."""
    from softcuda.sweep import switch

    assert switch.SIZES[0] == 1 << 10 and switch.SIZES[-1] == 1 << 22
    # per size, per round: (gpu, mixed, head, tail) microseconds per call
    timed = {
        1024: [(20, 22, 17, 1), (21, 20, 16, 1), (20, 21, 17, 1)],
        4096: [(20, 18, 17, 2), (21, 18.5, 17, 2), (20, 20, 17, 2)],
    }
    built = []
    monkeypatch.setattr(switch, "plans", lambda n, k=1: built.append(n) or {"n": n})

    def in_turns(plans, rounds):
        assert rounds == 3
        order = ("gpu", "mixed", "head", "tail")
        rows = timed[plans["n"]]
        return 7, [(name, r, rows[r][i] * 1e-6) for r in (2, 0, 1) for i, name in enumerate(order)]

    monkeypatch.setattr(switch, "in_turns", in_turns)
    found = switch.hand_off(sizes=(1024, 4096), rounds=3)
    assert built == [1024, 4096]
    assert found["elements"] == [1024, 4096] and found["bytes"] == [4096, 16384]
    assert found["repetitions_s"] == [[4e-6, 3e-6, 3e-6], [-1e-6, -0.5e-6, 1e-6]]
    assert found["seconds"] == pytest.approx([3e-6, 0.0])  # the second's median, -0.5, is 0
    assert found["medians_s"]["mixed"] == [21e-6, 18.5e-6] and found["calls"] == [7, 7]
    assert switch.switch_line(found) == "4096:3.00 16384:0.00"


def test_a_failed_hand_off_calibration_leaves_the_sweep_finished_and_says_so(tmp_path, monkeypatch):
    spec, machine = _bus_sweep(tmp_path, monkeypatch, [])

    def broken(self):
        raise RuntimeError("no pinned memory")

    monkeypatch.setattr(Measurer, "switch", broken)
    sweep = Sweep(spec, "tiny.yaml", tmp_path, machine=machine)
    sweep.run()
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["complete"] and "switch" not in meta and meta["launch"] == LAUNCH
    assert sweep.switch_error == "RuntimeError: no pinned memory"


def test_a_resumed_sweep_measures_the_bus_only_where_its_rows_are_missing(tmp_path, monkeypatch):
    """The bus's rows are ops copy_h2d and copy_d2h, its points "bus": a resumed sweep took
    none of its sizes as done and timed the whole bus again, call after call, and the fit
    pooled the copies."""
    calls: list[int] = []
    spec, machine = _bus_sweep(tmp_path, monkeypatch, calls)
    sweep = Sweep(spec, "tiny.yaml", tmp_path, machine=machine)
    sweep.run()
    assert calls == [64, 128, 256]
    frame = pd.read_csv(sweep.csv_path, dtype={"shape": str})
    # as if the process had been killed while writing 256's last direction
    torn = (
        (frame["size"] == 256) & (frame["op"] == "copy_d2h") & (frame["host_memory"] == "pageable")
    )
    frame[~torn].to_csv(sweep.csv_path, index=False)
    meta = json.loads(sweep.meta_path.read_text())
    sweep.meta_path.write_text(json.dumps({**meta, "complete": False}))
    again = Sweep(spec, "tiny.yaml", tmp_path, machine=machine, resume=True).run()
    assert calls == [64, 128, 256, 256]
    bus = again[again["backend"] == "bus"]
    assert bus.groupby(["size", "op", "host_memory"]).size().max() <= 6  # 256: 3 kept, 3 new
    assert len(bus[bus["size"] == 128]) == 12
