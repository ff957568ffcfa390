"""What upstream changed in a function since a framework copied it.

A framework that replaces a Megatron method with a copy of an older release's (``copied_from = "0.13.1"``) keeps that
release's rules; whatever upstream fixed or added since is missing from the copy. The comparison reads both bodies
from source: the release's (:mod:`harness.targets.release_source`) and the target's, found the way Megatron's own
calls find them (a method inherited from a base is the base's definition), and gives their unified diff. The same
diff is what ``api-diff`` shows between two targets.
"""

from __future__ import annotations

import ast
import difflib
import textwrap
from dataclasses import dataclass

from harness.source.call_sites import MegatronSource

DIFF_LINES_SHOWN = 60
"""Lines of a diff a failure message carries; the whole diff is in the report folder."""


@dataclass(frozen=True)
class Definition:
    """A function's source as defined in one release: ``place`` is ``file:line`` under site-packages."""

    place: str
    text: str


def definition(source: MegatronSource, symbol: str) -> Definition | None:
    """``symbol``'s definition (``module:function`` or ``module:Class.method``, decorators included, dedented) in
    ``source``; None when that release defines no function by that name there."""
    module, _, qualname = symbol.partition(":")
    if module not in source.texts:
        return None
    owner_name, _, name = qualname.rpartition(".")
    if owner_name:
        owner = source.class_named(module, owner_name.rsplit(".", 1)[-1])
        definer = source.definer(owner, name) if owner is not None else None
        if definer is None:
            return None
        node: ast.AST | None = source.methods(definer)[name]
        module = definer.module
    else:
        tree = source.tree(module)
        body = tree.body if tree is not None else []
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)
    if node is None:
        return None
    lines = source.texts[module][1].splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    text = textwrap.dedent("".join(lines[first - 1 : node.end_lineno]))
    return Definition(f"{source.file_of(module)}:{node.lineno}", text)


def body_diff(before: str, after: str, before_label: str, after_label: str) -> str:
    """The unified diff of two function sources ("" when they are the same), labelled with release and place."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), before_label, after_label
    )
    return "".join(line if line.endswith("\n") else f"{line}\n" for line in lines)


def diff_summary(diff: str) -> str:
    """``12 lines added, 5 removed`` for a unified diff."""
    body = [line for line in diff.splitlines() if not line.startswith(("+++", "---"))]
    added = sum(line.startswith("+") for line in body)
    removed = sum(line.startswith("-") for line in body)
    return f"{added} line{'s' * (added != 1)} added, {removed} removed"


def shown(diff: str, where: str) -> str:
    """The diff as a message carries it: the first :data:`DIFF_LINES_SHOWN` lines, and where the rest is."""
    lines = diff.splitlines()
    if len(lines) <= DIFF_LINES_SHOWN:
        return diff.rstrip("\n")
    rest = len(lines) - DIFF_LINES_SHOWN
    return "\n".join([*lines[:DIFF_LINES_SHOWN], f"... {rest} more lines in {where}"])
