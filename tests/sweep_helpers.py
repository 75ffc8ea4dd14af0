"""Shared by the sweep tests: the tiny spec, its YAML file, a sweep stopped part-way, and the one
error line an input error prints."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from softcuda.sweep.measure import Point
from softcuda.sweep.runner import Sweep

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


def interrupted_sweep(spec, folder, after: int):
    """A sweep of ``spec`` stopped (KeyboardInterrupt) as it reached point ``after``."""

    def stop(point: Point, index: int, total: int) -> None:
        if index == after:
            raise KeyboardInterrupt

    sweep = Sweep(spec, "tiny.yaml", folder)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(stop)
    return sweep


def one_error_line(result) -> str:
    """The one sentence an input error prints: exit 2, stderr only, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


def no_settling(monkeypatch):
    """What must be refused before the sweep settles: settling fails the test."""
    from softcuda.sweep import runner

    def settle(cuda, max_s):
        raise AssertionError("the sweep settled before refusing")

    monkeypatch.setattr(runner, "settle", settle)
