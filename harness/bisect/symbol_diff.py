"""The source of the Megatron symbols behind a red, in two builds, as one unified diff each.

A red of a replaced symbol involves two places in Megatron: the symbol's own definition (its signature, what it
returns) and the call sites that reach the replacement. Both are read from each build's unpacked source by their
qualified name (``megatron.core.x:Class.method``; a call site ``megatron/core/y.py:120`` by the function around that
line in the red build), so that line numbers moving between builds do not matter.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

from harness.source.framework_scan import module_file


@dataclass(frozen=True)
class SymbolDiff:
    """One symbol's source in the last green and first red builds; ``diff`` empty where it did not change."""

    symbol: str
    role: str
    diff: str


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Every function and class of a module by its qualified name (``Class.method``)."""
    found: dict[str, ast.AST] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{node.name}"
                found.setdefault(name, node)
                walk(node.body, f"{name}.")

    walk(tree.body, "")
    return found


def _source_of(root: Path, module: str, qualname: str) -> str | None:
    path = module_file(root, module)
    if path is None:
        return None
    text = path.read_text(errors="replace")
    try:
        node = _definitions(ast.parse(text)).get(qualname)
    except SyntaxError:
        return None
    if node is None:
        return None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return "\n".join(text.splitlines()[first - 1 : node.end_lineno]) + "\n"


def enclosing(root: Path, call_site: str) -> tuple[str, str] | None:
    """The module and qualified name of the innermost function around ``path.py:line`` below ``root``."""
    file, _, line = call_site.rpartition(":")
    path = root / file
    if not path.is_file() or not line.isdigit():
        return None
    try:
        definitions = _definitions(ast.parse(path.read_text(errors="replace")))
    except SyntaxError:
        return None
    around = [
        (name, node)
        for name, node in definitions.items()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= int(line) <= node.end_lineno
    ]
    if not around:
        return None
    name, _ = max(around, key=lambda pair: pair[1].lineno)
    return file.removesuffix(".py").removesuffix("/__init__").replace("/", "."), name


def symbol_diff(symbol: str, role: str, green: tuple[str, Path], red: tuple[str, Path]) -> SymbolDiff:
    """``symbol`` (``module:qualname``) in the builds ``green`` and ``red`` (each a version and its source root)."""
    module, _, qualname = symbol.partition(":")
    texts = []
    for version, root in (green, red):
        source = _source_of(root, module, qualname)
        texts.append(("" if source is None else source, f"{version}/{module.replace('.', '/')}.py:{qualname}"))
    (old, old_label), (new, new_label) = texts
    if not old and not new:
        return SymbolDiff(symbol, role, f"(not found in either build: {symbol})\n")
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), old_label, new_label, n=3))
    return SymbolDiff(symbol, role, diff)


def diffs_behind(
    symbols: list[str], call_sites: list[str], green: tuple[str, Path], red: tuple[str, Path]
) -> list[SymbolDiff]:
    """The diff of each replaced symbol, then of the function around each call site (read in the red build), each
    once."""
    seen: set[str] = set()
    diffs = []
    for symbol in symbols:
        if symbol not in seen:
            seen.add(symbol)
            diffs.append(symbol_diff(symbol, "replaced symbol", green, red))
    for site in call_sites:
        found = enclosing(red[1], site)
        if found is None:
            continue
        symbol = f"{found[0]}:{found[1]}"
        if symbol not in seen:
            seen.add(symbol)
            diffs.append(symbol_diff(symbol, f"call site {site}", green, red))
    return diffs
