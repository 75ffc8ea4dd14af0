"""compile(..., tune=True): the fastest measured of the candidate plans, the choice cached per
graph and profile (a second process measures nothing), a training step's updates applied once
per evaluate(), and a bad cache entry ignored with one warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_placement_graph import synthetic_profile

import softcuda as sc
from softcuda import tuning
from softcuda.errors import BackendUnavailable, SoftcudaError


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFTCUDA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SOFTCUDA_NATIVE", "0")  # no compile inside the timed plans here


def _graph(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = sc.tensor(rng.standard_normal((128, 128)).astype(np.float32))
    return sc.sum(sc.tanh(x @ x) * 2.0 + x)


def test_the_tuned_plan_is_the_fastest_measured_and_explain_says_so():
    cfg = synthetic_profile("cpu")
    plan = sc.compile(_graph(), cfg, tune=True)
    tuned = plan.tuned
    timed = {k: v for k, v in tuned["measured"].items() if isinstance(v, float)}
    assert set(timed) == {"graph", "cpu", "per-op"} and tuned["model"] == "graph"
    assert tuned["choice"] == min(timed, key=timed.get) and tuned["source"] == "measured"
    assert plan.placement == tuned["choice"] or plan.placement == "graph"
    assert "tuned: kept " + tuned["choice"] in plan.explain()
    want = sc.compile(_graph(), cfg).evaluate()
    np.testing.assert_allclose(plan.evaluate(), want, rtol=1e-5)


def test_the_choice_is_cached_and_a_bad_entry_is_ignored_with_one_warning(tmp_path):
    cfg = synthetic_profile("cpu")
    first = sc.compile(_graph(), cfg, tune=True).tuned
    again = sc.compile(_graph(), cfg, tune=True).tuned
    assert again["source"].endswith(".json") and again["choice"] == first["choice"]
    entry = Path(again["source"])
    entry.write_text("{ not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        redone = sc.compile(_graph(), cfg, tune=True).tuned
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and str(entry) in said[0] and "measuring again" in said[0]
    assert redone["source"] == "measured"
    data = json.loads(entry.read_text())  # rewritten whole
    data["version"] = "0.0.0"
    entry.write_text(json.dumps(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sc.compile(_graph(), cfg, tune=True).tuned["source"] == "measured"
    assert any("softcuda 0.0.0" in str(w.message) for w in caught)


def test_another_profile_or_graph_is_another_entry():
    cfg = synthetic_profile("cpu")
    sc.compile(_graph(), cfg, tune=True)
    assert sc.compile(_graph(1), cfg, tune=True).tuned["source"].endswith(".json")  # same shapes
    x = sc.tensor(np.ones((64, 64), np.float32))
    assert sc.compile(sc.sum(sc.tanh(x @ x)), cfg, tune=True).tuned["source"] == "measured"


def test_a_training_step_is_applied_once_per_evaluate_when_tuned():
    def step(tune: bool):
        rng = np.random.default_rng(4)
        x = sc.tensor(rng.standard_normal((32, 8)).astype(np.float32))
        w = sc.tensor(rng.standard_normal((8, 4)).astype(np.float32))
        loss = sc.mean(sc.square(sc.tanh(x @ w) - 0.5))
        plan = sc.compile(loss, synthetic_profile("cpu"), tune=tune,
                          updates=sc.optim.SGD([w], lr=0.1).minimize(loss))  # fmt: skip
        before = w.data.copy()
        plan.evaluate()
        return before, w.data.copy()

    (start_t, after_t), (start_u, after_u) = step(True), step(False)
    np.testing.assert_array_equal(start_t, start_u)  # tuning's runs left no update behind
    np.testing.assert_allclose(after_t, after_u, rtol=1e-6)  # and one evaluate is one step


def test_tune_needs_a_plan_that_runs():
    with pytest.raises(SoftcudaError, match="tune=True times the plans"):
        sc.compile(_graph(), synthetic_profile("cpu"), tune=True, allocate=False)


CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import numpy as np, softcuda as sc
    from test_placement_graph import synthetic_profile
    x = sc.tensor(np.ones((96, 96), np.float32))
    plan = sc.compile(sc.sum(sc.exp(x @ x * 0.001)), synthetic_profile("cpu"), tune=True)
    print(plan.tuned["source"], plan.tuned["choice"])
    """
)


