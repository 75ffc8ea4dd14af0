"""A built wheel (a non-editable install) carries DEFAULT.soft, the CLI and the kernel sources."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("not a source checkout")
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    (found,) = out.glob("softcuda-*.whl")
    return found


def test_wheel_contents(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "softcuda/DEFAULT.soft" in names
    assert "softcuda/py.typed" in names
    assert "softcuda_cli/__init__.py" in names and not any(n.startswith("cli/") for n in names)
    # the CUDA sources and the native CPU kernels' source, compiled on the user's machine
    sources = {n for n in names if n.endswith((".cu", ".cpp"))}
    on_disk = {
        f"softcuda/backends/kernels/{p.name}"
        for p in (ROOT / "softcuda/backends/kernels").iterdir()
        if p.suffix in (".cu", ".cpp")
    }
    assert "softcuda/backends/kernels/cpu.cpp" in sources
    assert sources == on_disk


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages by hand; one left out still reaches the wheel today,
    as package data with a setuptools deprecation warning, and is lost once that goes."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "softcuda").rglob("__init__.py")
    }
    assert on_disk and on_disk <= set(listed["packages"])


def test_installed_wheel_finds_default_soft(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import softcuda as sc; from softcuda.config import default_config_path; "
        "p = default_config_path(); print(p); "
        "print(float(sc.compile(sc.ones((2,)) * 2.0).evaluate()[0]))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("SOFTCUDA_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    path, value = done.stdout.split()
    assert path.startswith(str(site)) and value == "2.0"
