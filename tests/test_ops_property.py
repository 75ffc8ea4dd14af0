"""Every op on each CPU backend against float64 numpy on random shapes: broadcasting, size-1
dimensions and transposed (strided) operands included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softcuda.backends import CPU_BACKENDS
from softcuda.check import check_op
from softcuda.ops import ELEMENTWISE_OPS, OPS, REDUCTION_OPS

CPU = CPU_BACKENDS
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
dims = st.integers(min_value=1, max_value=9)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast: one full shape, the other with some dims set to 1 or cut."""
    shape = tuple(draw(st.lists(dims, min_size=1, max_size=3)))
    other = tuple(1 if draw(st.booleans()) else d for d in shape)
    other = other[draw(st.integers(0, len(other) - 1)) :]
    return (shape, other) if draw(st.booleans()) else (other, shape)


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 2])
@SETTINGS
@given(
    shapes=broadcast_pair(),
    flip=st.tuples(st.booleans(), st.booleans()),
    seed=st.integers(0, 2**16),
)
def test_binary(op, backend, shapes, flip, seed):
    # a transposed operand needs 2-D; fall back to contiguous otherwise
    flip = tuple(f and len(s) == 2 for f, s in zip(flip, shapes))
    result = check_op(op, backend, list(shapes), seed=seed, transpose=flip)
    assert result.ok, result


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", [o for o in ELEMENTWISE_OPS if OPS[o].arity == 1])
@SETTINGS
@given(
    shape=st.lists(dims, min_size=0, max_size=3).map(tuple),
    flip=st.booleans(),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_unary(op, backend, shape, flip, seed, dtype):
    result = check_op(
        op, backend, [shape], seed=seed, dtype=dtype, transpose=(flip and len(shape) == 2,)
    )
    assert result.ok, result


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", REDUCTION_OPS)
@SETTINGS
@given(
    shape=st.lists(dims, min_size=1, max_size=3).map(tuple),
    data=st.data(),
    keepdims=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_reduction(op, backend, shape, data, keepdims, seed):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    result = check_op(
        op,
        backend,
        [shape],
        seed=seed,
        attrs={"axis": axis, "keepdims": keepdims},
        transpose=(len(shape) == 2 and data.draw(st.booleans()),),
    )
    assert result.ok, result


@pytest.mark.parametrize("backend", CPU)
@SETTINGS
@given(
    m=dims,
    k=dims,
    n=dims,
    batch=st.sampled_from([None, 1, 3]),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_matmul(backend, m, k, n, batch, data, seed):
    a, b = (m, k), (k, n)
    flip = (False, False)
    if batch is None:
        flip = (data.draw(st.booleans()), data.draw(st.booleans()))
    else:  # batched, with the batch of one side broadcast or missing
        a = (batch, m, k)
        b = data.draw(st.sampled_from([(batch, k, n), (1, k, n), (k, n)]))
    result = check_op("matmul", backend, [a, b], seed=seed, transpose=flip)
    assert result.ok, result


@pytest.mark.parametrize("backend", CPU)
def test_odd_and_large_sizes(backend):
    for n in (1, 3, 127, 129):
        assert check_op("matmul", backend, [(n, n + 2), (n + 2, n)], seed=n).ok
    assert check_op("add", backend, [(1000, 1001), (1001,)], seed=1).ok
    assert check_op("sum", backend, [(100_003,)], attrs={"axis": None}, seed=2).ok


def test_the_check_can_fail(monkeypatch):
    """A wrong kernel must be caught: swap add for subtract in cpu_blas."""
    from softcuda.backends import cpu_fallback

    monkeypatch.setitem(cpu_fallback._BINARY, "add", np.subtract)
    assert not check_op("add", "cpu_blas", [(5, 5), (5, 5)], seed=0).ok


def test_poisoned_outputs_expose_unwritten_elements(monkeypatch):
    """A kernel that writes nothing must fail: outputs start as NaN, never as stale zeros."""
    from softcuda.backends import cpu_fallback

    monkeypatch.setitem(cpu_fallback._UNARY, "neg", lambda a, out: None)
    assert not check_op("neg", "cpu_blas", [(7,)], seed=0).ok
