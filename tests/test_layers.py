"""The experiment's layers read one way: ``sweep`` (measuring) and ``analysis`` (figures,
reports, comparisons) never import each other; what both need (the CSV schema, loading, the
statistics, selection) lives in ``timings``, which imports neither."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "softcuda"
FORBIDDEN = {
    "sweep": ("softcuda.analysis",),
    "analysis": ("softcuda.sweep",),
    "timings": ("softcuda.sweep", "softcuda.analysis"),
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, at any depth (a function-level
    import counts as much as one at the top)."""
    package = "softcuda." + ".".join(path.relative_to(PACKAGE).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the module's own package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # "from softcuda import analysis" imports the subpackage by its name
            found += [(node.lineno, module)] + [
                (node.lineno, f"{module}.{alias.name}") for alias in node.names
            ]
    return found


def crossings(layer: str) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, module in imported_modules(path)
        if any(module == f or module.startswith(f + ".") for f in FORBIDDEN[layer])
    ]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_it_must_not(layer):
    assert (PACKAGE / layer / "__init__.py").exists()
    assert crossings(layer) == []


def test_the_check_sees_a_cross_import(tmp_path, monkeypatch):
    """The parser resolves relative and absolute forms alike (else the test above would pass
    on anything)."""
    fake = tmp_path / "softcuda"
    (fake / "sweep").mkdir(parents=True)
    (fake / "sweep" / "bad.py").write_text(
        "from ..analysis import plots\nimport softcuda.analysis.report\n"
        "def f():\n    from softcuda import analysis\n"
    )
    (fake / "sweep" / "good.py").write_text("from ..timings import stats\nfrom . import spec\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert crossings("sweep") == [
        "softcuda/sweep/bad.py:1 imports softcuda.analysis",
        "softcuda/sweep/bad.py:1 imports softcuda.analysis.plots",
        "softcuda/sweep/bad.py:2 imports softcuda.analysis.report",
        "softcuda/sweep/bad.py:4 imports softcuda.analysis",
    ]
