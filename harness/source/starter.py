"""``megatron-conformance scan [PATH | NAME==VERSION | NAME]``: a starter declaration for a framework, written from its
source: a folder, a release on the package index, or a distribution installed here (:mod:`.scan_subject`).

The output is a declaration that reads as it is: ``[subject]`` and every Megatron symbol the framework touches
(:mod:`~harness.source.framework_scan`), the replaced ones first, each with its usage word and
where it is used, a replaced one with the framework's replacement (:mod:`.scan_patches`). What the source alone cannot
settle is marked ``# guess``. For a framework that replaces the chunked all-reduce, ``[patch]`` and ``[budget]`` are
commented out: how the patch is applied and undone (from the function that makes the assignment), where the budget
lives and in what unit (from the apply function's parameters, the module's globals and the environment variables it
reads). Any other framework gets ``[symbols_patch]``, written out because its bare ``replaces`` lines need it: the
function that makes its patch assignments (or calls every one making them). Last, the provider wrapper and its
``args`` names, commented out. Checking the guesses (uncommenting what is right) is the work left.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.source.framework_scan import (
    FrameworkScan,
    Patch,
    Symbol,
    callers_of,
    defined,
    inherits_from_outside,
    module_file,
    scan_framework,
)
from harness.source.megatron_namespace import imports_megatron
from harness.source.object_classes import UNPLACED
from harness.source.package_layout import unreadable_files
from harness.source.parsing import walked
from harness.source.reader_error import ReaderError
from harness.source.scan_patches import (
    FrameworkPatches,
    Replaced,
    defined_everywhere,
    read_patches,
    short_place,
)
from harness.source.scan_subject import ScanSubjectError, matrix_release_sources, scan_subject
from harness.subjects.declaration import ROLE_ATTRIBUTES
from harness.targets.megatron_names import ALIAS_NAME, FINALIZE_MODULE, UPSTREAM_NAME

ROLE_REPLACEMENT = ROLE_ATTRIBUTES["patch"][0]
_BUDGET_NAME = re.compile(r"byte|budget|bucket|chunk|_mb$|^mb$|mib", re.IGNORECASE)
_PROVIDER_NAME = re.compile(r"provider", re.IGNORECASE)
_RULE_NAME = re.compile(r"freeze|frozen|train", re.IGNORECASE)


_RELEASE_VENV = re.compile(r"megatron-(\d+)-(\d+)")
"""The venv folder of a release target (``megatron-0-19``); not a candidate's, a bisect step's or a framework's
requirements venv, whose Megatron is not a release of the matrix."""


def megatron_trees(envdir: Path) -> list[Path]:
    """Folders holding a ``megatron`` package to name symbols against: every built release target's venv under
    ``envdir`` (newest release first), else the running interpreter's."""
    releases = {}
    for core in envdir.glob("*/lib/python*/site-packages/megatron/core"):
        named = _RELEASE_VENV.fullmatch(core.parents[4].name)
        if named:
            releases[core.parents[1]] = tuple(int(part) for part in named.groups())
    trees = sorted(releases, key=releases.__getitem__, reverse=True)
    if trees:
        return trees
    return [Path(entry) for entry in sys.path if (Path(entry) / "megatron" / "core").is_dir()]


