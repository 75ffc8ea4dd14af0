"""The soft_init experiment: specs, machine detection, measuring, storage, the runner, and the
profile written from it (selection itself is ``softcuda.timings.select``).

The public face: ``run`` (a spec measured on this machine, its profile written; progress as
``events``, the outcome a ``SweepResult``), ``decide_again`` (a profile from a finished sweep's
CSV), ``recheck_profile`` (a profile's boundaries measured again), ``load_spec``/``spec_from_dict``
and ``detect``.  The names that load pandas (the runner, the profile, the recheck) are imported
on first use, so that ``softcuda --help`` does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import Any

from .events import (
    Event,
    KernelsCompiled,
    MeasuringDone,
    MeasuringStarted,
    PointStarted,
    SettlingDone,
    SettlingStarted,
    Skipped,
    Stopped,
    SweepResult,
    SweepStarted,
    Written,
)
from .machine import Machine, detect
from .spec import Spec, load_spec, spec_from_dict

_LAZY = {  # name: (module, its name there)
    "run": ("api", "run"),
    "decide_again": ("api", "decide_again"),
    "recheck_profile": ("recheck", "recheck"),  # (``recheck`` is the module's name)
    "Recheck": ("recheck", "Recheck"),
    "Sweep": ("runner", "Sweep"),
}

__all__ = [
    "Event",
    "KernelsCompiled",
    "Machine",
    "MeasuringDone",
    "MeasuringStarted",
    "PointStarted",
    "Recheck",
    "SettlingDone",
    "SettlingStarted",
    "Skipped",
    "Spec",
    "Stopped",
    "Sweep",
    "SweepResult",
    "SweepStarted",
    "Written",
    "decide_again",
    "detect",
    "load_spec",
    "recheck_profile",
    "run",
    "spec_from_dict",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(f".{module}", __name__), attribute)
