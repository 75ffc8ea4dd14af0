"""cpu_threads: elementwise ops, reductions and softmax on native threads — the CPU at its best.

Every op but matmul runs on the native kernel layer (``native``): C++ loops the compiler
vectorizes, on the layer's pool of threads, compiled once per machine from the registry's
expressions.  A kernel takes the profile's thread count as its most and cuts its work into
chunks of at least a grain (``kernels/cpu.cpp``, SC_GRAIN), so a small op runs on the calling
thread alone and never pays for threads it does not use.  Reductions add float32 values in
float64 (per chunk, then across chunks), so long float32 sums stay accurate.

Matmul goes to numpy's BLAS, which runs its own threads (cpu_blas's kernel); the sweep measures
it once, as cpu_blas.

Where the native layer cannot be had (``native.unavailable()``: no compiler, an unwritable
cache, ``SOFTCUDA_NATIVE=0``) or a layout is not one it covers (pow of a strided view, a
softmax of a transposed one), the op runs cpu_fallback's one-thread kernel; the kernel says so
(``runs_as``), and ``Plan.explain()`` names it with the reason.

The thread count is a setting: ``[device] cpu_threads`` in the profile, else every core this
process may run on.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .. import groups as _groups
from ..device import usable_cores
from ..errors import SoftcudaError
from . import native, native_fused
from .cpu_fallback import Kernel, scaled_softmax, with_scaled_input
from .cpu_fallback import make_kernel as fallback_kernel


def default_threads() -> int:
    return usable_cores()


def check_setting(keyword: str, value: int) -> str | None:
    """Why the profile's ``threads`` cannot be used here, or None."""
    cores = usable_cores()
    if keyword == "threads" and not 1 <= value <= cores:
        return f"[device] cpu_threads = {value}, but this process may use 1 to {cores} cores"
    return None


def make_kernel(
    op: str, attrs: dict, inputs: list, out: np.ndarray, threads: int | None = None
) -> Kernel:
    threads = threads or default_threads()
    if op == "matmul":
        return partial(np.matmul, inputs[0], inputs[1], out)
    if scaled_softmax(op, attrs):
        return with_scaled_input(make_kernel, op, attrs, inputs, out, threads)
    run = native.kernel(op, attrs, inputs, out, threads)
    if run is not None:
        return run
    native.warn_once()
    fallback = fallback_kernel(op, attrs, inputs, out)
    reason = native.unavailable() or "a layout the native kernels do not cover"
    return _as_fallback(fallback, reason)


def _as_fallback(run: Kernel, reason: str) -> Kernel:
    """cpu_fallback's kernel, marked with why it runs in cpu_threads' place."""
    marked = partial(run)
    marked.runs_as = ("cpu_fallback", reason)  # type: ignore[attr-defined]
    return marked


def prepare_fused(found: list) -> None:
    """Build the kernels of a plan's fused groups ((group, inputs, out) each) in one compile,
    before the first is bound; a group whose walk the kernels do not cover is left to
    ``make_fused``'s fallback."""
    specs = []
    for group, inputs, out, extras in found:
        try:
            group.bound = native_fused.Spec(group, inputs, out, extras)
        except (ValueError, KeyError):
            continue
        specs.append(group.bound)
    if specs:
        native_fused.prepare(specs)


def make_fused(
    group, inputs: list, out: np.ndarray, extras: list = (), threads: int | None = None
) -> Kernel:
    """One fused group as one native kernel on the pool's threads; where that cannot be had
    (no compiler, a walk it does not cover, the machine's trouble while compiling), its members
    one by one with cpu_fallback's kernels into scratch arrays made here, marked as such
    (``runs_as``).  A group whose own code the compiler refuses raises SoftcudaError."""
    threads = threads or default_threads()
    reason = native_fused.unavailable()
    if reason is None:
        try:
            spec = group.bound
            same = isinstance(spec, native_fused.Spec) and [
                a.ctypes.data for a in (*spec.inputs, *spec.extras, spec.out)
            ] == [a.ctypes.data for a in (*inputs, *extras, out)]
            if not same:
                spec = native_fused.Spec(group, inputs, out, extras)
        except (ValueError, KeyError) as exc:
            reason = f"a fused walk the native kernels do not cover ({exc})"
        else:
            reason = native_fused.prepare([spec])
            broken = native_fused.failed(spec)
            if broken is not None:  # its code, not the machine: said, never run around
                raise SoftcudaError(_groups.refused(group, "", broken))
            run = native_fused.kernel(spec, threads) if reason is None else None
            if run is not None:
                return run
            reason = reason or "the fused kernel did not load"
            native._say_once(f"softcuda: fused CPU groups run op by op: {reason}")
    native.warn_once()
    return _as_fallback(_one_by_one(group, inputs, out, extras), reason)


def _one_by_one(group, inputs: list, out: np.ndarray, extras: list = ()) -> Kernel:
    """The group's members in order, each cpu_fallback's kernel, intermediate values in
    scratch arrays made now (a run allocates nothing)."""
    arrays = {id(t): a for t, a in zip(group.inputs, inputs)}
    written = {id(m): a for m, a in zip(group.extras, extras)}
    written[id(group.root)] = out
    runs = []
    for member in group.members:
        target = written.get(id(member))
        if target is None:
            target = np.empty(member.dims, member.dtype)
        ins = [
            t.dtype.type(t.attrs["value"]) if id(t) not in arrays else arrays[id(t)]
            for t in member.inputs
        ]
        runs.append(fallback_kernel(member.op, member.attrs, ins, target))
        arrays[id(member)] = target

    def run() -> None:
        for step in runs:
            step()

    return run
