"""Settling: the sweep waits for the machine to run fixed workloads at a steady speed, and
says when it never did.  Fake workloads and a fake clock: the logic is what is tested."""

from __future__ import annotations

import json

import pytest

from softcuda.sweep import settle as module


@pytest.fixture(autouse=True)
def short_windows(monkeypatch):
    monkeypatch.setattr(module, "WINDOW_S", 0.0)  # a window is then its 5 calls


def scripted(values):
    """A workload whose window medians follow ``values`` (seconds), then stay at the last."""
    calls = iter(v for v in values for _ in range(5))
    last = values[-1]
    return lambda: next(calls, last)


def test_settles_once_the_last_windows_agree():
    work = {"slow start": scripted([9e-6, 7e-6, 5e-6, 5.1e-6, 5e-6]), "flat": scripted([2e-3])}
    ticks = iter(range(100))
    result = module.settle(False, 60, work=work, clock=lambda: next(ticks))
    assert result.steady
    assert result.windows["slow start"] == pytest.approx([9, 7, 5, 5.1, 5])
    assert len(result.windows["flat"]) == 5  # every workload is timed each window
    assert "steady after" in result.summary() and "9 -> 5 us" in result.summary()


def test_gives_up_after_max_s_and_says_which_workload_moved():
    drifting = scripted([1e-6 * (1 + 0.1 * i) for i in range(1000)])
    ticks = iter(range(1000))
    result = module.settle(False, 10, work={"drift": drifting}, clock=lambda: next(ticks))
    assert not result.steady and result.seconds == 10 and len(result.windows["drift"]) == 10
    assert "not steady after 10.0 s" in result.summary() and "drift" in result.summary()
    assert result.spread()["drift"] == pytest.approx(1.9 / 1.7 - 1)


def test_zero_seconds_measures_nothing():
    called = []
    result = module.settle(False, 0, work={"x": lambda: called.append(1) or 1.0})
    assert not called and result.off and result.to_dict() == {"off": True}
    assert result.summary() == "settling off (settle_s 0): measuring at once"


def test_the_real_workloads_run_and_report_microseconds():
    times = module.canary(False, seconds=0.0)
    assert set(times) == {"cpu add 2^14", "cpu add 2^22", "cpu matmul 256"}
    assert all(0 < t < 1e6 for t in times.values())


def test_a_sweep_settles_before_measuring_and_records_it(tmp_path, monkeypatch):
    from softcuda.sweep import runner
    from softcuda.sweep.spec import spec_from_dict
    from tests.sweep_helpers import TINY

    order = []
    monkeypatch.setattr(
        runner,
        "settle",
        lambda cuda, max_s: (
            order.append(("settle", max_s))
            or module.Settled(1.5, True, {"w": [2.0, 1.0, 1.0, 1.0]})
        ),
    )
    measure = runner.Sweep.measure
    monkeypatch.setattr(
        runner.Sweep, "measure", lambda self, p: order.append("measure") or measure(self, p)
    )
    spec = spec_from_dict({**TINY, "settle_s": 7}, "tiny")
    sweep = runner.Sweep(spec, "tiny.yaml", tmp_path)
    sweep.run()
    assert order[0] == ("settle", 7.0) and order.count(("settle", 7.0)) == 1
    assert "measure" in order
    meta = json.loads(sweep.meta_path.read_text())
    assert meta["settle"] == {
        "seconds": 1.5,
        "steady": True,
        "window_median_us": {"w": [2, 1, 1, 1]},
    }
    assert meta["spec"]["settle_s"] == 7


def test_the_fixed_workloads_sit_at_fixed_offsets_modulo_a_page():
    junk = [bytearray(n) for n in (40, 3000, 90_000)]  # stir the C allocator
    for _ in range(3):
        a, b, c = module.operands(1 << 14)
        assert [x.ctypes.data % 4096 for x in (a, b, c)] == [0, 1024, 2048]
        assert a.dtype == c.dtype == "float32" and a.shape == (1 << 14,) and a[0] != b[0]
    del junk
