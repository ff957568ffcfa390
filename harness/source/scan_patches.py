"""The patches a framework makes, read for its starter declaration: each replaced Megatron symbol with the framework's
replacement, and the guess of ``[symbols_patch]``, the functions whose call makes them.

The reading is :mod:`.framework_patches`' (the scopes of each assignment, closures, methods and aliases resolved,
methods bound on built objects whose class the framework's ``isinstance`` tests or the names around them give), named
as the from-source verdicts name them (:func:`~.megatron_keys.megatron_key`). Restoring assignments (an undo puts
the original back) are no replacements; literals are kept apart (:attr:`FrameworkPatches.literals`: state where
Megatron defines the name, a marker where no release does); a replaced function's own ``__signature__`` or
``__doc__`` is no patch of its own.

``[symbols_patch]`` names one module: its ``apply`` is a function of it that calls every function making the
patches (``mcore_bridge.patcher.apply_patch``), or the list of those functions (verl's ``apply_patch``,
``apply_patch_mbridge``, ...); where a module's body makes them, importing it applies them. Of several such groups,
the one the framework applies when one of its packages is imported wins (the package is then the adapter), then the
one making most patches. A context manager (``@contextmanager``) patches only inside the framework's own ``with``:
never an apply.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.source.call_sites import MegatronSource, functions_of
from harness.source.class_swaps import class_swaps
from harness.source.framework_patches import Definition, FrameworkSource, read_framework
from harness.source.framework_scan import Patch, defined, megatron_source
from harness.source.megatron_keys import megatron_key
from harness.source.object_classes import defining_classes, instance_class, is_megatrons, sets_data
from harness.source.source_verdicts import has_member, is_megatron_owner
from harness.targets.megatron_names import FINALIZE_MODULE


@dataclass
class Replaced:
    """A Megatron symbol the framework replaces: where, with what, and by which of its functions."""

    key: str
    """``module:qualname`` in Megatron; for a method bound on built objects, under the class of those objects."""
    replacements: dict[str, str | None] = field(default_factory=dict)
    """Place of each assignment -> ``module:qualname`` of the framework's replacement there, where it has one (not
    a closure made inside a function)."""
    values: dict[str, str] = field(default_factory=dict)
    """Place of each assignment -> the value bound, as written."""
    makers: dict[str, str] = field(default_factory=dict)
    """Place of each assignment -> ``module:function`` around it (``module:Class.method`` for a method, the module
    alone where its body makes it)."""
    on_instances: bool = False
    undone: list[str] = field(default_factory=list)
    """Places putting Megatron's own object back (``m.f = original`` after ``m.f = g``): not replacements, but
    lines that write the name all the same, which a reader of the patch needs beside the ones that replace it."""


@dataclass(frozen=True)
class UnplacedPatch:
    """A method bound on built objects of a class the source does not name, where several Megatron classes define
    it: a row that says so, for a ``replaces with`` entry to place."""

    place: str
    bound: str
    """The object and method as written (``optimizer.step``)."""
    replacement: str
    """``module:qualname`` of the function bound, or its name where it is a closure."""
    classes: tuple[str, ...]
    """The Megatron classes defining the method, any of which the objects may be of."""


@dataclass(frozen=True)
class SymbolsPatchGuess:
    """What ``[symbols_patch]`` should say: the module, how it is applied, and the functions ``apply`` names."""

    module: str
    applied: str
    apply: tuple[str, ...]
    makers: frozenset[str]
    """The ``module:function`` makers the apply runs."""
    adapter: str | None
    """The package whose import applies it, where one does."""


@dataclass
class FrameworkPatches:
    """Every replaced symbol, by key, and the ``[symbols_patch]`` guess (``None`` where no function of a module
    makes a patch)."""

    replaced: dict[str, Replaced]
    guess: SymbolsPatchGuess | None
    framework: FrameworkSource
    literals: set[str] = field(default_factory=set)
    """``file:line`` (file name only) of every literal the framework binds on Megatron (``_X_GROUP = None``,
    ``Cls._patched = True``): state where Megatron defines the name, a marker where no release does."""
    unplaced: list[UnplacedPatch] = field(default_factory=list)
    """Methods bound on built Megatron objects whose class the source does not say."""

    def made_by_guess(self, key: str) -> list[str]:
        """The places where the guessed apply makes the patch of ``key`` (empty: made elsewhere)."""
        makers = self.guess.makers if self.guess else frozenset()
        return [place for place, maker in self.replaced[key].makers.items() if maker in makers]

    @property
    def patch_places(self) -> set[str]:
        """``file:line`` (file name only, as the source scan names places) of every patch assignment read, undos
        and markers included."""
        replaced = {place for entry in self.replaced.values() for place in entry.makers}
        return {f"{p.file.name}:{p.line}" for p in self.framework.patches} | {short_place(place) for place in replaced}


def read_patches(
    root: Path, megatron: Path, packages: Collection[str] | None = None, scanned: Sequence[Patch] = ()
) -> FrameworkPatches:
    """The replaced symbols of the framework under ``root`` (its ``packages``, where given), named against the
    Megatron package under ``megatron``, and the ``[symbols_patch]`` guess. Of the patches only the source scan
    found (``scanned``: an owner a helper returns, a name held in a constant), those binding a function of the
    patching module are replacements too."""
    framework = read_framework(root, is_megatron_owner, packages)
    source = megatron_source(megatron)
    qualnames = _Qualnames(framework)
    replaced: dict[str, Replaced] = {}
    for patch in framework.patches:
        if patch.restores or patch.constant:
            continue
        key = megatron_key(patch.path, source)
        entry = replaced.setdefault(key, Replaced(key))
        place = framework.place(patch.module, patch.line)
        entry.replacements[place] = qualnames.of(patch.definition) or qualnames.class_named(patch.module, patch.value)
        entry.values[place] = patch.value
        entry.makers[place] = _maker(patch.module, patch.scope)
    unplaced = []
    for instance in framework.instances:
        owner = instance_class(instance, source)
        if sets_data(instance, owner, source):
            continue
        if owner is None:
            if is_megatrons(instance) and (classes := defining_classes(instance, source)):
                place = framework.place(instance.module, instance.line)
                bound = f"{instance.target}.{instance.method}"
                function = qualnames.of(instance.definition) or instance.definition.node.name
                unplaced.append(UnplacedPatch(place, bound, function, tuple(classes)))
            continue
        key = f"{owner}.{instance.method}"
        entry = replaced.setdefault(key, Replaced(key, on_instances=True))
        place = framework.place(instance.module, instance.line)
        entry.replacements[place] = qualnames.of(instance.definition)
        entry.values[place] = instance.definition.node.name
        entry.makers[place] = _maker(instance.module, instance.chain)
    for swap in class_swaps(framework):
        owner = megatron_key(swap.swapped, source) if swap.swapped else None
        for method in swap.methods() if owner is not None else ():
            key = f"{owner}.{method.name}"
            entry = replaced.setdefault(key, Replaced(key, on_instances=True))
            place = framework.place(swap.module, swap.line)
            entry.replacements[place] = f"{swap.module}:{swap.subclass.name}.{method.name}"
            entry.values[place] = f"{swap.subclass.name}.{method.name}"
            entry.makers[place] = _maker(swap.module, swap.chain)
    read = {f"{p.file.name}:{p.line}" for p in framework.patches}
    for patch in scanned:
        if patch.place in read or patch.module not in framework.trees or not patch.scope:
            continue
        tree = framework.trees[patch.module][1]
        function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == patch.value), None)
        maker = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == patch.scope), None)
        if function is None or maker is None:
            continue
        entry = replaced.setdefault(patch.key, Replaced(patch.key))
        place = framework.place(patch.module, int(patch.place.rpartition(":")[2]))
        entry.replacements[place] = f"{patch.module}:{function.name}"
        entry.values[place] = patch.value
        entry.makers[place] = f"{patch.module}:{maker.name}"
    for key, places in _undos(framework, source).items():
        if key in replaced:
            replaced[key].undone = places
    literals = {f"{p.file.name}:{p.line}" for p in framework.patches if p.constant}
    return FrameworkPatches(replaced, _guess(framework, replaced), framework, literals, unplaced)


def _undos(framework: FrameworkSource, source: MegatronSource) -> dict[str, list[str]]:
    """The places putting Megatron's own object back, by the key they write."""
    undos: dict[str, list[str]] = {}
    for patch in framework.patches:
        if patch.restores and not patch.constant:
            undos.setdefault(megatron_key(patch.path, source), []).append(framework.place(patch.module, patch.line))
    return undos


