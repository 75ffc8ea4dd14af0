"""What the machine can hold (softcuda.sweep.machine): available backends, the load average,
the memory check before settling."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from softcuda_cli import main

from softcuda.errors import SoftcudaError
from softcuda.sweep.runner import Sweep
from softcuda.sweep.spec import spec_from_dict
from tests.sweep_helpers import TINY, no_settling, one_error_line, write_spec


def test_no_available_backend_is_an_input_error(tmp_path):
    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is usable here")
    result = CliRunner().invoke(
        main, ["init", "--spec", str(write_spec(tmp_path, backends=["cuda_tiled"]))]
    )
    assert result.exit_code == 2 and "none of cuda_tiled is available" in result.output


def test_init_warns_when_other_work_loads_the_host(tmp_path, monkeypatch):

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 1.0, 0.5))
    result = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "load average       3.5 (1 min)" in result.output
    assert "warning: the load average is 3.5: other work is running" in result.output
    (meta,) = Path("results").glob("*/sweep-tiny-*.meta.json")
    assert json.loads(meta.read_text())["load_average_at_start"] == 3.5
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 1.0, 0.5))
    quiet = CliRunner().invoke(main, ["init", "--spec", str(write_spec(tmp_path))])
    assert quiet.exit_code == 0 and "warning: the load average" not in quiet.output


def test_a_spec_this_machine_cannot_hold_is_refused_before_settling(tmp_path, monkeypatch):
    """add at the documented maximum, 2^34 elements: 64 GiB a tensor.  The sweep settled,
    then died of a MemoryError drawing its inputs."""
    from softcuda import device

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    monkeypatch.setattr(device, "host_memory_bytes", lambda: (32 << 30, 16 << 30))
    ops = {"add": {"sizes": {"start": 1 << 34, "stop": 1 << 34, "per_octave": 1}}}
    spec = write_spec(tmp_path, settle_s=5, ops=ops, backends=["cpu_fallback"])
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", str(spec)]))
    # its inputs drawn once (2 x 64 GiB) and the one plan's inputs and output (192 GiB)
    assert "tiny.yaml: ops.add.sizes.stop: add at 17179869184 needs about 320.0 GiB" in line
    assert "this machine has 16.0 GiB available; lower stop" in line
    assert not Path("results").exists()


def test_the_memory_check_counts_the_copies_below_the_rotation_limit(tmp_path, monkeypatch):
    """add to 2^23 elements (96 MiB a point) is built once at its stop, but refinement can
    land just under 64 MiB, which is built buffers times: 8 copies need 0.5 GiB, not 96 MiB."""
    from softcuda import device

    monkeypatch.chdir(tmp_path)
    no_settling(monkeypatch)
    monkeypatch.setattr(device, "host_memory_bytes", lambda: (1 << 30, 300 << 20))
    ops = {"add": {"sizes": {"start": 1 << 23, "stop": 1 << 23, "per_octave": 1}}}
    reps = {**TINY["repetitions"], "buffers": 8}
    spec = write_spec(tmp_path, ops=ops, backends=["cpu_fallback"], repetitions=reps)
    line = one_error_line(CliRunner().invoke(main, ["init", "--spec", str(spec)]))
    # 5,592,405 elements: 12 bytes each is just under 64 MiB
    assert "ops.add.sizes.stop: add at 5592405 needs about 0.6 GiB of host memory" in line
    assert "8 copies of each (repetitions.buffers)" in line
    assert "lower stop or repetitions.buffers" in line and not Path("results").exists()


def test_the_memory_check_counts_the_bus(tmp_path, monkeypatch):
    """The bus holds a device buffer and a pinned and a pageable one of its largest size at
    once (2^36 B at most), and CuPy's pools keep them for the points measured after it."""
    from softcuda import device
    from softcuda.sweep.machine import Machine

    fields = {"type": "cuda", "name": "Fake GPU", "vram_mb": "8192"}
    gpu = Machine("cuda", 0, fields, "f" * 64, "gpu_name=Fake GPU", ("cpu_fallback", "cpu_blas"))

    def refused(bus_stop: int, op_stop: int, host_gib: float) -> str:
        monkeypatch.setattr(device, "host_memory_bytes", lambda: (1 << 40, int(host_gib * 2**30)))
        ops = {"add": {"sizes": {"start": 256, "stop": op_stop, "per_octave": 1}}}
        bus = {"start_bytes": 4, "stop_bytes": bus_stop, "per_octave": 1}
        spec = {**TINY, "backends": ["cpu_fallback"], "ops": ops, "bus": bus}
        with pytest.raises(SoftcudaError) as caught:
            Sweep(spec_from_dict(spec, "bus.yaml"), "bus.yaml", tmp_path, machine=gpu)
        return str(caught.value)

    # 16 GiB on a GPU of 8
    message = refused(1 << 34, 4096, 64)
    assert "bus.stop_bytes: the bus at 17179869184 B needs about 16.0 GiB of device" in message
    assert message.startswith("bus.yaml: ") and message.endswith("lower stop_bytes")
    # 4 GiB pinned and 4 pageable, kept while add at 2^26 (768 MiB) is measured after
    message = refused(1 << 32, 1 << 26, 8.6)
    assert "ops.add.sizes.stop: add at 67108864 needs about 9.2 GiB of host memory" in message
    assert "the bus's buffers of 4294967296 B" in message and "or bus.stop_bytes" in message
