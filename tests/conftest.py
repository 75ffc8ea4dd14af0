"""Shared fixtures: every test runs against the packaged DEFAULT.soft unless it says otherwise
(the repository's own CONFIG.soft is a GPU profile), and `cuda` tests skip with the reason."""

from __future__ import annotations

import pytest

from softcuda.backends import cuda_available
from softcuda.config import default_config_path


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