def defined_everywhere(key: str, trees: Sequence[Path]) -> bool:
    """Whether every Megatron tree has ``key``: a name its module binds, or a method its class defines or inherits
    from a Megatron base (a method swapped on a subclass's objects is the subclass's too)."""
    return all(defined(tree, key) or has_member(megatron_source(tree), key) for tree in trees)


class _Qualnames:
    """The framework's functions and classes that an import reaches, by ``module:qualname``."""

    def __init__(self, framework: FrameworkSource) -> None:
        self.functions: dict[int, str] = {}
        self.classes: dict[str, set[str]] = {}
        for module, (_, tree) in framework.trees.items():
            self.functions.update((id(node), f"{module}:{qualname}") for node, qualname in functions_of(tree))
            self.classes[module] = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}

    def of(self, definition: Definition | None) -> str | None:
        """``module:qualname`` of a function defined at module level or in a class; ``None`` for a closure."""
        return self.functions.get(id(definition.node)) if definition is not None else None

    def class_named(self, module: str, value: str) -> str | None:
        """``module:Class`` where the value bound is a class the patching module defines (``router.RouterReplay =
        RouterReplay``)."""
        return f"{module}:{value}" if value in self.classes.get(module, ()) else None


def _maker(module: str, chain: tuple[ast.AST, ...]) -> str:
    """``module:function`` of the outermost function around a patch (``module:Class.method`` in a class), the
    module alone at module level."""
    outer = [node for node in chain[:-1] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    if not outer:
        return module
    if isinstance(outer[0], ast.ClassDef):
        method = next((n for n in outer[1:] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
        return f"{module}:{outer[0].name}.{method.name}" if method else module
    return f"{module}:{outer[0].name}"


def _is_context_manager(framework: FrameworkSource, maker: str) -> bool:
    """Whether the function ``module:name`` is a ``@contextmanager``: it patches for the ``with`` around its use."""
    module, _, name = maker.partition(":")
    definition = framework.definition(module, name)
    return definition is not None and any(
        (getattr(d, "id", None) or getattr(d, "attr", None)) in ("contextmanager", "asynccontextmanager")
        for d in definition.node.decorator_list
    )


@dataclass(frozen=True)
class _Candidate:
    """One way ``[symbols_patch]`` could apply the patches, and how many it makes."""

    module: str
    applied: str
    apply: tuple[str, ...]
    makers: frozenset[str]
    made: int
    adapter: str | None

    def rank(self) -> tuple[bool, int, int, bool]:
        """Applied at a package's import first, then most patches made, then fewest names to call."""
        return (self.adapter is not None, self.made, -len(self.apply), self.applied == "call")


def _guess(framework: FrameworkSource, replaced: dict[str, Replaced]) -> SymbolsPatchGuess | None:
    """The best of the candidate applies: each module whose body patches (applied by import), each module's
    patching functions as a list, and each function calling patching functions of the framework."""
    made: dict[str, int] = {}
    for entry in replaced.values():
        if entry.on_instances or entry.key.partition(":")[0] == FINALIZE_MODULE:
            # Bound on objects the framework builds (no function of a module applies it to Megatron), or the
            # all-reduce, which [patch] applies.
            continue
        for maker in set(entry.makers.values()):
            made[maker] = made.get(maker, 0) + 1
    functions = {m for m in made if ":" in m and "." not in m.partition(":")[2]}
    functions -= {m for m in functions if _is_context_manager(framework, m)}
    candidates = [
        _Candidate(module, "import", (), frozenset([module]), count, _imported_package(framework, module))
        for module, count in made.items()
        if ":" not in module
    ]
    by_module: dict[str, list[str]] = {}
    for maker in sorted(functions, key=lambda m: _line(framework, m)):
        by_module.setdefault(maker.partition(":")[0], []).append(maker)
    for module, makers in by_module.items():
        adapters = [_called_at_import(framework, maker) for maker in makers]
        names = tuple(maker.partition(":")[2] for maker in makers)
        count = sum(made[maker] for maker in makers)
        adapter = next((a for a in adapters if a), None)
        candidates.append(_Candidate(module, "call", names, frozenset(makers), count, adapter))
    for entry, makers in _entry_points(framework, functions).items():
        module, _, name = entry.partition(":")
        count = sum(made[maker] for maker in makers)
        candidates.append(
            _Candidate(module, "call", (name,), frozenset(makers), count, _called_at_import(framework, entry))
        )
    if not candidates:
        return None
    best = max(candidates, key=_Candidate.rank)
    return SymbolsPatchGuess(best.module, best.applied, best.apply, best.makers, best.adapter)


def _entry_points(framework: FrameworkSource, makers: set[str]) -> dict[str, set[str]]:
    """Module-level functions of the framework (not makers themselves) that call makers: each with those it calls."""
    entries: dict[str, set[str]] = {}
    for maker in makers:
        module, _, name = maker.partition(":")
        for call in framework.callers(module, (name,)):
            outer = call.chain[0] if len(call.chain) > 1 else None
            if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
                entry = f"{call.module}:{outer.name}"
                if entry not in makers and not _is_context_manager(framework, entry):
                    entries.setdefault(entry, set()).add(maker)
    return entries


def _called_at_import(framework: FrameworkSource, function: str) -> str | None:
    """The package (or module) whose body calls ``function``: importing it applies what the function patches."""
    module, _, name = function.partition(":")
    for call in framework.callers(module, (name,)):
        if len(call.chain) == 1:
            return _imported_package(framework, call.module)
    return None


def _imported_package(framework: FrameworkSource, module: str) -> str:
    """The package a module's body runs in: itself for a package's ``__init__``, else the package holding it."""
    path, _ = framework.trees[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0] or module


def _line(framework: FrameworkSource, maker: str) -> int:
    """Where the function ``module:name`` is defined: an apply list keeps the source's order."""
    module, _, name = maker.partition(":")
    definition = framework.definition(module, name)
    return definition.node.lineno if definition is not None else 0


def short_place(place: str) -> str:
    """``file:line`` with the file's name alone, as the source scan names places."""
    path, _, line = place.rpartition(":")
    return f"{Path(path).name}:{line}"
