"""Package dependency graph of trinity/: cycles and imports that point up the layering.

Reads the AST of every module under trinity/ (imports at module level, inside
functions and under ``if TYPE_CHECKING:``; relative imports resolved) and folds the
module imports into a graph of packages: the first level under trinity/, and each
top-level module (``types.py``, ``__init__.py``, ...) as a package of its own.

    python scripts/package_graph.py            # per package: modules, lines, edges
    python scripts/package_graph.py --check    # exit 1 on a cycle or an upward edge

``tests/unit/test_package_graph.py`` runs the same check with its allowlist.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "trinity"

# Lower layers never import higher ones; packages within one layer may import each
# other one way, never in a cycle. From the bottom: data types and utilities; the
# config schema; the pure parts (algorithm maths, rewards); rollout engines and the
# data service; workflows on top of engines and rewards; the buffer (its taskset reader
# asks a workflow which columns it reads), experience operators and metric sinks; the
# trainer; weight synchronisation, which reads the trainer's checkpoints and adapters;
# the explorer, which receives the weights; the viewers; the launcher (and the
# reference loop); the command, the documented import paths and the generated docs.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("types", "utils", "kernels"),
    ("config",),
    ("algorithm", "rewards"),
    ("rollout", "service"),
    ("workflows",),
    ("buffer", "pipeline", "monitor"),
    ("trainer",),
    ("sync",),
    ("explorer",),
    ("view", "studio"),
    ("launch", "loop"),
    ("cli", "common", "project_docs"),
    ("__init__", "__main__"),
)
LAYER_OF: dict[str, int] = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


@dataclass
class Import:
    """One ``import`` statement's target inside trinity, seen from ``source``."""

    source: str  # importing module, dotted (trinity.cli.debug)
    target: str  # imported module, dotted (trinity.cli.main)
    line: int
    in_function: bool
    type_only: bool  # under ``if TYPE_CHECKING:``


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: list[Import] = field(default_factory=list)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1 and path.parent != root:
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """``trinity.cli.debug`` -> ``cli``; ``trinity.types`` -> ``types``; ``trinity`` ->
    ``__init__``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    if parts[1] == "__init__":
        return "__init__"
    return parts[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.stmt, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The trinity modules one import statement loads (a name that is a submodule counts
    as that submodule)."""
    found: list[str] = []
    if isinstance(node, ast.Import):
        found = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(node, module, is_package)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            found.append(sub if sub in known else base)
    out = []
    for name in found:
        if name != "trinity" and not name.startswith("trinity."):
            continue
        while name not in known and "." in name:  # ``import trinity.x.y`` of a missing y
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def _walk(node: ast.AST, in_function: bool, type_only: bool):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_only
            continue
        inner_fn = in_function or isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        )
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk_stmt(stmt, inner_fn, True)
            for stmt in child.orelse:
                yield from _walk_stmt(stmt, inner_fn, type_only)
            continue
        yield from _walk(child, inner_fn, type_only)


def _walk_stmt(stmt: ast.stmt, in_function: bool, type_only: bool):
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        yield stmt, in_function, type_only
    else:
        yield from _walk(stmt, in_function, type_only)


def load_modules(root: Path = ROOT) -> dict[str, Module]:
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {
        module_name(p, root): Module(module_name(p, root), p, len(p.read_text().splitlines()))
        for p in paths
    }
    known = set(modules)
    for mod in modules.values():
        tree = ast.parse(mod.path.read_text(), str(mod.path))
        is_package = mod.path.name == "__init__.py"
        for node, in_function, type_only in _walk(tree, False, False):
            # one record per (statement, target): ``from x import a, b`` of two names
            # in the same module is one dependency
            for target in dict.fromkeys(_targets(node, mod.name, is_package, known)):
                mod.imports.append(Import(mod.name, target, node.lineno, in_function, type_only))
    return modules


