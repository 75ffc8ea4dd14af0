"""Zero-size dimensions follow numpy: shapes, broadcasting, matmul, reductions over nothing,
elementwise ops and reshapes of empty tensors, on every CPU backend.  (The CUDA paths are
checked the same way in test_cuda_graph.py and test_cuda_kernels.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softcuda as sc
from softcuda.check import check_op
from softcuda.config import single_rule_config
from softcuda.errors import ShapeError
from softcuda.ops import ELEMENTWISE_OPS, OPS, REDUCTION_OPS

CPU = ("cpu_fallback", "cpu_blas")
BINARY = [o for o in ELEMENTWISE_OPS if OPS[o].arity == 2]
UNARY = [o for o in ELEMENTWISE_OPS if OPS[o].arity == 1]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def checked(op, backend, shapes, **kw):
    """check_op, with numpy's own warnings about empty means silenced in the reference."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)
        return check_op(op, backend, shapes, **kw)


# ---- matmul ------------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((0, 2, 3), (3, 4)),  # a batch of none: (0, 2, 4), not (1, 2, 4)
    ((3, 4), (0, 4, 5)),
    ((0, 2, 3), (1, 3, 4)),
    ((1, 2, 3), (0, 3, 4)),
    ((0, 2, 3), (0, 3, 4)),
    ((2, 0), (0, 3)),  # k = 0: a (2, 3) of zeros
    ((2, 2, 0), (0, 3)),
    ((0, 3), (3, 4)),
    ((2, 3), (3, 0)),
    ((0, 0), (0, 0)),
]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_with_empty_dimensions_is_numpy_s(backend, shapes):
    a, b = shapes
    node = sc.matmul(sc.zeros(a), sc.zeros(b))
    assert node.shape == np.matmul(np.zeros(a), np.zeros(b)).shape
    r = checked("matmul", backend, [a, b], seed=1)  # poisoned output: k = 0 must write zeros
    assert r.ok, r


def test_the_example_zero_batch_matmul():
    y = sc.zeros((0, 2, 3)) @ sc.zeros((3, 4))
    assert y.shape == (0, 2, 4)
    assert y.numpy().shape == (0, 2, 4)


@pytest.mark.parametrize("shapes", [((0, 2, 3), (2, 3, 4)), ((2, 2, 3), (0, 3, 4))])
def test_an_empty_batch_against_a_real_one_is_refused_as_numpy_refuses(shapes):
    with pytest.raises(ValueError):
        np.matmul(np.zeros(shapes[0]), np.zeros(shapes[1]))
    with pytest.raises(ShapeError, match="batch"):
        sc.zeros(shapes[0]) @ sc.zeros(shapes[1])


# ---- elementwise and broadcasting --------------------------------------------------------------

BROADCASTS = [
    ((0,), (0,)),
    ((0,), (1,)),
    ((1,), (0,)),
    ((0, 3), (3,)),
    ((0, 3), (1, 3)),
    ((3, 0), (3, 1)),
    ((2, 0, 3), (1, 3)),
    ((0, 3), ()),
    ((), (4, 0)),
]


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_ops_broadcast_empty_shapes_as_numpy(backend, op, shapes):
    assert sc.add(sc.zeros(shapes[0]), sc.zeros(shapes[1])).shape == np.broadcast_shapes(*shapes)
    r = checked(op, backend, list(shapes), seed=2)
    assert r.ok, r


@pytest.mark.parametrize("shapes", [((0, 3), (2, 3)), ((0,), (2,)), ((3, 0), (3, 2))])
def test_zero_against_a_size_other_than_one_does_not_broadcast(shapes):
    with pytest.raises(ValueError):
        np.broadcast_shapes(*shapes)
    with pytest.raises(ShapeError):
        sc.zeros(shapes[0]) + sc.zeros(shapes[1])


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 2)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_ops_on_empty_tensors(backend, op, shape, dtype):
    flip = (len(shape) == 2,)
    r = checked(op, backend, [shape], dtype=dtype, seed=3, transpose=flip)
    assert r.ok, r


# ---- reductions --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize(
    "shape,axis",
    [((0,), None), ((0, 3), None), ((0, 3), 0), ((0, 3), 1), ((3, 0), 1), ((2, 0, 3), 1)],
    ids=str,
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_sums_and_means_over_nothing_are_numpy_s(backend, op, shape, axis, keepdims):
    """sum of nothing is 0, mean of nothing NaN (numpy's values), without numpy's warning."""
    attrs = {"axis": axis, "keepdims": keepdims}
    node = getattr(sc, op)(sc.zeros(shape), axis, keepdims)
    plan = sc.compile(node, single_rule_config(op, backend))
    plan.poison()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plan warns about nothing
        got = plan.evaluate()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(np, op)(np.zeros(shape), axis=axis, keepdims=keepdims)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here
    assert checked(op, backend, [shape], attrs=attrs, seed=4).ok


