"""Graph scripts for ``softcuda run``: a Python file with ``build()`` returning the outputs.

``build()`` returns a Tensor, a tuple of Tensors, or a dict of named Tensors.  The script is
imported under its own module name (not ``__main__``), so a script can still be run with plain
``python`` behind an ``if __name__ == "__main__":`` guard without that block running here.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from .errors import ScriptError, SoftcudaError
from .graph import _normalize_outputs
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
    sys.path.insert(0, str(script.parent.resolve()))
    try:
        spec.loader.exec_module(module)
        build = getattr(module, "build", None)
        if not callable(build):
            raise ScriptError(f"{script}: defines no build() function")
        outputs = build()
    except ScriptError:
        raise
    except SystemExit as exc:
        raise ScriptError(
            f"{script}: called sys.exit({exc.code!r}) instead of returning from build()"
        ) from None
    except Exception as exc:
        raise ScriptError(f"{script}: {_where(exc, script)}{type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(script.parent.resolve()))
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
    if not isinstance(outputs, (Tensor, tuple, list, dict)):
        detail = f"it returned {type(outputs).__name__}"
    else:
        try:
            _normalize_outputs(outputs)
            return
        except SoftcudaError as exc:  # which output, or that there are none
            detail = str(exc).removeprefix("compile: ")
    raise ScriptError(
        f"{script}: build() must return a Tensor, a tuple or a dict of Tensors ({detail})"
    )
