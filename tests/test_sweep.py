"""The sweep runner and `softcuda init` on the CPU: CSV schema, a valid CPU-only profile,
interrupt and resume, archiving a profile of another device, the time budget."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import load_config
from softcuda.costs import CostModel
from softcuda.errors import SoftcudaError
from softcuda.sweep.machine import detect
from softcuda.sweep.measure import Point
from softcuda.sweep.measurer import Measurer
from softcuda.sweep.runner import BudgetSpent, Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema

TINY = {
    "name": "tiny",
    "backends": ["cpu_fallback", "cpu_blas"],
    "settle_s": 0,
    "repetitions": {
        "warmup": 1,
        "min_time_s": 0.0,
        "min_reps": 3,
        "max_reps": 3,
        "retries": 0,
        "retry_wait_s": 0,  # the tests that wait give the sweep a fake host
    },
    "ops": {
        "matmul": {"sizes": {"start": 8, "stop": 64, "per_octave": 1}},
        "add": {"sizes": {"start": 256, "stop": 4096, "per_octave": 1}},
    },
}


def write_spec(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}))
    return path


def test_rows_follow_the_schema_and_every_repetition_is_kept(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    frame = sweep.run()
    on_disk = pd.read_csv(sweep.csv_path)
    assert tuple(on_disk.columns) == schema.COLUMNS
    assert len(on_disk) == len(frame) > 0
    assert set(on_disk["phase"]) == {"wall", "probe"} and (on_disk["seconds"] > 0).all()
    counts = on_disk.groupby(["op", "size", "backend"]).size()
    assert (counts == 3).all()  # min_reps = max_reps = 3, all kept
    # every point carries the host's speed: the probe, timed in the same rounds
    probe = on_disk[on_disk["phase"] == "probe"]
    assert set(probe["backend"]) == {"machine"} and (probe["nbytes"] == 0).all()
    assert len(probe.groupby(["op", "size"])) == len(on_disk.groupby(["op", "size"]))
    assert (probe.groupby(["op", "size"]).size() == 3).all()  # the backends' rounds, no more
    assert set(probe["dtype"]) == {"float32"}
    # cpu_blas shares cpu_fallback's elementwise code: measured once, as cpu_fallback
    timed = on_disk[on_disk["phase"] == "wall"]
    assert set(timed[timed["op"] == "add"]["backend"]) == {"cpu_fallback"}
    assert set(timed[timed["op"] == "matmul"]["backend"]) == {"cpu_fallback", "cpu_blas"}
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["complete"] and meta["device_hash"] == detect().device_hash
    assert meta["spec"]["name"] == "tiny" and "cpu_model" in meta["machine"]


def test_init_writes_a_cpu_profile_that_verify_accepts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, settle_s=0.01)  # one round of windows, then it gives up
    result = CliRunner().invoke(main, ["init", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert "settling: timing fixed workloads" in result.output
    assert "machine not steady after" in result.output and "fewer than 3 windows" in result.output
    assert "device_hash" in result.output and "decisions (e2e_pinned)" in result.output
    cfg = load_config("CONFIG.soft")
    assert cfg.device_type == "cpu" and set(cfg.rules) >= {"matmul", "add", "relu"}
    assert "vs" in cfg.rules["matmul"][0].note[0] and "at 8" in cfg.rules["matmul"][0].note[0]
    assert "not measured" in cfg.rules["relu"][0].note[0]
    assert list((tmp_path / "results").rglob("sweep-tiny-*.csv"))
    verify = CliRunner().invoke(main, ["verify", "--config", "CONFIG.soft"])
    assert verify.exit_code == 0, verify.output


def test_the_profile_and_the_metadata_tell_the_time_by_one_clock(tmp_path, monkeypatch):
    from softcuda.sweep import storage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(storage, "now", lambda: "2030-01-02T03:04:05Z")
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    (meta,) = Path("results").rglob("*.meta.json")
    times = json.loads(meta.read_text())
    assert times["started_at"] == times["finished_at"] == "2030-01-02T03:04:05Z"
    assert load_config("CONFIG.soft").meta["generated_at"] == "2030-01-02T03:04:05Z"


def test_interrupt_keeps_rows_and_config_then_resume_finishes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("CONFIG.soft").write_text("previous profile stays\n")
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", "results")
    seen = []

    def stop_after_three(point: Point, index: int, total: int) -> None:
        seen.append(point)
        if index == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(stop_after_three)
    kept = pd.read_csv(sweep.csv_path)
    assert set(zip(kept["op"], kept["size"])) == {(p.op, p.size) for p in seen[:3]}
    assert not json.loads(sweep.meta_path.read_text())["complete"]
    assert Path("CONFIG.soft").read_text() == "previous profile stays\n"

    again = Sweep(spec, "tiny.yaml", "results", resume=True)
    assert again.csv_path == sweep.csv_path
    measured = []
    frame = again.run(lambda p, i, t: measured.append(p))
    assert len(frame) == len(pd.read_csv(sweep.csv_path))
    points = set(zip(frame["op"], frame["size"], frame["backend"]))
    assert len(points) == len(frame) // 3  # no point measured twice
    assert json.loads(again.meta_path.read_text())["complete"]


def test_a_resumed_sweep_keeps_its_start_and_counts_every_process_s_time(tmp_path):
    """The last write of the metadata dropped started_at, and a resumed sweep's elapsed_s
    was its last process's alone."""
    spec = spec_from_dict(TINY, "tiny")
    first = Sweep(spec, "tiny.yaml", tmp_path)
    first.started -= 100  # as if it had run for 100 s before it was stopped

    def stop(point: Point, index: int, total: int) -> None:
        if index == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        first.run(stop)
    stopped = json.loads(first.meta_path.read_text())
    assert not stopped["complete"] and stopped["started_at"] == first.started_at
    (span,) = stopped["processes"]
    assert span["elapsed_s"] >= 100 and stopped["elapsed_s"] == span["elapsed_s"]
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    again.started -= 50
    again.run()
    meta = json.loads(again.meta_path.read_text())
    assert meta["complete"] and meta["started_at"] == first.started_at
    assert meta["processes"][0] == span and meta["processes"][1]["elapsed_s"] >= 50
    assert meta["elapsed_s"] == round(span["elapsed_s"] + meta["processes"][1]["elapsed_s"], 1)
    assert again.elapsed_s == meta["elapsed_s"] >= 150
    assert meta["finished_at"] >= meta["started_at"]


def test_resume_with_nothing_to_resume_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path)), "--resume"])
    assert result.exit_code == 2 and "no unfinished 'tiny' sweep" in result.output
    assert not Path("results").exists()  # a failed start leaves nothing behind


def test_a_profile_of_another_device_is_archived_before_it_is_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from softcuda.config import default_config_path

    other = (
        default_config_path()
        .read_text()
        .replace("device_hash  = portable", "device_hash  = " + "f" * 64)
        .replace("type = cpu", "type = cpu\ncpu_model = Another Machine")
    )
    Path("CONFIG.soft").write_text(other)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    (archived,) = Path("results/another-machine").glob("CONFIG-*.soft")
    assert archived.read_text() == other and "archived as" in result.output
    assert load_config("CONFIG.soft").device_type == "cpu"
    assert "profiled another device: archived as" in result.output
    # a profile of this same device is simply replaced (atomically), not archived
    again = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert again.exit_code == 0 and "archived" not in again.output
    # one that cannot be read is kept too, and said to be unreadable
    Path("CONFIG.soft").write_text("not a profile\n")
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0 and "could not be read: archived as" in result.output
    (kept,) = Path("results/unreadable").glob("CONFIG-*.soft")
    assert kept.read_text() == "not a profile\n"


def test_init_options_that_cannot_hold_here_are_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(write_spec(tmp_path))
    both = CliRunner().invoke(main, ["init", "--spec", spec, "--resume", "--from", "x.csv"])
    assert both.exit_code == 2 and "--resume and --from exclude each other" in both.output
    if detect().device_type == "cpu":  # no CUDA here: a second GPU cannot be profiled
        gpu = CliRunner().invoke(main, ["init", "--spec", spec, "--device", "1"])
        assert gpu.exit_code == 2 and "--device 1: no CUDA device is usable here" in gpu.output
        assert not Path("results").exists()


def test_time_budget_stops_with_rows_kept(tmp_path):
    spec = spec_from_dict({**TINY, "time_budget_s": 1e-9}, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    with pytest.raises(BudgetSpent, match="time budget"):
        sweep.run()


def test_bad_spec_is_exit_2_naming_file_and_key(tmp_path):
    path = write_spec(tmp_path, repetitions={"warmup": -1})
    result = CliRunner().invoke(main, ["init", "--spec", str(path)])
    assert result.exit_code == 2
    assert "tiny.yaml" in result.output and "repetitions.warmup" in result.output


def test_decide_again_from_a_raw_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path)
    assert CliRunner().invoke(main, ["init", "--spec", str(spec)]).exit_code == 0
    first = load_config("CONFIG.soft")
    (csv,) = Path("results").rglob("sweep-tiny-*.csv")
    result = CliRunner().invoke(main, ["init", "--from", str(csv), "--out", "again.soft"])
    assert result.exit_code == 0, result.output
    assert load_config("again.soft").rules == first.rules


def test_resuming_a_part_measured_point_keeps_one_set_of_probe_rows(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    sweep.run()
    frame = pd.read_csv(sweep.csv_path, dtype={"shape": str})
    # as if cpu_blas's rows of matmul 8 had never been written (a torn write)
    torn = (frame["op"] == "matmul") & (frame["size"] == 8) & (frame["backend"] == "cpu_blas")
    frame[~torn].to_csv(sweep.csv_path, index=False)
    meta = json.loads(sweep.meta_path.read_text())
    sweep.meta_path.write_text(json.dumps({**meta, "complete": False}))
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True).run()
    point = again[(again["op"] == "matmul") & (again["size"] == 8)]
    assert len(point[point["backend"] == "cpu_blas"]) == 3  # measured again
    assert len(point[point["backend"] == "machine"]) == 3  # the first probe set, not a second


def test_init_interrupted_while_settling_says_nothing_was_written(tmp_path, monkeypatch):
    from softcuda.sweep import runner

    monkeypatch.chdir(tmp_path)

    def interrupted(cuda, max_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "settle", interrupted)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path, settle_s=5))])
    assert result.exit_code == 130
    assert "before anything was measured" in result.output and "--resume" not in result.output
    assert not Path("CONFIG.soft").exists()


