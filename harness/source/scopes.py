"""What a scope of a framework's source binds, read without running it: imports, definitions, aliases, modules
fetched by name (``importlib.import_module``, ``sys.modules[...]``) and objects whose class the source names (built
by ``Cls(...)``, a parameter annotated ``Cls``); the statements of a block, nested blocks included; the classes an
``isinstance`` test names."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from harness.source.parsing import walked
from harness.source.syntax import absolute_module, dotted_name


@dataclass
class Scope:
    names: dict[str, str] = field(default_factory=dict)
    """Name -> dotted path of what an import or an assignment bound to it."""
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    built: dict[str, str] = field(default_factory=dict)
    """Name -> the class its object is of, as written, where the source says: built by ``Cls(...)``, or a parameter
    annotated ``Cls``."""


def bind(scope: Scope, body: list[ast.stmt], module: str, is_package: bool) -> None:
    """What ``body`` binds in its own scope (imports, defs, classes, aliases), nested blocks included."""
    for node in block_statements(body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    scope.names.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom):
            origin = absolute_module(node, module, is_package)
            for alias in node.names:
                scope.names[alias.asname or alias.name] = f"{origin}.{alias.name}" if origin else alias.name
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scope.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            scope.classes[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            imported = imported_by_call(node.value)
            if imported is not None:
                scope.names[node.targets[0].id] = imported
                continue
            dotted = dotted_name(node.value)
            if dotted is not None:
                scope.names.setdefault(node.targets[0].id, f"={dotted}")
            elif isinstance(node.value, ast.Call) and (built := dotted_name(node.value.func)) is not None:
                scope.built.setdefault(node.targets[0].id, built)


MODULE_GETTERS = frozenset({"import_module", "sys.modules.get"})
"""Calls that hand back the module their first argument names (``importlib.import_module`` under any import of
it, ``sys.modules.get``)."""


def gets_module(call: ast.Call) -> bool:
    """Whether ``call`` is one of :data:`MODULE_GETTERS`."""
    written = dotted_name(call.func) or ""
    return written in MODULE_GETTERS or written.rpartition(".")[2] == "import_module"


def imported_by_call(value: ast.expr) -> str | None:
    """The module ``importlib.import_module("megatron...")``, ``sys.modules["megatron..."]`` or
    ``sys.modules.get("megatron...")`` names, as a name bound to it holds it."""
    if (
        isinstance(value, ast.Subscript)
        and dotted_name(value.value) == "sys.modules"
        and isinstance(value.slice, ast.Constant)
        and isinstance(value.slice.value, str)
    ):
        return value.slice.value
    if (
        isinstance(value, ast.Call)
        and gets_module(value)
        and value.args
        and isinstance(value.args[0], ast.Constant)
        and isinstance(value.args[0].value, str)
    ):
        return value.args[0].value
    return None


def block_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a block and of the blocks nested in it (if, try, with, for), not of nested defs."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try):
            nested = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            nested += [s for handler in getattr(node, "handlers", []) for s in handler.body]
            yield from block_statements(nested)


def isinstance_tests(function: ast.AST | None, subject: str | None = None) -> list[str]:
    """The dotted names of the classes ``function`` tests anything (or the expression ``subject`` alone) against
    with ``isinstance``."""
    found = []
    for call in walked(function) if function is not None else ():
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "isinstance" and len(call.args) == 2:
            if subject is not None and ast.unparse(call.args[0]) != subject:
                continue
            kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
            found += [d for d in map(dotted_name, kinds) if d]
    return found
