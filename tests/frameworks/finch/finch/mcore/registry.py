"""Registry of named, reversible Megatron patches.

A patch is registered by decorating a *factory* with :func:`register_patch`.
The factory is called at apply time with the trainer's ``argparse.Namespace``
and returns the list of :class:`AttrPatch` edits it wants (module attribute ->
replacement).  :func:`apply_patches` performs the edits and returns a
:class:`PatchHandle` whose ``undo()`` puts every attribute back exactly as it
was (same objects; attributes that did not exist are deleted again).

Importing this module patches nothing, reads no environment variable and
configures no logging.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import attrs

__all__ = [
    "AttrPatch",
    "PatchSpec",
    "PatchHandle",
    "register_patch",
    "get_patch",
    "available_patches",
    "apply_patches",
]

_MISSING = object()
_TAG = "__finch_patch__"


def _log():
    import logging

    return logging.getLogger("finch.mcore.registry")


@attrs.frozen
class AttrPatch:
    """One edit: set ``<module>.<attr>`` to ``new``.

    ``module`` is a dotted module path (resolved through ``importlib`` so that a
    submodule shadowed by a same-named package attribute, e.g.
    ``megatron.core.distributed.finalize_model_grads``, is still found).
    With ``required=False`` a missing attribute is skipped instead of an error.
    """

    module: str
    attr: str
    new: Any
    required: bool = True


@attrs.frozen
class PatchSpec:
    """Registry record: a patch name, its factory and a one-line description."""

    name: str
    factory: Callable[[Any], List[AttrPatch]]
    description: str = ""


@attrs.define
class _Applied:
    module: Any  # the module object
    attr: str
    had_attr: bool
    old: Any
    new: Any


@attrs.define
class _AppliedPatch:
    name: str
    edits: List[_Applied] = attrs.field(factory=list)


_REGISTRY: Dict[str, PatchSpec] = {}


def register_patch(name: str, *, description: str = ""):
    """Decorator registering ``factory(args) -> list[AttrPatch]`` under ``name``."""

    def decorator(factory):
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise ValueError(f"finch: a Megatron patch named {name!r} is already registered")
        _REGISTRY[name] = PatchSpec(name=name, factory=factory, description=description)
        return factory

    return decorator


def get_patch(name: str) -> PatchSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"finch: unknown Megatron patch {name!r}; available: {sorted(_REGISTRY)}"
        ) from None


def available_patches() -> Dict[str, str]:
    """``{name: description}`` of every registered patch."""
    return {n: s.description for n, s in sorted(_REGISTRY.items())}


class PatchHandle:
    """What :func:`apply_patches` returns: undoes the applied patches.

    ``undo()`` restores in reverse order of application and is idempotent.  It
    refuses (``RuntimeError``, nothing restored) if any patched attribute no
    longer holds finch's replacement, i.e. someone patched over it and has not
    undone that yet.  Also usable as a context manager.
    """

    def __init__(self, applied: List[_AppliedPatch]):
        self._applied = applied
        self._undone = False

    @property
    def names(self) -> List[str]:
        return [p.name for p in self._applied]

    @property
    def active(self) -> bool:
        return not self._undone

    def undo(self) -> None:
        if self._undone:
            return
        _restore(self._applied)
        self._undone = True
        if self._applied:
            _log().info("finch: undid Megatron patches %s", self.names)

    __call__ = undo

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()
        return False

    def __repr__(self):
        state = "undone" if self._undone else "active"
        return f"<finch PatchHandle {self.names} {state}>"


def _restore(applied: Sequence[_AppliedPatch]) -> None:
    edits = [e for p in reversed(applied) for e in reversed(p.edits)]
    for e in edits:
        current = getattr(e.module, e.attr, _MISSING)
        if current is not e.new:
            raise RuntimeError(
                f"finch: cannot undo patch of {e.module.__name__}.{e.attr}: it was replaced "
                "after finch patched it; undo that change first"
            )
    for e in edits:
        if e.had_attr:
            setattr(e.module, e.attr, e.old)
        else:
            delattr(e.module, e.attr)


def _normalize_names(names) -> List[str]:
    if names is None:
        return []
    if isinstance(names, str):
        names = names.split(",")
    out: List[str] = []
    for n in names:
        n = str(n).strip()
        if n and n not in out:
            out.append(n)
    return out


def _apply_one(spec: PatchSpec, args) -> _AppliedPatch:
    edits = spec.factory(args)
    record = _AppliedPatch(name=spec.name)
    try:
        for edit in edits:
            module = importlib.import_module(edit.module)
            old = getattr(module, edit.attr, _MISSING)
            if old is _MISSING and edit.required:
                raise AttributeError(f"finch: {edit.module} has no attribute {edit.attr!r}")
            if old is _MISSING:
                continue
            if getattr(old, _TAG, None) == spec.name:
                raise RuntimeError(
                    f"finch: Megatron patch {spec.name!r} is already applied "
                    f"({edit.module}.{edit.attr})"
                )
            try:
                setattr(edit.new, _TAG, spec.name)
            except (AttributeError, TypeError):
                pass
            setattr(module, edit.attr, edit.new)
            record.edits.append(_Applied(module, edit.attr, True, old, edit.new))
    except BaseException:
        _restore([record])
        raise
    return record


def apply_patches(args, names: Optional[Iterable[str]] = None) -> PatchHandle:
    """Apply the named Megatron patches; return a :class:`PatchHandle` that undoes them.

    ``names=None`` means ``args.megatron_patches`` (a list, or a comma-separated
    string; missing or None applies nothing).  Unknown names raise ``KeyError``
    before anything is patched.  If one patch fails, those already applied by
    this call are undone before the error propagates.
    """
    if names is None:
        names = getattr(args, "megatron_patches", None)
    specs = [get_patch(n) for n in _normalize_names(names)]
    applied: List[_AppliedPatch] = []
    try:
        for spec in specs:
            applied.append(_apply_one(spec, args))
            _log().info("finch: applied Megatron patch %r", spec.name)
    except BaseException:
        _restore(applied)
        raise
    return PatchHandle(applied)
