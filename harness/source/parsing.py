"""A Python file's syntax tree, parsed once per version of the file: the scan, the patch reader and the from-source
verdicts read the same files, a framework against several Megatron releases in one process."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed_file(path: Path) -> ast.Module:
    """``path``'s syntax tree; ``SyntaxError`` where it is not Python this interpreter reads."""
    return _parsed(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16384)
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))


@functools.cache
def walked(node: ast.AST) -> tuple[ast.AST, ...]:
    """Every node below ``node`` (itself included), as ``ast.walk`` gives them, listed once: the same Megatron and
    framework trees are searched by one reading after another (a node is hashed by identity)."""
    return tuple(ast.walk(node))


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be parsed (``<file>:<line>: SyntaxError: ...``), or None where it can."""
    try:
        parsed_file(path)
    except (SyntaxError, ValueError) as err:
        line = getattr(err, "lineno", None) or 1
        return f"{path}:{line}: {type(err).__name__}: {getattr(err, 'msg', None) or err}"
    return None
