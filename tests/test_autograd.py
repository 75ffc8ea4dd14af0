"""Autograd: every op's gradient rule against central finite differences of its float64 numpy
reference, compiled with the default config; reuse, ties, unrelated leaves, non-scalar losses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import softcuda as sc
from softcuda.autograd import GRADIENTS
from softcuda.errors import ShapeError, SoftcudaError
from softcuda.ops import OPS

F64 = np.float64
EPS = np.finfo(F64).eps
# Central differences: truncation error ~ h^2 |f'''| / 6, rounding ~ eps |f| / h; they balance
# at h = eps^(1/3), where both are ~ eps^(2/3) times the function's scale.
H = EPS ** (1.0 / 3.0)
# Allow 1e2 eps^(2/3) (about 4e-9) per unit of the loss's scale, sum |f v|: the largest error
# met, div's near |b| = 0.1, is a quarter of that; a wrong rule is off by O(1) of the scale.
TOL = 1e2 * EPS ** (2.0 / 3.0)


def ref(op, **attrs):
    return lambda *xs: OPS[op].reference(list(xs), attrs)


def draw(rng, shape, domain):
    if domain == "positive":  # log, pow: away from zero
        return rng.uniform(0.5, 2.0, shape)
    if domain == "nonzero":  # div, relu, step: either sign, |x| >= 0.1, away from the kink
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 2.0, shape)
    return rng.standard_normal(shape)


# (id, lazy build, numpy reference, input shapes, domain)
CASES = [
    ("add-broadcast", lambda a, b: a + b, ref("add"), [(3, 1, 4), (5, 4)], "real"),
    ("sub-broadcast", lambda a, b: a - b, ref("sub"), [(2, 3), (3,)], "real"),
    ("mul-size1", lambda a, b: a * b, ref("mul"), [(4, 1), (1, 5)], "real"),
    ("mul-0d", lambda a, b: a * b, ref("mul"), [(), (2, 3)], "real"),
    ("div-broadcast", lambda a, b: a / b, ref("div"), [(2, 3, 4), (3, 1)], "nonzero"),
    ("neg", sc.neg, ref("neg"), [(3, 4)], "real"),
    ("exp", sc.exp, ref("exp"), [(3, 4)], "real"),
    ("log", sc.log, ref("log"), [(3, 4)], "positive"),
    ("tanh", sc.tanh, ref("tanh"), [(3, 4)], "real"),
    ("sigmoid", sc.sigmoid, ref("sigmoid"), [(3, 4)], "real"),
    ("square", sc.square, ref("square"), [(3, 4)], "real"),
    ("relu", sc.relu, ref("relu"), [(3, 4)], "nonzero"),
    ("step", sc.step, ref("step"), [(3, 4)], "nonzero"),
    ("abs", sc.abs, ref("abs"), [(3, 4)], "nonzero"),
    ("pow-1.5", lambda a: a**1.5, ref("pow", exponent=1.5), [(3, 4)], "positive"),
    ("pow-3", lambda a: a**3, ref("pow", exponent=3.0), [(3, 4)], "real"),
    ("pow--0.5", lambda a: a**-0.5, ref("pow", exponent=-0.5), [(3, 4)], "positive"),
    ("softmax-last", lambda a: a.softmax(-1), ref("softmax", axis=-1), [(3, 4)], "real"),
    ("softmax-0", lambda a: a.softmax(0), ref("softmax", axis=0), [(3, 4)], "real"),
    ("softmax-all", lambda a: a.softmax(None), ref("softmax", axis=None), [(3, 4)], "real"),
    (
        "log_softmax-last",
        lambda a: a.log_softmax(-1),
        ref("log_softmax", axis=-1),
        [(3, 4)],
        "real",
    ),
    ("log_softmax-0", lambda a: a.log_softmax(0), ref("log_softmax", axis=0), [(3, 4)], "real"),
    (
        "log_softmax-all",
        lambda a: a.log_softmax(None),
        ref("log_softmax", axis=None),
        [(3, 4)],
        "real",
    ),
]
for _op in ("sum", "mean", "max"):
    for _axis, _keep in ((None, False), (None, True), (0, False), (1, True), (2, False)):
        CASES.append(
            (
                f"{_op}-axis{_axis}-keep{_keep}",
                lambda a, op=_op, axis=_axis, keep=_keep: getattr(a, op)(axis, keep),
                ref(_op, axis=_axis, keepdims=_keep),
                [(3, 1, 4) if _axis != 2 else (2, 3, 4)],
                "real",
            )
        )
CASES += [
    ("matmul-2d", lambda a, b: a @ b, ref("matmul"), [(3, 4), (4, 5)], "real"),
    ("matmul-batched", lambda a, b: a @ b, ref("matmul"), [(2, 3, 4), (2, 4, 5)], "real"),
    ("matmul-2d-by-batch", lambda a, b: a @ b, ref("matmul"), [(3, 4), (2, 4, 5)], "real"),
    ("matmul-batch1", lambda a, b: a @ b, ref("matmul"), [(1, 3, 4), (2, 4, 5)], "real"),
    ("matmul-batch-by-2d", lambda a, b: a @ b, ref("matmul"), [(2, 3, 4), (4, 5)], "real"),
    (
        "matmul-transposed",
        lambda a, b: a.T @ b,
        lambda a, b: a.T @ b,
        [(4, 3), (4, 5)],
        "real",
    ),
    (
        "transpose",
        lambda a: a.transpose(2, 0, 1),
        lambda a: a.transpose(2, 0, 1),
        [(2, 3, 4)],
        "real",
    ),
    ("reshape", lambda a: a.reshape(2, 6), lambda a: a.reshape(2, 6), [(3, 4)], "real"),
    ("reshape-strided", lambda a: a.T.reshape(-1), lambda a: a.T.reshape(-1), [(3, 4)], "real"),
    ("exp-transposed", lambda a: a.T.exp(), lambda a: np.exp(a.T), [(3, 4)], "real"),
    ("add-transposed", lambda a, b: a.T + b, lambda a, b: a.T + b, [(4, 3), (1, 4)], "real"),
]


def test_every_op_of_the_registry_has_a_case_and_a_rule():
    covered = set()
    for _, build, _, shapes, _ in CASES:
        out = build(*[sc.zeros(s, F64) for s in shapes])
        covered.add(out.op)
    differentiable = {n for n, op in OPS.items() if op.kind != "leaf"}
    assert differentiable <= covered
    assert all(n in GRADIENTS for n in differentiable)
    assert set(GRADIENTS) == differentiable  # no rule for an op the registry lacks


def _setup(case, seed):
    _, build, reference, shapes, domain = case
    rng = np.random.default_rng(seed)
    xs = [draw(rng, s, domain) for s in shapes]
    leaves = [sc.tensor(x, F64) for x in xs]
    out = build(*leaves)
    v = rng.standard_normal(out.dims)  # the seed: grads are v^T J
    grads = sc.compile(tuple(sc.grad(out, leaves, seed=v))).evaluate()

    def loss(*arrays):
        return float(np.sum(reference(*arrays) * v))

    scale = 1.0 + float(np.sum(np.abs(reference(*xs) * v)))
    return rng, xs, list(grads), loss, scale


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_central_differences(case):
    _, xs, grads, loss, scale = _setup(case, seed=1)
    for i, x in enumerate(xs):
        assert grads[i].shape == x.shape
        fd = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            plus = [a.copy() for a in xs]
            minus = [a.copy() for a in xs]
            plus[i][j] += H
            minus[i][j] -= H
            fd[j] = (loss(*plus) - loss(*minus)) / (2 * H)
        np.testing.assert_allclose(grads[i], fd, rtol=0, atol=TOL * scale)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vjp_in_a_random_direction(case):
    # <v, J u> by a central difference along u, against <J^T v, u> from the rule
    rng, xs, grads, loss, scale = _setup(case, seed=2)
    us = [rng.standard_normal(x.shape) for x in xs]
    jvp = (
        loss(*[x + H * u for x, u in zip(xs, us)]) - loss(*[x - H * u for x, u in zip(xs, us)])
    ) / (2 * H)
    vjp = sum(float(np.sum(g * u)) for g, u in zip(grads, us))
    norm = 1.0 + sum(float(np.abs(u).max()) for u in us)
    assert abs(jvp - vjp) <= TOL * scale * norm


def test_a_node_used_twice_accumulates_both_uses():
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((3, 4))
    x = sc.tensor(xv, F64)
    y = x.tanh()
    loss = (y * y + y + x * x).sum()  # x feeds tanh and both sides of a mul
    (g,) = sc.grad(loss, [x])
    t = np.tanh(xv)
    expected = (2 * t + 1) * (1 - t * t) + 2 * xv
    np.testing.assert_allclose(g.numpy(), expected, rtol=10 * EPS, atol=10 * EPS)


@pytest.mark.parametrize("axis", [None, 1])
def test_max_ties_share_the_gradient(axis):
    rng = np.random.default_rng(4)
    xv = rng.integers(0, 3, (4, 5)).astype(F64)  # many ties
    xv[0] = 2.0  # a whole row tied
    v = rng.standard_normal(np.max(xv, axis=axis).shape)
    x = sc.tensor(xv, F64)
    (g,) = sc.grad(x.max(axis), [x], seed=v)
    top = np.max(xv, axis=axis, keepdims=True)
    ties = (xv == top).astype(F64)
    expected = np.reshape(v, top.shape) * ties / ties.sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(g.numpy(), expected, rtol=4 * EPS, atol=0)


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")  # numpy's inf - inf
@pytest.mark.parametrize("axis", [None, 1])
def test_max_ties_at_an_infinite_maximum_share_the_gradient(axis):
    # inf - inf is NaN where x is the (infinite) maximum: step gives 0 there, so it is a tie
    xv = np.array([[np.inf, 1.0, np.inf, -np.inf], [-np.inf, -np.inf, -np.inf, -np.inf]], F64)
    v = np.arange(1.0, 3.0) if axis == 1 else np.float64(4.0)
    x = sc.tensor(xv, F64)
    (g,) = sc.grad(x.max(axis), [x], seed=v)
    if axis == 1:
        expected = [[0.5, 0.0, 0.5, 0.0], [0.5, 0.5, 0.5, 0.5]]
    else:
        expected = [[2.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    np.testing.assert_array_equal(g.numpy(), expected)


@pytest.mark.parametrize("dtype", [np.float32, F64])
def test_relu_mask_is_exact_at_zero_subnormals_infinities_and_nan(dtype):
    info = np.finfo(dtype)
    small = info.smallest_subnormal
    xv = np.array(
        [0.0, -0.0, small, -small, info.max, -info.max, 1.0, -3.0, np.inf, -np.inf, np.nan], dtype
    )
    x = sc.tensor(xv, dtype)
    (g,) = sc.grad(x.relu(), [x], seed=np.ones(xv.shape, dtype))
    np.testing.assert_array_equal(g.numpy(), (xv > 0).astype(dtype))  # NaN: 0, as x > 0 is false


def test_relu_and_max_masks_are_one_step_kernel_each():
    # the masks were three tanh and two multiplications before step was an op
    x = sc.randn((4, 5), seed=0, dtype=F64)
    for out in (x.relu().sum(), x.max(axis=1).sum()):
        (g,) = sc.grad(out, [x])
        plan = sc.compile(g, sc.default_config(), fuse=False)
        kernels = [s.op for s in plan.steps if s.kind == "kernel"]
        assert kernels.count("step") == 1 and "tanh" not in kernels, kernels


@pytest.mark.parametrize("dtype", [np.float32, F64])
def test_step_has_a_zero_gradient_even_for_an_infinite_or_nan_upstream(dtype):
    xv = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], dtype)
    seed = np.array([np.inf, -np.inf, np.nan, np.inf, 1.0, np.nan, -np.inf], dtype)
    x = sc.tensor(xv, dtype)
    (g,) = sc.grad(x.step(), [x], seed=seed)
    got = g.numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.zeros(xv.shape, dtype))
    assert not np.any(np.signbit(got))


def test_leaf_not_in_the_graph_gets_zeros_and_a_warning():
    x = sc.randn((2, 3), seed=0, dtype=F64)
    stray = sc.randn((4,), seed=1, dtype=F64)
    with pytest.warns(UserWarning, match=stray.label):
        gx, gs = sc.grad(x.exp().sum(), [x, stray])
    np.testing.assert_array_equal(gs.numpy(), np.zeros(4))
    np.testing.assert_allclose(gx.numpy(), np.exp(x.numpy()), rtol=4 * EPS)


def test_non_scalar_loss_needs_a_seed():
    x = sc.randn((2, 3), seed=0)
    with pytest.raises(ShapeError, match=r"\(2, 3\).*seed"):
        sc.grad(x * 2.0, [x])
    with pytest.raises(ShapeError, match="seed"):
        sc.grad(x * 2.0, [x], seed=np.ones(3))
    (g,) = sc.grad(x * 2.0, [x], seed=np.ones((2, 3)))
    np.testing.assert_allclose(g.numpy(), np.full((2, 3), 2.0), rtol=0)


def test_backward_fills_grad_on_leaves_that_ask_and_accumulates():
    w = sc.randn((3, 2), seed=0, dtype=F64, requires_grad=True)
    x = sc.randn((4, 3), seed=1, dtype=F64)
    b = sc.zeros((2,), F64, requires_grad=True)
    loss = ((x @ w + b).square()).mean()
    loss.backward()
    assert x.grad is None
    out = x.numpy() @ w.numpy()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ (2 * out / out.size), rtol=1e3 * EPS)
    np.testing.assert_allclose(b.grad.numpy(), (2 * out / out.size).sum(0), rtol=1e3 * EPS)
    first = w.grad.numpy()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * first, rtol=4 * EPS)
    with pytest.raises(SoftcudaError, match="requires_grad"):
        (x * 2.0).sum().backward()


def test_forward_and_backward_compile_into_one_plan():
    w = sc.randn((3, 2), seed=0, dtype=F64)
    loss = (sc.randn((4, 3), seed=1, dtype=F64) @ w).tanh().sum()
    (g,) = sc.grad(loss, [w])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, gw = sc.compile((loss, g)).evaluate()
    assert np.isclose(value, loss.numpy()) and gw.shape == (3, 2)


def test_a_deep_chain_needs_no_recursion():
    depth = 3000  # past Python's default recursion limit of 1000
    x = sc.tensor(np.array([0.5, -1.5]), F64)
    y = x
    for _ in range(depth):
        y = y.neg()
    (g,) = sc.grad(y.sum(), [x])
    np.testing.assert_array_equal(g.numpy(), np.full(2, (-1.0) ** depth))


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c[0]
        in ("div-broadcast", "softmax-0", "max-axis1-keepTrue", "matmul-batch1", "reshape-strided")
    ],
    ids=lambda c: c[0],
)
def test_float32_gradients_follow_the_float64_ones(case):
    # the same rules on float32 backends: within float32 rounding of the float64 gradients
    _, build, _, shapes, domain = case
    rng = np.random.default_rng(5)
    xs = [draw(rng, s, domain) for s in shapes]
    out64 = build(*[sc.tensor(x, F64) for x in xs])
    v = rng.standard_normal(out64.dims)
    results = {}
    for dtype in (np.float32, F64):
        leaves = [sc.tensor(x, dtype) for x in xs]
        results[dtype] = sc.compile(tuple(sc.grad(build(*leaves), leaves, seed=v))).evaluate()
    scale = 1.0 + max(float(np.abs(g).max()) for g in results[F64])
    for g32, g64 in zip(results[np.float32], results[F64]):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=0, atol=1e2 * np.finfo(np.float32).eps * scale)


def _on(backend: str):
    """A profile sending every op the backend implements to it (the rest to DEFAULT.soft)."""
    from softcuda.backends import BACKENDS
    from softcuda.config import rules_config
    from softcuda.ops import CONFIGURABLE_OPS

    return rules_config({op: backend for op in CONFIGURABLE_OPS if op in BACKENDS[backend].ops})


def _backends():
    from softcuda.backends import BACKENDS

    return [
        pytest.param(b, marks=pytest.mark.cuda) if info.device == "cuda" else b
        for b, info in BACKENDS.items()
    ]


@pytest.mark.parametrize("backend", _backends())
def test_every_gradient_is_the_same_on_every_backend(backend):
    # Each case's gradients (forward and backward in one plan) with every op the backend runs
    # sent to it, in float32, against the float64 gradients of the default profile: within
    # float32 rounding of the gradients' scale.
    cfg = _on(backend)
    used = set()
    for name, build, _, shapes, domain in CASES:
        rng = np.random.default_rng(11)
        xs = [draw(rng, s, domain) for s in shapes]
        out64 = build(*[sc.tensor(x, F64) for x in xs])
        v = rng.standard_normal(out64.dims)
        leaves = [sc.tensor(x, F64) for x in xs]
        want = sc.compile(tuple(sc.grad(build(*leaves), leaves, seed=v))).evaluate()
        leaves = [sc.tensor(x, np.float32) for x in xs]
        grads = sc.grad(build(*leaves), leaves, seed=v.astype(np.float32))
        plan = sc.compile(tuple(grads), cfg, host_memory="pageable")
        used.update(step.backend_id for step in plan.steps)
        got = plan.evaluate()
        scale = 1.0 + max(float(np.abs(g).max()) for g in want)
        for g32, g64 in zip(got, want):
            assert g32.dtype == np.float32, name
            np.testing.assert_allclose(
                g32, g64, rtol=0, atol=1e2 * np.finfo(np.float32).eps * scale, err_msg=name
            )
    assert backend in used
