"""Memory planning, compile's fourth stage: every buffer an offset in one arena per device.

Buffers are planned from each one's first and last use (a step writes it, the last step that
reads it gives it back) and sub-allocated into one aligned arena per device, taken from a bump
pool in one allocation (with ``allocate=False`` the arenas are only sized).
"""

from __future__ import annotations

import bisect

from .errors import PoolError
from .lower import Lowered
from .plan import Buffer, PlanStats
from .pool import DEVICE_ALIGNMENT, HOST_ALIGNMENT, _round_up, format_bytes, make_pool

_ALIGNMENT = {"cpu": HOST_ALIGNMENT, "cuda": DEVICE_ALIGNMENT}


def plan_memory(lowered: Lowered, block_size: int) -> None:
    """Give every non-leaf buffer an offset in its device's arena, reusing dead space.

    Walk the executed steps in order: place the buffer a step writes, then give back the
    buffers whose last reader it is (after placing, so that a step's output never shares
    memory with its inputs).  Outputs and leaves are never given back.
    """
    plan, order = lowered.plan, lowered.order
    arenas: dict[str, _Arena] = {}
    placed: list[Buffer] = []
    for index, (_, inputs, out, _) in enumerate(lowered.pending):
        arena = arenas.get(out.device)
        if arena is None:
            arena = arenas[out.device] = _Arena(_ALIGNMENT[out.device])
        if id(out) not in lowered.leaf_of:  # a leaf's own buffer (an update in place): its own
            out.offset = arena.take(_round_up(max(out.nbytes, 1), arena.alignment))
            placed.append(out)
        step = lowered.pending[index][0]
        for _, extra in step.extra_out or ():  # a fused group's other outputs, written with it
            if id(extra) in lowered.leaf_of:
                continue
            extra.offset = arena.take(_round_up(max(extra.nbytes, 1), arena.alignment))
            placed.append(extra)
        for _, buf in inputs:
            if buf is not None and buf.last == index and not buf.keep and not buf.freed:
                buf.freed = True
                arena = arenas[buf.device]
                arena.give(buf.offset, _round_up(max(buf.nbytes, 1), arena.alignment))
    plan.stats = PlanStats(
        host_arena_bytes=arenas["cpu"].end if "cpu" in arenas else 0,
        device_arena_bytes=arenas["cuda"].end if "cuda" in arenas else 0,
        planned_bytes=sum(a.taken for a in arenas.values()),
        leaf_bytes=sum(n.nbytes for n in order if n.op == "none"),
    )
    if not lowered.allocate:
        return
    allocations = plan._arenas
    for device, arena in arenas.items():
        pool = make_pool(device, block_size, plan.host_memory)
        try:
            allocations[device] = pool.alloc(arena.end)
        except PoolError as exc:
            raise PoolError(
                f"compile: the plan needs one {pool.kind} arena of "
                f"{format_bytes(arena.end)} ({arena.end} bytes): {exc}"
            ) from None
    for buf in placed:
        buf.allocation = allocations[buf.device]


class _Arena:
    """First-fit offsets inside one growing arena; freed ranges merge with their neighbours."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.end = 0
        self.taken = 0  # bytes handed out in all, as if nothing were reused
        self.free: list[list[int]] = []  # [offset, size], sorted by offset, never adjacent

    def take(self, size: int) -> int:
        """An offset for ``size`` bytes (already a multiple of the alignment)."""
        self.taken += size
        for i, span in enumerate(self.free):
            if span[1] >= size:
                offset = span[0]
                if span[1] == size:
                    del self.free[i]
                else:
                    span[0] += size
                    span[1] -= size
                return offset
        offset = self.end
        self.end += size
        return offset

    def give(self, offset: int, size: int) -> None:
        i = bisect.bisect_left(self.free, [offset, 0])
        self.free.insert(i, [offset, size])
        if i + 1 < len(self.free) and offset + size == self.free[i + 1][0]:
            self.free[i][1] += self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == offset:
            self.free[i - 1][1] += self.free.pop(i)[1]