def starter_declaration(found: FrameworkScan, written_for: Path, distribution: str | None = None) -> str:
    """The declaration text for ``found``, with paths relative to ``written_for`` (where the file will live); a
    framework read from a published or installed release is named by ``distribution`` (``name==version``)."""
    patches = read_patches(found.root, found.megatron[0], found.packages, found.patches) if found.megatron else None
    allreduce = _replaces_allreduce(found, patches)
    guess = patches.guess if patches is not None and not allreduce else None
    source_root = os.path.relpath(found.root, written_for)
    adapter, why = (
        (guess.adapter, "the package whose import applies the patches")
        if guess is not None and guess.adapter
        else (_adapter_package(found), "the package whose files reach Megatron")
    )
    lines = [
        f"# Starter declaration, written by `megatron-conformance scan {distribution or source_root}` from the "
        "framework's source.",
        "# Lines marked '# guess' are what the source alone cannot settle: check them, uncomment what is right.",
        "[subject]",
        f'distribution = "{distribution}"' if distribution else f'source_root = "{source_root}"',
        f'adapter_package = "{adapter}"  # guess: {why}',
        "",
        *_patches_found(found, patches),
        *(_patch_guess(found) if allreduce else [_NO_ALLREDUCE]),
        *_symbols_patch_guess(patches, commented=allreduce),
        "",
        *_provider_guess(found),
        "",
        "[megatron_symbols]",
        *_symbol_lines(found, patches, active=guess is not None),
    ]
    return "\n".join(lines) + "\n"


_NO_ALLREDUCE = (
    f"# [patch]: {FINALIZE_MODULE}:{UPSTREAM_NAME} is not replaced: no chunked all-reduce for the equivalence, "
    "import and chunk-splitting families to check"
)
_ALLREDUCE_KEYS = (f"{FINALIZE_MODULE}:{UPSTREAM_NAME}", f"{FINALIZE_MODULE}:{ALIAS_NAME}")


def _replaces_allreduce(found: FrameworkScan, patches: FrameworkPatches | None) -> bool:
    """Whether the framework re-binds Megatron's all-reduce of the non-tensor-parallel grads (or its older name)."""
    keys = {p.key for p in found.patches} | set(patches.replaced if patches is not None else ())
    return any(key in keys for key in _ALLREDUCE_KEYS)


def _patches_found(found: FrameworkScan, patches: FrameworkPatches | None) -> list[str]:
    """One comment line per patch assignment: the symbol, what is bound there, and the function making it."""
    lines = []
    if patches is not None:
        for key, entry in patches.replaced.items():
            for place, maker in entry.makers.items():
                bound = entry.replacements[place] or f"{entry.values[place]} (no function a module exports)"
                how = "on built objects, " if entry.on_instances else ""
                lines.append(f"#   {key} <- {bound}  {how}by {maker} ({place})")
    read = patches.patch_places if patches is not None else set()
    lines += [
        f"#   {p.key} <- {p.value}  in {p.module}:{p.scope or '<module body>'} ({p.place})"
        for p in found.patches
        if p.place not in read
    ]
    found_lines = ["# Patch assignments found (symbol <- value, by what):", *lines] if lines else []
    return found_lines + _unplaced_lines(patches)


def _unplaced_lines(patches: FrameworkPatches | None) -> list[str]:
    """One comment row per method bound on built objects whose class the source does not name: for the user to
    declare under the right class (``replaces with`` the function), never a class guessed here."""
    if patches is None or not patches.unplaced:
        return []
    lines = [
        "# Methods bound on built Megatron objects whose class the source does not say: declare each under its class"
        " in [megatron_symbols] as 'replaces with <the function>'"
    ]
    for unplaced in patches.unplaced:
        shown = ", ".join(unplaced.classes[:4]) + (", ..." if len(unplaced.classes) > 4 else "")
        lines.append(
            f"#   could not place {unplaced.bound} <- {unplaced.replacement} ({unplaced.place}): "
            f"{len(unplaced.classes)} classes define `{unplaced.bound.rpartition('.')[2]}` ({shown})"
        )
    return lines


def _symbols_patch_guess(patches: FrameworkPatches | None, commented: bool) -> list[str]:
    """``[symbols_patch]``: the module and the functions whose call makes the patches (commented out beside a
    guessed all-reduce patch, whose table applies that one)."""
    guess = patches.guess if patches is not None else None
    if guess is None:
        return []
    mark = "# " if commented else ""
    lines = ["", f"{mark}[symbols_patch]  # guess: the functions that make the patch assignments"]
    lines.append(f'{mark}module = "{guess.module}"')
    if guess.applied == "import":
        lines.append(f'{mark}applied = "import"')
    elif len(guess.apply) == 1:
        lines.append(f'{mark}apply = "{guess.apply[0]}"')
    else:
        lines.append(f"{mark}apply = {json.dumps(list(guess.apply))}")
    return lines


