"""One error hierarchy for everything softcuda refuses.

Every message is one sentence that names what was wrong and where (file and line, shapes, op and
backend).  The CLI turns these into exit codes; the library never exits.
"""

from __future__ import annotations

import reprlib
from typing import Any

EXCERPT_CHARS = 80
"""How much of a bad value an error message quotes: enough to recognise it, never the whole of
a value that a YAML alias or a damaged file made huge."""

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxother = 3, EXCERPT_CHARS, EXCERPT_CHARS
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8


def excerpt(value: Any) -> str:
    """``repr(value)`` cut to about EXCERPT_CHARS characters, ending in "…" where cut.  Built
    with ``reprlib``, whose limits per level keep the work bounded too: a plain repr of a
    nested alias bomb is gigabytes before anything could cut it."""
    return cut(_repr.repr(value))


def cut(text: str) -> str:
    """``text`` as an error message quotes it: at most EXCERPT_CHARS characters."""
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


class SoftcudaError(Exception):
    """Base of every error softcuda raises on purpose."""


class ConfigError(SoftcudaError):
    """A CONFIG.soft (or DEFAULT.soft) that cannot be used; names the file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class ShapeError(SoftcudaError, ValueError):
    """Shapes or dtypes that do not fit together, raised when the op is defined."""


class BackendUnavailable(SoftcudaError):
    """A backend that this machine cannot run (for example CUDA without a GPU)."""


class PoolError(SoftcudaError):
    """Misuse of a bump pool: a view that outlived a reset, a request that cannot be met."""


class SpecError(SoftcudaError):
    """A sweep spec (YAML) that cannot be used; names the file and the key."""


class DataError(SoftcudaError):
    """A results CSV or metadata file that cannot be read; names the file and what is missing."""


class ScriptError(SoftcudaError):
    """A graph script for ``softcuda run`` that is missing, has no build(), or raises."""


class PlacementError(SoftcudaError, ValueError):
    """A placement that cannot be made: an unknown placement name, a profile without the costs
    a graph placement needs (naming them and what to run), or a placement problem that cannot
    be solved (a node no device may run; names the node)."""


class OptimizerError(SoftcudaError, ValueError):
    """An optimizer that cannot be made or used: a learning rate or coefficient out of range, a
    parameter that is not a leaf, gradients that do not match the parameters."""
