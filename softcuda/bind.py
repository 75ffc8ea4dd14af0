"""Binding, compile's last stage: every step prebound to the arrays it will read and write.

Each kernel step's backend ``make_kernel`` receives the exact arrays (views over the planned
arenas, a scalar constant as a number) and returns a zero-argument callable; copies and
transfers likewise.  Where a host step follows work queued on the plan's stream, a
synchronisation is baked in between, once per boundary; where the host steps after it spread
over the kernels' pool, the pool is woken just before it (``native.wake``), so that its threads,
asleep after the GPU's part of the plan, are spinning when the GPU is done (the cost model
prices a cpu_threads step with its threads spinning, as the sweep measures it).  The updates
come last (a device copy into a leaf's resident copy, or a host write into its own buffer),
then the copies home of updated leaves that are results.  What ``Plan.evaluate`` runs is the
list this builds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from . import backends
from .backends import cpu_threads, cuda_transfer, native
from .config import Config
from .errors import ConfigError
from .lower import Lowered
from .plan import (
    IN_PLACE,
    Buffer,
    Plan,
    Step,
    _bytes_view,
    _DeviceWriteback,
    _read_only,
    _Writeback,
)
from .tensor import Tensor


class _Views:
    """Each node's array over its home buffer, made once (a copy on another device, used
    rarely, is made where it is asked for)."""

    def __init__(self, home: dict[int, Buffer]) -> None:
        self.home = home
        self.made: dict[int, Any] = {}

    def __call__(self, node: Tensor, buf: Buffer) -> Any:
        if buf is not self.home[id(node)]:
            return buf.view(node)
        found = self.made.get(id(node))
        if found is None:
            found = self.made[id(node)] = buf.view(node)
        return found


def bind(lowered: Lowered, config: Config) -> Plan:
    """The plan of ``lowered``, every step bound and ready to run."""
    plan = lowered.plan
    on_gpu = "cuda" in plan._arenas or any(b.device == "cuda" for b in lowered.home.values())
    if on_gpu:  # kernels and transfers run on the plan's own stream (leaves kept there too)
        import cupy

        plan._stream = cupy.cuda.Stream(non_blocking=True)
    view = _Views(lowered.home)
    device_busy = _bind_steps(lowered, view, config)
    _bind_updates(lowered, view, device_busy)
    _hand_out(lowered, view)
    _watch(lowered)
    plan.allocated = True
    return plan


def _bind_steps(lowered: Lowered, view: _Views, config: Config) -> bool:
    """Bind every executed step in order; whether work is queued on the stream at the end."""
    plan = lowered.plan
    device_busy = False  # work queued on the stream since the last synchronize
    _prepare_fused(lowered, view, config)
    for at, (step, inputs, out, module) in enumerate(lowered.pending):
        on_host = step.on_host
        if on_host and device_busy:
            # Transfers are asynchronous (truly so from pinned memory): a host step must not
            # read a device->host result, nor overwrite arena bytes a host->device copy is
            # still reading, before the stream has caught up.  Baked here, once per boundary; a
            # pure CPU or pure CUDA chain gets none.
            team = pool_team(_host_segment(lowered.pending, at), config)
            if team > 1:  # woken while the GPU works: the wait below hides the wake-up
                plan._runs.append(partial(native.wake, team))
            plan._runs.append(plan._stream.synchronize)
        device_busy = not on_host
        if step.kind in ("h2d", "d2h"):  # transfers move whole buffers, as bytes
            in_arrays = [_bytes_view(buf) for _, buf in inputs]
            out_array = _bytes_view(out)
        else:
            in_arrays = [
                t.dtype.type(t.attrs["value"]) if buf is None else view(t, buf) for t, buf in inputs
            ]
            out_array = view(step.node, out)
        step.run = _prebind(step, module, in_arrays, out_array, plan, config)
        step.runs_as = getattr(step.run, "runs_as", None)
        plan._runs.append(step.run)
    return device_busy


def _host_segment(pending: list, at: int) -> list[Step]:
    """The host steps from ``pending[at]`` up to the next step queued on the stream."""
    found = []
    for step, *_ in pending[at:]:
        if not step.on_host:
            break
        found.append(step)
    return found


def pool_team(steps: list[Step], config: Config) -> int:
    """The most threads of the kernels' pool that one of ``steps`` may run on (1: none spreads
    over it), by the library's own rule (``native.team``, at most the profile's thread
    count).  A fused group bound for the native kernels says its work and what its chunks are
    cut from (``native_fused.Spec``); any other cpu_threads kernel is counted over its largest
    array (a reduction's input, an elementwise op's output) as flat elements, each member's
    weight (``native.weight``) added: at most the kernel's own team, never fewer, since waking
    one thread too many costs a spin and one too few the wake-up this is for.  cpu_threads'
    matmul is numpy's, which keeps its own threads."""
    team = 1
    for step in steps:
        if step.kind != "kernel" or step.backend_id != "cpu_threads" or step.node.op == "matmul":
            continue
        threads = _settings(step, cpu_threads, config).get("threads")
        threads = threads or cpu_threads.default_threads()
        group = step.group
        bound = getattr(group, "bound", None) if group is not None else None
        if bound is not None:
            work, items = bound.work, bound.items
        else:
            members = group.members if group is not None else [step.node]
            read = group.inputs if group is not None else step.node.inputs
            items = max([step.node.size, *(t.size for t in read)])
            work = items * max(1, sum(native.weight(m.op) for m in members))
        team = max(team, native.team(work, items, threads))
    return team


