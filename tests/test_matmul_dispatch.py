"""Which matmul.cu entry point make_matmul picks, read off stand-in arrays (no GPU needed).

The CUDA tests check the products on a GPU; these hold the choice itself (layout letters,
configuration, build, grid) on any machine, so a change to the dispatch shows up here first.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from softcuda.backends import cuda_kernels as ck


def _arr(shape: tuple[int, ...], dtype: str = "float32", transposed: bool = False) -> Any:
    """A stand-in with what make_matmul reads of a CuPy array; ``transposed``: the .T view of
    a row-major array (the last two dims swapped)."""
    base = np.empty(shape[:-2] + shape[:-3:-1] if transposed else shape, dtype)
    view = np.swapaxes(base, -1, -2) if transposed else base
    return SimpleNamespace(
        shape=view.shape,
        ndim=view.ndim,
        size=view.size,
        strides=view.strides,
        itemsize=view.itemsize,
        dtype=view.dtype,
        data=SimpleNamespace(ptr=0),
    )


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> None:
    """make_matmul returns (build:kernel, grid, block) instead of a launch, on 132 SMs."""
    monkeypatch.setattr(ck, "_kernel", lambda build, name: f"{build}:{name}")
    monkeypatch.setattr(ck, "_launcher", lambda kern, grid, block, args: (kern, grid, block))
    monkeypatch.setattr(ck, "_sm_count", lambda: 132)


F64 = "float64"


def _t(shape: tuple[int, ...], dtype: str = "float32") -> Any:
    return _arr(shape, dtype, transposed=True)


@pytest.mark.parametrize(
    ("variant", "a", "b", "entry", "grid"),
    [
        ("naive", _arr((100, 50)), _arr((50, 70)), "naive_f32", (3, 13, 1)),
        # 8 x 8 blocks of 128 = 64, fewer than 132 SMs: 64x64 tiles
        ("tiled", _arr((1024, 64)), _arr((64, 1024)), "tiled_kn_small_f32", (16, 16, 1)),
        # 32 x 32 blocks of 128: row-major a and b take the kn configuration of the "_big" slot
        ("tiled", _arr((4096, 64)), _arr((64, 4096)), "tiled_kn_pf_f32", (32, 32, 1)),
        ("tiled", _t((4096, 64)), _arr((64, 4096)), "tiled_mn_big_f32", (32, 32, 1)),
        ("tiled", _arr((2, 256, 64), F64), _t((64, 256), F64), "tiled_kk_big_f64", (4, 4, 2)),
    ],
)
def test_entry_point(launches: None, variant: str, a: Any, b: Any, entry: str, grid: tuple) -> None:
    out = _arr((*a.shape[:-1], b.shape[-1]), str(a.dtype))
    block = (32, 8) if variant == "naive" else (256,)
    assert ck.make_matmul(variant, a, b, out) == (f"matmul:gemm_{entry}", grid, block)


def test_forced_configurations(launches: None) -> None:
    a, b, out = _arr((256, 256)), _arr((256, 256)), _arr((256, 256))
    assert ck.make_matmul("tiled", a, b, out, _cfg="_sw")[0] == "matmul_tuning:gemm_tiled_kn_sw_f32"
    assert ck.make_matmul("tiled", a, b, out, _cfg="_small")[1] == (4, 4, 1)
    with pytest.raises(ValueError, match="_sw does not exist for layout mn"):
        ck.make_matmul("tiled", _t((256, 256)), b, out, _cfg="_sw")
