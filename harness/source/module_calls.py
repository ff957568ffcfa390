"""Megatron's calls of a replaced method made through an attribute that holds an instance of its class: ``forward``
through ``nn.Module.__call__`` (``self.self_attention(...)`` in ``TransformerLayer``), other methods as
``self.<attribute>.<method>(...)`` (``self.router.routing(...)``).

What an attribute holds is read from how Megatron builds it: directly (``self.router = TopKRouter(...)``), or from a
module spec (``self.self_attention = build_module(submodules.self_attention, ...)`` where some layer spec passes
``self_attention=ModuleSpec(module=MLASelfAttention, ...)`` or the class itself). Classes count where they reach the
replaced method (the class, and subclasses that do not override it). A spec field or an attribute may hold other
classes too (``self_attention`` holds ``SelfAttention`` in other specs), so a call found this way is Megatron's call
of the replaced method only where it binds to Megatron's own definition of it on the target: a call Megatron makes
for another class does not. A function of another package with the same name is never reached this way: only
attributes built from the class count.
"""

from __future__ import annotations

import ast
import dataclasses

from harness.source.call_sites import MegatronCall, MegatronSource, calls_in, functions_of
from harness.source.parsing import walked
from harness.source.syntax import last_name

BUILDERS = ("build_module",)
"""Megatron's functions that instantiate a module spec."""


def instance_calls(source: MegatronSource, symbol: str, upstream_fits) -> list[MegatronCall]:
    """Calls of ``symbol`` (``module:Class.method``) through attributes holding an instance of the class;
    ``upstream_fits(call)`` says whether a call binds to Megatron's own definition of the method."""
    module, _, qualname = symbol.partition(":")
    owner_name, _, method = qualname.rpartition(".")
    owner = source.class_named(module, owner_name) if owner_name else None
    if owner is None:
        return []
    classes = {info.name for info in source.descendants(owner) if source.reaches(owner, method, source.mro(info))}
    fields = _spec_fields(source, classes)
    found: list[MegatronCall] = []
    for other, (_, text) in source.texts.items():
        if not (classes & _words(text) or fields & _words(text)):
            continue
        tree = source.tree(other)
        for node in walked(tree) if tree is not None else ():
            if isinstance(node, ast.ClassDef):
                attributes = _holding(node, classes, fields)
                if attributes:
                    found += _attribute_calls(source, other, node, attributes, method)
    return [call for call in found if upstream_fits(call)]


def _words(text: str) -> set[str]:
    return set(text.replace("(", " ").replace("=", " ").replace(",", " ").replace(".", " ").split())


def _spec_fields(source: MegatronSource, classes: set[str]) -> set[str]:
    """Keyword names under which Megatron's specs pass one of ``classes`` (as the class, or a ``ModuleSpec`` of it),
    and submodule fields whose default is one (``router: RouterBuilder = TopKRouter``)."""
    fields: set[str] = set()
    for module, (_, text) in source.texts.items():
        if "ModuleSpec" not in text and not any(f"={name}" in text.replace(" ", "") for name in classes):
            continue
        tree = source.tree(module)
        for node in walked(tree) if tree is not None else ():
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg is not None and keyword.arg != "module" and _builds(keyword.value, classes):
                        fields.add(keyword.arg)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if _builds(node.value, classes):
                    fields.add(node.target.id)
    return fields


def _builds(value: ast.expr, classes: set[str]) -> bool:
    """``Cls`` or ``ModuleSpec(module=Cls, ...)`` with ``Cls`` one of ``classes``."""
    if isinstance(value, ast.Name | ast.Attribute):
        return last_name(value) in classes
    if isinstance(value, ast.Call) and last_name(value.func) == "ModuleSpec":
        given = [k.value for k in value.keywords if k.arg == "module"] or value.args[:1]
        return any(last_name(v) in classes for v in given)
    return False


def _holding(cls: ast.ClassDef, classes: set[str], fields: set[str]) -> set[str]:
    """The ``self.<attribute>`` names the class's methods assign an instance of ``classes`` to."""
    held = set()
    for node in walked(cls):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        targets = [
            t.attr
            for t in node.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        ]
        if not targets:
            continue
        built = last_name(node.value.func)
        if built in classes:
            held.update(targets)
        elif built in BUILDERS and node.value.args:
            spec = node.value.args[0]
            if last_name(spec) in classes or (isinstance(spec, ast.Attribute) and spec.attr in fields):
                held.update(targets)
    return held


def _attribute_calls(
    source: MegatronSource, module: str, cls: ast.ClassDef, attributes: set[str], method: str
) -> list[MegatronCall]:
    def matches(func: ast.expr) -> bool:
        if method == "forward" and isinstance(func, ast.Attribute) and func.attr in attributes:
            return isinstance(func.value, ast.Name) and func.value.id == "self"
        return (
            isinstance(func, ast.Attribute)
            and func.attr == method
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in attributes
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "self"
        )

    calls = []
    for function, qualname in functions_of(ast.Module(body=[cls], type_ignores=[])):
        caller = f"{module}:{qualname}"
        calls += calls_in(function, source.file_of(module), caller, matches)
    return calls


def spec_constructions(source: MegatronSource, symbol: str, upstream_fits) -> list[MegatronCall]:
    """Constructions of the class of ``symbol`` (``module:Class.__init__``) through a spec field that names it:
    ``submodules.router(config=...)`` and ``build_module(submodules.router, ...)`` (the spec itself left out of the
    arguments); kept where they bind to Megatron's own ``__init__`` (``upstream_fits``), as the field may hold
    another class."""
    module, _, qualname = symbol.partition(":")
    owner = source.class_named(module, qualname.rpartition(".")[0])
    if owner is None:
        return []
    classes = {info.name for info in source.descendants(owner) if source.reaches(owner, "__init__", source.mro(info))}
    fields = _spec_fields(source, classes)
    if not fields:
        return []

    def direct(func: ast.expr) -> bool:
        return (
            isinstance(func, ast.Attribute) and func.attr in fields and last_name(func.value) in ("submodules", "spec")
        )

    def built(func: ast.expr) -> bool:
        return last_name(func) in BUILDERS

    found: list[MegatronCall] = []
    for other, (_, text) in source.texts.items():
        if not any(f".{field}" in text for field in fields):
            continue
        tree = source.tree(other)
        for function, qualname_of in functions_of(tree) if tree is not None else ():
            caller = f"{other}:{qualname_of}"
            found += calls_in(function, source.file_of(other), caller, direct)
            for call in _builder_calls(function, fields):
                found += [
                    dataclasses.replace(each, positional=each.positional - 1)
                    for each in calls_in(function, source.file_of(other), caller, built)
                    if each.line == call.lineno
                ]
    return [call for call in found if upstream_fits(call)]


def _builder_calls(function: ast.AST, fields: set[str]) -> list[ast.Call]:
    return [
        node
        for node in walked(function)
        if isinstance(node, ast.Call)
        and last_name(node.func) in BUILDERS
        and node.args
        and isinstance(node.args[0], ast.Attribute)
        and node.args[0].attr in fields
    ]
