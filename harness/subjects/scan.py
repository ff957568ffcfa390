"""What a framework's source touches in Megatron, read without importing it: the material of a starter declaration
(:mod:`harness.subjects.starter`).

Every Megatron symbol the source imports, calls, reads or binds is found by the api-fingerprint family's source scan
(:mod:`harness.contracts.api_fingerprint.source_scan`), then named as ``module:qualname`` against Megatron's own
source trees (the built target venvs'): the longest dotted prefix that is a module file is the module. A symbol that
some of those trees lack is optional. For a symbol the framework binds (a patch), the functions of the same Megatron
module that call it are the ones it relies on: Megatron's own call sites reach the replacement through them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.contracts.api_fingerprint.source_scan import Assignment, SourceScan, scan_sources


@dataclass(frozen=True)
class Symbol:
    """A Megatron symbol the framework touches, with how (``imports``, ``calls``, ``reads``, ``replaces``), where,
    and whether some Megatron tree lacks it."""

    key: str
    usage: str
    places: tuple[str, ...]
    optional: bool = False
    replacement: str | None = None
    """``module:qualname`` of the framework's function bound in its place, where the source names one."""


@dataclass(frozen=True)
class Patch:
    """One patch assignment: the Megatron symbol, the value bound, and the framework function that binds it."""

    key: str
    value: str
    module: str
    scope: str
    place: str


@dataclass
class FrameworkScan:
    """What :func:`scan_framework` found."""

    root: Path
    modules: dict[Path, str]
    symbols: list[Symbol] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    trees: dict[str, ast.Module] = field(default_factory=dict)
    """The framework's modules parsed, by dotted name, for the guesses."""


def framework_files(root: Path) -> dict[Path, str]:
    """Every ``.py`` file below ``root`` that belongs to a package chain starting at ``root``, with its module
    name; tests, checks and build folders are not the framework's runtime code."""
    skipped = {"tests", "test", "checks", "docs", "build", "dist", "__pycache__", ".nox", ".venv", "venv"}
    modules = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if skipped & set(relative.parts[:-1]) or relative.name.startswith("test_"):
            continue
        packages = relative.parent.parts
        if all((root.joinpath(*packages[: i + 1]) / "__init__.py").is_file() for i in range(len(packages))):
            stem = [] if relative.name == "__init__.py" else [relative.stem]
            name = ".".join([*packages, *stem])
            if name:
                modules[path] = name
    return modules


def scan_framework(root: Path, megatron_trees: Sequence[Path]) -> FrameworkScan:
    """The Megatron symbols and patches of the framework under ``root``, named against ``megatron_trees`` (folders
    holding a ``megatron`` package; the first is the reference for ``relies``)."""
    modules = framework_files(root)
    scan = scan_sources(modules, discovery=True)
    found = FrameworkScan(root, modules, trees={name: ast.parse(path.read_text()) for path, name in modules.items()})
    trees = tuple(megatron_trees)
    replaced: dict[str, tuple[str | None, list[str]]] = {}
    for assignment in scan.assignments:
        for path in assignment.paths:
            key = symbol_key(path, trees)
            if key is None:
                continue
            module = modules[assignment.file]
            found.patches.append(Patch(key, assignment.value, module, assignment.scope, _place(assignment)))
            function = _function_named(found.trees[module], assignment.value)
            replacement, places = replaced.setdefault(key, (None, []))
            replaced[key] = (
                replacement or (f"{module}:{function}" if function else None),
                [*places, _place(assignment)],
            )
    found.symbols = _symbols(scan, trees, replaced, modules)
    return found


