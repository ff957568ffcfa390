"""Small readings of Python syntax every part of the reader shares: a dotted name as written, the name a reference
ends in, the module a relative import names."""

from __future__ import annotations

import ast


def absolute_module(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ``ImportFrom`` in ``module`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join([*package, *([node.module] if node.module else [])])


def last_name(node: ast.expr) -> str | None:
    """The name a call or reference ends in: ``f`` of ``a.b.f`` and of ``f``; None for anything else."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` as written, for a chain of attributes on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])