def _symbol_lines(found: FrameworkScan, patches: FrameworkPatches | None, active: bool) -> list[str]:
    """``[megatron_symbols]``: the replaced symbols first (the ones to read), then every other, each with its usage
    and where. ``active``: a ``[symbols_patch]`` is declared, so a replacement made inside a function is a bare
    ``replaces``, what its apply binds; one made elsewhere too, read from source."""
    replaced = patches.replaced if patches is not None else {}
    named_there = {short_place(place) for entry in replaced.values() for place in entry.makers}
    read = patches.patch_places if patches is not None else set()
    first: list[tuple[str, str]] = []
    rest: list[str] = []
    known = {symbol.key for symbol in found.symbols}
    for symbol in found.symbols:
        if symbol.key in replaced and symbol.key not in _ALLREDUCE_KEYS:
            continue
        usage, comment = symbol.usage, ", ".join(symbol.places[:3])
        if usage == "replaces" and symbol.key not in _ALLREDUCE_KEYS and set(symbol.places) <= read:
            if set(symbol.places) & named_there:
                continue  # the same assignment, named where Megatron defines it
            if not _state_set(symbol, patches, found.megatron):
                usage = "reads"  # an undo or a marker the framework leaves: nothing of its own bound there
        if usage == "replaces" and not _megatron_defines(symbol.key, found.megatron):
            usage = "reads"  # a marker of the framework's own: no release of Megatron defines the name
        if usage == "replaces":
            usage, comment = _guessed_replacement(symbol, comment)
        line = f'"{symbol.key}" = "{usage}{", optional" if symbol.optional else ""}"  # {comment}'
        if usage.startswith("replaces") or comment.startswith("guess: replaced"):
            first.append((symbol.key, line))
        else:
            rest.append(line)
    places_of = {symbol.key: symbol.places for symbol in found.symbols}
    for key, entry in replaced.items():
        if key in _ALLREDUCE_KEYS and key in known:
            continue
        if not replaceable(key, found.megatron):
            places = ", ".join(short_place(place) for place in list(entry.makers)[:3])
            rest.append(f'"{key}" = "reads, optional"  # set at {places}: a name no release of Megatron defines')
            continue
        usage, comment = _replaced_usage(patches, key, entry, active)
        states, elsewhere = _also_replaced(places_of.get(key, ()), patches)
        if states:
            comment += f"; also set to a literal at {', '.join(states[:3])}"
        if elsewhere:
            comment += f"; also replaced at {', '.join(elsewhere[:3])} (a registry's record, a loop, a sweep)"
        if entry.undone:
            comment += f"; put back at {', '.join(short_place(place) for place in entry.undone[:3])}"
        optional = ", optional" if not defined_everywhere(key, found.megatron) else ""
        first.append((key, f'"{key}" = "{usage}{optional}"  # {comment}'))
        for caller in callers_of(key, found.megatron[0]) if key not in known else ():
            if caller not in known and caller not in replaced:
                rest.append(f'"{caller}" = "relies"  # calls {key.partition(":")[2]}')
                known.add(caller)
    return [line for _, line in sorted(first)] + rest


