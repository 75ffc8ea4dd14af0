"""compile / Plan: order, memo bit, baked backends, planned memory, nothing decided at run time."""

from __future__ import annotations

import numpy as np
import pytest

import softcuda as sc
from softcuda import backends, config, graph, pool
from softcuda.backends import cpu_fallback
from softcuda.errors import BackendUnavailable, PoolError, SoftcudaError

SPLIT = """\
[meta]
soft_version = 0.1.0
device_hash  = portable

[device]
type = cpu

[ops]
matmul | size < 100  = cpu_fallback
matmul | size >= 100 = cpu_blas
add    | any         = cpu_fallback

[pool]
device     = cpu
block_size = 4096
"""


def test_a_100000_node_chain_compiles_and_evaluates():
    x = sc.ones((2,))
    y = x
    for _ in range(100_000):
        y = y + x
    plan = sc.compile(y)
    np.testing.assert_allclose(plan.evaluate(), [100_001.0, 100_001.0])
    # only a handful of buffers are ever alive at once
    assert plan.stats.host_arena_bytes <= 4 * 64


def test_backend_baked_per_bucket_and_explained():
    cfg = config.parse_config(SPLIT, "split.soft")
    small = sc.randn((10, 10), seed=0) @ sc.randn((10, 10), seed=1)
    large = sc.randn((200, 200), seed=0) @ sc.randn((200, 200), seed=1)
    out = small.sum() + large.sum()
    plan = sc.compile(out, cfg)
    assert (small.backend_id, large.backend_id) == ("cpu_fallback", "cpu_blas")
    rows = {r["label"]: r for r in plan.rows()}
    assert rows[small.label]["decided_by"] == "split.soft:9"
    assert rows[large.label]["decided_by"] == "split.soft:10"
    assert rows[large.label]["bucket"] == "size >= 100" and rows[large.label]["size"] == 200
    assert rows[large.label]["flops"] == 2 * 200**3
    # sum is not in split.soft: DEFAULT.soft decides, and says so
    assert "DEFAULT.soft" in rows[out.a.label]["decided_by"]
    assert "not in split.soft" in rows[out.a.label]["decided_by"]
    text = plan.explain()
    for word in ("op", "shape", "size", "bucket", "backend", "device", "bytes", "decided by"):
        assert word in text.splitlines()[0]
    ref = (small.a.data @ small.b.data).sum() + (large.a.data @ large.b.data).sum()
    np.testing.assert_allclose(plan.evaluate(), ref, rtol=1e-4)


def test_shared_subexpression_runs_once_and_shows_once(monkeypatch):
    calls = []
    real = cpu_fallback._UNARY["exp"]
    monkeypatch.setitem(
        cpu_fallback._UNARY, "exp", lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    )
    x = sc.randn((4, 4), seed=0)
    h = sc.exp(x)
    out = (h + h) * h - h.sum()
    plan = sc.compile(out)
    assert sum(1 for r in plan.rows() if r["op"] == "exp") == 1
    plan.evaluate()
    assert len(calls) == 1
    assert h.evaluated and out.evaluated
    e = np.exp(x.data.astype(np.float64))
    np.testing.assert_allclose(plan.evaluate(), (e + e) * e - e.sum(), rtol=1e-5)


def test_evaluate_reads_no_config_looks_up_no_backend_allocates_nothing(monkeypatch):
    x = sc.randn((8, 8), seed=0)
    out = {"y": sc.tanh(x @ x.T + 1.0), "s": sc.mean(x, axis=0)}
    plan = sc.compile(out)
    expected = plan.evaluate()

    def forbidden(*args, **kwargs):
        raise AssertionError("decided at run time")

    monkeypatch.setattr(config.Config, "lookup", forbidden)
    monkeypatch.setattr(config, "load_config", forbidden)
    monkeypatch.setattr(backends, "get", forbidden)
    monkeypatch.setattr(pool.BumpPool, "alloc", forbidden)
    monkeypatch.setattr(pool.BumpPool, "_new_block", forbidden)
    again = plan.evaluate()
    np.testing.assert_array_equal(again["y"], expected["y"])
    with pytest.raises(AssertionError, match="run time"):  # the monkeypatches do bite
        sc.compile(x + 1.0)


