"""Shared fixtures: every test runs against the packaged DEFAULT.soft unless it says otherwise
(the repository's own CONFIG.soft is a GPU profile), and `cuda` tests skip with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from softcuda.backends import cuda_available
from softcuda.config import default_config_path

# the shared sweep helpers assert (one_error_line): rewrite them as pytest does test modules
pytest.register_assert_rewrite("tests.sweep_helpers")


@pytest.fixture(scope="module")
def cp() -> Any:
    """CuPy, for the CUDA tests that make device arrays themselves."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    ok, why = cuda_available()
    if not ok:
        pytest.skip(f"CUDA not usable: {why}")
    return cupy


@pytest.fixture(autouse=True)
def _default_config(monkeypatch):
    monkeypatch.setenv("SOFTCUDA_CONFIG", str(default_config_path()))


def pytest_collection_modifyitems(config, items):
    ok, reason = cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def modelled_timings(monkeypatch):
    """Make the sweep's timings (and the recheck's, which measures through the sweep) come from
    a model instead of the clock: ``modelled_timings({backend: seconds(n)})``, where n is the
    first dimension of the op's result (the size of a matmul or an elementwise op).  Every plan
    then takes that long in every repetition, and the probe 5 us.  Plans are not compiled."""
    from softcuda.sweep import measure

    def install(model):
        class Plan:  # knows only its backend and size
            def __init__(self, graph, config, kind):
                (rules,) = config.rules.values()
                self.backend, self.n = rules[0].backend, graph.shape[0]

            def evaluate(self, copy=False):
                pass

        def rounds(groups, policy, hot=False, riders=0, settle=None, block_s=0.0):
            timed = [g[0].func.__self__ for g in groups[: len(groups) - riders]]
            return [[[model[p.backend](p.n)] * 3] for p in timed] + [[[5e-6] * 3]] * riders

        monkeypatch.setattr(measure, "compile_plan", Plan)
        monkeypatch.setattr(measure, "interleaved", rounds)

    return install


@pytest.fixture
def tiny_grain():
    """cpu_threads' native kernels use every thread they are given even on a few elements,
    so that small test arrays cross the kernels' thread boundaries."""
    from softcuda.backends import native

    was = native.set_grain(1)
    yield
    if was:
        native.set_grain(was)