def test_resume_remembers_what_was_too_slow(tmp_path):
    spec = spec_from_dict(
        {**TINY, "repetitions": {**TINY["repetitions"], "max_point_s": 1e-9}}, "tiny"
    )
    sweep = Sweep(spec, "tiny.yaml", tmp_path)

    def stop_at_second(point: Point, index: int, total: int) -> None:
        if index == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(stop_at_second)
    assert sweep.skipped  # everything is "too slow" for a limit of 1 ns
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert set(again.skipped) == set(sweep.skipped)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "../../x"}, "name: must be letters"),
        (
            {"ops": {"add": {"sizes": {"start": 1, "stop": 1 << 40, "per_octave": 1}}}},
            "ops.add.sizes.stop: must be at most",
        ),
        (
            {"ops": {"matmul": {"sizes": {"start": 1, "stop": 100_000, "per_octave": 1}}}},
            "ops.matmul.sizes.stop: must be at most 65536",
        ),
        (
            {"ops": {"add": {"sizes": {"start": 1, "stop": 8, "per_octave": 10**8}}}},
            "per_octave: must be at most 64",
        ),
        (
            {"repetitions": {**TINY["repetitions"], "retry_wait_s": -1}},
            "repetitions.retry_wait_s: must be a number >= 0",
        ),
    ],
)
def test_spec_bounds(tmp_path, change, words):
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path, **change))])
    assert result.exit_code == 2 and words in result.output, result.output


def test_unwritable_out_fails_before_measuring(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path)
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--out", "no/such/dir/C.soft"])
    assert "--out: no/such/dir does not exist; make the folder first" in one_error_line(result)
    result = CliRunner().invoke(main, ["init", "--from", "x.csv", "--out", "no/such/dir/C.soft"])
    assert "--out: no/such/dir does not exist" in one_error_line(result)
    Path("file").write_text("")
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--out", "file/C.soft"])
    assert "--out: file is a file, not a folder" in one_error_line(result)
    assert not Path("results").exists() or not list(Path("results").rglob("*.csv"))


def test_no_available_backend_is_an_input_error(tmp_path):
    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is usable here")
    result = CliRunner().invoke(
        main, ["init", "--spec", str(write_spec(tmp_path, backends=["cuda_tiled"]))]
    )
    assert result.exit_code == 2 and "none of cuda_tiled is available" in result.output


def test_buffers_spread_a_point_over_copies_with_their_own_data(tmp_path, monkeypatch):
    """...up to ROTATE_MAX_BYTES, and a point is timed hot while its data fits the last-level
    cache (``hot_max_bytes``): above it, it streams anyway."""
    from softcuda.sweep import measure

    compiled = []
    real = measure.compile_plan
    hot = []
    timed = measure.interleaved

    def noting(groups, policy, hot=False, riders=0, _noted=hot):
        _noted.append(hot)
        return timed(groups, policy, hot=hot, riders=riders)

    monkeypatch.setattr(measure, "interleaved", noting)

    def counting(out, config, kind):
        plan = real(out, config, kind)
        compiled.append((out.inputs[0], plan))
        return plan

    monkeypatch.setattr(measure, "compile_plan", counting)
    reps = {
        "warmup": 0,
        "min_time_s": 0.0,
        "min_reps": 4,
        "max_reps": 7,
        "buffers": 3,
        "retries": 0,
    }
    one = {"add": {"sizes": {"start": 256, "stop": 256, "per_octave": 1}}}
    spec = spec_from_dict({**TINY, "ops": one, "repetitions": reps}, "tiny")
    frame = Sweep(spec, "tiny.yaml", tmp_path / "a").run()
    frame = frame[frame["backend"] != "machine"]
    leaves = [leaf for leaf, _ in compiled]
    assert len(compiled) == 3 and len({id(leaf._allocation) for leaf in leaves}) == 3
    # min_time_s reached at once: rounds of 3 (one per copy) until min_reps 4 are taken
    assert len(frame) == 6 and list(frame["repetition"]) == list(range(6))
    assert hot == [True]

    compiled.clear(), hot.clear()
    monkeypatch.setattr(measure, "ROTATE_MAX_BYTES", 0)  # every point too large to copy...
    frame = Sweep(spec, "tiny.yaml", tmp_path / "b").run()
    frame = frame[frame["backend"] != "machine"]
    # ...but inside the last-level cache: one copy, timed hot
    assert len(compiled) == 1 and len(frame) == 4 and hot == [True]

    compiled.clear(), hot.clear()
    monkeypatch.setattr(measure, "hot_max_bytes", lambda: 0)  # and larger than every cache
    Sweep(spec, "tiny.yaml", tmp_path / "b2").run()
    assert len(compiled) == 1 and hot == [False]

    # above the limit the plans of a point read one set of leaves: each would be a fresh
    # allocation of the point's inputs, and the data fits no cache to keep apart
    compiled.clear()
    two = {**TINY, "backends": ["cpu_fallback", "cpu_threads"], "ops": one, "repetitions": reps}
    Sweep(spec_from_dict(two, "tiny"), "tiny.yaml", tmp_path / "c").run()
    assert len(compiled) == 2 and compiled[0][0] is compiled[1][0]
    assert compiled[0][1] is not compiled[1][1]


