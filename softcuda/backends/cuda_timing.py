"""Timing one step of a plan with CUDA events without timing the host that queues it.

An event pair measures the GPU's time between the two events.  When the stream is idle, the GPU
reaches the start event at once and then waits for the host to queue the step: that wait (the
host's launch cost, a few microseconds) is counted as the step's time, more or less of it from
one repetition to the next.  For microsecond kernels that race decided the median.

A ``Gate`` is queued first: a one-thread kernel that holds the stream for a set time, spinning
on the GPU's global timer.  The start event, the step and the end event are queued while it
spins, so the GPU finds them waiting.  ``held()`` checks that the gate was still spinning after
the end event was queued; when it was not, the GPU may have waited, and the caller lengthens
the gate and takes that repetition again.  (The gate's kernel is a timing tool, not a backend:
it is not in the kernel-source hash.)  CuPy is imported inside the functions: ``softcuda.plan``
imports this module on every machine.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_SOURCE = r"""
extern "C" __global__ void softcuda_gate(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""

START_NS = 50_000  # long enough for the host to queue an event, a step and an event
MAX_NS = 10_000_000  # past this a starved repetition is kept (a stalled host, not launch cost)

_kernel: Any = None
_gate: Gate | None = None
_lock = threading.Lock()


def _gate_kernel() -> Any:
    global _kernel
    if _kernel is None:
        with _lock:
            if _kernel is None:
                import cupy

                module = cupy.RawModule(code=_SOURCE)
                module.compile()
                _kernel = module.get_function("softcuda_gate")
    return _kernel


class Gate:
    """Holds a stream while the host queues a timed step behind it."""

    def __init__(self, ns: int = START_NS) -> None:
        import cupy

        self.ns = ns
        self.kernel = _gate_kernel()
        self.event = cupy.cuda.Event(disable_timing=True)
        self.retakes = 0

    def hold(self, stream: Any) -> None:
        """Queue the gate on ``stream`` (the current stream)."""
        self.kernel((1,), (1,), (np.uint64(self.ns),), stream=stream)
        self.event.record(stream)

    def held(self) -> bool:
        """True when the gate is still holding the stream, so that everything queued since
        ``hold`` was waiting on the GPU; else lengthen the gate for the next try and return
        False (once the gate is at MAX_NS, True: keep the repetition, and go back to
        START_NS).  A gate that held is shortened by 1/16, down to START_NS, so that one slow
        moment of the host does not lengthen every later repetition for good."""
        if not self.event.done:
            self.ns = max(START_NS, self.ns - self.ns // 16)
            return True
        if self.ns >= MAX_NS:  # a step that blocks the host: keep it, and start short again
            self.ns = START_NS
            return True
        self.ns = min(2 * self.ns, MAX_NS)
        self.retakes += 1
        return False


def shared_gate() -> Gate:
    """The process's gate (its length, once learned, serves every plan).  Its event belongs to
    the CUDA device current when it is made: a process profiles on one device (``--device N``
    selects it for the whole run), from one thread."""
    global _gate
    if _gate is None:
        _gate = Gate()
    return _gate