def test_outputs_shaped_like_the_request_and_copied():
    x = sc.ones((2, 2))
    single = sc.compile(x * 3.0).evaluate()
    pair = sc.compile((x + 1.0, x - 1.0)).evaluate()
    named = sc.compile({"a": x.sum(), "b": x}).evaluate()
    assert isinstance(single, np.ndarray) and isinstance(pair, tuple) and set(named) == {"a", "b"}
    plan = sc.compile(x * 3.0)
    first = plan.evaluate()
    x.assign(np.full((2, 2), 2.0))
    second = plan.evaluate()
    assert first[0, 0] == 3.0 and second[0, 0] == 6.0  # the first result was not overwritten
    with pytest.raises(SoftcudaError, match="Tensor"):
        sc.compile([x, 3])


def test_memory_reuse_keeps_values_right():
    # a diamond with long-lived and short-lived buffers of different sizes
    x = sc.randn((64, 64), seed=3)
    a = sc.exp(x)
    b = sc.tanh(a @ x)
    c = sc.sigmoid(b) * a
    d = (c.sum(axis=0, keepdims=True) + b).max(axis=1)
    plan = sc.compile((d, a))
    got_d, got_a = plan.evaluate()
    X = x.data.astype(np.float64)
    A = np.exp(X)
    B = np.tanh(A @ X)
    Cc = 1 / (1 + np.exp(-B)) * A
    np.testing.assert_allclose(got_d, (Cc.sum(axis=0, keepdims=True) + B).max(axis=1), rtol=1e-4)
    np.testing.assert_allclose(got_a, A, rtol=1e-6)
    assert plan.stats.host_arena_bytes < plan.stats.planned_bytes


def test_strided_reshape_is_a_copy_and_contiguous_reshape_a_view():
    x = sc.randn((3, 4), seed=0)
    v = x.reshape(2, 6)
    c = x.T.reshape(12)
    plan = sc.compile((v * 1.0, c * 1.0))
    kinds = {r["label"]: r["backend"] for r in plan.rows()}
    assert kinds[v.label] == "view" and kinds[c.label] == "copy"
    got_v, got_c = plan.evaluate()
    np.testing.assert_array_equal(got_c, x.data.T.reshape(12))
    np.testing.assert_array_equal(got_v, x.data.reshape(2, 6))


def test_numpy_caches_until_a_leaf_changes(monkeypatch):
    x = sc.ones((3,))
    y = sc.exp(x)
    first = y.numpy()
    compiled = []
    real = graph.compile
    monkeypatch.setattr(graph, "compile", lambda *a, **k: compiled.append(1) or real(*a, **k))
    assert np.array_equal(y.numpy(), first) and compiled == []
    x.assign(np.zeros(3))
    np.testing.assert_allclose(y.numpy(), [1, 1, 1])


def test_a_reset_pool_makes_the_plan_refuse_to_run():
    x = sc.ones((4,))
    plan = sc.compile(x * 2.0)
    plan.evaluate()  # a run remembers the pools as it found them: the next run looks again
    pool.HostPool(1 << 20).reset()  # another pool's reset stops nothing
    np.testing.assert_array_equal(plan.evaluate(), [2, 2, 2, 2])
    plan._arenas["cpu"].pool.reset()
    with pytest.raises(PoolError, match="compile the graph again"):
        plan.evaluate()


def test_leaves_from_a_reset_leaf_pool_are_refused():
    x = sc.ones((4,))
    plan = sc.compile(x * 2.0)
    pool.leaf_pool().reset()
    with pytest.raises(PoolError):
        plan.evaluate()
    with pytest.raises(PoolError, match="reset"):
        sc.compile(x * 2.0)


def test_profile_times_every_executed_step():
    x = sc.randn((16, 16), seed=0)
    plan = sc.compile(sc.relu(x @ x))
    rows = plan.profile(repeat=3)
    timed = [r for r in rows if r["repetitions_s"]]
    assert [r["op"] for r in timed] == ["matmul", "relu"]
    assert all(len(r["repetitions_s"]) == 3 and r["median_s"] > 0 for r in timed)


def test_cuda_backend_without_cuda_fails_with_one_clear_sentence():
    ok, _ = backends.cuda_available()
    if ok:
        pytest.skip("a GPU is usable here")
    text = SPLIT.replace(
        "add    | any         = cpu_fallback", "add    | any         = cuda_elementwise"
    )
    text = text.replace("device_hash  = portable", "device_hash  = abc")
    cfg = config.parse_config(text, "gpu.soft")
    cfg._device_checked = True
    with pytest.raises(BackendUnavailable) as info:
        sc.compile(sc.ones((3,)) + 1.0, cfg)
    message = str(info.value)
    for words in (
        "add node",
        "cuda_elementwise",
        "gpu.soft:11",
        "softcuda init",
        "--config DEFAULT.soft",
    ):
        assert words in message