def test_last_level_cache_reads_the_largest_size_linux_reports(tmp_path):
    from softcuda.sweep.measure import ROTATE_MAX_BYTES, hot_max_bytes, last_level_cache

    for index, size in (("index0", "48K"), ("index2", "2048K"), ("index3", "307200K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert last_level_cache(tmp_path) == 307200 << 10
    (tmp_path / "index4").mkdir()
    (tmp_path / "index4" / "size").write_text("1G")
    assert last_level_cache(tmp_path) == 1 << 30
    assert last_level_cache(tmp_path / "absent") == 0  # nothing said: 0, and the limit stays
    assert hot_max_bytes() >= ROTATE_MAX_BYTES


def test_rounds_keep_the_order_repetitions_were_taken_in():
    from softcuda.sweep.measure import _rounds

    assert _rounds([[1, 2, 3], [4, 5], [6, 7, 8]]) == [1, 4, 6, 2, 5, 7, 3, 8]


def test_hot_times_every_call_right_after_a_call_of_itself_and_groups_take_turns(monkeypatch):
    from types import SimpleNamespace

    from softcuda.sweep import timers

    log = []
    timed = []

    def fn(name):
        return lambda: log.append(name)

    def wall(f):  # the timer notes which call it timed
        f()
        timed.append(len(log) - 1)
        return 1e-6

    groups = [[fn("a0"), fn("a1"), fn("a2")], [fn("b0")]]
    policy = SimpleNamespace(warmup=1, min_time_s=0.0, min_reps=6, max_reps=6)
    monkeypatch.setattr(timers, "wall", wall)
    times = timers.interleaved(groups, policy, hot=True)
    assert [len(c) for c in times[0]] == [2, 2, 2] and [len(c) for c in times[1]] == [6]
    assert log[:4] == ["a0", "a1", "a2", "b0"]  # the warm-ups
    # every timed call comes right after an untimed call of the same function
    assert len(timed) == 12 and all(log[i - 1] == log[i] and i - 1 not in timed for i in timed)
    # a round runs a's copies then b, the next round b first: the start rotates
    assert [log[i] for i in timed[:5]] == ["a0", "a1", "a2", "b0", "b0"]
    assert [log[i] for i in timed[5:8]] == ["a0", "a1", "a2"]

    log.clear(), timed.clear()
    timers.interleaved(groups, policy)  # not hot: every call is timed
    assert timed == list(range(4, len(log)))

    log.clear(), timed.clear()
    timers.interleaved(groups, policy, riders=1)  # not hot, but the rider b0 is, always
    rider = [i for i in timed if log[i] == "b0"]
    assert rider and all(log[i - 1] == "b0" and i - 1 not in timed for i in rider)
    others = [i for i in timed if log[i] != "b0"]
    assert len(others) == sum(name != "b0" for name in log[4:])  # every call of a timed: cold


def test_a_rider_is_timed_in_the_others_rounds_and_stops_with_them():
    from types import SimpleNamespace

    from softcuda.sweep.timers import interleaved

    policy = SimpleNamespace(warmup=0, min_time_s=1e9, min_reps=1, max_reps=50)
    quick = SimpleNamespace(warmup=0, min_time_s=0.0, min_reps=4, max_reps=50)
    # the backends stop after 4 rounds; the rider (which alone would run to max_reps) with them
    times = interleaved([[lambda: None] * 2, [lambda: None]], quick, riders=1)
    assert [len(c) for c in times[0]] == [2, 2] and len(times[1][0]) == 2
    times = interleaved([[lambda: None], [lambda: None]], quick, riders=1)
    assert len(times[0][0]) == 4 and len(times[1][0]) == 4
    times = interleaved([[lambda: None], [lambda: None]], policy, riders=1)  # both to max_reps
    assert len(times[0][0]) == 50 and len(times[1][0]) == 50
    with pytest.raises(ValueError, match="riders"):
        interleaved([[lambda: None]], policy, riders=1)


def follows(orders: list[list[int]]) -> dict[tuple[int, int], int]:
    """How often, within the rounds, each contestant runs right after each other one."""
    counts: dict[tuple[int, int], int] = {}
    for order in orders:
        for before, after in zip(order, order[1:]):
            counts[before, after] = counts.get((before, after), 0) + 1
    return counts


@pytest.mark.parametrize("n", range(1, 9))
def test_balanced_orders_let_nobody_always_follow_the_same_contestant(n):
    from softcuda.sweep.timers import balanced_orders

    orders = balanced_orders(n)
    times = 1 if n % 2 == 0 or n == 1 else 2  # odd n needs two squares
    assert len(orders) == n * times
    assert all(sorted(order) == list(range(n)) for order in orders)
    assert sorted(order[0] for order in orders) == sorted(list(range(n)) * times)
    every_pair = {(a, b): times for a in range(n) for b in range(n) if a != b}
    assert follows(orders) == every_pair


def test_a_rotating_start_fails_that_balance_and_no_contestants_is_refused():
    """The rotation the benchmarks used before: with 4 contestants, 1 runs right after 0 in 3
    rounds of 4 and never right after 2."""
    from softcuda.sweep.timers import balanced_orders

    rotated = [[(c + r) % 4 for c in range(4)] for r in range(4)]
    assert follows(rotated)[0, 1] == 3 and (2, 1) not in follows(rotated)
    with pytest.raises(ValueError):
        balanced_orders(0)


def test_a_group_never_takes_more_than_max_reps_and_an_empty_group_is_refused():
    from types import SimpleNamespace

    from softcuda.sweep.timers import interleaved

    policy = SimpleNamespace(warmup=0, min_time_s=1.0, min_reps=1, max_reps=7)
    times = interleaved([[lambda: None] * 3], policy)
    assert [len(c) for c in times[0]] == [3, 2, 2]
    with pytest.raises(ValueError, match="at least one function"):
        interleaved([[]], policy)


def test_the_bus_is_timed_with_the_plans_own_transfers(tmp_path, monkeypatch):
    """With a stand-in for CuPy: each host memory kind and direction issues one whole-buffer
    cudaMemcpyAsync per call between the host buffer and the device buffer, on the stream."""
    import sys
    import types
    from types import SimpleNamespace

    calls = []
    runtime = SimpleNamespace(
        memcpyHostToDevice=1,
        memcpyDeviceToHost=2,
        memcpyAsync=lambda *args: calls.append(args),
    )

    class DeviceArray:
        def __init__(self, n, dtype):
            self.nbytes, self.data = n, SimpleNamespace(ptr=0xD000)

        def fill(self, value):
            pass

    stream = SimpleNamespace(ptr=77, synchronize=lambda: None)
    fake = types.ModuleType("cupy")
    fake.empty = DeviceArray
    fake.cuda = SimpleNamespace(
        runtime=runtime,
        get_current_stream=lambda: stream,
        alloc_pinned_memory=lambda n: bytearray(n),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    reps = {"warmup": 0, "min_time_s": 0.0, "min_reps": 2, "max_reps": 2}
    spec = spec_from_dict({**TINY, "repetitions": reps}, "tiny")
    rows = Sweep(spec, "tiny.yaml", tmp_path).measurer.bus(64)
    frame = pd.DataFrame(rows, columns=list(schema.COLUMNS))
    assert sorted(set(zip(frame["op"], frame["host_memory"]))) == [
        ("copy_d2h", "pageable"),
        ("copy_d2h", "pinned"),
        ("copy_h2d", "pageable"),
        ("copy_h2d", "pinned"),
    ]
    assert len(frame) == 8 and (frame["nbytes"] == 64).all()
    assert len(calls) == 8 and all(c[2] == 64 and c[4] == 77 for c in calls)
    h2d = [c for c in calls if c[3] == 1]
    d2h = [c for c in calls if c[3] == 2]
    assert len(h2d) == len(d2h) == 4
    assert all(c[0] == 0xD000 and c[1] != 0xD000 for c in h2d)  # device <- host
    assert all(c[1] == 0xD000 and c[0] != 0xD000 for c in d2h)  # host <- device


def test_resume_judges_too_slow_by_the_slowest_host_memory_kind_as_the_sweep_did(tmp_path):
    """A CUDA backend fast from pinned memory but over max_point_s from pageable memory was
    skipped while running; a resumed sweep must skip it too, not average the two kinds."""
    from softcuda.sweep.storage import RowWriter

    reps = {"warmup": 0, "min_time_s": 0.0, "min_reps": 1, "max_reps": 1, "max_point_s": 1.0}
    spec = spec_from_dict({**TINY, "repetitions": reps}, "tiny")
    first = Sweep(spec, "tiny.yaml", tmp_path)
    first.folder.mkdir(parents=True)
    first.write_meta(False)
    writer = RowWriter(first.csv_path)
    base = (schema.SCHEMA_VERSION, first.machine.device_hash, "d", "add", 4096, "4096", "float32")
    writer.write(
        [(*base, "cuda_elementwise", "pinned", "end_to_end", i, 0.1, 0, 0) for i in range(4)]
        + [(*base, "cuda_elementwise", "pageable", "end_to_end", i, 3.0, 0, 0) for i in range(3)]
    )
    writer.close()
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert again.skipped == {("add", "cuda_elementwise"): 3.0}
    assert again.stopped_at == {("add", "cuda_elementwise"): 4096}  # still timed below it


def _fake_rounds(probes: list[float], seen: list):
    """A stand-in for ``timers.interleaved``: call k (1, 2, ...) times every backend copy at
    k * 10 us, three times, with no spread, and the probe (the rider, last) at ``probes[k - 1]``."""

    def fake(groups, policy, hot=False, riders=0):
        seen.append(riders)
        k = len(seen)
        timed = [[[k * 1e-5] * 3 for _ in group] for group in groups[: len(groups) - riders]]
        return timed + [[[probes[k - 1]] * 3]] * riders

    return fake


@pytest.mark.parametrize("retries", [2, 1, 0])
def test_a_point_measured_while_the_host_was_off_is_measured_again(tmp_path, monkeypatch, retries):
    from softcuda.sweep import measure
    from softcuda.timings.stats import curves

    seen: list[int] = []
    # calls 1-3: the grid, 512 with the host at 1.8x; 4: 512 again, still 1.6x; 5: 512 at 1.04x
    monkeypatch.setattr(
        measure, "interleaved", _fake_rounds([5e-6, 9e-6, 5e-6, 8e-6, 5.2e-6], seen)
    )
    add = {"add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": retries}
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps}, "tiny")
    progress = []
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    frame = sweep.run(lambda point, index, total: progress.append((point, index, total)))

    assert len(seen) == 3 + retries and all(seen)  # every attempt takes its own probe rows
    attempts = frame.groupby("size")["attempt"].unique().map(sorted).to_dict()
    assert attempts == {256: [0], 512: list(range(retries + 1)), 1024: [0]}
    on_disk = pd.read_csv(sweep.csv_path)
    assert len(on_disk) == len(frame) and (on_disk["attempt"] == frame["attempt"]).all()
    assert [(p.size, p.attempt) for p, _, _ in progress[3:]] == [
        (512, a + 1) for a in range(retries)
    ]
    assert progress[-1][2] == 3 + retries  # the progress total grew with the retries

    cv = curves(frame, "e2e_pinned").set_index(["backend", "size"])
    chosen = {2: 5, 1: 4, 0: 2}[retries]  # the steadiest attempt's call: 1.04x, 1.6x, 1.8x
    assert cv.loc[("cpu_fallback", 512), "median_s"] == pytest.approx(chosen * 1e-5)
    assert ("host at" in cv.loc[("cpu_fallback", 512), "reason"]) == (retries < 2)
    assert cv.loc[("cpu_fallback", 256), "median_s"] == pytest.approx(1e-5)


def test_a_resumed_sweep_retries_from_its_rows(tmp_path, monkeypatch):
    """Attempts are counted from the rows on disk: a resumed sweep does not start them over."""
    from softcuda.sweep import measure

    add = {"add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps}, "tiny")
    seen: list[int] = []
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5e-6, 9e-6, 5e-6, 8e-6], seen))
    first = Sweep(spec, "tiny.yaml", tmp_path)
    calls = 0

    def stop_after_four(point, index, total):
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        first.run(stop_after_four)
    seen.clear()
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5.2e-6], seen))
    frame = Sweep(spec, "tiny.yaml", tmp_path, resume=True).run()
    assert len(seen) == 1  # only attempt 2 of 512 was left to do
    assert sorted(frame.loc[frame["size"] == 512, "attempt"].unique()) == [0, 1, 2]


def test_resuming_a_csv_of_the_older_schema_is_refused(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    sweep.folder.mkdir(parents=True)
    old_columns = [c for c in schema.COLUMNS if c != "attempt"]
    sweep.csv_path.write_text(",".join(old_columns) + "\n")
    sweep.write_meta(False)
    with pytest.raises(SoftcudaError, match="another version of softcuda"):
        Sweep(spec, "tiny.yaml", tmp_path, resume=True)


def test_retries_come_in_passes_after_every_op(tmp_path, monkeypatch):
    """A slow spell of the host lasts seconds: a point is measured again only after the whole
    sweep has gone by, not right after its own op."""
    from softcuda.sweep import measure

    seen: list[int] = []
    probes = [5e-6, 9e-6, 5e-6, 9e-6, 5e-6, 5e-6]  # 512 of each op in a slow spell, then not
    monkeypatch.setattr(measure, "interleaved", _fake_rounds(probes, seen))
    two = {op: {"sizes": {"start": 256, "stop": 512, "per_octave": 1}} for op in ("add", "sum")}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict({**TINY, "ops": two, "repetitions": reps}, "tiny")
    progress = []
    Sweep(spec, "tiny.yaml", tmp_path).run(
        lambda p, i, t: progress.append((p.op, p.size, p.attempt))
    )
    assert progress == [
        ("add", 256, 0), ("add", 512, 0), ("sum", 256, 0), ("sum", 512, 0),
        ("add", 512, 1), ("sum", 512, 1),
    ]  # fmt: skip


def test_a_point_where_a_backend_was_too_slow_is_not_measured_again(tmp_path, monkeypatch):
    """Its backend was judged over max_point_s there; timing it again would spend seconds on a
    backend the sweep has stopped timing."""
    from softcuda.sweep import measure

    seen: list[int] = []
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5e-6, 9e-6, 9e-6, 9e-6], seen))
    add = {"add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2, "max_point_s": 1.5e-5}  # call 2 takes 2e-5 s
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps}, "tiny")
    frame = Sweep(spec, "tiny.yaml", tmp_path).run()
    assert len(seen) == 2 and (frame["attempt"] == 0).all()  # 1024: every backend skipped


def test_resume_judges_too_slow_on_first_attempts_only(tmp_path):
    """A live sweep judges a point's first attempt; a resumed one must not judge the retries."""
    reps = {**TINY["repetitions"], "max_point_s": 1.0}
    spec = spec_from_dict({**TINY, "repetitions": reps}, "tiny")
    first = Sweep(spec, "tiny.yaml", tmp_path)
    first.folder.mkdir(parents=True)
    writer = runner_writer(first)
    base = (schema.SCHEMA_VERSION, first.machine.device_hash, "d", "add", 4096, "4096", "float32")
    writer.write(
        [(*base, "cpu_fallback", "pageable", "wall", i, 0.9, 0, 0) for i in range(3)]
        + [(*base, "cpu_fallback", "pageable", "wall", i, 1.5, 0, 1) for i in range(3)]
    )
    writer.close()
    first.write_meta(False)
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert again.skipped == {}


