"""Bump pools: O(1) allocation, no per-tensor free, everything released at once by reset().

``alloc(nbytes)`` rounds the request up to the pool's alignment (64 B on the host, 256 B on
the device).  A request of more than a quarter of ``block_size`` gets a block of its own; a
smaller one bumps an offset inside the current block of its size class (sizes within a power
of two of each other), and when that block is full a new one is taken and the rest of the old
one left unused.  A block is held by the allocations made from it, not by the pool, so its
memory comes back once the last of them is dropped: a session that makes and drops leaves stays
bounded.  The classes are what keeps it bounded where some leaves outlive others: a small leaf
kept beside large ones made and dropped would otherwise hold a whole block of theirs, and a
loop keeping one scalar per step would keep a block per step.  A class's blocks hold 32 to 64
of its requests (at least 64 KiB, at most ``block_size``), so the few allocations of a class
that outlive their neighbours hold little more than themselves.  ``reset()`` drops the blocks
being filled and bumps ``generation``: an ``Allocation`` handed out before the reset refuses to
produce views afterwards, so stale data raises instead of being read.

The base class holds the bookkeeping; each kind of memory overrides two hooks, ``_new_block``
and ``_view`` (each kind of memory overrides only the small hooks).  Host pageable memory is a
numpy byte array; pinned host memory and device memory come from CuPy, imported only when such
a pool is made.  Device memory is taken with cudaMalloc directly (``cupy.cuda.Memory``), not
through CuPy's caching pool, so what the pool reports is what the device holds.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .device import host_memory_bytes
from .errors import PoolError
from .ops import contiguous_strides

HOST_ALIGNMENT = 64
SMALLEST_CLASS_BLOCK = 64 * 1024
DEVICE_ALIGNMENT = 256
PAGE = 4096
"""Host blocks start on a page: where a buffer sits, modulo a page, then follows from the
allocations made since the block began, not from the state of the C allocator underneath.
Two arrays at the same address modulo 4 KiB make the CPU stall a load behind an unrelated
store ("4K aliasing"), so the offsets between a point's buffers change how fast the CPU runs
it; with blocks on pages every run of a sweep gets the same offsets."""
DEFAULT_BLOCK_SIZE = 2 * 1024 * 1024
HOST_MEMORY_KINDS = ("pageable", "pinned")
RESETS = [0]
"""Resets of any pool in this process: a plan that saw the same count at bind needs no look at
its pools before a run (``Plan._check_fresh``, which every evaluate() pays)."""


@dataclass(frozen=True)
class PoolStats:
    used_bytes: int  # bytes handed out since the last reset (after alignment)
    peak_bytes: int  # largest used_bytes ever seen
    capacity_bytes: int  # bytes in blocks still alive (the current one, and any still in use)
    blocks: int
    allocations: int  # since the last reset
    generation: int


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class Allocation:
    """One bump-allocated region: (block, offset, nbytes) valid for one pool generation."""

    __slots__ = ("pool", "block", "offset", "nbytes", "generation")

    def __init__(self, pool: BumpPool, block: Any, offset: int, nbytes: int) -> None:
        self.pool = pool
        self.block = block
        self.offset = offset
        self.nbytes = nbytes
        self.generation = pool.generation

    @property
    def valid(self) -> bool:
        return self.generation == self.pool.generation

    def view(
        self,
        shape: tuple[int, ...],
        dtype: Any,
        strides: tuple[int, ...] | None = None,
        offset: int = 0,
    ):
        """An array over this region, ``offset`` bytes in; ``strides`` in elements (row-major
        when None)."""
        if not self.valid:
            raise PoolError(
                f"stale view: this {self.pool.kind} allocation belongs to pool generation "
                f"{self.generation}, but the pool was reset (now generation "
                f"{self.pool.generation})"
            )
        dtype = np.dtype(dtype)
        if strides is None:
            strides = contiguous_strides(shape)
        byte_strides = tuple(s * dtype.itemsize for s in strides)
        return self.pool._view(self.block, self.offset + offset, shape, dtype, byte_strides)


class BumpPool:
    """Bookkeeping shared by every kind of pool; subclasses provide the memory."""

    kind = "abstract"
    device = "cpu"
    alignment = HOST_ALIGNMENT

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise PoolError(f"block_size must be positive, got {block_size}")
        self.block_size = int(block_size)
        self.generation = 0
        # size class (the rounded request's bit length) -> [the block being filled, its
        # capacity, the bump offset inside it]
        self._filling: dict[int, list[Any]] = {}
        self._made: list[tuple[Any, int]] = []  # (a reference to each block, its capacity)
        self._used = 0
        self._peak = 0
        self._count = 0

    def alloc(self, nbytes: int) -> Allocation:
        if nbytes < 0:
            raise PoolError(f"cannot allocate {nbytes} bytes")
        size = _round_up(max(int(nbytes), 1), self.alignment)
        if 4 * size > self.block_size:  # a block of its own
            block, offset = self._take_block(size), 0
        else:
            size_class = size.bit_length()
            filling = self._filling.get(size_class)
            if filling is None or filling[2] + size > filling[1]:
                capacity = min(self.block_size, max(SMALLEST_CLASS_BLOCK, 32 << size_class))
                filling = self._filling[size_class] = [self._take_block(capacity), capacity, 0]
            block, offset = filling[0], filling[2]
            filling[2] += size
        allocation = Allocation(self, block, offset, int(nbytes))
        self._used += size
        self._peak = max(self._peak, self._used)
        self._count += 1
        return allocation

    def _take_block(self, capacity: int) -> Any:
        block = self._new_block(capacity)
        self._made = [(ref, cap) for ref, cap in self._made if ref() is not None]
        self._made.append((_reference(block), capacity))
        return block

    def reset(self) -> None:
        """Start afresh; every earlier Allocation becomes stale (and its block is freed once the
        last of them is dropped)."""
        self._filling = {}
        self._made = []
        self._used = 0
        self._count = 0
        self.generation += 1
        RESETS[0] += 1

    @property
    def stats(self) -> PoolStats:
        alive = [cap for ref, cap in self._made if ref() is not None]
        return PoolStats(
            used_bytes=self._used,
            peak_bytes=self._peak,
            capacity_bytes=sum(alive),
            blocks=len(alive),
            allocations=self._count,
            generation=self.generation,
        )

    # hooks ------------------------------------------------------------------------------------

    def _new_block(self, nbytes: int) -> Any:
        raise NotImplementedError

    def _view(self, block: Any, offset: int, shape, dtype, byte_strides):
        raise NotImplementedError


def _host_refusal(pool: BumpPool, nbytes: int, total: int, available: int) -> PoolError:
    return PoolError(
        f"the {pool.kind} pool asked for {format_bytes(nbytes)}, but this machine has "
        f"{format_bytes(total)} of memory, {format_bytes(available)} of it available"
    )


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB': sizes as a reader takes them in."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _reference(block: Any):
    """A weak reference to ``block`` where its type allows one; a block that cannot be watched
    (some CuPy objects) is counted as alive for as long as the pool's list holds it."""
    try:
        # a numpy view's base is the array that owns the memory (views of the block point
        # there, not at the block): that one lives as long as any of them
        owner = block.base if isinstance(block, np.ndarray) and block.base is not None else block
        return weakref.ref(owner)
    except TypeError:
        return lambda: block


