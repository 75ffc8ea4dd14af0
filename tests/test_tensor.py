"""The tensor node: shape inference at definition, views, scalars, leaves."""

from __future__ import annotations

import numpy as np
import pytest

import softcuda as sc
from softcuda.errors import ShapeError


def test_fields_of_the_design_exist_and_nothing_runs():
    x = sc.randn((4, 3), seed=0)
    y = sc.relu(x @ sc.ones((3, 2)) + 1.0)
    for name in (
        "ndims",
        "dims",
        "stride",
        "data",
        "op",
        "a",
        "b",
        "device",
        "grad_compute",
        "grad",
        "evaluated",
        "backend_id",
    ):
        assert hasattr(y, name)
    assert (y.ndims, y.dims, y.stride, y.op) == (2, (4, 2), (2, 1), "relu")
    assert y.data is None and not y.evaluated and y.backend_id is None
    assert x.evaluated and x.op == "none" and x.data.shape == (4, 3)


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [((3, 4), (4,), (3, 4)), ((3, 1), (1, 5), (3, 5)), ((1,), (2, 3), (2, 3)), ((), (2,), (2,))],
)
def test_broadcast_shapes(a, b, out):
    assert (sc.zeros(a) + sc.zeros(b)).dims == out


def test_mismatch_raises_at_definition_naming_both_shapes():
    with pytest.raises(ShapeError, match=r"\(3, 4\).*\(5,\)"):
        sc.zeros((3, 4)) * sc.zeros((5,))
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(4, 5\)"):
        sc.zeros((2, 3)) @ sc.zeros((4, 5))
    with pytest.raises(ShapeError, match="float32.*float64"):
        sc.zeros((2,)) + sc.zeros((2,), dtype=np.float64)
    with pytest.raises(ShapeError, match="batch"):
        sc.zeros((2, 3, 4)) @ sc.zeros((3, 4, 5))
    with pytest.raises(ShapeError, match="axis 2"):
        sc.sum(sc.zeros((2, 3)), axis=2)
    with pytest.raises(ShapeError, match="reshape"):
        sc.zeros((2, 3)).reshape(4, 2)


def test_scalars_on_either_side_and_operators():
    x = sc.tensor(np.array([1.0, 2.0, 4.0], np.float32))
    got = [e.numpy() for e in (x * 2.0, 1.0 - x, 2.0 / x, x / 2, -x, x + x, 3 + x)]
    ref = [[2, 4, 8], [0, -1, -3], [2, 1, 0.5], [0.5, 1, 2], [-1, -2, -4], [2, 4, 8], [4, 5, 7]]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r)
    assert (x * 2.0).dtype == np.float32


def test_methods_match_functions():
    x = sc.randn((5, 4), seed=3)
    np.testing.assert_allclose(x.relu().numpy(), sc.relu(x).numpy())
    np.testing.assert_allclose(
        x.sum(axis=0, keepdims=True).numpy(), sc.sum(x, axis=0, keepdims=True).numpy()
    )
    np.testing.assert_allclose(x.matmul(x.T).numpy(), (x @ x.T).numpy())


def test_views_change_stride_not_data():
    x = sc.randn((3, 5), seed=1)
    t = x.T
    assert t.dims == (5, 3) and t.stride == (1, 5) and t.op == "transpose"
    r = x.reshape(-1)
    assert r.dims == (15,) and r.stride == (1,)
    y = sc.randn((2, 3, 4), seed=2).transpose(1, 0, 2)
    assert y.dims == (3, 2, 4) and y.stride == (4, 12, 1)
    np.testing.assert_array_equal(t.reshape(15).numpy(), x.data.T.reshape(15))


def test_reduction_shapes():
    x = sc.zeros((2, 3, 4))
    assert sc.sum(x).dims == ()
    assert sc.mean(x, axis=1).dims == (2, 4)
    assert sc.max(x, axis=-1, keepdims=True).dims == (2, 3, 1)
    assert sc.sum(x, keepdims=True).dims == (1, 1, 1)


