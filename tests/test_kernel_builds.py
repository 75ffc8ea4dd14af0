"""matmul.cu's two builds hold what make_matmul asks each for (no GPU needed: the source is read).

A configuration in the wrong build would be a missing-kernel error at the first launch on a GPU,
and a production kernel moved into the tuning build would put the tuning compile back on every
cold sweep.
"""

from __future__ import annotations

import re

import numpy as np

from softcuda.backends import cuda_kernels as ck

# SC_TILED(T, SUF, CFG, ...) and SC_TILED_X(...): the third argument names the configuration.
_TILED = re.compile(r"^SC_TILED(?:_X|_ALL)?\(\s*\w+,\s*(f32|f64),\s*(\w+),", re.M)


def _sections() -> tuple[str, str]:
    text = (ck._KERNEL_DIR / "matmul.cu").read_text(encoding="utf-8")
    start = text.index("#ifndef SC_TUNING")
    middle = text.index("#else", start)
    end = text.index("#endif  // SC_TUNING", middle)
    assert "SC_TILED(" not in text[:start].split("#define SC_NAIVE")[-1]
    assert not _TILED.search(text[end:])
    return text[start:middle], text[middle:end]


def _configs(section: str) -> set[str]:
    return {cfg for _, cfg in _TILED.findall(section)}


def test_production_build_holds_exactly_the_configurations_make_matmul_picks() -> None:
    production, _ = _sections()
    assert _configs(production) == set(ck._MM_BUILT)
    assert "gemm_naive_##SUF" in (ck._KERNEL_DIR / "matmul.cu").read_text(encoding="utf-8")
    assert "SC_NAIVE(float, f32)" in production and "SC_NAIVE(double, f64)" in production


def test_tuning_build_holds_every_forced_configuration_and_no_production_one() -> None:
    _, tuning = _sections()
    tuned = _configs(tuning)
    assert not tuned & set(ck._MM_BUILT)
    assert set(ck._MM_KN_ONLY) - set(ck._MM_BUILT) <= tuned
    assert "_u1" in tuned and any(cfg.startswith("_t") for cfg in tuned)


def test_builds_cover_every_source_and_only_matmul_and_softmax_have_a_tuning_build() -> None:
    sources = [name for name, _ in ck._BUILDS.values()]
    assert set(sources) == set(ck._SOURCES)
    defined = {build: opts for build, (_, opts) in ck._BUILDS.items() if opts}
    assert defined == {"matmul_tuning": ("-DSC_TUNING",), "softmax_tuning": ("-DSC_TUNING",)}
    assert ck._BUILDS["matmul_tuning"][0] == "matmul.cu"
    assert ck._BUILDS["softmax_tuning"][0] == "softmax.cu"
    assert not set(ck.PRODUCTION_BUILDS) & set(defined)  # a plan never compiles a variant


def test_softmax_production_build_holds_the_float4_rows_make_softmax_picks() -> None:
    text = (ck._KERNEL_DIR / "softmax.cu").read_text(encoding="utf-8")
    start = text.index("#ifndef SC_TUNING")
    production = text[start : text.index("#else", start)]
    for name in ("softmax", "log_softmax"):  # make_softmax asks for NAME_rows_vec4_f32
        assert f"SC_SOFTMAX_VEC4_ROWS({name}," in production
    assert ck._vec4_rows(4096, np.float32, True) and ck._vec4_rows(2048, np.float32, True)
    assert not ck._vec4_rows(4094, np.float32, True)  # not whole float4 vectors
    assert not ck._vec4_rows(4096, np.float32, False)  # an array off a 16-byte boundary
    assert not ck._vec4_rows(4096, np.float64, True)
    assert not ck._vec4_rows(4100, np.float32, True)  # more than 256 threads of 4 vectors
    assert not ck._vec4_rows(1024, np.float32, True)  # short rows: not timed, kept scalar
