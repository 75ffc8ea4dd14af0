"""Shared by the tests of cpu_threads' native kernels: skip where the layer is off on purpose or
no compiler exists; fail (not skip) where a compiler exists and the build still did not load."""

from __future__ import annotations

import os

import pytest


def require_native() -> None:
    from softcuda.backends import native

    if os.environ.get("SOFTCUDA_NATIVE", "1") == "0":
        pytest.skip("SOFTCUDA_NATIVE=0: the native kernels are off")
    if native.compiler() is None:
        pytest.skip("no C++ compiler here: cpu_threads runs cpu_fallback's kernels")
    assert native.unavailable() is None, native.unavailable()
