"""Measuring one point (softcuda.sweep.measure, measurer): copies of the inputs, hot and cold
timing, the last-level cache, the bus's transfers, the inputs drawn once."""

from __future__ import annotations

import sys

import pandas as pd

from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from softcuda.timings import schema
from tests.sweep_helpers import TINY


def test_buffers_spread_a_point_over_copies_with_their_own_data(tmp_path, monkeypatch):
    """...up to ROTATE_MAX_BYTES, and a point is timed hot while its data fits the last-level
    cache (``hot_max_bytes``): above it, it streams anyway."""
    from softcuda.sweep import measure

    compiled = []
    real = measure.compile_plan
    hot = []
    timed = measure.interleaved

    blocks = []

    def noting(groups, policy, hot=False, riders=0, settle=None, block_s=0.0, _noted=hot):
        _noted.append(hot)
        blocks.append(block_s)
        return timed(groups, policy, hot=hot, riders=riders, settle=settle, block_s=block_s)

    monkeypatch.setattr(measure, "interleaved", noting)

    def counting(out, config, kind):
        plan = real(out, config, kind)
        compiled.append((out.inputs[0], plan))
        return plan

    monkeypatch.setattr(measure, "compile_plan", counting)
    reps = {
        "warmup": 0,
        "min_time_s": 0.0,
        "min_reps": 4,
        "max_reps": 7,
        "buffers": 3,
        "retries": 0,
    }
    one = {"add": {"sizes": {"start": 256, "stop": 256, "per_octave": 1}}}
    spec = spec_from_dict({**TINY, "ops": one, "repetitions": reps}, "tiny")
    frame = Sweep(spec, "tiny.yaml", tmp_path / "a").run()
    frame = frame[frame["backend"] != "machine"]
    leaves = [leaf for leaf, _ in compiled]
    assert len(compiled) == 3 and len({id(leaf._allocation) for leaf in leaves}) == 3
    # min_time_s reached at once: rounds of 3 (one per copy) until min_reps 4 are taken
    assert len(frame) == 6 and list(frame["repetition"]) == list(range(6))
    assert hot == [True]
    assert blocks == [spec.repetitions.block_s] and blocks[0] > 0  # the spec's, passed on

    compiled.clear(), hot.clear()
    monkeypatch.setattr(measure, "ROTATE_MAX_BYTES", 0)  # every point too large to copy...
    frame = Sweep(spec, "tiny.yaml", tmp_path / "b").run()
    frame = frame[frame["backend"] != "machine"]
    # ...but inside the last-level cache: one copy, timed hot
    assert len(compiled) == 1 and len(frame) == 4 and hot == [True]

    compiled.clear(), hot.clear()
    monkeypatch.setattr(measure, "hot_max_bytes", lambda: 0)  # and larger than every cache
    Sweep(spec, "tiny.yaml", tmp_path / "b2").run()
    assert len(compiled) == 1 and hot == [False]

    # above the limit the plans of a point read one set of leaves: each would be a fresh
    # allocation of the point's inputs, and the data fits no cache to keep apart
    compiled.clear()
    two = {**TINY, "backends": ["cpu_fallback", "cpu_threads"], "ops": one, "repetitions": reps}
    Sweep(spec_from_dict(two, "tiny"), "tiny.yaml", tmp_path / "c").run()
    assert len(compiled) == 2 and compiled[0][0] is compiled[1][0]
    assert compiled[0][1] is not compiled[1][1]