def test_dtypes_and_leaf_constructors():
    assert sc.randn((2,), seed=0, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(sc.ones((2, 2)).numpy(), np.ones((2, 2)))
    np.testing.assert_array_equal(sc.randn((3,), seed=7).numpy(), sc.randn((3,), seed=7).numpy())
    with pytest.raises(ShapeError, match="int8"):
        sc.zeros((2,), dtype=np.int8)
    arr = np.arange(6.0).reshape(2, 3)
    leaf = sc.tensor(arr)
    arr[0, 0] = 99  # the leaf holds a copy
    assert leaf.numpy()[0, 0] == 0 and leaf.dtype == np.float64


def test_assign_gives_new_values_to_the_next_run():
    x = sc.zeros((3,))
    y = x * 2.0
    assert y.numpy().tolist() == [0, 0, 0]
    x.assign([1, 2, 3])
    assert y.numpy().tolist() == [2, 4, 6]
    with pytest.raises(ShapeError, match=r"\(2,\)"):
        x.assign([1, 2])
    with pytest.raises(ShapeError, match="not a leaf"):
        y.assign([1, 2, 3])


def test_repr_reads_like_the_program():
    x = sc.zeros((2,))
    y = sc.exp(x) * 3.0
    assert "mul(" in repr(y) and "shape=(2,)" in repr(y)
    assert "const 3.0" in repr(y.b)


def test_numpy_arrays_on_the_left_defer_to_the_tensor():
    x = sc.ones((2,))
    y = np.array([1.0, 2.0], np.float32) + x
    assert isinstance(y, sc.Tensor) and y.numpy().tolist() == [2, 3]


def test_lists_and_numbers_become_float32_and_numpy_arrays_keep_their_float_dtype():
    assert sc.tensor([1.0, 2.0]).dtype == np.float32
    assert sc.tensor(3.5).dtype == np.float32
    assert sc.tensor(np.arange(3)).dtype == np.float32  # integers: the default float
    assert sc.tensor(np.ones(2, np.float64)).dtype == np.float64
    assert sc.tensor(np.ones(2, np.float32)).dtype == np.float32
    assert sc.tensor([1, 2], dtype=np.float64).dtype == np.float64
    np.testing.assert_allclose((sc.tensor([1.0, 2.0]) + sc.ones(2)).numpy(), [2.0, 3.0])


def test_a_numpy_integer_axis_is_an_axis():
    x = sc.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(sc.sum(x, axis=np.int64(1)).numpy(), [3.0, 12.0])
    with pytest.raises(sc.ShapeError, match="axis 2 is out of range for shape"):
        sc.sum(x, axis=np.int64(2))
    with pytest.raises(sc.ShapeError, match="axis must be an integer or None, got 1.0"):
        sc.sum(x, axis=1.0)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda x: x.assign(np.array([1j, 2, 3])),
            "assign: values of dtype complex128 are not real",
        ),
        (lambda x: x.assign(["a", "b", "c"]), "assign: values of dtype <U1 are not real numbers"),
        (lambda x: x.assign([[1], [1, 2], [3]]), "assign: the values are not a rectangular array"),
        (lambda x: x.assign(x), "assign: expected values (an array or numbers), got the Tensor"),
        (lambda x: x.assign(None), "assign: values of dtype object are not real numbers"),
        (lambda x: (x + 1.0).b.assign(2.0), "is a constant (a Python number in the graph)"),
        (lambda x: sc.tensor(None), "tensor: values of dtype object are not real numbers"),
        (lambda x: sc.tensor([1j]), "tensor: values of dtype complex128 are not real numbers"),
        (lambda x: sc.randn(2.5), "a shape is an int or a sequence of ints, got 2.5"),
        (lambda x: sc.zeros((2, -1)), "a shape is made of non-negative ints, got (2, -1)"),
        (lambda x: x**10**400, "pow: the exponent (401 digits) is beyond a float64"),
        (lambda x: 2**x, "pow: the base must be a Tensor and the exponent a number"),
        (lambda x: sc.sum(x, keepdims="no"), "sum: keepdims must be True or False, got 'no'"),
    ],
)
def test_bad_values_and_shapes_are_one_sentence(make, words):
    with pytest.raises(sc.ShapeError) as info:
        make(sc.ones((3,)))
    assert words in str(info.value)


def test_compile_names_a_config_that_is_not_one():
    with pytest.raises(sc.ConfigError, match="expected a path, a Config or None, got int"):
        sc.compile(sc.ones((2,)) + 1.0, config=42)


def test_python_abs_of_a_tensor_is_the_abs_op():
    x = sc.tensor(np.array([-1.5, 0.0, 2.0], np.float32))
    assert abs(x).op == "abs"
    np.testing.assert_array_equal(abs(x).numpy(), [1.5, 0.0, 2.0])
