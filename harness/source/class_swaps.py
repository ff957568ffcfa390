"""``obj.__class__ = Sub``: a framework retrofits built Megatron objects with a subclass of its own, so each object so
swapped runs ``Sub``'s methods in place of its class's. Read once here for both the starter ``scan`` writes and the
verdicts read from source, which name each of ``Sub``'s methods as a method of the Megatron class swapped away.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from harness.source.framework_patches import FrameworkSource
from harness.source.megatron_namespace import is_megatron
from harness.source.parsing import walked
from harness.source.scopes import isinstance_tests
from harness.source.syntax import absolute_module, dotted_name


@dataclass(frozen=True)
class ClassSwap:
    """One ``__class__`` assignment to a class the framework defines at module level."""

    module: str
    chain: tuple[ast.AST, ...]
    """The definitions around the assignment, outermost first, and the assignment last."""
    subclass: ast.ClassDef
    swapped: str | None
    """The dotted Megatron class whose objects it changes: the one the function around it tests with
    ``isinstance`` that the subclass derives from, else the Megatron base it derives from."""
    target: str
    """The object's expression as written (``layer``)."""

    @property
    def line(self) -> int:
        return self.chain[-1].lineno

    def methods(self) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The subclass's own methods the swapped objects now run (``__call__`` the only special one)."""
        return [
            node
            for node in self.subclass.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (not node.name.startswith("__") or node.name == "__call__")
        ]


def class_swaps(framework: FrameworkSource) -> list[ClassSwap]:
    """Every ``obj.__class__ = Sub`` of the framework whose ``Sub`` its module defines (under an ``if`` or ``try``
    included)."""
    found = []
    for module, (path, tree) in framework.trees.items():
        classes = {node.name: node for node in _module_level(tree.body) if isinstance(node, ast.ClassDef)}
        imported = {
            alias.asname or alias.name: f"{absolute_module(node, module, path.name == '__init__.py')}.{alias.name}"
            for node in walked(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        stack: list[tuple[ast.AST, ...]] = [(node,) for node in tree.body]
        while stack:
            chain = stack.pop()
            node = chain[-1]
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in classes:
                target = next((t for t in node.targets if isinstance(t, ast.Attribute) and t.attr == "__class__"), None)
                if target is not None:
                    subclass = classes[node.value.id]
                    swapped = _swapped(chain, subclass, imported)
                    found.append(ClassSwap(module, chain, subclass, swapped, ast.unparse(target.value)))
            stack += [(*chain, child) for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements a module runs at import, those in ``if`` and ``try`` blocks included."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            nested = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            yield from _module_level(nested + [s for handler in getattr(node, "handlers", []) for s in handler.body])


def _swapped(chain: tuple[ast.AST, ...], subclass: ast.ClassDef, imported: dict[str, str]) -> str | None:
    bases = [imported.get(name, "") for name in map(dotted_name, subclass.bases) if name]
    functions = [n for n in chain if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    tested = [imported.get(name, "") for name in isinstance_tests(functions[-1] if functions else None)]
    megatron = [path for path in [*tested, *bases] if is_megatron(path)]
    return next((path for path in megatron if path in bases), megatron[0] if megatron else None)