def replaced_places(found: FrameworkScan, patches: FrameworkPatches | None) -> set[tuple[str, str]]:
    """``(file:line, key)`` of every patch the starter lists as a replaced symbol (:func:`_symbol_lines`' first
    rows): the patches read with their replacement, those the source scan alone found that are neither an undo
    nor a marker, the lines putting a replaced name's original back, and the literals and scan-only patches of a
    name some release defines, also where the patch reader reads it replaced elsewhere; ``(file:line, "?")`` for a
    method bound on objects whose class it could not place.
    What ``tests/first_contact.py`` and the generated forms compare with the sites."""
    replaced = patches.replaced if patches is not None else {}
    read = patches.patch_places if patches is not None else set()
    rows = {
        (short_place(place), key)
        for key, entry in replaced.items()
        if replaceable(key, found.megatron)
        for place in [*entry.makers, *entry.undone]
    }
    rows |= {(short_place(unplaced.place), UNPLACED) for unplaced in patches.unplaced} if patches is not None else set()
    for symbol in found.symbols:
        if symbol.usage != "replaces" or not _megatron_defines(symbol.key, found.megatron):
            continue  # a marker of the framework's own: no release of Megatron defines the name
        places = [place for place in symbol.places if place != "by name"]
        if symbol.key in replaced:
            rows |= {(place, symbol.key) for found_there in _also_replaced(places, patches) for place in found_there}
        elif not set(symbol.places) <= read or _state_set(symbol, patches, found.megatron):
            rows |= {(place, symbol.key) for place in places}
    return rows


def _also_replaced(places: Sequence[str], patches: FrameworkPatches) -> tuple[list[str], list[str]]:
    """Of the places the source scan found a name the patch reader reads replaced elsewhere: those setting it to a
    literal, and those the patch reader did not read at all (a registry's record, a loop, a sweep)."""
    states = [place for place in places if place in patches.literals]
    elsewhere = [p for p in places if p not in patches.patch_places and p not in states and p != "by name"]
    return states, elsewhere


def _state_set(symbol: Symbol, patches: FrameworkPatches | None, trees: Sequence[Path]) -> bool:
    """Whether the framework binds a literal on a name some Megatron release defines (``parallel_state._X_GROUP =
    None``): Megatron's state replaced, not a marker of the framework's own (a name no release defines)."""
    literal = patches is not None and bool(set(symbol.places) & patches.literals)
    return literal and _megatron_defines(symbol.key, trees)


def replaceable(key: str, trees: Sequence[Path]) -> bool:
    """Whether a function bound on ``key`` replaces something of Megatron's: some release defines it; its class
    derives from one outside Megatron's source that may, or gets it from Python (``__init__`` of a dataclass); or
    no release defines its owner at all (a module or class of a Megatron to come, judged per target). A name the
    framework adds to a module or class that releases define is its own."""
    module, _, qualname = key.partition(":")
    owner, _, name = qualname.rpartition(".")
    if _megatron_defines(key, trees) or (owner and name.startswith("__") and name.endswith("__")):
        return True
    owner_key = f"{module}:{owner}" if owner else None
    if owner_key is None:
        return not any(module_file(tree, module) for tree in trees)
    return not _megatron_defines(owner_key, trees) or any(inherits_from_outside(tree, key) for tree in trees)


def _megatron_defines(key: str, trees: Sequence[Path]) -> bool:
    """Whether some Megatron release read defines ``key``: a name none defines is the framework's own marker."""
    return any(defined(tree, key) for tree in trees)


def scanned_replacements(
    root: Path, trees: Sequence[Path], packages: Sequence[str] | None = None
) -> set[tuple[str, str]]:
    """:func:`replaced_places` of the framework under ``root``, read against ``trees`` as ``scan`` reads it."""
    found = scan_framework(root, trees, packages)
    return replaced_places(found, read_patches(root, found.megatron[0], packages, found.patches))


def _guessed_replacement(symbol: Symbol, places: str) -> tuple[str, str]:
    """A replacement the source scan alone found (a registry's record, a name set in a loop): named where it is a
    function of the framework, else left to the reader, the all-reduce's by its role."""
    if symbol.replacement:
        return f"replaces with {symbol.replacement}", places
    if symbol.key in _ALLREDUCE_KEYS:
        return "relies", (
            f"guess: replaced where {places}; with [patch] declared, 'replaces with {ROLE_REPLACEMENT}' for "
            f"{UPSTREAM_NAME}, else the replacement's module:qualname"
        )
    return "relies", (
        f"guess: replaced where {places}; 'replaces' where [symbols_patch]'s apply makes it, else 'replaces with' "
        "the replacement's module:qualname"
    )


