"""The package's architecture, enforced (issue 17).

``pipelines/`` is a stack of layers; a module may import from its own layer
or from a layer below it, never from one above::

    base -> policies -> config -> io -> replay -> capacity -> analysis -> route
         -> engines -> report -> jobs -> nightly -> tools        (cli/ on top)

Every ``import`` statement counts, function-local ones included (a lazy
import is still a dependency).  On top of the direction, the module graph
has no cycle, no module imports another module's ``_private`` names, and no
module is longer than :data:`MAX_LINES`.  Pure ``ast``: no dependency, and
nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ROOT / "pipelines"
PKG = "streamjoin.pipelines"

#: lowest first; a module may import its own layer or a lower one
LAYERS = ("base", "policies", "config", "io", "replay", "capacity", "analysis", "route", "engines", "report", "jobs",
          "nightly", "tools")
MAX_LINES = 700


def modules(root: Path = PIPELINES) -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is_package)}`` for every module under ``root``."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = [PKG, *f.relative_to(root).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def imports(name: str, path: Path, is_pkg: bool, known: dict) -> list[tuple[int, str, str]]:
    """``(line, imported module, imported name or "")`` for every import of a pipelines module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names if a.name.startswith(PKG)]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith(PKG):
                continue
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.append((node.lineno, sub, "") if sub in known else (node.lineno, module, a.name))
    return found


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of a ``streamjoin.pipelines.<layer>...`` module (None: the package root,
    or a module outside every layer -- test_every_package_has_a_layer and
    test_every_imported_module_exists catch those)."""
    parts = module.split(".")
    return LAYERS.index(parts[2]) if len(parts) > 2 and parts[2] in LAYERS else None


def graph(root: Path = PIPELINES) -> dict[str, list[tuple[int, str, str]]]:
    known = modules(root)
    return {m: imports(m, f, p, known) for m, (f, p) in known.items()}


def wrong_way(g) -> list[str]:
    bad = []
    for m, edges in g.items():
        here = layer_of(m)
        for line, target, _ in edges:
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                bad.append(f"{m}:{line} imports {target} ({LAYERS[here]} -> {LAYERS[there]}, a higher layer)")
    return bad


def cycles(g) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for _, w, _ in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def private_imports(g) -> list[str]:
    return [f"{m}:{line} imports {name} from {target}" for m, edges in g.items()
            for line, target, name in edges
            if name.startswith("_") and not name.startswith("__") and target != m]


def test_every_package_has_a_layer():
    tops = {m.split(".")[2] for m in modules() if m.count(".") >= 2}
    assert tops <= set(LAYERS), f"packages without a layer: {sorted(tops - set(LAYERS))}"


def test_no_import_points_up():
    bad = wrong_way(graph())
    assert not bad, "wrong-way imports:\n" + "\n".join(bad)


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_private_names_imported():
    bad = private_imports(graph())
    assert not bad, "private names imported:\n" + "\n".join(bad)


def missing_modules(g) -> list[str]:
    """Imports of a ``streamjoin.pipelines`` module that does not exist (a path left
    behind by a move: it fails only when that line runs, e.g. a function-local import)."""
    return [f"{m}:{line} imports {target}" for m, edges in g.items() for line, target, _ in edges if target not in g]


def test_every_imported_module_exists():
    missing = missing_modules(graph())
    assert not missing, "imports of modules that do not exist:\n  " + "\n  ".join(missing)


def test_no_module_too_long():
    long = {str(f.relative_to(ROOT)): n for f, _ in modules().values()
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checks_catch_a_wrong_way_import(tmp_path):
    """The checks themselves: a planted upward import, cycle and private import are found."""
    for rel, text in {
        "__init__.py": "",
        "base/__init__.py": "",
        "base/errors.py": "def f():\n    from ..jobs.run import _helper\n",
        "jobs/__init__.py": "",
        "jobs/run.py": "from ..base import errors\n\n\ndef g():\n    from ..tune import fmt_recall\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    g = graph(tmp_path)
    assert wrong_way(g) == [f"{PKG}.base.errors:2 imports {PKG}.jobs.run (base -> jobs, a higher layer)"]
    assert cycles(g) == [[f"{PKG}.base.errors", f"{PKG}.jobs.run"]]
    assert private_imports(g) == [f"{PKG}.base.errors:2 imports _helper from {PKG}.jobs.run"]
    assert missing_modules(g) == [f"{PKG}.jobs.run:5 imports {PKG}.tune"]
