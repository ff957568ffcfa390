"""Where the framework's own code fails on a target before its patches are made, read from source: a module whose
unguarded top-level import names what this Megatron lacks, and an apply that reads the original it replaces where
this Megatron has none.

Such a failure is the framework's, not one replaced symbol's: it stops every patch after it, whatever those patches
replace. It is reported once, as a row of its own keyed ``!:<framework file>:<line>``, and each replaced symbol is
judged as the framework's code reads once that failure is mended (what the user upgrading meets next), naming the
row. An apply that raises makes the framework fail wherever it is applied, so that row is red, naming the Megatron
class that lacks the method. A module that cannot be imported is an advisory: whether anything imports it on this
target is the framework's own affair (verl never imports its 1F1B overlay module itself).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from harness.source.call_sites import MegatronSource, classes_in
from harness.source.framework_guards import Versions
from harness.source.framework_patches import FrameworkSource, SourcePatch
from harness.source.megatron_keys import megatron_key
from harness.source.megatron_namespace import is_megatron
from harness.source.syntax import absolute_module

FAILURE = "!"
"""The key prefix of a failure of the framework's own code: ``!:<framework file>:<line>``."""


@dataclass
class Failure:
    """One place where the framework's code stops on this target, and the patches it stops."""

    place: str
    verdict: str
    why: str
    stops: str = "the module"
    """What makes none of its patches after the failure: the module, or the patching function (by name)."""
    symbols: list[str] = field(default_factory=list)
    """The replaced symbols of the patches it stops, where ``why`` does not name them."""

    @property
    def key(self) -> str:
        return f"{FAILURE}:{self.place}"

    def finding(self) -> str:
        stopped = ", ".join(f"`{s}`" for s in dict.fromkeys(self.symbols))
        return f"{self.why}, and {self.stops} makes none of its patches ({stopped})" if stopped else self.why


def failing_import(
    framework: FrameworkSource, module: str, versions: Versions, source: MegatronSource
) -> Failure | None:
    """The first unguarded top-level import of the framework's ``module`` naming a Megatron name this target lacks;
    None where every such import goes through. A name from a module that re-exports with ``import *`` is taken as
    there."""
    path, tree = framework.trees[module]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            origin = absolute_module(node, module, path.name == "__init__.py")
            wanted = [f"{origin}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        else:
            continue
        for dotted in (d for d in wanted if is_megatron(d)):
            holder = source.texts.get(dotted.rpartition(".")[0])
            if not versions.defines(dotted) and not (holder and "import *" in holder[1]):
                place = framework.place(module, node.lineno)
                return Failure(
                    place,
                    "advisory",
                    f"{place} imports {dotted}, which megatron-core {versions.megatron} lacks: importing {module} "
                    "raises ImportError here",
                )
    return None


def reads_original(patch: SourcePatch, key: str, source: MegatronSource) -> str | None:
    """Where the patching function reads the attribute it replaces (``origin = Cls.method``) before the patch, as
    ``file:line``; None where it does not."""
    function = _patching_function(patch)
    if function is None:
        return None
    names = {name for name, path in patch.originals.items() if megatron_key(path, source) == key}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and node.lineno < patch.line:
            if any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
                return _at(patch, node.lineno)
    return None


def _patching_function(patch: SourcePatch) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function making a patch found in the source; None at module level or for a declared one."""
    functions = [n for n in patch.scope[:-1] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return functions[-1] if functions and not patch.declared else None


def _at(patch: SourcePatch, line: int) -> str:
    """``file:line`` of another line of the patching module."""
    return f"{patch.module.replace('.', '/')}.py:{line}"


NN_MODULE_BASES = {"Module", "object", "ABC"}
"""Bases of a Megatron class, as its source writes them, whose members ``torch.nn.Module``'s own answer for."""

UNGUARDED = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)
"""Statements of a function body that run whenever the body runs past them: no branch, loop, ``try`` or ``with``."""