def test_plans_of_one_graph_under_different_profiles_coexist():
    """Any number of plans over the same tensors keep evaluating correctly, in any order, and
    all of them see a leaf's new values."""
    x, w = sc.randn((33, 17), seed=1), sc.randn((17, 9), seed=2)
    out = sc.sum(sc.relu(x @ w) * 2.0, axis=0)
    plans = [
        sc.compile(out),
        sc.compile(out, config.rules_config({"matmul": "cpu_fallback", "mul": "cpu_blas"})),
        sc.compile(out, config.rules_config({"matmul": "cpu_blas", "sum": "cpu_blas"})),
    ]
    rng = np.random.default_rng(3)
    for _ in range(3):
        xv, wv = rng.standard_normal((33, 17)), rng.standard_normal((17, 9))
        x.assign(xv)
        w.assign(wv)
        want = (np.maximum(xv.astype(np.float32) @ wv.astype(np.float32), 0) * 2).sum(axis=0)
        for plan in [*plans, *reversed(plans)]:
            np.testing.assert_allclose(plan.evaluate(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_leaf_s_data_is_read_only_new_values_go_through_assign():
    x = sc.ones((4,))
    plan = sc.compile(x * 2.0)
    with pytest.raises(ValueError, match="read-only"):
        x.data[0] = 5.0
    x.assign([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(x.data, [1, 2, 3, 4])
    np.testing.assert_array_equal(plan.evaluate(), [2, 4, 6, 8])


def test_a_leaf_whose_pool_was_reset_is_refused():
    x = sc.ones((4,))
    plan = sc.compile(x * 2.0)
    pool.leaf_pool().reset()
    with pytest.raises(PoolError, match="reset"):
        plan.evaluate()


def test_a_plan_compiled_without_memory_explains_and_refuses_to_run():
    x = sc.ones((4,))
    plan = sc.compile(sc.exp(x) * 2.0, allocate=False)
    assert plan.stats.host_arena_bytes > 0 and "exp" in plan.explain()
    assert not plan._arenas  # nothing was taken from a pool
    with pytest.raises(sc.SoftcudaError, match="allocate=False"):
        plan.evaluate()


def test_a_leaf_handed_out_by_a_plan_stays_read_only():
    """An output that is a leaf, or a view of one, is the leaf's own data: writing it would
    skip assign (and the pinned mirrors and numpy()'s cache with it)."""
    x = sc.tensor(np.arange(4.0, dtype=np.float32))
    plan = sc.compile((x, x.T, x * 2.0))
    assert not x.data.flags.writeable
    leaf, view, product = plan.evaluate(copy=False)
    assert not leaf.flags.writeable and not view.flags.writeable and product.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        leaf[0] = 100.0


def test_a_host_memory_kind_that_does_not_exist_is_refused():
    with pytest.raises(sc.SoftcudaError, match="host_memory must be one of pageable, pinned"):
        sc.compile(sc.ones((2,)) * 2.0, host_memory="paged")


def _race(call, threads: int = 2, rounds: int = 150) -> list:
    """Run ``call`` ``rounds`` times in each of ``threads`` threads at once; every result."""
    import threading

    results: list = []
    start = threading.Barrier(threads)

    def loop() -> None:
        start.wait()
        for _ in range(rounds):
            results.append(call())

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return results


def test_one_plan_evaluated_from_two_threads_gives_right_values():
    # A plan's buffers are planned once and reused every run: two runs at once would write the
    # same arena.  The plan serialises its runs.
    x = sc.randn((512, 512), seed=3)
    y = ((x * 0.1).exp() * 2 + x).sum(axis=1)
    expected = (np.exp(x.numpy() * np.float32(0.1)) * 2 + x.numpy()).sum(axis=1)
    plan = sc.compile(y)
    results = _race(plan.evaluate)
    wrong = sum(not np.allclose(r, expected, rtol=1e-4) for r in results)
    assert wrong == 0, f"{wrong} of {len(results)} runs were wrong"


def test_tensor_numpy_from_two_threads_gives_right_values():
    x = sc.randn((512, 512), seed=4)
    y = ((x * 0.1).exp() * 2 + x).sum(axis=1)
    expected = (np.exp(x.numpy() * np.float32(0.1)) * 2 + x.numpy()).sum(axis=1)
    values = x.numpy()

    def call() -> np.ndarray:
        x.assign(values)  # the same values, but a leaf changed: numpy() runs its plan again
        return y.numpy()

    results = _race(call)
    wrong = sum(not np.allclose(r, expected, rtol=1e-4) for r in results)
    assert wrong == 0, f"{wrong} of {len(results)} runs were wrong"
