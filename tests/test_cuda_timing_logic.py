"""The gate's length rule, on the CPU: a fake event stands in for the CUDA one."""

from __future__ import annotations

from types import SimpleNamespace

from softcuda.backends.cuda_timing import MAX_NS, START_NS, Gate


def gate_with(ns: int, done: bool) -> Gate:
    gate = object.__new__(Gate)  # no CUDA: only the length rule is under test
    gate.ns, gate.retakes, gate.event = ns, 0, SimpleNamespace(done=done)
    return gate


def test_a_gate_that_held_shortens_to_no_less_than_its_start():
    gate = gate_with(16 * START_NS, done=False)
    assert gate.held() and gate.ns == 15 * START_NS
    gate = gate_with(START_NS, done=False)
    assert gate.held() and gate.ns == START_NS


def test_a_gate_the_host_outran_doubles_and_asks_for_the_step_again():
    gate = gate_with(START_NS, done=True)
    assert not gate.held() and gate.ns == 2 * START_NS and gate.retakes == 1


def test_at_its_longest_the_repetition_is_kept_and_the_gate_starts_short_again():
    gate = gate_with(MAX_NS, done=True)
    assert gate.held() and gate.ns == START_NS and gate.retakes == 0


def test_the_shared_gate_is_made_once_without_deadlock(monkeypatch):
    """With a stand-in for CuPy: making the first gate compiles its kernel under a lock, and a
    lock taken twice there hung the H200 run once."""
    import sys
    import threading
    import types

    from softcuda.backends import cuda_timing

    fake = types.ModuleType("cupy")
    module = SimpleNamespace(compile=lambda: None, get_function=lambda name: lambda *a, **k: None)
    fake.RawModule = lambda code: module
    fake.cuda = SimpleNamespace(Event=lambda **kwargs: SimpleNamespace(done=False))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(cuda_timing, "_kernel", None)
    monkeypatch.setattr(cuda_timing, "_gate", None)
    made = []
    worker = threading.Thread(target=lambda: made.append(cuda_timing.shared_gate()), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert made, "shared_gate() did not return within 5 s"
    assert cuda_timing.shared_gate() is made[0] and made[0].ns == START_NS