def runner_writer(sweep):
    from softcuda.sweep.storage import RowWriter

    return RowWriter(sweep.csv_path)


def test_sizes_added_by_the_last_refinement_get_their_retries_too(tmp_path, monkeypatch):
    """So a sweep resumed after the last refinement (which cannot tell its sizes from the
    others) does what one never stopped does."""
    from softcuda.sweep import measure

    seen: list[int] = []
    # the grid 256, 512 at the host's best; 384 (added by the last refinement) slow, then not
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5e-6, 5e-6, 9e-6, 5e-6], seen))
    asked = []

    def refinement(self, op):
        asked.append(op)
        return [Point(op, 384, "*")] if len(asked) == 2 else []  # the call after the passes

    monkeypatch.setattr(Sweep, "_refinement", refinement)
    add = {"add": {"sizes": {"start": 256, "stop": 512, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps}, "tiny")
    progress = []
    Sweep(spec, "tiny.yaml", tmp_path).run(lambda p, i, t: progress.append((p.size, p.attempt)))
    assert progress == [(256, 0), (512, 0), (384, 0), (384, 1)]


def _gated_sweep(
    tmp_path,
    monkeypatch,
    wait_s: float,
    budget: float | None = None,
    probes: tuple[float, ...] = (5e-6, 9e-6, 5e-6, 9e-6, 9e-6, 9e-6, 5e-6, 5e-6),
    fast: tuple[bool, ...] = (True,) * 8,
):
    """A sweep of add and sum at 256 and 512 whose 512s are slow until the last pass, with a
    fake host reading and a fake wait that takes 4 s and ends with the host fast or not
    (``fast``, one per gate); returns (sweep, waits, seen)."""
    from softcuda.sweep import measure, runner

    seen: list[int] = []
    monkeypatch.setattr(measure, "interleaved", _fake_rounds(list(probes), seen))
    readings = iter([3e-6, 3.6e-6, 3e-6, 3.5e-6, 3e-6, 3e-6, 3e-6, 3e-6])
    monkeypatch.setattr(runner, "host_time", lambda: next(readings))
    waits = []

    def fake_wait(best_s, tolerance, max_s, measure):
        assert measure is runner.host_time  # the gate reads the host as its yardstick did
        waits.append((best_s, tolerance, max_s, len(seen)))
        return min(4.0, max_s), fast[len(waits) - 1]

    monkeypatch.setattr(runner, "wait_for_host", fake_wait)
    two = {op: {"sizes": {"start": 256, "stop": 512, "per_octave": 1}} for op in ("add", "sum")}
    reps = {**TINY["repetitions"], "retries": 2, "retry_wait_s": wait_s}
    spec = spec_from_dict(
        {**TINY, "ops": two, "repetitions": reps, "time_budget_s": budget}, "tiny"
    )
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    return sweep, waits, seen


def test_a_retry_pass_waits_for_the_host_before_each_point_within_its_allowance(
    tmp_path, monkeypatch
):
    """Waiting comes before re-measured points only, against the fast state of the host's own
    readings, and stops once the spec's retry_wait_s is spent: then the gate reads the host
    once (a wait of at most 0 s) and waits no more."""
    from softcuda.timings.stats import HOST_DRIFT

    sweep, waits, seen = _gated_sweep(tmp_path, monkeypatch, wait_s=10)
    progress = []
    sweep.run(lambda p, i, t: progress.append((p.size, p.attempt)))
    # 4 first attempts, then pass 1 (add 512, sum 512, both still slow), then pass 2: the
    # first two waits take 4 s each, the third the 2 s left, and the fourth reads only
    assert [w[3] for w in waits] == [4, 5, 6, 7]
    assert [w[2] for w in waits] == [10, 6, 2, 0]
    # the 10% quantile of the readings after the 4 grid points (3, 3.6, 3, 3.5 us), then of 6
    assert [w[0] for w in waits] == [pytest.approx(3e-6)] * 4
    assert all(w[1] == HOST_DRIFT for w in waits)
    assert len(seen) == 8 and sweep.waited_s == 10 and len(sweep.host_readings) == 8
    assert progress[4:] == [(512, 1), (512, 1), (512, 2), (512, 2)]
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["waited_for_host_s"] == 10 and meta["spec"]["repetitions"]["retry_wait_s"] == 10


def test_a_point_the_host_is_still_slow_for_waits_for_the_next_pass(tmp_path, monkeypatch):
    """Measured again in a slow spell, a point mostly reads the slow spell again: the gate
    leaves it for a later pass, and the attempt numbers count measurements, not passes."""
    probes = (5e-6, 9e-6, 5e-6, 9e-6, 5e-6, 5e-6)  # the grid, then sum 512 and add 512 fast
    sweep, waits, seen = _gated_sweep(
        tmp_path, monkeypatch, 10, probes=probes, fast=(False, True, True)
    )
    progress = []
    frame = sweep.run(lambda p, i, t: progress.append((p.op, p.size, p.attempt)))
    assert progress[4:] == [("add", 512, 1), ("sum", 512, 1), ("add", 512, 1)]
    assert len(seen) == 6 and len(waits) == 3  # add 512 was not measured in the first pass
    attempts = frame.groupby(["op", "size"])["attempt"].max().to_dict()
    assert attempts == {("add", 256): 0, ("add", 512): 1, ("sum", 256): 0, ("sum", 512): 1}


def test_the_wait_for_the_host_takes_at_most_half_the_time_budget_left(tmp_path, monkeypatch):
    import time

    sweep, waits, _ = _gated_sweep(tmp_path, monkeypatch, wait_s=30, budget=100)
    sweep.started = time.monotonic() - 90  # 10 s of the budget left
    sweep.run()
    assert 3.0 < waits[0][2] <= 5.0  # half of what is left, not the 30 s allowance


def test_host_time_is_the_median_of_hot_calls_with_the_collector_paused(monkeypatch):
    import gc

    from softcuda.sweep import settle

    now = [0.0]
    durations = iter([1.0, 1e-6, 1e-6, 5e-6, 1e-6, 9e-6])  # the first call is the warm-up
    collecting = []

    def fake_probe():
        collecting.append(gc.isenabled())
        now[0] += next(durations)

    monkeypatch.setattr(settle, "probe", fake_probe)
    monkeypatch.setattr(settle.time, "perf_counter", lambda: now[0])
    assert settle.host_time(calls=5) == pytest.approx(1e-6)
    assert collecting[1:] == [False] * 5 and gc.isenabled()


def test_waiting_for_the_host_returns_once_the_probe_is_fast_or_the_time_is_spent():
    from softcuda.sweep.settle import wait_for_host

    now = [0.0]
    host = iter([4.0e-6, 3.9e-6, 3.4e-6, 3.2e-6])

    def sleep(s):
        now[0] += s

    waited = wait_for_host(
        3e-6, 0.10, 10, measure=lambda: next(host), sleep=sleep, clock=lambda: now[0]
    )
    # three readings over 3.3 us, 0.25 s apart, then 3.2 us
    assert waited == (pytest.approx(0.75), True)
    slow = wait_for_host(3e-6, 0.10, 0.6, measure=lambda: 5e-6, sleep=sleep, clock=lambda: now[0])
    assert slow == (pytest.approx(0.6), False)  # the last sleep is cut to what is left
    fast = wait_for_host(3e-6, 0.10, 5, measure=lambda: 3.3e-6, sleep=sleep, clock=lambda: now[0])
    assert fast == (0.0, True)  # 3.3 us is within 10% of 3 us: no wait
    once = wait_for_host(3e-6, 0.10, 0, measure=lambda: 5e-6, sleep=sleep, clock=lambda: now[0])
    assert once == (0.0, False)  # no time to wait: one reading


@pytest.mark.parametrize("scan", [0, 3])
def test_the_scan_comes_after_the_last_refinement_and_gets_its_retries(tmp_path, monkeypatch, scan):
    """spec ``scan``: sizes around each boundary, asked of select.scan_sizes with the spec's
    number of steps once the boundary is refined, then refined again and measured again like
    any other size; with scan 0 nobody asks."""
    from softcuda.sweep import measure
    from softcuda.timings import select

    seen: list[int] = []
    # the grid 256, 512 at the host's best; 300 (the scan's) slow, then not
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5e-6, 5e-6, 9e-6, 5e-6], seen))
    asked = []

    def scan_sizes(frame, op, metric, steps):
        asked.append((op, metric, steps, sorted(set(frame["size"]))))
        return [300]

    refined = []
    monkeypatch.setattr(select, "scan_sizes", scan_sizes)
    monkeypatch.setattr(Sweep, "_refinement", lambda self, op: refined.append(op) or [])
    add = {"add": {"sizes": {"start": 256, "stop": 512, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps, "scan": scan}, "tiny")
    progress = []
    Sweep(spec, "tiny.yaml", tmp_path).run(lambda p, i, t: progress.append((p.size, p.attempt)))
    if not scan:
        assert asked == [] and progress == [(256, 0), (512, 0)] and len(refined) == 2
        return
    assert asked == [("add", "e2e_pinned", 3, [256, 512])]
    assert progress == [(256, 0), (512, 0), (300, 0), (300, 1)]
    assert len(refined) == 3  # after the grid, after the first passes, after the scan


def test_inputs_are_views_of_one_draw_per_input_position():
    import numpy as np

    from softcuda.sweep.measure import Noise, point_inputs

    drawn = []

    class Counting:
        def standard_normal(self, count, dtype):
            drawn.append((count, np.dtype(dtype).name))
            return np.random.default_rng(len(drawn)).standard_normal(count, dtype=dtype)

    noise = Noise(Counting(), capacity=1000)
    f32 = np.dtype(np.float32)
    (a, b), shape, nbytes = point_inputs("add", 300, f32, noise)
    assert drawn == [(1000, "float32"), (1000, "float32")] and (shape, nbytes) == ("300", 3600)
    assert a.shape == b.shape == (300,) and not np.array_equal(a, b)
    (x,), _, _ = point_inputs("relu", 700, f32, noise)
    (m, n), shape, _ = point_inputs("matmul", 31, f32, noise)
    assert len(drawn) == 2 and shape == "31x31x31" and m.shape == (31, 31)
    assert np.shares_memory(x, a) and np.shares_memory(m, a) and np.shares_memory(n, b)
    assert not a.flags.writeable  # a point cannot change what the next one gets
    (log,), _, _ = point_inputs("log", 500, f32, noise)
    assert log.min() >= np.float32(0.1) and not np.shares_memory(log, a)
    point_inputs("add", 1500, f32, noise)  # more than the capacity: drawn again, larger
    point_inputs("add", 10, np.dtype(np.float64), noise)  # another dtype: its own draw
    assert drawn[2:] == [(1500, "float32"), (1500, "float32"), (1000, "float64"), (1000, "float64")]


def test_a_sweep_draws_its_inputs_once_at_its_largest_point(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    assert sweep.noise.capacity == 64 * 64  # matmul n = 64 and add 4096 both hold 4096
    sweep.run()
    assert sorted(sweep.noise._arrays) == [(0, "<f4"), (1, "<f4")]
    assert {a.size for a in sweep.noise._arrays.values()} == {4096}


def _with_a_cuda_backend(monkeypatch) -> None:
    """Sweeps that list a CUDA backend, on this CPU-only machine (nothing CUDA runs)."""
    plain = Sweep.__init__

    def init(self, *args, **kwargs):
        plain(self, *args, **kwargs)
        self.backends = (*self.backends, "cuda_elementwise")

    monkeypatch.setattr(Sweep, "__init__", init)


def test_the_kernels_are_compiled_once_before_settling_and_the_time_is_kept(tmp_path, monkeypatch):
    from softcuda.backends import cuda_kernels
    from softcuda.sweep import runner

    events = []
    monkeypatch.setattr(cuda_kernels, "compile_builds", lambda: events.append("compile") or 2.5)
    monkeypatch.setattr(Sweep, "settle", lambda self: events.append("settle"))
    monkeypatch.setattr(Sweep, "_measure_all", lambda self, *a, **k: events.append("measure"))
    monkeypatch.setattr(Sweep, "_retry_passes", lambda self, *a, **k: None)
    monkeypatch.setattr(Sweep, "_refine", lambda self, *a, **k: None)
    cpu_only = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path)
    assert cpu_only.compile_kernels() is None and events == []
    _with_a_cuda_backend(monkeypatch)
    sweep = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path)
    assert sweep.compile_kernels() == 2.5
    sweep.run()
    assert events[:2] == ["compile", "settle"] and events.count("compile") == 1
    assert json.loads(sweep.meta_path.read_text())["compile_s"] == 2.5
    assert runner.CompileFailed.__mro__[1] is SoftcudaError