def calls_missing_first(patch: SourcePatch, source: MegatronSource, versions: Versions) -> Failure | None:
    """Where the patching function, in a statement of its own body that always runs before the patch, calls a method
    of a parameter annotated with a Megatron class that this release's class lacks (verl's
    ``model.build_schedule_plan(...)`` on ``model: GPTModel``): the call raises AttributeError, so the function never
    reaches its patch. None where no such call is found."""
    function = _patching_function(patch)
    if function is None:
        return None
    typed = {}
    for argument in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]:
        head, dot, rest = ast.unparse(argument.annotation).partition(".") if argument.annotation else ("", "", "")
        dotted = patch.names.get(head)
        if dotted and is_megatron(dotted):
            typed[argument.arg] = dotted + dot + rest
    for statement in function.body:
        if statement.lineno >= patch.line:
            break
        if not isinstance(statement, UNGUARDED):
            continue
        for node in ast.walk(statement):
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Attribute) and isinstance(called.value, ast.Name) and called.value.id in typed:
                key = megatron_key(f"{typed[called.value.id]}.{called.attr}", source)
                if _lacks(source, key):
                    place = _at(patch, node.lineno)
                    owner = key.partition(":")[2].rpartition(".")[0]
                    return Failure(
                        place,
                        "advisory",
                        f"{place} calls {called.value.id}.{called.attr} on a {owner}, and megatron-core "
                        f"{versions.megatron}'s {owner} has no {called.attr}{defined_at(source, key)}: "
                        f"{function.name} raises AttributeError there",
                        function.name,
                    )
    return None


def _lacks(source: MegatronSource, key: str) -> bool:
    """Whether the Megatron class of ``module:Class.name`` lacks ``name`` on its built objects: no method, class
    attribute or attribute its constructor sets along its bases, every base Megatron's or ``torch.nn.Module``, and
    ``name`` not one of ``torch.nn.Module``'s."""
    module, _, qualname = key.partition(":")
    owner_name, _, name = qualname.rpartition(".")
    owner = source.class_named(module, owner_name) if owner_name and module in source.texts else None
    if owner is None:
        return False
    classes = source.mro(owner)
    known = {info.name for info in classes} | NN_MODULE_BASES
    if any(base not in known for info in classes for base in info.bases):
        return False
    module_class = _nn_module()
    if module_class is None or hasattr(module_class, name):
        return False
    return not source.has_when_built(owner, name) and not any(_class_attribute(source, info, name) for info in classes)


def _nn_module() -> type | None:
    """``torch.nn.Module``, imported only where a call is in question; None where torch is not installed (``scan``
    may run beside no target): then no member is taken as missing."""
    try:
        import torch.nn
    except ImportError:
        return None
    return torch.nn.Module


def _class_attribute(source: MegatronSource, info: object, name: str) -> bool:
    """Whether the class body of ``info`` assigns ``name`` (``forward = staticmethod(...)``, ``x: int = 0``)."""
    tree = source.tree(info.module)
    classes = classes_in(tree).get(info.name, []) if tree else []
    body = classes[0].body if classes else []
    targets = [t for n in body if isinstance(n, ast.Assign) for t in n.targets]
    targets += [n.target for n in body if isinstance(n, ast.AnnAssign)]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def missing_original(read_at: str, key: str, versions: Versions, source: MegatronSource) -> Failure:
    """The apply reading, at ``read_at``, an original of ``key`` this target does not define."""
    qualname = key.partition(":")[2]
    return Failure(
        read_at,
        "red",
        f"{read_at} reads {qualname} before patching it, and megatron-core {versions.megatron} defines none"
        f"{defined_at(source, key)}: the apply raises AttributeError here",
    )


def defined_at(source: MegatronSource, key: str) -> str:
    """`` (its class at <file>:<line>)`` for a method of a class Megatron defines here; empty otherwise."""
    module, _, qualname = key.partition(":")
    owner = source.class_named(module, qualname.rpartition(".")[0]) if "." in qualname else None
    tree = source.tree(module) if owner is not None else None
    node = next(iter(classes_in(tree).get(owner.name, [])), None) if tree else None
    return f" (its class at {source.file_of(module)}:{node.lineno})" if node is not None else ""