@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("shape,axis", [((0, 3), 1), ((3, 0), 0), ((2, 0, 3), 2)], ids=str)
def test_max_along_a_full_axis_of_an_empty_tensor_is_empty(backend, shape, axis):
    r = checked("max", backend, [shape], attrs={"axis": axis, "keepdims": False}, seed=5)
    assert r.ok, r


@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((3, 0), 1), ((0, 0), 1)])
def test_max_over_nothing_is_refused_as_numpy_refuses(shape, axis):
    with pytest.raises(ValueError):
        np.max(np.zeros(shape), axis=axis)
    with pytest.raises(ShapeError):
        sc.max(sc.zeros(shape), axis)


# ---- views -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,new,flip",
    [
        ((0, 3), (3, 0), False),
        ((0, 3), (-1, 3), False),
        ((3, 0), (-1,), False),
        ((0, 3), (3, 0), True),  # a reshape of a transposed (strided) view copies
        ((2, 0, 3), (0, 6), False),
    ],
    ids=str,
)
def test_reshapes_of_empty_tensors(shape, new, flip):
    x = sc.zeros(shape[::-1]).T if flip else sc.zeros(shape)
    y = x.reshape(new)
    want = (np.zeros(shape[::-1]).T if flip else np.zeros(shape)).reshape(new)
    assert y.shape == want.shape
    assert (sc.exp(y)).numpy().shape == want.shape


@pytest.mark.parametrize("new", [(0, -1), (-1, 0)])
def test_an_empty_reshape_with_an_unknown_dimension_is_ambiguous_as_in_numpy(new):
    with pytest.raises(ValueError):
        np.zeros((0, 3)).reshape(new)
    with pytest.raises(ShapeError):
        sc.zeros((0, 3)).reshape(new)


def test_a_graph_over_an_empty_batch():
    x = sc.zeros((0, 5))
    w = sc.randn((5, 4), seed=0)
    h = sc.relu(x @ w + sc.ones((4,)))
    got = sc.compile((h, sc.sum(h, axis=0), sc.mean(h, axis=1))).evaluate()
    assert [g.shape for g in got] == [(0, 4), (4,), (0,)]
    np.testing.assert_array_equal(got[1], np.zeros(4))


# ---- properties --------------------------------------------------------------------------------


@st.composite
def empty_shape(draw, min_dims=1):
    """A shape of 1-3 dims, at least one of them 0."""
    shape = draw(st.lists(st.integers(0, 4), min_size=min_dims, max_size=3))
    shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


@pytest.mark.parametrize("backend", CPU)
@SETTINGS
@given(shape=empty_shape(), data=st.data(), seed=st.integers(0, 2**16))
def test_property_every_op_on_empty_shapes(backend, shape, data, seed):
    op = data.draw(st.sampled_from(ELEMENTWISE_OPS + REDUCTION_OPS))
    if OPS[op].arity == 2:
        # the other operand: the same shape with some dims set to 1, maybe fewer dims
        other = tuple(1 if data.draw(st.booleans()) else d for d in shape)
        other = other[data.draw(st.integers(0, len(other))) :]
        shapes = [shape, other] if data.draw(st.booleans()) else [other, shape]
        assert checked(op, backend, shapes, seed=seed).ok
        return
    attrs = {}
    if OPS[op].kind == "reduction":
        axis = data.draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
        attrs = {"axis": axis, "keepdims": data.draw(st.booleans())}
        if op == "max" and (axis is None or shape[axis] == 0):
            with pytest.raises(ShapeError):
                sc.max(sc.zeros(shape), axis)
            return
    assert checked(op, backend, [shape], attrs=attrs, seed=seed).ok


@pytest.mark.parametrize("backend", CPU)
@SETTINGS
@given(
    batch=st.sampled_from([None, 0, 1, 2]),
    mkn=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    data=st.data(),
)
def test_property_matmul_with_empty_dimensions(backend, batch, mkn, data):
    m, k, n = mkn
    a, b = (m, k), (k, n)
    if batch is not None:
        a = (batch, m, k)
        b = data.draw(st.sampled_from([(batch, k, n), (1, k, n), (k, n)]))
        if data.draw(st.booleans()):
            a, b = (m, k), (batch, k, n)
    assert sc.matmul(sc.zeros(a), sc.zeros(b)).shape == np.matmul(np.zeros(a), np.zeros(b)).shape
    assert checked("matmul", backend, [a, b], seed=m + k + n).ok