def test_init_says_in_one_line_when_the_kernels_do_not_compile(tmp_path, monkeypatch):
    from softcuda.backends import cuda_kernels

    def broken():
        raise RuntimeError(
            "CompileException: nvrtc: error: failed to open libnvrtc-builtins.so.13.0"
        )

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cuda_kernels, "compile_builds", broken)
    _with_a_cuda_backend(monkeypatch)
    Path("CONFIG.soft").write_text("kept\n")
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output
    assert "CUDA kernels did not compile (RuntimeError: CompileException: nvrtc" in errors[0]
    assert "nothing was measured" in errors[0]
    assert Path("CONFIG.soft").read_text() == "kept\n"
    assert not list(tmp_path.glob("results/*/*.csv"))


def test_a_backend_stopped_by_max_point_s_is_still_timed_below_its_stop(tmp_path, modelled_timings):
    """max_point_s stops a backend at an op's larger sizes only: refinement, which comes after
    the op's whole grid, must still time it at the sizes below, where it may be the winner the
    boundary is placed against (it used to drop it at every later size, so the other backend
    won the refined sizes and the boundary fell onto the grid point below the crossing)."""
    from softcuda.timings import select

    model = {"cpu_fallback": lambda n: 1e-9 * n**3, "cpu_blas": lambda n: 2e-4 + 1e-11 * n**3}
    crossing = (2e-4 / (1e-9 - 1e-11)) ** (1 / 3)  # n = 58.7
    modelled_timings(model)
    reps = {**TINY["repetitions"], "max_point_s": 5e-3}  # cpu_fallback: 16.8 ms at n = 256
    ops = {"matmul": {"sizes": {"start": 8, "stop": 256, "per_octave": 1}}}
    sweep = Sweep(spec_from_dict({**TINY, "ops": ops, "repetitions": reps}, "tiny"), "t", tmp_path)
    frame = sweep.run()
    wall = frame[frame["phase"] == "wall"]
    refined = wall[~wall["size"].isin([8, 16, 32, 64, 128, 256])]
    assert len(refined) and set(refined["backend"]) == {"cpu_fallback", "cpu_blas"}
    assert sweep.skipped == {("matmul", "cpu_fallback"): model["cpu_fallback"](256)}
    first, second = select.buckets(frame, "matmul", n_boot=50)
    assert (first.backend, second.backend) == ("cpu_fallback", "cpu_blas")
    assert abs(first.hi / crossing - 1) < 0.10


def _interrupted(spec, folder, after: int):
    """A sweep of ``spec`` stopped (KeyboardInterrupt) as it reached point ``after``."""

    def stop(point: Point, index: int, total: int) -> None:
        if index == after:
            raise KeyboardInterrupt

    sweep = Sweep(spec, "tiny.yaml", folder)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(stop)
    return sweep


def test_resume_refuses_a_spec_that_measures_otherwise_naming_the_key(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = _interrupted(spec, tmp_path, 3)
    other = {**TINY, "repetitions": {**TINY["repetitions"], "min_reps": 5, "max_reps": 5}}
    with pytest.raises(SoftcudaError) as caught:
        Sweep(spec_from_dict(other, "tiny"), "tiny.yaml", tmp_path, resume=True)
    message = str(caught.value)
    assert "measured with another spec" in message and "start a new sweep" in message
    assert "repetitions.min_reps: 3 there, 5 here" in message
    assert "repetitions.max_reps: 3 there, 5 here" in message
    # how long this run may take is not what it measures: a larger budget resumes
    longer = {**TINY, "time_budget_s": 900, "settle_s": 1}
    again = Sweep(spec_from_dict(longer, "tiny"), "tiny.yaml", tmp_path, resume=True)
    assert again.csv_path == sweep.csv_path


def test_resume_picks_the_unfinished_sweep_of_its_own_spec_name(tmp_path):
    """sweep-tiny-*.meta.json also matches the files of a spec named tiny-more."""
    more = spec_from_dict({**TINY, "name": "tiny-more"}, "tiny-more")
    _interrupted(more, tmp_path, 2)
    tiny = _interrupted(spec_from_dict(TINY, "tiny"), tmp_path, 2)
    _interrupted(more, tmp_path, 2)  # the newest unfinished file that the glob matches
    again = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path, resume=True)
    assert again.csv_path == tiny.csv_path


def test_a_spec_name_with_csv_inside_keeps_its_metadata_beside_its_csv(tmp_path, monkeypatch):
    """The writer replaced every ".csv" in the name: `name: v1.csvdata` wrote its metadata
    as sweep-v1.meta.jsondata-..., which --resume and --from never found."""
    from softcuda.timings.load import metadata_path

    monkeypatch.chdir(tmp_path)
    spec = spec_from_dict({**TINY, "name": "v1.csvdata"}, "v1.yaml")
    sweep = _interrupted(spec, "results", 3)
    assert sweep.meta_path == metadata_path(sweep.csv_path)
    assert sweep.meta_path.name == sweep.csv_path.name.removesuffix(".csv") + ".meta.json"
    again = Sweep(spec, "v1.yaml", "results", resume=True)
    assert again.csv_path == sweep.csv_path
    again.run()
    result = CliRunner().invoke(main, ["init", "--from", str(sweep.csv_path), "--out", "C.soft"])
    assert result.exit_code == 0, result.output


def test_resume_after_a_kill_mid_write_measures_the_cut_point_again(tmp_path):
    """A kill while a point's rows went to disk leaves a cut-off last line (and maybe some of
    the point's rows before it): the resumed sweep drops that point, says so, and measures it
    again; the CSV stays readable."""
    from softcuda.timings.load import load_csvs

    spec = spec_from_dict(TINY, "tiny")
    sweep = _interrupted(spec, tmp_path, 4)
    whole = sweep.csv_path.read_bytes()
    last = pd.read_csv(sweep.csv_path).iloc[-1]
    cut_point = (last["op"], int(last["size"]))
    lines = whole.splitlines(keepends=True)
    sweep.csv_path.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # cut inside its line
    with pytest.warns(UserWarning, match=f"stopped while writing {cut_point[0]} {cut_point[1]}"):
        again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    measured = []
    frame = again.run(lambda p, i, t: measured.append((p.op, p.size)))
    assert cut_point in measured
    on_disk = load_csvs([sweep.csv_path], attempts="all")  # parses: no torn line left
    assert len(on_disk) == len(frame)
    counts = on_disk[on_disk["phase"] == "wall"].groupby(["op", "size", "backend"]).size()
    assert (counts == 3).all()  # every point whole, none twice


def test_a_cut_off_line_that_began_a_point_of_its_own_leaves_the_point_before(tmp_path):
    from softcuda.sweep.storage import drop_torn_point

    header = ",".join(schema.COLUMNS) + "\r\n"
    row = "2,h,d,{op},{size},{size},float32,cpu_fallback,pageable,wall,{i},1e-06,0,0\r\n"
    a = "".join(row.format(op="add", size=256, i=i) for i in range(3))
    path = tmp_path / "x.csv"
    path.write_bytes((header + a + row.format(op="add", size=512, i=0)[:25]).encode())
    assert drop_torn_point(path) == "a cut-off line"
    assert path.read_bytes() == (header + a).encode()
    b = "".join(row.format(op="add", size=512, i=i) for i in range(2))
    path.write_bytes((header + a + b + "2,h,d,ad").encode())  # too short to tell: 512 goes
    assert drop_torn_point(path) == "add 512" and path.read_bytes() == (header + a).encode()
    cut = row.format(op="add", size=512, i=2)[:40]  # past the size: the same point, which goes
    path.write_bytes((header + a + b + cut).encode())
    assert drop_torn_point(path) == "add 512" and path.read_bytes() == (header + a).encode()
    assert drop_torn_point(path) is None  # a whole file is left as it is
    path.write_bytes(b"schema,device")  # stopped inside the header
    assert drop_torn_point(path) == "a cut-off line" and path.read_bytes() == b""


