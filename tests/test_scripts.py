"""Every script in benchmarks/ and extra/ still imports against the package (a renamed or moved
name breaks a script nobody runs for weeks); .ci/run runs the CPU benchmarks themselves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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