def _symbols(
    scan: SourceScan,
    trees: tuple[Path, ...],
    replaced: dict[str, tuple[str | None, list[str]]],
    modules: dict[Path, str],
) -> list[Symbol]:
    places: dict[str, list[str]] = {}
    usages: dict[str, str] = {}
    for use in scan.uses:
        for path in use.paths:
            key = symbol_key(path, trees)
            if key is None:
                continue
            places.setdefault(key, []).append(f"{use.file}:{use.line}")
            usage = "calls" if path in scan.called else "reads"
            if usages.get(key) != "calls":
                usages[key] = usage
    symbols = []
    for key in sorted(set(places) | set(replaced)):
        optional = not all(defined(tree, key) for tree in trees)
        if key in replaced:
            replacement, where = replaced[key]
            symbols.append(Symbol(key, "replaces", tuple(where), optional, replacement))
            symbols += [
                Symbol(
                    caller, "relies", (f"calls {key.partition(':')[2]}",), not all(defined(t, caller) for t in trees)
                )
                for caller in callers_of(key, trees[0])
                if caller not in places and caller not in replaced
            ]
        else:
            symbols.append(Symbol(key, usages[key], tuple(dict.fromkeys(places[key])), optional))
    return list({symbol.key: symbol for symbol in symbols}.values())


def _place(assignment: Assignment) -> str:
    return f"{assignment.file.name}:{assignment.line}"


def _function_named(tree: ast.Module, value: str) -> str | None:
    """``value`` where it names a module-level function of ``tree``: the framework's replacement by its own name."""
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    return value if value in names else None


def symbol_key(path: str, trees: Iterable[Path]) -> str | None:
    """``module:qualname`` of a dotted Megatron path: the longest prefix that is a module in one of ``trees``, a module
    that module imports by name followed (``finalize_model_grads:parallel_state.f`` is ``parallel_state:f``);
    ``None`` for a module itself (its symbols are what a declaration names)."""
    trees = tuple(trees)
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        for tree in trees:
            source = _module_file(tree, module)
            if source is None:
                continue
            imported = _imported_module(source, module, parts[cut]) if cut < len(parts) - 1 else None
            if imported and _module_file(tree, imported):
                return symbol_key(".".join([imported, *parts[cut + 1 :]]), trees)
            return f"{module}:{'.'.join(parts[cut:])}"
    return None


def _imported_module(source: Path, module: str, name: str) -> str | None:
    """The module ``name`` is bound to in ``module``'s source by an import of it (``from .. import parallel_state``),
    else ``None``."""
    package = module.split(".") if source.name == "__init__.py" else module.split(".")[:-1]
    for node in _parsed(source).body:
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    return alias.name
    return None


def _module_file(tree: Path, module: str) -> Path | None:
    base = tree.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def defined(tree: Path, key: str) -> bool:
    """Whether Megatron in ``tree`` defines ``key``: its module's source binds the qualname's first part at module
    level (a def, class, assignment or import), and a class binds the rest in its body."""
    module, _, qualname = key.partition(":")
    source = _module_file(tree, module)
    if source is None:
        return False
    scope: list[ast.stmt] = _parsed(source).body
    for part in qualname.split("."):
        found = _binding(scope, part)
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def _binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return node
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node
        if isinstance(node, ast.Import | ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node
        if isinstance(node, ast.If | ast.Try):
            inner = [
                *node.body,
                *getattr(node, "orelse", []),
                *(s for h in getattr(node, "handlers", []) for s in h.body),
            ]
            found = _binding(inner, name)
            if found is not None:
                return found
    return None


def callers_of(key: str, tree: Path) -> list[str]:
    """The module-level functions of ``key``'s Megatron module that call its name: where Megatron's own calls reach
    a replacement of it."""
    module, _, qualname = key.partition(":")
    source = _module_file(tree, module)
    if source is None or "." in qualname:
        return []
    callers = []
    for node in _parsed(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != qualname:
            calls = (c for c in ast.walk(node) if isinstance(c, ast.Call))
            if any(isinstance(c.func, ast.Name) and c.func.id == qualname for c in calls):
                callers.append(f"{module}:{node.name}")
    return callers
