"""The tree's layers read one way.  The core imports only downward (``CORE``, bottom up), and
no import circle exists anywhere in softcuda/ or cli/.  The experiment's ``sweep`` (measuring)
and ``analysis`` (figures, reports, comparisons) never import each other; what both need (the
CSV schema, loading, the statistics, selection) lives in ``timings``, which imports neither."""

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


# ---- the core, bottom up ---------------------------------------------------------------------
# Each layer imports only from layers below it (and from its own, for the modules of one
# package): the registry and the node, then the gradient rules, the profile's format, the cost
# model, the solver, the planner, the plan, compile's stages (fuse and lower, then memory and
# bind), compile itself, and the package face on top.  A module of softcuda/ outside
# this list belongs to the experiment (sweep, timings, analysis), which the core never imports.
CORE = (
    ("softcuda.errors", "softcuda.version"),
    ("softcuda.device",),
    ("softcuda.ops",),
    ("softcuda.groups",),
    ("softcuda.pool",),
    ("softcuda.backends",),
    ("softcuda.tensor",),
    ("softcuda.autograd",),
    ("softcuda.config",),
    ("softcuda.costs",),
    ("softcuda.placement",),
    ("softcuda.planner",),
    ("softcuda.plan",),
    ("softcuda.fuse", "softcuda.lower"),
    ("softcuda.memory", "softcuda.bind", "softcuda.tuning"),
    ("softcuda.graph",),
    ("softcuda.optim", "softcuda.script", "softcuda.check"),
    ("softcuda",),
)
ROOT = PACKAGE.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of softcuda/ and cli/ (cli as the package softcuda_cli installs it)."""
    found = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    for path in sorted((ROOT / "cli").glob("*.py")):
        found["softcuda_cli" if path.stem == "__init__" else f"softcuda_cli.{path.stem}"] = path
    return found


def edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports (a name imported from a module counts as
    the module itself unless it is a submodule)."""
    out: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1])
                    module = f"{base}.{node.module}" if node.module else base
                else:
                    module = node.module or ""
                subs = [f"{module}.{alias.name}" for alias in node.names]
                names = [s for s in subs if s in known] or [module]
            else:
                continue
            targets |= {n for n in names if n in known and n != name}
        out[name] = targets
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        group.append(top)
                        if top == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_circle_anywhere_in_the_tree():
    assert circles(edges(modules())) == []


def test_the_circle_check_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def level(name: str) -> int | None:
    for i, members in enumerate(CORE):
        if any(name == m or name.startswith(m + ".") for m in members if m != "softcuda"):
            return i
    return len(CORE) - 1 if name == "softcuda" else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import in ``graph`` by a core module of a module above it, or of one outside the
    core, or of another module of its own layer (outside its own package)."""
    upward = []
    for name, targets in sorted(graph.items()):
        here = level(name)
        if here is None:
            continue
        for target in sorted(targets):
            there = level(target)
            same_package = target.rpartition(".")[0] == name.rpartition(".")[0]
            if there is None:
                upward.append(f"{name} imports {target}, outside the core")
            elif there > here or (there == here and not same_package):
                upward.append(f"{name} (layer {here}) imports {target} (layer {there})")
    return upward


def test_the_core_imports_only_downward():
    assert upward_imports(edges(modules())) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"softcuda.tensor": {"softcuda.graph", "softcuda.ops"}, "softcuda.ops": set()}
    graph["softcuda.config"] = {"softcuda.sweep.spec"}
    assert upward_imports(graph) == [
        "softcuda.config imports softcuda.sweep.spec, outside the core",
        "softcuda.tensor (layer 6) imports softcuda.graph (layer 15)",
    ]


def test_every_core_module_has_a_layer():
    core = [n for n in modules() if n.startswith("softcuda") and not n.startswith("softcuda_cli")]
    experiment = ("softcuda.sweep", "softcuda.timings", "softcuda.analysis")
    missing = [n for n in core if level(n) is None and not n.startswith(experiment)]
    assert missing == []