def on_page(nbytes: int, offset: int = 0) -> np.ndarray:
    """``nbytes`` of pageable host memory (uint8) starting ``offset`` bytes past a page
    boundary: where it sits modulo PAGE is then chosen here, not by the C allocator."""
    raw = np.empty(nbytes + PAGE + offset, dtype=np.uint8)
    skip = (-raw.ctypes.data) % PAGE + offset
    return raw[skip : skip + nbytes]


class HostPool(BumpPool):
    """Pageable host memory: one numpy byte array per block, its start moved to a page."""

    kind = "host pageable"

    def _new_block(self, nbytes: int) -> np.ndarray:
        total, available = host_memory_bytes()
        if total and nbytes > total:  # cannot fit, whatever the kernel would promise
            raise _host_refusal(self, nbytes, total, available)
        try:
            return self._take(nbytes)
        except MemoryError:
            raise _host_refusal(self, nbytes, total, available) from None

    def _take(self, nbytes: int) -> np.ndarray:
        return on_page(nbytes)

    def _view(self, block, offset, shape, dtype, byte_strides):
        return np.ndarray(shape, dtype=dtype, buffer=block, offset=offset, strides=byte_strides)


class PinnedHostPool(HostPool):
    """Page-locked host memory from CuPy (cudaHostAlloc), viewed as numpy arrays."""

    kind = "host pinned"

    def _take(self, nbytes: int) -> np.ndarray:
        import cupy

        try:
            memory = cupy.cuda.alloc_pinned_memory(nbytes)
        except cupy.cuda.runtime.CUDARuntimeError:  # what the driver says when it has none
            raise MemoryError from None
        # the numpy array keeps the PinnedMemoryPointer alive through its buffer
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)


class DevicePool(BumpPool):
    """Device memory from cudaMalloc (``cupy.cuda.Memory``), viewed as CuPy arrays."""

    kind = "device"
    device = "cuda"
    alignment = DEVICE_ALIGNMENT

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, device_id: int | None = None) -> None:
        super().__init__(block_size)
        self.device_id = device_id  # None: the device current when a block is made

    def _new_block(self, nbytes: int):
        import cupy

        device = cupy.cuda.Device(self.device_id)  # Device(None) is the current device
        with device:
            try:
                return cupy.cuda.Memory(nbytes)
            except (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError):
                free, total = cupy.cuda.runtime.memGetInfo()
                raise PoolError(
                    f"the device pool asked CUDA device {device.id} for {nbytes} bytes, "
                    f"but only {free} of {total} bytes are free"
                ) from None

    def _view(self, block, offset, shape, dtype, byte_strides):
        import cupy

        pointer = cupy.cuda.MemoryPointer(block, offset)
        return cupy.ndarray(shape, dtype=dtype, memptr=pointer, strides=byte_strides)


def make_pool(device: str, block_size: int, host_memory: str = "pageable"):
    """The pool for ``device`` ("cpu" or "cuda": the current CUDA device); host pools follow
    ``host_memory``."""
    if device == "cuda":
        return DevicePool(block_size)
    if host_memory == "pinned":
        return PinnedHostPool(block_size)
    return HostPool(block_size)


_leaf_pool: HostPool | None = None


def leaf_pool() -> HostPool:
    """The host pool that ``sc.tensor`` and friends copy leaf data into."""
    global _leaf_pool
    if _leaf_pool is None:
        _leaf_pool = HostPool(DEFAULT_BLOCK_SIZE)
    return _leaf_pool
