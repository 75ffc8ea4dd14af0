"""`softcuda init` around the sweep: usage errors, progress lines, interrupts and what it
advises, a sweep stopped by the machine."""

from __future__ import annotations

import errno
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.config import load_config
from softcuda.sweep.machine import detect
from tests.sweep_helpers import one_error_line, write_spec


def test_resume_with_nothing_to_resume_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path)), "--resume"])
    assert result.exit_code == 2 and "no unfinished 'tiny' sweep" in result.output
    assert not Path("results").exists()  # a failed start leaves nothing behind


def test_init_options_that_cannot_hold_here_are_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = str(write_spec(tmp_path))
    both = CliRunner().invoke(main, ["init", "--spec", spec, "--resume", "--from", "x.csv"])
    assert both.exit_code == 2 and "--resume and --from exclude each other" in both.output
    if detect().device_type == "cpu":  # no CUDA here: a second GPU cannot be profiled
        gpu = CliRunner().invoke(main, ["init", "--spec", spec, "--device", "1"])
        assert gpu.exit_code == 2 and "--device 1: no CUDA device is usable here" in gpu.output
        assert not Path("results").exists()


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