def test_resume_names_the_line_of_a_bad_row_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_path = write_spec(tmp_path)
    sweep = _interrupted(spec_from_dict(TINY, "tiny"), "results", 3)
    n = len(sweep.csv_path.read_text().splitlines())
    with open(sweep.csv_path, "a") as fh:
        fh.write("garbage,,,\r\n")
    result = CliRunner().invoke(main, ["init", "--spec", str(spec_path), "--resume"])
    assert result.exit_code == 2, result.output
    assert f"line {n + 1}:" in result.output and "Traceback" not in result.output
    assert "Start a new sweep without --resume" in result.output


def _frozen_clock(monkeypatch):
    """Every sweep starts in the same second."""
    import datetime as dt

    from softcuda.sweep import storage

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 1, 1, tzinfo=tz)

    monkeypatch.setattr(storage._dt, "datetime", Frozen)


def test_two_sweeps_started_in_the_same_second_write_two_files(tmp_path, monkeypatch):
    _frozen_clock(monkeypatch)
    spec = spec_from_dict(TINY, "tiny")
    first, second = Sweep(spec, "tiny.yaml", tmp_path), Sweep(spec, "tiny.yaml", tmp_path)
    assert first.csv_path == second.csv_path  # picked before either made its file
    first.run()
    second.run()  # its picked name was taken in the meantime: it takes the next one
    assert second.csv_path.name == "sweep-tiny-20260101T000000Z-2.csv"
    assert second.meta_path != first.meta_path
    for sweep in (first, second):
        assert len(pd.read_csv(sweep.csv_path)) == len(sweep.rows)
    third = Sweep(spec, "tiny.yaml", tmp_path)
    assert third.csv_path.name.endswith("-3.csv")
    first.csv_path.unlink()  # a name whose metadata is left is taken too
    assert Sweep(spec, "tiny.yaml", tmp_path).csv_path.name.endswith("-3.csv")


def test_resume_takes_the_newest_of_sweeps_started_in_the_same_second(tmp_path, monkeypatch):
    """By name, "...Z-2.meta.json" sorts before "...Z.meta.json" and "-10" before "-2"."""
    _frozen_clock(monkeypatch)
    spec = spec_from_dict(TINY, "tiny")
    started = [_interrupted(spec, tmp_path, 2).csv_path for _ in range(11)]
    assert started[-1].name.endswith("-11.csv")
    assert Sweep(spec, "tiny.yaml", tmp_path, resume=True).csv_path == started[-1]


def test_a_damaged_gzip_csv_is_one_sentence(tmp_path):
    import gzip

    from softcuda.timings.load import load_csvs

    data = bytearray(
        gzip.compress(("\n".join(",".join(schema.COLUMNS) for _ in range(99))).encode())
    )
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(SoftcudaError, match=r"bad\.csv\.gz: cannot be read \(its compressed data"):
        load_csvs(path)


def test_a_point_is_written_in_one_write(tmp_path, monkeypatch):
    """So that a kill leaves a cut-off line (which a resume sees), not a point cut between lines."""
    import os

    from softcuda.sweep.storage import RowWriter

    writer = RowWriter(tmp_path / "x.csv", exclusive=True)
    calls = []
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: calls.append(len(data)) or real(fd, data))
    row = (2, "h" * 64, "d", "add", 256, "256", "float32", "b", "pinned", "h2d", 0, 1e-6, 0, 0)
    writer.write([row] * 500)  # about 60 KB
    writer.close()
    assert len(calls) == 1 and calls[0] > 50_000
    with pytest.raises(FileExistsError):
        RowWriter(tmp_path / "x.csv", exclusive=True)


def test_resume_leaves_a_file_of_another_version_as_it_is(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    sweep.folder.mkdir(parents=True)
    old = ",".join(c for c in schema.COLUMNS if c != "attempt") + "\n2,h,d,add,25"  # cut off
    sweep.csv_path.write_text(old)
    sweep.write_meta(False)
    with pytest.raises(SoftcudaError, match="another version of softcuda"):
        Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert sweep.csv_path.read_text() == old


def test_log_progress_writes_a_line_per_period_at_the_pace_since_the_last(monkeypatch, capsys):
    from softcuda_cli import init as init_cli

    now = [100.0]
    monkeypatch.setattr(init_cli.time, "monotonic", lambda: now[0])
    bar = init_cli.LogProgress(100)
    bar.update(40, "resumed points pass at once")  # t = 0: a line, no pace yet
    for t, pos in ((5.0, 41), (15.0, 50), (20.0, 51)):
        now[0] = 100.0 + t
        bar.update(pos - bar.pos, f"p{pos}")
    now[0] = 130.0
    bar.update(100 - bar.pos, "done")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "measuring: 40 of 100 points, 0 s in, about ? left: resumed points pass at once",
        # 10 points in 15 s since the last line: 1.5 s each for the 50 left
        "measuring: 50 of 100 points, 15 s in, about 1 min 15 s left: p50",
        "measuring: 100 of 100 points, 30 s in, about 0 s left: done",
    ]


def test_init_logs_progress_lines_where_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    from softcuda_cli import init as init_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(init_cli.LogProgress, "PERIOD_S", 0.0)  # a line for every point
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("measuring: ")]
    assert len(lines) > 5 and " points, " in lines[1] and " left: " in lines[1]
    assert lines[-1].endswith("left: done") and "add 256 on cpu_fallback" in lines[0]


def test_init_says_where_a_boundary_is_not_bracketed_within_ten_percent(
    tmp_path, monkeypatch, modelled_timings
):
    from softcuda.sweep import runner

    monkeypatch.chdir(tmp_path)
    modelled_timings({"cpu_fallback": lambda n: 1e-9 * n**3, "cpu_blas": lambda n: 2e-4})
    ops = {"matmul": {"sizes": {"start": 8, "stop": 256, "per_octave": 1}}}
    spec = str(write_spec(tmp_path, ops=ops))
    monkeypatch.setattr(runner, "REFINE_ROUNDS", 0)  # no refinement: 32 and 64 bracket it
    result = CliRunner().invoke(main, ["init", "--spec", spec])
    assert result.exit_code == 0, result.output
    assert "note: a boundary of matmul is not bracketed within 10%" in result.output
    monkeypatch.setattr(runner, "REFINE_ROUNDS", 3)
    result = CliRunner().invoke(main, ["init", "--spec", spec])
    assert result.exit_code == 0 and "not bracketed" not in result.output


def test_init_warns_when_other_work_loads_the_host(tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 1.0, 0.5))
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "load average       3.5 (1 min)" in result.output
    assert "warning: the load average is 3.5: other work is running" in result.output
    (meta,) = Path("results").glob("*/sweep-tiny-*.meta.json")
    assert json.loads(meta.read_text())["load_average_at_start"] == 3.5
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 1.0, 0.5))
    quiet = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert quiet.exit_code == 0 and "warning: the load average" not in quiet.output


@pytest.fixture
def finished_sweep(tmp_path):
    """A finished tiny sweep's CSV (its metadata beside it), measured on the clock."""
    sweep = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", tmp_path / "results")
    sweep.run()
    return sweep.csv_path


def one_error_line(result) -> str:
    """The one sentence an input error prints: exit 2, stderr only, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


def _no_type(meta, rows):
    del meta["machine"]["type"]
    return rows


def _backends_5(meta, rows):
    meta["backends"] = 5
    return rows


def _machine_3(meta, rows):
    meta["machine"] = 3
    return rows


def _backends_nested(meta, rows):
    meta["backends"] = [[1]]
    return rows


def _settle_s_too_large(meta, rows):
    meta["spec"]["settle_s"] = 10**400
    return rows


def _model_two_lines(meta, rows):
    meta["machine"]["cpu_model"] = "AMD\nEPYC"
    return rows


def _hash_two_lines(meta, rows):
    meta["device_hash"] = "ab\ncd"
    return rows


def _hash_string_two_lines(meta, rows):
    meta["hash_string"] += "\n[ops]"
    return rows


def _unknown_op(meta, rows):
    return rows.assign(op=rows["op"].where(rows["op"] != "add", "frobnicate"))


def _unknown_backends(meta, rows):
    return rows.assign(backend=rows["backend"].where(rows["backend"] == "machine", "cpu_magic"))


def _probes_only(meta, rows):
    return rows[rows["backend"] == "machine"]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_no_type, "meta.json: machine.type is missing"),
        (_backends_5, "meta.json: backends is 5, not a list of backend ids"),
        (_machine_3, "meta.json: machine is 3, not an object"),
        (_backends_nested, "meta.json: backends is [[1]], not a list of backend ids"),
        (_model_two_lines, "meta.json: machine.cpu_model is 'AMD\\nEPYC', not one line of "),
        (_hash_two_lines, "meta.json: device_hash is 'ab\\ncd', not one line of printable text"),
        (_hash_string_two_lines, "meta.json: hash_string is 'cpu_model="),
        (_unknown_op, ".csv: holds timings of op(s) frobnicate, which this softcuda does not know"),
        (_settle_s_too_large, "meta.json: spec: settle_s: must be a number of at most 1.8e308"),
        (_unknown_backends, "backend(s) cpu_magic, which this softcuda does not know"),
        (_probes_only, "no timings of any op"),
    ],
)
def test_decide_again_refuses_what_it_cannot_decide_from(
    finished_sweep, tmp_path, monkeypatch, damage, words
):
    """Metadata that does not describe a machine, and a CSV whose timings are all of unknown
    backends or that holds only probe rows: one sentence, exit 2, no profile.  A profile of
    DEFAULT.soft's rules alone would pass for a measurement, so none is written."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    rows = pd.read_csv(finished_sweep, dtype={"shape": str})
    rows = damage(meta, rows)
    meta_path.write_text(json.dumps(meta))
    rows.to_csv(finished_sweep, index=False)
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert words in one_error_line(result)
    assert not Path("C.soft").exists()


