"""Declared stand-ins for modules a subject imports but the gate cannot or must not provide.

A subject may import optional dependencies (``deep_ep``, ``torch_memory_saver``) or Megatron internals that a pinned
version lacks. Loading it against fakes built from a short spec keeps the import hermetic, and recording which fake
attributes the loaded code looked up tells the gate which of the declared internals the subject really uses at import
time -- and which ones it reached for without declaring them.

Spec: ``{"dotted.module.name": {"attribute": kind_or_value, ...}, ...}``. A kind is one of the strings ``"class"``
(a fresh class whose constructor accepts any arguments), ``"function"`` (accepts any arguments, returns ``None``) or
``"module"`` (an empty child fake module); any other value is bound as it is. Parent packages are created as needed,
and children are bound as attributes of their parents.

Every fake is a package (``__path__ == []``) that makes child fake packages on demand: while an isolated load runs
(see :mod:`harness.contracts.import_side_effects.isolation`), ``import megatron.core.parallel_state`` or ``from
megatron.core import parallel_state`` below a fake of ``megatron`` yields a fake ``megatron.core.parallel_state``, so an
adapter's ordinary imports of Megatron submodules need not be declared. :meth:`FakeModuleTree.created` tells which
submodules were made (or reached again) that way. Such a child is bound as an attribute of its parent and kept in the
tree, so that a second load sees the same object; it is in ``sys.modules`` only during a load. Plain attribute access is
not on demand: a lookup of an undeclared name raises :class:`AttributeError` and is recorded by
:meth:`FakeModuleTree.missing`. Because ``from pkg import name`` cannot tell a submodule from an attribute, an
undeclared ``name`` imported that way becomes a child fake *module* too (declare it to get a class or a function).

Fakes keep the installed target's signatures. Built with ``originals`` (a snapshot of ``sys.modules`` taken before
the fakes stand in), a lookup of an undeclared name that the real module of the same name binds to a function or a
class yields a stand-in that carries the real ``__signature__`` (:meth:`FakeModuleTree.mirrored`): a fake function
that accepts anything and does nothing, or a fake class whose constructor does the same. An adapter that calls
``inspect.signature`` on a Megatron function at import, to pick the call shape of the target, then imports beside the
fakes as it does beside the real Megatron. Nothing else of the real object is copied (defaults, dataclass fields,
methods): what the adapter's import does with those it has to do on a real Megatron, where the gate observes it. A
fake module does carry its real module's ``__version__``: frameworks pick their code path by
``megatron.core.__version__`` at import (ms-swift's ``init_megatron_env``, mcore-bridge's patcher).
"""

from __future__ import annotations

import importlib.machinery
import inspect
from collections.abc import Callable, Iterator, Mapping
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType


class FakeModule(ModuleType):
    """A module that reports the non-dunder attribute lookups made on it to its :class:`FakeModuleTree`.

    Dunder lookups are not recorded: the import system and introspection make them on every module. Lookups that
    return a child fake module are not recorded as touched: reaching ``megatron.core`` on the way to
    ``megatron.core.parallel_state.get_group`` is traversal, not use; reaching a child made on demand is recorded by
    :meth:`FakeModuleTree.created` instead.
    """

    __slots__ = ("_fake_tree",)

    def __getattribute__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            return super().__getattribute__(name)
        tree: FakeModuleTree = object.__getattribute__(self, "_fake_tree")
        qualified = f"{ModuleType.__getattribute__(self, '__name__')}.{name}"
        try:
            value = super().__getattribute__(name)
        except AttributeError:
            value = tree._mirror(self, name, qualified)
            if value is None:
                tree._missing.add(qualified)
                raise
        if not isinstance(value, FakeModule):
            tree._touched.add(qualified)
        elif tree._on_demand.get(qualified) is value:
            tree._created.add(qualified)
        return value


class FakeModuleTree(Mapping[str, ModuleType]):
    """The fake modules built from one spec, by dotted name, and the record of their use.

    It is a mapping of module name to module, so it can be passed as the ``fakes`` of
    :func:`harness.contracts.import_side_effects.isolation.load_isolated` directly.
    """

    def __init__(self, originals: Mapping[str, ModuleType] | None = None) -> None:
        self._modules: dict[str, FakeModule] = {}
        self._on_demand: dict[str, FakeModule] = {}
        self._touched: set[str] = set()
        self._missing: set[str] = set()
        self._created: set[str] = set()
        self._mirrored: set[str] = set()
        self._originals: Mapping[str, ModuleType] = dict(originals or {})

    @property
    def modules(self) -> dict[str, ModuleType]:
        """The declared fake modules (parents included) by dotted name (a copy); children made on demand are not."""
        return dict(self._modules)

    def touched(self) -> set[str]:
        """Qualified names (``"deep_ep.Buffer"``) of the declared attributes looked up since building or reset."""
        return set(self._touched)

    def missing(self) -> set[str]:
        """Qualified names looked up on a fake module that the spec does not declare (and no import made)."""
        return set(self._missing)

    def created(self) -> set[str]:
        """Dotted names of the undeclared submodules imported (made on demand) or reached since building or reset."""
        return set(self._created)

    def mirrored(self) -> set[str]:
        """Qualified names of the stand-ins made for real functions and classes (see the module docstring), since
        building: they stay bound on their fake module, as children made on demand stay in the tree."""
        return set(self._mirrored)

    def reset(self) -> None:
        """Forget the lookups and imports recorded so far; children made on demand stay in the tree."""
        self._touched.clear()
        self._missing.clear()
        self._created.clear()

    def _mirror(self, module: FakeModule, name: str, qualified: str) -> object | None:
        """A stand-in for what the real module of ``module``'s name binds as ``name``, bound on ``module`` and
        recorded as touched; ``None`` when that is no function or class (or there is no real module)."""
        real_module = self._originals.get(ModuleType.__getattribute__(module, "__name__"))
        real = vars(real_module).get(name) if isinstance(real_module, ModuleType) else None
        stand_in = _stand_in(ModuleType.__getattribute__(module, "__name__"), name, real)
        if stand_in is None:
            return None
        object.__setattr__(module, name, stand_in)
        self._mirrored.add(qualified)
        self._touched.add(qualified)
        return stand_in

    def make_child(self, name: str) -> FakeModule | None:
        """The fake package ``name`` below one of this tree's modules, made on demand; ``None`` if it cannot be one.

        It is ``None`` when the parent is not a module of this tree or binds ``name``'s last part to something else
        (a declared function, say: ``import pkg.function`` fails for real too); a declared module is returned as it
        is. A new child is bound as an attribute of its parent; it is recorded by :meth:`created` and no longer by
        :meth:`missing`, and a second call returns the same object. Called through the finder that
        :func:`harness.contracts.import_side_effects.isolation.isolated_modules` installs.
        """
        if name in self._modules:
            return self._modules[name]
        parent_name, _, child = name.rpartition(".")
        parent = self._modules.get(parent_name, self._on_demand.get(parent_name))
        if parent is None:
            return None
        module = self._on_demand.get(name)
        if child in vars(parent) and (module is None or vars(parent)[child] is not module):
            return None
        if module is None:
            module = self._on_demand[name] = _new_module(self, name)
        setattr(parent, child, module)
        self._created.add(name)
        self._missing.discard(name)
        return module

    def __getitem__(self, name: str) -> ModuleType:
        return self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