def test_last_level_cache_reads_the_largest_size_linux_reports(tmp_path):
    from softcuda.sweep.measure import ROTATE_MAX_BYTES, hot_max_bytes, last_level_cache

    for index, size in (("index0", "48K"), ("index2", "2048K"), ("index3", "307200K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert last_level_cache(tmp_path) == 307200 << 10
    (tmp_path / "index4").mkdir()
    (tmp_path / "index4" / "size").write_text("1G")
    assert last_level_cache(tmp_path) == 1 << 30
    assert last_level_cache(tmp_path / "absent") == 0  # nothing said: 0, and the limit stays
    assert hot_max_bytes() >= ROTATE_MAX_BYTES


def test_rounds_keep_the_order_repetitions_were_taken_in():
    from softcuda.sweep.measure import _rounds

    assert _rounds([[1, 2, 3], [4, 5], [6, 7, 8]]) == [1, 4, 6, 2, 5, 7, 3, 8]


def test_the_bus_is_timed_with_the_plans_own_transfers(tmp_path, monkeypatch):
    """With a stand-in for CuPy: each host memory kind and direction issues one whole-buffer
    cudaMemcpyAsync per call between the host buffer and the device buffer, on the stream."""
    import types
    from types import SimpleNamespace

    calls = []
    runtime = SimpleNamespace(
        memcpyHostToDevice=1,
        memcpyDeviceToHost=2,
        memcpyAsync=lambda *args: calls.append(args),
    )

    class DeviceArray:
        def __init__(self, n, dtype):
            self.nbytes, self.data = n, SimpleNamespace(ptr=0xD000)

        def fill(self, value):
            pass

    stream = SimpleNamespace(ptr=77, synchronize=lambda: None)
    fake = types.ModuleType("cupy")
    fake.empty = DeviceArray
    fake.cuda = SimpleNamespace(
        runtime=runtime,
        get_current_stream=lambda: stream,
        alloc_pinned_memory=lambda n: bytearray(n),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    reps = {"warmup": 0, "min_time_s": 0.0, "min_reps": 2, "max_reps": 2}
    spec = spec_from_dict({**TINY, "repetitions": reps}, "tiny")
    rows = Sweep(spec, "tiny.yaml", tmp_path).measurer.bus(64)
    frame = pd.DataFrame(rows, columns=list(schema.COLUMNS))
    assert sorted(set(zip(frame["op"], frame["host_memory"]))) == [
        ("copy_d2h", "pageable"),
        ("copy_d2h", "pinned"),
        ("copy_h2d", "pageable"),
        ("copy_h2d", "pinned"),
    ]
    assert len(frame) == 8 and (frame["nbytes"] == 64).all()
    assert len(calls) == 8 and all(c[2] == 64 and c[4] == 77 for c in calls)
    h2d = [c for c in calls if c[3] == 1]
    d2h = [c for c in calls if c[3] == 2]
    assert len(h2d) == len(d2h) == 4
    assert all(c[0] == 0xD000 and c[1] != 0xD000 for c in h2d)  # device <- host
    assert all(c[1] == 0xD000 and c[0] != 0xD000 for c in d2h)  # host <- device


def test_inputs_are_views_of_one_draw_per_input_position():
    import numpy as np

    from softcuda.sweep.measure import Noise, point_inputs

    drawn = []

    class Counting:
        def standard_normal(self, count, dtype):
            drawn.append((count, np.dtype(dtype).name))
            return np.random.default_rng(len(drawn)).standard_normal(count, dtype=dtype)

    noise = Noise(Counting(), capacity=1000)
    f32 = np.dtype(np.float32)
    (a, b), shape, nbytes = point_inputs("add", 300, f32, noise)
    assert drawn == [(1000, "float32"), (1000, "float32")] and (shape, nbytes) == ("300", 3600)
    assert a.shape == b.shape == (300,) and not np.array_equal(a, b)
    (x,), _, _ = point_inputs("relu", 700, f32, noise)
    (m, n), shape, _ = point_inputs("matmul", 31, f32, noise)
    assert len(drawn) == 2 and shape == "31x31x31" and m.shape == (31, 31)
    assert np.shares_memory(x, a) and np.shares_memory(m, a) and np.shares_memory(n, b)
    assert not a.flags.writeable  # a point cannot change what the next one gets
    (log,), _, _ = point_inputs("log", 500, f32, noise)
    assert log.min() >= np.float32(0.1) and not np.shares_memory(log, a)
    point_inputs("add", 1500, f32, noise)  # more than the capacity: drawn again, larger
    point_inputs("add", 10, np.dtype(np.float64), noise)  # another dtype: its own draw
    assert drawn[2:] == [(1500, "float32"), (1500, "float32"), (1000, "float64"), (1000, "float64")]


def test_a_sweep_draws_its_inputs_once_at_its_largest_point(tmp_path):
    spec = spec_from_dict(TINY, "tiny")
    sweep = Sweep(spec, "tiny.yaml", tmp_path)
    assert sweep.noise.capacity == 64 * 64  # matmul n = 64 and add 4096 both hold 4096
    sweep.run()
    assert sorted(sweep.noise._arrays) == [(0, "<f4"), (1, "<f4")]
    assert {a.size for a in sweep.noise._arrays.values()} == {4096}


def test_softmax_is_swept_along_rows_as_graphs_hold_them():
    # one row of every element sat on one GPU block (and priced every softmax of a graph as
    # that); rows about SOFTMAX_SAMPLE_ROW long, along the last axis, with every element the
    # size asks for where a divisor allows and never more
    import numpy as np

    from softcuda.ops import SOFTMAX_SAMPLE_ROW as ROW
    from softcuda.sweep.measure import one_op_graph, point_shapes

    for op in ("softmax", "log_softmax"):
        assert point_shapes(op, 4096) == (
            [(4096 // ROW, ROW)],
            (4096 // ROW, ROW),
            f"{4096 // ROW}x{ROW}",
        )
        assert point_shapes(op, 50)[0] == [(1, 50)]  # shorter than a row: one row
        for size in (ROW + 1, 1448, 3 * ROW - 1, 1_000_003):
            ((rows, length),), _, _ = point_shapes(op, size)
            assert size - rows < rows * length <= size  # short of size by under a row count
            assert ROW <= length < 2 * ROW
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        node = one_op_graph(op, [x])
        assert node.attrs["axis"] in (-1, 1)  # along its rows
        assert point_shapes("add", 300)[1:] == ((300,), "300")  # other ops stay flat
