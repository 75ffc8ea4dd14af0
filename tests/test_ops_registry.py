"""The op registry drives everything: each op's reference, domain and kernels, the sweeps that
measure it, and the ops added through it alone (pow, softmax and step)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import softcuda as sc
from softcuda.backends import BACKENDS, CPU_BACKENDS, cpu_threads
from softcuda.backends.cuda_kernels import elementwise_source
from softcuda.check import check_op
from softcuda.config import default_config, rules_config
from softcuda.ops import CONFIGURABLE_OPS, OPS, PROFILE_OPS, ops_of
from softcuda.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "softcuda" / "backends" / "kernels"


@pytest.mark.parametrize("op", CONFIGURABLE_OPS)
def test_every_op_has_a_reference_a_domain_and_runs_on_every_cpu_backend_that_claims_it(op):
    info = OPS[op]
    assert info.reference is not None and info.domain in ("real", "positive", "nonzero")
    shapes = [(33, 17), (17, 9)] if info.kind == "matmul" else [(37, 5)] * info.arity
    for backend in CPU_BACKENDS:
        if op in BACKENDS[backend].ops:
            for dtype in (np.float32, np.float64):
                result = check_op(op, backend, shapes, dtype=dtype, seed=2)
                assert result.ok, result


def test_the_sweep_never_divides_by_zero_nor_takes_the_log_of_it():
    # a float32 normal draw of 2^26 values holds exact zeros: the sweep's div warned of them
    from softcuda.sweep.measure import in_domain

    x = np.array([0.0, -0.0, 1e-30, -2.0, 3.0], np.float32)
    divisors = in_domain(OPS["div"].domain, x)
    assert np.all(np.abs(divisors) >= np.float32(0.1))
    assert list(np.signbit(divisors)) == list(np.signbit(x))  # both signs are measured
    assert np.all(in_domain(OPS["log"].domain, x) > 0)
    assert in_domain(OPS["add"].domain, x) is x


def test_every_elementwise_family_has_its_entry_points_in_the_cuda_source():
    # the source as compiled: elementwise.cu with the registry's unary functors added
    source = elementwise_source()
    binaries = set(re.findall(r"SC_BINARY\((\w+),", source)) - {"NAME"}  # the macro itself
    unaries = set(re.findall(r"SC_UNARY\((\w+),", source)) - {"NAME", "copy"}
    assert binaries == set(ops_of("binary")) | set(ops_of("power"))
    assert unaries == set(ops_of("unary"))
    # the file itself names no unary op: each one's CUDA expression is its registry entry's
    assert set(re.findall(r"SC_UNARY\((\w+),", (KERNELS / "elementwise.cu").read_text())) == {
        "NAME",
        "copy",
    }


@pytest.mark.parametrize("spec", ["default.yaml", "quick.yaml"])
def test_the_sweeps_measure_every_op_of_the_registry_and_every_variant(spec):
    # as the sweep reads them: ``others`` stands for the elementwise ops and reductions the
    # spec does not name, so that a new op is measured without an edit here
    ops = [o.op for o in load_spec(ROOT / "sweeps" / spec).ops]
    assert set(ops) == set(PROFILE_OPS)
    assert len(ops) == len(set(ops))
    assert "others" in yaml.safe_load((ROOT / "sweeps" / spec).read_text())["ops"]


def test_default_soft_decides_every_op():
    assert set(default_config().rules) == set(CONFIGURABLE_OPS)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("exponent", [2, 0.5, -1.5, 3.25, 0])
def test_pow_against_numpy(backend, exponent):
    x = np.random.default_rng(1).random((65, 3)) + 0.1
    plan = sc.compile(sc.tensor(x, np.float64) ** exponent, rules_config({"pow": backend}))
    np.testing.assert_allclose(plan.evaluate(), np.power(x, exponent), rtol=1e-13)


@pytest.mark.filterwarnings("ignore:invalid value encountered in power")  # numpy's, as for log
def test_pow_takes_a_number_and_follows_numpy_on_negative_bases():
    x = sc.tensor(np.array([-8.0, -1.0, 4.0], np.float64))
    np.testing.assert_array_equal(sc.pow(x, 2).numpy(), [64.0, 1.0, 16.0])
    got = sc.pow(x, 0.5).numpy()
    assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == 2.0
    with pytest.raises(sc.ShapeError, match="the exponent must be a number, got Tensor"):
        sc.pow(x, x)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("flip", [False, True])
def test_softmax_along_any_axis(backend, axis, flip):
    attrs = {"axis": axis}
    result = check_op("softmax", backend, [(41, 7)], attrs=attrs, transpose=(flip,), seed=3)
    assert result.ok, result


def test_softmax_does_not_overflow_and_sums_to_one():
    x = sc.tensor(np.array([[1000.0, 1000.0, 999.0], [-1000.0, 0.0, 1000.0]], np.float32))
    got = sc.softmax(x, axis=1).numpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got.sum(axis=1), [1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0.0, 0.0, 1.0], atol=1e-30)
    with pytest.raises(sc.ShapeError, match="softmax: axis 2 is out of range"):
        sc.softmax(x, axis=2)


def _step_edges(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, info.tiny, info.max, -info.max]
    return np.array(edges + [1.0, -1.0, 0.5, -2.5, 3.0], dtype)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("view", ["contiguous", "transposed"])
def test_step_is_exact_at_nan_infinities_zeros_and_subnormals(
    backend, dtype, view, monkeypatch, recwarn, tiny_grain
):
    """1 where x > 0, else 0, NaN included, in x's dtype, against the float64 reference; tiny
    chunks and 3 threads make cpu_threads cut the (strided) input into pieces."""
    monkeypatch.setattr(cpu_threads, "default_threads", lambda: 3)
    x = np.resize(_step_edges(dtype), (17, 13))
    leaf = sc.tensor(x.T.copy() if view == "transposed" else x, dtype=dtype)
    node = sc.step(leaf.T if view == "transposed" else leaf)
    got = sc.compile(node, rules_config({"step": backend})).evaluate()
    assert got.dtype == dtype
    want = OPS["step"].reference([x.astype(np.float64)], {})
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got)) == {0.0, 1.0} and np.all(got[np.isnan(x)] == 0.0)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_step_is_a_tensor_method_and_refuses_what_is_not_a_tensor():
    x = sc.tensor(np.array([-1.0, 0.0, 2.0], np.float32))
    np.testing.assert_array_equal(x.step().numpy(), [0.0, 0.0, 1.0])
    with pytest.raises(sc.ShapeError, match="step: expected a Tensor, got list"):
        sc.step([1.0])
