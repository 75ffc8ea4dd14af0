"""Host bump pools: alignment, O(1) bumps, block chaining, reset with the generation check."""

from __future__ import annotations

import numpy as np
import pytest

from softcuda.errors import PoolError
from softcuda.pool import HOST_ALIGNMENT, PAGE, HostPool


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_alignment_and_bumping():
    pool = HostPool(block_size=4096)
    allocs = [pool.alloc(n) for n in (1, 63, 64, 65, 100)]
    offsets = [a.offset for a in allocs]
    # each request rounded up to 64 bytes, and bumped within the block of its size class:
    # 64 bytes, then 128
    assert offsets == [0, 64, 128, 0, 128]
    assert allocs[0].block is allocs[2].block and allocs[3].block is allocs[4].block
    assert allocs[0].block is not allocs[3].block
    for a in allocs:
        view = a.view((max(a.nbytes // 4, 1),), np.float32)
        assert address(view) % HOST_ALIGNMENT == 0
    assert pool.stats.used_bytes == 384 + 64 and pool.stats.allocations == 5


def test_every_host_block_starts_on_a_page_so_offsets_repeat_from_run_to_run():
    pool = HostPool(block_size=256)
    junk = [np.empty(n, dtype=np.uint8) for n in (24, 3000, 70_000)]  # stir the C allocator
    starts = []
    for n in (100, 200, 300, 5000, 200_000):
        view = pool.alloc(n).view((n,), np.uint8)
        starts.append(address(view) % PAGE)
    assert starts == [0, 0, 0, 0, 0]  # each of these opened a new block
    del junk


def test_views_share_the_block_and_do_not_overlap():
    pool = HostPool(block_size=1024)
    a, b = pool.alloc(64), pool.alloc(64)
    va, vb = a.view((16,), np.float32), b.view((16,), np.float32)
    va[:] = 1.0
    vb[:] = 2.0
    assert va.sum() == 16 and vb.sum() == 32
    strided = a.view((4, 4), np.float32, strides=(1, 4))
    assert strided.strides == (4, 16)


def test_block_chaining_when_full():
    pool = HostPool(block_size=256)
    kept = [pool.alloc(64) for _ in range(4)]
    assert pool.stats.blocks == 1
    kept.append(pool.alloc(64))  # the first block is full: a second one is taken
    assert pool.stats.blocks == 2
    big = pool.alloc(10_000)  # larger than a block: gets a block of its own size
    assert pool.stats.blocks == 3 and pool.stats.capacity_bytes >= 256 * 2 + 10_000
    big.view((2500,), np.float32)[:] = 3.0


def test_a_full_block_is_freed_once_its_allocations_are_dropped():
    pool = HostPool(block_size=256)
    first = [pool.alloc(64) for _ in range(4)]
    second = pool.alloc(64)
    assert pool.stats.blocks == 2
    del first
    assert pool.stats.blocks == 1 and pool.stats.capacity_bytes == 256
    assert second.view((16,), np.float32).shape == (16,)  # the block in use stays


def test_dropped_leaves_give_their_memory_back():
    """500 leaves of 4 MB made and dropped one after another: the pool holds a few, not 2 GB."""
    import gc

    import softcuda as sc
    from softcuda.pool import leaf_pool

    for i in range(500):
        x = sc.ones((1 << 20,))
        assert float(x.data[-1]) == 1.0
        del x
        if i % 100 == 0:
            gc.collect()
    assert leaf_pool().stats.capacity_bytes <= 3 * (4 << 20) + leaf_pool().block_size


def test_reset_releases_everything_and_stale_views_raise():
    pool = HostPool(block_size=256)
    a = pool.alloc(128)
    a.view((32,), np.float32)
    pool.alloc(200)
    peak = pool.stats.peak_bytes
    pool.reset()
    stats = pool.stats
    assert (stats.used_bytes, stats.blocks, stats.generation) == (0, 0, 1)
    assert stats.peak_bytes == peak
    assert not a.valid
    with pytest.raises(PoolError, match="stale view.*generation 0.*generation 1"):
        a.view((32,), np.float32)
    assert pool.alloc(16).offset == 0


def test_bad_requests():
    with pytest.raises(PoolError):
        HostPool(block_size=0)
    with pytest.raises(PoolError):
        HostPool().alloc(-1)


def test_the_device_pool_allocates_on_the_current_device(monkeypatch):
    """With a stand-in for CuPy whose current device is 1 (`softcuda init --device 1`): blocks
    are made there, and a refusal names that device (the pool used to pin device 0)."""
    import sys
    import types
    from types import SimpleNamespace

    from softcuda.pool import DevicePool

    entered = []

    class Device:
        def __init__(self, device=None):
            self.id = 1 if device is None else device

        def __enter__(self):
            entered.append(self.id)

        def __exit__(self, *exc):
            return False

    class OutOfMemory(Exception):
        pass

    def memory(nbytes):
        if nbytes > 1000:
            raise OutOfMemory
        return bytearray(nbytes)

    fake = types.ModuleType("cupy")
    fake.cuda = SimpleNamespace(
        Device=Device,
        Memory=memory,
        memory=SimpleNamespace(OutOfMemoryError=OutOfMemory),
        runtime=SimpleNamespace(CUDARuntimeError=RuntimeError, memGetInfo=lambda: (10, 20)),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    pool = DevicePool(block_size=512)
    pool.alloc(100)
    assert entered == [1]
    with pytest.raises(PoolError, match="asked CUDA device 1 for 2048 bytes"):
        pool.alloc(2000)


def test_a_block_alive_through_a_view_is_counted():
    pool = HostPool(block_size=256)
    a = pool.alloc(200)
    view = a.view((50,), np.float32)
    del a
    second = pool.alloc(200)  # a second block: the first lives on through the view alone
    assert pool.stats.blocks == 2
    assert view.shape == (50,) and second.valid


def _pool_after(step, steps: int) -> int:
    """The leaf pool's live capacity after ``steps`` calls of ``step``, from an empty pool."""
    import gc

    from softcuda.pool import leaf_pool

    leaf_pool().reset()
    kept = [step() for _ in range(steps)]
    gc.collect()
    capacity = leaf_pool().stats.capacity_bytes
    assert len(kept) == steps
    return capacity


def test_a_small_leaf_kept_beside_large_ones_dropped_holds_no_block_of_theirs():
    import softcuda as sc

    def step():
        big = sc.ones((1 << 18,))  # 1 MiB, made and dropped
        small = sc.tensor(np.float32(1.0))  # 4 bytes, kept
        del big
        return small

    assert _pool_after(step, 500) <= 4 << 20


def test_small_lazy_graphs_kept_hold_only_their_own_leaves():
    import softcuda as sc

    def step():
        big = sc.randn((512, 512), seed=0)  # 1 MiB leaf, dropped with the step
        total = float(big.sum().numpy())
        return sc.tensor([total]) * 2.0 + 1.0  # a small graph: its leaf and scalar leaves

    assert _pool_after(step, 300) <= 4 << 20
