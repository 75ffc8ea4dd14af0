"""`softcuda init --from CSV` refuses a CSV that is not one sweep of one machine in one dtype:
one sentence naming the file, exit 2, no profile written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from tests.sweep_helpers import TINY as SWEEP_TINY

# the sweep tests' tiny spec, at fewer sizes: this file needs only a finished sweep
TINY = {
    **SWEEP_TINY,
    "ops": {
        "matmul": {"sizes": {"start": 8, "stop": 32, "per_octave": 1}},
        "add": {"sizes": {"start": 256, "stop": 1024, "per_octave": 1}},
    },
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, bytes]:
    """A finished tiny sweep's CSV (its metadata beside it) and the CSV's bytes, to restore."""
    root = tmp_path_factory.mktemp("sweep")
    sweep = Sweep(spec_from_dict(TINY, "tiny"), "tiny.yaml", root / "results")
    sweep.run()
    return sweep.csv_path, sweep.csv_path.read_bytes()


@pytest.fixture
def sweep_csv(finished, tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path, data = finished
    path.write_bytes(data)
    return path


def _refusal(csv: Path) -> str:
    """The one sentence `init --from` prints: exit 2, stderr only, no traceback, no profile."""
    result = CliRunner().invoke(main, ["init", "--from", str(csv), "--out", "C.soft"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert not Path("C.soft").exists()
    return line


def test_the_csv_itself_decides(sweep_csv):
    result = CliRunner().invoke(main, ["init", "--from", str(sweep_csv), "--out", "C.soft"])
    assert result.exit_code == 0, result.output


def test_a_csv_of_two_device_hashes_is_refused_naming_it_and_them(sweep_csv):
    """The rows of two machines (or one before and after a driver update) in one CSV: refused
    as "the timings of device '...' carry 2 device hashes (...); split the frame by
    device_hash first", naming no file, and a frame the user never made."""
    rows = pd.read_csv(sweep_csv, dtype={"shape": str})
    first = rows["device_hash"].iloc[0]
    rows.loc[rows["op"] == "add", "device_hash"] = "f" * 64
    rows.to_csv(sweep_csv, index=False)
    line = _refusal(sweep_csv)
    shown = ", ".join(sorted([first[:12], "f" * 12]))
    assert line.startswith(f"error: {sweep_csv}: holds the rows of 2 device hashes under device ")
    assert f"({shown})" in line
    assert line.endswith("split the CSV by device_hash, or pass one device's rows")


def test_a_csv_of_two_dtypes_is_refused_with_the_rows_of_each(sweep_csv):
    """A float32 sweep with float64 rows added: the profile was decided from both and written
    as float32's."""
    rows = pd.read_csv(sweep_csv, dtype={"shape": str})
    timings = rows[rows["backend"] != schema.PROBE_BACKEND]
    wide = timings[timings["op"] == "matmul"].assign(dtype="float64")
    pd.concat([rows, wide]).to_csv(sweep_csv, index=False)
    line = _refusal(sweep_csv)
    assert line == (
        f"error: {sweep_csv}: holds timings in 2 dtypes (float32: {len(timings):,} rows, "
        f"float64: {len(wide):,} rows), and a profile is decided from one; split the CSV by "
        "dtype and decide from one dtype's rows"
    )