def _prepare_fused(lowered: Lowered, view: _Views, config: Config) -> None:
    """Every fused group's code made before the first is bound, one build per backend (a
    backend may compile all of a plan's groups at once: ``prepare_fused``)."""
    found: dict[int, tuple[Any, list]] = {}
    for step, inputs, out, module in lowered.pending:
        if step.group is None or not hasattr(module, "prepare_fused"):
            continue
        ins = [view(t, buf) for t, buf in inputs]
        extras = [view(m, buf) for m, buf in step.extra_out or ()]
        entry = (step.group, ins, view(step.node, out), extras)
        found.setdefault(id(module), (module, []))[1].append(entry)
    for module, groups in found.values():
        module.prepare_fused(groups)


def _bind_updates(lowered: Lowered, view: _Views, device_busy: bool) -> None:
    """The writebacks after every other step: device copies first (queued on the stream), then,
    once the stream has landed, the host writes and the copies home of results."""
    plan = lowered.plan
    for leaf, value, buf, step in lowered.sources:
        if step.device == "cuda":  # queued on the stream after every other step
            if step.backend_id == IN_PLACE:  # its kernel wrote the resident copy: no copy
                copy = None
            else:
                target = lowered.home[id(leaf)].view(leaf)
                copy = cuda_transfer.make_copy(view(value, buf), target)
            step.run = _DeviceWriteback(leaf, copy)
            plan._runs.append(step.run)
            device_busy = True
    on_host = [source for source in lowered.sources if source[3].device == "cpu"]
    if (on_host or lowered.refreshes) and device_busy:  # device copies and writes have landed
        plan._runs.append(plan._stream.synchronize)
    for leaf, value, buf, step in on_host:
        if step.backend_id == IN_PLACE:  # its kernel wrote the leaf: only what follows it
            step.run = partial(leaf._stored, view(leaf, lowered.home[id(leaf)]))
        else:
            step.run = _Writeback(leaf, view(value, buf))
        plan._runs.append(step.run)
    for leaf, step in lowered.refreshes:
        step.run = leaf._sync_host
        plan._runs.append(step.run)


def _hand_out(lowered: Lowered, view: _Views) -> None:
    """The arrays a run's results are read from.  Intermediate buffers are reused once dead, so
    only outputs (and leaves) keep ``data``.  A leaf's data (an output that is a leaf, or a view
    of one) stays read-only, also where a plan hands it out: new values go through assign,
    which the mirrors follow."""

    def handed_out(node: Tensor, buf: Buffer) -> Any:
        data = view(node, buf)
        leafs = id(buf) in lowered.leaf_of and buf.device == "cpu"  # (a device array: no flag)
        return _read_only(data) if leafs else data

    for node in lowered.roots:
        if not node.is_leaf:
            node.data = handed_out(node, lowered.home[id(node)])
    lowered.plan._out_views = [handed_out(node, buf) for node, buf in lowered.host_results]


def _watch(lowered: Lowered) -> None:
    """The leaves and pools the plan was bound to, which each run checks are still its own."""
    plan, order = lowered.plan, lowered.order
    leaves = {id(node): node for node in order if node.is_leaf}
    leaves.update((id(leaf), leaf) for leaf, _ in lowered.updates)  # updated, never read, too
    plan._leaves = [(node, node._allocation) for node in leaves.values()]
    plan._host_leaves = [
        node for node in order if node.is_leaf and lowered.home[id(node)].device == "cpu"
    ]
    used = [*plan._arenas.values(), *(allocation for _, allocation in plan._leaves)]
    plan._watch = list({id(a.pool): (a.pool, a.generation) for a in used}.values())


def _prebind(
    step: Step, module: Any, ins: list, out: Any, plan: Plan, config: Config
) -> Callable[[], Any]:
    node = step.node
    if step.kind == "kernel" and step.group is not None:
        settings = _settings(step, module, config)
        extras = [buf.view(m) for m, buf in step.extra_out or ()]
        return module.make_fused(step.group, ins, out, extras, **settings)
    if step.kind == "kernel":
        settings = _settings(step, module, config)
        return module.make_kernel(node.op, node.attrs, ins, out, **settings)
    if step.kind == "copy":
        if step.device == "cuda":
            return cuda_transfer.make_copy(ins[0], out)
        target = out.reshape(ins[0].shape)
        return partial(np.copyto, target, ins[0])
    return cuda_transfer.make_transfer(step.kind, ins[0], out, plan._stream)


def _settings(step: Step, module: Any, config: Config) -> dict[str, int]:
    """The profile's [device] settings a backend declares, checked by the backend (a thread
    count this machine cannot run is the profile's error, named by its line)."""
    found = {}
    for keyword, key in backends.BACKENDS[step.backend_id].settings:
        if key in config.device:
            value = int(config.device[key])
            problem = module.check_setting(keyword, value)
            if problem:
                raise ConfigError(config.path, config.lines.get(f"device.{key}"), problem)
            found[keyword] = value
    return found