def _replaced_usage(patches: FrameworkPatches, key: str, entry: Replaced, active: bool) -> tuple[str, str]:
    """The usage and comment of a symbol the framework patches: ``replaces with`` its replacement where the patch
    the declared apply makes names one function, a bare ``replaces`` for a closure; made elsewhere, read from
    source (the apply would not bind it)."""
    made = patches.made_by_guess(key) if active else list(entry.makers)
    names = {entry.replacements[place] for place in made}
    named = names.pop() if len(names) == 1 else None
    places = ", ".join(made[:3])
    if active and made:
        return (f"replaces with {named}" if named else "replaces"), places
    elsewhere = ", ".join(f"{entry.makers[place]} ({place})" for place in list(entry.makers)[:3])
    with_what = {name for name in entry.replacements.values() if name}
    replacement = f" with {', '.join(sorted(with_what))}" if with_what else ""
    if active:
        return "replaces", f"replaced{replacement} by {elsewhere}, not by [symbols_patch]'s apply: read from source"
    if named:
        return f"replaces with {named}", places
    return "relies", (
        f"guess: replaced by {elsewhere} with a closure; 'replaces' where [symbols_patch]'s apply makes it"
    )


def _adapter_package(found: FrameworkScan) -> str:
    """The deepest package holding every file that imports Megatron, examples and scripts left aside where the
    framework's own packages reach Megatron too."""
    reaching = [name for path, name in found.modules.items() if imports_megatron(found.trees[name], by_name=True)]
    runtime = [name for name in reaching if name.split(".")[0] not in NOT_ADAPTERS]
    reaching = runtime or reaching or list(found.modules.values())
    parts = [name.split(".") for name in reaching]
    common = []
    for group in zip(*parts, strict=False):
        if len(set(group)) != 1:
            break
        common.append(group[0])
    packages = {name for path, name in found.modules.items() if path.name == "__init__.py"}
    packages |= {name.rpartition(".")[0] for name in found.modules.values()}  # namespace packages too
    while common and ".".join(common) not in packages:
        common.pop()
    return ".".join(common) or reaching[0]


NOT_ADAPTERS = frozenset({"examples", "example", "scripts", "tools", "benchmarks", "benchmark", "docs", "setup"})
"""Top-level folders and modules of a repository that are run by hand, not imported by the framework's users."""


def _patch_guess(found: FrameworkScan) -> list[str]:
    """``[patch]`` for a framework replacing the all-reduce: how the assignment's function applies and undoes it."""
    patches = [p for p in found.patches if p.key == f"{FINALIZE_MODULE}:{UPSTREAM_NAME}"] or found.patches
    if not patches:
        return [_NO_ALLREDUCE]
    first = patches[0]
    tree = found.trees[first.module]
    registry = _registered_as(tree, first.scope)
    module, applied, apply, undo = first.module, *_how_applied(first, found)
    if registry:
        module, apply = _registry_apply(found, first.module)
        undo = "returned"
    lines = ["# [patch]  # guess", f'# module = "{module}"', f'# applied = "{applied}"']
    if apply:
        lines.append(f'# {"context" if applied == "context" else "apply"} = "{apply}"')
    if undo:
        lines.append(f'# undo = "{undo}"')
    if registry:
        lines.append(f'# arguments = {{ names = ["{registry}"] }}  # the registry\'s patch, by its name')
    lines += _budget_guess(tree, apply, registry)
    return lines


