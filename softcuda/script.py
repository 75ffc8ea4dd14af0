"""Graph scripts for ``softcuda run``: a Python file with ``build()`` returning the outputs.

``build()`` returns a Tensor, a tuple of Tensors, or a dict of named Tensors, or a
``softcuda.Graph`` of such outputs and in-place updates (a training step).  The script is
imported under its own module name (not ``__main__``), so a script can still be run with plain
``python`` behind an ``if __name__ == "__main__":`` guard without that block running here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from .errors import ScriptError, SoftcudaError
from .graph import Graph, _normalize_outputs, _normalize_updates
from .tensor import Tensor


def load_graph(path: str | Path) -> Any:
    """Import ``path``, call its ``build()`` and return what it built."""
    script = Path(path)
    if not script.is_file():
        raise ScriptError(f"{script}: no such graph script")
    name = f"softcuda_script_{abs(hash(str(script.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, script)
    if spec is None or spec.loader is None:
        raise ScriptError(f"{script}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # The script may chdir or edit sys.path (its own business); the caller's relative paths
    # and imports must not notice.
    cwd, path = os.getcwd(), list(sys.path)
    sys.path.insert(0, str(script.parent.resolve()))
    try:
        spec.loader.exec_module(module)
        build = getattr(module, "build", None)
        if not callable(build):
            raise ScriptError(f"{script}: defines no build() function")
        outputs = build()
    except (ScriptError, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise ScriptError(
            f"{script}: called sys.exit({exc.code!r}) instead of returning from build()"
        ) from None
    except BaseException as exc:  # noqa: B036 - a script's own BaseException is its error too
        raise ScriptError(f"{script}: {_where(exc, script)}{type(exc).__name__}: {exc}") from exc
    finally:
        os.chdir(cwd)
        sys.path[:] = path
    _check_outputs(script, outputs)
    return outputs


def _where(exc: BaseException, script: Path) -> str:
    """'line N: ' for the deepest frame of the traceback inside the script, if any."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"line {exc.lineno}: "
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == script.resolve():
            line = frame.lineno
    return f"line {line}: " if line else ""


def _check_outputs(script: Path, outputs: Any) -> None:
    """What compile() accepts (``graph._normalize_outputs``), said as the script's error."""
    if isinstance(outputs, Graph):
        try:
            _normalize_updates(outputs.updates)
        except SoftcudaError as exc:
            raise ScriptError(
                f"{script}: build() returned a Graph whose updates cannot be compiled "
                f"({str(exc).removeprefix('compile: ')})"
            ) from None
        outputs = outputs.outputs
    if not isinstance(outputs, (Tensor, tuple, list, dict)):
        detail = f"it returned {type(outputs).__name__}"
    elif isinstance(outputs, dict) and not all(isinstance(k, str) for k in outputs):
        bad = next(k for k in outputs if not isinstance(k, str))
        detail = f"a dict's names must be strings, but one is {bad!r}"
    else:
        try:
            _normalize_outputs(outputs)
            return
        except SoftcudaError as exc:  # which output, or that there are none
            detail = str(exc).removeprefix("compile: ")
    raise ScriptError(
        f"{script}: build() must return a Tensor, a tuple or a dict of Tensors ({detail})"
    )