def package_edges(modules: dict[str, Module]) -> dict[tuple[str, str], list[Import]]:
    """(from package, to package) -> the imports that make the edge."""
    edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for mod in modules.values():
        for imp in mod.imports:
            a, b = package_of(imp.source), package_of(imp.target)
            if a != b:
                edges[(a, b)].append(imp)
    return dict(edges)


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def module_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Cycles between modules (each module a node), for the finer picture."""
    edges = {
        (i.source, i.target): []
        for m in modules.values()
        for i in m.imports
        if i.source != i.target
    }
    return cycles(edges)


def upward_edges(edges) -> list[tuple[str, str, list[Import]]]:
    """Edges from a package to one in a higher layer; a package missing from
    ``LAYERS`` is reported against itself so that a new package must be placed."""
    out = []
    for (a, b), imps in sorted(edges.items()):
        la, lb = LAYER_OF.get(a), LAYER_OF.get(b)
        if la is None or lb is None or lb > la:
            out.append((a, b, imps))
    return out


def _annotation_names_config(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    return any(
        (isinstance(n, ast.Name) and n.id == "Config")
        or (isinstance(n, ast.Attribute) and n.attr == "Config")
        for n in ast.walk(node)
    )


def _takes_config(fn: ast.FunctionDef | ast.AsyncFunctionDef, imports_config: bool) -> bool:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    for arg in args:
        if _annotation_names_config(arg.annotation):
            return True
        if arg.annotation is None and arg.arg in ("config", "cfg") and imports_config:
            return True
    return False


def _receivers_in(node: ast.AST, prefix: str, imports_config: bool) -> list[str]:
    names: list[str] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            for c in child.body:
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)) and _takes_config(
                    c, imports_config
                ):
                    name = child.name if c.name == "__init__" else f"{child.name}.{c.name}"
                    names.append(prefix + name)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _takes_config(child, imports_config):
                names.append(prefix + child.name)
            names += _receivers_in(child, f"{prefix}{child.name}.", imports_config)
    return names


def config_receivers(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Module -> its functions and classes that receive the whole ``Config``: a
    parameter annotated ``Config`` (also ``Config | None``, ``"Config"``), or an
    unannotated ``config``/``cfg`` parameter in a module that imports ``Config``.
    A class counts once, through its ``__init__``; its other methods count each."""
    found: dict[str, list[str]] = {}
    for mod in modules.values():
        tree = ast.parse(mod.path.read_text())
        imports_config = any(
            isinstance(n, ast.ImportFrom) and any(a.name == "Config" for a in n.names)
            for n in ast.walk(tree)
        )
        names = _receivers_in(tree, "", imports_config)
        if names:
            found[mod.name] = names
    return found


def function_level_statements(modules: dict[str, Module]) -> set[tuple[str, int]]:
    """(module, line) of each import statement of trinity code inside a function."""
    return {(i.source, i.line) for m in modules.values() for i in m.imports if i.in_function}


def report(modules: dict[str, Module]) -> str:
    edges = package_edges(modules)
    receivers = config_receivers(modules)
    by_pkg: dict[str, list[Module]] = defaultdict(list)
    for mod in modules.values():
        by_pkg[package_of(mod.name)].append(mod)
    out = []
    total_fn = len(function_level_statements(modules))
    out.append(
        f"trinity: {len(modules)} modules, {sum(m.lines for m in modules.values())} lines, "
        f"{total_fn} function-level import statements of trinity modules, "
        f"{sum(len(v) for v in receivers.values())} Config receivers in {len(receivers)} modules"
    )
    out.append("")
    out.append(
        f"{'package':12} {'layer':>5} {'modules':>7} {'lines':>6} {'fn-imp':>6} {'cfg-recv':>8}"
    )
    order = sorted(by_pkg, key=lambda p: (LAYER_OF.get(p, 99), p))
    for pkg in order:
        mods = by_pkg[pkg]
        fn = len(function_level_statements({m.name: m for m in mods}))
        recv = sum(len(receivers.get(m.name, [])) for m in mods)
        out.append(
            f"{pkg:12} {LAYER_OF.get(pkg, '?'):>5} {len(mods):>7} {sum(m.lines for m in mods):>6} {fn:>6} {recv:>8}"
        )
    out.append("")
    out.append("edges (from -> to: imports, of which inside functions):")
    for pkg in order:
        targets = sorted((b, imps) for (a, b), imps in edges.items() if a == pkg)
        if targets:
            parts = [f"{b} {len(imps)}/{sum(i.in_function for i in imps)}" for b, imps in targets]
            out.append(f"  {pkg} -> " + ", ".join(parts))
    out.append("")
    found = cycles(edges)
    out.append(f"package cycles: {len(found)}")
    for comp in found:
        out.append("  " + " <-> ".join(comp))
    mcycles = module_cycles(modules)
    out.append(f"module cycles: {len(mcycles)}")
    for comp in mcycles:
        out.append("  " + " <-> ".join(m.removeprefix("trinity.") for m in comp))
    up = upward_edges(edges)
    out.append(f"upward edges: {len(up)}")
    for a, b, imps in up:
        where = ", ".join(
            f"{i.source.removeprefix('trinity.')}:{i.line}{' (fn)' if i.in_function else ''}"
            f" -> {i.target.removeprefix('trinity.')}"
            for i in imps
        )
        out.append(
            f"  {a} (layer {LAYER_OF.get(a, '?')}) -> {b} (layer {LAYER_OF.get(b, '?')}): {where}"
        )
    out.append("")
    out.append("whole-Config receivers:")
    for name in sorted(receivers):
        out.append(f"  {name.removeprefix('trinity.')}: {', '.join(receivers[name])}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a cycle or upward edge")
    parser.add_argument("--root", type=Path, default=ROOT, help="the trinity/ folder to read")
    args = parser.parse_args(argv)
    modules = load_modules(args.root.resolve())
    print(report(modules))
    if args.check:
        edges = package_edges(modules)
        return 1 if cycles(edges) or upward_edges(edges) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
