"""The command line is options and printing over the library's public face: every softcuda
name a ``cli/`` module imports comes from a module the README documents as public (``PUBLIC``,
through what it exports) and none is underscored."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "cli"
PUBLIC = (
    "softcuda",
    "softcuda.sweep",
    "softcuda.analysis",
    "softcuda.timings",
    "softcuda.errors",
    "softcuda.config",
    "softcuda.costs",
    "softcuda.ops",
    "softcuda.backends",
    "softcuda.device",
    "softcuda.check",
)
"""The modules README.md ("Developing") names as public; a test holds the two lists together."""
PENDING: set[tuple[str, str]] = set()
"""(module, name) imports allowed for now that the rule above would refuse: none left."""


def _names_a_module(package: str, name: str | None) -> bool:
    """Whether ``from package import name`` takes a module of the package rather than a name
    it exports ("from softcuda import sweep" names a public one)."""
    if name is None or f"{package}.{name}" in PUBLIC:
        return False
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError:  # package is a module, not a package
        return False


def softcuda_imports(source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import of a softcuda name in ``source``, at any depth;
    name None for ``import module``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found += [(node.lineno, node.module or "", a.name) for a in node.names]
    return sorted(f for f in found if f[1] == "softcuda" or f[1].startswith("softcuda."))


def refusals(source: str, where: str) -> list[str]:
    bad = []
    for line, module, name in softcuda_imports(source):
        said = f"{where}:{line} imports {module}" + (f".{name}" if name else "")
        if (module, name) in PENDING:
            continue
        underscored = any(p.startswith("_") for p in [*module.split("."), name or ""])
        if underscored or module not in PUBLIC or _names_a_module(module, name):
            bad.append(said)
    return bad


def test_the_cli_imports_only_public_softcuda_names():
    bad = [
        refusal
        for path in sorted(CLI.glob("*.py"))
        for refusal in refusals(path.read_text(), f"cli/{path.name}")
    ]
    assert bad == []


def test_the_check_sees_internal_and_underscored_imports():
    source = (
        "import softcuda.sweep.runner\n"
        "from softcuda.timings.stats import curves\n"
        "from softcuda.sweep import _LAZY\n"
        "def f():\n    from softcuda import graph\n"
        "from softcuda import sweep, compile, Plan\n"
        "from softcuda.config import load_config\n"
    )
    assert refusals(source, "x.py") == [
        "x.py:1 imports softcuda.sweep.runner",
        "x.py:2 imports softcuda.timings.stats.curves",
        "x.py:3 imports softcuda.sweep._LAZY",
        "x.py:5 imports softcuda.graph",
    ]


def test_every_pending_name_is_still_imported():
    """A pending exception that no cli module uses any more is removed from the list."""
    used = {
        (module, name)
        for path in CLI.glob("*.py")
        for _, module, name in softcuda_imports(path.read_text())
    }
    assert PENDING - used == set()


def test_the_public_modules_are_the_readme_s():
    readme = (CLI.parent / "README.md").read_text()
    bullet = readme.split("- **Public modules:**", 1)[1].split("\n- ", 1)[0]
    named = [w.strip("`,;.") for w in bullet.split(";", 1)[0].split() if w.startswith("`")]
    assert sorted(named) == sorted(PUBLIC)