def test_decide_again_refuses_an_unfinished_sweep_and_one_that_a_sweep_holds(
    finished_sweep, tmp_path, monkeypatch
):
    """--from decided from a CSV that a running --resume appended to, and from an interrupted
    sweep, without a word: a profile of part of a sweep is not what its spec measures."""
    from softcuda.sweep import folders

    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    with folders.hold(finished_sweep.parent / folders.LOCK_NAME, "that folder"):
        result = CliRunner().invoke(
            main, ["init", "--from", str(finished_sweep), "--out", "C.soft"]
        )
        expected = f"{finished_sweep.parent} is in use by another softcuda init (process "
        assert expected in one_error_line(result)
    for complete in (False, None):
        meta_path.write_text(json.dumps({**meta, "complete": complete}))
        result = CliRunner().invoke(
            main, ["init", "--from", str(finished_sweep), "--out", "C.soft"]
        )
        line = one_error_line(result)
        assert f"{meta_path}: the sweep is not complete" in line
        assert f"softcuda init --resume --spec tiny.yaml --results {tmp_path / 'results'}" in line
    meta_path.write_text(json.dumps({**meta, "complete": False, "spec_path": "a.yaml\nb"}))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert "softcuda init --resume --spec SPEC --results" in one_error_line(result)
    assert not Path("C.soft").exists()


@pytest.mark.parametrize("spec_path", [None, 3, "", "sweeps/x.yaml\n[ops]"])
def test_decide_again_records_the_csv_where_the_metadata_has_no_spec_path(
    finished_sweep, tmp_path, monkeypatch, spec_path
):
    """spec_path is provenance only: without a usable one the profile was refused as
    "C.soft:65: [sweep] spec: must not be empty", a profile --from never wrote."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    if spec_path is None:
        del meta["spec_path"]
    else:
        meta["spec_path"] = spec_path
    meta_path.write_text(json.dumps(meta))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    assert result.exit_code == 0, result.output
    assert load_config("C.soft").sweep["spec"] == str(finished_sweep)


def test_an_op_no_backend_of_the_spec_times_is_refused_before_measuring(tmp_path, monkeypatch):
    """cpu_blas times only matmul (its sum is cpu_fallback's code, timed as cpu_fallback): a
    sweep of sum on cpu_blas alone had nothing to compare, and refinement failed on it."""
    monkeypatch.chdir(tmp_path)
    ops = {"sum": {"sizes": {"start": 256, "stop": 4096, "per_octave": 1}}}
    spec = write_spec(tmp_path, backends=["cpu_blas"], ops=ops)
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", str(spec)]))
    assert "tiny.yaml: ops.sum:" in line and "(cpu_blas)" in line
    assert "add cpu_fallback or cpu_threads to backends" in line
    assert not Path("results").exists() and not Path("CONFIG.soft").exists()


def test_a_bad_spec_stored_in_the_metadata_is_named_as_that(finished_sweep, tmp_path, monkeypatch):
    """init --from and --resume read the spec the metadata stores: an error in it names the
    .meta.json, not the YAML file it was once read from."""
    monkeypatch.chdir(tmp_path)
    meta_path = finished_sweep.with_name(finished_sweep.name.replace(".csv", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "spec": {**meta["spec"], "dtype": "float16"}}))
    result = CliRunner().invoke(main, ["init", "--from", str(finished_sweep), "--out", "C.soft"])
    line = one_error_line(result)
    assert f"{meta_path}: spec: dtype: must be one of float32, float64" in line
    assert "tiny.yaml" not in line
    spec = write_spec(tmp_path)
    meta_path.write_text(
        json.dumps({**meta, "complete": False, "spec": {**meta["spec"], "scan": -1}})
    )
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--resume"])
    found = meta_path.relative_to(tmp_path)  # as --resume finds it, under ./results
    assert f"{found}: spec: scan: must be an integer >= 0" in one_error_line(result)
    meta_path.write_text(json.dumps([meta]))  # not an object at all
    result = CliRunner().invoke(main, ["init", "--spec", str(spec), "--resume"])
    assert f"{found}: holds [" in one_error_line(result)


def no_settling(monkeypatch):
    """What must be refused before the sweep settles: settling fails the test."""
    from softcuda.sweep import runner

    def settle(cuda, max_s):
        raise AssertionError("the sweep settled before refusing")

    monkeypatch.setattr(runner, "settle", settle)


def test_a_results_folder_that_cannot_take_the_rows_is_refused_before_settling(
    tmp_path, monkeypatch
):
    from softcuda.device import slug

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    spec = str(write_spec(tmp_path, settle_s=5))
    folder = Path("results") / slug(detect().label)
    folder.parent.mkdir()
    folder.write_text("a file where the device's folder goes\n")
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", spec]))
    assert f"{folder} is a file, not a folder" in line
    folder.unlink()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: real(p, mode) and Path(p) != folder)
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", spec]))
    assert f"{folder} is not a folder this user can write to" in line
    assert not list(Path("results").rglob("*.csv")) and not Path("CONFIG.soft").exists()


def test_a_spec_this_machine_cannot_hold_is_refused_before_settling(tmp_path, monkeypatch):
    """add at the documented maximum, 2^34 elements: 64 GiB a tensor.  The sweep settled,
    then died of a MemoryError drawing its inputs."""
    from softcuda import device

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    monkeypatch.setattr(device, "host_memory_bytes", lambda: (32 << 30, 16 << 30))
    ops = {"add": {"sizes": {"start": 1 << 34, "stop": 1 << 34, "per_octave": 1}}}
    spec = write_spec(tmp_path, settle_s=5, ops=ops, backends=["cpu_fallback"])
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", str(spec)]))
    # its inputs drawn once (2 x 64 GiB) and the one plan's inputs and output (192 GiB)
    assert "tiny.yaml: ops.add.sizes.stop: add at 17179869184 needs about 320.0 GiB" in line
    assert "this machine has 16.0 GiB available; lower stop" in line
    assert not Path("results").exists()


def test_the_memory_check_counts_the_copies_below_the_rotation_limit(tmp_path, monkeypatch):
    """add to 2^23 elements (96 MiB a point) is built once at its stop, but refinement can
    land just under 64 MiB, which is built buffers times: 8 copies need 0.5 GiB, not 96 MiB."""
    from softcuda import device

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    monkeypatch.setattr(device, "host_memory_bytes", lambda: (1 << 30, 300 << 20))
    ops = {"add": {"sizes": {"start": 1 << 23, "stop": 1 << 23, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "buffers": 8}
    spec = write_spec(tmp_path, ops=ops, backends=["cpu_fallback"], repetitions=reps)
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", str(spec)]))
    # 5,592,405 elements: 12 bytes each is just under 64 MiB
    assert "ops.add.sizes.stop: add at 5592405 needs about 0.6 GiB of host memory" in line
    assert "8 copies of each (repetitions.buffers)" in line
    assert "lower stop or repetitions.buffers" in line and not Path("results").exists()


def test_the_memory_check_counts_the_bus(tmp_path, monkeypatch):
    """The bus holds a device buffer and a pinned and a pageable one of its largest size at
    once (2^36 B at most), and CuPy's pools keep them for the points measured after it."""
    from softcuda import device
    from softcuda.sweep.machine import Machine

    fields = {"type": "cuda", "name": "Fake GPU", "vram_mb": "8192"}
    gpu = Machine("cuda", 0, fields, "f" * 64, "gpu_name=Fake GPU", ("cpu_fallback", "cpu_blas"))

    def refused(bus_stop: int, op_stop: int, host_gib: float) -> str:
        monkeypatch.setattr(device, "host_memory_bytes", lambda: (1 << 40, int(host_gib * 2**30)))
        ops = {"add": {"sizes": {"start": 256, "stop": op_stop, "per_octave": 1}}}
        bus = {"start_bytes": 4, "stop_bytes": bus_stop, "per_octave": 1}
        spec = {**TINY, "backends": ["cpu_fallback"], "ops": ops, "bus": bus}
        with pytest.raises(SoftcudaError) as caught:
            Sweep(spec_from_dict(spec, "bus.yaml"), "bus.yaml", tmp_path, machine=gpu)
        return str(caught.value)

    # 16 GiB on a GPU of 8
    message = refused(1 << 34, 4096, 64)
    assert "bus.stop_bytes: the bus at 17179869184 B needs about 16.0 GiB of device" in message
    assert message.startswith("bus.yaml: ") and message.endswith("lower stop_bytes")
    # 4 GiB pinned and 4 pageable, kept while add at 2^26 (768 MiB) is measured after
    message = refused(1 << 32, 1 << 26, 8.6)
    assert "ops.add.sizes.stop: add at 67108864 needs about 9.2 GiB of host memory" in message
    assert "the bus's buffers of 4294967296 B" in message and "or bus.stop_bytes" in message


def _fail_on_third(monkeypatch, error: BaseException) -> None:
    from softcuda.sweep import runner

    real, calls = runner.Sweep.measure, []

    def measure(self, point):
        calls.append(point)
        if len(calls) == 3:
            raise error
        return real(self, point)

    monkeypatch.setattr(runner.Sweep, "measure", measure)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "x.csv"), "x.csv: No space left"),
        (MemoryError(), "this machine ran out of memory"),
    ],
    ids=["disk_full", "out_of_memory"],
)
def test_a_sweep_stopped_by_the_machine_keeps_its_rows_in_one_sentence(
    tmp_path, monkeypatch, error, words
):
    monkeypatch.chdir(tmp_path)
    _fail_on_third(monkeypatch, error)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    *before, line = result.stderr.strip().splitlines()  # progress lines, a load warning
    assert not any(b.startswith("error") for b in before)
    (csv,) = Path("results").rglob("sweep-tiny-*.csv")
    kept = pd.read_csv(csv)
    assert line.startswith("error: the sweep stopped") and words in line
    assert f"the {len(kept)} rows measured before are kept in {csv}" in line
    assert "softcuda init --resume" in line and not Path("CONFIG.soft").exists()
    assert len(kept.drop_duplicates(["op", "size"])) == 2
    assert not list(Path("results").rglob("*.tmp"))


