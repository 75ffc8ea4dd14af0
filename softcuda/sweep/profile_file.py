"""The profile as a file: its header and its atomic write.

Below everything that writes a profile: the builder (``profile``), which decides one from a
sweep, and the ``[bus]`` calibrations (``calibrate``), which write one figure into an existing
profile.  It imports no other module of the sweep.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Config, write_config

HEADER = (
    "CONFIG.soft — written by `softcuda init`; the device profile of the machine below.",
    "Each rule's comment gives the contenders' median times and the crossover with its 95%",
    "interval. Re-run `softcuda init` on another machine; compare profiles with diff-config.",
)


def write_profile(config: Config, target: Path) -> None:
    """Write ``config`` to ``target`` atomically, under the profile's header."""
    write_config(config, target, HEADER)
