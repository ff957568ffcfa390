"""Which dotted names are Megatron's: the packages Megatron-LM ships under ``megatron.`` (megatron-core's wheel holds
``megatron.core``, and ``megatron.training`` from 0.17). Other distributions live in the same namespace
(Megatron-Bridge's ``megatron.bridge``, Megatron-Energon's ``megatron.energon``): their names are never Megatron's
symbols, and a framework's patches of its own classes there are not Megatron patches."""

from __future__ import annotations

import ast

from harness.source.parsing import walked

MEGATRON_PACKAGES = frozenset({"core", "training", "legacy", "inference", "post_training", "rl"})
"""The sub-packages of ``megatron`` that Megatron-LM itself ships."""


def is_megatron(dotted: str) -> bool:
    """Whether ``dotted`` (a module, or a name in one) is Megatron's: ``megatron`` itself, the namespace every
    Megatron import starts from, or a name under one of :data:`MEGATRON_PACKAGES`."""
    parts = dotted.split(".")
    return parts[0] == "megatron" and (len(parts) == 1 or parts[1] in MEGATRON_PACKAGES)


def imports_megatron(tree: ast.Module, by_name: bool = False) -> bool:
    """Whether a module imports Megatron anywhere, at its top or inside a function; with ``by_name``, also where it
    names a Megatron module in a string (``importlib.import_module("megatron.core.x")``, a registry's keys)."""
    for node in walked(tree):
        if by_name and isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            if (
                node.value.isascii()
                and all(p.isidentifier() for p in node.value.split("."))
                and is_megatron(node.value)
            ):
                return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and is_megatron(node.module or ""):
            return True
        if isinstance(node, ast.Import) and any(is_megatron(alias.name) for alias in node.names):
            return True
    return False


def _dotted(text: str) -> bool:
    return "." in text and all(part.isidentifier() for part in text.split("."))
