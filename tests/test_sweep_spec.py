"""The sweep spec as `softcuda init` reads it (softcuda.sweep.spec): bounds, bad keys, ops no
backend of the spec times."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from softcuda_cli import main

from tests.sweep_helpers import TINY, one_error_line, write_spec


def test_bad_spec_is_exit_2_naming_file_and_key(tmp_path):
    path = write_spec(tmp_path, repetitions={"warmup": -1})
    result = CliRunner().invoke(main, ["init", "--spec", str(path)])
    assert result.exit_code == 2
    assert "tiny.yaml" in result.output and "repetitions.warmup" in result.output


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
