"""Every script in benchmarks/ and extra/ still imports against the package (a renamed or moved
name breaks a script nobody runs for weeks); .ci/run runs the CPU benchmarks themselves."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from softcuda.device import slug
from softcuda.sweep import folders
from softcuda.sweep.machine import detect

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "extra").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_imports_and_has_a_main(path, monkeypatch):
    monkeypatch.delenv("CUPY_TF32", raising=False)  # some set it at import; restored after
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the module's top level only: main() is not run
    assert callable(module.main)
    assert module.__doc__ and "python " in module.__doc__  # says how it is run


def stability(*args: str) -> subprocess.CompletedProcess:
    script = ROOT / "benchmarks" / "stability.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


def test_stability_says_in_one_line_that_a_spec_cannot_be_used_here(tmp_path):
    """A spec refused by the sweep (cpu_blas alone times no sum) was a traceback, exit 1: the
    code of "not stable", which CI accepted."""
    spec = tmp_path / "sum.yaml"
    ops = {"sum": {"sizes": {"start": 256, "stop": 4096, "per_octave": 1}}}
    spec.write_text(yaml.safe_dump({"name": "sum", "backends": ["cpu_blas"], "ops": ops}))
    done = stability(str(spec), "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {spec}: ops.sum: none of the backends")


def test_stability_holds_the_results_folder_as_init_does(tmp_path):
    folder = tmp_path / "results" / slug(detect().label)
    folder.mkdir(parents=True)
    with folders.hold(folder / folders.LOCK_NAME, "that folder"):
        done = stability(str(ROOT / "sweeps" / "smoke.yaml"), "--results", str(folder.parent))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {folder} is in use by another softcuda init (process ")
    assert not list(folder.glob("*.csv"))
