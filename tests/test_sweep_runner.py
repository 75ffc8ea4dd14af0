"""The sweep runner (softcuda.sweep.runner.Sweep): rows, interrupt and resume, the time budget,
retries and the wait for the host, refinement and the scan, compiling kernels first."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.errors import SoftcudaError
from softcuda.sweep.machine import detect
from softcuda.sweep.measure import Point
from softcuda.sweep.runner import BudgetSpent, Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from tests.sweep_helpers import TINY, interrupted_sweep, write_spec


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


def test_time_budget_stops_with_rows_kept(tmp_path):
    spec = spec_from_dict({**TINY, "time_budget_s": 1e-9}, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    with pytest.raises(BudgetSpent, match="time budget"):
        sweep.run()


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

    def fake(groups, policy, hot=False, riders=0, settle=None, block_s=0.0):
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
    # the median as the rows keep it (schema.kept: four significant digits)
    assert sweep.skipped == {("matmul", "cpu_fallback"): schema.kept(model["cpu_fallback"](256))}
    first, second = select.buckets(frame, "matmul", n_boot=50)
    assert (first.backend, second.backend) == ("cpu_fallback", "cpu_blas")
    assert abs(first.hi / crossing - 1) < 0.10


def test_resume_refuses_a_spec_that_measures_otherwise_naming_the_key(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = interrupted_sweep(spec, tmp_path, 3)
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

    def spread(groups, policy, hot=False, riders=0, settle=None, block_s=0.0):
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


def test_an_older_sweep_that_timed_every_call_alone_resumes_only_with_block_s_0():
    """Metadata from before ``repetitions.block_s`` holds no such key: those sweeps timed every
    call alone, so a spec with the default blocks measures otherwise, and one with 0 does not."""
    from softcuda.sweep.storage import spec_changes

    spec = spec_from_dict(TINY, "tiny")
    older = spec.to_dict()
    del older["repetitions"]["block_s"]
    assert spec_changes(older, spec) == ["repetitions.block_s: 0.0 there, 5e-05 here"]
    alone = {**TINY, "repetitions": {**TINY["repetitions"], "block_s": 0}}
    assert spec_changes(older, spec_from_dict(alone, "tiny")) == []
