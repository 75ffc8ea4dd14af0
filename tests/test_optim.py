"""Optimizers and in-place updates: SGD and Adam against float64 numpy references on every CPU
backend, a training step compiled once that allocates nothing per run, updates that read the
old values, the errors, and the two examples that train."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import softcuda as sc
from softcuda import backends, config, graph, pool
from softcuda.backends import BACKENDS, CPU_BACKENDS
from softcuda.config import rules_config
from softcuda.costs import CostModel
from softcuda.errors import OptimizerError, ShapeError, SoftcudaError
from softcuda.ops import CONFIGURABLE_OPS

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SHAPES = [(), (3,), (4, 5), (2, 3, 2)]
STEPS = 4


def on(backend: str) -> config.Config:
    """A profile sending every op the backend implements to it."""
    return rules_config({op: backend for op in CONFIGURABLE_OPS if op in BACKENDS[backend].ops})


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_optimizer(make, backend: str, dtype, seed: int = 0):
    """Every step's parameters from ``make(params)``'s updates, compiled once, with fresh
    random gradients assigned each step; and the gradients used, as float64."""
    rng = np.random.default_rng(seed)
    start = [rng.standard_normal(s) for s in SHAPES]
    params = [sc.tensor(x, dtype) for x in start]
    grads = [sc.tensor(np.zeros(s), dtype) for s in SHAPES]
    opt = make(params)
    plan = sc.compile({"p0": params[0] * 1.0}, on(backend), updates=opt.updates(grads))
    seen, used = [], []
    for _ in range(STEPS):
        step = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
        for g, values in zip(grads, step):
            g.assign(values)
        plan.evaluate()
        used.append([v.astype(np.float64) for v in step])
        seen.append([np.array(p.data) for p in params])
    return [x.astype(dtype).astype(np.float64) for x in start], used, seen


def sgd_reference(params, grads, lr, momentum):
    params, velocity, out = list(params), [np.zeros_like(p) for p in params], []
    for step in grads:
        for i, g in enumerate(step):
            velocity[i] = momentum * velocity[i] + g if momentum else g
            params[i] = params[i] - lr * velocity[i]
        out.append(list(params))
    return out


def adam_reference(params, grads, lr, betas, eps):
    b1, b2 = betas
    params = list(params)
    m, v, out = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params], []
    for t, step in enumerate(grads, start=1):
        for i, g in enumerate(step):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1**t), v[i] / (1 - b2**t)
            params[i] = params[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(list(params))
    return out


def close(seen, expected, dtype):
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    for step, (got, want) in enumerate(zip(seen, expected)):
        for i, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"step {step} p{i}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_sgd_matches_numpy(backend, momentum, dtype):
    lr = 0.05
    start, grads, seen = run_optimizer(lambda p: sc.optim.SGD(p, lr, momentum), backend, dtype)
    close(seen, sgd_reference(start, grads, lr, momentum), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.8)])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_adam_matches_numpy_with_bias_correction(backend, betas, dtype):
    lr, eps = 0.01, 1e-8

    def make(params):
        return sc.optim.Adam(params, lr=lr, betas=betas, eps=eps)

    start, grads, seen = run_optimizer(make, backend, dtype, seed=1)
    close(seen, adam_reference(start, grads, lr, betas, eps), dtype)
    # without the bias correction the first step would be lr * (1 - b1) / sqrt(1 - b2) times
    # as long: the reference above is not the only thing that could pass
    uncorrected = [
        p - lr * (1 - betas[0]) * g / (np.sqrt((1 - betas[1]) * g * g) + eps)
        for p, g in zip(start, grads[0])
    ]
    assert not np.allclose(seen[0][1], uncorrected[1], rtol=1e-3)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_minimize_steps_down_the_loss_gradient(backend):
    target = np.array([1.0, -2.0, 3.0])
    w = sc.tensor(np.zeros(3), np.float64)
    loss = sc.sum(sc.square(w - sc.tensor(target, np.float64)))
    plan = sc.compile(loss, on(backend), updates=sc.optim.SGD([w], lr=0.1).minimize(loss))
    first = plan.evaluate()
    np.testing.assert_allclose(w.data, 0.1 * 2 * target)  # w - lr * 2 (w - target)
    for _ in range(100):
        last = plan.evaluate()
    assert last < first * 1e-12
    np.testing.assert_allclose(w.numpy(), target, rtol=1e-6)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_a_training_step_compiles_once_and_allocates_nothing(monkeypatch, name):
    x = sc.tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    w, b = sc.randn((4, 3), seed=1), sc.zeros((3,))
    loss = sc.mean(sc.square(sc.tanh(x @ w + b)))
    opt = sc.optim.SGD([w, b], 0.1, momentum=0.9) if name == "SGD" else sc.optim.Adam([w, b])
    plan = sc.compile({"loss": loss}, updates=opt.minimize(loss))
    losses = [float(plan.evaluate()["loss"])]

    def forbidden(*args, **kwargs):
        raise AssertionError("decided at run time")

    for where, what in (
        (graph, "compile"),
        (graph, "topological_order"),
        (config.Config, "lookup"),
        (backends, "get"),
        (pool.BumpPool, "alloc"),
        (pool.BumpPool, "_new_block"),
    ):
        monkeypatch.setattr(where, what, forbidden)
    before = [np.array(w.data), *(np.array(s.data) for s in opt.state)]
    for _ in range(20):
        losses.append(float(plan.evaluate()["loss"]))
    assert losses[-1] < losses[0]
    after = [np.array(w.data), *(np.array(s.data) for s in opt.state)]
    assert all(not np.array_equal(a, c) for a, c in zip(before, after))  # state moves too
    with pytest.raises(AssertionError, match="run time"):  # the monkeypatches do bite
        sc.compile(x + 1.0)


def test_updates_read_the_old_values_and_everyone_sees_the_new():
    a = sc.tensor(np.array([1.0, 2.0]), np.float64)
    b = sc.tensor(np.array([10.0, 20.0]), np.float64)
    total = sc.sum(a * b)
    cached = total.numpy()
    other = sc.compile(a + b)  # another plan reading the same leaves
    plan = sc.compile({"a": a, "total": total}, updates={a: b * 1.0, b: a + b})  # a swap, and more
    got = plan.evaluate()
    np.testing.assert_array_equal(a.data, [10.0, 20.0])
    np.testing.assert_array_equal(b.data, [11.0, 22.0])  # from the old a, not the new one
    assert float(got["total"]) == 50.0  # computed before the updates
    np.testing.assert_array_equal(got["a"], [10.0, 20.0])  # an updated leaf: its new values
    assert cached == 50.0 and total.numpy() == 10 * 11 + 20 * 22  # the cache went stale
    np.testing.assert_array_equal(other.evaluate(), [21.0, 42.0])
    plan.evaluate()
    np.testing.assert_array_equal(a.data, [11.0, 22.0])
    np.testing.assert_array_equal(b.data, [21.0, 42.0])


def test_an_update_shows_in_the_plan_and_leaves_unread_still_get_written():
    counter = sc.zeros(())
    x = sc.ones((2,))
    plan = sc.compile(x * 2.0, updates={counter: sc.zeros(()) + 1.0})
    plan.evaluate()
    assert counter.data == 1.0
    text = plan.explain()
    assert "update" in text and f"into leaf {counter.label}" in text
    dry = sc.compile(x * 2.0, updates={counter: counter + 1.0}, allocate=False)
    assert "update" in dry.explain()


@pytest.mark.parametrize(
    ("updates", "error", "words"),
    [
        (lambda x, y: [(x, y)], SoftcudaError, "updates must be a dict of leaf -> new value"),
        (lambda x, y: {x + 1.0: y}, SoftcudaError, "is %\\d+, a add node"),
        (lambda x, y: {3: y}, SoftcudaError, "one key is a int"),
        (lambda x, y: {x: 2.0}, SoftcudaError, "must be a Tensor, got float"),
        (lambda x, y: {x: sc.ones((3,))}, ShapeError, r"\(\(3,\), float32\) must match"),
        (lambda x, y: {x: y, y: x}, SoftcudaError, "which is updated too"),
        (lambda x, y: {x: x}, SoftcudaError, "which is updated too"),
    ],
)
def test_bad_updates_are_one_sentence(updates, error, words):
    x, y = sc.ones((2,)), sc.zeros((2,))
    with pytest.raises(error, match=words) as caught:
        sc.compile(x + y, updates=updates(x, y))
    assert "\n" not in str(caught.value)


def test_a_graph_carries_updates_and_cannot_be_given_them_twice():
    x = sc.zeros((2,))
    step = sc.Graph(x + 1.0, {x: x + 1.0})
    plan = sc.compile(step)
    plan.evaluate()
    plan.evaluate()
    np.testing.assert_array_equal(x.data, [2.0, 2.0])
    with pytest.raises(SoftcudaError, match="updates are given twice"):
        sc.compile(step, updates={x: x - 1.0})


@pytest.mark.parametrize("lr", [0, -0.1, float("nan"), float("inf"), "0.1", True, None])
@pytest.mark.parametrize("make", [sc.optim.SGD, sc.optim.Adam])
def test_a_bad_learning_rate_is_one_sentence(make, lr):
    with pytest.raises(OptimizerError, match="the learning rate must be a finite positive num"):
        make([sc.zeros((2,))], lr=lr)


@pytest.mark.parametrize("make", [sc.optim.SGD, sc.optim.Adam])
def test_a_parameter_must_be_a_leaf(make):
    w = sc.zeros((2,))
    with pytest.raises(OptimizerError, match=r"parameter %\d+ is a mul node, not a leaf"):
        make([w * 2.0], lr=0.1)
    with pytest.raises(OptimizerError, match="is a constant"):
        make([w * 2.0][0].b, lr=0.1)
    with pytest.raises(OptimizerError, match="must be a leaf Tensor, but one is a ndarray"):
        make([np.zeros(2)], lr=0.1)
    with pytest.raises(OptimizerError, match="is given twice"):
        make([w, w], lr=0.1)
    with pytest.raises(OptimizerError, match="no parameters given"):
        make([], lr=0.1)
    opt = make(w, lr=0.1)  # one Tensor is a list of one
    with pytest.raises(OptimizerError, match="2 gradients for 1 parameters"):
        opt.updates([w, w])
    with pytest.raises(OptimizerError, match=r"must be a Tensor of its shape and dtype"):
        opt.updates([sc.zeros((3,))])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"momentum": 1.0}, "momentum must be a number in \\[0, 1\\)"),
        ({"momentum": -0.5}, "momentum must be a number in \\[0, 1\\)"),
        ({"momentum": float("nan")}, "momentum must be a number in \\[0, 1\\)"),
    ],
)
def test_bad_momentum(kwargs, words):
    with pytest.raises(OptimizerError, match=words):
        sc.optim.SGD([sc.zeros((2,))], 0.1, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"betas": (0.9, 1.0)}, "beta2 must be a number in \\[0, 1\\)"),
        ({"betas": (-0.1, 0.9)}, "beta1 must be a number in \\[0, 1\\)"),
        ({"betas": 0.9}, "betas must be a pair of numbers"),
        ({"eps": 0.0}, "the eps must be a finite positive number"),
    ],
)
def test_bad_adam_coefficients(kwargs, words):
    with pytest.raises(OptimizerError, match=words):
        sc.optim.Adam([sc.zeros((2,))], **kwargs)


def test_xor_learns_with_the_whole_step_in_one_plan():
    xor = example("xor")
    start = time.perf_counter()
    for seed in (0, 3):
        before, _ = xor.train(steps=0, seed=seed)
        loss, out = xor.train(seed=seed)
        assert loss < before / 100
        assert np.array_equal(out > 0.5, xor.Y > 0.5)  # all four cases right
    assert time.perf_counter() - start < 10.0


def test_xor_build_shows_the_updates_in_the_plan():
    step = example("xor").build()
    plan = sc.compile(step)
    kinds = [s.kind for s in plan.steps]
    assert kinds.count("update") == 8  # four parameters and their four velocities


def test_digits_reaches_97_percent():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the [digits] extra)")
    accuracy, loss, seconds = example("digits").train()
    assert accuracy >= 0.97, (accuracy, loss)
    assert seconds < 30.0


def test_digits_without_scikit_learn_says_how_to_install_it():
    code = (
        "import sys, runpy; sys.modules['sklearn'] = None; "
        f"runpy.run_path({str(EXAMPLES / 'digits.py')!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    said = done.stderr.strip().splitlines()
    assert said[-1] == (
        "examples/digits.py needs scikit-learn for its data: pip install 'softcuda[digits]'"
    )


@pytest.mark.cuda
@pytest.mark.parametrize("host_memory", ["pageable", "pinned"])
@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_updates_on_the_gpu_match_the_cpu(name, host_memory):
    def make(params):
        if name == "SGD":
            return sc.optim.SGD(params, 0.05, momentum=0.9)
        return sc.optim.Adam(params, lr=0.01)

    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()  # a CUDA profile (the tests' default, DEFAULT.soft, is not one)
    results = {}
    for placement in ("cpu", "cuda", "graph"):
        rng = np.random.default_rng(0)
        params = [sc.tensor(rng.standard_normal(s)) for s in SHAPES]
        x = sc.tensor(rng.standard_normal((5, 3)))
        w = sc.tensor(rng.standard_normal((3, 3)))
        loss = sc.sum(sc.tanh(x @ w)) + sum(sc.sum(sc.square(p)) for p in params)
        plan = sc.compile(
            loss,
            cfg,
            updates=make([*params, w]).minimize(loss),
            placement=placement,
            host_memory=host_memory,
        )
        if placement == "cuda":  # every update, and so every leaf it writes, on the GPU
            assert {s.device for s in plan.steps if s.kind in ("update", "kernel")} == {"cuda"}
        for _ in range(STEPS):
            plan.evaluate()
        results[placement] = [np.array(p.data) for p in [*params, w]]
    for placement in ("cuda", "graph"):
        for got, want in zip(results[placement], results["cpu"]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=placement)


@pytest.mark.parametrize("n", [64, 1024])
def test_graph_placement_keeps_updated_leaves_where_it_pays(n):
    # An updated leaf's home (where it is kept between runs) is placed with the rest of the
    # graph.  Keeping it on the host, its new value priced as an output and then copied into
    # the leaf's buffer there, is one of the plans the planner can choose, so the graph plan is
    # never predicted slower than that one; at 1024 the step runs on the GPU and the weights
    # and Adam's state stay there: no copy of them over the bus at all.
    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    x = sc.randn((n, n), seed=0)
    w = sc.randn((n, n), seed=1)
    loss = sc.mean(sc.square(sc.tanh(x @ w)))
    updates = sc.optim.Adam([w]).minimize(loss)
    plan = sc.compile(loss, cfg, updates=updates, placement="graph", allocate=False)
    on_host = sc.compile((loss, *updates.values()), cfg, placement="graph", allocate=False)
    host_writes = sum(CostModel(cfg, "pinned").update_s(w.size)[0] for w in updates)
    assert host_writes > 0
    assert plan.predicted_s <= (on_host.predicted_s + host_writes) * (1 + 1e-9)
    homes = {s.node.label: s.device for s in plan.steps if s.kind == "leaf"}
    writes = {s.node.label: s.device for s in plan.steps if s.kind == "update"}
    assert sorted(writes) == sorted(leaf.label for leaf in updates)
    assert all(writes[label] == homes.get(label, "cpu") for label in writes)
    copied = {s.node.label for s in plan.steps if s.kind in ("h2d", "d2h")}
    big = {leaf.label for leaf in updates if leaf.size > 1}  # w and Adam's moments of w
    if n == 1024:
        assert plan.predicted_s < (on_host.predicted_s + host_writes) * 0.99
        assert {writes[label] for label in big} == {"cuda"}
        assert not copied & {leaf.label for leaf in updates}
        assert not copied & {value.label for value in updates.values()}
        assert homes[x.label] == "cpu"  # a leaf that is not updated stays where it lives
    else:
        assert {writes[label] for label in big} == {"cpu"}


# ids without "cuda": that keyword marks a GPU test (conftest.py), and this one runs anywhere
@pytest.mark.parametrize("placement", ["cpu", "per-op", "cuda"], ids=["host", "per-op", "gpu"])
def test_one_device_placements_put_updated_leaves_on_that_device(placement):
    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    w = sc.randn((8, 8), seed=1)
    loss = sc.sum(sc.square(w))
    updates = sc.optim.SGD([w], 0.1).minimize(loss)
    plan = sc.compile(loss, cfg, updates=updates, placement=placement, allocate=False)
    want = "cuda" if placement == "cuda" else "cpu"
    assert [s.device for s in plan.steps if s.kind == "update"] == [want]
    assert [s.device for s in plan.steps if s.node is w and s.kind == "leaf"] == [want]


def test_a_gradients_own_constants_cannot_be_assigned():
    w = sc.randn((3,), seed=0)
    (g,) = sc.grad(sc.sum(w), [w])  # the ones the sum's gradient multiplies by
    ones = next(t for t in graph.topological_order([g]) if t.is_leaf and t.attrs.get("frozen"))
    with pytest.raises(ShapeError, match="constant that a gradient rule made"):
        ones.assign(np.zeros(3, np.float32))


@pytest.mark.cuda
@pytest.mark.parametrize("host_memory", ["pageable", "pinned"])
def test_weights_kept_on_the_gpu_read_and_write_like_host_leaves(host_memory):
    # The step keeps w on the GPU between runs; whatever reads w on the host (data, numpy(),
    # another plan, an output) sees its newest values, and assign reaches the GPU's copy.
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((5, 4)).astype(np.float32)
    x, w = sc.tensor(xv), sc.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    loss = sc.sum(sc.square(x @ w))
    sgd = sc.optim.SGD([w], 0.01)

    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()

    def compile_step(outputs):
        return sc.compile(
            outputs, cfg, updates=sgd.minimize(loss), placement="cuda", host_memory=host_memory
        )

    def reference(wv):  # one SGD step in float64
        x64 = xv.astype(np.float64)
        return wv - 0.01 * 2.0 * x64.T @ (x64 @ wv)

    step = compile_step(loss)
    assert [s.device for s in step.steps if s.node is w and s.kind == "leaf"] == ["cuda"]
    assert not [s for s in step.steps if s.kind in ("h2d", "d2h") and s.node is w]
    assert [s.device for s in step.steps if s.kind == "update"] == ["cuda"]
    wv = np.array(w.data, np.float64)
    for _ in range(3):
        step.evaluate()
        wv = reference(wv)
    np.testing.assert_allclose(w.numpy(), wv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.data, wv, rtol=1e-4, atol=1e-5)

    reader = sc.compile(w * 2.0, cfg, placement="cpu", host_memory=host_memory)
    np.testing.assert_allclose(reader.evaluate(), 2 * wv, rtol=1e-4, atol=1e-5)
    step.evaluate()
    wv = reference(wv)
    np.testing.assert_allclose(reader.evaluate(), 2 * wv, rtol=1e-4, atol=1e-5)

    w.assign(np.ones((4, 3), np.float32))
    wv = np.ones((4, 3))
    step.evaluate()
    wv = reference(wv)
    np.testing.assert_allclose(w.numpy(), wv, rtol=1e-4, atol=1e-5)

    again = compile_step(loss)  # a second plan keeping w there shares the same copy
    again.evaluate()
    step.evaluate()
    wv = reference(reference(wv))
    np.testing.assert_allclose(w.numpy(), wv, rtol=1e-4, atol=1e-5)

    both = compile_step((loss, w, w.T))  # an updated leaf and a view of it: new values
    _, got, got_t = both.evaluate()
    wv = reference(wv)
    np.testing.assert_allclose(got, wv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_t, wv.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.numpy(), wv, rtol=1e-4, atol=1e-5)
    # its copy home is one row of the plan, timed on the host clock like the rest
    (home,) = [s for s in both.steps if s.kind == "d2h" and s.node is w]
    timed = both.profile(repeat=2, warmup=0)
    assert len(timed[both.steps.index(home)]["repetitions_s"]) == 2
    for _ in range(2 + 1):  # two profiled runs, and one more to read
        wv = reference(wv)
    _, got, _ = both.evaluate()
    np.testing.assert_allclose(got, wv, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_a_training_step_kept_on_the_gpu_allocates_nothing_per_run(monkeypatch):
    import cupy

    rng = np.random.default_rng(5)
    x = sc.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    params = [sc.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 4), (4,))]
    loss = sc.mean(sc.square(sc.tanh(x @ params[0] + params[1])))
    from test_placement_graph import synthetic_profile

    updates = sc.optim.Adam(params).minimize(loss)
    step = sc.compile(loss, synthetic_profile(), updates=updates, placement="cuda")
    assert {s.device for s in step.steps if s.kind == "update"} == {"cuda"}
    step.evaluate()
    before = cupy.get_default_memory_pool().used_bytes()

    def refuse(*args, **kwargs):
        raise AssertionError("allocated during a run")

    monkeypatch.setattr(pool.BumpPool, "alloc", refuse)
    monkeypatch.setattr(graph, "compile", refuse)
    for _ in range(3):
        step.evaluate()
    assert cupy.get_default_memory_pool().used_bytes() == before


def test_a_leaf_updated_but_read_by_no_node_compiles_under_every_placement():
    # its home is the host, where the update writes it; a profile with costs once failed here
    from test_placement_graph import synthetic_profile

    counter, x = sc.zeros(()), sc.ones((2,))
    for placement in ("graph", "per-op", "cpu", "cuda"):
        sc.compile(
            x * 2.0,
            synthetic_profile(),
            updates={counter: sc.zeros(()) + 1.0},
            placement=placement,
            allocate=False,
        )
    q = sc.randn((3,), seed=0)
    (g,) = sc.grad(sc.sum(q), [q])  # the gradient of a sum never reads q
    plan = sc.compile((g,), synthetic_profile("cpu"), updates={q: g}, placement="graph")
    plan.evaluate()
    np.testing.assert_array_equal(q.numpy(), np.ones(3, np.float32))


def test_a_gradients_own_constants_cannot_be_updated():
    w = sc.tensor(np.full(3, 2.0, np.float32))
    (g,) = sc.grad(sc.sum(w), [w])
    ones = next(t for t in graph.topological_order([g]) if t.is_leaf and t.attrs.get("frozen"))
    with pytest.raises(SoftcudaError, match="constant that a gradient rule made"):
        sc.compile(g * 1.0, updates={ones: ones * 5.0})


def test_a_leaf_marked_behind_is_forgotten_when_it_goes():
    import gc
    import importlib

    tensor = importlib.import_module("softcuda.tensor")  # (softcuda.tensor is the function)

    leaf = sc.zeros((4,))
    key = id(leaf)
    tensor._behind[key] = tensor._behind_ref(leaf)
    del leaf
    gc.collect()
    assert key not in tensor._behind


def test_an_update_s_copy_into_its_leaf_is_priced_on_the_leaf_s_device():
    # The host plan with updates is the plan that returns the new values, plus one copy of
    # each into its leaf's buffer: priced as a single-threaded neg of its size (the host copy
    # is one numpy copy), and on the GPU as the fastest neg there.
    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    w = sc.randn((300, 70), seed=1)
    loss = sc.mean(sc.square(sc.tanh(w)))
    updates = sc.optim.Adam([w]).minimize(loss)
    costs = CostModel(cfg, "pinned")
    for placement, side in (("cpu", 0), ("cuda", 1)):
        plan = sc.compile(loss, cfg, updates=updates, placement=placement, allocate=False)
        bare = sc.compile((loss, *updates.values()), cfg, placement=placement, allocate=False)
        # (a host leaf whose kernel writes it in place has no copy)
        written = {id(s.node) for s in plan.steps if s.backend_id == "in place"}
        assert side == 1 or written  # Adam's elementwise update of w on the host
        copies = [costs.update_s(leaf.size)[side] for leaf in updates if id(leaf) not in written]
        assert all(c > 0 for c in copies)
        if side == 0:
            assert costs.update_s(w.size)[0] == costs.resident_s("neg", "cpu_fallback", w.size)
            assert plan.predicted_s == pytest.approx(bare.predicted_s + sum(copies), rel=1e-9)
        else:  # the new values stay on the GPU instead of coming home: no d2h of them
            assert plan.predicted_s < bare.predicted_s + sum(copies)


@pytest.mark.parametrize("placement", ["graph", "per-op", "cpu", "cuda"])
def test_explain_rows_add_up_to_the_predicted_total_with_updates(placement):
    # Every step the total counts has its own predicted time: the update copies too, each on
    # its leaf's home device, so a reader of explain() can add the rows up to the total.
    import math

    from test_placement_graph import synthetic_profile

    from softcuda.graph import format_seconds

    cfg = synthetic_profile()
    w = sc.randn((300, 70), seed=1)
    b = sc.zeros((70,))
    loss = sc.mean(sc.square(sc.tanh(w + b)))
    updates = sc.optim.Adam([w, b]).minimize(loss)
    plan = sc.compile(loss, cfg, updates=updates, placement=placement, allocate=False)
    writes = [s for s in plan.steps if s.kind == "update"]
    assert len(writes) == len(updates)
    for step in writes:
        if step.backend_id == "in place":  # its kernel wrote the leaf: no copy, nothing priced
            assert step.predicted_s == 0.0, step.label
            continue
        assert step.predicted_s > 0, step.label
        home = "cuda" if step.device == "cuda" else "cpu"
        priced = CostModel(cfg, "pinned").update_s(step.node.size)
        assert step.predicted_s == pytest.approx(priced[home == "cuda"], rel=1e-12)
    rows = sum(s.predicted_s for s in plan.steps if not math.isnan(s.predicted_s))
    assert rows == pytest.approx(plan.predicted_s, rel=1e-9)
    shown = plan.explain().splitlines()
    for step in writes:
        (line,) = [x for x in shown if f" {step.label} " in x]
        assert f" {format_seconds(step.predicted_s)} " in line


@pytest.mark.parametrize("placement", ["graph", "per-op", "cpu", "cuda"])
def test_an_updated_leaf_returned_as_a_result_has_its_copy_home_in_explain(placement):
    # A leaf kept on the GPU, updated and also returned: the plan refreshes its host copy
    # after the writebacks, a device->host copy the total counts, so explain() shows it as a
    # row of its own with that price, and the rows still add up to the total.
    import math

    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    w = sc.randn((300, 70), seed=1)
    loss = sc.mean(sc.square(sc.tanh(w)))
    updates = sc.optim.SGD([w], lr=0.1).minimize(loss)
    plan = sc.compile((loss, w), cfg, updates=updates, placement=placement, allocate=False)
    # the leaf and a view of it returned: one copy home between them
    twice = sc.compile((loss, w, w.T), cfg, updates=updates, placement=placement, allocate=False)
    assert twice.predicted_s == pytest.approx(plan.predicted_s, rel=1e-12)
    for found in (plan, twice):
        rows = sum(s.predicted_s for s in found.steps if not math.isnan(s.predicted_s))
        assert rows == pytest.approx(found.predicted_s, rel=1e-9)
    (write,) = [s for s in plan.steps if s.kind == "update"]
    home = [s for s in plan.steps if s.kind == "d2h" and s.node is w]
    if write.device == "cuda":
        (step,) = home
        assert len([s for s in twice.steps if s.kind == "d2h" and s.node is w]) == 1
        assert plan.steps.index(step) > plan.steps.index(write)  # after the writeback
        seconds = CostModel(cfg, "pinned").transfer_s("d2h", w.nbytes)
        assert step.predicted_s == pytest.approx(seconds, rel=1e-12)
        assert step.label in plan.explain()
    else:
        assert not home
    if placement == "cuda":
        assert home


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_float32_adam_bias_correction_is_pytorchs_over_500_steps(backend):
    # PyTorch keeps its moments in the parameter's dtype (so beta rounds to float32 there) but
    # computes 1 - beta^t in double.  With beta2 = 0.99999, a float32 beta^t is 1e-3 off in
    # 1 - beta2^t; a constant gradient makes the corrections cancel the moments' own scale, so
    # any such error shows in every step.
    lr, (beta1, beta2), eps, steps = 1e-2, (0.9, 0.99999), 1e-8, 500
    g = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    w = sc.zeros((64,), np.float32)
    grads = [sc.tensor(g, np.float32)]
    opt = sc.optim.Adam([w], lr=lr, betas=(beta1, beta2), eps=eps)
    plan = sc.compile({"w": w * 1.0}, on(backend), updates=opt.updates(grads))
    f32 = np.float32
    p, m, v = np.zeros(64, f32), np.zeros(64, f32), np.zeros(64, f32)
    worst = 0.0
    for t in range(1, steps + 1):
        plan.evaluate()
        # PyTorch's single-tensor Adam, float32 tensors, Python-float bias corrections
        m = m * f32(beta1) + g * f32(1 - beta1)
        v = v * f32(beta2) + g * g * f32(1 - beta2)
        step_size = f32(lr / (1 - beta1**t))
        denom = np.sqrt(v) / f32(math.sqrt(1 - beta2**t)) + f32(eps)
        p = p - step_size * m / denom
        worst = max(worst, float(np.max(np.abs(np.asarray(w.data) - p))) / (lr * t))
    assert worst < 2e-5, f"float32 Adam drifts {worst:.2e} of a step from PyTorch's formula"


# ---- updates written in place -----------------------------------------------------------------


def _in_place(plan) -> set[str]:
    return {s.node.label for s in plan.steps if s.kind == "update" and s.backend_id == "in place"}


@pytest.mark.parametrize("fuse", [True, False])
def test_a_host_update_is_written_in_place_only_where_no_later_step_reads_the_old_value(fuse):
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    # read by a later step: the copy after every step stays.  Fused, the later read is in the
    # same kernel, element for element before the write, and the kernel writes the leaf
    w = sc.tensor(x)
    new = w * 2.0
    plan = sc.compile(sc.sum(w + new), updates={w: new}, placement="cpu", fuse=fuse)
    assert _in_place(plan) == ({w.label} if fuse else set())
    assert float(plan.evaluate()) == pytest.approx(3 * x.sum())
    np.testing.assert_array_equal(w.numpy(), 2 * x)
    # ... or through a view of it, after: never in place
    w = sc.tensor(x)
    new = w * 2.0
    plan = sc.compile(sc.sum(w.T * new.T), updates={w: new}, placement="cpu", fuse=fuse)
    assert _in_place(plan) == set()
    assert float(plan.evaluate()) == pytest.approx(float(np.sum(x * 2 * x)))
    np.testing.assert_array_equal(w.numpy(), 2 * x)
    # read before it only: in place, and the values are the same run after run
    w = sc.tensor(x)
    plan = sc.compile(sc.sum(w), updates={w: sc.tanh(w) * 0.5 + w}, placement="cpu", fuse=fuse)
    assert _in_place(plan) == {w.label}
    assert "written into leaf" in plan.explain()
    for _ in range(3):
        before = w.numpy().copy()
        assert float(plan.evaluate()) == pytest.approx(float(before.sum()), rel=1e-6)
        np.testing.assert_allclose(w.numpy(), np.tanh(before) * 0.5 + before, rtol=1e-6)


def test_a_leaf_that_is_a_result_or_a_value_that_is_not_elementwise_is_not_written_in_place():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = sc.tensor(x)
    plan = sc.compile(w, updates={w: w + 1.0}, placement="cpu")
    assert _in_place(plan) == set()
    np.testing.assert_array_equal(plan.evaluate(), x + 1)  # a result that is an updated leaf
    np.testing.assert_array_equal(w.numpy(), x + 1)
    w = sc.tensor(x)
    plan = sc.compile(sc.sum(w), updates={w: sc.softmax(w, axis=1)}, placement="cpu")
    assert _in_place(plan) == set()  # a row's every element feeds each output
    plan.evaluate()
    np.testing.assert_allclose(w.numpy(), np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-6)


def test_adam_steps_in_place_match_the_steps_with_copies():
    rng = np.random.default_rng(4)
    start = [
        rng.standard_normal((64, 33)).astype(np.float32),
        rng.standard_normal(33).astype(np.float32),
    ]
    batch = rng.standard_normal((16, 64)).astype(np.float32)
    results = []
    for fuse in (True, False):
        params = [sc.tensor(v.copy()) for v in start]
        loss = sc.mean(sc.square(sc.tanh(sc.tensor(batch) @ params[0] + params[1])))
        opt = sc.optim.Adam(params, lr=0.01)
        plan = sc.compile(loss, updates=opt.minimize(loss), placement="cpu", fuse=fuse)
        losses = [float(plan.evaluate()) for _ in range(5)]
        results.append((losses, [p.numpy() for p in params], _in_place(plan)))
    (fused, fused_params, written), (plain, plain_params, _) = results
    assert len(written) >= 4  # both parameters and their moments
    np.testing.assert_allclose(fused, plain, rtol=1e-5)
    for a, b in zip(fused_params, plain_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _training_runs(build, steps: int = 3, placement: str = "cpu"):
    """build() -> (outputs, updates, params); the outputs of ``steps`` runs and the params."""
    from test_placement_graph import synthetic_profile

    outputs, updates, params = build()
    cfg = synthetic_profile() if placement == "cuda" else None  # a CUDA machine's profile
    plan = sc.compile(outputs, cfg, updates=updates, placement=placement)
    seen = [[np.array(v, copy=True) for v in plan.evaluate()] for _ in range(steps)]
    return seen, [p.numpy().copy() for p in params], plan


def _tied_mlp(optimizer: str):
    rng = np.random.default_rng(9)

    def build():
        w = sc.tensor(rng.standard_normal((12, 12)).astype(np.float32) * 0.3)
        b = sc.tensor(np.zeros(12, np.float32))
        x = sc.tensor(rng.standard_normal((5, 12)).astype(np.float32))
        h = sc.tanh(x @ w + b)
        y = h @ w.T  # the weight used twice, once through a view
        loss = sc.mean(sc.square(y - x))
        norm = sc.sum(sc.square(w))  # a result reading the weight
        opt = (
            sc.optim.Adam([w, b], lr=0.05)
            if optimizer == "adam"
            else sc.optim.SGD([w, b], lr=0.1, momentum=0.9)
        )
        return (loss, norm), opt.minimize(loss), [w, b]

    return build


@pytest.mark.parametrize(
    "optimizer, placement",
    [
        ("adam", "cpu"),
        ("sgd", "cpu"),
        pytest.param("adam", "cuda", marks=pytest.mark.cuda),
        pytest.param("sgd", "cuda", marks=pytest.mark.cuda),
    ],
)
def test_training_with_updates_in_place_matches_it_with_every_update_copied(
    optimizer, placement, monkeypatch
):
    import softcuda.lower as lower

    # the same seed for both: each build draws the same start
    with_in_place, params, plan = _training_runs(_tied_mlp(optimizer), placement=placement)
    assert _in_place(plan)  # something was written in place
    assert {s.device for s in plan.steps if s.backend_id == "in place"} == {placement}
    monkeypatch.setattr(lower, "in_place_candidates", lambda *args: {})
    copied, params_copied, plan_copied = _training_runs(_tied_mlp(optimizer), placement=placement)
    assert not _in_place(plan_copied)
    for a, b in zip(with_in_place, copied):
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)
    for u, v in zip(params, params_copied):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)


def _compare_in_place(build, monkeypatch, runs: int = 3):
    """build() -> (plan, leaves): every result and leaf after ``runs`` runs, in place against
    every update copied (in_place_candidates emptied)."""
    import softcuda.lower as lower

    def go():
        plan, leaves = build()
        outs = []
        for _ in range(runs):
            found = plan.evaluate()
            found = found if isinstance(found, (tuple, list)) else [found]
            outs.append([np.array(v, copy=True) for v in found])
        return outs, [leaf.numpy().copy() for leaf in leaves], plan

    got, leaves, plan = go()
    with monkeypatch.context() as m:
        m.setattr(lower, "in_place_candidates", lambda *args: {})
        want, want_leaves, _ = go()
    for a, b in zip(got, want):
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-6)
    for u, v in zip(leaves, want_leaves):
        np.testing.assert_allclose(u, v, rtol=1e-6)
    return plan


@pytest.mark.parametrize("fuse", [True, False])
def test_a_reader_in_a_fused_group_that_runs_after_the_write_keeps_the_copy(fuse, monkeypatch):
    start = np.arange(16, dtype=np.float32).reshape(4, 4) / 10

    def build():
        w = sc.tensor(start.copy())
        v = w * 0.5  # the new value
        r = w + 1.0  # reads the old w; fused with its reader below, it runs after v's kernel
        plan = sc.compile((r * v, v + 2.0), updates={w: v}, placement="cpu", fuse=fuse)
        return plan, [w]

    plan = _compare_in_place(build, monkeypatch)
    # unfused, w + 1 runs before the write (its product reads it, not w): in place is right
    assert _in_place(plan) == (set() if fuse else {plan.steps[0].node.label})


def test_a_new_value_another_update_takes_through_a_view_keeps_its_own_buffer(monkeypatch):
    start = np.arange(6, dtype=np.float32).reshape(2, 3)

    def build():
        a, b = sc.tensor(start.copy()), sc.tensor(start.T.copy())
        v = a * 2.0
        plan = sc.compile(sc.sum(a), updates={a: v, b: v.T}, placement="cpu")
        return plan, [a, b]

    plan = _compare_in_place(build, monkeypatch)
    assert _in_place(plan) == set()


@pytest.mark.parametrize("fuse", [True, False])
def test_a_leaf_kept_on_the_gpu_takes_its_new_value_in_place_where_the_host_would(fuse):
    # Lowered without memory (no GPU needed): a leaf kept on the GPU between runs is written by
    # its update's kernel on the GPU under the same conditions as a host leaf on the host
    from test_placement_graph import synthetic_profile

    cfg = synthetic_profile()
    rng = np.random.default_rng(3)
    w = sc.tensor(rng.standard_normal((64, 48)).astype(np.float32))
    b = sc.tensor(np.zeros(48, np.float32))
    x = sc.tensor(rng.standard_normal((32, 64)).astype(np.float32))
    loss = sc.mean(sc.square(sc.tanh(x @ w + b)))
    updates = sc.optim.Adam([w, b], lr=0.01).minimize(loss)
    plans = {
        where: sc.compile(loss, cfg, updates=updates, placement=where, allocate=False, fuse=fuse)
        for where in ("cpu", "cuda")
    }
    host = {s.node.label for s in plans["cpu"].steps if s.backend_id == "in place"}
    gpu = [s for s in plans["cuda"].steps if s.backend_id == "in place"]
    assert len(host) >= 2 and {s.node.label for s in gpu} == host
    assert {s.device for s in gpu} == {"cuda"}
    assert all(s.predicted_s == 0.0 for s in gpu)
    # the kernels that write them say so (profile() runs such a kernel once, never again)
    writers = [s for s in plans["cuda"].steps if s.writes_leaf]
    assert writers and all(s.kind == "kernel" and s.device == "cuda" for s in writers)
    assert "its host copy is behind" in plans["cuda"].explain()
    # a leaf the plan hands out is never written in place, on either device
    shown = sc.compile((loss, w), cfg, updates=updates, placement="cuda", allocate=False, fuse=fuse)
    assert w.label not in _in_place(shown)


@pytest.mark.cuda
@pytest.mark.parametrize("fuse", [True, False])
def test_gpu_updates_in_place_keep_the_values_of_copied_updates(fuse, monkeypatch):
    # the new values written into the leaves' GPU copies by their kernels: results, and the
    # leaves read back, match every update copied, run after run
    from test_placement_graph import synthetic_profile

    start = np.arange(1, 17, dtype=np.float32).reshape(4, 4) / 10

    def build():
        w, u = sc.tensor(start.copy()), sc.tensor(start.T.copy())
        new_w, new_u = w * 0.5 + u, sc.tanh(u) * 0.9
        plan = sc.compile(
            (sc.sum(w * u), sc.sum(w + 1.0) * new_w),
            synthetic_profile(),  # a CUDA machine's profile
            updates={w: new_w, u: new_u},
            placement="cuda",
            fuse=fuse,
        )
        return plan, [w, u]

    plan = _compare_in_place(build, monkeypatch)
    written = [s.device for s in plan.steps if s.backend_id == "in place"]
    assert written and set(written) == {"cuda"}


def test_a_new_value_read_on_the_other_device_keeps_its_own_buffer():
    # A reader on the other device copies the value's buffer; written in place, that buffer is
    # the leaf's, and the copy would be of the old value: a host leaf's copy to the GPU comes
    # from its pinned mirror (brought up to date at the run's end), and a GPU leaf's copy home
    # may be one made earlier for a reader of the leaf.  Found by a review; lowered without
    # memory here, the wrong reads are the copies' sources in explain()
    import dataclasses

    from test_placement_graph import synthetic_profile

    rng = np.random.default_rng(0)
    cfg = synthetic_profile()
    # per-op: the update's sub on the host (below the GPU rules' 2^17 elements), a product
    # reading the new value on the GPU
    w = sc.tensor(rng.standard_normal((64, 1024)).astype(np.float32))
    x = sc.tensor(rng.standard_normal((1024, 1024)).astype(np.float32))
    new = w - sc.tanh(w) * 0.01
    plan = sc.compile(sc.sum(new @ x), cfg, updates={w: new}, placement="per-op", allocate=False)
    assert _in_place(plan) == set()
    assert f"{new.label}>cuda" in {s.label for s in plan.steps if s.kind == "h2d"}
    # graph: the leaf kept on the GPU, its new value made there, and a log_softmax of both
    # the old and the new value on the host (the GPU's made dear here)
    for op in ("softmax", "log_softmax"):
        curve = cfg.costs[op]["cuda_elementwise"]
        slow = tuple(s * 100 for s in curve.seconds)
        cfg.costs[op]["cuda_elementwise"] = dataclasses.replace(curve, seconds=slow)
    w = sc.tensor(rng.standard_normal((64, 1024)).astype(np.float32))
    x = sc.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    new = w - x @ sc.tanh(w) * 0.01
    outs = (sc.sum(sc.log_softmax(w)), sc.sum(sc.log_softmax(new)))
    plan = sc.compile(outs, cfg, updates={w: new}, placement="graph", fuse=False, allocate=False)
    assert [s.device for s in plan.steps if s.node is w and s.kind == "leaf"] == ["cuda"]
    assert _in_place(plan) == set()
    assert {f"{w.label}>cpu", f"{new.label}>cpu"} <= {s.label for s in plan.steps}


def test_a_run_that_stops_after_an_in_place_write_leaves_the_leaf_reading_its_new_values():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    w = sc.tensor(x)
    plan = sc.compile(sc.sum(w), updates={w: w * 2.0}, placement="cpu")
    assert _in_place(plan) == {w.label}
    plan.evaluate()
    np.testing.assert_array_equal(w.numpy(), 2 * x)  # read, and cached

    def stop():
        raise KeyboardInterrupt

    (follow,) = [s.run for s in plan.steps if s.backend_id == "in place"]
    plan._runs.insert(plan._runs.index(follow), stop)  # the kernel has written w by then
    with pytest.raises(KeyboardInterrupt):
        plan.evaluate()
    np.testing.assert_array_equal(w.numpy(), 4 * x)  # not the cached 2x