def test_a_second_process_reuses_the_choice_without_measuring(tmp_path):
    code = CHILD.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "SOFTCUDA_CACHE": str(tmp_path / "shared")}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *sys.path])
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            for _ in range(2)]  # fmt: skip
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    first, second = (r.stdout.split()[-2:] for r in runs)
    assert first[0] == "measured" and second[0].endswith(".json")
    assert first[1] == second[1]
    assert len(list((tmp_path / "shared" / "tune").glob("*.json"))) == 1
    assert tuning.signature  # the module the cache is keyed by


def test_host_only_candidates_are_timed_before_any_keeps_a_leaf_on_the_gpu(monkeypatch):
    # A plan keeping a leaf on the GPU gives it a device copy for good, and every host update
    # is written through to it from then on: a host plan timed after such a compile read 5x
    # slower on the H100 (a 64-32-10 training step).  The candidates are first lowered without
    # memory to see which keep leaves there; those are compiled (and timed) last.  No GPU here:
    # their compile fails, and the order of the real compiles is what this checks.
    import softcuda.graph as graph

    cfg = synthetic_profile()  # a CUDA profile: the cuda candidate keeps the weight there
    rng = np.random.default_rng(1)
    w = sc.tensor(rng.standard_normal((256, 256)).astype(np.float32))
    x = sc.tensor(rng.standard_normal((256, 256)).astype(np.float32))
    loss = sc.mean(sc.square(sc.tanh(x @ w)))
    updates = sc.optim.SGD([w], lr=0.1).minimize(loss)
    made = []
    real = graph.compile

    def spy(*args, **kwargs):
        if kwargs.get("allocate", True) and not kwargs.get("tune"):
            made.append(kwargs.get("placement"))
        try:
            return real(*args, **kwargs)
        except ModuleNotFoundError:  # a leaf's copy on the GPU needs CuPy
            raise BackendUnavailable("no GPU here") from None

    monkeypatch.setattr(graph, "compile", spy)
    plan = sc.compile(loss, cfg, updates=updates, tune=True, host_memory="pageable")
    measured = plan.tuned["measured"]
    assert isinstance(measured["cpu"], float)
    assert str(measured["cuda"]).startswith("cannot")  # no GPU here
    # per-op keeps its leaves on the host (its products' kernels fail here all the same)
    assert made.index("cuda") > max(made.index("cpu"), made.index("per-op"))
    assert w._resident is None


def test_a_cache_folder_that_cannot_be_written_tunes_in_memory_and_says_so_once(
    tmp_path, monkeypatch
):
    # a regular file where the folder should be: mkdir fails even for root, as a read-only
    # home does for a user
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(tuning, "path", lambda key: blocker / "tune" / f"{key}.json")
    monkeypatch.setattr(tuning, "_in_memory", {})
    monkeypatch.setattr(tuning, "_said", set())
    cfg = synthetic_profile("cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = sc.compile(_graph(), cfg, tune=True)
        again = sc.compile(_graph(), cfg, tune=True)
        x = sc.tensor(np.ones((64, 64), np.float32))
        other = sc.compile(sc.sum(sc.tanh(x @ x)), cfg, tune=True)
    said = [str(w.message) for w in caught if "tuning cache" in str(w.message)]
    assert len(said) == 1, said
    assert str(blocker / "tune") in said[0] and "kept in memory" in said[0]
    assert first.tuned["source"] == "measured" and first.tuned["path"] == ""
    assert again.tuned["source"].startswith("in memory")  # not measured again
    assert again.tuned["choice"] == first.tuned["choice"]
    assert "from the tuning cache in memory" in again.explain()
    assert other.tuned["source"] == "measured"  # another graph: another key
    assert list(tmp_path.iterdir()) == [blocker]  # nothing half-written anywhere
    np.testing.assert_allclose(again.evaluate(), first.evaluate(), rtol=1e-6)
