"""A verdict for every Megatron symbol a framework replaces, read from the framework's source and Megatron's, with
nothing of the framework run: what the gate says where the framework cannot be imported here, where its apply
cannot run (Transformer Engine, a GPU), or where the symbol is reached through ``nn.Module.__call__``.

The rules are the live checks' (:mod:`.replacement_fit`, :mod:`.call_sites`), applied to the replacement's
definition as written:

- red: a Megatron call site passes what the replacement cannot bind; a call site unpacks another number of values
  than every ``return`` of the replacement gives; the replacement calls the original it captured with what the
  target's original does not take; a Megatron module holds the function by value and calls it there; a method
  swapped on built objects was kept by value by the class's constructor;
- advisory: keywords a call site passes that the replacement takes in a ``**kwargs`` it never reads; a by-value
  binding Megatron never calls; an unpacking call whose count the replacement's source does not decide;
- ``fits`` with the call sites it fits; ``undecided`` (never a fit) where no call site is found or the replacement is
  not a function of the framework's source; ``skipped`` where the framework's own check leaves the patch out on this
  target (:mod:`.framework_guards`), ``absent`` where Megatron here does not define what the patch replaces.

Where the framework's own code stops before a patch on the target (:mod:`.framework_failures`), that is a row of its
own, ``!:<file>:<line>``, and the symbol is judged as the code reads once it is mended.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.source.call_sites import (
    MegatronCall,
    MegatronSource,
    calls_in,
    is_self_call,
)
from harness.source.class_swaps import ClassSwap, class_swaps
from harness.source.framework_failures import (
    Failure,
    calls_missing_first,
    failing_import,
    missing_original,
    reads_original,
)
from harness.source.framework_guards import Versions, guard_of
from harness.source.framework_patches import (
    ClassValue,
    Definition,
    FrameworkSource,
    InstancePatch,
    SourcePatch,
    read_framework,
    statement_at,
)
from harness.source.framework_scan import defined
from harness.source.megatron_keys import megatron_key
from harness.source.megatron_namespace import is_megatron
from harness.source.module_backfills import (
    BackFill,
    backfilled_modules,
    backfills,
    imports_megatron,
)
from harness.source.module_calls import instance_calls, spec_constructions
from harness.source.object_classes import (
    UNPLACED,
    class_of_self,
    instance_class,
    is_megatrons,
    sets_data,
    unplaced_verdict,
)
from harness.source.object_flags import returned_under_flags
from harness.source.replacement_fit import (
    ReadFunction,
    binding_problem,
    dropped_keywords,
    returned_count,
)
from harness.source.source_scan import swept_names

SEVERITY = ("red", "advisory", "undecided", "fits", "skipped", "absent")
"""Verdicts, most severe first: a symbol patched in several places takes its most severe."""


@dataclass
class SymbolVerdict:
    """What the gate says about one replaced symbol on one target, and how it was checked."""

    symbol: str
    """``module:qualname`` in Megatron."""
    verdict: str
    findings: list[str] = field(default_factory=list)
    """One line per red, advisory or reason, each naming the Megatron (or framework) file and line."""
    calls: list[str] = field(default_factory=list)
    """The call sites checked, ``file:line``."""
    patched_at: list[str] = field(default_factory=list)
    replacement: str = ""
    how: str = "from source"
    why: str = ""
    """Why it was read from source and not checked applied (empty where the caller did not say)."""
    by_callers: bool = False
    """Skipped by the framework's checks around every call of the function that patches, not by one in it: a
    declared apply that runs the function makes a patch the framework itself does not make here."""

    def line(self) -> str:
        """The verdict in one line, as the report and the terminal show it."""
        where = f" (patched at {', '.join(self.patched_at)})" if self.patched_at else ""
        if self.verdict == "fits":
            sites = ", ".join(self.calls)
            also = "".join(f"; {finding}" for finding in self.findings)
            return f"{self.symbol}{where}: fits its {len(self.calls)} call site(s): {sites}{also}"
        return f"{self.symbol}{where}: {self.verdict}: {'; '.join(self.findings)}"


def framework_verdicts(
    root: Path,
    source: MegatronSource,
    versions: Versions,
    declared: Mapping[str, str] | None = None,
    live: Iterable[str] = (),
) -> list[SymbolVerdict]:
    """A verdict per Megatron symbol the framework under ``root`` replaces: each patch assignment its source makes,
    and each symbol ``declared`` names with its replacement (``symbol -> module:qualname``, a method bound on
    instances included, whose class the source does not give); those in ``live`` (checked applied) left out."""
    framework = read_framework(root, is_megatron_owner)
    keyed: dict[str, list[SourcePatch]] = {}
    for patch in (p for p in framework.patches if not p.constant):
        keyed.setdefault(megatron_key(patch.path, source), []).append(patch)
    unfound: list[SymbolVerdict] = []
    for symbol, replacement in (declared or {}).items():
        if not any(not p.restores for p in keyed.get(symbol, [])):
            definition = _declared_definition(framework, replacement)
            if isinstance(definition, str):
                unfound.append(SymbolVerdict(symbol, "red", [definition], replacement=replacement))
            else:
                keyed[symbol] = [_declared_patch(symbol, replacement, definition)]
    bound_as = {
        id(patch.definition.node): patch.path.rpartition(".")[0]
        for patch in framework.patches
        if patch.definition is not None and not patch.restores
    }
    unplaced: dict[str, tuple[str, str]] = {}
    # A declared replacement places the patch of its function: the source's ``?:`` row for it would say it twice.
    declared_by = {
        (module, qualname.rpartition(".")[2])
        for module, _, qualname in (replacement.partition(":") for replacement in (declared or {}).values())
    }
    for instance in framework.instances:
        owner = class_of_self(instance, bound_as, source) or instance_class(instance, source)
        if sets_data(instance, owner, source):
            continue
        if owner is not None:
            keyed.setdefault(f"{owner}.{instance.method}@{instance.place}", []).append(_instance_patch(instance, owner))
        elif is_megatrons(instance) and (instance.definition.module, instance.definition.node.name) not in declared_by:
            key = f"{UNPLACED}:{instance.target}.{instance.method}@{instance.place}"
            keyed.setdefault(key, []).append(_instance_patch(instance, None))
            unplaced[key] = unplaced_verdict(instance, source, versions.megatron)
    for fill in backfills(framework):
        modules = backfilled_modules(source, fill)
        for module in modules:
            keyed.setdefault(f"{module}:{fill.name}", []).append(_backfill_patch(framework, fill, module))
        if not modules and imports_megatron(framework, fill.module):
            key = f"{UNPLACED}:{fill.name}"
            keyed.setdefault(key, []).append(_backfill_patch(framework, fill, UNPLACED))
            unplaced[key] = (
                "absent",
                f"no module of megatron-core {versions.megatron} binds `{fill.name}` at its top level"
                + (" to None" if fill.only_none else "")
                + ": the back-fill changes nothing of Megatron's here",
            )
    for swap in class_swaps(framework):
        owner = megatron_key(swap.swapped, source) if swap.swapped else None
        for method in swap.methods() if owner is not None else ():
            patch = _swap_patch(framework, swap, method, owner)
            keyed.setdefault(f"{owner}.{method.name}@{patch.place}", []).append(patch)
    # A method swapped on some built objects (an ``@`` key) leaves Megatron's own calls inside it standing for the
    # others: only replacements of a class's or module's name take Megatron's calls in them out.
    replaced = {key for key, found in keyed.items() if "@" not in key and any(not p.restores for p in found)}
    replaced |= _swept_bindings(framework, source, replaced)
    definitions = {
        key: patch.definition for key, found in keyed.items() for patch in found if patch.definition is not None
    }
    verdicts = []
    skipped = set(live)
    failures: dict[str, Failure] = {}
    for key, found in sorted(keyed.items()):
        made = [p for p in found if not p.restores]
        if key in skipped or not made:
            continue
        # An assignment of what the source does not name (an undo putting back a saved value) beside one of a
        # function it defines is the framework's undo: the function is the replacement.
        made = [p for p in made if p.definition is not None] or made
        symbol = key.partition("@")[0]
        each = [
            _not_imported(
                _verdict(
                    symbol, patch, source, versions, replaced, framework, definitions, unplaced.get(key), failures
                ),
                patch,
                framework,
                versions,
                source,
                failures,
            )
            for patch in made
        ]
        each = [v for v in each if v.verdict != "skipped"] or each
        worst = min(each, key=lambda v: SEVERITY.index(v.verdict))
        worst.symbol = key
        worst.by_callers = worst.verdict == "skipped" and all(v.by_callers for v in each)
        worst.patched_at = [p.place for p in made]
        worst.findings = list(dict.fromkeys(f for v in each if v.verdict == worst.verdict for f in v.findings))
        verdicts.append(worst)
    verdicts += [v for v in unfound if v.symbol not in skipped]
    for failure in failures.values():
        verdicts.append(SymbolVerdict(failure.key, failure.verdict, [failure.finding()]))
    return verdicts


def _swept_bindings(framework: FrameworkSource, source: MegatronSource, replaced: set[str]) -> set[str]:
    """``module:name`` of each Megatron module holding a replaced function by value under its own name, where the
    framework's loop over ``sys.modules`` re-binds that name in every module holding it: those calls reach the
    replacement too."""
    swept = {name for _, tree in framework.trees.values() for name in swept_names(tree)}
    found = set()
    for key in replaced:
        name = key.partition(":")[2]
        if name in swept:
            found |= {f"{other}:{alias}" for other, alias in source.held_by_value(key) if alias == name}
    return found


def _instance_patch(instance: InstancePatch, owner: str | None) -> SourcePatch:
    """An instance patch as a patch of the class it was resolved to (``None``: none was): the function gets the object
    first, as a method."""
    held = owner.replace(":", ".") if owner is not None else f"{UNPLACED}.{instance.target}"
    return SourcePatch(
        f"{held}.{instance.method}",
        instance.definition.node.name,
        instance.definition.file,
        instance.module,
        instance.line,
        instance.chain,
        instance.definition,
        instance.wrapper,
        names=instance.names,
        objects={instance.target: owner.replace(":", ".")} if owner is not None else {},
    )


def _backfill_patch(framework: FrameworkSource, fill: BackFill, module: str) -> SourcePatch:
    """A back-fill through ``sys.modules`` as a patch of the name in one Megatron module it reaches."""
    return SourcePatch(
        f"{module}.{fill.name}",
        fill.value,
        framework.trees[fill.module][0],
        fill.module,
        fill.line,
        fill.chain,
        fill.definition,
        None,
        names=fill.names,
    )


def _swap_patch(
    framework: FrameworkSource, swap: ClassSwap, method: ast.FunctionDef | ast.AsyncFunctionDef, owner: str
) -> SourcePatch:
    """One method a ``__class__`` swap brings, as a method swapped on built objects of the class swapped away."""
    path = framework.trees[swap.module][0]
    _, _, names = statement_at(framework, path, swap.line)
    return SourcePatch(
        f"{owner.replace(':', '.')}.{method.name}",
        f"{swap.subclass.name}.{method.name}",
        path,
        swap.module,
        swap.line,
        swap.chain,
        Definition(method, path, swap.module),
        _decorated_kind(method),
        names=names,
        objects={swap.target: owner.replace(":", ".")},
    )


def _declared_definition(framework: FrameworkSource, replacement: str) -> Definition | str:
    """The framework's function a ``replaces with <module>:<qualname>`` entry names (the framework's re-exports
    followed), else why the entry names nothing to check."""
    module, _, qualname = replacement.partition(":")
    dotted = framework.canonical(f"{module}.{qualname}")
    parts = dotted.split(".")
    cut = next((i for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in framework.trees), None)
    definition = framework.definition(".".join(parts[:cut]), ".".join(parts[cut:])) if cut else None
    if definition is not None:
        return definition
    where = (
        f"the framework has no module {module}" if module not in framework.trees else f"{module} defines no {qualname}"
    )
    return (
        f"declared in [megatron_symbols] as 'replaces with {replacement}', but {where} (read under "
        f"{framework.root}): the entry names no function of the framework to check; correct it"
    )


def _declared_patch(symbol: str, replacement: str, definition: Definition) -> SourcePatch:
    """A replaced symbol the declaration names, as a patch of its declared replacement: where the source's own
    assignment is not found (a method swapped on built instances, an owner reached through a helper)."""
    return SourcePatch(
        symbol.replace(":", "."),
        replacement,
        definition.file,
        definition.module,
        definition.node.lineno,
        (definition.node,),
        definition,
        _decorated_kind(definition.node),
        declared=True,
    )


def is_megatron_owner(dotted: str) -> bool:
    """A Megatron module, or a class of one, as the framework's imports name it: it need not exist on this target
    (then the patch is ``absent`` here, or skipped by the framework's own check, not unseen)."""
    return is_megatron(dotted) and dotted != "megatron"


def _defines(source: MegatronSource, key: str) -> bool:
    """Whether Megatron here has ``key``: a module-level name, or a method its class defines or inherits from a
    Megatron base (an attribute only its objects hold, set by its constructor, is no member of the class)."""
    return defined(source.root, key, on_objects=False) or has_member(source, key)


def has_member(source: MegatronSource, key: str) -> bool:
    """Whether the class of ``module:Class.name`` defines ``name`` or inherits it from a Megatron base (a class's
    ``__init__`` always)."""
    module, _, qualname = key.partition(":")
    owner_name, _, method = qualname.rpartition(".")
    owner = source.class_named(module, owner_name) if owner_name and module in source.texts else None
    return owner is not None and (method == "__init__" or source.definer(owner, method) is not None)


def _verdict(
    key: str,
    patch: SourcePatch,
    source: MegatronSource,
    versions: Versions,
    replaced: set[str],
    framework: FrameworkSource,
    definitions: Mapping[str, Definition],
    unplaced: tuple[str, str] | None,
    failures: dict[str, Failure],
) -> SymbolVerdict:
    """The verdict of one patch of ``key`` as its replacement reads against Megatron's source, where the framework's
    own code stops before it on this target, as it reads once that is mended (the stop recorded in ``failures``);
    ``unplaced`` is the verdict and its reason where the source names no Megatron module or class of this release
    for it."""
    result = SymbolVerdict(key, "fits", replacement=patch.definition.place if patch.definition else patch.value)
    skipped = _skip(framework, patch.module, patch.scope, patch.names, versions, 0, patch.objects)
    if skipped is not None:
        result.by_callers = skipped[1]
        return _set(result, "skipped", f"not applied here by {skipped[0]}")
    first = calls_missing_first(patch, source, versions)
    if first is not None:
        failure = _stopped(failures, first, key)
        return _set(result, "absent", f"the patch is never made here: {failure.why} (`{failure.key}`)")
    if unplaced is not None:
        return _set(result, *unplaced)
    if not _defines(source, key):
        missing = f"megatron-core {versions.megatron} defines no {key.partition(':')[2]}"
        read_at = reads_original(patch, key, source)
        if read_at is not None:
            failure = failures.setdefault(read_at, missing_original(read_at, key, versions, source))
            return _set(
                result, "absent", f"{missing}: the framework's read of it at {read_at} fails first (`{failure.key}`)"
            )
        set_at = _set_when_built(source, key) if patch.wrapper == "property" else None
        if set_at is not None:
            name = key.rpartition(".")[2]
            return _set(
                result,
                "red",
                f"{set_at} sets self.{name} on every object it builds, and the property set on the class in its place "
                "has no setter: building one raises AttributeError, and those built before read the property",
            )
        return _set(result, "absent", f"{missing}: the patch adds a name Megatron does not call")
    kind = patch.wrapper
    if patch.definition is not None:
        replacement = ReadFunction(patch.definition.node, patch.bound)
        if patch.objects:
            replacement = dataclasses.replace(replacement, returns=returned_under_flags(patch, framework, versions))
        name = result.replacement
    elif patch.constructs is not None:
        # A class bound in place of the name: Megatron's constructions of it bind the ``__init__`` it runs.
        built = patch.constructs
        result.replacement = built.place
        constructor = _constructor(built, source)
        if constructor is None:
            return _set(
                result,
                "undecided",
                f"the replacement class {built.name} ({built.place}) takes its __init__ from outside the framework's "
                "and Megatron's source",
            )
        replacement, name = constructor
        kind = "method"
    else:
        return _set(
            result, "undecided", f"the replacement `{patch.value}` is not a function the framework's source defines"
        )
    calls, upstream_kind = megatron_calls_of(source, key, replaced - {key})
    calls += _calls_by_other_replacements(key, definitions)
    kind = kind or ("method" if "." in key.partition(":")[2] or upstream_kind == "property" else "function")
    verdict, findings = judge(source, key, replacement, name, calls, kind, replaced)
    originals = _original_calls(patch, key, source) + (_held_when_built(source, key) if patch.objects else [])
    result.calls = [c.place for c in calls]
    if originals:
        return _set(result, "red", *(findings if verdict == "red" else []), *originals)
    return _set(result, verdict, *findings)


def _not_imported(
    result: SymbolVerdict,
    patch: SourcePatch,
    framework: FrameworkSource,
    versions: Versions,
    source: MegatronSource,
    failures: dict[str, Failure],
) -> SymbolVerdict:
    """``result``, naming the import that stops the patching module on this target where one does (recorded in
    ``failures``); a patch the framework's own check skips is left as it is."""
    stopped = failing_import(framework, patch.module, versions, source) if not patch.declared else None
    if stopped is None or result.verdict == "skipped":
        return result
    failure = _stopped(failures, stopped, result.symbol)
    result.findings.append(f"the patch is not made here: {failure.why} (`{failure.key}`)")
    return result


def _stopped(failures: dict[str, Failure], failure: Failure, symbol: str) -> Failure:
    """The failure kept for its place (one row however many patches it stops), with ``symbol`` among those stopped."""
    kept = failures.setdefault(failure.place, failure)
    kept.symbols.append(symbol)
    return kept


def _constructor(built: ClassValue, source: MegatronSource) -> tuple[ReadFunction, str] | None:
    """The ``__init__`` a framework class bound in place of a Megatron name runs (its own, or the Megatron base's it
    inherits), and how findings name it; None where neither source has it."""
    if built.init is not None:
        return ReadFunction(built.init.node), f"{built.name}.__init__ ({built.init.place})"
    base = megatron_key(built.megatron_base, source) if built.megatron_base else None
    module, _, qualname = base.partition(":") if base else ("", "", "")
    upstream = upstream_definition(source, module, f"{qualname}.__init__") if base else None
    if upstream is None:
        return None
    return ReadFunction(upstream), f"{built.name} (with {qualname}.__init__ of {module})"


def _set_when_built(source: MegatronSource, key: str) -> str | None:
    """Where a constructor along the class of ``module:Class.name`` sets ``self.name``, first along its bases."""
    module, _, qualname = key.partition(":")
    owner_name, _, name = qualname.rpartition(".")
    owner = source.class_named(module, owner_name) if owner_name and module in source.texts else None
    for info in source.mro(owner) if owner is not None else ():
        place = source.set_when_built(info).get(name)
        if place is not None:
            return place
    return None


def _held_when_built(source: MegatronSource, key: str) -> list[str]:
    """For a method swapped on built objects: where Megatron's constructor kept the bound method by value, which
    the swap never reaches."""
    return [
        f"{read.place} ({read.caller.split(':')[-1]}) keeps {read.name} by value when the object is built: "
        f"the method swapped on the built object is never called through it"
        for read in source.held_when_built(key)
    ]


def _calls_by_other_replacements(key: str, definitions: Mapping[str, Definition]) -> list[MegatronCall]:
    """``self.<method>(...)`` in the framework's other replacements of methods: where it replaces a method and the
    method that calls it, its copy of the caller is what calls the other (as the live checks read it)."""
    qualname = key.partition(":")[2]
    if "." not in qualname:
        return []
    method = qualname.rpartition(".")[2]
    found = []
    for other, definition in definitions.items():
        if other != key and "." in other.partition(":")[2]:
            found += calls_in(
                definition.node, definition.place.rpartition(":")[0], f"{other} (replaced)", is_self_call(method)
            )
    return found


def megatron_calls_of(source: MegatronSource, key: str, replaced: set[str]) -> tuple[list[MegatronCall], str | None]:
    """Megatron's uses of ``key`` on this target, those inside ``replaced`` symbols left out: reads of a property;
    calls by name, on ``self``, ``super()`` or the class; for a method, calls through attributes holding an instance
    (``forward`` through ``nn.Module.__call__``); for ``__init__``, constructions. Also how Megatron defines it
    (``property``, ``staticmethod``, ``classmethod``, else None)."""
    module, _, qualname = key.partition(":")
    upstream = upstream_definition(source, module, qualname)
    upstream_kind = _decorated_kind(upstream) if upstream is not None else None
    if upstream_kind == "property":
        return source.reads_of(key, replaced), upstream_kind
    calls = source.calls_of(key, replaced)
    if upstream is not None and qualname.endswith(".__init__"):
        own = ReadFunction(upstream)
        calls += spec_constructions(source, key, lambda call: binding_problem(own, call, "method") is None)
    if qualname.endswith(".__init__"):
        calls += _constructions(source, key, replaced)
    elif "." in qualname and upstream is not None:
        own = ReadFunction(upstream)
        kind = upstream_kind or "method"
        calls += instance_calls(source, key, lambda call: binding_problem(own, call, kind) is None)
    return list({(c.file, c.line, c.caller): c for c in calls}.values()), upstream_kind


def judge(
    source: MegatronSource,
    key: str,
    replacement: object,
    name: str,
    calls: list[MegatronCall],
    kind: str,
    replaced: set[str],
) -> tuple[str, list[str]]:
    """The live checks' rules on one replacement (a live object or a :class:`ReadFunction`) against Megatron's
    ``calls`` of ``key``: its verdict and findings. The same function judges both paths, so they agree by
    construction wherever they see the same calls."""
    red: list[str] = []
    advisory: list[str] = []
    for call in calls:
        problem = binding_problem(replacement, call, kind)
        if problem is not None:
            red.append(f"Megatron's call at {call.describe()} does not bind to {name}: {problem}")
    count = returned_count(replacement)
    for call in (c for c in calls if c.unpacks is not None):
        if count is not None and call.unpacks != count:
            red.append(f"{call.place} unpacks {call.unpacks} values, {name} returns {count}")
        elif count is None:
            advisory.append(
                f"{call.place} unpacks {call.unpacks} values; how many the replacement returns is not decided"
            )
    for call in (c for c in calls if c.bound_at is not None and f"{c.caller.split(':')[0]}:{c.name}" not in replaced):
        red.append(
            f"{call.place} calls {call.name}, bound by value at {call.bound_at}: the patch does not reach this call"
        )
    method = "." in key.partition(":")[2]
    for binding in source.bindings_of(key) if not method else ():
        if not binding.called and f"{binding.module}:{binding.alias}" not in replaced:
            advisory.append(
                f"bound by value at {binding.place} as {binding.module}.{binding.alias}, never called there"
            )
    for keyword, passing in dropped_keywords(replacement, calls).items():
        places = ", ".join(c.place for c in passing)
        advisory.append(f"{keyword!r}, passed at {places}, is taken in **kwargs and never read")
    if red:
        return "red", red
    if advisory:
        return "advisory", advisory
    if not calls:
        where = "reached through nn.Module.__call__ or an object only known at run time" if method else "not called"
        return "undecided", [f"no call of it found in Megatron's source ({where})"]
    return "fits", []


CALLER_DEPTH = 3
"""How many callers up a patching function's runs are followed (the patch's own function, its callers, theirs)."""


def call_skipped(framework: FrameworkSource, versions: Versions, path: Path, line: int) -> str | None:
    """The framework file and line of its own check that keeps the statement at ``path:line`` (a call of Megatron)
    from running on this target, read as a patch's are; ``None`` where it runs or is none of the framework's."""
    try:
        module, chain, names = statement_at(framework, path, line)
    except (KeyError, StopIteration):
        return None
    if not chain:
        return None
    found = _skip(framework, module, chain, names, versions, 0)
    return found[0] if found is not None else None


def _skip(
    framework: FrameworkSource,
    module: str,
    chain: tuple[ast.AST, ...],
    names: dict[str, str],
    versions: Versions,
    depth: int,
    objects: dict[str, str] | None = None,
) -> tuple[str, bool] | None:
    """The check that keeps ``chain[-1]`` from running on this target, and whether it is the callers' (every call of
    the enclosing function is skipped so) rather than one around it in its own function. A function nobody in the
    framework calls is an entry point: it runs."""
    _, tree = framework.trees[module]
    guard = guard_of(chain, tree.body, lambda node: framework.place(module, node.lineno), names, versions, objects)
    if not guard.applied:
        return guard.place, False
    functions = [n for n in chain[:-1] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not functions or depth >= CALLER_DEPTH:
        return None
    inner = functions[-1]
    classes = [n.name for n in chain[: chain.index(inner)] if isinstance(n, ast.ClassDef)]
    qualname = (*classes[-1:], inner.name)
    callers = framework.callers(module, qualname)
    if not callers:
        return None
    reasons = [_skip(framework, c.module, c.chain, c.names, versions, depth + 1) for c in callers]
    return (reasons[0][0], True) if all(reasons) else None


def _constructions(source: MegatronSource, key: str, replaced: set[str]) -> list[MegatronCall]:
    """``Cls(...)`` wherever Megatron constructs the class, or a subclass that keeps its ``__init__``: calls of a
    replaced ``__init__`` (the instance passed implicitly, as to a method)."""
    module, _, qualname = key.partition(":")
    owner = source.class_named(module, qualname.rpartition(".")[0])
    if owner is None:
        return []
    classes = [info for info in source.descendants(owner) if source.reaches(owner, "__init__", source.mro(info))]
    calls = [call for info in classes for call in source.calls_of(f"{info.module}:{info.name}", replaced)]
    return [dataclasses.replace(call, bound_at=None) for call in calls]


def _set(result: SymbolVerdict, verdict: str, *findings: str) -> SymbolVerdict:
    result.verdict = verdict
    result.findings = list(findings)
    return result


def upstream_definition(
    source: MegatronSource, module: str, qualname: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """Megatron's definition of the replaced symbol on this target (an inherited method: the base's)."""
    if "." in qualname:
        owner_name, _, method = qualname.rpartition(".")
        owner = source.class_named(module, owner_name)
        definer = source.definer(owner, method) if owner is not None else None
        return source.methods(definer).get(method) if definer is not None else None
    tree = source.tree(module) if module in source.texts else None
    return next(
        (
            n
            for n in (tree.body if tree else [])
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == qualname
        ),
        None,
    )


def _decorated_kind(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        name = getattr(decorator, "id", None)
        if name in ("staticmethod", "classmethod", "property"):
            return name
    return None


def _original_calls(patch: SourcePatch, key: str, source: MegatronSource) -> list[str]:
    """The replacement's calls of the original it captured (``origin = Cls.method`` before the patch), checked
    against the target's original: a keyword it no longer takes is red."""
    if patch.definition is None:
        return []
    names = {name for name, path in patch.originals.items() if megatron_key(path, source) == key}
    if not names:
        return []
    module, _, qualname = key.partition(":")
    upstream = upstream_definition(source, module, qualname)
    if upstream is None:
        return []
    original = ReadFunction(upstream)
    kind = _decorated_kind(upstream)
    found = calls_in(
        patch.definition.node,
        patch.definition.place.rpartition(":")[0],
        f"{patch.definition.module}:{patch.definition.node.name}",
        lambda func: isinstance(func, ast.Name) and func.id in names,
    )
    problems = []
    for call in found:
        # Called through the captured name: nothing is passed implicitly, but a class method's class.
        problem = binding_problem(original, call, "classmethod" if kind == "classmethod" else "staticmethod")
        if problem is not None:
            problems.append(
                f"{patch.definition.module.replace('.', '/')}.py:{call.line} calls the original {key} with what "
                f"megatron-core's own at {source.file_of(module)}:{upstream.lineno} does not take: {problem}"
            )
    return problems
