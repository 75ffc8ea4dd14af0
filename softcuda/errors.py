"""One error hierarchy for everything softcuda refuses.

Every message is one sentence that names what was wrong and where (file and line, shapes, op and
backend).  The CLI turns these into exit codes; the library never exits.
"""

from __future__ import annotations


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
