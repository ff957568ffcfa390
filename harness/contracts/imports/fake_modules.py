"""Declared stand-ins for modules a subject imports but the gate cannot or must not provide.

A subject may import optional dependencies (``deep_ep``, ``torch_memory_saver``) or Megatron internals that a pinned
version lacks. Loading it against fakes built from a short spec keeps the import hermetic, and recording which fake
attributes the loaded code looked up tells the gate which of the declared internals the subject really uses at import
time -- and which ones it reached for without declaring them.

Spec: ``{"dotted.module.name": {"attribute": kind_or_value, ...}, ...}``. A kind is one of the strings ``"class"``
(a fresh class whose constructor accepts any arguments), ``"function"`` (accepts any arguments, returns ``None``) or
``"module"`` (an empty child fake module); any other value is bound as it is. Parent packages are created as needed,
every module with a child is a package (``__path__ == []``), and children are bound as attributes of their parents.
"""

from __future__ import annotations

import importlib.machinery
from collections.abc import Iterator, Mapping
from types import ModuleType


class FakeModule(ModuleType):
    """A module that reports the non-dunder attribute lookups made on it to its :class:`FakeModuleTree`.

    Dunder lookups are not recorded: the import system and introspection make them on every module. Lookups that
    return a child fake module are not recorded either: reaching ``megatron.core`` on the way to
    ``megatron.core.parallel_state.get_group`` is traversal, not use.
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
            tree._missing.add(qualified)
            raise
        if not isinstance(value, FakeModule):
            tree._touched.add(qualified)
        return value


class FakeModuleTree(Mapping[str, ModuleType]):
    """The fake modules built from one spec, by dotted name, and the record of their use.

    It is a mapping of module name to module, so it can be passed as the ``fakes`` of
    :func:`harness.contracts.imports.isolation.load_isolated` directly.
    """

    def __init__(self) -> None:
        self._modules: dict[str, FakeModule] = {}
        self._touched: set[str] = set()
        self._missing: set[str] = set()

    @property
    def modules(self) -> dict[str, ModuleType]:
        """The fake modules by dotted name (a copy)."""
        return dict(self._modules)

    def touched(self) -> set[str]:
        """Qualified names (``"deep_ep.Buffer"``) of the declared attributes looked up since building or reset."""
        return set(self._touched)

    def missing(self) -> set[str]:
        """Qualified names looked up on a fake module that the spec does not declare."""
        return set(self._missing)

    def reset(self) -> None:
        """Forget the lookups recorded so far."""
        self._touched.clear()
        self._missing.clear()

    def __getitem__(self, name: str) -> ModuleType:
        return self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


def build_fakes(spec: Mapping[str, Mapping[str, object]]) -> FakeModuleTree:
    """Build the fake modules declared by ``spec`` (see the module docstring), parents included."""
    declared = {name: dict(attributes) for name, attributes in spec.items()}
    for name, attributes in list(declared.items()):
        for attribute, value in attributes.items():
            if _is_kind(value, "module"):
                declared.setdefault(f"{name}.{attribute}", {})
    names = set(declared)
    for name in list(names):
        parts = name.split(".")
        names.update(".".join(parts[:end]) for end in range(1, len(parts)))
    packages = {name.rpartition(".")[0] for name in names} - {""}

    tree = FakeModuleTree()
    for name in sorted(names, key=lambda name: name.count(".")):
        module = _new_module(tree, name, is_package=name in packages)
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


def _new_module(tree: FakeModuleTree, name: str, *, is_package: bool) -> FakeModule:
    module = FakeModule(name, f"Fake of {name}, declared for the megatron-conformance gate.")
    object.__setattr__(module, "_fake_tree", tree)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin="fake", is_package=is_package)
    if is_package:
        module.__path__ = []
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


def _is_kind(value: object, kind: str) -> bool:
    return isinstance(value, str) and value == kind


def _accept_anything(self: object, *args: object, **kwargs: object) -> None:
    """Constructor of a declared fake class: accepts anything, does nothing."""
