"""One ``[bus]`` figure measured on this machine and written into an existing profile.

The sweep measures the host's time to issue a GPU step (``launch``) and the GPU-to-CPU
hand-off (``switch``) at its end; a profile made before it did gets them from ``python -m
softcuda.sweep.launch PROFILE`` and ``python -m softcuda.sweep.switch PROFILE``, which share
this command: usage, the CUDA check and the profile's errors in one line each (exit 2), the
measurement, the line written with the rest of the profile as it was.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import backends
from ..config import load_config
from ..errors import SoftcudaError
from .profile_file import write_profile


def into_profile(
    argv: list[str],
    module: str,
    key: str,
    measure: Callable[[], dict[str, Any]],
    line_of: Callable[[dict[str, Any]], str | None],
    report: Callable[[dict[str, Any]], str],
) -> int:
    """``python -m softcuda.sweep.MODULE PROFILE``: ``measure()`` on this machine, its figures
    as ``[bus] KEY`` (``line_of``; None: figures the line cannot hold, exit 1) written into
    PROFILE, ``report`` of them printed beside it; exit 2 with one line without a usable GPU,
    on a bad profile or bad usage, the profile untouched."""
    what = f"{module} calibration"
    if len(argv) != 1:
        print(f"usage: python -m softcuda.sweep.{module} PROFILE", file=sys.stderr)
        return 2
    ok, why = backends.cuda_available()  # looked up per call: tests stand a GPU in
    if not ok:
        print(f"{what}: needs CUDA, but {why}", file=sys.stderr)
        return 2
    try:
        config = load_config(argv[0])
    except SoftcudaError as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        return 2
    found = measure()
    line = line_of(found)
    if line is None:  # the measurements keep their figures finite and >= 0: a bug
        print(f"{what}: no usable figures ({found.get('seconds')})", file=sys.stderr)
        return 1
    config.bus[key] = line
    write_profile(config, Path(argv[0]))
    print(f"{argv[0]}: [bus] {key} = {line}")
    print(report(found))
    return 0