def _registered_as(tree: ast.Module, scope: str) -> str | None:
    """The name a decorator registers the patch's function under (``@register_patch("name")``), if any."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == scope.split(".")[0]), None)
    for decorator in function.decorator_list if function else []:
        if isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant):
            if isinstance(decorator.args[0].value, str):
                return decorator.args[0].value
    return None


def _registry_apply(found: FrameworkScan, near: str) -> tuple[str, str | None]:
    """The package module exporting a function ``apply*`` that takes ``args`` (the registry's one call), nearest to
    the patch's module; else the patch's module."""
    candidates = []
    for module, tree in found.trees.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("apply") and node.args.args:
                if node.args.args[0].arg == "args":
                    candidates.append((module, node.name))
    if not candidates:
        return near, None
    module, name = candidates[0]
    package = near.rpartition(".")[0]
    exported = package in found.trees and name in ast.unparse(found.trees[package])
    return (package if exported else module), name


def _how_applied(patch: Patch, found: FrameworkScan) -> tuple[str, str | None, str | None]:
    """``(applied, apply or context, undo)``: a module-level assignment applies at import; one inside ``__enter__``
    of a class is a context manager (named by the function that returns it, else the class); else the top function
    around it applies, and another function assigning the same symbol undoes."""
    if not patch.scope:
        return "import", None, None
    top = patch.scope.split(".")[0]
    tree = found.trees[patch.module]
    if patch.scope.endswith("__enter__"):
        maker = next(
            (
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef)
                and any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == top for c in ast.walk(node))
            ),
            top,
        )
        return "context", maker, None
    undo = next(
        (
            p.scope.split(".")[0]
            for p in found.patches
            if p.key == patch.key and p.module == patch.module and p.scope and p.scope.split(".")[0] != top
        ),
        None,
    )
    return "call", top, undo


def _budget_guess(tree: ast.Module, apply: str | None, registry: str | None) -> list[str]:
    """Where the budget lives: a budget-like parameter of apply (``MiB`` where its name says so), an attribute of
    ``args`` read in the module (for a registry applied from an args namespace), a numeric module global, and the
    environment variable the module reads."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == apply), None)
    arguments = [a.arg for a in (function.args.args + function.args.kwonlyargs if function else [])]
    budget_argument = next((a for a in arguments if _BUDGET_NAME.search(a)), None)
    if registry and budget_argument is None:
        read = sorted(name for name in _args_attributes(tree) if _BUDGET_NAME.search(name))
        budget_argument = f"args.{read[0]}" if read else None
    constants = {
        t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    globals_ = [
        name
        for name, value in constants.items()
        if name.isupper()
        and _BUDGET_NAME.search(name)
        and isinstance(value, ast.Constant | ast.BinOp | ast.Call)
        and not (isinstance(value, ast.Constant) and isinstance(value.value, str))
    ]
    environment = sorted(_environment_reads(tree, constants))
    lines = ["# [budget]  # guess"]
    if budget_argument:
        lines.append(f'# argument = "{budget_argument}"')
        if re.search(r"mb|mib", budget_argument, re.IGNORECASE):
            lines.append('# unit = "MiB"')
    elif globals_:
        lines.append(f'# global = "{globals_[0]}"')
    for name in environment[:1]:
        lines.append(f'# env = "{name}"')
    if len(lines) == 1:
        lines.append("# nothing found: name the apply argument (budget.argument) or the module global (budget.global)")
    return lines


def _args_attributes(tree: ast.AST) -> set[str]:
    """Attributes read from a name ``args``: ``args.x`` and ``getattr(args, "x", ...)``."""
    read = {a.attr for a in walked(tree) if isinstance(a, ast.Attribute) and getattr(a.value, "id", None) == "args"}
    for call in walked(tree):
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", None) in ("getattr", "hasattr")
            and len(call.args) >= 2
            and getattr(call.args[0], "id", None) == "args"
            and isinstance(call.args[1], ast.Constant)
            and isinstance(call.args[1].value, str)
        ):
            read.add(call.args[1].value)
    return read


def _environment_reads(tree: ast.Module, constants: dict[str, ast.expr]) -> set[str]:
    """The environment variables the module reads by a literal or constant name (``os.environ.get``, ``os.getenv``,
    ``os.environ[...]``)."""
    names = set()
    for node in walked(tree):
        argument = None
        if isinstance(node, ast.Call) and node.args:
            callee = ast.unparse(node.func)
            if callee in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                argument = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            argument = node.slice
        if isinstance(argument, ast.Name):
            argument = constants.get(argument.id)
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            names.add(argument.value)
    return names


def _provider_guess(found: FrameworkScan) -> list[str]:
    for module, tree in found.trees.items():
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or len(node.args.args) < 2:
                continue
            first, second = node.args.args[0].arg, node.args.args[1].arg
            if not (_PROVIDER_NAME.search(first) or _PROVIDER_NAME.search(node.name)) or second != "args":
                continue
            read = sorted(
                {
                    a.attr
                    for a in ast.walk(node)
                    if isinstance(a, ast.Attribute)
                    and getattr(a.value, "id", None) == "args"
                    and _RULE_NAME.search(a.attr)
                }
                | {
                    c.args[1].value
                    for c in ast.walk(node)
                    if isinstance(c, ast.Call)
                    and getattr(c.func, "id", None) == "getattr"
                    and len(c.args) >= 2
                    and isinstance(c.args[1], ast.Constant)
                    and isinstance(c.args[1].value, str)
                    and _RULE_NAME.search(c.args[1].value)
                }
            )
            freeze = next((r for r in read if re.search("freeze|frozen", r, re.IGNORECASE)), None)
            train = next((r for r in read if "train" in r.lower()), None)
            lines = ["# [provider]  # guess", f'# factory = "{module}:{node.name}"']
            lines += [f'# freeze = "{freeze}"'] if freeze else []
            lines += [f'# train_only = "{train}"'] if train else []
            return lines
    return ["# [provider]: no function taking (provider, args) was found"]


def main(argv: Sequence[str] | None = None, envdir: Path | None = None) -> int:
    """``scan [PATH | NAME==VERSION | NAME] [--output FILE] [--envdir DIR]``: print (or write) the starter
    declaration of the framework under PATH, of a release on the package index, or of a distribution installed
    here, naming symbols against the target venvs under DIR (default ``.nox``), else the installed megatron-core,
    else every release of the matrix."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--envdir" in arguments:
        index = arguments.index("--envdir")
        envdir = Path(arguments[index + 1]) if index + 1 < len(arguments) else envdir
        del arguments[index : index + 2]
    output = None
    if "--output" in arguments:
        index = arguments.index("--output")
        output = Path(arguments[index + 1]) if index + 1 < len(arguments) else None
        del arguments[index : index + 2]
        if output is None:
            print("megatron-conformance scan: --output needs a file", file=sys.stderr)
            return 2
    envdir = envdir or Path(".nox")
    try:
        subject = scan_subject(arguments[0] if arguments else ".")
        trees = megatron_trees(envdir)
        if not trees:
            releases = matrix_release_sources(envdir)
            print(
                "megatron-conformance scan: no target venv and no installed megatron-core: naming symbols against "
                f"the matrix's releases, megatron-core {', '.join(r.version for r in releases)} (their wheels, "
                "unpacked into the cache)",
                file=sys.stderr,
            )
            trees = [release.root for release in releases]
    except ScanSubjectError as err:
        print(f"megatron-conformance scan: {err}", file=sys.stderr)
        return 2
    for why in unreadable_files(subject.root, subject.packages):
        print(f"megatron-conformance scan: could not read {why}: the file is left out", file=sys.stderr)
    try:
        found = scan_framework(subject.root, trees, subject.packages)
        if not found.modules:
            print(f"megatron-conformance scan: no Python module to read under {subject.root}", file=sys.stderr)
            return 2
        text = starter_declaration(found, (output.resolve().parent if output else Path.cwd()), subject.distribution)
    except Exception as err:
        line = str(err) if isinstance(err, ReaderError) else str(ReaderError(subject.root, err))
        print(f"megatron-conformance scan: {line}", file=sys.stderr)
        return GATE_ERROR_STATUS
    if output:
        output.write_text(text)
        print(f"{output}: {len(found.symbols)} Megatron symbols, {len(found.patches)} patch assignments")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