def test_metadata_that_cannot_be_written_leaves_the_previous_and_no_temporary(
    tmp_path, monkeypatch
):
    from softcuda.sweep import storage

    path = tmp_path / "sweep.meta.json"
    storage.write_meta(path, {"complete": False})

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(storage.os, "replace", full)
    with pytest.raises(OSError):
        storage.write_meta(path, {"complete": True})
    assert json.loads(path.read_text()) == {"complete": False}
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.meta.json"]


@pytest.mark.parametrize("where", ["deciding", "returning", "writing"])
def test_interrupted_once_the_sweep_is_complete_gives_advice_that_works(
    tmp_path, monkeypatch, where
):
    """Ctrl-C after "measuring ... done" said to continue with --resume, which then found no
    unfinished sweep (the metadata already said complete) and never wrote the profile."""
    from softcuda.sweep import profile, runner

    monkeypatch.chdir(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    def disk_full(config, target):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    if where == "deciding":  # while the profile is decided from the finished sweep
        monkeypatch.setattr(profile, "build_profile", interrupted)
    elif where == "returning":  # between the metadata saying complete and run() returning
        monkeypatch.setattr(runner.Sweep, "frame", interrupted)
    else:  # the profile cannot be written: an input error, with the same advice
        monkeypatch.setattr(profile, "write_profile", disk_full)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == (2 if where == "writing" else 130), result.output
    assert "--resume" not in result.stderr and not Path("CONFIG.soft").exists()
    assert "the sweep is complete in" in result.stderr
    advice = result.stderr.split("`")[1]
    assert advice.startswith("softcuda init --from ") and "--out CONFIG.soft" in advice
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    again = CliRunner().invoke(main, advice.split()[1:])
    assert again.exit_code == 0, again.output
    assert load_config("CONFIG.soft").device_type == "cpu"


def test_interrupted_once_the_profile_is_written_does_not_say_it_was_not(tmp_path, monkeypatch):
    """Ctrl-C while the decisions were printed said the profile "was not written" and advised
    --from, though it had been written."""
    from softcuda_cli import init

    monkeypatch.chdir(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(init, "_print_decisions", interrupted)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 130, result.output
    assert "was not written" not in result.stderr and "--from" not in result.stderr
    assert load_config("CONFIG.soft").device_type == "cpu"


def test_a_lock_is_held_once_and_names_its_holder(tmp_path):
    from softcuda.sweep import folders

    lock = tmp_path / folders.LOCK_NAME
    with folders.hold(lock, "the folder"):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(SoftcudaError) as info, folders.hold(lock, "the folder"):
            pass
        assert str(info.value).startswith(
            f"the folder is in use by another softcuda init (process {os.getpid()}); "
        )
    assert not lock.exists()  # released: no file is left in the folder
    with folders.hold(lock, "the folder"):  # and it can be held again
        pass


def test_an_init_refused_by_the_profile_lock_leaves_no_folder_behind(tmp_path, monkeypatch):
    from softcuda.sweep import folders

    monkeypatch.chdir(tmp_path)
    with folders.hold(Path(".CONFIG.soft.lock"), "CONFIG.soft"):
        result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
        assert "CONFIG.soft is in use by another softcuda init" in one_error_line(result)
    assert not Path("results").exists()


SLOW = {**TINY, "name": "slow", "repetitions": {**TINY["repetitions"], "min_time_s": 60.0}}
"""A sweep whose first point lasts a minute."""


@contextlib.contextmanager
def another_init(*args: str):
    """A second `softcuda init` of SLOW; yields its process id once it measures, and kills it
    (as a crash would end it) after."""
    Path("slow.yaml").write_text(yaml.safe_dump(SLOW))
    command = [sys.executable, "-m", "softcuda_cli", "init", "--spec", "slow.yaml", *args]
    other = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        for line in other.stderr:  # its progress lines: once one comes, it is measuring
            if line.startswith(b"measuring: "):
                break
        yield other.pid
    finally:
        other.kill()  # its locks go with it: the OS releases them
        other.wait()


def test_a_second_sweep_in_one_folder_or_on_one_profile_is_refused(tmp_path, monkeypatch):
    """Two `init --resume` of one unfinished sweep appended to one CSV (many duplicate
    (point, repetition) keys); two plain inits in one folder raced for CONFIG.soft."""
    monkeypatch.chdir(tmp_path)
    # SLOW as far as --resume can tell (the time budget may change), and quick to give up
    spec = tmp_path / "budget.yaml"
    spec.write_text(yaml.safe_dump({**SLOW, "time_budget_s": 1e-9}))
    with another_init() as pid:
        for args in ([], ["--resume"]):
            result = CliRunner().invoke(main, ["init", "--spec", str(spec), *args])
            line = one_error_line(result)
            assert "is in use by another softcuda init (process " + str(pid) in line
        (csv,) = Path("results").rglob("sweep-slow-*.csv")
        assert len(list(csv.parent.glob("*.csv"))) == 1  # nothing started beside it
    with another_init("--results", "elsewhere") as pid:  # another folder, the same profile
        result = CliRunner().invoke(main, ["init", "--spec", str(spec)])
        expected = f"CONFIG.soft is in use by another softcuda init (process {pid})"
        assert expected in one_error_line(result)
        result = CliRunner().invoke(main, ["init", "--from", str(csv)])
        assert expected in one_error_line(result)
    # the processes that held them were killed: the locks went with them (their files stay,
    # held by no one), and a sweep runs, and removes the files it held when it ends
    assert Path(".CONFIG.soft.lock").exists()
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    assert not list(Path("results").rglob("*.lock")) and not Path(".CONFIG.soft.lock").exists()


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
    from softcuda.config import load_config
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
    from softcuda.config import load_config
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


def test_the_time_budget_is_the_whole_sweep_s_over_its_processes(tmp_path):
    """A resumed sweep counts its earlier processes' time: each process of the H200 reference
    started its own 900 s, and the three ran 1,310 s."""
    spec = spec_from_dict({**TINY, "time_budget_s": 600}, "tiny")
    first = Sweep(spec, "tiny.yaml", tmp_path)
    with pytest.raises(KeyboardInterrupt):
        first.run(lambda p, i, t: (_ for _ in ()).throw(KeyboardInterrupt) if i == 2 else None)
    meta = json.loads(first.meta_path.read_text())
    spans = [{"started_at": meta["started_at"], "elapsed_s": 610.0}]
    first.meta_path.write_text(json.dumps({**meta, "processes": spans}))
    again = Sweep(spec, "tiny.yaml", tmp_path, resume=True)
    assert again.elapsed() >= 610
    with pytest.raises(BudgetSpent, match="raise time_budget_s"):
        again.run()
    longer = spec_from_dict({**TINY, "time_budget_s": 6000}, "tiny")  # may change on resume
    Sweep(longer, "tiny.yaml", tmp_path, resume=True).run()
    assert json.loads(first.meta_path.read_text())["complete"]


def test_past_the_budget_a_sweep_measures_nothing_again_and_scans_nothing_but_finishes(
    tmp_path, monkeypatch
):
    """Points measured again and the scan improve a profile that the grid and its refinement
    already make: once the budget is spent they are left out (and counted), not a failure, and
    a boundary the refinement still asks about is measured."""
    from softcuda.sweep import measure
    from softcuda.timings import select

    seen: list[int] = []
    monkeypatch.setattr(measure, "interleaved", _fake_rounds([5e-6, 9e-6, 5e-6, 5e-6], seen))
    spent = []
    monkeypatch.setattr(Sweep, "elapsed", lambda self: 1e4 if spent else 0.0)

    def refinement(self, op):  # the budget is spent after the grid's refinement
        spent.append(op)
        return [Point(op, 384, "*")] if len(spent) == 2 else []

    monkeypatch.setattr(Sweep, "_refinement", refinement)
    monkeypatch.setattr(select, "scan_sizes", lambda frame, op, metric, steps: [300, 700])
    add = {"add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict(
        {**TINY, "ops": add, "repetitions": reps, "scan": 2, "time_budget_s": 900}, "tiny"
    )
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    frame = sweep.run()
    assert len(seen) == 4 and (frame["attempt"] == 0).all()  # the grid and the refinement
    assert sorted(frame["size"].unique()) == [256, 384, 512, 1024]
    assert sweep.cut == 4  # 512 again, twice (before and after the scan), and two scan sizes
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["complete"] and meta["cut_by_budget"] == 4


def test_a_point_whose_timings_spread_at_the_host_s_best_speed_is_not_measured_again(
    tmp_path, monkeypatch
):
    """Retries are for a host that ran slow, read by the probe; a spread series is mostly the
    backend's own (cpu_threads' workers), and re-measuring it bought the spread again."""
    from softcuda.sweep import measure

    seen: list[int] = []

    def spread(groups, policy, hot=False, riders=0):
        seen.append(riders)
        wide = len(seen) == 2  # 512: IQR/median 0.5, host at its best
        series = [1e-5, 2e-5, 3e-5] if wide else [1e-5] * 3
        timed = [[list(series) for _ in group] for group in groups[: len(groups) - riders]]
        return timed + [[[5e-6] * 3]] * riders

    monkeypatch.setattr(measure, "interleaved", spread)
    add = {"add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "retries": 2}
    spec = spec_from_dict({**TINY, "ops": add, "repetitions": reps}, "tiny")
    frame = Sweep(spec, "tiny.yaml", tmp_path).run()
    assert len(seen) == 3 and (frame["attempt"] == 0).all()


def test_the_collector_is_frozen_while_a_sweep_times_and_thawed_after(tmp_path, monkeypatch):
    """What lives when measuring starts lives to the end: frozen, the full collection before
    each point's timing (timers.interleaved) does not walk it; a sweep leaves the collector as
    it found it, stopped or not."""
    import gc

    from softcuda.sweep import measure

    frozen: list[int] = []
    real = measure.interleaved

    def spy(*args, **kwargs):
        frozen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "interleaved", spy)
    spec = spec_from_dict(TINY, "tiny")
    Sweep(spec, "tiny.yaml", tmp_path).run()
    assert frozen and all(frozen) and gc.get_freeze_count() == 0
    with pytest.raises(KeyboardInterrupt):
        Sweep(spec, "tiny.yaml", tmp_path / "b").run(
            lambda p, i, t: (_ for _ in ()).throw(KeyboardInterrupt)
        )
    assert gc.get_freeze_count() == 0
