"""Back-fills through ``sys.modules``: a framework that provides a missing optional dependency itself walks every
loaded module and re-binds a name where the module holds it (verl's ``fast_hadamard_transform`` stand-in:
``for mod in sys.modules.values(): if mod.__dict__.get("hadamard_transform", "keep") is None:
mod.__dict__["hadamard_transform"] = pure_torch_hadamard_transform``). The assignment names no Megatron module; the
ones it reaches are those of the target whose module level binds the name (to ``None`` where the framework fills only
those), each a replaced symbol of its own.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from harness.source.call_sites import MegatronSource
from harness.source.framework_patches import Definition, FrameworkSource, statement_at
from harness.source.megatron_namespace import imports_megatron as tree_imports_megatron
from harness.source.parsing import walked
from harness.source.scopes import block_statements
from harness.source.syntax import dotted_name


@dataclass(frozen=True)
class BackFill:
    """One re-binding of ``name`` in every loaded module the loop's condition lets through."""

    name: str
    value: str
    definition: Definition | None
    module: str
    chain: tuple[ast.AST, ...]
    """The definitions around the assignment, outermost first, and the assignment last."""
    names: dict[str, str]
    only_none: bool
    """The loop fills only modules holding ``None`` under the name (an optional import that failed there)."""

    @property
    def line(self) -> int:
        return self.chain[-1].lineno


def backfills(framework: FrameworkSource) -> list[BackFill]:
    """Every assignment of a literal name on the modules a loop over ``sys.modules`` visits: through the module's
    ``__dict__`` (or ``vars``), ``setattr`` or an attribute."""
    found = []
    for module, (path, tree) in framework.trees.items():
        for function in (n for n in walked(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for loop in (n for n in ast.walk(function) if isinstance(n, ast.For) and _over_sys_modules(n.iter)):
                if not isinstance(loop.target, ast.Name):
                    continue
                held = _namespaces(loop, loop.target.id)
                for statement in (n for n in ast.walk(loop) if isinstance(n, ast.stmt)):
                    filled = _filled(statement, loop.target.id, held)
                    if filled is None:
                        continue
                    name, value = filled
                    _, chain, names = statement_at(framework, path, statement.lineno)
                    written = dotted_name(value)
                    definition = framework.definition(module, written) if written else None
                    only_none = _only_none(loop, name)
                    found.append(BackFill(name, ast.unparse(value), definition, module, chain, names, only_none))
    return found


def backfilled_modules(source: MegatronSource, fill: BackFill) -> list[str]:
    """The Megatron modules of this target whose module level binds ``fill.name`` (to ``None`` in a statement of its
    own, or in an ``except ImportError``, where the framework fills only those)."""
    found = []
    for module, (_, text) in source.texts.items():
        if fill.name not in text:
            continue
        tree = source.tree(module)
        if tree is not None and _binds(tree.body, fill.name, fill.only_none):
            found.append(module)
    return sorted(found)


def imports_megatron(framework: FrameworkSource, module: str) -> bool:
    """Whether the framework's module imports Megatron anywhere, at its top or in a function: a back-fill there that
    reaches no Megatron module on a release is still a patch of Megatron's (verl fills Megatron's
    ``hadamard_transform`` from the module whose ``apply_patch`` imports Megatron lazily)."""
    return tree_imports_megatron(framework.trees[module][1])


def _over_sys_modules(iterated: ast.expr) -> bool:
    return any(dotted_name(node) == "sys.modules" for node in ast.walk(iterated))


def _namespaces(loop: ast.For, item: str) -> set[str]:
    """Names bound in the loop to the visited module's namespace (``d = getattr(mod, "__dict__", None)``,
    ``d = mod.__dict__``, ``d = vars(mod)``)."""
    held = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if _is_namespace(node.value, item):
                held.add(node.targets[0].id)
    return held


def _is_namespace(value: ast.expr, item: str) -> bool:
    if isinstance(value, ast.Attribute) and value.attr == "__dict__":
        return isinstance(value.value, ast.Name) and value.value.id == item
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name) and value.args[0].id == item:
        name = getattr(value.func, "id", None)
        if name == "vars":
            return True
        if name == "getattr" and len(value.args) >= 2:
            return isinstance(value.args[1], ast.Constant) and value.args[1].value == "__dict__"
    return False


def _filled(statement: ast.stmt, item: str, held: set[str]) -> tuple[str, ast.expr] | None:
    """(name, value) where ``statement`` binds a literal name on the visited module."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            namespace = target.value
            if (isinstance(namespace, ast.Name) and namespace.id in held) or _is_namespace(namespace, item):
                key = target.slice.value
                return (key, statement.value) if isinstance(key, str) else None
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == item:
            return target.attr, statement.value
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if getattr(call.func, "id", None) == "setattr" and len(call.args) == 3:
            owner, name, value = call.args
            if isinstance(owner, ast.Name) and owner.id == item and isinstance(name, ast.Constant):
                return (name.value, value) if isinstance(name.value, str) else None
    return None


def _only_none(loop: ast.For, name: str) -> bool:
    """Whether the loop tests the name's value against ``None`` (``d.get("name", ...) is None``)."""
    for node in ast.walk(loop):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Is) for op in node.ops):
            mentions = any(isinstance(n, ast.Constant) and n.value == name for n in ast.walk(node.left))
            if mentions and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
                return True
    return False


def _binds(body: list[ast.stmt], name: str, only_none: bool) -> bool:
    """Whether a module body (its ``if`` and ``try`` blocks included) binds ``name``; with ``only_none``, to
    ``None``."""
    for node in block_statements(body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if not only_none or (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
        elif not only_none and isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
            if getattr(node, "name", None) == name or any(
                (a.asname or a.name) == name for a in getattr(node, "names", [])
            ):
                return True
    return False
