"""Which Megatron class the objects a framework patches on are of, read from source: a framework binds methods on
built objects (``model.forward = f.__get__(model)``, ``setattr(layer.__class__, "x", property(f))``) whose class the
assignment does not name. The patching function's ``isinstance`` tests name it, or the function is bound as a
Megatron class's method and the object is its ``self``, or the names around the patch carry the name of one class
defining the method, or the one class whose constructor sets an attribute of that name. Where none of these names
one, the patch still gets a verdict (:func:`unplaced_verdict`): never a patch left out unsaid.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from harness.source.call_sites import MegatronSource
from harness.source.framework_patches import InstancePatch
from harness.source.megatron_keys import megatron_key
from harness.source.megatron_namespace import is_megatron


def instance_class(instance: InstancePatch, source: MegatronSource) -> str | None:
    """``module:Class`` of the Megatron class whose built objects ``instance`` patches, where the source says which:
    a class the patching function tests with ``isinstance``, else the one Megatron class defining the method whose name
    the names around the patch carry (``_fused_GPTModel_forward`` on ``forward``), else the only one defining it (where
    none does, the only one whose own constructor sets an attribute of the name). A patch in a file that never imports
    Megatron is another library's."""
    if not is_megatrons(instance):
        return None
    definers = _definers(source, instance.method) or _holders(source, instance.method)
    tested = {path.rpartition(".")[2] for path in instance.classes}
    chosen = [info for info in definers if info.name in tested]
    if tested and not chosen:
        # The objects are of the classes the framework tests for, and none of them has the method here.
        owners = [
            key for path in instance.classes if (key := megatron_key(path, source)).partition(":")[0] in source.texts
        ]
        return owners[-1] if owners else None
    if not chosen:
        named = [info for info in definers if info.name.lower() in instance.hint]
        longest = max((len(info.name) for info in named), default=0)
        chosen = [info for info in named if len(info.name) == longest]
    if not chosen and len(definers) == 1:
        chosen = definers
    return f"{chosen[0].module}:{chosen[0].name}" if len(chosen) == 1 else None


def sets_data(instance: InstancePatch, owner: str | None, source: MegatronSource) -> bool:
    """Whether ``instance`` sets a function as it is on objects whose class (``owner``, ``module:Class``) has no
    method of that name along its bases: a field or attribute holding a callable (ms-swift's ``v.merge_fn = f`` on a
    ``ShardedTensorFactory``), data rather than a method replaced; where the class is not Megatron's, nothing of
    Megatron's either."""
    if not instance.plain:
        return False
    if owner is None and instance.unnamed:
        return not _definers(source, instance.method)  # no Megatron class has such a method: the object's own field
    module, _, name = owner.partition(":") if owner else ("", "", "")
    info = source.class_named(module, name) if module in source.texts else None
    return info is None or not any(instance.method in source.methods(each) for each in source.mro(info))


def defining_classes(instance: InstancePatch, source: MegatronSource) -> list[str]:
    """``module:Class`` of every Megatron class defining (else setting in its constructor) the method ``instance``
    binds: the classes an unplaced patch may be on."""
    infos = _definers(source, instance.method) or _holders(source, instance.method)
    return [f"{info.module}:{info.name}" for info in infos]


def class_of_self(instance: InstancePatch, bound_as: Mapping[int, str], source: MegatronSource) -> str | None:
    """``module:Class`` where the object is ``self`` of a function the framework binds as a method of a Megatron class
    (verl's ``patched_routing``, bound as ``TopKRouter.routing``, sets ``self.is_aux_loss_enabled``): the class,
    whether or not this release defines the method."""
    if instance.target != "self" or instance.classes:
        return None
    functions = [n for n in instance.chain if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    owner = next((bound_as[id(f)] for f in reversed(functions) if id(f) in bound_as), None)
    key = megatron_key(owner, source) if owner and is_megatron(owner) else ""
    return key if key.partition(":")[2][:1].isupper() else None


def _definers(source: MegatronSource, method: str) -> list:
    """The classes of Megatron's source whose body defines ``method``."""
    return _classes_where(source, f"def {method}(", lambda info: method in source.methods(info))


def _holders(source: MegatronSource, name: str) -> list:
    """The classes of Megatron's source whose own constructor sets ``self.<name>``: where no class defines a method
    of that name, what an attribute of that name set on an object's class is about (mcore-bridge sets a
    ``transformer_layer`` property on the class of MTP layers, whose constructor sets ``self.transformer_layer`` up
    to 0.16)."""
    return _classes_where(source, f"self.{name}", lambda info: name in source.set_when_built(info))


def _classes_where(source: MegatronSource, written: str, has: Callable[[object], bool]) -> list:
    """The classes ``has`` holds for, among those of the modules whose text contains ``written``, module by module."""
    by_module: dict[str, list] = {}
    for infos in source.classes.values():
        for info in infos:
            by_module.setdefault(info.module, []).append(info)
    modules = [module for module, (_, text) in source.texts.items() if written in text]
    return list(dict.fromkeys(info for module in modules for info in by_module.get(module, []) if has(info)))


UNPLACED = "?"
"""The module part of the key of a patch whose Megatron module or class the source does not name on a release:
``?:<object>.<method>@<file>:<line>`` for a method bound on built objects, ``?:<name>`` for a back-fill."""


def is_megatrons(instance: InstancePatch) -> bool:
    """Whether the patch is on Megatron's objects: one in a file that never imports Megatron is another library's."""
    return any(is_megatron(path) for path in instance.names.values())


def unplaced_verdict(instance: InstancePatch, source: MegatronSource, megatron: str) -> tuple[str, str]:
    """The verdict, and why, for a patch on Megatron's built objects whose class :func:`instance_class` cannot name
    here: ``absent`` where the classes the framework tests for, or every class defining or setting the method, are
    missing from this release (the patch replaces nothing of Megatron's here); ``undecided`` where several classes
    define it and the source does not say which the objects are of."""
    release = f"megatron-core {megatron}"
    if instance.classes:
        tested = ", ".join(path.rpartition(".")[2] for path in instance.classes)
        return "absent", f"the objects `{instance.target}` are tested as {tested}, which {release} lacks"
    definers = _definers(source, instance.method) or _holders(source, instance.method)
    if not definers:
        return (
            "absent",
            f"no class of {release} defines or sets `{instance.method}`: the patch adds a name Megatron does not call",
        )
    shown = ", ".join(f"{info.module}:{info.name}" for info in definers[:4]) + (", ..." if len(definers) > 4 else "")
    return (
        "undecided",
        f"{len(definers)} classes of {release} define `{instance.method}` ({shown}) and the source does not say which "
        f"`{instance.target}` is: declare the symbol in [megatron_symbols] as "
        f"'replaces with {instance.definition.module}:{instance.definition.node.name}'",
    )
