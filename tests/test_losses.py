"""log_softmax and cross_entropy: values and gradients against float64 at logit scales up to
1e4 on every CPU backend (and cuda_elementwise on a GPU), both target forms, and bad input in
one sentence at graph-build time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import softcuda as sc
from softcuda.config import rules_config
from softcuda.errors import ShapeError
from softcuda.ops import OPS

CPU = ["cpu_fallback", "cpu_blas", "cpu_threads"]


def _config(backend: str):
    cfg = rules_config({op: backend for op in ("log_softmax", "softmax", "mul", "sum", "mean",
                                                "neg", "exp", "sub")})  # fmt: skip
    if backend.startswith("cuda"):
        from softcuda.device import cuda_available

        ok, why = cuda_available()
        if not ok:
            pytest.skip(f"no usable GPU: {why}")
        cfg = dataclasses.replace(cfg, device={"type": "cuda"})
        cfg._device_checked = True
    return cfg


def _logits(rng, shape, scale, dtype):
    z = rng.standard_normal(shape) * scale
    return z.astype(dtype)


def _ref_log_softmax(z, axis):
    return OPS["log_softmax"].reference([z.astype(np.float64)], {"axis": axis})


@pytest.mark.parametrize(
    "backend", CPU + [pytest.param("cuda_elementwise", marks=pytest.mark.cuda)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 100.0, 1e4])
@pytest.mark.parametrize("axis", [-1, 0, None])
def test_log_softmax_matches_float64_at_any_scale(backend, dtype, scale, axis):
    rng = np.random.default_rng(int(scale) + (axis or 7))
    z = _logits(rng, (33, 257), scale, dtype)
    plan = sc.compile(sc.log_softmax(sc.tensor(z), axis), _config(backend))
    plan.poison()  # NaN in every buffer: an element no kernel writes shows
    got = plan.evaluate()
    want = _ref_log_softmax(z, axis)
    assert np.all(np.isfinite(got))
    eps = np.finfo(dtype).eps
    # |log_softmax| reaches 2 * scale: the float result is good to a few ulps of that
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps * (1 + 2 * scale))


@pytest.mark.parametrize(
    "backend", CPU + [pytest.param("cuda_elementwise", marks=pytest.mark.cuda)]
)
@pytest.mark.parametrize("form", ["indices", "probabilities"])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_cross_entropy_and_its_gradient_at_any_scale(backend, form, scale):
    rng = np.random.default_rng(3)
    z = _logits(rng, (16, 10), scale, np.float32)
    labels = rng.integers(0, 10, 16)
    onehot = np.eye(10, dtype=np.float32)[labels]
    if form == "probabilities":
        soft = rng.random((16, 10)).astype(np.float32)
        onehot = soft / soft.sum(axis=1, keepdims=True)
    logits = sc.tensor(z)
    target = labels if form == "indices" else sc.tensor(onehot)
    loss = sc.cross_entropy(logits, target)
    (grad,) = sc.grad(loss, [logits])
    value, g = sc.compile((loss, grad), _config(backend)).evaluate()
    z64 = z.astype(np.float64)
    logp = _ref_log_softmax(z64, -1)
    want = -np.mean(np.sum(onehot * logp, axis=1))
    assert np.isfinite(value)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6 * (1 + scale))
    np.testing.assert_allclose(g, (np.exp(logp) - onehot) / 16, rtol=1e-5, atol=1e-6)


def test_a_float32_cross_entropy_stays_finite_where_log_of_softmax_is_infinite():
    z = np.array([[0.0, 200.0, -300.0]], np.float32)
    naive = -sc.sum(sc.tensor(np.eye(3, dtype=np.float32)[[2]]) * sc.log(sc.softmax(sc.tensor(z))))
    with np.errstate(all="ignore"):
        assert not np.isfinite(sc.compile(naive).evaluate())  # 0 * log(0): NaN
    good = sc.compile(sc.cross_entropy(sc.tensor(z), np.array([2]))).evaluate()
    assert float(good) == pytest.approx(500.0)


def test_one_row_of_logits_takes_one_class_index():
    z = sc.tensor(np.array([1.0, 2.0, 3.0]))
    value = sc.compile(sc.cross_entropy(z, np.array(0))).evaluate()
    assert float(value) == pytest.approx(-(1.0 - np.log(np.exp([1, 2, 3]).sum())))


@pytest.mark.parametrize(
    ("logits", "target", "words"),
    [
        ((4, 3), np.array([0, 1, 2, 3]), "class index 3 is out of range for 3 classes"),
        ((4, 3), np.array([0, -1, 2, 1]), "class index -1 is out of range"),
        ((4, 3), np.array([0, 1, 2]), "shape (4,)"),
        ((4, 3), np.array([0.0, 1.0, 2.0, 1.0]), "integer array"),
        ((4, 3), "probs-wrong-shape", "must match the logits"),
        ((2, 4, 3), np.array([0, 1]), "(rows, classes)"),
    ],
)
def test_bad_targets_are_refused_in_one_sentence_naming_the_shapes(logits, target, words):
    z = sc.tensor(np.zeros(logits, np.float32))
    if isinstance(target, str):
        target = sc.tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError) as err:
        sc.cross_entropy(z, target)
    message = str(err.value)
    assert words in message and message.startswith("cross_entropy:")
    assert "\n" not in message


def test_log_softmax_refuses_an_axis_the_input_lacks():
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        sc.log_softmax(sc.tensor(np.zeros((2, 3), np.float32)), axis=2)


def test_log_softmax_is_in_explain_and_fuses_nothing_it_must_not():
    z = sc.tensor(np.zeros((4, 5), np.float32))
    plan = sc.compile(sc.cross_entropy(z, np.arange(4) % 5))
    assert "log_softmax" in plan.explain()
    np.testing.assert_allclose(plan.evaluate(), np.log(5.0), rtol=1e-6)


# ---- a softmax of its input times a number ----------------------------------------------------


def test_a_softmax_of_a_product_by_a_number_reads_the_product_s_input_with_its_scale():
    x = sc.tensor(np.ones((4, 5), np.float32))
    for node, op in (
        (sc.softmax(x * 0.125), "softmax"),
        (sc.log_softmax(2.0 * x, 0), "log_softmax"),
    ):
        assert node.op == op and node.a is x and node.attrs["scale"] in (0.125, 2.0)
    # a product by a tensor (even a 0-d one a user made) or a broadcast number-shaped column
    # stays a mul
    for other in (sc.tensor(np.float32(3.0)), sc.tensor(np.ones((4, 1), np.float32))):
        node = sc.softmax(x * other)
        assert node.a.op == "mul" and "scale" not in node.attrs
    assert "scale" not in sc.softmax(x + 1.0).attrs
    assert "softmax(x*0.125)" in sc.compile(sc.softmax(x * 0.125), placement="cpu").explain()


# on the GPU: a warp per row (600 x 40), a block per row, a thread per column (3 x 20000 along
# 0), the composed launches (few columns, everything)
SCALED_CASES = [((600, 40), -1), ((37, 300), -1), ((3, 5000), -1), ((3, 20000), 0),
                ((300, 37), 0), ((4, 9, 33), 1), ((7, 11), None)]  # fmt: skip


@pytest.mark.parametrize(
    "backend", CPU + [pytest.param("cuda_elementwise", marks=pytest.mark.cuda)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, axis", SCALED_CASES)
def test_a_scaled_softmax_is_the_softmax_of_the_mul_s_values_to_the_bit(
    backend, dtype, op, shape, axis
):
    # the kernel rounds x * scale as the mul does (no fused multiply-add into the subtraction
    # of the maximum), so its result is the one-op softmax's of the product, bit for bit
    rng = np.random.default_rng(len(shape) + shape[0])
    x = (rng.standard_normal(shape) * 30).astype(dtype)
    scale = 0.125 if dtype == np.float32 else 1 / 3
    x[0, 0] = np.nan if op == "softmax" else x[0, 0]
    cfg = _config(backend)
    fused = sc.compile(getattr(sc, op)(sc.tensor(x) * scale, axis), cfg)
    assert any(s.node is not None and s.node.attrs.get("scale") == scale for s in fused.steps)
    fused.poison()
    product = x * dtype(scale)  # numpy rounds the product in dtype, as the mul kernels do
    plain = sc.compile(getattr(sc, op)(sc.tensor(product), axis), cfg)
    got, want = fused.evaluate(), plain.evaluate()
    np.testing.assert_array_equal(got, want)
    ref = OPS[op].reference([product.astype(np.float64)], {"axis": axis})
    ok = np.isfinite(ref)
    eps = 64 * np.finfo(dtype).eps  # log_softmax near 0 is good to ulps of the row's spread
    np.testing.assert_allclose(got[ok], ref[ok], rtol=eps, atol=eps * (1 + np.nanmax(abs(product))))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_scaled_softmax_s_gradient_takes_the_scale(op):
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((6, 7))
    t = rng.standard_normal((6, 7))
    w = sc.tensor(w0)
    product = w * 2.5  # read as w scaled by the softmax's kernel, and still differentiable
    loss = sc.sum(getattr(sc, op)(product, axis=-1) * sc.tensor(t))
    grad, through = sc.grad(loss, [w, product])
    got, got_product = sc.compile((grad, through), placement="cpu").evaluate()

    def f(v):
        z = v * 2.5
        out = OPS[op].reference([z], {"axis": -1})
        return float(np.sum(out * t))

    want = np.zeros_like(w0)
    h = 1e-6
    for i in np.ndindex(w0.shape):
        up, down = w0.copy(), w0.copy()
        up[i] += h
        down[i] -= h
        want[i] = (f(up) - f(down)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got_product, want / 2.5, rtol=1e-6, atol=1e-8)