def build_fakes(
    spec: Mapping[str, Mapping[str, object]], originals: Mapping[str, ModuleType] | None = None
) -> FakeModuleTree:
    """Build the fake modules declared by ``spec`` (see the module docstring), parents included. ``originals``
    (module name -> real module, e.g. ``dict(sys.modules)`` before the fakes stand in) are the modules whose
    functions and classes the fakes mirror with their real signatures; it is copied, so a later change of
    ``sys.modules`` (the isolation's own) does not reach it."""
    declared = {name: dict(attributes) for name, attributes in spec.items()}
    for name, attributes in list(declared.items()):
        for attribute, value in attributes.items():
            if _is_kind(value, "module"):
                declared.setdefault(f"{name}.{attribute}", {})
    names = set(declared)
    for name in list(names):
        parts = name.split(".")
        names.update(".".join(parts[:end]) for end in range(1, len(parts)))

    tree = FakeModuleTree(originals)
    for name in sorted(names, key=lambda name: name.count(".")):
        module = _new_module(tree, name)
        tree._modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(tree._modules[parent], child, module)
    for name, attributes in declared.items():
        module = tree._modules[name]
        for attribute, value in attributes.items():
            if f"{name}.{attribute}" in tree._modules:
                if not _is_kind(value, "module"):
                    raise ValueError(f"fake {name}.{attribute} is declared both as a module and as an attribute")
                continue
            setattr(module, attribute, _attribute(name, attribute, value))
    return tree


def _new_module(tree: FakeModuleTree, name: str) -> FakeModule:
    module = FakeModule(name, f"Fake of {name}, declared for the megatron-conformance gate.")
    object.__setattr__(module, "_fake_tree", tree)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin="fake", is_package=True)
    module.__path__ = []
    version = getattr(tree._originals.get(name), "__version__", None)
    if isinstance(version, str):
        module.__version__ = version
    return module


def _attribute(module: str, name: str, value: object) -> object:
    if _is_kind(value, "class"):
        return type(name, (), {"__module__": module, "__qualname__": name, "__init__": _accept_anything})
    if not _is_kind(value, "function"):
        return value

    def fake(*args: object, **kwargs: object) -> None:
        """A declared fake function: accepts anything, does nothing."""

    fake.__name__ = fake.__qualname__ = name
    fake.__module__ = module
    return fake


def _stand_in(module: str, name: str, real: object) -> Callable[..., object] | None:
    """A fake function or class named ``module.name`` with ``real``'s signature; ``None`` unless ``real`` is a
    function or a class. Where ``inspect`` finds no signature for it (some builtins), the stand-in has none either,
    as the real one has not."""
    if not isinstance(real, (type, FunctionType, BuiltinFunctionType, MethodType)):
        return None
    try:
        signature: inspect.Signature | None = inspect.signature(real)
    except (TypeError, ValueError):
        signature = None
    qualname = getattr(real, "__qualname__", name)
    namespace: dict[str, object] = {"__module__": module, "__qualname__": qualname, "__doc__": _MIRROR_DOC}
    if isinstance(real, type):
        namespace["__init__"] = _accept_anything
        if signature is not None:
            namespace["__signature__"] = signature
        return type(name, (), namespace)

    def fake(*args: object, **kwargs: object) -> None:
        """A stand-in for a real function: accepts anything, does nothing."""

    fake.__name__, fake.__qualname__, fake.__module__, fake.__doc__ = name, qualname, module, _MIRROR_DOC
    if signature is not None:
        fake.__signature__ = signature  # type: ignore[attr-defined]
    return fake


_MIRROR_DOC = "A fake standing in for the installed target's object of this name, with its signature."


def _is_kind(value: object, kind: str) -> bool:
    return isinstance(value, str) and value == kind


def _accept_anything(self: object, *args: object, **kwargs: object) -> None:
    """Constructor of a declared fake class: accepts anything, does nothing."""
