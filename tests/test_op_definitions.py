"""One definition per op: what the registry entry generates (the free function, the method, the
export, the CUDA functor) and the CPU expression it carries, checked for every op the registry
holds, so that an op added there is checked here without an edit."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

import softcuda as sc
from softcuda import ops
from softcuda.backends import BACKENDS, CPU_BACKENDS, cpu_threads
from softcuda.backends import cuda_kernels as ck
from softcuda.config import rules_config
from softcuda.ops import OPS, ops_of
from softcuda.tensor import GENERATED

ROOT = Path(__file__).resolve().parent.parent
UNARY = ops_of("unary")


def test_the_generated_ops_are_the_unary_binary_and_reduction_ops_of_the_registry():
    want = [n for n, op in OPS.items() if op.family in ("unary", "binary", "reduce")]
    assert list(GENERATED) == want
    assert set(UNARY) <= set(GENERATED)


@pytest.mark.parametrize("name", GENERATED)
def test_function_method_and_export_are_one_generated_function(name):
    function = getattr(sc, name)
    assert name in sc.__all__
    assert function is getattr(sc.Tensor, name)  # the method is the same function
    assert function.__name__ == name and function.__module__ == "softcuda.tensor"
    assert function.__doc__ == OPS[name].doc and OPS[name].doc.strip()
    x = sc.tensor(np.array([[0.5, 1.5], [2.0, 3.0]], np.float64))
    args = [x] * OPS[name].arity
    assert function(*args).op == name
    assert getattr(x, name)(*args[1:]).op == name
    with pytest.raises(sc.ShapeError, match=f"^{name}: "):
        function(*[[1.0, 2.0]] * OPS[name].arity)


@pytest.mark.parametrize("name", UNARY)
def test_every_unary_op_carries_its_cpu_and_cuda_expressions(name):
    op = OPS[name]
    assert callable(op.cpu) and op.cuda.strip()
    source = ck.elementwise_source()
    functor = f"struct SC_OP_{name} {{ template <class T> __device__ static T f(T x) "
    assert f"{functor}{{ return {op.cuda}; }} }};" in source
    for ctype, suffix in (("float", "f32"), ("double", "f64")):
        assert f"SC_UNARY({name}, SC_OP_{name}, {ctype}, {suffix})" in source


def test_the_kernel_hash_covers_the_registrys_cuda_expressions(monkeypatch):
    before = ck.source_hash()
    changed = dataclasses.replace(OPS["square"], cuda="x * x * T(1)")
    monkeypatch.setitem(ops.OPS, "square", changed)
    assert ck.source_hash() != before
    monkeypatch.setitem(ops.OPS, "square", dataclasses.replace(changed, cuda=""))
    with pytest.raises(ValueError, match="square"):
        ck.elementwise_source()


def _specials(domain: str, dtype) -> np.ndarray:
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, info.tiny, 1.0, -1.0, 3.5, -7.25]
    values += [0.1, -0.1, 40.0, -40.0]
    if domain == "positive":
        values = [v for v in values if not v <= 0.0]  # NaN stays
    elif domain == "nonzero":
        values = [v for v in values if not abs(v) < 0.1]
    return np.array(values, dtype)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", UNARY)
def test_every_unary_op_at_special_values_on_every_cpu_backend(
    name, backend, dtype, monkeypatch, tiny_grain
):
    """NaN, infinities, zeros, subnormals and ordinary values, contiguous and through a
    transposed view, against the float64 reference rounded to the dtype; tiny chunks and 3
    threads make cpu_threads cut the input into pieces."""
    if name not in BACKENDS[backend].ops:
        pytest.skip(f"{backend} does not run {name}")
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 3)
    x = np.resize(_specials(OPS[name].domain, dtype), (13, 11))
    with np.errstate(all="ignore"):
        want = OPS[name].reference([x.astype(np.float64)], {}).astype(dtype)
    eps = float(np.finfo(dtype).eps)
    for node in (getattr(sc, name)(sc.tensor(x)), getattr(sc, name)(sc.tensor(x.T.copy()).T)):
        got = sc.compile(node, rules_config({name: backend})).evaluate()
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=16 * eps, atol=float(np.finfo(dtype).tiny))


def test_the_readme_names_the_unary_ops_by_the_registry():
    readme = (ROOT / "README.md").read_text()
    bullet = readme.split("- **Ops:**", 1)[1].split("\n- ", 1)[0]
    assert '`softcuda.ops.ops_of("unary")`' in bullet
    named = re.search(r"`(\w+(?: \w+)*) \.\.\.`", bullet).group(1).split()
    assert named and set(named) <= set(UNARY)


def test_split_axis_sees_an_array_as_outer_blocks_of_runs_along_the_axis():
    from softcuda.ops import split_axis

    assert split_axis((2, 3, 4), 0) == (1, 2, 12)
    assert split_axis((2, 3, 4), 1) == (2, 3, 4)
    assert split_axis((2, 3, 4), -1) == (6, 4, 1)
    assert split_axis((2, 3, 4), None) == (1, 24, 1)
    assert split_axis((), None) == split_axis((), 0) == (1, 1, 1)
    assert split_axis((5, 0, 2), 1) == (5, 0, 2)
    with pytest.raises(ValueError, match="axis 2 out of range for 2-d input"):
        split_axis((2, 3), 2)
    with pytest.raises(ValueError, match="axis -3 out of range"):
        split_axis((2, 3), -3)
