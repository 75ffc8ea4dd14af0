"""Fusion, compile's second stage, between placement and lowering.

It takes the placed graph and groups, per device, elementwise ops with at most one reduction
at the end (``softcuda.groups`` says which nodes may group and why) into one generated kernel
per group, run by the device's fusing backend (``CostModel.FUSING``: cpu_threads on the CPU,
through the native layer; cuda_elementwise on the GPU).  A group is kept where the cost model
prices it below its members' own steps, or where the plan is unpriced; it is dropped (its
members run one by one) where the model says fusing would not pay.  The plan's predicted total
is then the placement's, with each group's members replaced by the group.

Every placement fuses, per-op too: there each node's device is its rule's backend's, and a group
forms only among neighbours the rules put on one device.  ``compile(..., fuse=False)``
(``softcuda run --no-fuse``) keeps one kernel per node for comparison.  On the CPU a group needs
a C++ compiler (the native layer's); where there is none, CPU nodes are not fused.
"""

from __future__ import annotations

import math
import os

from . import backends
from . import groups as _groups
from .backends import native
from .config import Config
from .costs import CostModel
from .planner import Placed, RuleBook
from .tensor import Tensor


def cpu_fusable() -> bool:
    """Whether the CPU can run fused groups here (checked without compiling anything)."""
    return os.environ.get("SOFTCUDA_NATIVE", "1") != "0" and native.compiler() is not None


def fusing_devices(config: Config) -> tuple[str, ...]:
    """The devices whose groups a plan of ``config`` fuses: the GPU where the profile's machine
    has one, the CPU where it has a C++ compiler here."""
    found = ("cpu",) if cpu_fusable() else ()
    return found + (("cuda",) if config.device_type == "cuda" else ())


def fuse(
    placed: Placed,
    order: list[Tensor],
    roots: list[Tensor],
    updates: list[tuple[Tensor, Tensor]],
    costs: CostModel,
    enabled: bool = True,
    rules: RuleBook | None = None,
) -> Placed:
    """The placed graph with its fused groups (``Placed.groups``) and the predicted total that
    runs them.  Without a placement (a per-op plan the profile cannot price) each node's device
    is its rule's backend's, from ``rules``."""
    placement = placed.placement
    if not enabled or placement is None and rules is None:
        return placed
    kept = {id(r) for r in roots} | {id(v) for _, v in updates}
    fusing = fusing_devices(costs.config)

    def device_of(node: Tensor) -> str | None:
        if placement is None:
            device = backends.BACKENDS[rules.decision(node)[0]].device
        else:
            choice = placement.choices.get(id(node))
            device = None if choice is None else choice.device
        return device if device in fusing else None

    found = []
    priced = placement is not None and placement.predicted_s is not None
    change = 0.0
    for group in _groups.form(order, kept, device_of):
        own = [placement.choices[id(m)].predicted_s for m in group.members] if priced else []
        unfused = math.fsum(own) if priced and all(s == s for s in own) else math.nan
        seconds = costs.group_s(group.ops, group.size, group.arrays, group.device)
        if seconds is not None and group.device == "cuda":
            seconds = costs.issued_s(seconds)
        if seconds is None:
            seconds = math.nan
        if priced and seconds == seconds and unfused == unfused:
            if seconds >= unfused:
                continue  # the model says the members run faster one by one
            change += seconds - unfused
        group.predicted_s, group.unfused_s = seconds, unfused
        found.append(group)
    placed.groups = found
    if priced and found:
        placement.predicted_s = placement.predicted_s + change
    return placed
